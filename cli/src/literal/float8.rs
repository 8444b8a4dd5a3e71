//! The two 8-bit float formats JAX users save through ml_dtypes, `float8_e5m2` and
//! `float8_e4m3fn`: decoding exactly, and encoding with round-to-nearest-even, for text
//! literals and JSON output.

use pjrt_actors::ElementType;

/// An 8-bit float format: sign, `exp_bits`, `man_bits`. With `ieee`, an all-ones exponent is
/// infinity (zero mantissa) or NaN, as in IEEE 754 (e5m2); without, there are no infinities and
/// only an all-ones exponent and mantissa is NaN (e4m3fn, whose "fn" says finite with NaN).
#[derive(Debug, Clone, Copy)]
pub struct Float8 {
    exp_bits: u32,
    man_bits: u32,
    ieee: bool,
}

impl Float8 {
    /// The format of `dtype`, if it is an 8-bit float.
    pub fn of(dtype: ElementType) -> Option<Float8> {
        match dtype {
            ElementType::F8E5M2 => Some(Float8 {
                exp_bits: 5,
                man_bits: 2,
                ieee: true,
            }),
            ElementType::F8E4M3FN => Some(Float8 {
                exp_bits: 4,
                man_bits: 3,
                ieee: false,
            }),
            _ => None,
        }
    }

    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    /// The value of `bits` (exact: every 8-bit float is an `f64`).
    pub fn decode(self, bits: u8) -> f64 {
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp_max = (1u32 << self.exp_bits) - 1;
        let man_max = (1u32 << self.man_bits) - 1;
        let exp = (bits as u32 >> self.man_bits) & exp_max;
        let man = bits as u32 & man_max;
        let scale = |e: i32| 2f64.powi(e);
        let magnitude = if exp == exp_max && self.ieee {
            if man == 0 { f64::INFINITY } else { f64::NAN }
        } else if exp == exp_max && man == man_max {
            f64::NAN
        } else if exp == 0 {
            man as f64 * scale(1 - self.bias() - self.man_bits as i32)
        } else {
            (1.0 + man as f64 / (1u32 << self.man_bits) as f64) * scale(exp as i32 - self.bias())
        };
        sign * magnitude
    }

    /// The largest finite magnitude's bits (positive).
    fn max_bits(self) -> u8 {
        let all = (1u16 << (self.exp_bits + self.man_bits)) as u8 - 1;
        // IEEE: the top exponent is infinity and NaN; finite-only: only all ones is NaN.
        if self.ieee {
            all - (1 << self.man_bits) as u8
        } else {
            all - 1
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        self.decode(self.max_bits())
    }

    /// Half the step between the largest finite value and the one below it: a value less
    /// than this past the largest rounds to it.
    pub fn half_last_step(self) -> f64 {
        (self.max() - self.decode(self.max_bits() - 1)) / 2.0
    }

    /// Whether the format has infinities.
    pub fn has_infinity(self) -> bool {
        self.ieee
    }

    /// Rounds `x` to the nearest value, ties to even. A finite `x` past the largest value (the
    /// caller refuses those) saturates; NaN is the format's NaN; infinity is infinity where the
    /// format has one, else NaN, as ml_dtypes converts it.
    pub fn encode(self, x: f64) -> u8 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        // The NaN ml_dtypes makes: IEEE's quiet NaN (top mantissa bit) where there are
        // infinities, else the one NaN pattern, all ones.
        let all_ones = (1u16 << (self.exp_bits + self.man_bits)) as u8 - 1;
        let nan = if self.ieee {
            self.max_bits() + 1 + (1 << (self.man_bits - 1))
        } else {
            all_ones
        };
        if x.is_nan() || (x.is_infinite() && !self.ieee) {
            return sign | nan;
        }
        if x.is_infinite() {
            // The code after the largest finite one: all-ones exponent, zero mantissa.
            return sign | (self.max_bits() + 1);
        }
        let a = x.abs();
        // Non-negative codes up to the largest are ordered by value: find the last at or
        // below `a`, then take the nearer of it and the next, the even code on a tie.
        let (mut lo, mut hi) = (0u8, self.max_bits());
        if a >= self.decode(hi) {
            return sign | hi;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.decode(mid) <= a {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (below, above) = (a - self.decode(lo), self.decode(hi) - a);
        let code = if below < above || (below == above && lo % 2 == 0) {
            lo
        } else {
            hi
        };
        sign | code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values and bits from ml_dtypes (`np.array(v, dtype=float8_*).view(np.uint8)`).
    #[test]
    fn known_values_encode_and_decode_as_ml_dtypes_does() {
        let e5m2 = Float8::of(ElementType::F8E5M2).unwrap();
        let e4m3 = Float8::of(ElementType::F8E4M3FN).unwrap();
        let cases: &[(Float8, f64, u8)] = &[
            (e5m2, 1.0, 0x3c),
            (e5m2, -2.0, 0xc0),
            (e5m2, 1.5, 0x3e),
            (e5m2, 57344.0, 0x7b),
            (e5m2, f64::INFINITY, 0x7c),
            (e5m2, 2f64.powi(-16), 0x01),
            (e4m3, 1.0, 0x38),
            (e4m3, -2.0, 0xc0),
            (e4m3, 1.5, 0x3c),
            (e4m3, 448.0, 0x7e),
            (e4m3, 2f64.powi(-9), 0x01),
            (e4m3, 0.0, 0x00),
            (e4m3, -0.0, 0x80),
        ];
        for &(f, v, bits) in cases {
            assert_eq!(f.encode(v), bits, "{f:?} {v}");
            assert_eq!(f.decode(bits), v, "{f:?} {bits:#x}");
        }
        assert!(e4m3.decode(0x7f).is_nan() && e4m3.decode(0xff).is_nan());
        assert!(e5m2.decode(0x7d).is_nan());
        assert_eq!(
            (e5m2.encode(f64::NAN), e4m3.encode(-f64::NAN)),
            (0x7e, 0xff)
        );
        assert_eq!((e5m2.max(), e4m3.max()), (57344.0, 448.0));
        // No infinity in e4m3fn: infinity becomes NaN, as ml_dtypes converts it.
        assert!(e4m3.decode(e4m3.encode(f64::INFINITY)).is_nan());
    }

    #[test]
    fn rounding_is_to_nearest_with_ties_to_even() {
        let e4m3 = Float8::of(ElementType::F8E4M3FN).unwrap();
        // Between 1.0 (0x38) and 1.125 (0x39): the midpoint goes to the even code.
        assert_eq!(e4m3.encode(1.0625), 0x38);
        assert_eq!(e4m3.encode(1.0626), 0x39);
        // Between 1.125 (0x39) and 1.25 (0x3a): the midpoint goes up, to the even code.
        assert_eq!(e4m3.encode(1.1875), 0x3a);
        // Every code's value encodes back to it, in both formats (NaNs aside).
        for dtype in [ElementType::F8E5M2, ElementType::F8E4M3FN] {
            let f = Float8::of(dtype).unwrap();
            for bits in 0..=255u8 {
                let v = f.decode(bits);
                if !v.is_nan() {
                    assert_eq!(f.encode(v), bits, "{dtype} {bits:#x} = {v}");
                }
            }
        }
    }
}
