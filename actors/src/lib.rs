//! The actors of pjrt-actors over the PJRT fence (the `pjrt-actors-fence` crate, re-exported as
//! `pjrt`). The public crate `pjrt-actors` wraps these in cheap handles; nothing here is
//! user-facing API.

#![forbid(unsafe_code)]

pub mod actors;
pub mod buffers;
pub mod callbacks;
pub mod compile;
pub mod compile_cache;
pub mod compile_env;
pub mod compile_worker;
pub mod config;
pub mod custom_call_layouts;
pub mod device_queue;
pub mod disk_cache;
pub mod envelope;
pub mod error;
pub mod executable;
pub mod execute;
pub mod exported;
mod exported_check;
pub mod flatbuf;
mod flight;
pub mod guard;
pub mod heap_profile;
pub mod hlo_text;
#[cfg(feature = "redis")]
pub mod kv_store;
pub mod lock_rank;
pub mod memory_account;
pub mod mlir_bytecode;
pub mod open;
pub mod program_check;
pub mod pytree;
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
pub mod topology;
pub mod xla_options;

pub use config::ClientConfig;
pub use error::{Error, PjrtCode, PluginError, Result};
pub use guard::ClientGuard;
pub use open::open_client;
pub use pjrt_actors_fence as pjrt;
pub use pjrt_actors_fence::dtype;
/// The compile options XLA reads, as `pjrt-sys` generates them.
pub use pjrt_sys::protos::xla::CompileOptionsProto;
pub use state::{ClientSnapshot, ClientState, DeviceSnapshot, MemorySnapshot};
pub use topology::TopologyDescription;
