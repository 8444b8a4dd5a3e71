//! The state one client's handles and actors share: the PJRT client and the devices and
//! memories it hands out, the facts read once at open (`ClientSnapshot`), the buffer and
//! executable registries, the handle side of the compile caches, and the shut-down flag.
//! Who writes each part is ARCHITECTURE.md's ownership table; the data-plane operations that
//! both the blocking handles and the actors run (upload, execute, copy, read) live here, once.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::arrays::buffers::{ArrayCore, ArrayOwner, BufferRegistry, BufferSlot};
use crate::arrays::memory_account::{MemoryAccount, OverBudget};
use crate::arrays::site::{Site, SiteCapture};
use crate::compile::DeviceFacts;
use crate::compile::cache::{CacheStats, CompileKey, MemoryCache};
use crate::error::{Error, Result};
use crate::execute::executable::{ExecutableCore, ExecutableMeta, ExecutableRegistry};
use crate::execute::{ExecuteContext, Outputs};
use crate::pjrt::{
    DeviceDescription, HostBuffer, MemoryDescription, NamedValue, PjrtClient, PjrtDevice,
    PjrtLoadedExecutable, PjrtMemory,
};

/// The immutable facts of one device, read once at open.
#[derive(Debug, Clone)]
pub struct DeviceSnapshot {
    /// What the device says about itself.
    pub description: DeviceDescription,
    pub is_addressable: bool,
    pub local_hardware_id: Option<i32>,
    /// Indices into `ClientSnapshot::memories`.
    pub memories: Vec<usize>,
    pub default_memory: Option<usize>,
}

/// One upload: host data checked against its dtype and dims, where it goes, and who owns the
/// array it makes. The blocking path builds it from the caller's borrow; the memory-space actor
/// from its request.
pub struct Upload<'a> {
    pub owner: Arc<dyn ArrayOwner>,
    pub data: HostBuffer<'a>,
    pub dtype: crate::dtype::ElementType,
    pub dims: &'a [i64],
    /// Device index, and the memory space's (the device's default unless `explicit_memory`).
    pub placement: (usize, usize),
    /// Whether the caller named the memory space.
    pub explicit_memory: bool,
    pub site: Site,
}

/// The immutable facts of one memory space, read once at open.
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    /// What the memory space says about itself.
    pub description: MemoryDescription,
    /// Indices into `ClientSnapshot::devices`.
    pub devices: Vec<usize>,
}

/// The immutable facts of a client, read once at open and shared by every handle.
#[derive(Debug, Clone)]
pub struct ClientSnapshot {
    pub plugin_path: PathBuf,
    pub plugin_api_version: (i32, i32),
    pub plugin_attributes: Vec<(String, NamedValue)>,
    pub platform_name: String,
    pub platform_version: String,
    pub process_index: i32,
    pub devices: Vec<DeviceSnapshot>,
    pub memories: Vec<MemorySnapshot>,
}

/// Reads the snapshot, and the devices and memories in the snapshot's order.
pub(crate) fn read_snapshot(
    pjrt: &PjrtClient,
) -> Result<(ClientSnapshot, Vec<PjrtDevice>, Vec<PjrtMemory>)> {
    let devices = pjrt.devices()?;
    let memories = pjrt.addressable_memories()?;
    let index_of_memory = |m: &PjrtMemory| memories.iter().position(|x| x == m);
    let index_of_device = |d: &PjrtDevice| devices.iter().position(|x| x == d);
    let mut device_snaps = Vec::with_capacity(devices.len());
    for device in &devices {
        let is_addressable = device.is_addressable()?;
        let (local_hardware_id, memory_idx, default_memory) = if is_addressable {
            let mems = device.memories()?;
            let default = device.default_memory().ok();
            (
                Some(device.local_hardware_id()?),
                mems.iter().filter_map(index_of_memory).collect(),
                default.as_ref().and_then(index_of_memory),
            )
        } else {
            (None, Vec::new(), None)
        };
        device_snaps.push(DeviceSnapshot {
            description: device.description()?,
            is_addressable,
            local_hardware_id,
            memories: memory_idx,
            default_memory,
        });
    }
    let mut memory_snaps = Vec::with_capacity(memories.len());
    for memory in &memories {
        memory_snaps.push(MemorySnapshot {
            description: memory.description()?,
            devices: memory
                .devices()?
                .iter()
                .filter_map(index_of_device)
                .collect(),
        });
    }
    let plugin = pjrt.plugin();
    Ok((
        ClientSnapshot {
            plugin_path: plugin.path().to_owned(),
            plugin_api_version: plugin.api_version(),
            plugin_attributes: plugin.attributes().to_vec(),
            platform_name: pjrt.platform_name()?,
            platform_version: pjrt.platform_version()?,
            process_index: pjrt.process_index()?,
            devices: device_snaps,
            memories: memory_snaps,
        },
        devices,
        memories,
    ))
}

/// The PJRT objects, facts and registries of one client, shared by its handles and actors.
/// Device `i` of the snapshot is `devices[i]` here, and likewise for memories. Immutable after
/// open except for the parts named in ARCHITECTURE.md's ownership table, each of which has
/// one writer.
pub struct ClientState {
    pub(crate) pjrt: PjrtClient,
    /// Indices of the addressable devices whose allocators report a `bytes_limit` (read at
    /// open): the ones a compile asks again for `device_memory_size`.
    devices_with_limits: Vec<usize>,
    /// Set by an explicit shutdown: every later call fails with `Error::ShutDown`.
    shut_down: AtomicBool,
    pub(crate) site_capture: SiteCapture,
    /// Who serialized executables must come from (see `envelope::identity`).
    pub(crate) identity: String,
    /// Everything besides the program and its options that changes what a compile produces:
    /// the identity, `XLA_FLAGS` as the plugin saw them, and the plugin file's build. Part of
    /// every compile-cache key.
    compile_context: String,
    /// The client's serialized topology.
    pub(crate) topology: Arc<Vec<u8>>,
    /// The client's topology, read at open (`None` where the plugin could not describe it).
    topology_description: Option<crate::compile::topology::TopologyDescription>,
    pub(crate) snapshot: ClientSnapshot,
    pub(crate) devices: Vec<PjrtDevice>,
    pub(crate) memories: Vec<PjrtMemory>,
    pub(crate) buffers: BufferRegistry,
    /// Per memory space, the bytes our arrays hold there and its budget.
    pub(crate) memory_accounts: Box<[MemoryAccount]>,
    pub(crate) executables: Arc<ExecutableRegistry>,
    /// Read by handles; written only by the compile service.
    pub(crate) memory_cache: MemoryCache,
    pub(crate) cache_stats: Arc<CacheStats>,
    /// One permit per queued or running compile: the queue's bound.
    pub(crate) compile_permits: tokio::sync::Semaphore,
    pub(crate) compile_queue_bound: usize,
    pub(crate) compile_threads: usize,
    /// Whether programs the known-defect table names are compiled anyway.
    pub(crate) allow_known_defects: bool,
}

/// The parts of [`ClientState`] that `open` reads before building it.
pub(crate) struct StateParts {
    pub pjrt: PjrtClient,
    pub site_capture: SiteCapture,
    pub identity: String,
    pub compile_context: String,
    pub topology: Arc<Vec<u8>>,
    pub topology_description: Option<crate::compile::topology::TopologyDescription>,
    pub snapshot: ClientSnapshot,
    pub devices: Vec<PjrtDevice>,
    pub memories: Vec<PjrtMemory>,
    pub memory_cache_entries: usize,
    pub cache_stats: Arc<CacheStats>,
    pub compile_queue_bound: usize,
    pub compile_threads: usize,
    pub allow_known_defects: bool,
}

impl ClientState {
    /// Bytes this client's arrays hold in memory space `memory` now (their dense sizes).
    pub fn memory_held(&self, memory: usize) -> u64 {
        self.memory_accounts[memory].held()
    }

    /// The budget set on memory space `memory`, if any.
    pub fn memory_budget(&self, memory: usize) -> Option<u64> {
        self.memory_accounts[memory].budget()
    }

    pub(crate) fn new(p: StateParts) -> Self {
        let devices_with_limits = (p.devices.iter().zip(&p.snapshot.devices).enumerate())
            .filter(|(_, (d, s))| {
                s.is_addressable
                    && d.memory_stats()
                        .ok()
                        .flatten()
                        .is_some_and(|m| m.bytes_limit.is_some())
            })
            .map(|(i, _)| i)
            .collect();
        ClientState {
            devices_with_limits,
            shut_down: AtomicBool::new(false),
            buffers: BufferRegistry::new("array", p.snapshot.devices.len()),
            memory_accounts: (0..p.memories.len())
                .map(|_| MemoryAccount::default())
                .collect(),
            executables: Arc::new(ExecutableRegistry::new("executable", 1)),
            memory_cache: MemoryCache::new(p.memory_cache_entries, p.cache_stats.clone()),
            compile_permits: tokio::sync::Semaphore::new(p.compile_queue_bound),
            pjrt: p.pjrt,
            site_capture: p.site_capture,
            identity: p.identity,
            compile_context: p.compile_context,
            topology: p.topology,
            topology_description: p.topology_description,
            snapshot: p.snapshot,
            devices: p.devices,
            memories: p.memories,
            cache_stats: p.cache_stats,
            compile_queue_bound: p.compile_queue_bound,
            compile_threads: p.compile_threads,
            allow_known_defects: p.allow_known_defects,
        }
    }

    /// `Error::ShutDown` once the client was shut down.
    pub fn check_open(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Relaxed) {
            return Err(Error::ShutDown);
        }
        Ok(())
    }

    /// Marks the client shut down and closes the compile queue. Idempotent.
    pub(crate) fn mark_shut_down(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
        self.compile_permits.close();
    }

    /// The facts read once at open.
    pub fn snapshot(&self) -> &ClientSnapshot {
        &self.snapshot
    }

    /// The allocation site of something the calling code makes, as this client records them.
    #[track_caller]
    pub fn site(&self) -> Site {
        Site::capture(self.site_capture)
    }

    /// Who serialized executables must come from.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The client's topology as read at open, where the plugin described it then.
    pub fn topology_description(&self) -> Option<&crate::compile::topology::TopologyDescription> {
        self.topology_description.as_ref()
    }

    /// The client's serialized topology.
    pub fn topology(&self) -> &Arc<Vec<u8>> {
        &self.topology
    }

    /// The device ids and memory limit compile options are checked against.
    pub fn device_facts(&self) -> DeviceFacts {
        DeviceFacts {
            devices: self
                .snapshot
                .devices
                .iter()
                .map(|d| (d.description.id, d.is_addressable))
                .collect(),
            // Read now, per compile, from the devices whose allocators report a limit (none
            // on CPU, so a cache hit there makes no PJRT call).
            memory_limits: (self.devices_with_limits.iter())
                .filter_map(|&i| {
                    let limit = self.devices[i].memory_stats().ok().flatten()?.bytes_limit?;
                    Some((self.snapshot.devices[i].description.id, limit))
                })
                .collect(),
        }
    }

    /// Registers a loaded executable; it unregisters itself when its last reference goes.
    pub(crate) fn register_executable(
        &self,
        exe: PjrtLoadedExecutable,
        meta: ExecutableMeta,
        site: Site,
    ) -> Arc<ExecutableCore> {
        ExecutableCore::register(&self.executables, exe, meta, self.devices.len(), site)
    }

    /// Uploads host data (its length already checked against dtype and dims) and registers the
    /// new array, within its memory space's budget (`Error::MemoryBudget` past it, before the
    /// plugin allocates). The blocking handles call it inline.
    pub fn upload(&self, upload: Upload<'_>) -> Result<Arc<ArrayCore>> {
        self.check_open()?;
        let bytes = crate::dtype::byte_size(upload.dtype, upload.dims)? as u64;
        let memory = upload.placement.1;
        (self.memory_accounts[memory].try_charge(bytes))
            .map_err(|over| self.over_budget(memory, over))?;
        self.upload_charged(upload, bytes)
    }

    /// `upload` for `bytes` (its dense size) already charged to the memory space's account
    /// (the memory-space actor admits waiting uploads so); a failed upload credits them back.
    pub fn upload_charged(&self, upload: Upload<'_>, bytes: u64) -> Result<Arc<ArrayCore>> {
        let Upload {
            owner,
            data,
            dtype,
            dims,
            placement: (device, memory),
            explicit_memory,
            site,
        } = upload;
        let uploaded = self.check_open().and_then(|()| {
            Ok(self.pjrt.upload(
                data,
                dtype,
                dims,
                &self.devices[device],
                explicit_memory.then(|| &self.memories[memory]),
            )?)
        });
        let buffer = uploaded.inspect_err(|_| self.memory_accounts[memory].credit(bytes))?;
        let slot = BufferSlot::new(buffer, dtype, dims.into(), device, memory);
        Ok(ArrayCore::register_charged(owner, slot, site, bytes))
    }

    /// The error for an upload that does not fit memory space `memory`'s budget: the one
    /// `Error::MemoryBudget`, for the blocking refusal and the memory-space actor's alike.
    pub fn over_budget(&self, memory: usize, over: OverBudget) -> Error {
        Error::MemoryBudget {
            // Named by its id and kind.
            memory: {
                let m = &self.snapshot.memories[memory].description;
                format!("memory space {} ({})", m.id, m.kind)
            },
            asked: over.asked,
            held: over.held,
            budget: over.budget,
        }
    }

    /// Copies `array` to `device` (its default memory space `memory`) or, with
    /// `to_memory`, into memory space `memory` itself.
    pub fn copy(
        &self,
        array: &ArrayCore,
        (device, memory): (usize, usize),
        to_memory: bool,
        site: Site,
    ) -> Result<Arc<ArrayCore>> {
        self.check_open()?;
        let buffer = array.slot.with_buffer(|b| {
            if to_memory {
                Ok(b.copy_to_memory(&self.memories[memory])?)
            } else {
                Ok(b.copy_to_device(&self.devices[device])?)
            }
        })?;
        let slot = BufferSlot::new(
            buffer,
            array.slot.dtype,
            array.slot.dims.clone(),
            device,
            memory,
        );
        Ok(ArrayCore::register(array.owner().clone(), slot, site))
    }

    /// Runs `exe` (see [`crate::execute::execute`]); the one execute, called inline by the
    /// blocking handles and by the device actor for the async form.
    pub fn execute(
        &self,
        owner: &Arc<dyn ArrayOwner>,
        exe: &ExecutableCore,
        arg_lists: &[&[&ArrayCore]],
        site: Site,
        options: crate::execute::ExecuteOptions<'_>,
    ) -> Result<Outputs> {
        self.check_open()?;
        let ctx = ExecuteContext {
            devices: &self.devices,
            memories: &self.memories,
            owner,
            site,
        };
        crate::execute::execute(&ctx, exe, arg_lists, options)
    }

    /// Every live array (py_client's `live_arrays`), in registry order.
    pub fn live_arrays(&self) -> Result<Vec<Arc<ArrayCore>>> {
        self.check_open()?;
        Ok(self.buffers.live_arrays())
    }

    /// The number of live arrays, without listing them.
    pub fn live_array_count(&self) -> usize {
        self.buffers.len()
    }

    /// Every live loaded executable, in registry order.
    pub fn live_executables(&self) -> Vec<Arc<ExecutableCore>> {
        self.executables.collect(|weak| weak.upgrade())
    }

    /// The memory kinds device `device` supports and its default, from the plugin's memory
    /// descriptions extension (empty where the plugin lists none).
    pub fn device_memory_kinds(
        &self,
        device: usize,
    ) -> Result<(Vec<crate::pjrt::MemoryKind>, Option<usize>)> {
        self.check_open()?;
        Ok(self.devices[device].memory_kinds()?)
    }

    /// The plugin's default layout for `dtype` × `dims`.
    pub fn default_layout(
        &self,
        dtype: crate::dtype::ElementType,
        dims: &[i64],
    ) -> Result<crate::pjrt::Layout> {
        self.check_open()?;
        crate::dtype::byte_size(dtype, dims)?;
        Ok(self.pjrt.default_layout(dtype, dims)?)
    }

    /// Maps host memory for DMA; see `PjrtClient::dma_map`.
    pub fn dma_map(&self, memory: crate::pjrt::SharedBytes) -> Result<crate::pjrt::DmaMapping> {
        self.check_open()?;
        Ok(self.pjrt.dma_map(memory)?)
    }

    /// The compile-cache key of `program` compiled with `options` (a serialized
    /// `CompileOptionsProto`) on this client, flags and plugin build included.
    pub fn compile_key(&self, program: &[u8], options: &[u8]) -> CompileKey {
        CompileKey::new(&self.compile_context, program, options)
    }

    /// The memory compile cache's executable for `key`, if it holds one (a read lock; the
    /// compile service is its only writer).
    pub fn cached_executable(&self, key: &CompileKey) -> Option<Arc<ExecutableCore>> {
        self.memory_cache.get(key)
    }

    /// Waits for a place in the compile queue; held until the compile's answer arrives.
    pub async fn acquire_compile_slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>> {
        self.compile_permits
            .acquire()
            .await
            .map_err(|_| Error::ShutDown)
    }

    /// A place in the compile queue now, or `Error::Busy`.
    pub fn try_acquire_compile_slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>> {
        use tokio::sync::TryAcquireError;
        self.compile_permits.try_acquire().map_err(|e| match e {
            TryAcquireError::Closed => Error::ShutDown,
            TryAcquireError::NoPermits => Error::Busy {
                what: "the compile queue",
            },
        })
    }

    /// The compile counters.
    pub fn cache_stats(&self) -> &CacheStats {
        &self.cache_stats
    }

    /// Compile requests queued or running right now (at most the queue bound).
    pub fn compile_queue_len(&self) -> usize {
        self.compile_queue_bound - self.compile_permits.available_permits()
    }

    /// Threads in the compiler pool.
    pub fn compile_threads(&self) -> usize {
        self.compile_threads
    }
}
