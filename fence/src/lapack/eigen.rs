//! The eigen kernels: symmetric and Hermitian (`syevd`/`heevd`), general (`geev`, with real
//! eigenvectors unpacked to complex as jaxlib does) and Schur (`gees`).

use super::frame::{
    Check, Frame, at, batch_count, by_mut, by_ref, copy_operand, dims, expect, fill,
    query_workspace, square, work_len, workspace, zero,
};
use super::library::{Lapack, call as fortran};
use super::{Kernel, Scalar, routine};
use crate::dtype::ElementType::S32;

/// `lapack_?syevd_ffi` / `lapack_?heevd_ffi`: eigenvalues (ascending, real) and, with mode
/// 'V', eigenvectors in place of the matrix.
pub(crate) struct Syevd;

impl Kernel for Syevd {
    const REAL_NAME: &'static str = "syevd";
    const COMPLEX_NAME: &'static str = "heevd";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        call.arity(1, 3)?;
        let uplo = call.char_attr("uplo", b"LU")?;
        let mode = call.char_attr("mode", b"VN")?;
        let (x, out, w, info) = (&call.args[0], &call.rets[0], &call.rets[1], &call.rets[2]);
        let (batch, n) = square::<T>(x)?;
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(
            w,
            T::REAL_TYPE,
            &dims(batch, &[n]),
            "result 1 (eigenvalues)",
        )?;
        expect(info, S32, batch, "result 2 (info)")?;
        copy_operand(x, out);
        let f = routine::<Self, T>(lapack)?;
        let (ni, lda) = (n as i32, (n as i32).max(1));
        let words = |a: usize, w_: usize, sizes: [usize; 6], info: usize| {
            let [work, lwork, rwork, lrwork, iwork, liwork] = sizes;
            let mut v = vec![
                by_ref(&mode),
                by_ref(&uplo),
                by_ref(&ni),
                a,
                by_ref(&lda),
                w_,
            ];
            v.extend([work, lwork]);
            if T::IS_COMPLEX {
                v.extend([rwork, lrwork]);
            }
            v.extend([iwork, liwork, info, 1, 1]);
            v
        };
        let (mut work_q, mut rwork_q, mut iwork_q) = (T::default(), T::Real::default(), 0i32);
        let (query, mut query_info) = (-1i32, 0i32);
        let q = by_ref(&query);
        let sizes = [
            by_mut(&mut work_q),
            q,
            by_mut(&mut rwork_q),
            q,
            by_mut(&mut iwork_q),
            q,
        ];
        // SAFETY: a workspace query (all three sizes -1): only the sizes are read.
        unsafe { fortran(f, &words(0, 0, sizes, by_mut(&mut query_info))) };
        let lwork = work_len(work_q.real())?;
        let lrwork = work_len(rwork_q.into())?;
        let liwork = work_len(iwork_q as f64)?;
        let mut work = workspace::<T>(lwork);
        let mut rwork = workspace::<T::Real>(lrwork);
        let mut iwork = workspace::<i32>(liwork);
        for i in 0..batch_count(batch) {
            let sizes = [
                work.as_mut_ptr() as usize,
                by_ref(&lwork),
                rwork.as_mut_ptr() as usize,
                by_ref(&lrwork),
                iwork.as_mut_ptr() as usize,
                by_ref(&liwork),
            ];
            let a = at::<T>(out, i, n * n) as usize;
            let args = words(
                a,
                at::<T::Real>(w, i, n) as usize,
                sizes,
                at::<i32>(info, i, 1) as usize,
            );
            // SAFETY: ?syevd's 11 (?heevd's 13) arguments and 2 lengths over this batch
            // entry's checked buffers and workspaces of the sizes LAPACK asked for.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}

/// Real `?geev` returns a complex pair's eigenvectors as two real columns (`re`, `im`); this
/// writes them as complex columns, `v_j = re + i im` and `v_{j+1} = re - i im`.
fn unpack_eigenvectors<T: Scalar>(n: usize, wi: *const T, packed: &[T], out: *mut T) {
    let mut j = 0;
    while j < n {
        // SAFETY: `wi` holds n values; `out` is n x n complex values (2 n² of `T`), column-
        // major, and `packed` n x n real values.
        unsafe {
            let pair = (*wi.add(j)).real() != 0.0 && j + 1 < n;
            for r in 0..n {
                let re = packed[j * n + r];
                let im = if pair {
                    packed[(j + 1) * n + r]
                } else {
                    T::default()
                };
                *out.add(2 * (j * n + r)) = re;
                *out.add(2 * (j * n + r) + 1) = im;
                if pair {
                    *out.add(2 * ((j + 1) * n + r)) = re;
                    *out.add(2 * ((j + 1) * n + r) + 1) = im.neg();
                }
            }
            j += if pair { 2 } else { 1 };
        }
    }
}

/// `lapack_?geev_ffi`: eigenvalues and left/right eigenvectors of a general matrix. A matrix
/// with a non-finite entry is not given to LAPACK: its `info` is -4, as in jaxlib.
pub(crate) struct Geev;

impl Kernel for Geev {
    const REAL_NAME: &'static str = "geev";
    const COMPLEX_NAME: &'static str = "geev";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        let x = &call.args[0];
        call.arity(1, if T::IS_COMPLEX { 4 } else { 5 })?;
        let jobvl = call.char_attr("compute_left", b"VN")?;
        let jobvr = call.char_attr("compute_right", b"VN")?;
        let (batch, n) = square::<T>(x)?;
        let vector = dims(batch, &[n]);
        let matrix = dims(batch, &[n, n]);
        let (values, vl, vr, info) = if T::IS_COMPLEX {
            expect(&call.rets[0], T::TYPE, &vector, "result 0 (eigenvalues)")?;
            (&call.rets[..1], &call.rets[1], &call.rets[2], &call.rets[3])
        } else {
            expect(&call.rets[0], T::TYPE, &vector, "result 0 (real parts)")?;
            expect(
                &call.rets[1],
                T::TYPE,
                &vector,
                "result 1 (imaginary parts)",
            )?;
            (&call.rets[..2], &call.rets[2], &call.rets[3], &call.rets[4])
        };
        expect(vl, T::COMPLEX_TYPE, &matrix, "the left eigenvectors")?;
        expect(vr, T::COMPLEX_TYPE, &matrix, "the right eigenvectors")?;
        expect(info, S32, batch, "info")?;
        zero(vl);
        zero(vr);
        let f = routine::<Self, T>(lapack)?;
        let (ni, ld) = (n as i32, (n as i32).max(1));
        let size = (n * n) as usize;
        let mut a = vec![T::default(); size.max(1)];
        // Real ?geev writes eigenvectors as real columns into these, unpacked afterwards.
        let mut vl_real = vec![T::default(); if T::IS_COMPLEX { 1 } else { size.max(1) }];
        let mut vr_real = vec![T::default(); if T::IS_COMPLEX { 1 } else { size.max(1) }];
        let mut rwork = vec![T::Real::default(); 2 * n as usize + 1];
        let rwork_ptr = rwork.as_mut_ptr() as usize;
        let words = |a: usize, values: [usize; 2], vl: usize, vr: usize, w: [usize; 2], info| {
            let mut v = vec![by_ref(&jobvl), by_ref(&jobvr), by_ref(&ni), a, by_ref(&ld)];
            v.push(values[0]);
            if !T::IS_COMPLEX {
                v.push(values[1]);
            }
            v.extend([vl, by_ref(&ld), vr, by_ref(&ld), w[0], w[1]]);
            if T::IS_COMPLEX {
                v.push(rwork_ptr);
            }
            v.extend([info, 1, 1]);
            v
        };
        // SAFETY: ?geev's query: only the jobs and sizes are read.
        let (mut work, lwork) =
            unsafe { query_workspace::<T>(f, |w, l, i| words(0, [0, 0], 0, 0, [w, l], i)) }?;
        for i in 0..batch_count(batch) {
            let info_i = at::<i32>(info, i, 1);
            // SAFETY: this batch entry's n x n operand, read into our scratch copy (?geev
            // overwrites its input, which is not a result here).
            unsafe { std::ptr::copy_nonoverlapping(at::<T>(x, i, n * n), a.as_mut_ptr(), size) };
            if !a[..size].iter().all(|v| v.is_finite()) {
                // NaN in every output ?geev would have written, never stale memory.
                // SAFETY: this batch entry's `info`, eigenvalues and eigenvectors.
                unsafe {
                    *info_i = -4;
                    for values in values {
                        fill(at::<T>(values, i, n), n, T::NAN);
                    }
                    // The eigenvectors are complex: two `T`s an element for a real `T`.
                    let len = n * n * if T::IS_COMPLEX { 1 } else { 2 };
                    fill(at::<T>(vl, i, len), len, T::NAN);
                    fill(at::<T>(vr, i, len), len, T::NAN);
                }
                continue;
            }
            let value_ptrs = [
                at::<T>(&values[0], i, n) as usize,
                values.get(1).map_or(0, |w| at::<T>(w, i, n) as usize),
            ];
            let (vl_i, vr_i) = if T::IS_COMPLEX {
                (
                    at::<T>(vl, i, n * n) as usize,
                    at::<T>(vr, i, n * n) as usize,
                )
            } else {
                (vl_real.as_mut_ptr() as usize, vr_real.as_mut_ptr() as usize)
            };
            let w = [work.as_mut_ptr() as usize, by_ref(&lwork)];
            let args = words(
                a.as_mut_ptr() as usize,
                value_ptrs,
                vl_i,
                vr_i,
                w,
                info_i as usize,
            );
            // SAFETY: ?geev's 14 arguments and 2 lengths (complex: with `rwork` of 2n reals
            // in place of the imaginary parts) over our scratch copy, this batch entry's
            // checked results, and a workspace of the size LAPACK asked for.
            unsafe { fortran(f, &args) };
            // SAFETY: this batch entry's `info`, just written.
            if !T::IS_COMPLEX && unsafe { *info_i } == 0 {
                let wi = at::<T>(&values[1], i, n) as *const T;
                let n = n as usize;
                if jobvl == b'V' {
                    unpack_eigenvectors(n, wi, &vl_real, at::<T>(vl, i, 2 * (n * n) as i64));
                }
                if jobvr == b'V' {
                    unpack_eigenvectors(n, wi, &vr_real, at::<T>(vr, i, 2 * (n * n) as i64));
                }
            }
        }
        Ok(())
    }
}

/// `lapack_?gees_ffi`: Schur form in place, Schur vectors, eigenvalues. Sorting eigenvalues is
/// refused, as in jaxlib (no `select` function crosses the custom call).
pub(crate) struct Gees;

impl Kernel for Gees {
    const REAL_NAME: &'static str = "gees";
    const COMPLEX_NAME: &'static str = "gees";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        let x = &call.args[0];
        call.arity(1, if T::IS_COMPLEX { 5 } else { 6 })?;
        let jobvs = call.char_attr("mode", b"VN")?;
        let sort = call
            .char_attr("sort", b"N")
            .map_err(|e| format!("{e} (ordering eigenvalues is not implemented, as in jaxlib)"))?;
        let (batch, n) = square::<T>(x)?;
        let (out, vs) = (&call.rets[0], &call.rets[1]);
        expect(out, T::TYPE, x.dims, "result 0")?;
        expect(vs, T::TYPE, x.dims, "result 1 (Schur vectors)")?;
        let values = if T::IS_COMPLEX { 1 } else { 2 };
        for r in 2..2 + values {
            expect(
                &call.rets[r],
                T::TYPE,
                &dims(batch, &[n]),
                &format!("result {r} (eigenvalues)"),
            )?;
        }
        let (sdim, info) = (&call.rets[2 + values], &call.rets[3 + values]);
        expect(sdim, S32, batch, "the selected-eigenvalue count")?;
        expect(info, S32, batch, "info")?;
        copy_operand(x, out);
        if jobvs == b'N' {
            zero(vs);
        }
        let f = routine::<Self, T>(lapack)?;
        let (ni, ld) = (n as i32, (n as i32).max(1));
        let mut rwork = vec![T::Real::default(); n as usize + 1];
        let rwork_ptr = rwork.as_mut_ptr() as usize;
        let words = |a: usize, sdim: usize, v: [usize; 2], vs: usize, w: [usize; 2], info| {
            let mut out = vec![
                by_ref(&jobvs),
                by_ref(&sort),
                0,
                by_ref(&ni),
                a,
                by_ref(&ld),
            ];
            out.extend([sdim, v[0]]);
            if !T::IS_COMPLEX {
                out.push(v[1]);
            }
            out.extend([vs, by_ref(&ld), w[0], w[1]]);
            if T::IS_COMPLEX {
                out.push(rwork_ptr);
            }
            out.extend([0, info, 1, 1]);
            out
        };
        // SAFETY: ?gees's query: only the jobs and sizes are read.
        let (mut work, lwork) =
            unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, [0, 0], 0, [w, l], i)) }?;
        for i in 0..batch_count(batch) {
            let v = [
                at::<T>(&call.rets[2], i, n) as usize,
                if T::IS_COMPLEX {
                    0
                } else {
                    at::<T>(&call.rets[3], i, n) as usize
                },
            ];
            let args = words(
                at::<T>(out, i, n * n) as usize,
                at::<i32>(sdim, i, 1) as usize,
                v,
                at::<T>(vs, i, n * n) as usize,
                [work.as_mut_ptr() as usize, by_ref(&lwork)],
                at::<i32>(info, i, 1) as usize,
            );
            // SAFETY: ?gees's 15 (complex 16) arguments and 2 lengths; `select` and `bwork`
            // are null, which LAPACK allows when not sorting; the buffers are this batch
            // entry's, checked above.
            unsafe { fortran(f, &args) };
        }
        Ok(())
    }
}
