//! The SVD kernels: `gesdd` (divide and conquer) and `gesvd` (QR iteration), which share their
//! checks and one batch loop; U and V^H are computed for modes 'A' and 'S', not for 'N'. A
//! matrix with a NaN or infinity never reaches LAPACK (its XERBLA would end the process).

use super::frame::{
    Check, Frame, all_finite, at, batch_count, by_ref, copy_operand, dims, expect, fill, identity,
    matrices, query_workspace, zero,
};
use super::library::{Lapack, call as fortran};
use super::{Kernel, Scalar, routine};
use crate::dtype::ElementType::S32;

/// The SVD kernels' shared checks: batch, rows, columns, and the rows of U's and V^H's
/// matrices (`mode` 'A': m x m and n x n; 'S': m x k and k x n; 'N': not computed).
struct SvdShape<'b> {
    batch: &'b [i64],
    m: i64,
    n: i64,
    u: (i64, i64),
    vt: (i64, i64),
}

fn svd_shape<'b, T: Scalar>(call: &Frame<'b>, mode: u8) -> Check<SvdShape<'b>> {
    call.arity(1, 5)?;
    let x = &call.args[0];
    let (batch, m, n) = matrices(x, T::TYPE, "operand 0")?;
    let k = m.min(n);
    expect(&call.rets[0], T::TYPE, x.dims, "result 0")?;
    expect(
        &call.rets[1],
        T::REAL_TYPE,
        &dims(batch, &[k]),
        "result 1 (singular values)",
    )?;
    expect(&call.rets[4], S32, batch, "result 4 (info)")?;
    let (u, vt) = match mode {
        b'A' => ((m, m), (n, n)),
        b'S' => ((m, k), (k, n)),
        _ => {
            let (_, ur, uc) = matrices(&call.rets[2], T::TYPE, "result 2 (u)")?;
            let (_, vr, vc) = matrices(&call.rets[3], T::TYPE, "result 3 (vt)")?;
            ((ur, uc), (vr, vc))
        }
    };
    expect(
        &call.rets[2],
        T::TYPE,
        &dims(batch, &[u.0, u.1]),
        "result 2 (u)",
    )?;
    expect(
        &call.rets[3],
        T::TYPE,
        &dims(batch, &[vt.0, vt.1]),
        "result 3 (vt)",
    )?;
    Ok(SvdShape { batch, m, n, u, vt })
}

/// `lapack_?gesdd_ffi`: SVD by divide and conquer.
pub(crate) struct Gesdd;

impl Kernel for Gesdd {
    const REAL_NAME: &'static str = "gesdd";
    const COMPLEX_NAME: &'static str = "gesdd";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        // 'O' (overwrite x with part of U) is refused, as jaxlib does.
        let mode = call.char_attr("mode", b"ASN")?;
        let s = svd_shape::<T>(call, mode)?;
        svd::<T>(call, lapack, &s, routine::<Self, T>(lapack)?, mode, true)
    }
}

/// `lapack_?gesvd_ffi`: SVD by QR iteration.
pub(crate) struct Gesvd;

impl Kernel for Gesvd {
    const REAL_NAME: &'static str = "gesvd";
    const COMPLEX_NAME: &'static str = "gesvd";
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> Check {
        let mode = call.char_attr("mode", b"ASN")?;
        let s = svd_shape::<T>(call, mode)?;
        svd::<T>(call, lapack, &s, routine::<Self, T>(lapack)?, mode, false)
    }
}

/// Runs `?gesdd` (`divide`) or `?gesvd` over the batch.
fn svd<T: Scalar>(
    call: &Frame<'_>,
    _lapack: &Lapack,
    s: &SvdShape<'_>,
    f: usize,
    mode: u8,
    divide: bool,
) -> Check {
    let (x, out, sv, u, vt, info) = (
        &call.args[0],
        &call.rets[0],
        &call.rets[1],
        &call.rets[2],
        &call.rets[3],
        &call.rets[4],
    );
    copy_operand(x, out);
    if mode == b'N' {
        zero(u);
        zero(vt);
    }
    let (m, n) = (s.m, s.n);
    let k = m.min(n);
    let (mi, ni, lda, ldu) = (m as i32, n as i32, (m as i32).max(1), (m as i32).max(1));
    let ldvt = (s.vt.0 as i32).max(1);
    let mut iwork = vec![0i32; 8 * k as usize + 1];
    let rwork_len = if !T::IS_COMPLEX {
        1
    } else if !divide {
        5 * k + 1
    } else if mode == b'N' {
        7 * k + 1
    } else {
        (5 * k * k + 5 * k).max(2 * m.max(n) * k + 2 * k * k + k) + 1
    };
    let mut rwork = vec![T::Real::default(); rwork_len as usize];
    let (rwork_ptr, iwork_ptr) = (rwork.as_mut_ptr() as usize, iwork.as_mut_ptr() as usize);
    // The words of one call: the jobs, sizes and matrices, then the workspaces, `info`, and
    // the character lengths. `?gesdd` has one job, `?gesvd` two.
    let words =
        |a: usize, s_: usize, u_: usize, vt_: usize, work: usize, lwork: usize, info: usize| {
            let mut w = vec![by_ref(&mode)];
            if !divide {
                w.push(by_ref(&mode));
            }
            w.extend([
                by_ref(&mi),
                by_ref(&ni),
                a,
                by_ref(&lda),
                s_,
                u_,
                by_ref(&ldu),
                vt_,
            ]);
            w.extend([by_ref(&ldvt), work, lwork]);
            if T::IS_COMPLEX {
                w.push(rwork_ptr);
            }
            if divide {
                w.push(iwork_ptr);
            }
            w.push(info);
            w.push(1);
            if !divide {
                w.push(1);
            }
            w
        };
    // SAFETY: ?gesdd's or ?gesvd's query with valid jobs and leading dimensions, null matrices.
    let (mut work, lwork) =
        unsafe { query_workspace::<T>(f, |w, l, i| words(0, 0, 0, 0, w, l, i)) }?;
    let (u_step, vt_step) = (s.u.0 * s.u.1, s.vt.0 * s.vt.1);
    for i in 0..batch_count(s.batch) {
        let info_i = at::<i32>(info, i, 1);
        let (u_i, vt_i) = (at::<T>(u, i, u_step), at::<T>(vt, i, vt_step));
        if k == 0 {
            // LAPACK returns at once and writes no factor: an empty matrix's full U and V^H
            // are identities (modes 'S' and 'N' have none to write).
            if mode == b'A' {
                // SAFETY: this batch entry's m x m U and n x n V^H (checked shapes).
                unsafe { identity(u_i, m) };
                unsafe { identity(vt_i, n) };
            }
            // SAFETY: this batch entry's `info`.
            unsafe { *info_i = 0 };
            continue;
        }
        // SAFETY: this batch entry's m x n copy of the operand.
        if !unsafe { all_finite(at::<T>(out, i, m * n), m * n) } {
            // As jaxlib's `geev`: `info` -4, and NaN in every output the routine would write.
            // SAFETY: this batch entry's checked results.
            unsafe {
                *info_i = -4;
                fill(at::<T::Real>(sv, i, k), k, T::REAL_NAN);
                if mode != b'N' {
                    fill(u_i, u_step, T::NAN);
                    fill(vt_i, vt_step, T::NAN);
                }
            }
            continue;
        }
        let args = words(
            at::<T>(out, i, m * n) as usize,
            at::<T::Real>(sv, i, k) as usize,
            u_i as usize,
            vt_i as usize,
            work.as_mut_ptr() as usize,
            by_ref(&lwork),
            info_i as usize,
        );
        // SAFETY: ?gesdd's 14 (complex 15) arguments plus one length, or ?gesvd's 14 (15) plus
        // two, over this batch entry's checked buffers; U and V^H have the shapes `mode` needs
        // and the workspaces the sizes LAPACK documents or asked for.
        unsafe { fortran(f, &args) };
    }
    Ok(())
}
