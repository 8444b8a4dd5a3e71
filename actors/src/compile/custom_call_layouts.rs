//! The layouts of jaxlib's LAPACK custom calls, checked on the compiled module before anything
//! runs: the kernels read and write column-major matrices and row-major batches of vectors and
//! scalars (batch dims outermost), the layouts jax's lowering always writes; any other layout
//! would factor the transpose in silence.

use pjrt_actors_formats::protos::xla::{HloModuleProto, ShapeProto};

use crate::error::{Error, Result};

/// jaxlib's layout for a rank-`r` array: the two matrix dims minor-most, column-major, then
/// the batch dims from the innermost out (`[r-2, r-1, r-3, ..., 0]`; `[0]` for a vector).
pub fn column_major(rank: usize) -> Vec<i64> {
    let r = rank as i64;
    match rank {
        0 => vec![],
        1 => vec![0],
        _ => [r - 2, r - 1].into_iter().chain((0..r - 2).rev()).collect(),
    }
}

/// jaxlib's layout for a batch of vectors or scalars: descending, row-major.
fn descending(rank: usize) -> Vec<i64> {
    (0..rank as i64).rev().collect()
}

/// jaxlib's layout for an array of `rank` in a call whose batch has `batch` dims: a matrix
/// (rank `batch + 2`) is `column_major`, a vector or scalar per batch entry is descending.
pub fn jaxlib_layout(rank: usize, batch: usize) -> Vec<i64> {
    if rank == batch + 2 {
        column_major(rank)
    } else {
        descending(rank)
    }
}

/// Refuses a LAPACK custom call (`lapack_*_ffi`) with any operand or result layout other than
/// `jaxlib_layout`, or with none given (XLA then picks row-major). Every family's operand of
/// the highest rank is a matrix, which gives the batch rank.
pub fn check(module: &HloModuleProto) -> Result<()> {
    let calls = (module.computations.iter())
        .flat_map(|c| &c.instructions)
        .filter(|i| {
            i.opcode == "custom-call"
                && i.custom_call_target.starts_with("lapack_")
                && i.custom_call_target.ends_with("_ffi")
        });
    for call in calls {
        let target = &call.custom_call_target;
        let refuse = |what: String, got: &str| {
            Err(Error::InvalidArgument(format!(
                "custom call {target}: {what} has layout {got}; jaxlib's LAPACK kernels take column-major matrices (minor_to_major [r-2, r-1, r-3, ..., 0]) and row-major batches of vectors, the operand_layouts and result_layouts jax's lowering writes"
            )))
        };
        if call.operand_shapes_with_layout.is_empty() && !call.operand_ids.is_empty() {
            return refuse("operand 0".into(), "none (no operand_layouts)");
        }
        let batch = (call.operand_shapes_with_layout.iter())
            .map(|s| s.dimensions.len())
            .max()
            .unwrap_or(0)
            .saturating_sub(2);
        for (index, shape) in call.operand_shapes_with_layout.iter().enumerate() {
            if let Some(got) = wrong(shape, batch) {
                return refuse(format!("operand {index}"), &got);
            }
        }
        let results = match &call.shape {
            Some(s) if !s.tuple_shapes.is_empty() => s.tuple_shapes.iter().collect(),
            Some(s) => vec![s],
            None => vec![],
        };
        for (index, shape) in results.into_iter().enumerate() {
            if let Some(got) = wrong(shape, batch) {
                return refuse(format!("result {index}"), &got);
            }
        }
    }
    Ok(())
}

/// The layout of `shape` as text, where it is not jaxlib's.
fn wrong(shape: &ShapeProto, batch: usize) -> Option<String> {
    let want = jaxlib_layout(shape.dimensions.len(), batch);
    match &shape.layout {
        Some(l) if l.minor_to_major == want => None,
        // A scalar or vector has one layout whatever is written.
        _ if shape.dimensions.len() < 2 => None,
        Some(l) => Some(format!("minor_to_major {:?}", l.minor_to_major)),
        None => Some("none".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::jaxlib_layout;

    #[test]
    fn jaxlibs_layouts_by_rank_and_batch() {
        // (rank, batch dims, layout): matrices column-major, vectors and scalars descending.
        let table: [(usize, usize, &[i64]); 8] = [
            (0, 0, &[]),
            (1, 0, &[0]),
            (2, 0, &[0, 1]),
            (3, 1, &[1, 2, 0]),
            (4, 2, &[2, 3, 1, 0]),
            (2, 1, &[1, 0]),
            (1, 1, &[0]),
            (3, 2, &[2, 1, 0]),
        ];
        for (rank, batch, want) in table {
            assert_eq!(
                jaxlib_layout(rank, batch),
                want,
                "rank {rank}, batch {batch}"
            );
        }
    }
}
