//! The bytes of one shard: a rectangular block of a row-major host array, cut out for an
//! upload and placed back for a read-back, one contiguous row at a time.

use std::ops::Range;

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut out = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1] * shape[i + 1];
    }
    out
}

/// The bytes of the block `ranges` of a row-major array of `dims` with `width`-byte elements.
pub fn copy_block(src: &[u8], dims: &[i64], width: usize, ranges: &[Range<i64>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(block_len(ranges) * width);
    walk_block(dims, width, ranges, |at, len| {
        out.extend_from_slice(&src[at..at + len])
    });
    out
}

/// Writes `block` (row-major, the shape of `ranges`) into the array `dst` of `dims`.
pub fn place_block(
    dst: &mut [u8],
    dims: &[i64],
    width: usize,
    ranges: &[Range<i64>],
    block: &[u8],
) {
    let mut from = 0;
    walk_block(dims, width, ranges, |at, len| {
        dst[at..at + len].copy_from_slice(&block[from..from + len]);
        from += len;
    });
}

fn block_len(ranges: &[Range<i64>]) -> usize {
    ranges.iter().map(|r| (r.end - r.start) as usize).product()
}

/// Calls `run(byte offset, byte length)` for each contiguous run of the block, in order: a
/// run is one row of the innermost dimension.
fn walk_block(
    dims: &[i64],
    width: usize,
    ranges: &[Range<i64>],
    mut run: impl FnMut(usize, usize),
) {
    let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let s = strides(&shape);
    let rank = dims.len();
    if rank == 0 {
        return run(0, width);
    }
    if block_len(ranges) == 0 {
        return;
    }
    let row = (ranges[rank - 1].end - ranges[rank - 1].start) as usize * width;
    let mut index: Vec<i64> = ranges.iter().map(|r| r.start).collect();
    loop {
        let at: usize = (0..rank).map(|d| index[d] as usize * s[d]).sum::<usize>() * width;
        run(at, row);
        // The next row: count up the outer dimensions.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < ranges[d].end {
                break;
            }
            index[d] = ranges[d].start;
        }
    }
}
