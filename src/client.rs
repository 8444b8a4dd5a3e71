//! The `Client` handle and its builder: the entry point, mirroring jaxlib's `Client` (platform,
//! devices, topology), over the client actor and an immutable snapshot taken at open.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, Message};
use pjrt_actors_core::actors::client::{GetTopology, TopologySnapshot};
use pjrt_actors_core::actors::mailbox_error;
use pjrt_actors_core::actors::registry::{Defragment, DefragmentReport, HeapProfile};
use pjrt_actors_core::pjrt::{DeviceDescription, DmaMapping, Layout, NamedValue};
use pjrt_actors_core::registry::ArrayOwner;
use pjrt_actors_core::runtime::block_on;
use pjrt_actors_core::{ClientConfig, ClientParts, ClientSnapshot, Error, Result, open_client};

use crate::device::Device;

/// What every handle of one client shares. Dropping the last one stops the actors.
pub(crate) struct Shared {
    pub(crate) parts: ClientParts,
}

impl Shared {
    pub(crate) fn snapshot(&self) -> &ClientSnapshot {
        &self.parts.snapshot
    }
}

impl ArrayOwner for Shared {
    fn buffers(&self) -> &pjrt_actors_core::registry::BufferRegistry {
        &self.parts.resources.buffers
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    fn check_open(&self) -> Result<()> {
        self.parts.resources.check_open()
    }
}

/// Returns `Pending` once (waking itself at once), then `Ready`.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

/// Sends `msg` to an actor and waits for the answer on the calling thread.
pub(crate) fn ask<A, M, T>(addr: &Addr<A>, msg: M) -> Result<T>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message<Result = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    block_on(addr.send(msg))?.map_err(mailbox_error)?
}

/// Sends `msg` (whose answer is not a `Result`) to an actor and waits on the calling thread.
pub(crate) fn ask_plain<A, M>(addr: &Addr<A>, msg: M) -> Result<M::Result>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message + Send + 'static,
    M::Result: Send,
{
    block_on(addr.send(msg))?.map_err(mailbox_error)
}

/// Sends `msg` to an actor and awaits the answer.
pub(crate) async fn ask_async<A, M, T>(addr: &Addr<A>, msg: M) -> Result<T>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message<Result = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    addr.send(msg).await.map_err(mailbox_error)?
}

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

    /// A persistent compile cache in `dir` (default: env `PJRT_ACTORS_CACHE_DIR`, else none).
    pub fn compile_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.cache_dir = Some(dir.into());
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

    /// Threads in the compiler actor pool (default: the number of cores).
    pub fn compile_threads(mut self, n: usize) -> Self {
        self.config.compile_threads = Some(n);
        self
    }

    /// Loads the plugin, creates the client and starts its actors.
    pub fn open(self) -> Result<Client> {
        let parts = open_client(self.config)?;
        Ok(Client {
            shared: Arc::new(Shared { parts }),
        })
    }

    /// The async form of [`open`](Self::open): the plugin work runs on a helper thread.
    pub async fn open_async(self) -> Result<Client> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("pjrt-actors-open".into())
            .spawn(move || {
                let _ = tx.send(self.open());
            })
            .map_err(|e| Error::Cancelled(format!("cannot start the open thread: {e}")))?;
        rx.await
            .map_err(|_| Error::Cancelled("open was abandoned".into()))?
    }
}

/// A client of one PJRT plugin: cheap to clone, `Send + Sync`, usable from any thread.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
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

/// A topology description: the devices a compile can target, and its serialized bytes.
#[derive(Debug, Clone)]
pub struct TopologyDescription {
    /// The platform, as the plugin names it.
    pub platform_name: String,
    /// The platform version.
    pub platform_version: String,
    /// One description per device of the topology.
    pub device_descriptions: Vec<DeviceDescription>,
    /// Plugin-defined attributes of the topology.
    pub attributes: Vec<(String, NamedValue)>,
    /// The plugin's serialization of the topology.
    pub serialized: Vec<u8>,
}

impl TopologyDescription {
    /// A topology known only by its serialized bytes (e.g. read back from a file). The plugin
    /// offers no deserializer for CPU topologies, so the other fields are left empty; compiling
    /// for it works where a client here has exactly this topology.
    pub fn from_serialized(bytes: Vec<u8>) -> Self {
        TopologyDescription {
            platform_name: String::new(),
            platform_version: String::new(),
            device_descriptions: Vec::new(),
            attributes: Vec::new(),
            serialized: bytes,
        }
    }
}

impl From<TopologySnapshot> for TopologyDescription {
    fn from(t: TopologySnapshot) -> Self {
        TopologyDescription {
            platform_name: t.platform_name,
            platform_version: t.platform_version,
            device_descriptions: t.devices,
            attributes: t.attributes,
            serialized: t.serialized,
        }
    }
}

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
        self.shared.snapshot()
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
            .position(|d| d.id == id)
            .map(|i| self.device(i))
            .ok_or_else(|| Error::NotFound {
                what: "device",
                key: format!("id {id}"),
            })
    }

    /// Every array still alive (py_client's `live_arrays`). Listed on the calling thread under
    /// the registry's shard locks: a read of the registry, not a request to its actor.
    pub fn live_arrays(&self) -> Result<Vec<crate::Array>> {
        let resources = &self.shared.parts.resources;
        resources.check_open()?;
        let _span = tracing::debug_span!("registry.list").entered();
        Ok(resources
            .buffers
            .live_arrays()
            .into_iter()
            .map(|core| self.wrap_array(core))
            .collect())
    }

    /// The async form of [`live_arrays`](Self::live_arrays). Listing waits on nothing, so it
    /// first gives the executor a turn: a task listing in a loop still lets others run, and
    /// can be cancelled.
    pub async fn live_arrays_async(&self) -> Result<Vec<crate::Array>> {
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
        let span = tracing::Span::current();
        ask(&self.shared.parts.buffer_registry, HeapProfile { span })
    }

    /// The async form of [`heap_profile`](Self::heap_profile).
    pub async fn heap_profile_async(&self) -> Result<Vec<u8>> {
        let span = tracing::Span::current();
        ask_async(&self.shared.parts.buffer_registry, HeapProfile { span }).await
    }

    /// Moves every live buffer, on any backend: copies each to host, frees its device copy,
    /// uploads it again and swaps it in behind the same array, so every handle stays valid and
    /// sees the same data (JAX offers this on GPU only). Runs while other threads work: a
    /// request touching a buffer being moved waits for it. If an upload fails, nothing is
    /// lost: that array's bytes stay in host memory (still readable), the error lists them,
    /// and the next defragment puts them back.
    pub fn defragment(&self) -> Result<DefragmentReport> {
        self.defragment_failing_after(None)
    }

    /// The async form of [`defragment`](Self::defragment).
    pub async fn defragment_async(&self) -> Result<DefragmentReport> {
        let request = Defragment {
            fail_after: None,
            span: tracing::Span::current(),
        };
        ask_async(&self.shared.parts.buffer_registry, request).await
    }

    /// Test support: a defragment whose uploads fail after `n` succeeded.
    #[doc(hidden)]
    pub fn defragment_failing_after(&self, n: Option<usize>) -> Result<DefragmentReport> {
        let request = Defragment {
            fail_after: n,
            span: tracing::Span::current(),
        };
        ask(&self.shared.parts.buffer_registry, request)
    }

    /// The plugin's default layout for `dtype` × `dims` on `device` (its Layouts extension;
    /// py_client's `get_default_layout`).
    pub fn default_layout(
        &self,
        dtype: crate::ElementType,
        dims: &[i64],
        device: &crate::Device,
    ) -> Result<Layout> {
        self.shared.parts.resources.check_open()?;
        if device.client() != *self {
            return Err(Error::InvalidArgument(format!(
                "{device} belongs to another client"
            )));
        }
        pjrt_actors_core::dtype::byte_size(dtype, dims)?;
        self.shared.parts.resources.pjrt.default_layout(dtype, dims)
    }

    /// Maps host memory for DMA (py_client's `dma_map`). The mapping owns the memory, so it
    /// stays valid for as long as it is mapped, whatever the caller does; `DmaMapping::unmap`
    /// (or dropping it) unmaps. Plugins without DMA support (the CPU plugin) answer
    /// `Error::Unsupported`, and the memory is dropped with the error.
    pub fn dma_map(&self, memory: Box<[u8]>) -> Result<DmaMapping> {
        self.shared.parts.resources.check_open()?;
        self.shared.parts.resources.pjrt.dma_map(memory)
    }

    /// Shuts the client down now, whatever handles remain: its actors stop and their threads
    /// are joined, queued compiles are refused, and every later call on any handle of this
    /// client (arrays and executables included) fails with `Error::ShutDown`. Dropping the
    /// last handle does the same implicitly. Idempotent.
    pub fn shutdown(&self) {
        self.shared.parts.shutdown();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.parts.resources.check_open().is_err()
    }

    /// The number of live arrays, without making handles for them.
    pub fn live_array_count(&self) -> usize {
        self.shared.parts.resources.buffers.len()
    }

    /// The number of threads in the compiler pool.
    pub fn compile_threads(&self) -> usize {
        self.shared.parts.compile_threads
    }

    fn topology_request() -> GetTopology {
        GetTopology {
            span: tracing::Span::current(),
        }
    }

    /// The client's topology description, read by the client actor.
    pub fn topology(&self) -> Result<TopologyDescription> {
        ask(&self.shared.parts.client, Self::topology_request()).map(Into::into)
    }

    /// The async form of [`topology`](Self::topology).
    pub async fn topology_async(&self) -> Result<TopologyDescription> {
        ask_async(&self.shared.parts.client, Self::topology_request())
            .await
            .map(Into::into)
    }
}
