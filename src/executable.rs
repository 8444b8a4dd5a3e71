//! `LoadedExecutable`: a compiled program loaded on the client's devices, its metadata, and
//! execute (single device, replicated, portable; blocking on the caller's thread, or async
//! through the device actor). Compile lives here too.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use pjrt_actors_core::actors::device::ExecuteRequest;
use pjrt_actors_core::callbacks::{CallbackSet, HostCallback};
use pjrt_actors_core::compile::{
    CompileOptions, DeviceFacts, ExecutableCore, ExecutableMeta, check_program,
};
pub use pjrt_actors_core::compile_service::CancelToken;
use pjrt_actors_core::compile_service::{ClearMemoryCache, CompileKey, DeserializeJob, Submit};
use pjrt_actors_core::envelope::{self, Envelope};
use pjrt_actors_core::execute::{Outputs as CoreOutputs, caller_context, execute};
use pjrt_actors_core::pjrt::{ArrayType, CompiledMemoryStats, NamedValue};
use pjrt_actors_core::registry::{ArrayCore, ArrayOwner, Id};
use pjrt_actors_core::runtime::block_on;
use pjrt_actors_core::site::Site;
use pjrt_actors_core::{Error, Result};
use prost::Message as _;
use tokio::sync::oneshot;

use crate::array::Array;
use crate::client::{Client, Shared, TopologyDescription, ask_async, ask_plain};
use crate::device::Device;

/// A loaded executable. `Clone + Send + Sync`; dropping the last clone unloads it.
#[derive(Clone)]
pub struct LoadedExecutable {
    pub(crate) shared: Arc<Shared>,
    /// `shared` as the owner of the arrays this executable makes (coerced once, not per call).
    owner: Arc<dyn ArrayOwner>,
    pub(crate) core: Arc<ExecutableCore>,
    /// The host callbacks this handle runs the program with.
    callbacks: Option<Arc<CallbackSet>>,
}

impl Client {
    fn device_facts(&self) -> DeviceFacts {
        let snap = self.shared.snapshot();
        DeviceFacts {
            devices: snap
                .devices
                .iter()
                .map(|d| (d.id, d.is_addressable))
                .collect(),
            device_memory_limit: self.shared.parts.device_memory_limit,
        }
    }

    /// Sends one compile to the compile service and waits for it: for a queue slot first
    /// (`wait_for_slot`; else `Error::Busy`), then for the result; a cancelled token ends both.
    async fn submit(
        &self,
        site: Site,
        program: &[u8],
        options: &CompileOptions,
        cancel: Option<&CancelToken>,
        wait_for_slot: bool,
    ) -> Result<Arc<ExecutableCore>> {
        self.shared.parts.resources.check_open()?;
        check_program(program)?;
        // XLA:CPU fails host send/recv at compile; say what to use instead.
        if self.raw_platform_name() == "cpu"
            && pjrt_actors_core::send_recv::uses_host_transfers(program)
        {
            return Err(pjrt_actors_core::send_recv::unsupported_here("cpu"));
        }
        let proto = options.to_proto(&self.device_facts())?;
        let parts = &self.shared.parts;
        let key = CompileKey::new(&parts.resources.identity, program, &proto.encode_to_vec());
        if let Some(hit) = parts.memory_cache.get(&key) {
            return Ok(hit);
        }
        let _permit = if wait_for_slot {
            until_cancelled(parts.compile_permits.acquire(), cancel)
                .await?
                .map_err(|_| Error::ShutDown)?
        } else {
            parts
                .compile_permits
                .try_acquire()
                .map_err(|_| Error::Busy {
                    what: "the compile queue",
                })?
        };
        let (reply, answer) = oneshot::channel();
        parts.compile_service.do_send(Submit {
            site,
            key,
            code: Arc::new(program.to_vec()),
            options: proto,
            use_cache: true,
            reply,
            cancel: cancel.cloned(),
            span: tracing::Span::current(),
        });
        until_cancelled(answer, cancel)
            .await?
            .map_err(|_| Error::ShutDown)?
    }

    fn loaded(&self, core: Arc<ExecutableCore>) -> LoadedExecutable {
        LoadedExecutable::new(self.shared.clone(), core, None)
    }

    /// A handle that runs `core` with `callbacks`, refusing a program that calls a callback it
    /// was not given (py_client's `host_callbacks` argument).
    fn loaded_with(
        &self,
        core: Arc<ExecutableCore>,
        callbacks: &[HostCallback],
    ) -> Result<LoadedExecutable> {
        let needed = &core.meta.callback_ids;
        let set = if needed.is_empty() && callbacks.is_empty() {
            None
        } else {
            Some(Arc::new(CallbackSet::for_program(needed, callbacks)?))
        };
        Ok(LoadedExecutable::new(self.shared.clone(), core, set))
    }

    /// Compiles a StableHLO/MLIR program (text or bytecode) and loads it, through the compile
    /// service: answered from the compile cache when it can be, joined to an identical compile
    /// already running (single flight), else queued for the compiler pool. Options the plugin
    /// would abort on are filled in or refused first. Waits while the compile queue is full.
    #[track_caller]
    pub fn compile_and_load(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        self.compile_and_load_with_callbacks(program, options, &[])
    }

    /// Compiles and loads a program that calls host callbacks, with those callbacks (py_client's
    /// `host_callbacks`). A program calling a callback not in `callbacks` is refused with
    /// `Error::UnknownCallback`. Each handle carries its own callbacks: two handles of one
    /// cached executable may run different closures, and concurrent runs do not mix them.
    #[track_caller]
    pub fn compile_and_load_with_callbacks(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
        callbacks: &[HostCallback],
    ) -> Result<LoadedExecutable> {
        let core = block_on(self.submit(self.site(), program.as_ref(), options, None, true))??;
        self.loaded_with(core, callbacks)
    }

    /// The async form of [`compile_and_load_with_callbacks`](Self::compile_and_load_with_callbacks).
    pub async fn compile_and_load_with_callbacks_async(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
        callbacks: &[HostCallback],
    ) -> Result<LoadedExecutable> {
        let core = self
            .submit(self.site(), program.as_ref(), options, None, true)
            .await?;
        self.loaded_with(core, callbacks)
    }

    /// The async form of [`compile_and_load`](Self::compile_and_load). Dropping the future
    /// withdraws the request: if it was still queued, it is never compiled.
    pub async fn compile_and_load_async(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        self.loaded_with(
            self.submit(self.site(), program.as_ref(), options, None, true)
                .await?,
            &[],
        )
    }

    /// Like [`compile_and_load`](Self::compile_and_load), but `Error::Busy` instead of waiting
    /// when the compile queue is full.
    #[track_caller]
    pub fn try_compile_and_load(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        let core = block_on(self.submit(self.site(), program.as_ref(), options, None, false))??;
        self.loaded_with(core, &[])
    }

    /// Like [`compile_and_load`](Self::compile_and_load), ended early with
    /// `Error::RequestCancelled` when `token` is cancelled (from any thread). A queued request
    /// is then never compiled; a running one finishes and its result is dropped.
    #[track_caller]
    pub fn compile_and_load_cancellable(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
        token: &CancelToken,
    ) -> Result<LoadedExecutable> {
        let core =
            block_on(self.submit(self.site(), program.as_ref(), options, Some(token), true))??;
        self.loaded_with(core, &[])
    }

    /// The async form of [`compile_and_load_cancellable`](Self::compile_and_load_cancellable).
    pub async fn compile_and_load_cancellable_async(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
        token: &CancelToken,
    ) -> Result<LoadedExecutable> {
        self.loaded_with(
            self.submit(self.site(), program.as_ref(), options, Some(token), true)
                .await?,
            &[],
        )
    }

    /// Compiles without keeping the executable loaded: the result can be inspected, serialized,
    /// and loaded later on any client whose topology matches this one's. (The CPU plugin has no
    /// `PJRT_Compile`; this compiles on this client, serializes, and releases the load.)
    #[track_caller]
    pub fn compile(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<Executable> {
        let loaded = self.compile_and_load(program, options)?;
        Executable::from_loaded(&loaded)
    }

    /// Compiles for a topology: the client's own (see [`topology`](Self::topology)) or one
    /// rebuilt from its bytes. A topology no client here can compile for is
    /// `Error::TopologyMismatch`.
    #[track_caller]
    pub fn compile_for_topology(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
        topology: &TopologyDescription,
    ) -> Result<Executable> {
        if topology.serialized.as_slice() != self.shared.parts.resources.topology.as_slice() {
            return Err(Error::TopologyMismatch {
                reason: format!(
                    "this {} client's topology differs, and the plugin cannot compile without a client of that topology",
                    self.platform()
                ),
            });
        }
        self.compile(program, options)
    }

    /// Serializes a loaded executable into bytes that
    /// [`deserialize_executable`](Self::deserialize_executable) loads again on a client of the same plugin and platform.
    pub fn serialize_executable(&self, executable: &LoadedExecutable) -> Result<Vec<u8>> {
        executable.serialize()
    }

    fn open_envelope(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
    ) -> Result<(Envelope, Vec<u8>)> {
        self.shared.parts.resources.check_open()?;
        let envelope = envelope::decode(bytes, &self.shared.parts.resources.identity)?;
        let options = match options {
            Some(o) => o.to_proto(&self.device_facts())?.encode_to_vec(),
            None => envelope.options.clone(),
        };
        Ok((envelope, options))
    }

    /// Loads a serialized executable, onto the devices it was compiled for or those `options`
    /// name. Bytes that are not ours, are damaged, cut short or empty are refused before the
    /// plugin sees them; bytes from another plugin, version or platform are
    /// `Error::ForeignExecutable`.
    ///
    /// **Security:** loading serialized bytes from an untrusted source can run arbitrary code,
    /// exactly as jaxlib warns: the checks here catch accidents, not attacks.
    #[track_caller]
    pub fn deserialize_executable(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
    ) -> Result<LoadedExecutable> {
        self.deserialize_executable_with_callbacks(bytes, options, &[])
    }

    /// Loads a serialized executable that calls host callbacks, re-attaching `callbacks` by id.
    #[track_caller]
    pub fn deserialize_executable_with_callbacks(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
        callbacks: &[HostCallback],
    ) -> Result<LoadedExecutable> {
        let (envelope, options) = self.open_envelope(bytes, options)?;
        let res = &self.shared.parts.resources;
        let exe = res
            .pjrt
            .deserialize_and_load(&envelope.payload, Some(&options))?;
        let meta = ExecutableMeta::read(&exe, &res.devices, envelope.portable, &options)?;
        let site = Site::capture(res.site_capture);
        let core = ExecutableCore::register(&res.executables, exe, meta, res.devices.len(), site);
        self.loaded_with(core, callbacks)
    }

    /// The async form of [`deserialize_executable`](Self::deserialize_executable): the load
    /// runs on the compiler pool.
    pub async fn deserialize_executable_async(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
    ) -> Result<LoadedExecutable> {
        let (envelope, options) = self.open_envelope(bytes, options)?;
        let job = DeserializeJob {
            payload: envelope.payload,
            options,
            portable: envelope.portable,
            span: tracing::Span::current(),
        };
        let (exe, meta) = ask_async(&self.shared.parts.compiler, job).await?;
        let res = &self.shared.parts.resources;
        let site = Site::capture(res.site_capture);
        let core = ExecutableCore::register(&res.executables, exe, meta, res.devices.len(), site);
        self.loaded_with(core, &[])
    }

    /// The compile service's counters.
    pub fn compile_cache_stats(&self) -> CompileCacheStats {
        let s = &self.shared.parts.cache_stats;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        CompileCacheStats {
            memory_hits: get(&s.memory_hits),
            disk_hits: get(&s.disk_hits),
            misses: get(&s.misses),
            compiles: get(&s.compiles),
            joined: get(&s.joined),
            cancelled: get(&s.cancelled),
            memory_evictions: get(&s.memory_evictions),
            disk_evictions: get(&s.disk_evictions),
            corrupt_entries: get(&s.corrupt_entries),
        }
    }

    /// Compile requests queued or running right now (at most the queue bound).
    pub fn compile_queue_len(&self) -> usize {
        let parts = &self.shared.parts;
        parts.compile_queue_bound - parts.compile_permits.available_permits()
    }

    /// Forgets every executable the memory cache holds (each stays loaded while handles hold
    /// it); returns how many it held.
    pub fn clear_compile_cache(&self) -> Result<usize> {
        ask_plain(&self.shared.parts.compile_service, ClearMemoryCache)
    }

    /// Every loaded executable still alive (py_client's `live_executables`), including those
    /// the memory compile cache keeps.
    pub fn live_executables(&self) -> Vec<LoadedExecutable> {
        self.shared
            .parts
            .resources
            .executables
            .entries()
            .into_iter()
            .filter_map(|(_, weak)| weak.upgrade())
            .map(|core| self.loaded(core))
            .collect()
    }
}

/// Awaits `fut`, or `Error::RequestCancelled` as soon as `cancel` is cancelled.
async fn until_cancelled<F: Future>(fut: F, cancel: Option<&CancelToken>) -> Result<F::Output> {
    let Some(cancel) = cancel else {
        return Ok(fut.await);
    };
    let mut fut = pin!(fut);
    let mut cancelled = pin!(cancel.cancelled());
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(Error::RequestCancelled { what: "compile" }));
        }
        Poll::Pending
    })
    .await
}

/// The compile service's counters (see [`Client::compile_cache_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompileCacheStats {
    /// Requests answered from the memory cache.
    pub memory_hits: u64,
    /// Requests answered by loading from the disk cache.
    pub disk_hits: u64,
    /// Requests that had to compile or load (neither a memory hit nor a join).
    pub misses: u64,
    /// Compiles the plugin actually ran.
    pub compiles: u64,
    /// Requests that joined an identical compile already in flight.
    pub joined: u64,
    /// Requests withdrawn before, or abandoned during, their compile.
    pub cancelled: u64,
    /// Executables the memory cache let go to stay within its bound.
    pub memory_evictions: u64,
    /// Files the disk cache removed to stay within its bound.
    pub disk_evictions: u64,
    /// Disk entries found damaged or foreign, removed and recompiled.
    pub corrupt_entries: u64,
}

/// A compiled program that is not loaded: inspect it, serialize it, load it later on a client
/// whose topology matches the one it was compiled for.
#[derive(Clone)]
pub struct Executable {
    bytes: Arc<Vec<u8>>,
    meta: Arc<ExecutableMeta>,
    cost_analysis: Arc<Vec<(String, NamedValue)>>,
    topology: Arc<Vec<u8>>,
}

impl Executable {
    fn from_loaded(loaded: &LoadedExecutable) -> Result<Self> {
        Ok(Executable {
            bytes: Arc::new(loaded.serialize()?),
            meta: Arc::new(loaded.core.meta.clone()),
            cost_analysis: Arc::new(loaded.cost_analysis()?),
            topology: loaded.shared.parts.resources.topology.clone(),
        })
    }

    /// The program's name (its module name).
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The plugin's fingerprint of the compiled program.
    pub fn fingerprint(&self) -> &str {
        &self.meta.fingerprint
    }

    /// How many outputs the program returns.
    pub fn num_outputs(&self) -> usize {
        self.meta.num_outputs
    }

    /// Output element types and dimensions.
    pub fn output_types(&self) -> &[ArrayType] {
        &self.meta.output_types
    }

    /// Parameter element types and dimensions.
    pub fn parameter_types(&self) -> &[ArrayType] {
        &self.meta.parameter_types
    }

    /// XLA's cost analysis, taken when it was compiled.
    pub fn cost_analysis(&self) -> &[(String, NamedValue)] {
        &self.cost_analysis
    }

    /// The serialized topology it was compiled for.
    pub fn topology(&self) -> &[u8] {
        &self.topology
    }

    /// The serialized executable (what [`Client::deserialize_executable`] loads).
    pub fn serialize(&self) -> Vec<u8> {
        self.bytes.to_vec()
    }

    /// Loads it on `client`, whose topology must be the one it was compiled for.
    pub fn load(&self, client: &Client) -> Result<LoadedExecutable> {
        if client.shared.parts.resources.topology.as_slice() != self.topology.as_slice() {
            return Err(Error::TopologyMismatch {
                reason: format!(
                    "`{}` was compiled for another topology than this client's ({} devices)",
                    self.name(),
                    client.device_count()
                ),
            });
        }
        client.deserialize_executable(&self.bytes, None)
    }
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Executable({}, {} bytes)", self.name(), self.bytes.len())
    }
}

/// One output list per device, as handles.
type Outputs = Vec<Vec<Array>>;

impl LoadedExecutable {
    fn new(
        shared: Arc<Shared>,
        core: Arc<ExecutableCore>,
        callbacks: Option<Arc<CallbackSet>>,
    ) -> Self {
        LoadedExecutable {
            owner: shared.clone(),
            shared,
            core,
            callbacks,
        }
    }

    /// The host callbacks the program calls, by id.
    pub fn callback_ids(&self) -> &[i64] {
        &self.core.meta.callback_ids
    }

    /// The executable's registry id.
    pub fn id(&self) -> Id {
        self.core.id
    }

    /// The client it is loaded on.
    pub fn client(&self) -> Client {
        Client {
            shared: self.shared.clone(),
        }
    }

    /// The program's name (its module name).
    pub fn name(&self) -> &str {
        &self.core.meta.name
    }

    /// The plugin's fingerprint of the compiled program.
    pub fn fingerprint(&self) -> &str {
        &self.core.meta.fingerprint
    }

    /// How many outputs the program returns.
    pub fn num_outputs(&self) -> usize {
        self.core.meta.num_outputs
    }

    /// Output element types and dimensions.
    pub fn output_types(&self) -> &[ArrayType] {
        &self.core.meta.output_types
    }

    /// Parameter element types and dimensions, as the compiled program expects them.
    pub fn parameter_types(&self) -> &[ArrayType] {
        &self.core.meta.parameter_types
    }

    /// How many parameters the program takes.
    pub fn num_parameters(&self) -> usize {
        self.core.meta.parameter_types.len()
    }

    /// Whether the executable takes its device at execute time.
    pub fn is_portable(&self) -> bool {
        self.core.meta.portable
    }

    /// The devices it runs on, in replica order (for a portable one, where it was compiled).
    pub fn addressable_devices(&self) -> Vec<Device> {
        self.core
            .meta
            .devices
            .iter()
            .map(|&i| Device::new(self.shared.clone(), i))
            .collect()
    }

    /// XLA's cost analysis (`flops`, `bytes accessed`, `transcendentals`, ...).
    pub fn cost_analysis(&self) -> Result<Vec<(String, NamedValue)>> {
        self.core.exe.cost_analysis()
    }

    /// Memory the compiled program needs (arguments, outputs, temporaries, code).
    pub fn compiled_memory_stats(&self) -> Result<CompiledMemoryStats> {
        self.core.exe.compiled_memory_stats()
    }

    /// Serializes the executable (see [`Client::deserialize_executable`]).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let res = &self.shared.parts.resources;
        Ok(envelope::encode(&Envelope {
            identity: res.identity.clone(),
            portable: self.core.meta.portable,
            options: self.core.meta.compile_options.clone(),
            topology: res.topology.to_vec(),
            payload: self.core.exe.serialize()?,
        }))
    }

    /// The optimized program as HLO-like text, printed from the module proto the plugin returns.
    pub fn optimized_program_text(&self) -> Result<String> {
        Ok(pjrt_actors_core::hlo_text::module_text(
            &self.core.exe.optimized_module()?,
        ))
    }

    fn cores<'a>(&self, args: &[&'a Array]) -> Result<SmallVec<[&'a ArrayCore; 8]>> {
        let mut cores = SmallVec::new();
        for (index, a) in args.iter().enumerate() {
            if !a.core.owned_by(&self.shared) {
                return Err(Error::BadArgument {
                    executable: self.name().to_string(),
                    index,
                    reason: "the array belongs to another client".into(),
                    context: caller_context(),
                });
            }
            cores.push(&*a.core);
        }
        Ok(cores)
    }

    fn wrap(&self, core: Arc<ArrayCore>) -> Array {
        Array { core }
    }

    /// Splits flat, device-major outputs into one list per device.
    fn per_device(&self, outputs: CoreOutputs) -> Outputs {
        let n = self.num_outputs().max(1);
        let mut lists: Outputs = Vec::with_capacity(outputs.len() / n);
        for (i, core) in outputs.into_iter().enumerate() {
            if i % n == 0 {
                lists.push(Vec::with_capacity(n));
            }
            lists
                .last_mut()
                .expect("pushed above")
                .push(self.wrap(core));
        }
        lists
    }

    #[track_caller]
    fn run(&self, lists: &[&[&Array]], device: Option<&Device>) -> Result<CoreOutputs> {
        let portable_device = match device {
            Some(d) if !d.belongs_to(&self.shared) => {
                return Err(Error::InvalidArgument(format!(
                    "{d} belongs to another client"
                )));
            }
            Some(d) => Some(d.index()),
            None => None,
        };
        let mut cores: SmallVec<[SmallVec<[&ArrayCore; 8]>; 4]> = SmallVec::new();
        for list in lists {
            cores.push(self.cores(list)?);
        }
        let mut core_lists: SmallVec<[&[&ArrayCore]; 4]> = SmallVec::new();
        for list in &cores {
            core_lists.push(list.as_slice());
        }
        let res = &self.shared.parts.resources;
        let ctx = res.execute_context(&self.owner, Site::capture(res.site_capture));
        execute(
            &ctx,
            &self.core,
            &core_lists,
            portable_device,
            self.callbacks.as_deref(),
        )
    }

    /// Runs a single-device executable on the calling thread; returns its outputs.
    #[track_caller]
    pub fn execute(&self, args: &[&Array]) -> Result<Vec<Array>> {
        let outputs = self.run(&[args], None)?;
        let mut arrays = Vec::with_capacity(outputs.len());
        for core in outputs {
            arrays.push(self.wrap(core));
        }
        Ok(arrays)
    }

    /// Runs a portable executable on `device`.
    #[track_caller]
    pub fn execute_on(&self, device: &Device, args: &[&Array]) -> Result<Vec<Array>> {
        Ok(self
            .run(&[args], Some(device))?
            .into_iter()
            .map(|c| self.wrap(c))
            .collect())
    }

    /// Runs a replicated executable: one argument list per device, in `addressable_devices`
    /// order; returns one output list per device.
    #[track_caller]
    pub fn execute_replicated(&self, args: &[Vec<&Array>]) -> Result<Outputs> {
        let lists: SmallVec<[&[&Array]; 4]> = args.iter().map(|l| l.as_slice()).collect();
        Ok(self.per_device(self.run(&lists, None)?))
    }

    /// The async form of execute: the run is served by the (first) device's actor, in order
    /// with the other work sent to it. `device` is for portable executables.
    pub async fn execute_async(
        &self,
        args: Vec<Vec<Array>>,
        device: Option<&Device>,
    ) -> Result<Outputs> {
        for list in &args {
            self.cores(&list.iter().collect::<Vec<_>>())?;
        }
        let target = match device {
            Some(d) if !d.belongs_to(&self.shared) => {
                return Err(Error::InvalidArgument(format!(
                    "{d} belongs to another client"
                )));
            }
            Some(d) => d.clone(),
            None => self
                .addressable_devices()
                .into_iter()
                .next()
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("`{}` has no device", self.name()))
                })?,
        };
        let request = ExecuteRequest {
            site: self.client().site(),
            owner: self.owner.clone(),
            executable: self.core.clone(),
            args: args
                .into_iter()
                .map(|l| l.into_iter().map(|a| a.core).collect())
                .collect(),
            portable_device: device.map(|d| d.index()),
            callbacks: self.callbacks.clone(),
            span: tracing::Span::current(),
        };
        let outputs = ask_async(target.actor()?, request).await?;
        Ok(self.per_device(outputs))
    }
}

impl PartialEq for LoadedExecutable {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}
impl Eq for LoadedExecutable {}

impl fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoadedExecutable({}, id {})", self.name(), self.id())
    }
}
