//! NumPy `.npy` files to and from `HostArray`: format 1.0 to 3.0, little-endian, C order; bf16
//! and the 8-bit floats in ml_dtypes' form (a 2-byte and a 1-byte void).

use pjrt_actors_core::dtype::{ElementType, byte_size};

use super::{HostArray, bad};
use crate::Result;

/// Whether a `.npy` file can hold `dtype` (bf16 as ml_dtypes writes it: a 2-byte void).
pub fn npy_supports(dtype: ElementType) -> bool {
    npy_descr(dtype).is_some()
}

fn npy_descr(dtype: ElementType) -> Option<&'static str> {
    use ElementType::*;
    Some(match dtype {
        Pred => "|b1",
        S8 => "|i1",
        S16 => "<i2",
        S32 => "<i4",
        S64 => "<i8",
        U8 => "|u1",
        U16 => "<u2",
        U32 => "<u4",
        U64 => "<u8",
        F16 => "<f2",
        F32 => "<f4",
        F64 => "<f8",
        C64 => "<c8",
        C128 => "<c16",
        // NumPy has no bfloat16; ml_dtypes saves it as a 2-byte void, and so do we. NumPy reads
        // it back as `|V2`: `np.load(f).view(ml_dtypes.bfloat16)`.
        BF16 => "<V2",
        // The same for the 8-bit floats: `|V1`, whichever of them it is (ml_dtypes saves e5m2
        // as `<f1`, which NumPy cannot load back; we read that but write the void).
        F8E5M2 | F8E4M3FN => "|V1",
    })
}

/// Whether a `.npy` descr is a void (`<V2`, `|V1`): how ml_dtypes saves types NumPy lacks.
pub fn is_void_descr(descr: &str) -> bool {
    descr
        .trim_start_matches(['<', '|', '>', '='])
        .starts_with('V')
}

/// The type a void of `width` bytes is read as until a caller that knows better retypes it
/// ([`retyped_void`](super::retyped_void)): bf16 for 2 bytes (ml_dtypes'
/// `<V2`), and for 1 byte f8e4m3fn (ml_dtypes' `<V1`, which also holds its other 8-bit types).
pub fn void_reads_as(width: usize) -> Option<ElementType> {
    match width {
        2 => Some(ElementType::BF16),
        1 => Some(ElementType::F8E4M3FN),
        _ => None,
    }
}

/// Whether `dtype` is stored in a `.npy` file as a void (`<V2`, `|V1`): NumPy has no such type,
/// so the file does not say which type of its width it holds.
pub fn npy_stores_as_void(dtype: ElementType) -> bool {
    npy_descr(dtype).is_some_and(is_void_descr)
}

fn dtype_of_descr(descr: &str) -> Option<ElementType> {
    let bare = descr.trim_start_matches(['<', '|', '>', '=']);
    if is_void_descr(descr) {
        return void_reads_as(bare.trim_start_matches('V').parse().ok()?);
    }
    // ml_dtypes registers float8_e5m2 as a float of kind `f`, so NumPy saves it as `<f1` (and
    // cannot load that back; we write `|V1`).
    if bare == "f1" {
        return Some(ElementType::F8E5M2);
    }
    let little = descr.replace('=', "<");
    ElementType::ALL.into_iter().find(|&t| {
        npy_descr(t).is_some_and(|d| {
            d == little || d.replace('|', "<") == little || d.replace('<', "|") == little
        })
    })
}

/// Reads a NumPy `.npy` file's bytes (format 1.0–3.0, little-endian, C order).
pub fn read_npy(bytes: &[u8]) -> Result<HostArray> {
    let what = "npy file";
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad(what, "not a .npy file (bad magic)".into()));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad(what, "truncated header".into()));
            }
            (
                u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize,
                12,
            )
        }
        v => return Err(bad(what, format!("unsupported format version {v}"))),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad(what, "truncated header".into()))?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| bad(what, "header is not text".into()))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[at..].trim_start().strip_prefix(':')?.trim_start())
    };
    let descr = field("descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or_else(|| bad(what, "no 'descr' in header".into()))?;
    let dtype =
        dtype_of_descr(descr).ok_or_else(|| bad(what, format!("unsupported dtype `{descr}`")))?;
    if field("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(bad(what, "Fortran-ordered arrays are not supported".into()));
    }
    let shape = field("shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or_else(|| bad(what, "no 'shape' in header".into()))?;
    let dims = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>()
                .map_err(|_| bad(what, format!("bad dimension `{s}`")))
        })
        .collect::<Result<Vec<_>>>()?;
    let size = byte_size(dtype, &dims).map_err(|e| bad(what, e.to_string()))?;
    let data = &bytes[end..];
    if data.len() != size {
        return Err(bad(
            what,
            format!(
                "{dtype}{dims:?} needs {size} bytes of data, the file has {}",
                data.len()
            ),
        ));
    }
    Ok(HostArray {
        dtype,
        dims,
        bytes: data.to_vec(),
    })
}

/// Writes a `.npy` (format 1.0) file's bytes.
pub fn write_npy(data: &HostArray) -> Result<Vec<u8>> {
    let descr = npy_descr(data.dtype)
        .ok_or_else(|| bad("npy output", format!("NumPy has no {} type", data.dtype)))?;
    let shape = match data.dims.len() {
        0 => "()".to_string(),
        1 => format!("({},)", data.dims[0]),
        _ => format!(
            "({})",
            data.dims
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so data starts on a 64-byte boundary, header ending in a newline.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.bytes.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data.bytes);
    Ok(out)
}
