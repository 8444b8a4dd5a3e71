//! Compiling and loading: the one compile request (`Client::compile_request`, a builder whose
//! blocking and async forms run the same code), loading serialized executables, the compile
//! cache's counters, and `Executable`, a compiled program that is not loaded.

use std::future::Future;
use std::sync::Arc;

use pjrt_actors_core::Result;
use pjrt_actors_core::arrays::site::Site;
use pjrt_actors_core::callbacks::HostCallback;
use pjrt_actors_core::compile::CompileOptions;
pub use pjrt_actors_core::compile::cache::CancelToken;
use pjrt_actors_core::compile::envelope;
use pjrt_actors_core::compile::flow::{self, CompileCall};
use pjrt_actors_core::execute::executable::ExecutableCore;

use crate::handles::{Caller, Client, ClientGuard, LoadedExecutable, wait};

/// One compile, described by a builder: the program, its options, the host callbacks it is
/// run with, a cancellation token, and whether to wait for a queue slot. `load` and
/// `load_async` run the same code (the blocking form waits on the async one).
///
/// ```no_run
/// # let client = pjrt_actors::Client::open()?;
/// # let program = "";
/// let exe = client.compile_request(program).load()?;
/// # Ok::<(), pjrt_actors::Error>(())
/// ```
#[must_use = "a compile request does nothing until `load`, `load_async` or `compile` runs it"]
pub struct CompileRequest {
    pub(crate) shared: Arc<ClientGuard>,
    pub(crate) program: Arc<Vec<u8>>,
    pub(crate) options: CompileOptions,
    callbacks: Vec<HostCallback>,
    cancel: Option<CancelToken>,
    wait_for_slot: bool,
    /// Where the request was made: the executable's allocation site.
    site: Site,
    /// Who made it, for its errors.
    caller: Caller,
}

impl Client {
    /// Starts a compile of a StableHLO/MLIR program (text or bytecode). Through the compile
    /// service it is answered from the compile cache when it can be, joined to an identical
    /// compile already running (single flight), else queued for the compiler pool. Options the
    /// plugin would abort on are filled in or refused first.
    #[track_caller]
    pub fn compile_request(&self, program: impl AsRef<[u8]>) -> CompileRequest {
        CompileRequest {
            shared: self.shared.clone(),
            program: Arc::new(program.as_ref().to_vec()),
            options: CompileOptions::default(),
            callbacks: Vec::new(),
            cancel: None,
            wait_for_slot: true,
            site: self.site(),
            caller: Caller::here(),
        }
    }

    /// Compiles and loads `program` with `options`: shorthand for
    /// `compile_request(program).options(options).load()`.
    #[track_caller]
    pub fn compile_and_load(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        self.compile_request(program).options(options).load()
    }

    /// The async form of [`compile_and_load`](Self::compile_and_load): shorthand for
    /// `compile_request(program).options(options).load_async()`. Dropping the future
    /// withdraws the request: if it was still queued, it is never compiled.
    #[track_caller]
    pub fn compile_and_load_async<P: AsRef<[u8]>>(
        &self,
        program: P,
        options: &CompileOptions,
    ) -> impl Future<Output = Result<LoadedExecutable>> + use<P> {
        self.compile_request(program).options(options).load_async()
    }
}

impl CompileRequest {
    /// The compile options (default: one replica on the first device).
    pub fn options(mut self, options: &CompileOptions) -> Self {
        self.options = options.clone();
        self
    }

    /// The host callbacks the program calls (py_client's `host_callbacks`). A program calling
    /// a callback not given is refused with `Error::UnknownCallback`. Each handle carries its
    /// own callbacks: two handles of one cached executable may run different closures, and
    /// concurrent runs do not mix them.
    pub fn callbacks(mut self, callbacks: &[HostCallback]) -> Self {
        self.callbacks = callbacks.to_vec();
        self
    }

    /// Ends the request early with `Error::RequestCancelled` when `token` is cancelled (from
    /// any thread). A queued request is then never compiled; a running one finishes and its
    /// result is dropped.
    pub fn cancel_with(mut self, token: &CancelToken) -> Self {
        self.cancel = Some(token.clone());
        self
    }

    /// `Error::Busy` at once when the compile queue is full, instead of waiting for a slot.
    pub fn fail_if_busy(mut self) -> Self {
        self.wait_for_slot = false;
        self
    }

    /// Compiles (or finds) and loads the program, waiting on the calling thread.
    pub fn load(self) -> Result<LoadedExecutable> {
        wait(self.load_async())
    }

    /// Compiles (or finds) and loads the program: the one implementation of every compile.
    pub async fn load_async(self) -> Result<LoadedExecutable> {
        let caller = self.caller;
        let core = (self.submit().await).map_err(|e| e.with_context(|| caller.describe()))?;
        LoadedExecutable::bind(self.shared, core, self.callbacks).await
    }

    /// Compiles (or finds) the program through the core's one compile flow.
    async fn submit(&self) -> Result<Arc<ExecutableCore>> {
        let call = CompileCall {
            site: self.site.clone(),
            cancel: self.cancel.clone(),
            wait_for_slot: self.wait_for_slot,
        };
        let (state, service) = (self.shared.state(), self.shared.compile_service());
        flow::compile(state, service, &self.program, &self.options, call).await
    }
}

impl Client {
    /// Serializes a loaded executable into bytes that
    /// [`deserialize_executable`](Self::deserialize_executable) loads again on a client of the same plugin and platform.
    pub fn serialize_executable(&self, executable: &LoadedExecutable) -> Result<Vec<u8>> {
        executable.serialize()
    }

    /// Loads a serialized executable, onto the devices it was compiled for or those `options`
    /// name, with the host callbacks it calls (re-attached by id). Bytes that are not ours,
    /// are damaged, cut short or empty are refused before the plugin sees them; bytes from
    /// another plugin, version or platform are `Error::ForeignExecutable`.
    ///
    /// **Security:** loading serialized bytes from an untrusted source can run arbitrary code,
    /// exactly as jaxlib warns: the checks here catch accidents, not attacks.
    #[track_caller]
    pub fn deserialize_executable(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
        callbacks: &[HostCallback],
    ) -> Result<LoadedExecutable> {
        wait(self.deserialize_executable_async(bytes, options, callbacks))
    }

    /// The async form of [`deserialize_executable`](Self::deserialize_executable), and its one
    /// implementation: the load goes through the client actor to the compiler pool.
    #[track_caller]
    pub fn deserialize_executable_async(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
        callbacks: &[HostCallback],
    ) -> impl Future<Output = Result<LoadedExecutable>> + use<> {
        let (site, caller) = (self.site(), Caller::here());
        let state = self.state();
        let load = state.check_open().and_then(|()| {
            let envelope = envelope::decode(bytes, state.identity())?;
            let options = match options {
                Some(o) => o.to_bytes(&state.device_facts())?,
                None => envelope.options,
            };
            let pool = self.shared.compiler_pool();
            Ok(pool.load(envelope.payload, options, envelope.portable, site))
        });
        let (shared, callbacks) = (self.shared.clone(), callbacks.to_vec());
        async move {
            let core = (load?.await).map_err(|e| e.with_context(|| caller.describe()))?;
            LoadedExecutable::bind(shared, core, callbacks).await
        }
    }

    /// The compile service's counters.
    pub fn compile_cache_stats(&self) -> CompileCacheStats {
        let s = self.state().cache_stats();
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
            unsigned_entries: get(&s.unsigned_entries),
            redis_hits: get(&s.redis_hits),
            redis_misses: get(&s.redis_misses),
            redis_errors: get(&s.redis_errors),
            redis_lease_waits: get(&s.redis_lease_waits),
            redis_takeovers: get(&s.redis_takeovers),
            redis_wakeups: get(&s.redis_wakeups),
            redis_stores: get(&s.redis_stores),
            redis_too_large: get(&s.redis_too_large),
            redis_skips: get(&s.redis_skips),
        }
    }

    /// Compile requests queued or running right now (at most the queue bound).
    pub fn compile_queue_len(&self) -> usize {
        self.state().compile_queue_len()
    }

    /// Forgets every executable the memory cache holds (each stays loaded while handles hold
    /// it); returns how many it held.
    pub fn clear_compile_cache(&self) -> Result<usize> {
        wait(self.clear_compile_cache_async())
    }

    /// The async form of [`clear_compile_cache`](Self::clear_compile_cache): the compile
    /// service, which owns the cache, clears it.
    pub fn clear_compile_cache_async(&self) -> impl Future<Output = Result<usize>> + use<> {
        self.shared.compile_service().clear_memory_cache()
    }

    /// Every loaded executable still alive (py_client's `live_executables`), including those
    /// the memory compile cache keeps, each with the host callbacks it was last bound to.
    pub fn live_executables(&self) -> Result<Vec<LoadedExecutable>> {
        wait(self.live_executables_async())
    }

    /// The async form of [`live_executables`](Self::live_executables): the client actor, which
    /// keeps the callback registrations, answers.
    pub fn live_executables_async(
        &self,
    ) -> impl Future<Output = Result<Vec<LoadedExecutable>>> + use<> {
        let (shared, listing) = (self.shared.clone(), self.shared.router().live_executables());
        async move {
            Ok((listing.await?.into_iter())
                .map(|(core, set)| LoadedExecutable::new(shared.clone(), core, set))
                .collect())
        }
    }
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
    /// Disk or Redis entries found damaged or foreign, removed and recompiled.
    pub corrupt_entries: u64,
    /// Disk or Redis entries refused because fleet keys are set and none verified them
    /// (unsigned, or signed with another key): removed and compiled locally.
    pub unsigned_entries: u64,
    /// Requests answered by an entry from Redis (another process's compile, or an earlier one).
    pub redis_hits: u64,
    /// Redis lookups that found no entry.
    pub redis_misses: u64,
    /// Redis round trips that failed (down, slow, full): each compiled or stored locally.
    pub redis_errors: u64,
    /// Compiles that waited for another process holding the lease.
    pub redis_lease_waits: u64,
    /// Leases taken over after their holder stopped renewing (it died) without storing.
    pub redis_takeovers: u64,
    /// Waits on another process's compile ended by its wake-up (the entry stored, or the
    /// lease released) rather than by the next poll.
    pub redis_wakeups: u64,
    /// Entries this client stored in Redis.
    pub redis_stores: u64,
    /// Entries over the size limit: not stored, or refused and deleted on load.
    pub redis_too_large: u64,
    /// Round trips not tried because Redis (a cluster: the key's master) failed within the
    /// last second: each lookup compiled, each store kept, locally.
    pub redis_skips: u64,
}
