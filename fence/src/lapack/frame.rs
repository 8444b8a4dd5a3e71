//! A jaxlib-style custom call's frame, read and checked: operand and result buffers with their
//! shapes, scalar attributes by name, and the checks every kernel makes before LAPACK runs
//! (dtypes, shapes, 32-bit LAPACK sizes, batch strides).

use std::ffi::c_void;

use crate::dtype::ElementType;
use crate::ffi::{FrameBuffer, buffers};
use crate::ffi_abi::*;

pub(crate) type Check<T = ()> = std::result::Result<T, String>;

/// A call frame's buffers and scalar attributes.
pub(crate) struct Frame<'a> {
    pub(crate) args: Vec<FrameBuffer<'a>>,
    pub(crate) rets: Vec<FrameBuffer<'a>>,
    attrs: Vec<(&'a [u8], u32, *const c_void)>,
}

impl<'a> Frame<'a> {
    /// Reads `frame`'s buffers and scalar attributes.
    ///
    /// # Safety
    /// `frame` must be the call frame XLA passed to a handler, valid for `'a`.
    pub(crate) unsafe fn read(frame: &'a XlaCallFrame) -> Check<Frame<'a>> {
        // SAFETY: guaranteed by the caller.
        let (args, rets) = unsafe { (buffers(&frame.args)?, buffers(&frame.rets)?) };
        let mut attrs = Vec::new();
        for i in 0..frame.attrs.size.max(0) as usize {
            // SAFETY: the attribute list holds `size` named, typed entries (XLA's, valid now).
            unsafe {
                if *frame.attrs.types.add(i) != XLA_ATTR_SCALAR {
                    continue;
                }
                let name = &**frame.attrs.names.add(i);
                let name = std::slice::from_raw_parts(name.ptr as *const u8, name.len);
                let scalar = &*(*frame.attrs.attrs.add(i) as *const XlaScalar);
                attrs.push((name, scalar.dtype, scalar.value));
            }
        }
        Ok(Frame { args, rets, attrs })
    }

    fn scalar(&self, name: &str, dtype: u32, kind: &str) -> Check<*const c_void> {
        let (_, found, value) = (self.attrs.iter())
            .find(|(n, _, _)| *n == name.as_bytes())
            .ok_or_else(|| format!("missing the `{name}` attribute ({kind})"))?;
        if *found != dtype {
            return Err(format!("attribute `{name}` must be {kind}"));
        }
        Ok(*value)
    }

    /// A character attribute (`uplo = 76 : ui8`), which must be one of `allowed`.
    pub(crate) fn char_attr(&self, name: &str, allowed: &[u8]) -> Check<u8> {
        let value = self.scalar(name, XLA_DTYPE_U8, "a ui8 character code")?;
        // SAFETY: a u8 scalar attribute's value points at one byte, valid during the call.
        let c = unsafe { *(value as *const u8) };
        if !allowed.contains(&c) {
            let allowed: Vec<String> = allowed
                .iter()
                .map(|&a| format!("'{}'", a as char))
                .collect();
            return Err(format!(
                "attribute `{name}` is {c} ('{}'); this kernel takes {}",
                (c as char).escape_default(),
                allowed.join(", ")
            ));
        }
        Ok(c)
    }

    /// An `i32` attribute (`low = 1 : i32`).
    pub(crate) fn i32_attr(&self, name: &str) -> Check<i32> {
        let value = self.scalar(name, XLA_DTYPE_S32, "an i32")?;
        // SAFETY: an s32 scalar attribute's value points at an i32, valid during the call.
        Ok(unsafe { *(value as *const i32) })
    }

    /// A boolean attribute (`left = true`).
    pub(crate) fn bool_attr(&self, name: &str) -> Check<bool> {
        let value = self.scalar(name, XLA_DTYPE_PRED, "a boolean")?;
        // SAFETY: a pred scalar attribute's value points at one byte, valid during the call.
        Ok(unsafe { *(value as *const u8) } != 0)
    }

    /// Exactly `args` operands and `rets` results.
    pub(crate) fn arity(&self, args: usize, rets: usize) -> Check {
        if self.args.len() != args || self.rets.len() != rets {
            return Err(format!(
                "takes {args} operand(s) and {rets} result(s); the call has {} and {}",
                self.args.len(),
                self.rets.len()
            ));
        }
        Ok(())
    }
}

/// The shape `batch ++ tail`.
pub(crate) fn dims(batch: &[i64], tail: &[i64]) -> Vec<i64> {
    batch.iter().chain(tail).copied().collect()
}

/// Checks that `buffer` is `dtype[dims]`; `what` names it in the message.
pub(crate) fn expect(
    buffer: &FrameBuffer<'_>,
    dtype: ElementType,
    dims: &[i64],
    what: &str,
) -> Check {
    if buffer.dtype != dtype || buffer.dims != dims {
        return Err(format!(
            "{what} must be {dtype}{dims:?}; the call has {}{:?}",
            buffer.dtype, buffer.dims
        ));
    }
    Ok(())
}

/// A batch of matrices of `dtype`: the batch dims, rows and columns (rank at least 2).
pub(crate) fn matrices<'b>(
    buffer: &FrameBuffer<'b>,
    dtype: ElementType,
    what: &str,
) -> Check<(&'b [i64], i64, i64)> {
    if buffer.dtype != dtype {
        return Err(format!(
            "{what} must be {dtype}; the call has {}",
            buffer.dtype
        ));
    }
    let rank = buffer.dims.len();
    if rank < 2 {
        return Err(format!(
            "{what} must be a matrix or a batch of them (rank >= 2); the call has {:?}",
            buffer.dims
        ));
    }
    let (batch, matrix) = buffer.dims.split_at(rank - 2);
    for &d in matrix {
        lapack_int(d, what)?;
    }
    Ok((batch, matrix[0], matrix[1]))
}

/// A size as LAPACK's 32-bit integer.
pub(crate) fn lapack_int(n: i64, what: &str) -> Check<i32> {
    i32::try_from(n).map_err(|_| format!("{what}: {n} does not fit LAPACK's 32-bit sizes"))
}

/// The number of problems in a batch.
pub(crate) fn batch_count(batch: &[i64]) -> usize {
    batch.iter().product::<i64>().max(0) as usize
}

/// `buffer`'s data as `*mut T`, advanced by `index * step` elements.
pub(crate) fn at<T>(buffer: &FrameBuffer<'_>, index: usize, step: i64) -> *mut T {
    let offset = index * step.max(0) as usize;
    (buffer.data as *mut T).wrapping_add(offset)
}

/// Makes `to` hold `from`'s values (an aliased result is the operand's own memory: no copy).
pub(crate) fn copy_operand(from: &FrameBuffer<'_>, to: &FrameBuffer<'_>) {
    if from.data != to.data && from.len > 0 {
        // SAFETY: both are XLA buffers of `len` bytes with the same dtype and dims (checked by
        // the caller); `copy` tolerates any overlap.
        unsafe { std::ptr::copy(from.data, to.data, from.len) }
    }
}

/// Zeroes a result the routine does not write (a job of 'N'), so it never returns stale memory.
pub(crate) fn zero(buffer: &FrameBuffer<'_>) {
    if buffer.len > 0 {
        // SAFETY: an XLA result buffer of `len` bytes, ours to write during the call.
        unsafe { std::ptr::write_bytes(buffer.data, 0, buffer.len) }
    }
}

/// Sets `len` elements from `start` to `value`: an output the routine did not compute (a
/// refused input), so it never returns stale memory.
///
/// # Safety
/// `start..start + len` must lie in a result buffer that is ours to write during the call.
pub(crate) unsafe fn fill<V: Copy>(start: *mut V, len: i64, value: V) {
    for j in 0..len.max(0) as usize {
        // SAFETY: in range, by the caller's promise.
        unsafe { start.add(j).write(value) };
    }
}

/// Writes the n x n identity at `start` (an empty factorization's orthogonal factor).
///
/// # Safety
/// As `fill`, for `n * n` elements.
pub(crate) unsafe fn identity<T: super::Scalar>(start: *mut T, n: i64) {
    // SAFETY: the caller's promise, for n * n elements.
    unsafe { fill(start, n * n, T::default()) };
    for j in 0..n.max(0) as usize {
        // SAFETY: the diagonal of that n x n matrix.
        unsafe { start.add(j * n as usize + j).write(T::ONE) };
    }
}

/// Whether all `len` elements from `start` are finite. LAPACK's scaling (`?lascl`) and
/// balancing (`?gebal`) reject NaN or infinity through XERBLA, whose reference form ends the
/// process (exit status 0), and `?gesvd` has been seen iterating forever on an infinity.
///
/// # Safety
/// `start..start + len` must be readable.
pub(crate) unsafe fn all_finite<T: super::Scalar>(start: *const T, len: i64) -> bool {
    // SAFETY: readable, by the caller's promise.
    (0..len.max(0) as usize).all(|j| unsafe { *start.add(j) }.is_finite())
}

/// A word for a Fortran by-reference argument.
pub(crate) fn by_ref<T>(value: &T) -> usize {
    value as *const T as usize
}

/// A word for a Fortran by-reference argument the routine writes (`info`, a query's answer).
pub(crate) fn by_mut<T>(value: &mut T) -> usize {
    value as *mut T as usize
}

/// A workspace length from a query's answer, rounded up (single-precision answers can round
/// below the true size) and at least 1.
pub(crate) fn work_len(answer: f64) -> Check<i32> {
    let n = (answer * (1.0 + 1e-6)).ceil().max(1.0) + 1.0;
    if n > i32::MAX as f64 {
        return Err(format!(
            "LAPACK asks for a {n}-element workspace, above 32-bit sizes"
        ));
    }
    Ok(n as i32)
}

/// The batch and order of a batch of square matrices of `T`.
pub(crate) fn square<'b, T: super::Scalar>(x: &FrameBuffer<'b>) -> Check<(&'b [i64], i64)> {
    let (batch, m, n) = matrices(x, T::TYPE, "operand 0")?;
    if m != n {
        return Err(format!("needs square matrices; the call has {m} x {n}"));
    }
    Ok((batch, n))
}

/// A workspace of `len` (at least 1) default values.
pub(crate) fn workspace<V: Copy + Default>(len: i32) -> Vec<V> {
    vec![V::default(); len.max(1) as usize]
}

/// Asks LAPACK routine `f` how much workspace it wants: `words(work, lwork, info)` gives the
/// call's words with null matrices and those three where the routine takes them. Returns a
/// workspace of that many elements (rounded up) and the length to tell LAPACK.
///
/// # Safety
/// `f` must be a LAPACK routine whose query form takes exactly the words `words` returns, with
/// `work`, `lwork` and `info` where it reads and writes them; every other address must be null
/// (a matrix a query does not touch) or live.
pub(crate) unsafe fn query_workspace<T: super::Scalar>(
    f: usize,
    words: impl FnOnce(usize, usize, usize) -> Vec<usize>,
) -> Check<(Vec<T>, i32)> {
    let (mut answer, query, mut info) = (T::default(), -1i32, 0i32);
    let args = words(by_mut(&mut answer), by_ref(&query), by_mut(&mut info));
    // SAFETY: guaranteed by the caller.
    unsafe { super::library::call(f, &args) };
    let lwork = work_len(answer.real())?;
    Ok((workspace::<T>(lwork), lwork))
}
