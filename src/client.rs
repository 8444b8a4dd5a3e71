//! The `Client` handle and its builder: the entry point, mirroring jaxlib's `Client` (platform,
//! devices, topology), over the client actor and an immutable snapshot taken at open.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use pjrt_actors_core::actors::client::GetTopology;
use pjrt_actors_core::actors::registry::{Defragment, DefragmentReport, HeapProfile};
use pjrt_actors_core::pjrt::{DmaMapping, Layout, NamedValue, SharedBytes};
use pjrt_actors_core::{
    ClientConfig, ClientSnapshot, ClientState, Error, Result, TopologyDescription,
};

use crate::handles::{Array, Client, Device, remember_client, wait, yield_once};

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
    /// (`redis://` or `rediss://`; default: env `PJRT_ACTORS_CACHE_REDIS`, else none), with
    /// single flight across them. See [`RedisCacheConfig`](crate::RedisCacheConfig) for the
    /// lease, waits, size limit, expiry and read-only mode.
    pub fn compile_cache_redis(mut self, url: impl Into<String>) -> Self {
        self.config.cache_redis = Some(crate::RedisCacheConfig::new(url));
        self
    }

    /// A create option from text, typed by the known-options table (`"preallocate"`,
    /// `"false"`; `"visible_devices"`, `"0,1"`): a bad name or value is an error here, before
    /// any plugin sees it. The environment can set some too: `PJRT_ACTORS_PREALLOCATE`,
    /// `PJRT_ACTORS_MEM_FRACTION`, `PJRT_ACTORS_ALLOCATOR`, `PJRT_ACTORS_VISIBLE_DEVICES`, and
    /// JAX's `XLA_PYTHON_CLIENT_PREALLOCATE` / `_MEM_FRACTION` / `_ALLOCATOR`; an option set
    /// here wins.
    pub fn option_text(mut self, name: &str, value: &str) -> crate::Result<Self> {
        let (name, value) = pjrt_actors_core::config::parse_option(name, value)?;
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
        self.config.kv_store = Some(pjrt_actors_core::config::KvStoreHandle(store));
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

    /// How many compiles may be queued or running at once (default 256). Past it,
    /// `compile_and_load` waits and `try_compile_and_load` answers `Error::Busy`.
    pub fn compile_queue_bound(mut self, n: usize) -> Self {
        self.config.compile_queue_bound = Some(n);
        self
    }

    /// How allocation sites are recorded for heap profiles (default: the caller's file and
    /// line, which costs nothing).
    pub fn site_capture(mut self, mode: pjrt_actors_core::site::SiteCapture) -> Self {
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
        self.config.compile_worker = pjrt_actors_core::compile_worker::find_worker();
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
    /// leave a compile still running to finish unjoined.
    pub fn shutdown_timeout(mut self, wait: std::time::Duration) -> Self {
        self.config.shutdown_timeout = Some(wait);
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
        remember_client(&shared);
        Ok(Client { shared })
    }

    /// The async form of [`open`](Self::open): the plugin work runs on a helper thread.
    pub async fn open_async(self) -> Result<Client> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("pjrt-actors-open".into())
            .spawn(move || {
                let _ = tx.send(self.open());
            })
            .map_err(|e| Error::ThreadSpawn {
                what: "client open",
                reason: e.to_string(),
            })?;
        rx.await.map_err(|_| Error::ThreadSpawn {
            what: "client open",
            reason: "it ended without an answer".into(),
        })?
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("platform", &self.raw_platform_name())
            .field("devices", &self.device_count())
            .finish()
    }
}

impl PartialEq for Client {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}
impl Eq for Client {}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Opens a client on the discovered plugin with default options.
    pub fn open() -> Result<Client> {
        Self::builder().open()
    }

    fn snap(&self) -> &ClientSnapshot {
        self.shared.state().snapshot()
    }

    pub(crate) fn state(&self) -> &Arc<ClientState> {
        self.shared.state()
    }

    /// The platform, with GPU platforms folded into `"gpu"` as jaxlib does.
    pub fn platform(&self) -> &str {
        match self.snap().platform_name.as_str() {
            "cuda" | "rocm" => "gpu",
            other => other,
        }
    }

    /// The platform name exactly as the plugin reports it.
    pub fn raw_platform_name(&self) -> &str {
        &self.snap().platform_name
    }

    /// The platform version the plugin reports.
    pub fn platform_version(&self) -> &str {
        &self.snap().platform_version
    }

    /// The kind of runtime underneath: always the PJRT C API here.
    pub fn runtime_type(&self) -> &'static str {
        "pjrt_c_api"
    }

    /// The plugin's PJRT C API version, (major, minor).
    pub fn plugin_api_version(&self) -> (i32, i32) {
        self.snap().plugin_api_version
    }

    /// The file the plugin was loaded from.
    pub fn plugin_path(&self) -> &std::path::Path {
        &self.snap().plugin_path
    }

    /// Plugin attributes: `xla_version`, `stablehlo_current_version`,
    /// `stablehlo_minimum_version` and whatever else the plugin reports.
    pub fn plugin_attributes(&self) -> &[(String, NamedValue)] {
        &self.snap().plugin_attributes
    }

    /// One plugin attribute by name.
    pub fn plugin_attribute(&self, name: &str) -> Option<&NamedValue> {
        self.plugin_attributes()
            .iter()
            .find_map(|(k, v)| (k == name).then_some(v))
    }

    /// Client attributes: the plugin's, then its API version and the platform, as named values.
    pub fn attributes(&self) -> Vec<(String, NamedValue)> {
        let (major, minor) = self.plugin_api_version();
        let mut out = self.plugin_attributes().to_vec();
        out.push((
            "pjrt_c_api_major_version".into(),
            NamedValue::Int64(major.into()),
        ));
        out.push((
            "pjrt_c_api_minor_version".into(),
            NamedValue::Int64(minor.into()),
        ));
        out.push((
            "platform_name".into(),
            NamedValue::String(self.raw_platform_name().into()),
        ));
        out.push((
            "platform_version".into(),
            NamedValue::String(self.platform_version().into()),
        ));
        out
    }

    /// This process's index among the processes sharing the devices (0 on CPU).
    pub fn process_index(&self) -> i32 {
        self.snap().process_index
    }

    /// Number of devices in the client, addressable or not.
    pub fn device_count(&self) -> usize {
        self.snap().devices.len()
    }

    /// Number of devices this process can address.
    pub fn local_device_count(&self) -> usize {
        self.snap()
            .devices
            .iter()
            .filter(|d| d.is_addressable)
            .count()
    }

    fn device(&self, index: usize) -> Device {
        Device::new(self.shared.clone(), index)
    }

    /// Every device of the client.
    pub fn devices(&self) -> Vec<Device> {
        (0..self.device_count()).map(|i| self.device(i)).collect()
    }

    /// The devices this process can address.
    pub fn local_devices(&self) -> Vec<Device> {
        self.devices()
            .into_iter()
            .filter(|d| d.is_addressable())
            .collect()
    }

    /// Every device of every process (one process here: the same as [`devices`](Self::devices)).
    pub fn all_devices(&self) -> Vec<Device> {
        self.devices()
    }

    /// The addressable device with this local hardware id.
    pub fn device_from_local_hardware_id(&self, local_hardware_id: i32) -> Result<Device> {
        self.snap()
            .devices
            .iter()
            .position(|d| d.local_hardware_id == Some(local_hardware_id))
            .map(|i| self.device(i))
            .ok_or_else(|| Error::NotFound {
                what: "addressable device",
                key: format!("local hardware id {local_hardware_id}"),
            })
    }

    /// The device with this id.
    pub fn device_by_id(&self, id: i32) -> Result<Device> {
        self.snap()
            .devices
            .iter()
            .position(|d| d.description.id == id)
            .map(|i| self.device(i))
            .ok_or_else(|| Error::NotFound {
                what: "device",
                key: format!("id {id}"),
            })
    }

    /// Every array still alive (py_client's `live_arrays`). Listed on the calling thread under
    /// the registry's shard locks: a read of the registry, not a request to its actor.
    pub fn live_arrays(&self) -> Result<Vec<Array>> {
        let _span = tracing::debug_span!("registry.list").entered();
        Ok((self.state().live_arrays()?.into_iter())
            .map(Array::new)
            .collect())
    }

    /// The async form of [`live_arrays`](Self::live_arrays). Listing waits on nothing, so it
    /// first gives the executor a turn: a task listing in a loop still lets others run, and
    /// can be cancelled.
    pub async fn live_arrays_async(&self) -> Result<Vec<Array>> {
        yield_once().await;
        self.live_arrays()
    }

    /// A heap profile of every live array and executable, as the bytes of a pprof `Profile`
    /// (py_client's `heap_profile`): sample types `allocations/count` and `space/bytes`, one
    /// sample per (allocation site, size, device) for buffers and per (site, code size) for
    /// executables, labelled `kind` (`buffer`/`executable`) and `device`. Open it with
    /// `go tool pprof -http=: heap.pb`. Sites are recorded as
    /// [`ClientBuilder::site_capture`] says.
    pub fn heap_profile(&self) -> Result<Vec<u8>> {
        wait(self.heap_profile_async())
    }

    /// The async form of [`heap_profile`](Self::heap_profile): the request goes through the
    /// client actor to the buffer-registry actor.
    pub fn heap_profile_async(&self) -> impl Future<Output = Result<Vec<u8>>> + use<> {
        let span = tracing::Span::current();
        self.shared.route(HeapProfile { span })
    }

    /// Moves every live buffer, on any backend: copies each to host, frees its device copy,
    /// uploads it again and swaps it in behind the same array, so every handle stays valid and
    /// sees the same data (JAX offers this on GPU only). Runs while other threads work: a
    /// request touching a buffer being moved waits for it. If an upload fails, nothing is
    /// lost: that array's bytes stay in host memory (still readable), the error lists them,
    /// and the next defragment puts them back.
    pub fn defragment(&self) -> Result<DefragmentReport> {
        wait(self.defragment_async())
    }

    /// The async form of [`defragment`](Self::defragment): the request goes through the
    /// client actor to the buffer-registry actor.
    pub fn defragment_async(&self) -> impl Future<Output = Result<DefragmentReport>> + use<> {
        let span = tracing::Span::current();
        self.shared.route(Defragment { span })
    }

    /// Test support: a defragment whose uploads fail once `succeed` of them have succeeded.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn defragment_failing_after(&self, succeed: usize) -> Result<DefragmentReport> {
        use pjrt_actors_core::actors::registry::DefragmentFailingAfter;
        wait(self.shared.route(DefragmentFailingAfter { succeed }))
    }

    /// The plugin's default layout for `dtype` × `dims` on `device` (its Layouts extension;
    /// py_client's `get_default_layout`).
    pub fn default_layout(
        &self,
        dtype: crate::ElementType,
        dims: &[i64],
        device: &crate::Device,
    ) -> Result<Layout> {
        if device.client() != *self {
            return Err(Error::InvalidArgument(format!(
                "{device} belongs to another client"
            )));
        }
        self.state().default_layout(dtype, dims)
    }

    /// Maps host memory for DMA (py_client's `dma_map`): pinned staging for transfers. The
    /// mapping holds the memory, which must have no other holder. Upload from it without a
    /// copy (`HostBuffer::ZeroCopy(mapping.bytes())`), and read arrays back into it
    /// (`array.read_bytes_into(&mut mapping.memory_mut()?[..n])`, allowed while no array
    /// aliases it). It stays mapped while the mapping or any array aliasing it lives;
    /// `DmaMapping::unmap` unmaps at once and hands the memory back. Plugins without DMA
    /// support (the CPU plugin) answer `Error::Unsupported`, and the memory is dropped with the
    /// error.
    pub fn dma_map(&self, memory: SharedBytes) -> Result<DmaMapping> {
        self.state().dma_map(memory)
    }

    /// Shuts the client down now, whatever handles remain: its actors stop and their threads
    /// are joined, queued compiles are refused, and every later call on any handle of this
    /// client (arrays and executables included) fails with `Error::ShutDown`. Dropping the
    /// last handle does the same implicitly. Idempotent.
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.state().check_open().is_err()
    }

    /// The number of live arrays, without making handles for them.
    pub fn live_array_count(&self) -> usize {
        self.state().live_array_count()
    }

    /// The number of threads in the compiler pool.
    pub fn compile_threads(&self) -> usize {
        self.state().compile_threads()
    }

    /// The client's topology description, read by the client actor.
    pub fn topology(&self) -> Result<TopologyDescription> {
        wait(self.topology_async())
    }

    /// The async form of [`topology`](Self::topology).
    pub fn topology_async(&self) -> impl Future<Output = Result<TopologyDescription>> + use<> {
        // Read once at open: no message, no plugin call (a plugin that could not describe it
        // then is asked through the client actor, which says why).
        let state = self.shared.state();
        let read = (state.check_open())
            .map(|()| state.topology_description().cloned())
            .transpose();
        let span = tracing::Span::current();
        let asked = read
            .is_none()
            .then(|| self.shared.route(GetTopology { span }));
        async move {
            match (read, asked) {
                (Some(read), _) => read,
                (None, Some(asked)) => asked.await,
                (None, None) => unreachable!("asked when not read"),
            }
        }
    }
}
