//! NumPy's `.npz` files (`np.savez`): a ZIP archive of `.npy` files, read through its central
//! directory. Stored members only: `np.savez_compressed`'s deflated ones are a typed error
//! saying to use `np.savez`. Every offset is checked, so a cut or garbled file is an error.

use pjrt_actors_core::{Error, Result};

use super::{HostArray, read_npy};

fn bad(what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!(".npz file: {what}"))
}

fn u16_at(b: &[u8], at: usize) -> Result<usize> {
    let s = b.get(at..at + 2).ok_or_else(|| bad("cut short"))?;
    Ok(u16::from_le_bytes([s[0], s[1]]) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Result<usize> {
    let s = b.get(at..at + 4).ok_or_else(|| bad("cut short"))?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// The arrays of an `.npz` file, by their names (the member names without `.npy`).
pub fn read_npz(bytes: &[u8]) -> Result<Vec<(String, HostArray)>> {
    // The end-of-central-directory record: the last of its signature within the final 64 KiB.
    let from = bytes.len().saturating_sub(22 + 65_535);
    let end = (from..bytes.len().saturating_sub(21))
        .rev()
        .find(|&i| bytes[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
        .ok_or_else(|| bad("not a ZIP archive (no end of central directory)"))?;
    let count = u16_at(bytes, end + 10)?;
    let mut at = u32_at(bytes, end + 16)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        if bytes.get(at..at + 4) != Some(&[0x50, 0x4b, 0x01, 0x02][..]) {
            return Err(bad("a damaged central directory"));
        }
        let method = u16_at(bytes, at + 10)?;
        let size = u32_at(bytes, at + 20)?;
        let (name_len, extra_len, comment_len) = (
            u16_at(bytes, at + 28)?,
            u16_at(bytes, at + 30)?,
            u16_at(bytes, at + 32)?,
        );
        let local = u32_at(bytes, at + 42)?;
        let name = bytes
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| bad("cut short"))?;
        let name = String::from_utf8_lossy(name).to_string();
        at += 46 + name_len + extra_len + comment_len;
        if method != 0 {
            return Err(bad(format!(
                "member `{name}` is compressed (method {method}); write it with np.savez, not np.savez_compressed"
            )));
        }
        if bytes.get(local..local + 4) != Some(&[0x50, 0x4b, 0x03, 0x04][..]) {
            return Err(bad(format!("member `{name}` has no local header")));
        }
        let data = local + 30 + u16_at(bytes, local + 26)? + u16_at(bytes, local + 28)?;
        let npy = bytes
            .get(data..data + size)
            .ok_or_else(|| bad(format!("member `{name}` is cut short")))?;
        let array = read_npy(npy).map_err(|e| bad(format!("member `{name}`: {}", e.detail())))?;
        out.push((
            name.strip_suffix(".npy").unwrap_or(&name).to_string(),
            array,
        ));
    }
    Ok(out)
}
