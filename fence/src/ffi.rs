//! XLA FFI host callbacks, the fence side (the layouts are in `ffi_abi.rs`): registering with the
//! PJRT FFI extension, one `extern "C"` handler registered per plugin for platform "Host", and the
//! execute context that carries each execution's callbacks to it. The handler finds the
//! `CallbackDispatch` of the running execution and hands it typed host views of the buffers.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::c_void;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;

use pjrt_sys as sys;

use super::call::{args, call};
use super::client::PjrtClient;
use super::plugin::Plugin;
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// The custom-call target every host callback goes through.
pub const HOST_CALLBACK_TARGET: &str = "pjrt_actors_host_callback";
/// The FFI attribute naming which callback to run.
pub const CALLBACK_ID_ATTR: &str = "callback_id";

use super::ffi_abi::*;

// --- what the handler calls ----------------------------------------------------------------

/// A read-only view of an FFI buffer.
pub struct HostView<'a> {
    /// The element type.
    pub dtype: ElementType,
    /// The dimensions.
    pub dims: &'a [i64],
    /// The dense bytes, major-to-minor.
    pub data: &'a [u8],
}

/// A writable view of an FFI result buffer.
pub struct HostViewMut<'a> {
    /// The element type.
    pub dtype: ElementType,
    /// The dimensions.
    pub dims: &'a [i64],
    /// The dense bytes to write, major-to-minor.
    pub data: &'a mut [u8],
}

/// The per-execution side of host callbacks: runs callback `id` on typed views. An error
/// string fails the execution with that message.
pub trait CallbackDispatch: Sync {
    fn call(
        &self,
        id: i64,
        operands: &[HostView<'_>],
        results: &mut [HostViewMut<'_>],
    ) -> std::result::Result<(), String>;
}

impl Plugin {
    /// Host callbacks through XLA FFI: the handler is registered with the plugin on first use.
    pub fn host_callbacks(&self) -> Result<&FfiSupport> {
        self.ffi_cell()
            .get_or_init(|| {
                let support = self.register_host_callbacks()?;
                remember_type_id(&support);
                Ok(support)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Finds the FFI extension and registers our handler and user-data type (once per plugin).
    pub(crate) fn register_host_callbacks(&self) -> Result<FfiSupport> {
        let unsupported = |hint: &str| Error::Unsupported {
            what: "host callbacks through XLA FFI",
            hint: hint.to_string(),
        };
        let mut ext = self.api().base.extension_start as *const sys::PJRT_Extension_Base;
        // SAFETY: the extension list is a plugin-owned linked list, static for its lifetime.
        let ffi = unsafe {
            loop {
                if ext.is_null() {
                    return Err(unsupported(" (the plugin has no FFI extension)"));
                }
                if (*ext).type_ == PJRT_EXTENSION_FFI {
                    break ext as *const PjrtFfiExtension;
                }
                ext = (*ext).next;
            }
        };
        // SAFETY: `ffi` points at the plugin's FFI extension (type checked above).
        let table = unsafe { &*ffi };
        let mut type_args = TypeIdRegisterArgs {
            struct_size: size_of::<TypeIdRegisterArgs>(),
            extension_start: null_mut(),
            type_name: USER_DATA_TYPE.as_ptr().cast(),
            type_name_size: USER_DATA_TYPE.len(),
            type_id: 0,
            type_info: &NO_TYPE_HOOKS,
        };
        // SAFETY: `PJRT_FFI_TypeID_Register` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe {
            self.call(
                "PJRT_FFI_TypeID_Register",
                table.type_id_register,
                &mut type_args,
            )
        }?;
        let mut handler_args = RegisterHandlerArgs {
            struct_size: REGISTER_HANDLER_ARGS_SIZE,
            target_name: HOST_CALLBACK_TARGET.as_ptr().cast(),
            target_name_size: HOST_CALLBACK_TARGET.len(),
            handler: host_callback_handler as *mut c_void,
            platform_name: b"Host".as_ptr().cast(),
            platform_name_size: 4,
            traits: 0,
        };
        // SAFETY: `PJRT_FFI_Register_Handler` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe {
            self.call(
                "PJRT_FFI_Register_Handler",
                table.register_handler,
                &mut handler_args,
            )
        }?;
        // jaxlib's LAPACK custom calls, when a LAPACK library loads; programs without them
        // compile either way.
        let lapack = self.register_lapack_kernels(table);
        match &lapack {
            Ok(n) => tracing::debug!(targets = n, "jaxlib LAPACK custom calls registered"),
            Err(e) => tracing::info!(error = %e, "jaxlib LAPACK custom calls unavailable"),
        }
        Ok(FfiSupport {
            ext: ffi,
            type_id: type_args.type_id,
            lapack,
        })
    }
}

/// An execute context carrying one execution's callback dispatch. Must outlive the execution
/// (the caller waits for it to complete before dropping this).
pub(crate) struct CallbackContext<'a> {
    client: &'a PjrtClient,
    raw: *mut sys::PJRT_ExecuteContext,
    /// Boxed on purpose: the plugin gets a thin pointer, at a stable address, to the (fat)
    /// trait-object reference, while this struct itself moves.
    #[allow(clippy::redundant_allocation)]
    _dispatch: Box<&'a dyn CallbackDispatch>,
}

impl<'a> CallbackContext<'a> {
    pub(crate) fn new(
        client: &'a PjrtClient,
        ffi: &FfiSupport,
        dispatch: &'a dyn CallbackDispatch,
    ) -> Result<Self> {
        let plugin = client.plugin();
        let mut c = args!(PJRT_ExecuteContext_Create_Args {});
        call!(plugin, PJRT_ExecuteContext_Create, &mut c)?;
        let boxed: Box<&'a dyn CallbackDispatch> = Box::new(dispatch);
        let ctx = CallbackContext {
            client,
            raw: c.context,
            _dispatch: boxed,
        };
        let mut add = UserDataAddArgs {
            struct_size: size_of::<UserDataAddArgs>(),
            extension_start: null_mut(),
            context: ctx.raw,
            user_data: UserData {
                type_id: ffi.type_id,
                data: (&*ctx._dispatch as *const &dyn CallbackDispatch) as *mut c_void,
                // The plugin never calls deleters; this context owns the box.
                deleter: None,
            },
        };
        // SAFETY: `ffi.ext` is the plugin's static FFI extension table.
        let f = unsafe { (*ffi.ext).user_data_add };
        // SAFETY: `PJRT_FFI_UserData_Add` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe { plugin.call("PJRT_FFI_UserData_Add", f, &mut add) }?;
        Ok(ctx)
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_ExecuteContext {
        self.raw
    }
}

impl Drop for CallbackContext<'_> {
    fn drop(&mut self) {
        let mut d = args!(PJRT_ExecuteContext_Destroy_Args { context: self.raw });
        let _ = call!(self.client.plugin(), PJRT_ExecuteContext_Destroy, &mut d);
    }
}

/// The user-data type id, kept where the handler can read it without a plugin reference.
static TYPE_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

pub(crate) fn remember_type_id(ffi: &FfiSupport) {
    TYPE_ID.store(ffi.type_id, std::sync::atomic::Ordering::Relaxed);
}

/// Makes an `XLA_FFI_Error` with `message` (the plugin copies it).
///
/// # Safety
/// `api` must be the call frame's API table.
pub(crate) unsafe fn make_error(api: *const XlaApi, message: &str) -> *mut c_void {
    // SAFETY: guaranteed by the caller.
    unsafe { make_error_code(api, message, XLA_ERROR_INTERNAL) }
}

/// Makes an `XLA_FFI_Error` with `message` and error code `errc` (the plugin copies it).
///
/// # Safety
/// `api` must be the call frame's API table.
pub(crate) unsafe fn make_error_code(api: *const XlaApi, message: &str, errc: u32) -> *mut c_void {
    let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut a = XlaErrorCreateArgs {
        struct_size: std::mem::offset_of!(XlaErrorCreateArgs, errc) + 4,
        extension_start: null_mut(),
        message: text.as_ptr(),
        errc,
    };
    // SAFETY: guaranteed by the caller; `Error_Create` is slot 0 in every version.
    unsafe {
        match (*api).error_create {
            Some(f) => f(&mut a),
            None => null_mut(),
        }
    }
}

/// Answers XLA's metadata query (API version 0.1, no traits) and says whether this call is the
/// execute stage, the only one our handlers act in.
///
/// # Safety
/// `frame` must be the call frame XLA passed to a handler, valid during the call.
pub(crate) unsafe fn is_execute_stage(frame: &mut XlaCallFrame) -> bool {
    // SAFETY: a non-null extension list is XLA's, valid during the call.
    unsafe {
        let ext = frame.extension_start;
        if !ext.is_null() && (*ext).ty == XLA_EXTENSION_METADATA {
            let meta = &mut *(*(ext as *mut XlaMetadataExtension)).metadata;
            meta.api_version.major = 0;
            meta.api_version.minor = 1;
            meta.traits = 0;
            return false;
        }
    }
    frame.stage == XLA_STAGE_EXECUTE
}

/// One FFI buffer, read from a call frame.
#[derive(Clone, Copy)]
pub(crate) struct FrameBuffer<'a> {
    pub(crate) dtype: ElementType,
    pub(crate) dims: &'a [i64],
    pub(crate) data: *mut u8,
    pub(crate) len: usize,
}

/// Reads the buffers of a call frame's args or rets list.
///
/// # Safety
/// `list` must be a call frame's args or rets list of buffers, valid for `'a`.
pub(crate) unsafe fn buffers<'a>(
    list: &'a XlaList,
) -> std::result::Result<Vec<FrameBuffer<'a>>, String> {
    let mut out = Vec::with_capacity(list.size.max(0) as usize);
    for i in 0..list.size.max(0) as usize {
        // SAFETY: the list holds `size` typed entries (guaranteed by the caller).
        unsafe {
            if *list.types.add(i) != XLA_ARG_BUFFER {
                return Err(format!("argument {i} is not a buffer"));
            }
            let b = &*(*list.items.add(i) as *const XlaBuffer);
            let dtype = ElementType::from_xla(b.dtype as i32)
                .ok_or_else(|| format!("unsupported element type {}", b.dtype))?;
            let dims: &'a [i64] = if b.rank == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(b.dims, b.rank as usize)
            };
            let len = crate::dtype::byte_size(dtype, dims).map_err(|e| e.to_string())?;
            out.push(FrameBuffer {
                dtype,
                dims,
                data: b.data as *mut u8,
                len,
            });
        }
    }
    Ok(out)
}

/// Fails when any result's bytes overlap any operand's or another result's.
fn refuse_aliasing(
    operands: &[FrameBuffer<'_>],
    results: &[FrameBuffer<'_>],
) -> std::result::Result<(), String> {
    let range = |b: &FrameBuffer<'_>| (b.data as usize, b.data as usize + b.len);
    let overlaps = |a: (usize, usize), b: (usize, usize)| a.0 < b.1 && b.0 < a.1;
    for (r, result) in results.iter().enumerate() {
        let mine = range(result);
        if let Some(o) = operands.iter().position(|o| overlaps(mine, range(o))) {
            return Err(format!(
                "result {r} shares memory with operand {o} (output_operand_aliases): host \
                 callbacks take operands and results in separate buffers"
            ));
        }
        if results[..r]
            .iter()
            .any(|other| overlaps(mine, range(other)))
        {
            return Err(format!("result {r} shares memory with another result"));
        }
    }
    Ok(())
}

/// The one XLA FFI handler: answers the metadata query, then on execute finds the callback id
/// attribute and this execution's dispatch, and runs the callback on typed views.
unsafe extern "C" fn host_callback_handler(frame: *mut XlaCallFrame) -> *mut c_void {
    // SAFETY: XLA passes a valid call frame for the duration of the call.
    let frame = unsafe { &mut *frame };
    // SAFETY: as above.
    if !unsafe { is_execute_stage(frame) } {
        return null_mut();
    }
    let api = frame.api;
    let outcome = catch_unwind(AssertUnwindSafe(|| -> std::result::Result<(), String> {
        // SAFETY: attributes, args and rets are XLA's, valid during the call; the user data is
        // the `&dyn CallbackDispatch` our `CallbackContext` put there, alive until the execution
        // completes (the executing side waits for completion before dropping it).
        unsafe {
            let mut id = None;
            for i in 0..frame.attrs.size.max(0) as usize {
                let name = &**frame.attrs.names.add(i);
                let name = std::slice::from_raw_parts(name.ptr as *const u8, name.len);
                if name == CALLBACK_ID_ATTR.as_bytes()
                    && *frame.attrs.types.add(i) == XLA_ATTR_SCALAR
                {
                    let s = &*(*frame.attrs.attrs.add(i) as *const XlaScalar);
                    if s.dtype == XLA_DTYPE_S64 {
                        id = Some(*(s.value as *const i64));
                    }
                }
            }
            let id = id.ok_or("the custom call has no `callback_id : i64` attribute")?;
            if frame.ctx.is_null() {
                return Err("host callback run without an execute context".into());
            }
            let mut type_id = XlaTypeId {
                type_id: TYPE_ID.load(std::sync::atomic::Ordering::Relaxed),
            };
            let mut get = XlaContextGetArgs {
                struct_size: size_of::<XlaContextGetArgs>(),
                extension_start: null_mut(),
                ctx: frame.ctx,
                type_id: &mut type_id,
                data: null_mut(),
            };
            let getter = (*api)
                .execution_context_get
                .ok_or("no ExecutionContext_Get")?;
            let err = getter(&mut get);
            if !err.is_null() || get.data.is_null() {
                return Err("this execution carries no host callbacks".into());
            }
            let dispatch: &dyn CallbackDispatch = *(get.data as *const &dyn CallbackDispatch);
            let operands = buffers(&frame.args)?;
            let results = buffers(&frame.rets)?;
            // A result that shares memory with an operand (a custom call declaring
            // `output_operand_aliases`) would hand the closure a `&[u8]` and a `&mut [u8]` over
            // the same bytes: refused before either view exists.
            refuse_aliasing(&operands, &results)?;
            let views: Vec<HostView<'_>> = operands
                .iter()
                .map(|b| HostView {
                    dtype: b.dtype,
                    dims: b.dims,
                    data: if b.len == 0 {
                        &[]
                    } else {
                        std::slice::from_raw_parts(b.data, b.len)
                    },
                })
                .collect();
            let mut outs: Vec<HostViewMut<'_>> = results
                .iter()
                .map(|b| {
                    let data: &mut [u8] = if b.len == 0 {
                        &mut []
                    } else {
                        std::slice::from_raw_parts_mut(b.data, b.len)
                    };
                    // Results start zeroed: a callback that writes nothing returns zeros, never
                    // whatever the allocator left there.
                    data.fill(0);
                    HostViewMut {
                        dtype: b.dtype,
                        dims: b.dims,
                        data,
                    }
                })
                .collect();
            dispatch.call(id, &views, &mut outs)
        }
    }));
    let message = match outcome {
        Ok(Ok(())) => return null_mut(),
        Ok(Err(message)) => message,
        Err(_) => "a host callback panicked".to_string(),
    };
    // SAFETY: `api` is the call frame's table.
    unsafe { make_error(api, &message) }
}

impl HostView<'_> {
    /// The data as a slice of `T`, if `T` is the buffer's element type.
    pub fn as_slice<T: super::NativeType>(&self) -> Option<&[T]> {
        if T::TYPE != self.dtype || !(self.data.as_ptr() as usize).is_multiple_of(align_of::<T>()) {
            return None;
        }
        // SAFETY: the element type matches, the pointer is aligned for `T`, and the length is
        // the buffer's byte size divided by `T`'s (byte size = elements × size of `T`).
        Some(unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().cast(), self.data.len() / size_of::<T>())
        })
    }
}

impl HostViewMut<'_> {
    /// The data as a mutable slice of `T`, if `T` is the buffer's element type.
    pub fn as_mut_slice<T: super::NativeType>(&mut self) -> Option<&mut [T]> {
        if T::TYPE != self.dtype || !(self.data.as_ptr() as usize).is_multiple_of(align_of::<T>()) {
            return None;
        }
        // SAFETY: as in `HostView::as_slice`; writes through `&mut [T]` are valid `T`s.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                self.data.as_mut_ptr().cast(),
                self.data.len() / size_of::<T>(),
            )
        })
    }
}
