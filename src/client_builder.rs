//! `ClientBuilder`: the options a `Client` opens with (plugin, create options, compile
//! workers, caches, limits), each checked at `open`.

use std::path::PathBuf;
use std::sync::Arc;

use pjrt_actors_core::pjrt::NamedValue;
use pjrt_actors_core::{ClientConfig, Result};

use crate::handles::Client;

/// Options for opening a [`Client`].
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    config: ClientConfig,
}

impl ClientBuilder {
    /// Loads the plugin from this file instead of discovering one. Discovery order otherwise:
    /// env `PJRT_PLUGIN_PATH`, the folder `scripts/bootstrap` installs to, then
    /// `xla_plugins/*/` in Python's site-packages.
    pub fn plugin_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.plugin_path = Some(path.into());
        self
    }

    /// A plugin create option. Known options are type-checked at `open`, since a wrongly typed
    /// value aborts the CPU plugin; a repeated name is rejected.
    pub fn option(mut self, name: impl Into<String>, value: NamedValue) -> Self {
        self.config.options.push((name.into(), value));
        self
    }

    /// The number of CPU devices the CPU plugin creates (its `cpu_device_count`; 4 by default).
    pub fn cpu_device_count(self, n: i64) -> Self {
        self.option("cpu_device_count", NamedValue::Int64(n))
    }

    /// Whether the CPU plugin runs executes on its own threads (`true`, its default and JAX's)
    /// or on the calling thread (`false`, JAX's `jax_cpu_enable_async_dispatch = False`): on
    /// small programs that saves the hand-off, 1.2x to 2x of a call on a 2-core machine
    /// (`cargo bench --bench models`), but the thread that hands an execute to the plugin then
    /// runs the program before it returns. The 0.115 CPU plugin's option; the 0.81 one ignores
    /// it. The environment can set it too (`PJRT_ACTORS_CPU_ASYNCHRONOUS`, or JAX's
    /// `JAX_CPU_ENABLE_ASYNC_DISPATCH`).
    pub fn cpu_asynchronous(self, asynchronous: bool) -> Self {
        self.option("asynchronous", NamedValue::Bool(asynchronous))
    }

    /// A persistent compile cache in `dir` (default: env `PJRT_ACTORS_CACHE_DIR`, else none).
    pub fn compile_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.cache_dir = Some(dir.into());
        self
    }

    /// A compile cache tier on Redis shared by every process and machine using `url`
    /// (`redis://`, `rediss://`, or `redis+cluster://HOST:PORT,…` for a cluster's seed nodes;
    /// default: env `PJRT_ACTORS_CACHE_REDIS`, else none), with single flight across them. See [`RedisCacheConfig`](crate::RedisCacheConfig) for the
    /// lease, waits, size limit, expiry and read-only mode.
    pub fn compile_cache_redis(mut self, url: impl Into<String>) -> Self {
        self.config.cache_redis = Some(crate::RedisCacheConfig::new(url));
        self
    }

    /// Signs every compile-cache entry this client writes (disk and Redis) with the first of
    /// `keys`, and loads only entries one of them verifies: an entry planted by whoever can
    /// write the cache, unsigned or signed with another key, is refused, counted
    /// (`unsigned_entries`) and compiled locally. Default: the file env
    /// `PJRT_ACTORS_CACHE_KEY_FILE` names ([`CacheKeys::from_file`](crate::CacheKeys::from_file)),
    /// else no keys (entries unsigned and trusted, as before).
    pub fn compile_cache_keys(mut self, keys: crate::CacheKeys) -> Self {
        self.config.cache_keys = Some(keys);
        self
    }

    /// A create option from text, typed by the known-options table (`"preallocate"`,
    /// `"false"`; `"visible_devices"`, `"0,1"`): a bad name or value is an error here, before
    /// any plugin sees it. The environment can set some too: `PJRT_ACTORS_PREALLOCATE`,
    /// `PJRT_ACTORS_MEM_FRACTION`, `PJRT_ACTORS_ALLOCATOR`, `PJRT_ACTORS_VISIBLE_DEVICES`, and
    /// JAX's `XLA_PYTHON_CLIENT_PREALLOCATE` / `_MEM_FRACTION` / `_ALLOCATOR`; an option set
    /// here wins.
    pub fn option_text(mut self, name: &str, value: &str) -> crate::Result<Self> {
        let (name, value) = pjrt_actors_core::client::config::parse_option(name, value)?;
        self.config.options.retain(|(n, _)| *n != name);
        self.config.options.push((name, value));
        Ok(self)
    }

    /// One process (`node_id` of `num_nodes`) of a client that spans several processes: sets
    /// the `node_id` and `num_nodes` create options and hands the plugin `store` (for example a
    /// [`RedisKvStore`](crate::RedisKvStore)) as its `kv_get` / `kv_try_get` / `kv_put`
    /// callbacks, through which the processes exchange what they need to form one client.
    /// GPU plugins use them; the CPU plugin ignores them.
    pub fn distributed(
        mut self,
        node_id: i64,
        num_nodes: i64,
        store: std::sync::Arc<dyn crate::KvStore>,
    ) -> Self {
        self.config
            .options
            .retain(|(n, _)| n != "node_id" && n != "num_nodes");
        self.config
            .options
            .push(("node_id".into(), NamedValue::Int64(node_id)));
        self.config
            .options
            .push(("num_nodes".into(), NamedValue::Int64(num_nodes)));
        self.config.kv_store = Some(pjrt_actors_core::client::config::KvStoreHandle(store));
        self
    }

    /// The Redis tier with every setting given.
    pub fn compile_cache_redis_config(mut self, config: crate::RedisCacheConfig) -> Self {
        self.config.cache_redis = Some(config);
        self
    }

    /// The persistent cache's bound in bytes (default 1 GiB); least recently used go first.
    pub fn compile_cache_max_bytes(mut self, bytes: u64) -> Self {
        self.config.cache_max_bytes = Some(bytes);
        self
    }

    /// How many executables the memory cache keeps (default 512; 0 turns it off).
    pub fn memory_cache_entries(mut self, n: usize) -> Self {
        self.config.memory_cache_entries = Some(n);
        self
    }

    /// Compile programs as written where they use an op this plugin build is known to compute
    /// wrong (the known-defect table: by default such a program gets the entry's fix, the
    /// compile options that avoid it, or, with none known, `Error::KnownDefect`). The
    /// environment can set it too: `PJRT_ACTORS_ALLOW_KNOWN_DEFECTS=1`.
    pub fn allow_known_defects(mut self, allow: bool) -> Self {
        self.config.allow_known_defects = allow;
        self
    }

    /// How many compiles may be queued or running at once (default 256). Past it,
    /// `compile_and_load` waits and `try_compile_and_load` answers `Error::Busy`.
    pub fn compile_queue_bound(mut self, n: usize) -> Self {
        self.config.compile_queue_bound = Some(n);
        self
    }

    /// How allocation sites are recorded for heap profiles (default: the caller's file and
    /// line, which costs nothing).
    pub fn site_capture(mut self, mode: pjrt_actors_core::arrays::site::SiteCapture) -> Self {
        self.config.site_capture = mode;
        self
    }

    /// Compiles in worker processes started from `binary` (the `pjrt-actors-compile-worker`
    /// this package builds): a program that crashes the compiler (a failed check, an uncaught
    /// C++ exception) kills one worker and comes back as `Error::CompilerCrashed`; the client
    /// and every other request go on. Each compile pays for serializing the executable in the
    /// worker and loading it here (see the README's benchmarks). A crash while *executing* is
    /// not contained.
    pub fn compile_in_worker(mut self, binary: impl Into<PathBuf>) -> Self {
        self.config.compile_worker = Some(binary.into());
        self
    }

    /// [`compile_in_worker`](Self::compile_in_worker) with the worker binary found by
    /// env `PJRT_ACTORS_COMPILE_WORKER`, else beside the running executable; in-process
    /// compiles when there is none.
    pub fn compile_in_worker_if_found(mut self) -> Self {
        self.config.compile_worker = pjrt_actors_core::compile::worker::find_worker();
        self
    }

    /// Each compile in a worker process is killed past `limit` and answered
    /// `Error::DeadlineExceeded`; the next compile starts a fresh worker. Default: env
    /// `PJRT_ACTORS_COMPILE_TIMEOUT` (seconds), else 10 minutes.
    pub fn compile_timeout(mut self, limit: std::time::Duration) -> Self {
        self.config.compile_timeout = Some(limit);
        self
    }

    /// A worker process's address-space limit in bytes (0: none): a compile that outgrows it
    /// ends the worker, `Error::CompilerCrashed`, instead of filling the machine. Default: env
    /// `PJRT_ACTORS_COMPILE_WORKER_MEMORY` (`8G`, `512M`), else half the machine's memory, at
    /// least 4 GiB.
    pub fn compile_worker_memory(mut self, bytes: u64) -> Self {
        self.config.compile_worker_memory = Some(bytes);
        self
    }

    /// How long shutting the client down waits for compiles still running on its compile
    /// workers (default 120 s): `shutdown`, and dropping the last handle, return by then and
    /// leave a compile still running to finish unjoined. Let such a compile end before the
    /// process exits: an exit tears the plugin down under the thread still compiling in it.
    pub fn shutdown_timeout(mut self, wait: std::time::Duration) -> Self {
        self.config.shutdown_timeout = Some(wait);
        self
    }

    /// How many async executes one device takes in flight (sent, waiting, running or still
    /// computing) before it refuses more with `Error::Busy` at once (default: no limit). The
    /// blocking execute runs on its caller's thread and is not counted.
    pub fn device_queue_limit(mut self, limit: usize) -> Self {
        self.config.device_queue_limit = Some(limit);
        self
    }

    /// Threads in the compiler actor pool (default: the number of cores).
    pub fn compile_threads(mut self, n: usize) -> Self {
        self.config.compile_threads = Some(n);
        self
    }

    /// Loads the plugin, creates the client and starts its actors.
    pub fn open(self) -> Result<Client> {
        let shared = Arc::new(pjrt_actors_core::open_client(self.config)?);
        Ok(Client { shared })
    }

    /// The async form of [`open`](Self::open): the plugin work runs on a helper thread.
    pub async fn open_async(self) -> Result<Client> {
        crate::handles::on_thread("pjrt-actors-open", "client open", move || self.open()).await
    }
}
