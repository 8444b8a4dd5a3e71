//! The actors of pjrt-actors and the one module (`pjrt`) that talks to the PJRT C API.
//! The public crate `pjrt-actors` wraps these in cheap handles; nothing here is user-facing API.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod actors;
pub mod callbacks;
pub mod compile;
pub mod compile_service;
pub mod dtype;
pub mod envelope;
pub mod error;
pub mod execute;
pub mod heap_profile;
pub mod hlo_text;
pub mod open;
pub mod pjrt;
pub mod registry;
pub mod runtime;
pub mod send_recv;
pub mod site;

pub use error::{Error, PjrtCode, PluginError, Result};
pub use open::{
    ClientConfig, ClientParts, ClientSnapshot, DeviceSnapshot, MemorySnapshot, open_client,
};
