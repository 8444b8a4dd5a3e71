//! pjrt-actors: XLA's PJRT plugins driven as a set of actors, behind cheap `Send + Sync` handles.
//!
//! A [`Client`] owns a PJRT client and the actors that serve it (a client actor that routes,
//! one actor per device and per memory space, a buffer-registry actor, a compile service and
//! its compiler pool) on threads it owns; clone the handle freely across threads.
//!
//! # From open to read-back
//!
//! ```
//! use pjrt_actors::{Client, CompileOptions};
//!
//! const ADD: &str = r#"
//! module @add {
//!   func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
//!     %0 = stablehlo.add %a, %b : tensor<4xf32>
//!     return %0 : tensor<4xf32>
//!   }
//! }"#;
//!
//! # fn main() -> pjrt_actors::Result<()> {
//! // Open: finds the plugin (PJRT_PLUGIN_PATH, the bootstrap folder, Python's site-packages),
//! // reads its devices and memory spaces once, and starts the actors.
//! let client = Client::builder().cpu_device_count(2).open()?;
//! let device = &client.devices()[0];
//!
//! // Compile: checked, then compiled on the compiler pool (or found in the compile cache).
//! let exe = client.compile_and_load(ADD, &CompileOptions::default())?;
//!
//! // Upload: a typed slice, copied during the call, onto one device.
//! let x = device.put(&[1f32, 2.0, 3.0, 4.0], &[4])?;
//!
//! // Execute on the calling thread: the hot path, no actor hop.
//! let y = exe.execute(&[&x, &x])?;
//! // Read back.
//! assert_eq!(y[0].to_vec::<f32>()?, [2.0, 4.0, 6.0, 8.0]);
//!
//! // The same through the actors: the future is served by the device's actor, in order with
//! // the other async work sent there. (`pjrt_actors::wait` drives one future on this thread; any
//! // executor does.)
//! let z = pjrt_actors::wait(exe.execute_async(&[&y[0], &x]))?;
//! assert_eq!(z[0].to_vec::<f32>()?, [3.0, 6.0, 9.0, 12.0]);
//!
//! // Every live array, as JAX's `live_arrays` lists them.
//! assert_eq!(client.live_arrays()?.len(), 3);
//! # Ok(())
//! # }
//! // Dropping the last handle stops the actors and joins their threads.
//! ```
//!
//! # When calls wait
//!
//! Every call that talks to an actor has a blocking form and an `_async` form taking the same
//! arguments (the blocking form waits on the async one): compiles, loads, async executes,
//! uploads, reads, copies, heap profiles, defragments, budgets, topology creation. The
//! blocking `execute`, `put` and `to_vec` run on the caller's thread instead. A future checks
//! its arguments and takes the caller's site when it is made; the request is sent when it is
//! first polled, and dropping it cancels what has not started (a queued compile, an upload
//! still waiting for room under a memory budget). A blocking call inside a host callback that
//! would wait on the thread serving it is refused with `Error::BlockingOnRuntimeThread`.
//!
//! Dropping the last handle (of any kind) stops the actors and joins their threads: it waits
//! for executes in flight and for compiles still running, the latter up to
//! [`ClientBuilder::shutdown_timeout`] (120 s by default), after which they finish unjoined.
//!
//! # Backpressure
//!
//! The compile queue is bounded ([`ClientBuilder::compile_queue_bound`]: wait, or
//! `Error::Busy` with `fail_if_busy`); each device's async queue may be
//! ([`ClientBuilder::device_queue_limit`]: `Error::Busy`); each memory space may have a budget
//! ([`MemorySpace::set_budget`]: `Error::MemoryBudget`, or an async upload waits); a
//! [`serving::Batcher`] bounds its own queue.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ahead_of_time;
mod array;
mod client;
mod client_builder;
mod client_metrics;
mod compile;
mod device;
mod executable;
mod exported_model;
pub mod generate;
mod handles;
pub mod host_data;
pub mod prometheus;
pub mod serving;
/// JAX's serialized `Exported` artifacts: read (`Exported::parse`), and loaded to run
/// ([`Client::load_exported`](crate::Client::load_exported) gives an `ExportedModel`).
pub mod export {
    pub use crate::exported_model::{CALLING_CONVENTIONS, ExportedModel, dotted_path};
    /// What `Exported::parse` refuses bytes with (it converts into [`Error`](crate::Error)).
    pub use pjrt_actors_core::formats::Error as ReadError;
    pub use pjrt_actors_core::formats::exported::{
        Aval, Dim, Exported, ExportedDtype, ExportedSharding, PyTree, SERIALIZATION_VERSIONS,
    };
}
/// Op and dtype pairs a plugin build is known to compute wrong: the table the compile path
/// refuses programs by (`Error::KnownDefect`), and what `pjrt-actors conformance` writes into it.
pub mod known_defects {
    pub use pjrt_actors_core::compile::known_defects::{
        COLUMNS, KnownDefect, known_defects, ops_used, plugin_sha256,
    };
}
/// What a program says of its own partitioning (`mhlo.num_partitions`, Shardy attributes).
pub mod spmd {
    pub use pjrt_actors_core::formats::spmd::{ProgramPartitioning, read};
}
mod sharded;

pub use ahead_of_time::Executable;
pub use client_builder::ClientBuilder;
pub use compile::{CancelToken, CompileCacheStats, CompileRequest};
pub use handles::{Array, Client, Device, LoadedExecutable, MemorySpace, wait};
/// XLA's compile options message (from `pjrt-sys`), for callers who need a field we do not wrap.
pub use pjrt_actors_core::CompileOptionsProto;
pub use pjrt_actors_core::HostArray;
pub use pjrt_actors_core::TopologyDescription;
pub use pjrt_actors_core::arrays::registry::DefragmentReport;
pub use pjrt_actors_core::arrays::site::SiteCapture;
pub use pjrt_actors_core::callbacks::{CallbackKind, HostCallback};
pub use pjrt_actors_core::client::config::CACHE_DIR_ENV;
pub use pjrt_actors_core::compile::disk_cache::DiskCache;
pub use pjrt_actors_core::compile::redis_cache::{
    CACHE_REDIS_ENV, CACHE_REDIS_READ_ONLY_ENV, RedisCacheConfig, RedisTier,
};
pub use pjrt_actors_core::compile::signing::{
    CACHE_KEY_FILE_ENV, CacheKeys, SignatureCount, key_lines, read_key_file,
};
pub use pjrt_actors_core::compile::worker::{
    COMPILE_TIMEOUT_ENV, COMPILE_WORKER_ENV, COMPILE_WORKER_MEMORY_ENV, time_limit,
};
pub use pjrt_actors_core::compile::{CompileOptions, JAX_DEBUG_OPTIONS, XlaOption};
pub use pjrt_actors_core::device::actor::DeviceWorkStats;
pub use pjrt_actors_core::dtype::ElementType;
#[cfg(feature = "redis")]
pub use pjrt_actors_core::fleet::kv_store::RedisKvStore;
pub use pjrt_actors_core::formats::sharding::{Mesh, PartitionSpec, Sharding};
/// Typed ids of index plus epoch, one type per kind (a stale id never names a new thing, and an
/// array's id is not an executable's).
pub use pjrt_actors_core::ids::{ArrayId, ExecutableId, Id, kind};
pub use pjrt_actors_core::pjrt::kv::{KvError, KvStore};
pub use pjrt_actors_core::pjrt::lapack;
pub use pjrt_actors_core::pjrt::{
    ArrayType, CompiledMemoryStats, DeviceMemoryStats, DmaMapping, HostBuffer, HostView,
    HostViewMut, Layout, MemoryKind, NamedValue, NativeType, PLUGIN_PATH_ENV, SharedBytes,
};
pub use pjrt_actors_core::{Error, PjrtCode, PluginError, Result};
pub use sharded::ShardedArray;

/// The README's examples run as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

/// The book's pages (docs/): their Rust examples run as doctests too, so a page cannot drift
/// from the API.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../docs/embedding.md")]
    mod embedding {}
    #[doc = include_str!("../docs/serving.md")]
    mod serving {}
    #[doc = include_str!("../docs/generation.md")]
    mod generation {}
    #[doc = include_str!("../docs/exports.md")]
    mod exports {}
    #[doc = include_str!("../docs/spmd.md")]
    mod spmd {}
    #[doc = include_str!("../docs/fleets.md")]
    mod fleets {}
    #[doc = include_str!("../docs/memory.md")]
    mod memory {}
    #[doc = include_str!("../docs/plugins.md")]
    mod plugins {}
    #[doc = include_str!("../docs/reliability.md")]
    mod reliability {}
    #[doc = include_str!("../docs/security.md")]
    mod security {}
    #[doc = include_str!("../docs/benchmarks.md")]
    mod benchmarks {}
    #[doc = include_str!("../docs/cli.md")]
    mod cli {}
}
