//! The reduction kernels: Hessenberg (`gehrd`) and tridiagonal (`sytrd`/`hetrd`), each in
//! place of the matrix with its Householder scalars.

use super::frame::{
    Check, Frame, at, batch_count, by_ref, copy_operand, dims, expect, query_workspace, square,
};
use super::library::{Lapack, call as fortran};
use super::{Kernel, Scalar, routine};
use crate::dtype::ElementType::S32;

/// `lapack_?gehrd_ffi`: Hessenberg reduction of rows and columns `low..=high` (1-based).
pub(crate) struct Gehrd;

impl Kernel for Gehrd {
    const REAL_NAME: &'static str = "gehrd";
    const COMPLEX_NAME: &'static str = "gehrd";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(1, 3)?;
        let (x, out, tau, info) = (&call.args[0], &call.rets[0], &call.rets[1], &call.rets[2]);
        let (low, high) = (call.i32_attr("low")?, call.i32_attr("high")?);
        let (batch, n) = square::<T>(x)?;
        let ni = n as i32;
        if !(1 <= low && low <= ni.max(1) && low.min(ni) <= high && high <= ni) {
            return Err(format!(
                "needs 1 <= low <= max(1, n) and min(low, n) <= high <= n; the call has low \
                 {low}, high {high}, n {n}"
            ));
        }
        let reflectors = (n - 1).max(0);
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(tau, T::TYPE, &dims(batch, &[reflectors]), "result 1 (tau)")?;
        expect(info, S32, batch, "result 2 (info)")?;
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let lda = ni.max(1);
        let words = |a: usize, tau: usize, work: usize, lwork: usize, info: usize| {
            let sizes = [by_ref(&ni), by_ref(&low), by_ref(&high)];
            [&sizes[..], &[a, by_ref(&lda), tau, work, lwork, info]].concat()
        };
        // SAFETY: ?gehrd's query: 9 words, null matrices.
        let (mut work, lwork) = unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, w, l, i)) }?;
        for i in 0..batch_count(batch) {
            let args = words(
                at::<T>(out, i, n * n) as usize,
                at::<T>(tau, i, reflectors) as usize,
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                at::<i32>(info, i, 1) as usize,
            );
            // SAFETY: ?gehrd's 9 arguments over this batch entry's checked buffers, with
            // `low` and `high` in the range LAPACK accepts.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}

/// `lapack_?sytrd_ffi` / `lapack_?hetrd_ffi`: reduction of a symmetric (Hermitian) matrix to
/// real tridiagonal form.
pub(crate) struct Sytrd;

impl Kernel for Sytrd {
    const REAL_NAME: &'static str = "sytrd";
    const COMPLEX_NAME: &'static str = "hetrd";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(1, 5)?;
        let uplo = call.char_attr("uplo", b"LU")?;
        let x = &call.args[0];
        let (batch, n) = square::<T>(x)?;
        let off = (n - 1).max(0);
        let [out, d, e, tau, info] = [0, 1, 2, 3, 4].map(|r| &call.rets[r]);
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(d, T::REAL_TYPE, &dims(batch, &[n]), "result 1 (diagonal)")?;
        expect(
            e,
            T::REAL_TYPE,
            &dims(batch, &[off]),
            "result 2 (off-diagonal)",
        )?;
        expect(tau, T::TYPE, &dims(batch, &[off]), "result 3 (tau)")?;
        expect(info, S32, batch, "result 4 (info)")?;
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let (ni, lda) = (n as i32, (n as i32).max(1));
        let words = |a: usize, ptrs: [usize; 3], work: usize, lwork: usize, info: usize| {
            let [d, e, tau] = ptrs;
            vec![
                by_ref(&uplo),
                by_ref(&ni),
                a,
                by_ref(&lda),
                d,
                e,
                tau,
                work,
                lwork,
                info,
                1,
            ]
        };
        // SAFETY: ?sytrd's query: 10 words and a length, null matrices.
        let (mut work, lwork) =
            unsafe { query_workspace::<T>(f, |w, l, i| words(0, [0; 3], w, l, i)) }?;
        for i in 0..batch_count(batch) {
            let ptrs = [
                at::<T::Real>(d, i, n) as usize,
                at::<T::Real>(e, i, off) as usize,
                at::<T>(tau, i, off) as usize,
            ];
            let args = words(
                at::<T>(out, i, n * n) as usize,
                ptrs,
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                at::<i32>(info, i, 1) as usize,
            );
            // SAFETY: ?sytrd's 10 arguments and 1 length over this batch entry's checked
            // buffers and a workspace of the size LAPACK asked for.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}
