//! pjrt-actors: XLA's PJRT plugins driven as a set of actors, behind cheap `Send + Sync` handles.
//!
//! A [`Client`] owns a PJRT client and the actors that serve it (a client actor, one actor per
//! device and per memory space) on threads it owns; clone the handle freely across threads. Every
//! call that talks to an actor has a blocking form and an `_async` form (ahead-of-time
//! `CompileRequest::compile` and `compile_for_topology` block only: run them on a thread of your
//! own to wait for them asynchronously). Dropping the last handle (of any kind) stops the
//! actors and joins their threads: it waits for executes in flight and for compiles still
//! running, the latter up to `ClientBuilder::shutdown_timeout` (120 s by default), after which
//! they finish unjoined.
//!
//! ```no_run
//! let client = pjrt_actors::Client::builder().cpu_device_count(2).open()?;
//! for device in client.devices() {
//!     println!("{device}: {} memory spaces", device.memory_spaces().len());
//! }
//! # Ok::<(), pjrt_actors::Error>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ahead_of_time;
mod array;
mod client;
mod client_builder;
mod compile;
mod device;
mod executable;
mod exported_model;
mod handles;
pub mod host_data;
pub mod serving;
/// JAX's serialized `Exported` artifacts: read (`Exported::parse`), and loaded to run
/// ([`Client::load_exported`](crate::Client::load_exported) gives an `ExportedModel`).
pub mod export {
    pub use crate::exported_model::{CALLING_CONVENTIONS, ExportedModel, dotted_path};
    pub use pjrt_actors_core::exported::{
        Aval, Dim, Exported, ExportedDtype, ExportedSharding, PyTree, SERIALIZATION_VERSIONS,
    };
}
/// What a program says of its own partitioning (`mhlo.num_partitions`, Shardy attributes).
pub mod spmd {
    pub use pjrt_actors_core::spmd::{ProgramPartitioning, read};
}
mod sharded;

pub use ahead_of_time::Executable;
pub use array::{ArrayId, HostBuffer};
pub use client_builder::ClientBuilder;
pub use compile::{CancelToken, CompileCacheStats, CompileRequest};
pub use handles::{Array, Client, Device, LoadedExecutable, MemorySpace};
pub use pjrt_actors_core::TopologyDescription;
pub use pjrt_actors_core::actors::device::DeviceWorkStats;
pub use pjrt_actors_core::actors::registry::DefragmentReport;
pub use pjrt_actors_core::callbacks::{CallbackKind, HostArray, HostCallback};
pub use pjrt_actors_core::compile::{CompileOptions, JAX_DEBUG_OPTIONS, XlaOption};
pub use pjrt_actors_core::compile_worker::{
    COMPILE_TIMEOUT_ENV, COMPILE_WORKER_ENV, COMPILE_WORKER_MEMORY_ENV, time_limit,
};
pub use pjrt_actors_core::config::CACHE_DIR_ENV;
pub use pjrt_actors_core::disk_cache::DiskCache;
pub use pjrt_actors_core::dtype::ElementType;
pub use pjrt_actors_core::kv_store::RedisKvStore;
pub use pjrt_actors_core::pjrt::kv::{KvError, KvStore};
pub use pjrt_actors_core::pjrt::lapack;
pub use pjrt_actors_core::pjrt::{
    ArrayType, CompiledMemoryStats, DeviceMemoryStats, DmaMapping, HostView, HostViewMut, Layout,
    MemoryKind, NamedValue, NativeType, PLUGIN_PATH_ENV, SharedBytes,
};
pub use pjrt_actors_core::redis_cache::{
    CACHE_REDIS_ENV, CACHE_REDIS_READ_ONLY_ENV, RedisCacheConfig, RedisTier,
};
pub use pjrt_actors_core::sharding::{Mesh, PartitionSpec, Sharding};
pub use pjrt_actors_core::site::SiteCapture;
pub use pjrt_actors_core::{Error, PjrtCode, PluginError, Result};
/// XLA's compile options message (from `pjrt-sys`), for callers who need a field we do not wrap.
pub use pjrt_sys::protos::xla::CompileOptionsProto;
pub use sharded::ShardedArray;

/// The README's examples run as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
