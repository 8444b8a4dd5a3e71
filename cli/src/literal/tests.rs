//! Tests of the module above, kept apart to hold it under the file-size limit.
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
    assert!(f32::from_le_bytes(read_back(ElementType::F32, "[NaN]").try_into().unwrap()).is_nan());
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
