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
mod tests {
    use super::*;

    /// An `InvalidArgument` whose message says `words`.
    fn refused(words: &'static str) -> impl Fn(&Error) -> bool {
        move |e| matches!(e, Error::InvalidArgument(m) if m.contains(words))
    }

    /// Literals that were once mishandled (found by the red-team passes and the parse_literal
    /// fuzz target), each checked as it is now answered.
    #[test]
    fn literals_once_mishandled_are_refused_saying_why() {
        type Check = Box<dyn Fn(&Error) -> bool>;
        let cases: Vec<(&str, Option<Check>)> = vec![
            // It silently became inf, while integer literals were range-checked.
            (
                "f32=1e40",
                Some(Box::new(refused("out of the range of f32"))),
            ),
            (
                "2xf16=1,70000",
                Some(Box::new(refused("out of the range of f16"))),
            ),
            // Infinities and NaN written as such are kept.
            ("3xf32=inf,-inf,nan", None),
            // It said "unknown element type `64`".
            (
                "2xcomplex64=1",
                Some(Box::new(refused("c64 values cannot be written as text"))),
            ),
            // The literal's own error had two prefixes.
            (
                "9999999999999x9999999999999xf32=1",
                Some(Box::new(|e: &Error| {
                    e.to_string().matches("invalid argument").count() == 1
                })),
            ),
            // A few characters asking for terabytes.
            ("2x2x4444444444444xui8=4", Some(Box::new(refused("")))),
        ];
        for (literal, check) in cases {
            match (parse_literal(literal), check) {
                (Ok(_), None) => {}
                (Err(e), Some(check)) => assert!(check(&e), "{literal}: {e}"),
                (got, _) => panic!("{literal}: {got:?}"),
            }
        }
    }

    /// Reads `json_values`' text back with `parse_value`, value by value.
    fn read_back(dtype: ElementType, text: &str) -> Vec<u8> {
        let inner = text.trim_start_matches('[').trim_end_matches(']');
        let mut bytes = Vec::new();
        for v in inner.split(',') {
            parse_value(dtype, v.trim_matches('"'), &mut bytes).unwrap();
        }
        bytes
    }

    #[test]
    fn every_float_goes_out_as_json_and_comes_back_bit_for_bit() {
        // Random bit patterns (xorshift), every exponent, and the edges of each type.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut f64s: Vec<f64> = (0..4096).map(|_| f64::from_bits(next())).collect();
        f64s.extend([
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            -0.0,
            0.1,
            1e16,
            9.999999999999998e15,
            1e-5,
            9.99999e-6,
            -6.241978532667931e240,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]);
        f64s.retain(|v| !v.is_nan());
        let mut f32s: Vec<f32> = (0..4096).map(|_| f32::from_bits(next() as u32)).collect();
        f32s.extend([
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45,
            -0.0,
            0.1,
            f32::INFINITY,
        ]);
        f32s.retain(|v| !v.is_nan());
        let cases = [
            (
                ElementType::F64,
                f64s.iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<_>>(),
            ),
            (
                ElementType::F32,
                f32s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ];
        for (dtype, bytes) in cases {
            let h = HostArray {
                dtype,
                dims: vec![(bytes.len() / dtype.byte_size()) as i64],
                bytes,
            };
            let text = json_values(&h);
            // No value is written longer than 25 characters (1e-300 is not 300 digits).
            let longest = text.split(',').map(str::len).max().unwrap();
            assert!(longest <= 26, "{dtype}: a value {longest} characters long");
            assert_eq!(read_back(dtype, &text), h.bytes, "{dtype}");
        }
        // NaN is written as a string and read back as NaN.
        let nan = HostArray {
            dtype: ElementType::F32,
            dims: vec![1],
            bytes: f32::NAN.to_le_bytes().to_vec(),
        };
        assert_eq!(json_values(&nan), "[\"NaN\"]");
        assert!(
            f32::from_le_bytes(read_back(ElementType::F32, "[NaN]").try_into().unwrap()).is_nan()
        );
    }

    #[test]
    fn a_literal_is_rounded_once_to_its_type_and_refused_past_its_range() {
        let read = |dtype: ElementType, text: &str| {
            let mut out = Vec::new();
            parse_value(dtype, text, &mut out).map(|()| out)
        };
        let f32_of = |b: Vec<u8>| f32::from_le_bytes(b.try_into().unwrap());
        // f32's largest, as Rust and NumPy write it, is f32's largest (it was refused as past
        // the range when read through f64).
        assert_eq!(
            f32_of(read(ElementType::F32, "3.4028235e38").unwrap()),
            f32::MAX
        );
        assert_eq!(
            f32_of(read(ElementType::F32, "-3.4028235e38").unwrap()),
            f32::MIN
        );
        // Rounded once: this decimal lies just above the midpoint of two f32s, so rounding it
        // to f64 first lands on the midpoint and then rounds the wrong way.
        let once = "1.00000005960464477550";
        assert_eq!(f32_of(read(ElementType::F32, once).unwrap()), 1.0000001f32);
        assert_eq!(
            f64::from_le_bytes(
                read(ElementType::F64, "-6.241978532667931e+240")
                    .unwrap()
                    .try_into()
                    .unwrap()
            ),
            -6.241978532667931e240
        );
        for (dtype, text) in [
            (ElementType::F32, "3.5e38"),
            (ElementType::F32, "1e400"),
            (ElementType::F64, "1e400"),
            (ElementType::F64, "-2e308"),
            (ElementType::F16, "1e6"),
        ] {
            let err = read(dtype, text).unwrap_err();
            assert!(err.contains("out of the range"), "{dtype} {text}: {err}");
        }
        for (dtype, text) in [(ElementType::F32, "-inf"), (ElementType::F64, "Infinity")] {
            assert!(read(dtype, text).is_ok(), "{dtype} {text}");
        }
    }

    /// One rule for every float type: a value that rounds to a finite value of the type is that
    /// value, one that rounds past the largest is refused. FP16 took 65504 but refused 65519;
    /// BF16 wrote its largest as `3.3895314e38` and refused that very text back, and 3.39e38.
    #[test]
    fn a_value_that_rounds_to_a_finite_value_is_that_value_in_every_float_type() {
        let read = |dtype: ElementType, text: &str| {
            let mut out = Vec::new();
            parse_value(dtype, text, &mut out).map(|()| out)
        };
        let u16_of = |b: Vec<u8>| u16::from_le_bytes(b.try_into().unwrap());
        for (dtype, text, bits) in [
            (ElementType::F16, "65504", 0x7bff),
            (ElementType::F16, "65519", 0x7bff),
            (ElementType::F16, "-65519.9", 0xfbff),
            (ElementType::F16, "2049", 0x6800),
            (ElementType::BF16, "3.3895313892515355e38", 0x7f7f),
            (ElementType::BF16, "3.3895314e38", 0x7f7f),
            (ElementType::BF16, "3.39e38", 0x7f7f),
            (ElementType::BF16, "-3.39e38", 0xff7f),
        ] {
            assert_eq!(u16_of(read(dtype, text).unwrap()), bits, "{dtype} {text}");
        }
        for (dtype, text) in [
            (ElementType::F16, "65520"),
            (ElementType::BF16, "3.3961776e38"),
            (ElementType::F32, "3.4028236e38"),
            (ElementType::F8E4M3FN, "464"),
            (ElementType::F8E5M2, "61440"),
        ] {
            let err = read(dtype, text).unwrap_err();
            assert!(err.contains("out of the range"), "{dtype} {text}: {err}");
        }
        // Within half a step of an 8-bit float's largest: that largest.
        for (dtype, text, max) in [
            (ElementType::F8E4M3FN, "463", 448.0),
            (ElementType::F8E5M2, "61439", 57344.0),
        ] {
            let bytes = read(dtype, text).unwrap();
            let format = Float8::of(dtype).unwrap();
            assert_eq!(format.decode(bytes[0]), max, "{dtype} {text}");
        }
        // Every largest value, written as JSON answers write it, reads back as itself.
        for (dtype, bytes) in [
            (ElementType::F16, 0x7bffu16.to_le_bytes().to_vec()),
            (ElementType::BF16, 0x7f7fu16.to_le_bytes().to_vec()),
            (ElementType::F32, f32::MAX.to_le_bytes().to_vec()),
        ] {
            let h = HostArray {
                dtype,
                dims: vec![1],
                bytes: bytes.clone(),
            };
            assert_eq!(read_back(dtype, &json_values(&h)), bytes, "{dtype}");
        }
    }
}
