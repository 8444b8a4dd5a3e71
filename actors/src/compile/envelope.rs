//! The envelope around serialized executables: who made them, with which options, and a
//! SHA-256 over it all. Bytes that are not ours, are damaged or cut short, or come from another
//! plugin are refused here, so they never reach the plugin (which trusts what it loads).

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

pub const MAGIC: &[u8; 8] = b"PJRTACTX";
/// 2: the compile-cache key travels inside the checksummed body.
/// 3: the payload is always the compiler's own serialization. Builds before it stored a
/// re-serialization of a worker-compiled executable, which the CPU plugin writes without its
/// kernels: such an entry loads and then fails at execute, so every format-2 entry is refused
/// (and recompiled) rather than trusted.
const FORMAT: u32 = 3;
const DIGEST: usize = 32;

/// What a serialized executable carries besides the plugin's own bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The plugin and platform that serialized it (see `identity`).
    pub identity: String,
    pub portable: bool,
    /// The serialized `CompileOptionsProto` it was compiled with.
    pub options: Vec<u8>,
    /// The serialized topology it was compiled for.
    pub topology: Vec<u8>,
    /// `PJRT_Executable_Serialize`'s bytes.
    pub payload: Vec<u8>,
    /// The compile-cache key it was stored under (empty outside the cache), so an entry that
    /// holds another key's executable is caught on load, whatever tier it came from.
    pub cache_key: Vec<u8>,
}

/// A plugin's identity for serialized executables: platform, platform version, XLA version and
/// PJRT C API version. Executables only load where all four match.
pub fn identity(
    platform: &str,
    platform_version: &str,
    xla_version: &str,
    api: (i32, i32),
) -> String {
    format!(
        "platform {platform} {platform_version}, xla {xla_version}, PJRT C API {}.{}",
        api.0, api.1
    )
}

/// Whether `head` starts like one of our envelopes (a cache entry, a serialized executable).
pub fn is_envelope(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

pub fn encode(e: &Envelope) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        72 + e.identity.len()
            + e.options.len()
            + e.topology.len()
            + e.payload.len()
            + e.cache_key.len(),
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.push(e.portable as u8);
    put(&mut out, e.identity.as_bytes());
    put(&mut out, &e.options);
    put(&mut out, &e.topology);
    put(&mut out, &e.payload);
    put(&mut out, &e.cache_key);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(bad("it is cut short"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn field(&mut self) -> Result<&'a [u8]> {
        let len = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        let len = usize::try_from(len).map_err(|_| bad("a length field is out of range"))?;
        self.take(len)
    }
}

fn bad(reason: &str) -> Error {
    Error::Deserialize {
        reason: reason.to_string(),
    }
}

/// Checks and opens an envelope. `expected_identity` is this client's; a mismatch is
/// `Error::ForeignExecutable`.
pub fn decode(bytes: &[u8], expected_identity: &str) -> Result<Envelope> {
    if bytes.is_empty() {
        return Err(bad("the bytes are empty"));
    }
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad(
            "these bytes are not a pjrt-actors serialized executable",
        ));
    }
    if bytes.len() < MAGIC.len() + 4 + DIGEST {
        return Err(bad("it is cut short"));
    }
    let (body, digest) = bytes.split_at(bytes.len() - DIGEST);
    if Sha256::digest(body).as_slice() != digest {
        return Err(bad(
            "its checksum does not match: the bytes are damaged or cut short",
        ));
    }
    let mut r = Reader {
        bytes: &body[MAGIC.len()..],
    };
    let format = u32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(bad(&format!(
            "it has envelope format {format}; this build reads {FORMAT}"
        )));
    }
    let portable = r.take(1)?[0] != 0;
    let identity =
        String::from_utf8(r.field()?.to_vec()).map_err(|_| bad("its identity is not UTF-8"))?;
    let options = r.field()?.to_vec();
    let topology = r.field()?.to_vec();
    let payload = r.field()?.to_vec();
    let cache_key = r.field()?.to_vec();
    if !r.bytes.is_empty() {
        return Err(bad("it has trailing bytes"));
    }
    if identity != expected_identity {
        return Err(Error::ForeignExecutable {
            serialized_by: identity,
            this_client: expected_identity.to_string(),
        });
    }
    if payload.is_empty() {
        return Err(bad("it holds no executable"));
    }
    Ok(Envelope {
        identity,
        portable,
        options,
        topology,
        payload,
        cache_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            identity: "platform cpu cpu, xla 1, PJRT C API 0.81".into(),
            portable: true,
            options: vec![1, 2, 3],
            topology: vec![9; 40],
            payload: vec![7; 100],
            cache_key: vec![5; 32],
        }
    }

    #[test]
    fn round_trip() {
        let e = sample();
        assert_eq!(decode(&encode(&e), &e.identity).unwrap(), e);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let e = sample();
        let bytes = encode(&e);
        for n in 0..bytes.len() {
            assert!(
                matches!(
                    decode(&bytes[..n], &e.identity),
                    Err(Error::Deserialize { .. })
                ),
                "prefix {n}"
            );
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(
                matches!(decode(&b, &e.identity), Err(Error::Deserialize { .. })),
                "byte {i}"
            );
        }
    }

    #[test]
    fn an_entry_of_an_older_format_is_refused() {
        // Format 2 entries may hold a worker's executable without its kernels: never trusted.
        let e = sample();
        let mut bytes = encode(&e);
        bytes[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&2u32.to_le_bytes());
        let body = bytes.len() - DIGEST;
        let digest = Sha256::digest(&bytes[..body]);
        bytes[body..].copy_from_slice(&digest);
        let err = decode(&bytes, &e.identity).unwrap_err();
        assert!(err.to_string().contains("envelope format 2"), "{err}");
    }

    #[test]
    fn another_identity_is_foreign() {
        let e = sample();
        let err = decode(&encode(&e), "platform cuda 12, xla 2, PJRT C API 0.81").unwrap_err();
        assert!(matches!(err, Error::ForeignExecutable { .. }), "{err}");
    }
}
