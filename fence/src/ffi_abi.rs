//! The XLA FFI C API layouts the host-callback handler touches (`xla/ffi/api/c_api.h`) and the
//! PJRT FFI extension's, as the plugin lays them out: each checked by a compile-time size or
//! offset assertion. No code here; `ffi.rs` uses them.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::ptr::null;

use pjrt_sys as sys;

pub(crate) const PJRT_EXTENSION_FFI: u32 = 5;
pub(crate) const XLA_EXTENSION_METADATA: u32 = 1;
pub(crate) const XLA_STAGE_EXECUTE: u32 = 3;
pub(crate) const XLA_ATTR_SCALAR: u32 = 3;
pub(crate) const XLA_ARG_BUFFER: u32 = 1;
pub(crate) const XLA_DTYPE_S64: u32 = 5;
pub(crate) const XLA_ERROR_INTERNAL: u32 = 13;
pub(crate) const XLA_ERROR_INVALID_ARGUMENT: u32 = 3;
pub(crate) const XLA_DTYPE_PRED: u32 = 1;
pub(crate) const XLA_DTYPE_S32: u32 = 4;
pub(crate) const XLA_DTYPE_U8: u32 = 6;

// --- XLA FFI C API (xla/ffi/api/c_api.h) ---------------------------------------------------

#[repr(C)]
pub(crate) struct XlaExtensionBase {
    pub(crate) struct_size: usize,
    pub(crate) ty: u32,
    pub(crate) next: *mut XlaExtensionBase,
}

#[repr(C)]
pub(crate) struct XlaApiVersion {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) major: i32,
    pub(crate) minor: i32,
}

#[repr(C)]
pub(crate) struct XlaMetadata {
    pub(crate) struct_size: usize,
    pub(crate) api_version: XlaApiVersion,
    pub(crate) traits: u32,
}

#[repr(C)]
pub(crate) struct XlaMetadataExtension {
    pub(crate) base: XlaExtensionBase,
    pub(crate) metadata: *mut XlaMetadata,
}

#[repr(C)]
pub(crate) struct XlaList {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) size: i64,
    pub(crate) types: *const u32,
    pub(crate) items: *const *mut c_void,
}

#[repr(C)]
pub(crate) struct XlaAttrs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) size: i64,
    pub(crate) types: *const u32,
    pub(crate) names: *const *const XlaByteSpan,
    pub(crate) attrs: *const *mut c_void,
}

#[repr(C)]
pub(crate) struct XlaCallFrame {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) api: *const XlaApi,
    pub(crate) ctx: *mut c_void,
    pub(crate) stage: u32,
    pub(crate) args: XlaList,
    pub(crate) rets: XlaList,
    pub(crate) attrs: XlaAttrs,
    pub(crate) future: *mut c_void,
}

#[repr(C)]
pub(crate) struct XlaBuffer {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) dtype: u32,
    pub(crate) data: *mut c_void,
    pub(crate) rank: i64,
    pub(crate) dims: *const i64,
}

#[repr(C)]
pub(crate) struct XlaScalar {
    pub(crate) dtype: u32,
    pub(crate) value: *const c_void,
}

#[repr(C)]
pub(crate) struct XlaByteSpan {
    pub(crate) ptr: *const c_char,
    pub(crate) len: usize,
}

#[repr(C)]
pub(crate) struct XlaTypeId {
    pub(crate) type_id: i64,
}

#[repr(C)]
pub(crate) struct XlaErrorCreateArgs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) message: *const c_char,
    pub(crate) errc: u32,
}

#[repr(C)]
pub(crate) struct XlaContextGetArgs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) ctx: *mut c_void,
    pub(crate) type_id: *mut XlaTypeId,
    pub(crate) data: *mut c_void,
}

pub(crate) type XlaFn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut c_void>;

/// The stable head of `XLA_FFI_Api`: only these slots are used (later ones moved between
/// versions; these did not).
#[repr(C)]
pub(crate) struct XlaApi {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut XlaExtensionBase,
    pub(crate) api_version: XlaApiVersion,
    pub(crate) internal_api: *mut c_void,
    pub(crate) error_create: XlaFn<XlaErrorCreateArgs>,
    pub(crate) error_get_message: *const c_void,
    pub(crate) error_destroy: *const c_void,
    pub(crate) handler_register: *const c_void,
    pub(crate) stream_get: *const c_void,
    pub(crate) type_id_register: *const c_void,
    pub(crate) execution_context_get: XlaFn<XlaContextGetArgs>,
}

// 4 pointers, the stage (padded to 8), then two 40-byte lists.
const _: () = assert!(std::mem::offset_of!(XlaCallFrame, attrs) == 120);
const _: () = assert!(std::mem::offset_of!(XlaApi, execution_context_get) == 96);
const _: () = assert!(size_of::<XlaBuffer>() == 48);

// --- the PJRT FFI extension ----------------------------------------------------------------

#[repr(C)]
pub(crate) struct PjrtFfiExtension {
    pub(crate) base: sys::PJRT_Extension_Base,
    pub(crate) type_id_register:
        Option<unsafe extern "C" fn(*mut TypeIdRegisterArgs) -> *mut sys::PJRT_Error>,
    pub(crate) user_data_add:
        Option<unsafe extern "C" fn(*mut UserDataAddArgs) -> *mut sys::PJRT_Error>,
    pub(crate) register_handler:
        Option<unsafe extern "C" fn(*mut RegisterHandlerArgs) -> *mut sys::PJRT_Error>,
}

/// `PJRT_FFI_Type_Info`: optional hooks for a user-data type; the plugin reads the struct, so
/// it must be there even with every hook absent.
#[repr(C)]
pub(crate) struct TypeInfo {
    pub(crate) deleter: *const c_void,
    pub(crate) serialize: *const c_void,
    pub(crate) deserialize: *const c_void,
}

// SAFETY: three null pointers, never written.
unsafe impl Sync for TypeInfo {}

pub(crate) static NO_TYPE_HOOKS: TypeInfo = TypeInfo {
    deleter: null(),
    serialize: null(),
    deserialize: null(),
};

/// `PJRT_FFI_Type_Register_Args`, the plugin's 48-byte layout (the older 40-byte
/// `TypeID_Register_Args` is rejected); the plugin dereferences `type_info`.
#[repr(C)]
pub(crate) struct TypeIdRegisterArgs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut sys::PJRT_Extension_Base,
    pub(crate) type_name: *const c_char,
    pub(crate) type_name_size: usize,
    pub(crate) type_id: i64,
    pub(crate) type_info: *const TypeInfo,
}
const _: () = assert!(size_of::<TypeIdRegisterArgs>() == 48);

/// `PJRT_FFI_UserData`. Older headers end it with a deleter the plugin never calls; the plugin
/// reads only `type_id` and `data`, at these offsets in every version.
#[repr(C)]
pub(crate) struct UserData {
    pub(crate) type_id: i64,
    pub(crate) data: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

#[repr(C)]
pub(crate) struct UserDataAddArgs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut sys::PJRT_Extension_Base,
    pub(crate) context: *mut sys::PJRT_ExecuteContext,
    pub(crate) user_data: UserData,
}
const _: () = assert!(size_of::<UserDataAddArgs>() == 48);

/// The plugin's layout: no `api_version` field (typed XLA FFI only), 52 bytes to `traits`.
#[repr(C)]
pub(crate) struct RegisterHandlerArgs {
    pub(crate) struct_size: usize,
    pub(crate) target_name: *const c_char,
    pub(crate) target_name_size: usize,
    pub(crate) handler: *mut c_void,
    pub(crate) platform_name: *const c_char,
    pub(crate) platform_name_size: usize,
    pub(crate) traits: u32,
}
pub(crate) const REGISTER_HANDLER_ARGS_SIZE: usize =
    std::mem::offset_of!(RegisterHandlerArgs, traits) + 4;
const _: () = assert!(REGISTER_HANDLER_ARGS_SIZE == 52);

pub(crate) const USER_DATA_TYPE: &str = "pjrt_actors::CallbackDispatch";

/// Host callbacks on a plugin: the FFI extension, our handler registered, our user-data type.
pub struct FfiSupport {
    pub(crate) ext: *const PjrtFfiExtension,
    pub(crate) type_id: i64,
    /// How many LAPACK custom-call targets were registered, or why none were.
    pub(crate) lapack: Result<usize, String>,
}

impl FfiSupport {
    /// How many of jaxlib's LAPACK custom-call targets this plugin has, or why it has none.
    pub fn lapack_kernels(&self) -> Result<usize, String> {
        self.lapack.clone()
    }
}

// SAFETY: the extension table is static for the plugin's (process) lifetime; `type_id` is data.
unsafe impl Send for FfiSupport {}
// SAFETY: as above.
unsafe impl Sync for FfiSupport {}
