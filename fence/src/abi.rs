//! PJRT C API 0.81 layouts that pjrt-sys (header 0.54) lacks: the structs that grew, and the
//! function table's 0.81 tail. Sizes are asserted at compile time against the plugin's header,
//! because the plugin rejects a smaller struct and one of them makes it write past our memory.

#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::mem::{offset_of, size_of};
use std::os::raw::{c_char, c_void};

use pjrt_sys as sys;

/// The minor version whose layouts this module carries.
pub const LAYOUT_MINOR: i32 = 81;
/// The oldest minor whose function table we can call: pjrt-sys's, whose table is a prefix of ours.
pub const MIN_MINOR: i32 = 54;

type Fn<A> = Option<unsafe extern "C" fn(args: *mut A) -> *mut sys::PJRT_Error>;

/// The 0.81 function table: pjrt-sys's table (100 slots, through `ExecuteContext_Destroy`)
/// followed by the eighteen slots that 0.81 has after it.
#[repr(C)]
pub struct Api {
    pub base: sys::PJRT_Api,
    pub PJRT_Buffer_CopyRawToHost: Fn<Buffer_CopyRawToHost_Args>,
    pub PJRT_AsyncHostToDeviceTransferManager_Destroy: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_TransferData: Fn<c_void>,
    pub PJRT_Client_CreateBuffersForAsyncHostToDevice: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_Device: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_BufferCount: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_BufferSize: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_SetBufferError: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_AddMetadata: Fn<c_void>,
    pub PJRT_Client_DmaMap: Fn<Client_DmaMap_Args>,
    pub PJRT_Client_DmaUnmap: Fn<Client_DmaUnmap_Args>,
    pub PJRT_Client_CreateUninitializedBuffer: Fn<c_void>,
    pub PJRT_Client_UpdateGlobalProcessInfo: Fn<c_void>,
    pub PJRT_TopologyDescription_Deserialize: Fn<TopologyDescription_Deserialize_Args>,
    pub PJRT_Client_CreateAliasBuffer: Fn<c_void>,
    pub PJRT_Client_FulfillAliasBuffer: Fn<c_void>,
    pub PJRT_LoadedExecutable_GetDeviceAssignment: Fn<c_void>,
}
// 40 bytes of header and version, then 100 function slots (PJRT-NOTES's 808 undercounts).
const _: () = assert!(size_of::<sys::PJRT_Api>() == 840);
const _: () = assert!(size_of::<Api>() == 984);

/// The slots a newer table (0.115's is 1,144 bytes) has after 0.81's, up to the last one we
/// call. Read only through `Plugin::api_tail`, which first checks the plugin's table reaches it.
#[repr(C)]
pub struct ApiTail {
    pub v081: Api,
    pub PJRT_Client_CreateErrorBuffer: Fn<c_void>,
    pub PJRT_AsyncHostToDeviceTransferManager_TransferLiteral: Fn<c_void>,
    pub PJRT_Buffer_CopyRawToHostFuture: Fn<c_void>,
    pub PJRT_Device_PoisonExecution: Fn<c_void>,
    pub PJRT_Device_CreateAsyncTrackingEvent: Fn<c_void>,
    pub PJRT_AsyncTrackingEvent_Destroy: Fn<c_void>,
    pub PJRT_Executable_GetCompileOptions: Fn<Executable_GetCompileOptions_Args>,
}
// The slot's place in the 0.115 table (0x408), as the header has it.
const _: () = assert!(offset_of!(ApiTail, PJRT_Executable_GetCompileOptions) == 0x408);

/// Opaque: the plugin's holder of serialized compile options, freed by its deleter.
pub enum SerializedCompileOptions {}

#[repr(C)]
pub struct Executable_GetCompileOptions_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub executable: *mut sys::PJRT_Executable,
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    pub serialized_compile_options: *mut SerializedCompileOptions,
    pub serialized_compile_options_deleter:
        Option<unsafe extern "C" fn(options: *mut SerializedCompileOptions)>,
}
const _: () = assert!(size_of::<Executable_GetCompileOptions_Args>() == 56);

#[repr(C)]
pub struct Plugin_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub attributes: *const sys::PJRT_NamedValue,
    pub num_attributes: usize,
}
const _: () = assert!(size_of::<Plugin_Attributes_Args>() == 32);

#[repr(C)]
pub struct Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub create_options: *const sys::PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: sys::PJRT_KeyValueGetCallback,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: sys::PJRT_KeyValuePutCallback,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut sys::PJRT_Client,
    pub kv_try_get_callback: *const c_void,
    pub kv_try_get_user_arg: *mut c_void,
}
const _: () = assert!(size_of::<Client_Create_Args>() == 88);

#[repr(C)]
pub struct ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub send_callbacks: *mut *mut sys::PJRT_SendCallbackInfo,
    pub recv_callbacks: *mut *mut sys::PJRT_RecvCallbackInfo,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: i32,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut sys::PJRT_ExecuteContext,
    pub call_location: *const c_char,
    pub num_tasks: usize,
    pub task_ids: *mut i32,
    pub incarnation_ids: *mut i64,
}
const _: () = assert!(size_of::<ExecuteOptions>() == 112);

impl ExecuteOptions {
    /// Options with nothing set but the inputs not to donate and the execute context.
    pub fn new(non_donatable: &[i64], context: *mut sys::PJRT_ExecuteContext) -> Self {
        ExecuteOptions {
            struct_size: size_of::<ExecuteOptions>(),
            extension_start: std::ptr::null_mut(),
            send_callbacks: std::ptr::null_mut(),
            recv_callbacks: std::ptr::null_mut(),
            num_send_ops: 0,
            num_recv_ops: 0,
            launch_id: 0,
            non_donatable_input_indices: if non_donatable.is_empty() {
                std::ptr::null()
            } else {
                non_donatable.as_ptr()
            },
            num_non_donatable_input_indices: non_donatable.len(),
            context,
            call_location: std::ptr::null(),
            num_tasks: 0,
            task_ids: std::ptr::null_mut(),
            incarnation_ids: std::ptr::null_mut(),
        }
    }
}
const _: () = assert!(offset_of!(ExecuteOptions, context) == 72);

#[repr(C)]
pub struct Executable_DeserializeAndLoad_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub client: *mut sys::PJRT_Client,
    pub serialized_executable: *const c_char,
    pub serialized_executable_size: usize,
    pub loaded_executable: *mut sys::PJRT_LoadedExecutable,
    pub overridden_serialized_compile_options: *const c_char,
    pub overridden_serialized_compile_options_size: usize,
}
const _: () = assert!(size_of::<Executable_DeserializeAndLoad_Args>() == 64);

#[repr(C)]
pub struct Executable_GetCompiledMemoryStats_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub executable: *mut sys::PJRT_Executable,
    pub generated_code_size_in_bytes: i64,
    pub argument_size_in_bytes: i64,
    pub output_size_in_bytes: i64,
    pub alias_size_in_bytes: i64,
    pub temp_size_in_bytes: i64,
    pub host_generated_code_size_in_bytes: i64,
    pub host_argument_size_in_bytes: i64,
    pub host_output_size_in_bytes: i64,
    pub host_alias_size_in_bytes: i64,
    pub host_temp_size_in_bytes: i64,
    pub peak_memory_in_bytes: i64,
}
const _: () = assert!(size_of::<Executable_GetCompiledMemoryStats_Args>() == 112);

const _: () = assert!(size_of::<sys::PJRT_ExecuteContext_Create_Args>() == 24);
const _: () = assert!(size_of::<sys::PJRT_ExecuteContext_Destroy_Args>() == 24);

#[repr(C)]
pub struct Buffer_CopyRawToHost_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub buffer: *mut sys::PJRT_Buffer,
    pub dst: *mut c_void,
    pub offset: i64,
    pub transfer_size: i64,
    pub event: *mut sys::PJRT_Event,
}
const _: () = assert!(size_of::<Buffer_CopyRawToHost_Args>() == 56);

#[repr(C)]
pub struct Client_DmaMap_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub client: *mut sys::PJRT_Client,
    pub data: *mut c_void,
    pub size: usize,
}
const _: () = assert!(size_of::<Client_DmaMap_Args>() == 40);

#[repr(C)]
pub struct Client_DmaUnmap_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub client: *mut sys::PJRT_Client,
    pub data: *mut c_void,
}
const _: () = assert!(size_of::<Client_DmaUnmap_Args>() == 32);

#[repr(C)]
pub struct TopologyDescription_Deserialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut sys::PJRT_Extension_Base,
    pub serialized_topology: *const c_char,
    pub serialized_topology_size: usize,
    pub topology: *mut sys::PJRT_TopologyDescription,
}
const _: () = assert!(size_of::<TopologyDescription_Deserialize_Args>() == 40);

/// Reinterprets a pjrt-sys function slot as taking our 0.81 layout of its args struct.
pub fn widen<A, B>(f: Option<unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error>) -> Fn<B> {
    // SAFETY: only a pointer's type changes; the function is the same, and `B` is the layout the
    // plugin's own header gives for that slot (asserted above), at least as large as `A`.
    f.map(|f| unsafe {
        std::mem::transmute::<*const (), unsafe extern "C" fn(*mut B) -> *mut sys::PJRT_Error>(
            f as *const (),
        )
    })
}
