//! Host data in files: NumPy `.npy` and `.npz` read into and written from [`HostArray`]s, and
//! ml_dtypes' conventions for the types NumPy lacks. (Values as text, the command line's
//! literals and JSON, are the command line's own.)

pub use pjrt_actors_core::HostArray;
use pjrt_actors_core::dtype::ElementType;
/// The bytes a dense `dtype` x `dims` array holds, refusing a shape whose size overflows.
pub use pjrt_actors_core::dtype::byte_size;
use pjrt_actors_core::{Error, Result};

/// The old name of [`HostArray`], the one owned host array type.
#[deprecated(
    note = "renamed `HostArray` (`pjrt_actors::HostArray`): one type for callbacks, serving, sharding and files"
)]
pub type HostData = HostArray;

/// `data` as `to`, where both are stored in `.npy` files as voids of one width (ml_dtypes'
/// convention: a `<V2` is bf16, a `|V1` one of the 8-bit floats, and only the program says
/// which). Anything else is refused, naming the width.
pub fn retyped_void(data: HostArray, to: ElementType) -> Result<HostArray> {
    if data.dtype == to {
        return Ok(data);
    }
    if void_reads_as(data.dtype.byte_size()) == Some(data.dtype)
        && npy_stores_as_void(to)
        && data.dtype.byte_size() == to.byte_size()
    {
        return Ok(HostArray { dtype: to, ..data });
    }
    Err(Error::InvalidArgument(match data.dtype.byte_size() {
        w if void_reads_as(w) != Some(data.dtype) => format!("{} data is not {to}", data.dtype),
        2 => format!("a 2-byte void .npy (`<V2`, as ml_dtypes saves bfloat16) is not {to}"),
        w => format!("a {w}-byte void .npy (`|V{w}`, as ml_dtypes saves float8) is not {to}"),
    }))
}

mod npy;
mod npz;
pub use npy::{
    is_void_descr, npy_stores_as_void, npy_supports, read_npy, void_reads_as, write_npy,
};
pub use npz::read_npz;

fn bad(what: &str, why: String) -> Error {
    Error::InvalidArgument(format!("{what}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trips_every_numpy_dtype() {
        // Void-stored types (bf16, the 8-bit floats) come back as their width's default type,
        // and are the type they were once a caller says so.
        for dtype in ElementType::ALL {
            let n = 6;
            let data = HostArray {
                dtype,
                dims: vec![2, 3],
                bytes: (0..n * dtype.byte_size()).map(|i| (i % 2) as u8).collect(),
            };
            let back = read_npy(&write_npy(&data).unwrap()).unwrap();
            assert_eq!(retyped_void(back, dtype).unwrap(), data, "{dtype}");
        }
        // A void of one width is never another width's type, nor a type NumPy has.
        let f8 = read_npy(
            &write_npy(&HostArray {
                dtype: ElementType::F8E5M2,
                dims: vec![2],
                bytes: vec![0x3c, 0xc0],
            })
            .unwrap(),
        )
        .unwrap();
        for to in [ElementType::BF16, ElementType::U8, ElementType::S8] {
            let e = retyped_void(f8.clone(), to).unwrap_err().to_string();
            assert!(e.contains("1-byte void"), "{e}");
        }
        let scalar = HostArray {
            dtype: ElementType::F64,
            dims: vec![],
            bytes: 2.5f64.to_le_bytes().to_vec(),
        };
        assert_eq!(read_npy(&write_npy(&scalar).unwrap()).unwrap(), scalar);
    }
}
