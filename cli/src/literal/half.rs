//! IEEE half (`f16`) and bfloat16 (`bf16`) to and from `f32`, rounding to nearest even: the
//! literals' and the JSON answers' 16-bit floats.

/// Rounds an `f64` to the nearest `f16`, ties to even, as bits: once, not through `f32`.
pub fn f64_to_f16(x: f64) -> u16 {
    round_to_16_bits(x, 10, 15)
}

/// Rounds an `f64` to the nearest `bf16`, ties to even, as bits.
pub fn f64_to_bf16(x: f64) -> u16 {
    round_to_16_bits(x, 7, 127)
}

/// `x` rounded to nearest, ties to even, in the 16-bit binary format of `mant` mantissa bits
/// and exponent bias `bias` (its exponent takes the other bits): scaled by the quantum of its
/// binade (exact, a power of two), rounded as an integer, and put back together. Past the
/// largest finite value it is infinity, as IEEE rounding makes it.
fn round_to_16_bits(x: f64, mant: i32, bias: i32) -> u16 {
    let max_field = (1i32 << (15 - mant)) - 1;
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let infinity = sign | ((max_field as u16) << mant);
    if x.is_nan() {
        return infinity | (1 << (mant - 1));
    }
    let a = x.abs();
    if a.is_infinite() {
        return infinity;
    }
    if a == 0.0 {
        return sign;
    }
    // The binade's exponent (subnormals share the smallest normal's quantum).
    let mut e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(1 - bias);
    let quantum = 2f64.powi(e - mant);
    let mut r = (a / quantum).round_ties_even() as u32;
    if r >= 1 << (mant + 1) {
        e += 1;
        r >>= 1;
    }
    if r < 1 << mant {
        return sign | r as u16; // subnormal (or zero)
    }
    let field = e + bias;
    if field >= max_field {
        return infinity;
    }
    sign | ((field as u16) << mant) | (r - (1 << mant)) as u16
}

/// Widens `f16` bits to `f32`.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let shift = m.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | ((m << (shift + 1)) & 0x3ff) << 13
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Rounds an `f32` to `bf16` bits (round to nearest even).
#[cfg(test)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

/// Widens `bf16` bits to `f32` (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_nearest_even_once_and_past_the_largest_is_infinity() {
        // (value, f16 bits): ties go to the even neighbour (2049 between 2048 and 2050).
        for (v, bits) in [
            (2049.0, 0x6800),
            (2051.0, 0x6802),
            (65504.0, 0x7bff),
            (65519.0, 0x7bff),
            (65519.99, 0x7bff),
            (65520.0, 0x7c00),
            (-65519.0, 0xfbff),
            (5.960464477539063e-8, 0x0001),
            (2.0e-8, 0x0000),
            (6.097555160522461e-5, 0x03ff),
            (6.103515625e-5, 0x0400),
        ] {
            assert_eq!(f64_to_f16(v), bits, "{v}");
        }
        // bf16: its largest, and every value that rounds to it, is it; half an ULP past is inf.
        let max = 3.3895313892515355e38;
        for v in [max, 3.3895314e38, 3.39e38, 3.3961775e38] {
            assert_eq!(f64_to_bf16(v), 0x7f7f, "{v}");
        }
        assert_eq!(f64_to_bf16(3.3961776e38), 0x7f80);
        // Agrees with the f32 path wherever that one is right.
        for v in [1.0f32, -2.5, 3.0e38, 1.5e-38, 0.1, 1e-40] {
            assert_eq!(f64_to_bf16(v as f64), f32_to_bf16(v), "{v}");
        }
    }

    #[test]
    fn half_precision_round_trips() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 0.000061035156, 1e-7, 3.140625] {
            let h = f16_to_f32(f64_to_f16(v as f64));
            assert!((h - v).abs() <= v.abs() * 1e-3 + 1e-7, "{v} -> {h}");
        }
        assert!(f16_to_f32(f64_to_f16(1e9)).is_infinite());
        for v in [0.0f32, 1.0, -2.5, 3.0e38, 1.5e-38] {
            let b = bf16_to_f32(f32_to_bf16(v));
            assert!((b - v).abs() <= v.abs() * 1e-2, "{v} -> {b}");
        }
    }
}
