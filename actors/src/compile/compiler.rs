//! The compiler actors: a `SyncArbiter` pool, one thread each, since a compile blocks its
//! thread for tens of milliseconds. A worker compiles (or loads from the disk cache, which it
//! reads and writes itself, off the service's thread) and deserializes.

use std::future::Future;

use actix::{Actor, Handler, Message, SyncContext};
use pjrt_actors_formats::protos::xla::CompileOptionsProto;

use crate::compile::encode_options;
use std::sync::Arc;
use tracing::Span;

use crate::arrays::site::Site;
use crate::client::runtime::WorkerToken;
use crate::client::state::ClientState;
use crate::compile::cache::{CompileKey, bump};
use crate::compile::env::{CompileEnv, serialize, vouched};
use crate::compile::envelope;
use crate::compile::redis_cache::Lookup;
use crate::compile::topology::TopologyDescription;
use crate::compile::worker::{CompileWorker, WorkerSpec};
use crate::error::{Error, Result};
use crate::execute::executable::ExecutableMeta;
use crate::pjrt::{NamedValue, PjrtClient, PjrtDevice, PjrtLoadedExecutable, PjrtTopology};
use crate::protocol::supervision::{Mailbox, ask, guarded, tell};

/// What a worker answers: the loaded executable and what was read of it.
pub type Loaded = Result<(PjrtLoadedExecutable, ExecutableMeta)>;

/// A compiler actor: one of a pool, each on its own thread, all sharing the PJRT client. With
/// compile isolation each owns one compile worker process, started on its first compile and
/// again after one crashes.
pub struct CompilerActor {
    client: PjrtClient,
    devices: Vec<PjrtDevice>,
    isolation: Option<WorkerSpec>,
    worker: Option<CompileWorker>,
    _token: WorkerToken,
}

impl CompilerActor {
    pub(crate) fn new(
        client: PjrtClient,
        devices: Vec<PjrtDevice>,
        isolation: Option<WorkerSpec>,
        token: WorkerToken,
    ) -> Self {
        CompilerActor {
            client,
            devices,
            isolation,
            worker: None,
            _token: token,
        }
    }

    /// Compiles in this process, or in this actor's worker process with isolation: then the
    /// executable comes back serialized and is loaded here (with those bytes, which are what
    /// the caches must store), and a crash is a typed error.
    fn compile(
        &mut self,
        code: &[u8],
        options: &[u8],
    ) -> Result<(PjrtLoadedExecutable, Option<Arc<Vec<u8>>>)> {
        let Some(spec) = &self.isolation else {
            return Ok((self.client.compile(code, "mlir", options)?, None));
        };
        let worker = match &mut self.worker {
            Some(worker) => worker,
            None => self.worker.insert(CompileWorker::start(spec)?),
        };
        match worker.compile(code, options) {
            Ok(serialized) => {
                let exe = self
                    .client
                    .deserialize_and_load(&serialized, Some(options))?;
                Ok((exe, Some(Arc::new(serialized))))
            }
            Err(
                gone @ (Error::CompilerCrashed { .. }
                | Error::DeadlineExceeded { .. }
                | Error::CompileWorkerStart { .. }),
            ) => {
                tracing::warn!(error = %gone, "a compile worker died or was killed; the next compile starts another");
                self.worker = None;
                Err(gone)
            }
            Err(e) => Err(e),
        }
    }
}

impl Actor for CompilerActor {
    type Context = SyncContext<Self>;
}

crate::protocol::supervision::answers_asked!(CompilerActor);

/// A compile for a worker: from the disk cache when allowed and present, else the plugin.
#[derive(Message)]
#[rtype(result = "Loaded")]
pub(crate) struct CompileJob {
    key: CompileKey,
    code: Arc<Vec<u8>>,
    options: CompileOptionsProto,
    env: CompileEnv,
    span: Span,
}

impl Handler<CompileJob> for CompilerActor {
    type Result = Loaded;

    fn handle(&mut self, job: CompileJob, _: &mut SyncContext<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &job.span, "compiler.compile", bytes = job.code.len(), key = %job.key.hex())
                .entered();
        guarded("compile", || self.run_job(&job))
    }
}

impl CompilerActor {
    pub(crate) fn run_job(&mut self, job: &CompileJob) -> Loaded {
        let options = encode_options(&job.options);
        let portable = job.options.compile_portable_executable;
        let disk = job.env.disk.as_ref();
        if let Some(disk) = disk
            && let Some(bytes) = disk.load(&job.key)
        {
            match vouched(&bytes, &job.key, "disk", &job.env)
                .map(|envelope| self.open_entry(envelope, job, &options))
            {
                // Not signed by the fleet: never loaded, removed, recompiled (and re-signed).
                None => disk.remove(&job.key),
                Some(Ok(loaded)) => {
                    bump(&job.env.stats.disk_hits);
                    return Ok(loaded);
                }
                Some(Err(e)) => {
                    // Corrupt, foreign or unloadable: never trusted twice, recompiled now.
                    tracing::warn!(key = %job.key.hex(), error = %e, "dropping a bad compile-cache entry");
                    bump(&job.env.stats.corrupt_entries);
                    disk.remove(&job.key);
                }
            }
        }
        // The fleet's tier: an entry another process stored, or the lease to compile it.
        let mut lease = None;
        if let Some(redis) = &job.env.redis {
            match redis.lookup(&job.key) {
                Lookup::Hit(bytes) => match vouched(&bytes, &job.key, "redis", &job.env)
                    .map(|envelope| self.open_entry(envelope, job, &options))
                {
                    None => redis.remove(&job.key),
                    Some(Ok(loaded)) => {
                        if let Some(disk) = disk {
                            let _ = disk.store(&job.key, &bytes);
                        }
                        return Ok(loaded);
                    }
                    Some(Err(e)) => {
                        tracing::warn!(key = %job.key.hex(), error = %e, "dropping a bad Redis compile-cache entry");
                        bump(&job.env.stats.corrupt_entries);
                        redis.remove(&job.key);
                    }
                },
                Lookup::Lease(held) => lease = Some(held),
                Lookup::Compile => {}
            }
        }
        bump(&job.env.stats.compiles);
        let (exe, from_worker) = self.compile(&job.code, &options)?;
        let mut meta = ExecutableMeta::read(&exe, &self.devices, portable, &options)?;
        if let Some(bytes) = from_worker {
            meta = meta.loaded_from(bytes);
        }
        if disk.is_some() || job.env.redis.is_some() {
            match meta.plugin_bytes(&exe) {
                Ok(payload) => {
                    let bytes = serialize(&payload, portable, &options, &job.key, &job.env);
                    if let Some(disk) = disk
                        && let Err(e) = disk.store(&job.key, &bytes)
                    {
                        tracing::warn!(error = %e, "could not write the compile cache");
                    }
                    if let Some(redis) = &job.env.redis {
                        redis.publish(&job.key, &bytes, lease);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not serialize for the compile cache"),
            }
        }
        Ok((exe, meta))
    }

    /// Checks a cached entry (our envelope, this plugin, this key) and loads it.
    fn open_entry(&self, bytes: &[u8], job: &CompileJob, options: &[u8]) -> Loaded {
        let e = envelope::decode(bytes, &job.env.identity)?;
        // An entry is bound to its key: another program's executable copied or renamed into
        // this key is refused, never run.
        if e.cache_key != job.key.0 {
            return Err(Error::Deserialize {
                reason: "the entry was stored under another key".into(),
            });
        }
        let exe = self
            .client
            .deserialize_and_load(&e.payload, Some(options))?;
        let meta = ExecutableMeta::read(
            &exe,
            &self.devices,
            job.options.compile_portable_executable,
            options,
        )?
        .loaded_from(Arc::new(e.payload));
        Ok((exe, meta))
    }
}

/// Loads envelope-checked bytes on a worker (the async form of deserialize).
#[derive(Message)]
#[rtype(result = "Loaded")]
pub(crate) struct DeserializeJob {
    payload: Vec<u8>,
    options: Vec<u8>,
    portable: bool,
    span: Span,
}

impl Handler<DeserializeJob> for CompilerActor {
    type Result = Loaded;

    fn handle(&mut self, job: DeserializeJob, _: &mut SyncContext<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &job.span, "compiler.deserialize", bytes = job.payload.len()).entered();
        // The bytes loaded are the ones kept: moved into the meta, not copied.
        let payload = Arc::new(job.payload);
        guarded("deserialize", || {
            let exe = self
                .client
                .deserialize_and_load(&payload, Some(&job.options))?;
            let meta = ExecutableMeta::read(&exe, &self.devices, job.portable, &job.options)?
                .loaded_from(payload);
            Ok((exe, meta))
        })
    }
}

/// What an ahead-of-time compile produced: the plugin's serialization, what was read of it,
/// and the topology it is for as the plugin describes it (so a load matches it by meaning,
/// even where it was given only as bytes).
pub struct CompiledAhead {
    pub payload: Vec<u8>,
    pub meta: ExecutableMeta,
    /// The plugin's cost analysis, or its error (the 0.115 CPU plugin has none: a typed
    /// `UNIMPLEMENTED`, kept as it said it, not an empty list).
    pub cost_analysis: Result<Vec<(String, NamedValue)>>,
    pub topology: TopologyDescription,
}

/// A compile with nothing loaded (`PJRT_Compile`), for this client's topology (`topology` is
/// `None`; the client is given to the plugin as a hint) or for one known by its serialized
/// bytes, whose devices this process may not have. Runs in this process even with compile
/// isolation: a worker process could not load the result either.
#[derive(Message)]
#[rtype(result = "Result<CompiledAhead>")]
pub(crate) struct CompileAhead {
    code: Arc<Vec<u8>>,
    options: Vec<u8>,
    portable: bool,
    topology: Option<Vec<u8>>,
    span: Span,
}

impl Handler<CompileAhead> for CompilerActor {
    type Result = Result<CompiledAhead>;

    fn handle(&mut self, job: CompileAhead, _: &mut SyncContext<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &job.span, "compiler.compile_ahead", bytes = job.code.len()).entered();
        guarded("compile ahead of time", || {
            let topology = match &job.topology {
                None => self.client.topology()?,
                Some(bytes) => PjrtTopology::deserialize(self.client.plugin().clone(), bytes)?,
            };
            let hint = job.topology.is_none().then_some(&self.client);
            let exe = topology.compile(&job.code, "mlir", &job.options, hint)?;
            Ok(CompiledAhead {
                topology: TopologyDescription::describe(&topology)?,
                meta: ExecutableMeta::read_unloaded(&exe, job.portable, &job.options)?,
                cost_analysis: exe.cost_analysis().map_err(Error::from),
                payload: exe.serialize()?,
            })
        })
    }
}

/// Asks the plugin for the client's topology description: a plugin call, so on a compiler
/// thread, never the system thread.
#[derive(Message)]
#[rtype(result = "Result<TopologyDescription>")]
pub(crate) struct GetTopology {
    span: Span,
}

impl Handler<GetTopology> for CompilerActor {
    type Result = Result<TopologyDescription>;

    fn handle(&mut self, msg: GetTopology, _: &mut SyncContext<Self>) -> Self::Result {
        let _span = tracing::debug_span!(parent: &msg.span, "compiler.topology").entered();
        guarded("topology", || TopologyDescription::read(&self.client))
    }
}

/// Asks the plugin for a topology by name and options (`PJRT_TopologyDescription_Create`): the
/// devices an ahead-of-time compile may target without this process having them.
#[derive(Message)]
#[rtype(result = "Result<TopologyDescription>")]
pub(crate) struct CreateTopology {
    name: String,
    options: Vec<(String, NamedValue)>,
    span: Span,
}

impl Handler<CreateTopology> for CompilerActor {
    type Result = Result<TopologyDescription>;

    fn handle(&mut self, msg: CreateTopology, _: &mut SyncContext<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &msg.span, "compiler.create_topology", name = %msg.name)
                .entered();
        guarded("create topology", || {
            let plugin = self.client.plugin().clone();
            TopologyDescription::describe(&PjrtTopology::create(plugin, &msg.name, &msg.options)?)
        })
    }
}

/// The one way to reach the compiler pool: only this builds its messages, taking the caller's
/// span as it sends. (Compiles go through the compile service, which owns their queue.)
#[derive(Clone, Copy)]
pub struct CompilerPoolHandle<'a> {
    pub(crate) addr: &'a Mailbox<CompilerActor>,
    pub(crate) state: &'a Arc<ClientState>,
}

/// Executables (loaded, or registered cores) let go by an actor that must not call the plugin
/// (the compile service, on the system thread), dropped on a compiler thread.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Release(Vec<Box<dyn Send>>);

impl Handler<Release> for CompilerActor {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut SyncContext<Self>) {
        let _ = guarded("release executables", || {
            drop(msg.0);
            Ok(())
        });
    }
}

impl CompilerPoolHandle<'_> {
    /// Drops `executables` on a compiler thread, where plugin calls may run; nobody waits.
    pub(crate) fn release(self, executables: Vec<Box<dyn Send>>) {
        tell(self.addr, Release(executables));
    }

    /// Compiles `code` with `options` on a free worker (the compile service's queue hands
    /// jobs out only as workers free up), in `span`; resolves to the loaded executable, not yet
    /// registered.
    pub(crate) fn compile(
        self,
        key: CompileKey,
        code: Arc<Vec<u8>>,
        options: CompileOptionsProto,
        env: CompileEnv,
        span: Span,
    ) -> impl Future<Output = Loaded> + use<> {
        let job = CompileJob {
            key,
            code,
            options,
            env,
            span,
        };
        ask(self.addr, job)
    }

    /// Loads envelope-checked executable bytes on a compiler thread and registers the result,
    /// allocated at `site`.
    pub fn load(
        self,
        payload: Vec<u8>,
        options: Vec<u8>,
        portable: bool,
        site: Site,
    ) -> impl Future<Output = Result<Arc<crate::execute::executable::ExecutableCore>>> + use<> {
        let span = Span::current();
        let job = DeserializeJob {
            payload,
            options,
            portable,
            span,
        };
        let (loaded, state) = (ask(self.addr, job), self.state.clone());
        async move {
            let (exe, meta) = loaded.await?;
            Ok(state.register_executable(exe, meta, site))
        }
    }

    /// Compiles with nothing loaded, for this client's topology (`topology` `None`) or one
    /// known by its serialized bytes.
    pub fn compile_ahead(
        self,
        code: Arc<Vec<u8>>,
        options: Vec<u8>,
        portable: bool,
        topology: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<CompiledAhead>> + use<> {
        let span = Span::current();
        let job = CompileAhead {
            code,
            options,
            portable,
            topology,
            span,
        };
        ask(self.addr, job)
    }

    /// The client's topology description, asked of the plugin.
    pub fn topology(self) -> impl Future<Output = Result<TopologyDescription>> + use<> {
        ask(
            self.addr,
            GetTopology {
                span: Span::current(),
            },
        )
    }

    /// A topology the plugin makes by name and options.
    pub fn create_topology(
        self,
        name: String,
        options: Vec<(String, NamedValue)>,
    ) -> impl Future<Output = Result<TopologyDescription>> + use<> {
        let span = Span::current();
        ask(
            self.addr,
            CreateTopology {
                name,
                options,
                span,
            },
        )
    }
}
