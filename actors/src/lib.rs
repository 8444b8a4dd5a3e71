//! The actors of pjrt-actors over the PJRT fence (the `pjrt-actors-fence` crate, re-exported as
//! `pjrt`). Nothing here is user-facing API: the public surface is what the `pjrt-actors` crate
//! needs to build its handles (each actor's handle, the state and formats they pass), plus what
//! its own tests, benches and compile-worker binary check from inside; the rest is private.

#![forbid(unsafe_code)]

pub mod actors;
pub mod buffers;
pub mod callbacks;
pub mod compile;
pub mod compile_cache;
mod compile_env;
pub mod compile_worker;
pub mod config;
pub mod custom_call_layouts;
mod device_queue;
pub mod disk_cache;
pub mod envelope;
mod error;
pub mod executable;
pub mod execute;
pub mod exported;
mod exported_check;
mod flatbuf;
mod flight;
mod guard;
pub mod heap_profile;
pub mod hlo_text;
pub mod host_array;
#[cfg(feature = "redis")]
pub mod kv_store;
mod lock_rank;
mod memory_account;
mod mlir_bytecode;
mod open;
pub mod program_check;
mod pytree;
pub mod redis_cache;
pub mod registry;
pub mod runtime;
pub mod send_recv;
pub mod shard_blocks;
pub mod sharding;
pub mod site;
pub mod spmd;
pub mod state;
pub mod supervision;
mod topology;
mod xla_options;

pub use config::ClientConfig;
pub use error::{Error, PjrtCode, PluginError, Result};
pub use guard::ClientGuard;
pub use host_array::HostArray;
pub use open::open_client;
pub use pjrt_actors_fence as pjrt;
pub use pjrt_actors_fence::dtype;
/// The compile options XLA reads, as `pjrt-sys` generates them.
pub use pjrt_sys::protos::xla::CompileOptionsProto;
pub use state::{ClientSnapshot, ClientState, DeviceSnapshot, MemorySnapshot};
pub use topology::TopologyDescription;
