//! The actors of pjrt-actors over the PJRT fence (the `pjrt-actors-fence` crate, re-exported as
//! `pjrt`). Nothing here is user-facing API: the public surface is what the `pjrt-actors` crate
//! needs to build its handles (each actor's handle, the state and formats they pass), plus what
//! its own tests, benches and compile-worker binary check from inside; the rest is private.

#![forbid(unsafe_code)]

pub mod actors;
pub mod arrays;
pub mod callbacks;
pub mod compile;
pub mod config;
mod device_queue;
mod error;
pub mod executable;
pub mod execute;
pub mod formats;
mod guard;
pub mod ids;
#[cfg(feature = "redis")]
pub mod kv_store;
mod lock_rank;
mod open;
#[cfg(feature = "redis")]
pub mod redis_target;
pub mod runtime;
pub mod state;
pub mod supervision;

pub use arrays::host_array::HostArray;
pub use compile::topology::TopologyDescription;
pub use config::ClientConfig;
pub use error::{Error, PjrtCode, PluginError, Result};
pub use guard::ClientGuard;
pub use open::open_client;
pub use pjrt_actors_fence as pjrt;
pub use pjrt_actors_fence::dtype;
/// The compile options XLA reads, as `pjrt-sys` generates them.
pub use pjrt_sys::protos::xla::CompileOptionsProto;
pub use state::{ClientSnapshot, ClientState, DeviceSnapshot, MemorySnapshot};
