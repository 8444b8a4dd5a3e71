//! Host data for the command line: `iree-run-module`-style input literals (`2x2xf32=1,2,3,4`,
//! `f32=5`) and NumPy `.npy` files, both to and from `(dtype, dims, bytes)`.

use pjrt_actors_core::dtype::ElementType;
use pjrt_actors_core::{Error, Result};

/// A dense host array: element type, dims and bytes (little-endian, major-to-minor).
#[derive(Debug, Clone, PartialEq)]
pub struct HostData {
    /// The element type.
    pub dtype: ElementType,
    /// The dimensions (empty for a scalar).
    pub dims: Vec<i64>,
    /// The values' bytes, little-endian, major-to-minor.
    pub bytes: Vec<u8>,
}

impl HostData {
    /// An array's contents read back to the host.
    pub fn from_array(array: &crate::Array) -> Result<HostData> {
        Ok(HostData {
            dtype: array.dtype(),
            dims: array.dims().to_vec(),
            bytes: array.to_bytes()?,
        })
    }

    /// Rows `start..start + n` along the leading dimension, as an array of their own (a
    /// request's rows cut from a recorded batch); rows past the end are an error.
    pub fn rows(&self, start: usize, n: usize) -> Result<HostData> {
        let total = self.dims.first().map_or(0, |&r| r.max(0) as usize);
        if start.checked_add(n).is_none_or(|end| end > total) {
            return Err(Error::InvalidArgument(format!(
                "rows {start}..{} of an array of {total}",
                start.saturating_add(n)
            )));
        }
        let width = self.bytes.len() / total.max(1);
        let mut dims = self.dims.clone();
        dims[0] = n as i64;
        Ok(HostData {
            dtype: self.dtype,
            dims,
            bytes: self.bytes[start * width..(start + n) * width].to_vec(),
        })
    }

    /// This data as `to`, where both are stored in `.npy` files as voids of one width (ml_dtypes'
    /// convention: a `<V2` is bf16, a `|V1` one of the 8-bit floats, and only the program says
    /// which). Anything else is refused, naming the width.
    pub fn retyped_void(self, to: ElementType) -> Result<HostData> {
        if self.dtype == to {
            return Ok(self);
        }
        if void_reads_as(self.dtype.byte_size()) == Some(self.dtype)
            && npy_stores_as_void(to)
            && self.dtype.byte_size() == to.byte_size()
        {
            return Ok(HostData { dtype: to, ..self });
        }
        Err(Error::InvalidArgument(match self.dtype.byte_size() {
            w if void_reads_as(w) != Some(self.dtype) => format!("{} data is not {to}", self.dtype),
            2 => format!("a 2-byte void .npy (`<V2`, as ml_dtypes saves bfloat16) is not {to}"),
            w => format!("a {w}-byte void .npy (`|V{w}`, as ml_dtypes saves float8) is not {to}"),
        }))
    }
}

mod float8;
mod npy;
mod npz;
mod text;
pub use npy::{
    is_void_descr, npy_stores_as_void, npy_supports, read_npy, void_reads_as, write_npy,
};
pub use npz::read_npz;
pub use text::{LITERAL_LIMIT, json_values, parse_literal, parse_value};

fn bad(what: &str, why: String) -> Error {
    Error::InvalidArgument(format!("{what}: {why}"))
}

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
    fn rows_cut_along_the_leading_dimension_and_refuse_past_the_end() {
        let h = HostData {
            dtype: ElementType::S32,
            dims: vec![3, 2],
            bytes: (0..6i32).flat_map(|v| v.to_le_bytes()).collect(),
        };
        let r = h.rows(1, 2).unwrap();
        assert_eq!(r.dims, [2, 2]);
        assert_eq!(
            r.bytes,
            (2..6i32).flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()
        );
        assert!(h.rows(2, 2).is_err());
        assert!(h.rows(usize::MAX, 2).is_err());
        let scalar = HostData {
            dtype: ElementType::S32,
            dims: vec![],
            bytes: vec![0; 4],
        };
        assert!(scalar.rows(0, 1).is_err());
    }

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

    #[test]
    fn npy_round_trips_every_numpy_dtype() {
        // Void-stored types (bf16, the 8-bit floats) come back as their width's default type,
        // and are the type they were once a caller says so.
        for dtype in ElementType::ALL {
            let n = 6;
            let data = HostData {
                dtype,
                dims: vec![2, 3],
                bytes: (0..n * dtype.byte_size()).map(|i| (i % 2) as u8).collect(),
            };
            let back = read_npy(&write_npy(&data).unwrap()).unwrap();
            assert_eq!(back.retyped_void(dtype).unwrap(), data, "{dtype}");
        }
        // A void of one width is never another width's type, nor a type NumPy has.
        let f8 = read_npy(
            &write_npy(&HostData {
                dtype: ElementType::F8E5M2,
                dims: vec![2],
                bytes: vec![0x3c, 0xc0],
            })
            .unwrap(),
        )
        .unwrap();
        for to in [ElementType::BF16, ElementType::U8, ElementType::S8] {
            let e = f8.clone().retyped_void(to).unwrap_err().to_string();
            assert!(e.contains("1-byte void"), "{e}");
        }
        let scalar = HostData {
            dtype: ElementType::F64,
            dims: vec![],
            bytes: 2.5f64.to_le_bytes().to_vec(),
        };
        assert_eq!(read_npy(&write_npy(&scalar).unwrap()).unwrap(), scalar);
    }
}
