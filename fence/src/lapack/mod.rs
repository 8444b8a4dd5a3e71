//! jaxlib's CPU linear-algebra custom calls (`lapack_sgetrf_ffi`, ...), implemented here as XLA
//! FFI handlers over the system's LAPACK, so that programs `jax.export` produces run unchanged.
//! Names, operands, results, attributes and layouts follow jax's lowering exactly.

mod eigen;
mod factor;
mod frame;
pub(crate) mod library;
mod reduce;
mod svd;

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;

use crate::dtype::ElementType;
use crate::error::Result;
use crate::ffi::{is_execute_stage, make_error_code};
use crate::ffi_abi::*;
use crate::plugin::Plugin;

pub use library::LAPACK_LIBRARY_ENV;

use frame::Frame;
use library::Lapack;

/// A LAPACK element type: `f32`, `f64`, and complex as `[re, im]` pairs (the C layout).
pub(crate) trait Scalar: Copy + Default + Send + 'static {
    /// The real type of the same precision (itself for real types).
    type Real: Copy + Default + PartialOrd + Into<f64> + 'static;
    const TYPE: ElementType;
    const REAL_TYPE: ElementType;
    const COMPLEX_TYPE: ElementType;
    /// The type letter of LAPACK's routine names: s, d, c, z.
    const LETTER: char;
    const IS_COMPLEX: bool;
    const ONE: Self;
    /// A NaN (complex: NaN in both parts), for outputs a refused input leaves uncomputed.
    const NAN: Self;
    const REAL_NAN: Self::Real;
    fn is_finite(self) -> bool;
    fn neg(self) -> Self;
    /// The real part (a workspace query's answer is there).
    fn real(self) -> f64;
}

macro_rules! real_scalar {
    ($t:ty, $ty:ident, $complex:ident, $letter:literal) => {
        impl Scalar for $t {
            type Real = $t;
            const TYPE: ElementType = ElementType::$ty;
            const REAL_TYPE: ElementType = ElementType::$ty;
            const COMPLEX_TYPE: ElementType = ElementType::$complex;
            const LETTER: char = $letter;
            const IS_COMPLEX: bool = false;
            const ONE: Self = 1.0;
            const NAN: Self = <$t>::NAN;
            const REAL_NAN: $t = <$t>::NAN;
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            fn neg(self) -> Self {
                -self
            }
            fn real(self) -> f64 {
                self.into()
            }
        }
    };
}

macro_rules! complex_scalar {
    ($t:ty, $ty:ident, $real:ident, $letter:literal) => {
        impl Scalar for [$t; 2] {
            type Real = $t;
            const TYPE: ElementType = ElementType::$ty;
            const REAL_TYPE: ElementType = ElementType::$real;
            const COMPLEX_TYPE: ElementType = ElementType::$ty;
            const LETTER: char = $letter;
            const IS_COMPLEX: bool = true;
            const ONE: Self = [1.0, 0.0];
            const NAN: Self = [<$t>::NAN, <$t>::NAN];
            const REAL_NAN: $t = <$t>::NAN;
            fn is_finite(self) -> bool {
                self[0].is_finite() && self[1].is_finite()
            }
            fn neg(self) -> Self {
                [-self[0], -self[1]]
            }
            fn real(self) -> f64 {
                self[0].into()
            }
        }
    };
}

real_scalar!(f32, F32, C64, 's');
real_scalar!(f64, F64, C128, 'd');
complex_scalar!(f32, C64, F32, 'c');
complex_scalar!(f64, C128, F64, 'z');

/// One family of custom calls (`getrf` in its four types): checks the call frame against
/// jaxlib's signature, then runs the LAPACK routine over the batch.
pub(crate) trait Kernel {
    /// The family's name in a real type's target (`orgqr`), and in a complex one's (`ungqr`).
    const REAL_NAME: &'static str;
    const COMPLEX_NAME: &'static str;
    fn run<T: Scalar>(call: &Frame<'_>, lapack: &Lapack) -> std::result::Result<(), String>;
}

/// The LAPACK routine of kernel `K` on type `T` (`dgetrf_`, `zungqr_`).
fn routine<K: Kernel, T: Scalar>(lapack: &Lapack) -> std::result::Result<usize, String> {
    let name = if T::IS_COMPLEX {
        K::COMPLEX_NAME
    } else {
        K::REAL_NAME
    };
    lapack.routine(&format!("{}{name}_", T::LETTER))
}

/// The custom-call target name of kernel `K` on type `T`, as jax's lowering writes it.
fn target<K: Kernel, T: Scalar>() -> String {
    let name = if T::IS_COMPLEX {
        K::COMPLEX_NAME
    } else {
        K::REAL_NAME
    };
    format!("lapack_{}{name}_ffi", T::LETTER)
}

/// The XLA FFI handler of kernel `K` on type `T`. A frame that does not match jaxlib's
/// signature, or a panic, is an `INVALID_ARGUMENT` / `INTERNAL` error of the execution; LAPACK
/// is never called with arguments it would refuse (reference LAPACK's XERBLA stops the process).
unsafe extern "C" fn handler<K: Kernel, T: Scalar>(frame: *mut XlaCallFrame) -> *mut c_void {
    // SAFETY: XLA passes a valid call frame for the duration of the call.
    let frame = unsafe { &mut *frame };
    // SAFETY: as above.
    if !unsafe { is_execute_stage(frame) } {
        return null_mut();
    }
    let api = frame.api;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let lapack = library::lapack()?;
        // SAFETY: the frame is XLA's, valid during the call.
        let call = unsafe { Frame::read(frame) }?;
        K::run::<T>(&call, lapack)
    }));
    let (message, code) = match outcome {
        Ok(Ok(())) => return null_mut(),
        Ok(Err(m)) => (m, XLA_ERROR_INVALID_ARGUMENT),
        Err(_) => ("the kernel panicked".to_string(), XLA_ERROR_INTERNAL),
    };
    let message = format!("{}: {message}", target::<K, T>());
    // SAFETY: `api` is the call frame's table.
    unsafe { make_error_code(api, &message, code) }
}

/// Every target with its handler: each kernel family in s, d, c and z.
fn targets() -> Vec<(String, *mut c_void)> {
    fn four<K: Kernel>(out: &mut Vec<(String, *mut c_void)>) {
        out.push((target::<K, f32>(), handler::<K, f32> as *mut c_void));
        out.push((target::<K, f64>(), handler::<K, f64> as *mut c_void));
        out.push((
            target::<K, [f32; 2]>(),
            handler::<K, [f32; 2]> as *mut c_void,
        ));
        out.push((
            target::<K, [f64; 2]>(),
            handler::<K, [f64; 2]> as *mut c_void,
        ));
    }
    let mut out = Vec::new();
    four::<factor::Trsm>(&mut out);
    four::<factor::Getrf>(&mut out);
    four::<factor::Geqrf>(&mut out);
    four::<factor::Geqp3>(&mut out);
    four::<factor::Orgqr>(&mut out);
    four::<factor::Ormqr>(&mut out);
    four::<factor::Potrf>(&mut out);
    four::<factor::Gtsv>(&mut out);
    four::<svd::Gesdd>(&mut out);
    four::<svd::Gesvd>(&mut out);
    four::<eigen::Syevd>(&mut out);
    four::<eigen::Geev>(&mut out);
    four::<eigen::Gees>(&mut out);
    four::<reduce::Gehrd>(&mut out);
    four::<reduce::Sytrd>(&mut out);
    out
}

/// The custom-call targets this build provides, as jax names them.
pub fn target_names() -> Vec<String> {
    targets().into_iter().map(|(name, _)| name).collect()
}

impl Plugin {
    /// Registers jaxlib's LAPACK targets with the plugin's FFI extension for platform "Host",
    /// when a LAPACK library loads; returns how many were registered, or why none were.
    pub(crate) fn register_lapack_kernels(
        &self,
        table: &PjrtFfiExtension,
    ) -> std::result::Result<usize, String> {
        library::lapack()?;
        let all = targets();
        for (name, handler) in &all {
            let mut args = RegisterHandlerArgs {
                struct_size: REGISTER_HANDLER_ARGS_SIZE,
                target_name: name.as_ptr().cast(),
                target_name_size: name.len(),
                handler: *handler,
                platform_name: b"Host".as_ptr().cast(),
                platform_name_size: 4,
                traits: 0,
            };
            // SAFETY: `PJRT_FFI_Register_Handler` is called with an args struct of its own
            // layout, filled in above, whose pointers stay live across the call.
            let done: Result<()> = unsafe {
                self.call(
                    "PJRT_FFI_Register_Handler",
                    table.register_handler,
                    &mut args,
                )
            };
            done.map_err(|e| format!("registering {name}: {e}"))?;
        }
        Ok(all.len())
    }
}

/// The LAPACK library the kernels call (as it was found), or why none loads.
pub fn library_name() -> std::result::Result<&'static str, String> {
    library::lapack().map(|l| l.path.as_str())
}

/// Adds why to a compile error about a missing `lapack_*` handler: no LAPACK library loaded, or
/// a target this build does not provide.
pub(crate) fn explain_missing_handler(error: crate::Error) -> crate::Error {
    let crate::Error::Pjrt {
        function,
        code,
        mut message,
        context,
    } = error
    else {
        return error;
    };
    let marker = "No FFI handler registered for ";
    if let Some(at) = message.find(marker) {
        let name: String = (message[at + marker.len()..].chars())
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with("lapack_") {
            match library::lapack() {
                Err(why) => message.push_str(&format!(
                    " (this runtime provides jaxlib's LAPACK custom calls, but {why})"
                )),
                Ok(_) if !target_names().contains(&name) => message.push_str(&format!(
                    " ({name} is not one of the {} jaxlib LAPACK targets this runtime provides)",
                    target_names().len()
                )),
                Ok(_) => {}
            }
        }
    }
    crate::Error::Pjrt {
        function,
        code,
        message,
        context,
    }
}

/// LAPACK called directly, with none of the runtime around it: what the LAPACK benchmark
/// compares the custom-call path against. Benchmarks only.
#[cfg(feature = "baseline")]
pub fn baseline_dgetrf(
    a: &mut [f64],
    n: i32,
    ipiv: &mut [i32],
) -> std::result::Result<i32, String> {
    let f = library::lapack()?.routine("dgetrf_")?;
    if a.len() != (n as usize) * (n as usize) || ipiv.len() != n as usize || n < 1 {
        return Err("dgetrf baseline: a must be n x n and ipiv n long".into());
    }
    let mut info = 0i32;
    // SAFETY: dgetrf's 6 arguments: an n x n column-major matrix with leading dimension n, n
    // pivots, and `info`, all live for the call.
    unsafe {
        library::call(
            f,
            &[
                frame::by_ref(&n),
                frame::by_ref(&n),
                a.as_mut_ptr() as usize,
                frame::by_ref(&n),
                ipiv.as_mut_ptr() as usize,
                frame::by_mut(&mut info),
            ],
        )
    };
    Ok(info)
}
