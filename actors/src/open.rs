//! Opening a client: validate the create options, load the plugin, create the PJRT client, take
//! the snapshot of its immutable facts, and start its actors on a runtime of their own.

use std::path::PathBuf;
use std::sync::Arc;

use actix::{Actor, Addr, SyncArbiter};

use crate::actors::client::ClientActor;
use crate::actors::device::DeviceActor;
use crate::actors::memory_space::MemorySpaceActor;
use crate::actors::registry::BufferRegistryActor;
use crate::compile::{CompilerActor, ExecutableRegistry};
use crate::compile_service::{CacheStats, CompileEnv, CompileService, DiskCache, MemoryCache};
use crate::envelope;
use crate::error::{Error, Result};
use crate::execute::ExecuteContext;
use crate::pjrt::{NamedValue, PjrtClient, PjrtDevice, PjrtMemory, Plugin};
use crate::registry::BufferRegistry;
use crate::runtime::{Runtime, WorkerCount, new_arbiter};

/// How to open a client.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// An explicit plugin file; `None` runs discovery.
    pub plugin_path: Option<PathBuf>,
    /// Plugin create options, validated before the plugin sees them.
    pub options: Vec<(String, NamedValue)>,
    /// Compiler actors in the pool; default: the number of cores.
    pub compile_threads: Option<usize>,
    /// Persistent compile cache directory; default: env `PJRT_ACTORS_CACHE_DIR`, else none.
    pub cache_dir: Option<PathBuf>,
    /// Bound of the persistent cache in bytes; default 1 GiB.
    pub cache_max_bytes: Option<u64>,
    /// Executables kept by the memory cache (least recently used evicted); default 512, 0 = off.
    pub memory_cache_entries: Option<usize>,
    /// Compile requests queued or running at once; past it `compile` waits. Default 256.
    pub compile_queue_bound: Option<usize>,
    /// How allocation sites are recorded for heap profiles.
    pub site_capture: crate::site::SiteCapture,
}

/// The environment variable naming a persistent compile cache directory.
pub const CACHE_DIR_ENV: &str = "PJRT_ACTORS_CACHE_DIR";

/// Create options we know the type of. A value of the wrong type makes a plugin throw a C++
/// exception through the C API, which aborts the process, so these are checked first.
const KNOWN_OPTIONS: &[(&str, &str)] = &[
    ("cpu_device_count", "int64"),
    ("platform_name", "string"),
    ("allocator", "string"),
    ("memory_fraction", "float"),
    ("preallocate", "bool"),
    ("collective_memory_size", "int64"),
    ("visible_devices", "int64 list"),
    ("node_id", "int64"),
    ("num_nodes", "int64"),
    ("enable_mock_nccl", "bool"),
    ("mock_gpu_topology", "string"),
    ("should_stage_host_to_device_transfers", "bool"),
    ("abort_collectives_on_failure", "bool"),
];

/// Checks option names are unique and known options have the type the plugin expects.
pub fn validate_options(options: &[(String, NamedValue)]) -> Result<()> {
    for (i, (name, value)) in options.iter().enumerate() {
        if options[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::InvalidOption {
                name: name.clone(),
                reason: "given more than once".into(),
            });
        }
        match KNOWN_OPTIONS.iter().find(|(n, _)| *n == name) {
            Some((_, expected)) if *expected != value.type_name() => {
                return Err(Error::InvalidOption {
                    name: name.clone(),
                    reason: format!("expected a {expected} value, got a {}", value.type_name()),
                });
            }
            Some(_) => {}
            None => {
                tracing::warn!(option = %name, "create option unknown to pjrt-actors; passed through")
            }
        }
        if name == "cpu_device_count" {
            if let NamedValue::Int64(n) = value {
                if !(1..=4096).contains(n) {
                    return Err(Error::InvalidOption {
                        name: name.clone(),
                        reason: format!("must be between 1 and 4096, got {n}"),
                    });
                }
            }
        }
        if name == "memory_fraction" {
            if let NamedValue::Float(f) = value {
                if !(*f > 0.0 && *f <= 1.0) {
                    return Err(Error::InvalidOption {
                        name: name.clone(),
                        reason: format!("must be in (0, 1], got {f}"),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The immutable facts of one device, read once at open.
#[derive(Debug, Clone)]
pub struct DeviceSnapshot {
    pub id: i32,
    pub process_index: i32,
    pub kind: String,
    pub debug_string: String,
    pub display_string: String,
    pub attributes: Vec<(String, NamedValue)>,
    pub is_addressable: bool,
    pub local_hardware_id: Option<i32>,
    /// Indices into `ClientSnapshot::memories`.
    pub memories: Vec<usize>,
    pub default_memory: Option<usize>,
}

/// The immutable facts of one memory space, read once at open.
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    pub id: i32,
    pub kind: String,
    pub kind_id: i32,
    pub debug_string: String,
    pub display_string: String,
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

/// The PJRT objects and registries of one client, shared by its handles and actors. Device
/// `i` of the snapshot is `devices[i]` here, and likewise for memories.
pub struct ClientResources {
    pub pjrt: PjrtClient,
    /// Set by an explicit shutdown: every later call fails with `Error::ShutDown`.
    pub shut_down: std::sync::atomic::AtomicBool,
    /// How allocation sites are recorded.
    pub site_capture: crate::site::SiteCapture,
    /// Who serialized executables must come from (see `envelope::identity`).
    pub identity: String,
    /// The client's serialized topology.
    pub topology: Arc<Vec<u8>>,
    pub devices: Vec<PjrtDevice>,
    pub memories: Vec<PjrtMemory>,
    pub buffers: Arc<BufferRegistry>,
    pub executables: Arc<ExecutableRegistry>,
}

impl ClientResources {
    /// `Error::ShutDown` once the client was shut down.
    pub fn check_open(&self) -> Result<()> {
        if self.shut_down.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::ShutDown);
        }
        Ok(())
    }

    pub fn execute_context<'a>(
        &'a self,
        owner: &'a Arc<dyn crate::registry::ArrayOwner>,
        site: crate::site::Site,
    ) -> ExecuteContext<'a> {
        ExecuteContext {
            devices: &self.devices,
            memories: &self.memories,
            owner,
            site,
            shut_down: &self.shut_down,
        }
    }
}

impl ClientParts {
    /// Stops the actors and joins their threads now; every later call on any handle fails
    /// with `Error::ShutDown`. Idempotent.
    pub fn shutdown(&self) {
        self.resources
            .shut_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.compile_permits.close();
        self.runtime.stop();
    }
}

/// A started client: its runtime, resources, snapshot and every actor's address.
/// Field order is drop order: the runtime stops (and joins) before the rest is released.
pub struct ClientParts {
    pub runtime: Runtime,
    pub resources: Arc<ClientResources>,
    pub snapshot: Arc<ClientSnapshot>,
    pub client: Addr<ClientActor>,
    pub devices: Vec<Option<Addr<DeviceActor>>>,
    pub memories: Vec<Addr<MemorySpaceActor>>,
    pub compiler: Addr<CompilerActor>,
    pub compile_service: Addr<CompileService>,
    /// One permit per queued or running compile: the queue's bound.
    pub compile_permits: Arc<tokio::sync::Semaphore>,
    pub compile_queue_bound: usize,
    pub cache_stats: Arc<CacheStats>,
    pub memory_cache: Arc<MemoryCache>,
    /// The smallest allocator `bytes_limit` the devices report (read once at open).
    pub device_memory_limit: Option<i64>,
    pub buffer_registry: Addr<BufferRegistryActor>,
    pub compile_threads: usize,
}

fn snapshot(pjrt: &PjrtClient) -> Result<(ClientSnapshot, Vec<PjrtDevice>, Vec<PjrtMemory>)> {
    let devices = pjrt.devices()?;
    let memories = pjrt.addressable_memories()?;
    let index_of_memory = |m: &PjrtMemory| memories.iter().position(|x| x == m);
    let index_of_device = |d: &PjrtDevice| devices.iter().position(|x| x == d);
    let mut device_snaps = Vec::with_capacity(devices.len());
    for device in &devices {
        let desc = device.description()?;
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
            id: desc.id,
            process_index: desc.process_index,
            kind: desc.kind,
            debug_string: desc.debug_string,
            display_string: desc.display_string,
            attributes: desc.attributes,
            is_addressable,
            local_hardware_id,
            memories: memory_idx,
            default_memory,
        });
    }
    let mut memory_snaps = Vec::with_capacity(memories.len());
    for memory in &memories {
        let desc = memory.description()?;
        memory_snaps.push(MemorySnapshot {
            id: desc.id,
            kind: desc.kind,
            kind_id: desc.kind_id,
            debug_string: desc.debug_string,
            display_string: desc.display_string,
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

/// Opens a client: everything that can fail with a typed error happens before a thread starts.
pub fn open_client(config: ClientConfig) -> Result<ClientParts> {
    validate_options(&config.options)?;
    let compile_threads = match config.compile_threads {
        Some(0) => {
            return Err(Error::InvalidOption {
                name: "compile_threads".into(),
                reason: "the compiler pool needs at least one thread".into(),
            });
        }
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let plugin = match &config.plugin_path {
        Some(path) => Plugin::load(path)?,
        None => Plugin::discover()?,
    };
    let queue_bound = config.compile_queue_bound.unwrap_or(256).max(1);
    let cache_stats = Arc::new(CacheStats::default());
    let cache_dir = config
        .cache_dir
        .clone()
        .or_else(|| std::env::var_os(CACHE_DIR_ENV).map(PathBuf::from));
    let disk = match &cache_dir {
        Some(dir) => Some(Arc::new(DiskCache::open(
            dir,
            config.cache_max_bytes.unwrap_or(1 << 30),
            cache_stats.clone(),
        )?)),
        None => None,
    };
    // Programs that call host callbacks name our FFI handler; it must be registered before
    // they compile. A plugin without the FFI extension still opens (callbacks then fail).
    if let Err(e) = plugin.host_callbacks() {
        tracing::info!(error = %e, "host callbacks unavailable on this plugin");
    }
    let pjrt = PjrtClient::create(plugin, &config.options)?;
    let (snap, devices, memories) = snapshot(&pjrt)?;
    let snap = Arc::new(snap);
    let xla_version = snap
        .plugin_attributes
        .iter()
        .find(|(k, _)| k == "xla_version")
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    let identity = envelope::identity(
        &snap.platform_name,
        &snap.platform_version,
        &xla_version,
        snap.plugin_api_version,
    );
    let topology = Arc::new(pjrt.topology()?.serialize()?);
    let resources = Arc::new(ClientResources {
        shut_down: std::sync::atomic::AtomicBool::new(false),
        site_capture: config.site_capture,
        identity,
        topology,
        pjrt,
        devices,
        memories,
        buffers: Arc::new(BufferRegistry::new("array", snap.devices.len())),
        executables: Arc::new(ExecutableRegistry::new("executable", 1)),
    });

    let workers = WorkerCount::default();
    // Tokens are taken now, so shutdown waits even for a worker that has not started yet.
    let tokens: Vec<_> = (0..compile_threads).map(|_| workers.token()).collect();
    let tokens = Arc::new(parking_lot::Mutex::new(tokens));
    let (res, sn, wk) = (resources.clone(), snap.clone(), workers.clone());
    let env = CompileEnv {
        identity: resources.identity.clone(),
        topology: resources.topology.clone(),
        disk,
        stats: cache_stats.clone(),
    };
    let memory_cache = Arc::new(MemoryCache::new(
        config.memory_cache_entries.unwrap_or(512),
        cache_stats.clone(),
    ));
    let device_memory_limit = resources
        .devices
        .iter()
        .zip(&snap.devices)
        .filter(|(_, s)| s.is_addressable)
        .filter_map(|(d, _)| d.memory_stats().ok().flatten())
        .filter_map(|s| s.bytes_limit)
        .min();
    let service_cache = memory_cache.clone();
    let (runtime, (client, devices, memories, compiler, compile_service, buffer_registry)) =
        Runtime::start("pjrt-actors", workers, move || {
            let client = ClientActor::new(res.pjrt.clone()).start();
            let mut arbiters = Vec::new();
            let devices = sn
                .devices
                .iter()
                .enumerate()
                .map(|(index, s)| {
                    // Non-addressable devices have no work to serve here.
                    s.is_addressable.then(|| {
                        let arbiter = new_arbiter();
                        let res = res.clone();
                        let addr =
                            actix::Supervisor::start_in_arbiter(&arbiter.handle(), move |_| {
                                DeviceActor::new(res, index)
                            });
                        arbiters.push(arbiter);
                        addr
                    })
                })
                .collect::<Vec<_>>();
            let memories = (0..res.memories.len())
                .map(|index| MemorySpaceActor::new(res.clone(), index).start())
                .collect::<Vec<_>>();
            let (pjrt, pjrt_devices) = (res.pjrt.clone(), res.devices.clone());
            let name = || std::thread::Builder::new().name("pjrt-actors-compile".into());
            let compiler =
                SyncArbiter::start_with_thread_builder(compile_threads, name, move || {
                    // A restarted worker (after a panic) takes a fresh token.
                    let token = tokens.lock().pop().unwrap_or_else(|| wk.token());
                    CompilerActor::new(pjrt.clone(), pjrt_devices.clone(), token)
                });
            let buffer_registry = BufferRegistryActor::new(
                res.clone(),
                sn.devices.iter().map(|d| d.debug_string.clone()).collect(),
            )
            .start();
            let compile_service = CompileService::new(
                compiler.clone(),
                compile_threads,
                service_cache,
                res.clone(),
                env,
            )
            .start();
            (
                (
                    client,
                    devices,
                    memories,
                    compiler,
                    compile_service,
                    buffer_registry,
                ),
                arbiters,
            )
        })?;
    Ok(ClientParts {
        runtime,
        resources,
        snapshot: snap,
        client,
        devices,
        memories,
        compiler,
        compile_service,
        compile_permits: Arc::new(tokio::sync::Semaphore::new(queue_bound)),
        compile_queue_bound: queue_bound,
        cache_stats,
        memory_cache,
        device_memory_limit,
        buffer_registry,
        compile_threads,
    })
}
