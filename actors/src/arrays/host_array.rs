//! `HostArray`: a dense array in host memory (element type, dims, bytes), the one owned form
//! of host data: what callbacks return, what serving batches, what sharding splits, what the
//! weights loaders and the command line read.

use crate::error::{Error, Result};

/// A dense host array: element type, dims and bytes (little-endian, major-to-minor).
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray {
    /// The element type.
    pub dtype: crate::dtype::ElementType,
    /// The dimensions (empty for a scalar).
    pub dims: Vec<i64>,
    /// The values' bytes, little-endian, major-to-minor.
    pub bytes: Vec<u8>,
}

impl HostArray {
    /// An array of `values` with `dims`.
    pub fn from_slice<T: crate::pjrt::NativeType>(values: &[T], dims: &[i64]) -> Self {
        HostArray {
            dtype: T::TYPE,
            dims: dims.to_vec(),
            bytes: crate::pjrt::as_bytes(values).to_vec(),
        }
    }

    /// Rows `start..start + n` along the leading dimension, as an array of their own (a
    /// request's rows cut from a recorded batch); rows past the end are an error.
    pub fn rows(&self, start: usize, n: usize) -> Result<HostArray> {
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
        Ok(HostArray {
            dtype: self.dtype,
            dims,
            bytes: self.bytes[start * width..(start + n) * width].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_cut_along_the_leading_dimension_and_checked() {
        let a = HostArray::from_slice(&[1i32, 2, 3, 4, 5, 6], &[3, 2]);
        assert_eq!(
            a.rows(1, 2).unwrap(),
            HostArray::from_slice(&[3i32, 4, 5, 6], &[2, 2])
        );
        assert_eq!(a.rows(3, 0).unwrap().dims, [0, 2]);
        for (start, n) in [(2, 2), (usize::MAX, 2), (4, 0)] {
            assert!(a.rows(start, n).is_err(), "{start}+{n}");
        }
    }
}
