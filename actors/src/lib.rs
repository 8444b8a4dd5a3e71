//! The actors of pjrt-actors over the PJRT fence (the `pjrt-actors-fence` crate, re-exported as
//! `pjrt`). Nothing here is user-facing API. Its public surface is what the `pjrt-actors` crate
//! builds its handles from, plus what its tests, benches and compile-worker binary check from
//! inside:
//! - opening and holding a client: `open_client`, `ClientConfig`, `ClientGuard` (which hands
//!   out each actor's handle: `DeviceHandle`, `MemoryHandle`, `RouterHandle`, `RegistryHandle`,
//!   `CompileServiceHandle`, `CompilerPoolHandle`), `ClientState` and its snapshots, and the
//!   runtime's `block_on`;
//! - what the handles pass: arrays (`HostArray`, `ArrayCore`, sites, donation), executables
//!   (`ExecutableCore`, `ExecutableMeta`), host callbacks, and `Error`;
//! - the compile flow (`compile::flow`) and its parts a caller names: `CompileOptions`, the
//!   cancel token, envelopes, topologies, the known-defect table, the compile worker's side;
//! - the fleet's Redis target and key-value store (`fleet`, with the `redis` feature);
//! - the fence (`pjrt`), element types (`dtype`) and the format readers (`formats`).
//!
//! Everything else is crate-private: the messages, the lock ranks, the queue policies.

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
