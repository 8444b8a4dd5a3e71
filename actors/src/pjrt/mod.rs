//! The PJRT fence: the only module in the project that holds `unsafe` code or a raw pointer.
//! Everything it exports is a safe owner of a PJRT object, or plain data read from one.

mod abi;
mod client;
mod plugin;
mod values;

pub use client::{
    DeviceDescription, DeviceMemoryStats, MemoryDescription, PjrtClient, PjrtDevice, PjrtMemory,
    PjrtTopology,
};
pub use plugin::{PLUGIN_PATH_ENV, Plugin, discovery_candidates};
pub use values::NamedValue;

/// The PJRT C API minor version whose struct layouts this build carries.
pub const LAYOUT_MINOR: i32 = abi::LAYOUT_MINOR;
