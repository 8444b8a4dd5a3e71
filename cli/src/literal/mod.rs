//! Values as text: one value read from its literal (`parse_value`, rounded once to its type),
//! an input literal (`DIMSxDTYPE=V1,...`), and values written as JSON numbers that read back
//! bit for bit (`json_values`). The CLI's literals and the server's JSON tensors share them;
//! the library knows no text form of values.

use std::fmt::Write as _;

use pjrt_actors::host_data::byte_size;
use pjrt_actors::{ElementType, Error, HostArray, Result};

mod float8;
mod half;

use float8::Float8;
use half::{bf16_to_f32, f16_to_f32, f64_to_bf16, f64_to_f16};

/// An f16's value, from its bits.
pub fn f16_value(bits: u16) -> f64 {
    f16_to_f32(bits) as f64
}

/// A float8 element's value, from its bits; `None` for a type that is not float8.
pub fn float8_value(dtype: ElementType, bits: u8) -> Option<f64> {
    Some(Float8::of(dtype)?.decode(bits))
}

fn bad(what: &str, why: String) -> Error {
    Error::InvalidArgument(format!("{what}: {why}"))
}

/// Appends one value written as text (`1.5`, `-3`, `true`) to `out` as little-endian bytes of
/// `dtype`: integers checked against the type's range, floats rounded once, correctly, to the
/// type (`3.4028235e38` is f32's largest), and a finite literal past the type's range refused
/// (`inf` and `nan` written as such are kept). The input literals and the server's JSON tensors
/// both read values with it.
pub fn parse_value(
    dtype: ElementType,
    text: &str,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    use ElementType::*;
    let t = text.trim();
    let int = || {
        t.parse::<i128>()
            .map_err(|_| format!("`{t}` is not an integer"))
    };
    // Written as infinity, not a finite number too large for the type.
    let spelled_infinite = || {
        let word = t.trim_start_matches(['+', '-']);
        word.eq_ignore_ascii_case("inf") || word.eq_ignore_ascii_case("infinity")
    };
    let out_of_range = |max: f64| format!("`{t}` is out of the range of {dtype} (largest {max:e})");
    let float = || {
        let v = (t.parse::<f64>()).map_err(|_| format!("`{t}` is not a number"))?;
        match v.is_infinite() && !spelled_infinite() {
            true => Err(out_of_range(f64::MAX)),
            false => Ok(v),
        }
    };
    // One rule for every float type: a value that rounds to a finite value of the type is
    // that value; one that rounds past the largest is out of range (unless spelled infinite).
    // The narrow types read the value as f64 (exactly, for every literal these types hold) and
    // round it once to the type.
    let rounded_16 = |round: fn(f64) -> u16, max: f64| {
        let v = float()?;
        let bits = round(v);
        let infinite = bits & 0x7fff == round(f64::INFINITY) & 0x7fff;
        match v.is_finite() && infinite {
            true => Err(out_of_range(max)),
            false => Ok(bits),
        }
    };
    // An 8-bit float rounds to its largest up to half its last step past it.
    let narrow = |max: f64, half_step: f64| {
        let v = float()?;
        if v.is_finite() && v.abs() >= max + half_step {
            return Err(out_of_range(max));
        }
        Ok::<f64, String>(v) // encode rounds it, saturating at the largest
    };
    macro_rules! push_int {
        ($ty:ty) => {{
            let v = int()?;
            let v = <$ty>::try_from(v).map_err(|_| format!("`{t}` does not fit in {dtype}"))?;
            out.extend_from_slice(&v.to_le_bytes());
        }};
    }
    match dtype {
        Pred => out.push(match t {
            "true" | "1" => 1,
            "false" | "0" => 0,
            _ => return Err(format!("`{t}` is not a boolean (true, false, 1, 0)")),
        }),
        S8 => push_int!(i8),
        S16 => push_int!(i16),
        S32 => push_int!(i32),
        S64 => push_int!(i64),
        U8 => push_int!(u8),
        U16 => push_int!(u16),
        U32 => push_int!(u32),
        U64 => push_int!(u64),
        F16 => out.extend_from_slice(&rounded_16(f64_to_f16, 65504.0)?.to_le_bytes()),
        BF16 => {
            out.extend_from_slice(&rounded_16(f64_to_bf16, 3.3895313892515355e38)?.to_le_bytes())
        }
        // Read as f32 directly: through f64 a value would be rounded twice.
        F32 => {
            let v = (t.parse::<f32>()).map_err(|_| format!("`{t}` is not a number"))?;
            if v.is_infinite() && !spelled_infinite() {
                return Err(out_of_range(f32::MAX as f64));
            }
            out.extend_from_slice(&v.to_le_bytes())
        }
        F64 => out.extend_from_slice(&float()?.to_le_bytes()),
        F8E5M2 | F8E4M3FN => {
            let format = Float8::of(dtype).expect("an 8-bit float");
            let v = narrow(format.max(), format.half_last_step())?;
            if v.is_infinite() && !format.has_infinity() {
                return Err(format!("`{t}`: {dtype} has no infinity"));
            }
            out.push(format.encode(v));
        }
        C64 | C128 => {
            return Err(format!(
                "{dtype} values cannot be written as text; use a .npy file"
            ));
        }
    }
    Ok(())
}

/// The most data a text literal may describe (64 MiB; larger data belongs in a .npy file).
pub const LITERAL_LIMIT: usize = 64 << 20;

/// Parses an input literal: `DIMSxDTYPE=V1,V2,...` (`2x2xf32=1,2,3,4`), or `DTYPE=V` for a
/// scalar; a single value is repeated to fill the shape (`4xf32=0`).
pub fn parse_literal(text: &str) -> Result<HostArray> {
    let what = format!("input `{text}`");
    let (ty, values) = text.split_once('=').ok_or_else(|| {
        bad(
            &what,
            "expected DIMSxDTYPE=VALUES, e.g. 2x2xf32=1,2,3,4 or f32=5".into(),
        )
    })?;
    // The element type is what follows the last `x`, except for the names that hold one.
    let (dims_text, dtype_name) = match ["complex128", "complex64"]
        .into_iter()
        .find(|name| ty.ends_with(name))
    {
        Some(name) => (ty[..ty.len() - name.len()].trim_end_matches('x'), name),
        None => ty.rsplit_once('x').unwrap_or(("", ty)),
    };
    if dtype_name.is_empty() {
        return Err(bad(&what, "no element type".into()));
    }
    let parts: Vec<&str> = match dims_text {
        "" => Vec::new(),
        dims => dims.split('x').collect(),
    };
    let dtype = ElementType::from_name(dtype_name).ok_or_else(|| {
        bad(
            &what,
            format!("unknown element type `{dtype_name}` (expected one of pred, i8..i64, ui8..ui64, f16, bf16, f32, f64, f8e5m2, f8e4m3fn)"),
        )
    })?;
    let dims = parts
        .iter()
        .map(|d| {
            d.parse::<i64>()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| bad(&what, format!("`{d}` is not a dimension")))
        })
        .collect::<Result<Vec<_>>>()?;
    let size = byte_size(dtype, &dims).map_err(|e| bad(&what, Error::from(e).detail()))?;
    // A single value fills the shape: without a bound, a few characters could ask for
    // terabytes (found by fuzzing).
    if size > LITERAL_LIMIT {
        return Err(bad(
            &what,
            format!(
                "{dtype}{dims:?} is {size} bytes; text literals are limited to {LITERAL_LIMIT} bytes (use a .npy file)"
            ),
        ));
    }
    let count = size / dtype.byte_size();
    let items: Vec<&str> = if values.trim().is_empty() {
        Vec::new()
    } else {
        values.split(',').collect()
    };
    let mut bytes = Vec::new();
    match items.len() {
        n if n == count => {
            for v in &items {
                parse_value(dtype, v, &mut bytes).map_err(|e| bad(&what, e))?;
            }
        }
        1 => {
            parse_value(dtype, items[0], &mut bytes).map_err(|e| bad(&what, e))?;
            bytes = bytes.repeat(count);
        }
        n => {
            return Err(bad(
                &what,
                format!("the shape {dims:?} holds {count} values, {n} were given"),
            ));
        }
    }
    Ok(HostArray { dtype, dims, bytes })
}

/// The values as JSON numbers (booleans for pred; `[re, im]` pairs for complex): each float in
/// the shortest form that reads back to the same value of its own type, so that a value goes
/// out and comes back bit for bit.
pub fn json_values(data: &HostArray) -> String {
    use ElementType::*;
    let w = data.dtype.byte_size();
    let mut out = String::with_capacity(data.bytes.len() / w.max(1) * 8 + 2);
    out.push('[');
    for (i, c) in data.bytes.chunks_exact(w).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let le = |n: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&c[..n]);
            b
        };
        let f32_at = |at: usize| f32::from_le_bytes(c[at..at + 4].try_into().expect("4"));
        let f64_at = |at: usize| f64::from_le_bytes(c[at..at + 8].try_into().expect("8"));
        let _ = match data.dtype {
            Pred => write!(out, "{}", c[0] != 0),
            S8 => write!(out, "{}", c[0] as i8),
            S16 => write!(out, "{}", i16::from_le_bytes([c[0], c[1]])),
            S32 => write!(out, "{}", i32::from_le_bytes(c.try_into().expect("4"))),
            S64 => write!(out, "{}", i64::from_le_bytes(le(8))),
            U8 => write!(out, "{}", c[0]),
            U16 => write!(out, "{}", u16::from_le_bytes([c[0], c[1]])),
            U32 => write!(out, "{}", u32::from_le_bytes(c.try_into().expect("4"))),
            U64 => write!(out, "{}", u64::from_le_bytes(le(8))),
            F16 => write_float(&mut out, f16_to_f32(u16::from_le_bytes([c[0], c[1]]))),
            BF16 => write_float(&mut out, bf16_to_f32(u16::from_le_bytes([c[0], c[1]]))),
            F32 => write_float(&mut out, f32_at(0)),
            F64 => write_float(&mut out, f64_at(0)),
            F8E5M2 | F8E4M3FN => write_float(
                &mut out,
                Float8::of(data.dtype).expect("an 8-bit float").decode(c[0]),
            ),
            C64 => {
                out.push('[');
                let _ = write_float(&mut out, f32_at(0));
                out.push(',');
                let _ = write_float(&mut out, f32_at(4));
                out.push(']');
                Ok(())
            }
            C128 => {
                out.push('[');
                let _ = write_float(&mut out, f64_at(0));
                out.push(',');
                let _ = write_float(&mut out, f64_at(8));
                out.push(']');
                Ok(())
            }
        };
    }
    out.push(']');
    out
}

/// A float as JSON. Rust writes the shortest digits that read back to the same value; plain
/// from 1e-5 to 1e16, with an exponent outside (plain, 1e-300 would be 300 digits long). JSON
/// has no NaN or infinity: those become strings (`"NaN"`, `"inf"`, `"-inf"`), which
/// [`parse_value`] reads back. (Writing to a `String` cannot fail.)
fn write_float<F>(out: &mut String, v: F) -> std::fmt::Result
where
    F: std::fmt::Display + std::fmt::LowerExp + Into<f64> + Copy,
{
    let magnitude = v.into().abs();
    if !magnitude.is_finite() {
        write!(out, "\"{v}\"")
    } else if magnitude == 0.0 || (1e-5..1e16).contains(&magnitude) {
        write!(out, "{v}")
    } else {
        write!(out, "{v:e}")
    }
}

#[cfg(test)]
mod tests;
