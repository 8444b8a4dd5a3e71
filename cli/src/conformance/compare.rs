//! Compares what the plugin computed with what a case expects, at the tolerance of the check
//! that asks (StableHLO's interpreter's: exact, 3 ULP, or 0.001 absolute), element by element;
//! a mismatch says where, what and how far.

use pjrt_actors::{ElementType, HostArray};

use super::case::CheckKind;

/// One element, as far as comparing needs: its value and, for floats, its bits and width.
#[derive(Debug, Clone, Copy)]
struct Value {
    /// The value (the real part of a complex number; integers exactly up to 2^53).
    value: f64,
    /// Its bit pattern, for ULP distances and exact comparison.
    bits: u64,
    float: bool,
}

/// Each element's components (two for complex numbers), read from little-endian bytes.
fn components(dtype: ElementType, bytes: &[u8]) -> Option<Vec<Value>> {
    use ElementType::*;
    let w = dtype.byte_size();
    let mut out = Vec::with_capacity(bytes.len() / w.max(1));
    let int = |bits: u64, value: f64| Value {
        value,
        bits,
        float: false,
    };
    let float = |bits: u64, value: f64| Value {
        value,
        bits,
        float: true,
    };
    for c in bytes.chunks_exact(w) {
        match dtype {
            Pred | U8 => out.push(int(c[0] as u64, c[0] as f64)),
            S8 => out.push(int(c[0] as u64, c[0] as i8 as f64)),
            S16 => {
                let v = i16::from_le_bytes([c[0], c[1]]);
                out.push(int(v as u16 as u64, v as f64))
            }
            U16 => {
                let v = u16::from_le_bytes([c[0], c[1]]);
                out.push(int(v as u64, v as f64))
            }
            S32 => {
                let v = i32::from_le_bytes(c.try_into().ok()?);
                out.push(int(v as u32 as u64, v as f64))
            }
            U32 => {
                let v = u32::from_le_bytes(c.try_into().ok()?);
                out.push(int(v as u64, v as f64))
            }
            S64 => {
                let v = i64::from_le_bytes(c.try_into().ok()?);
                out.push(int(v as u64, v as f64))
            }
            U64 => {
                let v = u64::from_le_bytes(c.try_into().ok()?);
                out.push(int(v, v as f64))
            }
            F16 => {
                let b = u16::from_le_bytes([c[0], c[1]]);
                out.push(float(b as u64, crate::literal::f16_value(b)))
            }
            BF16 => {
                let b = u16::from_le_bytes([c[0], c[1]]);
                out.push(float(b as u64, f32::from_bits((b as u32) << 16) as f64))
            }
            F32 => {
                let b = u32::from_le_bytes(c.try_into().ok()?);
                out.push(float(b as u64, f32::from_bits(b) as f64))
            }
            F64 => {
                let b = u64::from_le_bytes(c.try_into().ok()?);
                out.push(float(b, f64::from_bits(b)))
            }
            C64 => {
                for half in c.chunks_exact(4) {
                    let b = u32::from_le_bytes(half.try_into().ok()?);
                    out.push(float(b as u64, f32::from_bits(b) as f64));
                }
            }
            C128 => {
                for half in c.chunks_exact(8) {
                    let b = u64::from_le_bytes(half.try_into().ok()?);
                    out.push(float(b, f64::from_bits(b)));
                }
            }
            F8E5M2 | F8E4M3FN => {
                let value = crate::literal::float8_value(dtype, c[0])?;
                out.push(float(c[0] as u64, value))
            }
        }
    }
    Some(out)
}

/// The bit width of one float component of `dtype`.
fn float_bits(dtype: ElementType) -> u32 {
    use ElementType::*;
    match dtype {
        F16 | BF16 => 16,
        F32 | C64 => 32,
        F64 | C128 => 64,
        _ => 8,
    }
}

/// StableHLO's ULP distance: 0 for equal bits or two NaNs, the distance between magnitudes
/// (summed across zero) for finite values, the largest for anything else.
fn ulp_difference(a: Value, b: Value, width: u32) -> u64 {
    if a.bits == b.bits {
        return 0;
    }
    if a.value.is_finite() && b.value.is_finite() {
        let sign = 1u64 << (width - 1);
        let (ma, mb) = (a.bits & (sign - 1), b.bits & (sign - 1));
        return match (a.bits & sign != 0) == (b.bits & sign != 0) {
            true => ma.abs_diff(mb),
            false => ma + mb,
        };
    }
    if a.value.is_nan() && b.value.is_nan() {
        return 0;
    }
    u64::MAX
}

fn equal(a: Value, b: Value) -> bool {
    match a.float {
        true => a.value == b.value || (a.value.is_nan() && b.value.is_nan()),
        false => a.bits == b.bits,
    }
}

fn almost_equal(a: Value, b: Value) -> bool {
    if equal(a, b) {
        return true;
    }
    a.value.is_finite() && b.value.is_finite() && (a.value - b.value).abs() <= 1e-3
}

/// A value as it reads best: plainly, or in exponent form when tiny or huge (a subnormal
/// written plainly runs to hundreds of digits).
fn number(x: f64) -> String {
    match x != 0.0 && x.is_finite() && !(1e-6..1e15).contains(&x.abs()) {
        true => format!("{x:e}"),
        false => x.to_string(),
    }
}

/// What one check found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub mismatches: usize,
    pub elements: usize,
    /// The first mismatch, in words.
    pub first: Option<String>,
}

/// Compares `actual` with `expected` as a check of `kind` does.
pub fn compare(
    kind: CheckKind,
    actual: &HostArray,
    expected: &HostArray,
) -> Result<Outcome, String> {
    if actual.dtype != expected.dtype || actual.dims != expected.dims {
        return Err(format!(
            "the check compares {:?}{:?} with {:?}{:?}",
            actual.dtype, actual.dims, expected.dtype, expected.dims
        ));
    }
    let read = |h: &HostArray| components(h.dtype, &h.bytes).ok_or("unreadable bytes");
    let (a, e) = (read(actual)?, read(expected)?);
    let width = float_bits(actual.dtype);
    let per_element = match actual.dtype {
        ElementType::C64 | ElementType::C128 => 2,
        _ => 1,
    };
    let mut outcome = Outcome {
        mismatches: 0,
        elements: a.len() / per_element,
        first: None,
    };
    for (i, (ga, ge)) in (a.chunks(per_element).zip(e.chunks(per_element))).enumerate() {
        let ok = ga.iter().zip(ge).all(|(&x, &y)| match (kind, x.float) {
            (CheckKind::Close, true) => ulp_difference(x, y, width) <= 3,
            (CheckKind::AlmostEq, true) => almost_equal(x, y),
            _ => equal(x, y),
        });
        if !ok {
            outcome.mismatches += 1;
            if outcome.first.is_none() {
                let show = |v: &[Value]| {
                    (v.iter().map(|c| number(c.value)))
                        .collect::<Vec<_>>()
                        .join("+i")
                };
                let ulp = match (kind, ga[0].float) {
                    (CheckKind::Close, true) => format!(
                        " ({} ULP)",
                        (ga.iter().zip(ge))
                            .map(|(&x, &y)| ulp_difference(x, y, width))
                            .max()
                            .unwrap_or(0)
                    ),
                    _ => String::new(),
                };
                outcome.first = Some(format!(
                    "element {i}: got {}, expected {}{ulp}",
                    show(ga),
                    show(ge)
                ));
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(v: &[f64]) -> HostArray {
        HostArray::from_slice(v, &[v.len() as i64])
    }

    fn f32s(v: &[f32]) -> HostArray {
        HostArray::from_slice(v, &[v.len() as i64])
    }

    #[test]
    fn tolerances_follow_the_interpreters_checks() {
        let one_ulp_up = f64::from_bits(1.0f64.to_bits() + 1);
        let four_ulp_up = f64::from_bits(1.0f64.to_bits() + 4);
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        // (kind, actual, expected, mismatches)
        let table: &[(CheckKind, &[f64], &[f64], usize)] = &[
            (CheckKind::Eq, &[1.0, 2.0], &[1.0, 2.0], 0),
            (CheckKind::Eq, &[1.0, one_ulp_up], &[1.0, 1.0], 1),
            (CheckKind::Eq, &[nan, 0.0], &[nan, -0.0], 0),
            (CheckKind::Close, &[one_ulp_up], &[1.0], 0),
            (CheckKind::Close, &[four_ulp_up], &[1.0], 1),
            (CheckKind::Close, &[nan, inf], &[nan, inf], 0),
            (CheckKind::Close, &[inf], &[-inf], 1),
            (
                CheckKind::Close,
                &[std::f64::consts::FRAC_PI_2],
                &[-0.4832079800758867],
                1,
            ),
            (CheckKind::Close, &[0.0], &[-0.0], 0),
            (CheckKind::AlmostEq, &[1.0005], &[1.0], 0),
            (CheckKind::AlmostEq, &[1.002], &[1.0], 1),
            (CheckKind::AlmostEq, &[inf, nan], &[inf, nan], 0),
            (CheckKind::AlmostEq, &[inf], &[1e300], 1),
        ];
        for (kind, a, e, want) in table {
            let got = compare(*kind, &f64s(a), &f64s(e)).unwrap();
            assert_eq!(got.mismatches, *want, "{kind:?} {a:?} vs {e:?}: {got:?}");
        }
    }

    #[test]
    fn ulps_count_in_the_elements_own_width() {
        let up3 = f32::from_bits(2.0f32.to_bits() + 3);
        let got = compare(CheckKind::Close, &f32s(&[up3]), &f32s(&[2.0])).unwrap();
        assert_eq!(got.mismatches, 0);
        let up4 = f32::from_bits(2.0f32.to_bits() + 4);
        let got = compare(CheckKind::Close, &f32s(&[up4]), &f32s(&[2.0])).unwrap();
        assert_eq!(got.mismatches, 1);
        assert!(got.first.unwrap().contains("(4 ULP)"));
    }

    #[test]
    fn values_read_plainly_or_in_exponent_form() {
        let table = [
            (1.5, "1.5"),
            (0.0, "0"),
            (-2.0, "-2"),
            (3e-310, "3e-310"),
            (1e300, "1e300"),
        ];
        for (x, want) in table {
            assert_eq!(number(x), want);
        }
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn integers_compare_exactly_and_shapes_must_agree() {
        let a = HostArray::from_slice(&[1i32, -2, 3], &[3]);
        let b = HostArray::from_slice(&[1i32, -2, 4], &[3]);
        for kind in [CheckKind::Eq, CheckKind::Close, CheckKind::AlmostEq] {
            assert_eq!(compare(kind, &a, &b).unwrap().mismatches, 1);
        }
        let c = HostArray::from_slice(&[1i32, -2], &[2]);
        assert!(compare(CheckKind::Eq, &a, &c).is_err());
    }
}
