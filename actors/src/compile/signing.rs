//! Fleet keys for the compile cache: with keys configured, every entry the tiers write carries
//! an HMAC-SHA256 over its whole envelope, and an entry without a valid one is never handed to
//! the plugin. Any configured key verifies and the first signs, so keys rotate.

use std::path::Path;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

/// The environment variable naming the key file (one key a line, hex or base64).
pub const CACHE_KEY_FILE_ENV: &str = "PJRT_ACTORS_CACHE_KEY_FILE";
/// A signed entry starts with this, then the tag, then the envelope.
pub const SIGNED_MAGIC: &[u8; 8] = b"PJRTSIGN";
/// Keys shorter than SHA-256's block of security are refused.
pub const MIN_KEY_BYTES: usize = 32;
const TAG: usize = 32;
/// Binds a tag to this use, so a key shared with another system signs nothing of ours.
const DOMAIN: &[u8] = b"pjrt-actors compile-cache entry v1\0";

/// Why an entry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It carries no signature.
    Unsigned,
    /// Its signature verifies under none of the configured keys.
    WrongSignature,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Unsigned => "it carries no signature",
            Refused::WrongSignature => "its signature verifies under no configured fleet key",
        })
    }
}

/// The fleet's keys: the first signs, any verifies. Their bytes never reach `Debug` or a log.
#[derive(Clone)]
pub struct CacheKeys {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for CacheKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheKeys({} keys)", self.keys.len())
    }
}

fn bad_keys(reason: String) -> Error {
    Error::InvalidOption {
        name: "compile-cache keys".into(),
        reason,
    }
}

impl CacheKeys {
    /// The keys in order (the first signs); each at least [`MIN_KEY_BYTES`].
    pub fn new(keys: Vec<Vec<u8>>) -> Result<Self> {
        if keys.is_empty() {
            return Err(bad_keys("no key given".into()));
        }
        if let Some((i, k)) = keys
            .iter()
            .enumerate()
            .find(|(_, k)| k.len() < MIN_KEY_BYTES)
        {
            return Err(bad_keys(format!(
                "key {} has {} bytes; at least {MIN_KEY_BYTES} are needed",
                i + 1,
                k.len()
            )));
        }
        Ok(CacheKeys { keys })
    }

    /// Keys from text: one a line, hex or standard base64 ([`key_lines`]).
    pub fn parse(text: &str) -> Result<Self> {
        let keys = key_lines(text)
            .map(|(line, l)| {
                decode_key(l)
                    .ok_or_else(|| bad_keys(format!("line {line} is neither hex nor base64")))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(keys)
    }

    /// Keys from a file ([`read_key_file`]).
    pub fn from_file(path: &Path) -> Result<Self> {
        let at = |reason: String| bad_keys(format!("{}: {reason}", path.display()));
        let text = read_key_file(path).map_err(at)?;
        Self::parse(&text).map_err(|e| at(e.to_string()))
    }

    /// The keys `PJRT_ACTORS_CACHE_KEY_FILE` names; `None` when it is unset or empty.
    pub fn from_env() -> Result<Option<Self>> {
        match std::env::var_os(CACHE_KEY_FILE_ENV).filter(|v| !v.is_empty()) {
            Some(path) => Self::from_file(Path::new(&path)).map(Some),
            None => Ok(None),
        }
    }

    /// `envelope` signed with the first key: magic, tag, envelope.
    pub fn sign(&self, envelope: &[u8]) -> Vec<u8> {
        let tag = mac(&self.keys[0], envelope).finalize().into_bytes();
        let mut out = Vec::with_capacity(SIGNED_MAGIC.len() + TAG + envelope.len());
        out.extend_from_slice(SIGNED_MAGIC);
        out.extend_from_slice(&tag);
        out.extend_from_slice(envelope);
        out
    }

    /// The envelope inside `entry` when one of the keys signed it (compared in constant time).
    pub fn open<'a>(&self, entry: &'a [u8]) -> std::result::Result<&'a [u8], Refused> {
        let (tag, envelope) = split(entry).ok_or(Refused::Unsigned)?;
        (self.keys.iter())
            .any(|k| mac(k, envelope).verify_slice(tag).is_ok())
            .then_some(envelope)
            .ok_or(Refused::WrongSignature)
    }
}

/// A key file's text, refused when others may read it: a key anyone on the machine can read
/// signs (or authenticates) for anyone. The fleet's keys and `serve --api-key-file` both read
/// theirs here.
pub fn read_key_file(path: &Path) -> std::result::Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        return Err(format!(
            "the file is world-readable (mode {:o}); chmod o-r it",
            mode & 0o777
        ));
    }
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

/// A key file's keys, one a line, each trimmed and numbered from 1; blank lines and `#`
/// comments skipped.
pub fn key_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    (text.lines().enumerate())
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// A tier's entries by signature, for `cache stats`: how many carry one, and how many of those
/// the given keys verify.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SignatureCount {
    pub signed: u64,
    pub verified: u64,
}

impl SignatureCount {
    pub fn tally(&mut self, entry: &[u8], keys: Option<&CacheKeys>) {
        if is_signed(entry) {
            self.signed += 1;
            self.verified += keys.is_some_and(|k| k.open(entry).is_ok()) as u64;
        }
    }
}

/// The envelope inside an entry without checking its signature: for a client with no keys,
/// which trusts its tiers as before keys existed.
pub fn unverified(entry: &[u8]) -> &[u8] {
    split(entry).map_or(entry, |(_, envelope)| envelope)
}

/// Whether `head` starts like a signed entry.
pub fn is_signed(head: &[u8]) -> bool {
    head.starts_with(SIGNED_MAGIC)
}

fn split(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = entry.strip_prefix(SIGNED_MAGIC.as_slice())?;
    (rest.len() >= TAG).then(|| rest.split_at(TAG))
}

fn mac(key: &[u8], envelope: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(DOMAIN);
    mac.update(envelope);
    mac
}

fn decode_key(text: &str) -> Option<Vec<u8>> {
    let hex = text.len().is_multiple_of(2) && text.bytes().all(|b| b.is_ascii_hexdigit());
    if hex {
        return (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
            .collect();
    }
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(seeds: &[u8]) -> CacheKeys {
        CacheKeys::new(seeds.iter().map(|&s| vec![s; 32]).collect()).unwrap()
    }

    #[test]
    fn what_the_first_key_signs_any_key_opens_and_nothing_else_does() {
        let envelope = b"PJRTACTX an envelope".to_vec();
        let signed = keys(&[1, 2]).sign(&envelope);
        assert_eq!(keys(&[1]).open(&signed), Ok(&envelope[..]));
        assert_eq!(keys(&[3, 1]).open(&signed), Ok(&envelope[..]), "rotation");
        assert_eq!(keys(&[2]).open(&signed), Err(Refused::WrongSignature));
        assert_eq!(keys(&[1]).open(&envelope), Err(Refused::Unsigned));
        assert_eq!(keys(&[1]).open(&signed[..20]), Err(Refused::Unsigned));
        for i in 0..signed.len() {
            let mut flipped = signed.clone();
            flipped[i] ^= 1;
            assert!(keys(&[1]).open(&flipped).is_err(), "byte {i}");
        }
        assert_eq!(unverified(&signed), &envelope[..]);
        assert_eq!(unverified(&envelope), &envelope[..]);
    }

    #[test]
    fn key_text_is_hex_or_base64_and_short_keys_are_refused() {
        let hex = "ab".repeat(32);
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 40]);
        let parsed = CacheKeys::parse(&format!("# fleet keys\n{hex}\n\n{b64}\n")).unwrap();
        assert_eq!(parsed.keys, [vec![0xab; 32], vec![7; 40]]);
        let short = CacheKeys::parse(&"ab".repeat(31)).unwrap_err().to_string();
        assert!(
            short.contains("31 bytes") && short.contains("at least 32"),
            "{short}"
        );
        assert!(CacheKeys::parse("# nothing\n").is_err());
        assert!(
            CacheKeys::parse("not a key!")
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
        assert!(
            !format!("{parsed:?}").contains("ab"),
            "no key bytes in Debug"
        );
    }

    #[test]
    fn a_world_readable_key_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("pjrt-actors-keys-{}", std::process::id()));
        std::fs::write(&path, "cd".repeat(32)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = CacheKeys::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("world-readable"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(CacheKeys::from_file(&path).is_ok());
        std::fs::remove_file(&path).unwrap();
    }
}
