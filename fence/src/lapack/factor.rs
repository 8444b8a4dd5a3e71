//! The factorisation and solver kernels: triangular solve (`trsm`), LU (`getrf`), QR (`geqrf`,
//! `geqp3`, `orgqr`/`ungqr`, `ormqr`/`unmqr`), Cholesky (`potrf`) and tridiagonal solve
//! (`gtsv`). Each checks the frame against jaxlib's signature, then loops over the batch.

use super::frame::{
    Check, Frame, at, batch_count, by_mut, by_ref, copy_operand, dims, expect, lapack_int,
    matrices, query_workspace, square,
};
use super::library::{Lapack, call as fortran};
use super::{Kernel, Scalar, routine};
use crate::dtype::ElementType::S32;

/// `lapack_?trsm_ffi`: solves a triangular system in place of the right-hand sides.
pub(crate) struct Trsm;

impl Kernel for Trsm {
    const REAL_NAME: &'static str = "trsm";
    const COMPLEX_NAME: &'static str = "trsm";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        // Older exports pass `alpha` as a third, scalar operand.
        if call.args.len() == 3 {
            call.arity(3, 1)?;
        } else {
            call.arity(2, 1)?;
        }
        let (a, b, out) = (&call.args[0], &call.args[1], &call.rets[0]);
        let (batch, m, n) = matrices(b, T::TYPE, "operand 1 (the right-hand sides)")?;
        let side = call.char_attr("side", b"LR")?;
        let uplo = call.char_attr("uplo", b"LU")?;
        let trans = call.char_attr("trans_x", b"NTC")?;
        let diag = call.char_attr("diag", b"NU")?;
        let k = if side == b'L' { m } else { n };
        expect(
            a,
            T::TYPE,
            &dims(batch, &[k, k]),
            "operand 0 (the triangular matrix)",
        )?;
        expect(out, T::TYPE, b.dims, "result 0")?;
        let mut alpha = T::ONE;
        if let Some(given) = call.args.get(2) {
            expect(given, T::TYPE, &[], "operand 2 (alpha)")?;
            // SAFETY: a scalar buffer of `T` (checked above).
            alpha = unsafe { *(given.data as *const T) };
        }
        copy_operand(b, out);
        if m == 0 || n == 0 {
            return Ok(());
        }
        let f = routine::<Self, T>(lapack)?;
        let (mi, ni) = (m as i32, n as i32);
        let (lda, ldb) = (k as i32, mi);
        for i in 0..batch_count(batch) {
            let (a_i, b_i) = (at::<T>(a, i, k * k), at::<T>(out, i, m * n));
            // SAFETY: dtrsm's 11 arguments and 4 character lengths; the matrices are this
            // batch entry's, of the checked shapes, with leading dimensions at least 1.
            unsafe {
                fortran(
                    f,
                    &[
                        by_ref(&side),
                        by_ref(&uplo),
                        by_ref(&trans),
                        by_ref(&diag),
                        by_ref(&mi),
                        by_ref(&ni),
                        by_ref(&alpha),
                        a_i as usize,
                        by_ref(&lda),
                        b_i as usize,
                        by_ref(&ldb),
                        1,
                        1,
                        1,
                        1,
                    ],
                )
            };
        }
        Ok(())
    }
}

/// `lapack_?getrf_ffi`: LU with partial pivoting; pivots are LAPACK's (1-based).
pub(crate) struct Getrf;

impl Kernel for Getrf {
    const REAL_NAME: &'static str = "getrf";
    const COMPLEX_NAME: &'static str = "getrf";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(1, 3)?;
        let (x, out, ipiv, info) = (&call.args[0], &call.rets[0], &call.rets[1], &call.rets[2]);
        let (batch, m, n) = matrices(x, T::TYPE, "operand 0")?;
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(ipiv, S32, &dims(batch, &[m.min(n)]), "result 1 (pivots)")?;
        expect(info, S32, batch, "result 2 (info)")?;
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let (mi, ni, lda) = (m as i32, n as i32, (m as i32).max(1));
        for i in 0..batch_count(batch) {
            // SAFETY: dgetrf's 6 arguments over this batch entry's checked buffers.
            unsafe {
                fortran(
                    f,
                    &[
                        by_ref(&mi),
                        by_ref(&ni),
                        at::<T>(out, i, m * n) as usize,
                        by_ref(&lda),
                        at::<i32>(ipiv, i, m.min(n)) as usize,
                        at::<i32>(info, i, 1) as usize,
                    ],
                )
            };
        }
        Ok(())
    }
}

/// `lapack_?geqrf_ffi`: Householder QR (R above the diagonal, reflectors below, and `tau`).
pub(crate) struct Geqrf;

impl Kernel for Geqrf {
    const REAL_NAME: &'static str = "geqrf";
    const COMPLEX_NAME: &'static str = "geqrf";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(1, 2)?;
        let (x, out, tau) = (&call.args[0], &call.rets[0], &call.rets[1]);
        let (batch, m, n) = matrices(x, T::TYPE, "operand 0")?;
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(tau, T::TYPE, &dims(batch, &[m.min(n)]), "result 1 (tau)")?;
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let (mi, ni, lda) = (m as i32, n as i32, (m as i32).max(1));
        let words = |a: usize, tau: usize, work: usize, lwork: usize, info: usize| {
            vec![
                by_ref(&mi),
                by_ref(&ni),
                a,
                by_ref(&lda),
                tau,
                work,
                lwork,
                info,
            ]
        };
        // SAFETY: ?geqrf's query: 8 words, null matrices.
        let (mut work, lwork) = unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, w, l, i)) }?;
        let mut info = 0i32;
        for i in 0..batch_count(batch) {
            let args = words(
                at::<T>(out, i, m * n) as usize,
                at::<T>(tau, i, m.min(n)) as usize,
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                by_mut(&mut info),
            );
            // SAFETY: ?geqrf's 8 arguments over this batch entry's checked buffers and a
            // workspace of the size LAPACK asked for.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}

/// `lapack_?geqp3_ffi`: QR with column pivoting; `jpvt` in and out (1-based, 0 = free).
pub(crate) struct Geqp3;

impl Kernel for Geqp3 {
    const REAL_NAME: &'static str = "geqp3";
    const COMPLEX_NAME: &'static str = "geqp3";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(2, 3)?;
        let (x, jpvt) = (&call.args[0], &call.args[1]);
        let (out, jpvt_out, tau) = (&call.rets[0], &call.rets[1], &call.rets[2]);
        let (batch, m, n) = matrices(x, T::TYPE, "operand 0")?;
        expect(jpvt, S32, &dims(batch, &[n]), "operand 1 (jpvt)")?;
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(jpvt_out, S32, jpvt.dims, "result 1 (jpvt)")?;
        expect(tau, T::TYPE, &dims(batch, &[m.min(n)]), "result 2 (tau)")?;
        copy_operand(x, out);
        copy_operand(jpvt, jpvt_out);
        let f = routine::<Self, T>(lapack)?;
        let (mi, ni, lda) = (m as i32, n as i32, (m as i32).max(1));
        let mut rwork = vec![T::Real::default(); 2 * n as usize + 1];
        let rwork = rwork.as_mut_ptr() as usize;
        // ?geqp3's words; the complex routine takes `rwork` (2n reals) before `info`.
        let words = |a: usize, jpvt: usize, tau: usize, work: usize, lwork: usize, info: usize| {
            let mut w = vec![
                by_ref(&mi),
                by_ref(&ni),
                a,
                by_ref(&lda),
                jpvt,
                tau,
                work,
                lwork,
            ];
            if T::IS_COMPLEX {
                w.push(rwork);
            }
            w.push(info);
            w
        };
        // SAFETY: ?geqp3's query (9 words, 10 for complex), null matrices.
        let (mut work, lwork) =
            unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, 0, w, l, i)) }?;
        let mut info = 0i32;
        for i in 0..batch_count(batch) {
            let args = words(
                at::<T>(out, i, m * n) as usize,
                at::<i32>(jpvt_out, i, n) as usize,
                at::<T>(tau, i, m.min(n)) as usize,
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                by_mut(&mut info),
            );
            // SAFETY: dgeqp3's 9 arguments (zgeqp3's 10, with `rwork` of 2n reals) over this
            // batch entry's checked buffers and a workspace of the size LAPACK asked for.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}

/// `lapack_?orgqr_ffi` / `lapack_?ungqr_ffi`: forms Q from `geqrf`'s reflectors.
pub(crate) struct Orgqr;

impl Kernel for Orgqr {
    const REAL_NAME: &'static str = "orgqr";
    const COMPLEX_NAME: &'static str = "ungqr";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(2, 1)?;
        let (x, tau, out) = (&call.args[0], &call.args[1], &call.rets[0]);
        let (batch, m, n) = matrices(x, T::TYPE, "operand 0")?;
        let k = *tau.dims.last().unwrap_or(&-1);
        expect(tau, T::TYPE, &dims(batch, &[k]), "operand 1 (tau)")?;
        expect(out, T::TYPE, x.dims, "result 0")?;
        if !(m >= n && n >= k && k >= 0) {
            return Err(format!(
                "needs rows >= columns >= reflectors; the call has {m} x {n} with {k} reflectors"
            ));
        }
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let (mi, ni, ki, lda) = (m as i32, n as i32, lapack_int(k, "tau")?, (m as i32).max(1));
        let words = |a: usize, tau: usize, work: usize, lwork: usize, info: usize| {
            vec![
                by_ref(&mi),
                by_ref(&ni),
                by_ref(&ki),
                a,
                by_ref(&lda),
                tau,
                work,
                lwork,
                info,
            ]
        };
        // SAFETY: ?orgqr's query: 9 words, null matrices.
        let (mut work, lwork) = unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, w, l, i)) }?;
        let mut info = 0i32;
        for i in 0..batch_count(batch) {
            let args = words(
                at::<T>(out, i, m * n) as usize,
                at::<T>(tau, i, k) as usize,
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                by_mut(&mut info),
            );
            // SAFETY: ?orgqr's 9 arguments over this batch entry's checked buffers.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}

/// `lapack_?ormqr_ffi` / `lapack_?unmqr_ffi`: multiplies `c` by Q (or its adjoint) from the left
/// or right, Q given by `geqrf`'s reflectors.
pub(crate) struct Ormqr;

impl Kernel for Ormqr {
    const REAL_NAME: &'static str = "ormqr";
    const COMPLEX_NAME: &'static str = "unmqr";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(3, 1)?;
        let (a, tau, c, out) = (&call.args[0], &call.args[1], &call.args[2], &call.rets[0]);
        let left = call.bool_attr("left")?;
        let transpose = call.bool_attr("transpose")?;
        let (batch, m, n) = matrices(c, T::TYPE, "operand 2 (c)")?;
        let nq = if left { m } else { n };
        let (a_batch, a_rows, a_cols) = matrices(a, T::TYPE, "operand 0 (the reflectors)")?;
        let k = *tau.dims.last().unwrap_or(&-1);
        expect(tau, T::TYPE, &dims(batch, &[k]), "operand 1 (tau)")?;
        if a_batch != batch || a_rows != nq || a_cols < k || k > nq || k < 0 {
            return Err(format!(
                "operand 0 must hold {k} reflectors of length {nq} ({batch:?} batch); the call \
                 has {:?}",
                a.dims
            ));
        }
        expect(out, T::TYPE, c.dims, "result 0")?;
        copy_operand(c, out);
        if m == 0 || n == 0 {
            return Ok(());
        }
        let f = routine::<Self, T>(lapack)?;
        let side = if left { b'L' } else { b'R' };
        let trans = match (transpose, T::IS_COMPLEX) {
            (false, _) => b'N',
            (true, false) => b'T',
            (true, true) => b'C',
        };
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (lda, ldc) = ((nq as i32).max(1), mi.max(1));
        let words = |a: usize, tau: usize, c: usize, work: usize, lwork: usize, info: usize| {
            let head = [
                by_ref(&side),
                by_ref(&trans),
                by_ref(&mi),
                by_ref(&ni),
                by_ref(&ki),
            ];
            [
                &head[..],
                &[
                    a,
                    by_ref(&lda),
                    tau,
                    c,
                    by_ref(&ldc),
                    work,
                    lwork,
                    info,
                    1,
                    1,
                ],
            ]
            .concat()
        };
        // SAFETY: ?ormqr's query: 13 words and 2 lengths, null matrices.
        let (mut work, lwork) =
            unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, 0, w, l, i)) }?;
        let mut info = 0i32;
        for i in 0..batch_count(batch) {
            let args = words(
                at::<T>(a, i, a_rows * a_cols) as usize,
                at::<T>(tau, i, k) as usize,
                at::<T>(out, i, m * n) as usize,
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                by_mut(&mut info),
            );
            // SAFETY: ?ormqr's 13 arguments and 2 character lengths over this batch entry's
            // checked buffers.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}

/// `lapack_?potrf_ffi`: Cholesky; `info` > 0 where a matrix is not positive definite.
pub(crate) struct Potrf;

impl Kernel for Potrf {
    const REAL_NAME: &'static str = "potrf";
    const COMPLEX_NAME: &'static str = "potrf";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(1, 2)?;
        let (x, out, info) = (&call.args[0], &call.rets[0], &call.rets[1]);
        let uplo = call.char_attr("uplo", b"LU")?;
        let (batch, n) = square::<T>(x)?;
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(info, S32, batch, "result 1 (info)")?;
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let (ni, lda) = (n as i32, (n as i32).max(1));
        for i in 0..batch_count(batch) {
            // SAFETY: dpotrf's 5 arguments and 1 character length over this batch entry.
            unsafe {
                fortran(
                    f,
                    &[
                        by_ref(&uplo),
                        by_ref(&ni),
                        at::<T>(out, i, n * n) as usize,
                        by_ref(&lda),
                        at::<i32>(info, i, 1) as usize,
                        1,
                    ],
                )
            };
        }
        Ok(())
    }
}

/// `lapack_?gtsv_ffi`: solves tridiagonal systems. jax's `dl` starts with an unused entry and
/// `du` ends with one, so LAPACK gets `dl + 1`.
pub(crate) struct Gtsv;

impl Kernel for Gtsv {
    const REAL_NAME: &'static str = "gtsv";
    const COMPLEX_NAME: &'static str = "gtsv";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(4, 5)?;
        let b = &call.args[3];
        let (batch, n, nrhs) = matrices(b, T::TYPE, "operand 3 (b)")?;
        let diagonal = dims(batch, &[n]);
        for (i, name) in ["dl", "d", "du"].into_iter().enumerate() {
            expect(
                &call.args[i],
                T::TYPE,
                &diagonal,
                &format!("operand {i} ({name})"),
            )?;
        }
        for i in 0..4 {
            let want = &call.args[i];
            expect(&call.rets[i], T::TYPE, want.dims, &format!("result {i}"))?;
            copy_operand(want, &call.rets[i]);
        }
        let info = &call.rets[4];
        expect(info, S32, batch, "result 4 (info)")?;
        let f = routine::<Self, T>(lapack)?;
        let (ni, nrhs_i, ldb) = (n as i32, nrhs as i32, (n as i32).max(1));
        let (dl, d, du, x) = (&call.rets[0], &call.rets[1], &call.rets[2], &call.rets[3]);
        for i in 0..batch_count(batch) {
            let info_i = at::<i32>(info, i, 1);
            if n == 0 {
                // SAFETY: this batch entry's `info`, an i32 of the checked buffer.
                unsafe { *info_i = 0 };
                continue;
            }
            // SAFETY: dgtsv's 8 arguments: the sub-diagonal from its second entry (n - 1
            // values), the diagonal, the super-diagonal's first n - 1 values, and b.
            unsafe {
                fortran(
                    f,
                    &[
                        by_ref(&ni),
                        by_ref(&nrhs_i),
                        at::<T>(dl, i, n).wrapping_add(1) as usize,
                        at::<T>(d, i, n) as usize,
                        at::<T>(du, i, n) as usize,
                        at::<T>(x, i, n * nrhs) as usize,
                        by_ref(&ldb),
                        info_i as usize,
                    ],
                )
            };
        }
        Ok(())
    }
}
