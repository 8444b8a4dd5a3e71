//! IEEE half (`f16`) and bfloat16 (`bf16`) to and from `f32`, rounding to nearest even: the
//! literals' and the JSON answers' 16-bit floats.

/// Rounds an `f32` to the nearest `f16` (IEEE half), as bits.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = (mant | 0x80_0000) >> (1 - e);
        let round = (m >> 12) & 1;
        return sign | ((m >> 13) + round) as u16;
    }
    let half = sign as u32 | ((e as u32) << 10) | (mant >> 13);
    let round = (mant >> 12) & 1;
    (half + round) as u16
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
    fn half_precision_round_trips() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 0.000061035156, 1e-7, 3.140625] {
            let h = f16_to_f32(f32_to_f16(v));
            assert!((h - v).abs() <= v.abs() * 1e-3 + 1e-7, "{v} -> {h}");
        }
        assert!(f16_to_f32(f32_to_f16(1e9)).is_infinite());
        for v in [0.0f32, 1.0, -2.5, 3.0e38, 1.5e-38] {
            let b = bf16_to_f32(f32_to_bf16(v));
            assert!((b - v).abs() <= v.abs() * 1e-2, "{v} -> {b}");
        }
    }
}
