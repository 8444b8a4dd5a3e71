//! The PJRT fence: the only crate in the project that holds `unsafe` code or a raw pointer.
//! Everything it exports is a safe owner of a PJRT object, or plain data read from one; every
//! C call goes through the `unsafe fn`s of its `call` module. The error and element types live
//! here too, since the fence is the lowest crate and produces both.

#![deny(unsafe_op_in_unsafe_fn)]

mod abi;
#[cfg(feature = "baseline")]
pub mod baseline;
mod buffer;
mod call;
mod client;
mod compiled;
mod dma;
pub mod dtype;
pub mod error;
mod executable;
mod ffi;
mod ffi_abi;
mod host_transfer;
pub mod kv;
pub mod lapack;
mod layouts;
mod native;
pub mod os;
mod plugin;
mod plugin_bytes;
mod values;

pub use buffer::{HostBuffer, PjrtBuffer, PjrtEvent};
pub use call::{forbid_plugin_calls_on_this_thread, plugin_calls_where_forbidden};
pub use client::{
    DeviceDescription, DeviceMemoryStats, MemoryDescription, PjrtClient, PjrtDevice, PjrtMemory,
    PjrtTopology,
};
pub use compiled::{ArrayType, CompiledMemoryStats, PjrtExecutable};
pub use dma::DmaMapping;
pub use executable::{HostTransfers, PjrtLoadedExecutable, parameter_types};
pub use ffi::{CALLBACK_ID_ATTR, CallbackDispatch, HOST_CALLBACK_TARGET, HostView, HostViewMut};
pub use ffi_abi::FfiSupport;
pub use host_transfer::{HostTransferDispatch, RecvStream};
pub use layouts::{Layout, MemoryKind};
pub use native::{
    AlignedBytes, NativeType, SharedBytes, as_bytes, copy_typed, read_typed, zeroed_vec,
};
pub use plugin::{PLUGIN_PATH_ENV, Plugin};
pub use values::NamedValue;

pub use error::{Error, PjrtCode, PluginError, Result};

/// The PJRT C API minor version whose struct layouts this build carries.
pub const LAYOUT_MINOR: i32 = abi::LAYOUT_MINOR;
