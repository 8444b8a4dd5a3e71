//! Element types and shape arithmetic: what a dtype is called, how wide it is, and the checked
//! byte size of a shape, so a huge shape is an error rather than an overflow.

use crate::error::{Error, Result};

pub use pjrt_actors_formats::dtype::ElementType;

/// The number of elements of `dims`, or an error when a dimension is negative or the count
/// overflows.
pub fn element_count(dims: &[i64]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        let d = usize::try_from(d).map_err(|_| {
            Error::InvalidArgument(format!("negative dimension {d} in shape {dims:?}"))
        })?;
        acc.checked_mul(d).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "shape {dims:?} has more elements than fit in memory"
            ))
        })
    })
}

/// The dense byte size of an array of `dtype` and `dims`, checked for overflow.
pub fn byte_size(dtype: ElementType, dims: &[i64]) -> Result<usize> {
    element_count(dims)?
        .checked_mul(dtype.byte_size())
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a {dtype} array of shape {dims:?} overflows the address space"
            ))
        })
}
