//! The `Client` handle: the entry point, mirroring jaxlib's `Client` (platform, devices,
//! topology), over the client actor and an immutable snapshot taken at open. Its builder is
//! in client_builder.rs.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use pjrt_actors_core::arrays::registry::DefragmentReport;
use pjrt_actors_core::pjrt::{DmaMapping, Layout, NamedValue, SharedBytes};
use pjrt_actors_core::{ClientSnapshot, ClientState, Error, Result, TopologyDescription};

use crate::client_builder::ClientBuilder;
use crate::handles::{Array, Client, Device, wait, yield_once};

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

    /// The newest StableHLO the plugin parses, as `1.20.0` (`unknown` where it does not say):
    /// the form the known-defect table keys plugins by.
    pub fn plugin_stablehlo_version(&self) -> String {
        pjrt_actors_core::compile::program_check::plugin_stablehlo(self.plugin_attributes())
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

    /// The async form of [`heap_profile`](Self::heap_profile): the request goes straight to
    /// the buffer-registry actor, which owns whole-registry work (a profile is not routed: the
    /// client actor would only forward it).
    pub fn heap_profile_async(&self) -> impl Future<Output = Result<Vec<u8>>> + use<> {
        self.shared.registry().heap_profile()
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

    /// The async form of [`defragment`](Self::defragment): the request goes straight to the
    /// buffer-registry actor, which owns whole-registry work.
    pub fn defragment_async(&self) -> impl Future<Output = Result<DefragmentReport>> + use<> {
        self.shared.registry().defragment()
    }

    /// Test support: a defragment whose uploads fail once `succeed` of them have succeeded.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn defragment_failing_after(&self, succeed: usize) -> Result<DefragmentReport> {
        wait(self.shared.registry().defragment_failing_after(succeed))
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
        let asked = (read.is_none()).then(|| self.shared.compiler_pool().topology());
        async move {
            match (read, asked) {
                (Some(read), _) => read,
                (None, Some(asked)) => asked.await,
                (None, None) => unreachable!("asked when not read"),
            }
        }
    }
}
