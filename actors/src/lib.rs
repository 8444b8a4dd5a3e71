//! The actors of pjrt-actors over the PJRT fence (the `pjrt-actors-fence` crate, re-exported as
//! `pjrt`). Nothing here is user-facing API: the public surface is what the `pjrt-actors` crate
//! needs to build its handles (each actor's handle, the state and formats they pass), plus what
//! its own tests, benches and compile-worker binary check from inside; the rest is private.

#![forbid(unsafe_code)]

pub mod arrays;
pub mod callbacks;
pub mod client;
pub mod compile;
pub mod device;
mod error;
pub mod execute;
#[cfg(feature = "redis")]
pub mod fleet;
pub mod ids;
mod lock_rank;
pub mod protocol;

pub use arrays::host_array::HostArray;
pub use client::config::ClientConfig;
pub use client::guard::ClientGuard;
pub use client::open::open_client;
pub use client::state::{ClientSnapshot, ClientState, DeviceSnapshot, MemorySnapshot};
pub use compile::topology::TopologyDescription;
pub use error::{Error, PjrtCode, PluginError, Result};
pub use pjrt_actors_fence as pjrt;
pub use pjrt_actors_fence::dtype;
/// The format readers (their own crate, `pjrt-actors-formats`: no PJRT, no actors).
pub use pjrt_actors_formats as formats;
/// The compile options XLA reads, as the format crate generates them.
pub use pjrt_actors_formats::protos::xla::CompileOptionsProto;
