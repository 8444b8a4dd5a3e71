//! XLA FFI host callbacks, the fence side: the XLA FFI C API layouts we touch, the PJRT FFI
//! extension, one `extern "C"` handler registered per plugin for platform "Host", and the
//! execute context that carries each execution's callbacks to it. The handler finds the
//! `CallbackDispatch` of the running execution and hands it typed host views of the buffers.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::c_void;
use std::os::raw::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{null, null_mut};

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

const PJRT_EXTENSION_FFI: u32 = 5;
const XLA_EXTENSION_METADATA: u32 = 1;
const XLA_STAGE_EXECUTE: u32 = 3;
const XLA_ATTR_SCALAR: u32 = 3;
const XLA_ARG_BUFFER: u32 = 1;
const XLA_DTYPE_S64: u32 = 5;
const XLA_ERROR_INTERNAL: u32 = 13;

// --- XLA FFI C API (xla/ffi/api/c_api.h) ---------------------------------------------------

#[repr(C)]
struct XlaExtensionBase {
    struct_size: usize,
    ty: u32,
    next: *mut XlaExtensionBase,
}

#[repr(C)]
struct XlaApiVersion {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    major: i32,
    minor: i32,
}

#[repr(C)]
struct XlaMetadata {
    struct_size: usize,
    api_version: XlaApiVersion,
    traits: u32,
}

#[repr(C)]
struct XlaMetadataExtension {
    base: XlaExtensionBase,
    metadata: *mut XlaMetadata,
}

#[repr(C)]
struct XlaList {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    size: i64,
    types: *const u32,
    items: *const *mut c_void,
}

#[repr(C)]
struct XlaAttrs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    size: i64,
    types: *const u32,
    names: *const *const XlaByteSpan,
    attrs: *const *mut c_void,
}

#[repr(C)]
struct XlaCallFrame {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    api: *const XlaApi,
    ctx: *mut c_void,
    stage: u32,
    args: XlaList,
    rets: XlaList,
    attrs: XlaAttrs,
    future: *mut c_void,
}

#[repr(C)]
struct XlaBuffer {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    dtype: u32,
    data: *mut c_void,
    rank: i64,
    dims: *const i64,
}

#[repr(C)]
struct XlaScalar {
    dtype: u32,
    value: *const c_void,
}

#[repr(C)]
struct XlaByteSpan {
    ptr: *const c_char,
    len: usize,
}

#[repr(C)]
struct XlaTypeId {
    type_id: i64,
}

#[repr(C)]
struct XlaErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    message: *const c_char,
    errc: u32,
}

#[repr(C)]
struct XlaContextGetArgs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    ctx: *mut c_void,
    type_id: *mut XlaTypeId,
    data: *mut c_void,
}

type XlaFn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut c_void>;

/// The stable head of `XLA_FFI_Api`: only these slots are used (later ones moved between
/// versions; these did not).
#[repr(C)]
struct XlaApi {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    api_version: XlaApiVersion,
    internal_api: *mut c_void,
    error_create: XlaFn<XlaErrorCreateArgs>,
    error_get_message: *const c_void,
    error_destroy: *const c_void,
    handler_register: *const c_void,
    stream_get: *const c_void,
    type_id_register: *const c_void,
    execution_context_get: XlaFn<XlaContextGetArgs>,
}

// 4 pointers, the stage (padded to 8), then two 40-byte lists.
const _: () = assert!(std::mem::offset_of!(XlaCallFrame, attrs) == 120);
const _: () = assert!(std::mem::offset_of!(XlaApi, execution_context_get) == 96);
const _: () = assert!(size_of::<XlaBuffer>() == 48);

// --- the PJRT FFI extension ----------------------------------------------------------------

#[repr(C)]
struct PjrtFfiExtension {
    base: sys::PJRT_Extension_Base,
    type_id_register: Option<unsafe extern "C" fn(*mut TypeIdRegisterArgs) -> *mut sys::PJRT_Error>,
    user_data_add: Option<unsafe extern "C" fn(*mut UserDataAddArgs) -> *mut sys::PJRT_Error>,
    register_handler:
        Option<unsafe extern "C" fn(*mut RegisterHandlerArgs) -> *mut sys::PJRT_Error>,
}

/// `PJRT_FFI_Type_Info`: optional hooks for a user-data type; the plugin reads the struct, so
/// it must be there even with every hook absent.
#[repr(C)]
struct TypeInfo {
    deleter: *const c_void,
    serialize: *const c_void,
    deserialize: *const c_void,
}

// SAFETY: three null pointers, never written.
unsafe impl Sync for TypeInfo {}

static NO_TYPE_HOOKS: TypeInfo = TypeInfo {
    deleter: null(),
    serialize: null(),
    deserialize: null(),
};

/// `PJRT_FFI_Type_Register_Args`, the plugin's 48-byte layout (the older 40-byte
/// `TypeID_Register_Args` is rejected); the plugin dereferences `type_info`.
#[repr(C)]
struct TypeIdRegisterArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    type_name: *const c_char,
    type_name_size: usize,
    type_id: i64,
    type_info: *const TypeInfo,
}
const _: () = assert!(size_of::<TypeIdRegisterArgs>() == 48);

/// `PJRT_FFI_UserData`. Older headers end it with a deleter the plugin never calls; the plugin
/// reads only `type_id` and `data`, at these offsets in every version.
#[repr(C)]
struct UserData {
    type_id: i64,
    data: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

#[repr(C)]
struct UserDataAddArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    context: *mut sys::PJRT_ExecuteContext,
    user_data: UserData,
}
const _: () = assert!(size_of::<UserDataAddArgs>() == 48);

/// The plugin's layout: no `api_version` field (typed XLA FFI only), 52 bytes to `traits`.
#[repr(C)]
struct RegisterHandlerArgs {
    struct_size: usize,
    target_name: *const c_char,
    target_name_size: usize,
    handler: *mut c_void,
    platform_name: *const c_char,
    platform_name_size: usize,
    traits: u32,
}
const REGISTER_HANDLER_ARGS_SIZE: usize = std::mem::offset_of!(RegisterHandlerArgs, traits) + 4;
const _: () = assert!(REGISTER_HANDLER_ARGS_SIZE == 52);

const USER_DATA_TYPE: &str = "pjrt_actors::CallbackDispatch";

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

/// Host callbacks on a plugin: the FFI extension, our handler registered, our user-data type.
pub struct FfiSupport {
    ext: *const PjrtFfiExtension,
    type_id: i64,
}

// SAFETY: the extension table is static for the plugin's (process) lifetime; `type_id` is data.
unsafe impl Send for FfiSupport {}
// SAFETY: as above.
unsafe impl Sync for FfiSupport {}

impl Plugin {
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
        Ok(FfiSupport {
            ext: ffi,
            type_id: type_args.type_id,
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
unsafe fn make_error(api: *const XlaApi, message: &str) -> *mut c_void {
    let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut a = XlaErrorCreateArgs {
        struct_size: std::mem::offset_of!(XlaErrorCreateArgs, errc) + 4,
        extension_start: null_mut(),
        message: text.as_ptr(),
        errc: XLA_ERROR_INTERNAL,
    };
    // SAFETY: guaranteed by the caller; `Error_Create` is slot 0 in every version.
    unsafe {
        match (*api).error_create {
            Some(f) => f(&mut a),
            None => null_mut(),
        }
    }
}

/// One FFI buffer, read from a call frame.
#[derive(Clone, Copy)]
struct FrameBuffer<'a> {
    dtype: ElementType,
    dims: &'a [i64],
    data: *mut u8,
    len: usize,
}

/// Reads the buffers of a call frame's args or rets list.
///
/// # Safety
/// `list` must be a call frame's args or rets list of buffers, valid for `'a`.
unsafe fn buffers<'a>(list: &'a XlaList) -> std::result::Result<Vec<FrameBuffer<'a>>, String> {
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

/// The one XLA FFI handler: answers the metadata query, then on execute finds the callback id
/// attribute and this execution's dispatch, and runs the callback on typed views.
unsafe extern "C" fn host_callback_handler(frame: *mut XlaCallFrame) -> *mut c_void {
    // SAFETY: XLA passes a valid call frame for the duration of the call.
    let frame = unsafe { &mut *frame };
    // SAFETY: a non-null extension list is XLA's, valid during the call.
    unsafe {
        let ext = frame.extension_start;
        if !ext.is_null() && (*ext).ty == XLA_EXTENSION_METADATA {
            let meta = &mut *(*(ext as *mut XlaMetadataExtension)).metadata;
            meta.api_version.major = 0;
            meta.api_version.minor = 1;
            meta.traits = 0;
            return null_mut();
        }
    }
    if frame.stage != XLA_STAGE_EXECUTE {
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
                .map(|b| HostViewMut {
                    dtype: b.dtype,
                    dims: b.dims,
                    data: if b.len == 0 {
                        &mut []
                    } else {
                        std::slice::from_raw_parts_mut(b.data, b.len)
                    },
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
        if T::TYPE != self.dtype || (self.data.as_ptr() as usize) % align_of::<T>() != 0 {
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
        if T::TYPE != self.dtype || (self.data.as_ptr() as usize) % align_of::<T>() != 0 {
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
