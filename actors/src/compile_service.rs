//! The compile service: one actor that owns the compile queue, single flight and the caches.
//! A request is answered from the memory cache, joins a compile already in flight for the same
//! key, or is queued; the queue is handed to the compiler pool only as workers free up, so a
//! cancelled request leaves the queue without ever compiling. Workers read and write the disk
//! cache themselves, off the service's thread.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, WrapFuture};
use pjrt_sys::protos::xla::CompileOptionsProto;
use prost::Message as _;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, oneshot};
use tracing::Span;

use crate::compile::{CompilerActor, ExecutableCore, ExecutableMeta};
use crate::envelope::{self, Envelope};
use crate::error::{Error, Result};
use crate::open::ClientResources;
use crate::pjrt::PjrtLoadedExecutable;

/// A compile cache key: SHA-256 over the plugin identity, the program and the compile options
/// (which carry the executable devices and portability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CompileKey(pub [u8; 32]);

impl CompileKey {
    pub fn new(identity: &str, code: &[u8], options: &[u8]) -> Self {
        let mut h = Sha256::new();
        for part in [identity.as_bytes(), code, options] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        CompileKey(h.finalize().into())
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Counters of the compile service, readable at any time without a message.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub memory_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub misses: AtomicU64,
    pub compiles: AtomicU64,
    pub joined: AtomicU64,
    pub cancelled: AtomicU64,
    pub memory_evictions: AtomicU64,
    pub disk_evictions: AtomicU64,
    pub corrupt_entries: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The memory compile cache: written only by the compile service, read by handles directly so
/// a hit costs a hash and a read lock, not two thread hops. Least recently used is evicted past
/// `capacity` entries.
pub struct MemoryCache {
    map: parking_lot::RwLock<HashMap<CompileKey, (Arc<ExecutableCore>, AtomicU64)>>,
    clock: AtomicU64,
    capacity: usize,
    stats: Arc<CacheStats>,
}

impl MemoryCache {
    pub fn new(capacity: usize, stats: Arc<CacheStats>) -> Self {
        MemoryCache {
            map: Default::default(),
            clock: AtomicU64::new(0),
            capacity,
            stats,
        }
    }

    /// A hit refreshes the entry's recency and counts as a memory hit.
    pub fn get(&self, key: &CompileKey) -> Option<Arc<ExecutableCore>> {
        let map = self.map.read();
        let (core, last) = map.get(key)?;
        last.store(
            self.clock.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        bump(&self.stats.memory_hits);
        Some(core.clone())
    }

    fn insert(&self, key: CompileKey, core: Arc<ExecutableCore>) {
        if self.capacity == 0 {
            return;
        }
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut map = self.map.write();
        map.insert(key, (core, AtomicU64::new(tick)));
        while map.len() > self.capacity {
            let oldest = map
                .iter()
                .min_by_key(|(_, (_, t))| t.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                map.remove(&k);
                bump(&self.stats.memory_evictions);
            }
        }
    }

    /// Empties the cache; returns how many entries it held.
    pub fn clear(&self) -> usize {
        let mut map = self.map.write();
        let n = map.len();
        map.clear();
        n
    }
}

/// A cancellation token for a compile request. Cancelling it removes a queued request from the
/// queue and makes the waiting caller return `Error::RequestCancelled` at once.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<(AtomicBool, Notify)>,
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every request that carries this token.
    pub fn cancel(&self) {
        self.inner.0.store(true, Ordering::SeqCst);
        self.inner.1.notify_waiters();
    }

    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.0.load(Ordering::SeqCst)
    }

    /// Resolves once the token is cancelled.
    pub async fn cancelled(&self) {
        let notified = self.inner.1.notified();
        if self.is_cancelled() {
            return;
        }
        notified.await
    }
}

/// The persistent cache: one file per key, written atomically, bounded in bytes with the
/// least recently used entries (by modification time, refreshed on every hit) evicted first.
/// Several processes may share a directory: readers only ever see whole files.
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    stats: Arc<CacheStats>,
}

impl DiskCache {
    pub fn open(dir: &Path, max_bytes: u64, stats: Arc<CacheStats>) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Cache {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(DiskCache {
            dir: dir.to_owned(),
            max_bytes,
            stats,
        })
    }

    fn path(&self, key: &CompileKey) -> PathBuf {
        self.dir.join(format!("{}.pjx", key.hex()))
    }

    pub fn load(&self, key: &CompileKey) -> Option<Vec<u8>> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        // Refresh recency for LRU eviction; failure only makes eviction less exact.
        if let Ok(f) = std::fs::File::options().write(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(bytes)
    }

    pub fn remove(&self, key: &CompileKey) {
        let _ = std::fs::remove_file(self.path(key));
    }

    /// Writes through a temporary file and a rename, so no reader sees a partial entry.
    pub fn store(&self, key: &CompileKey, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let err = |e: std::io::Error| Error::Cache {
            path: self.dir.display().to_string(),
            reason: e.to_string(),
        };
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{:?}",
            key.hex(),
            std::process::id(),
            std::thread::current().id()
        ));
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        std::fs::rename(&tmp, self.path(key)).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })?;
        self.evict();
        Ok(())
    }

    fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pjx"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            // Another process may have removed it already; either way it is gone.
            let _ = std::fs::remove_file(&path);
            total = total.saturating_sub(len);
            bump(&self.stats.disk_evictions);
        }
    }
}

/// What a compile worker needs to know beyond the program.
#[derive(Clone)]
pub struct CompileEnv {
    pub identity: String,
    /// The client's serialized topology, recorded in serialized executables.
    pub topology: Arc<Vec<u8>>,
    pub disk: Option<Arc<DiskCache>>,
    pub stats: Arc<CacheStats>,
}

/// A compile for a worker: from the disk cache when allowed and present, else the plugin.
pub struct CompileJob {
    pub key: CompileKey,
    pub code: Arc<Vec<u8>>,
    pub options: CompileOptionsProto,
    pub use_cache: bool,
    pub env: CompileEnv,
    pub span: Span,
}

impl Message for CompileJob {
    type Result = Result<(PjrtLoadedExecutable, ExecutableMeta)>;
}

/// Serializes a loaded executable into our envelope.
pub fn serialize(
    exe: &PjrtLoadedExecutable,
    portable: bool,
    options: &[u8],
    env: &CompileEnv,
) -> Result<Vec<u8>> {
    Ok(envelope::encode(&Envelope {
        identity: env.identity.clone(),
        portable,
        options: options.to_vec(),
        topology: env.topology.to_vec(),
        payload: exe.serialize()?,
    }))
}

impl CompilerActor {
    pub(crate) fn run_job(
        &self,
        job: &CompileJob,
    ) -> Result<(PjrtLoadedExecutable, ExecutableMeta)> {
        let options = job.options.encode_to_vec();
        let portable = job.options.compile_portable_executable;
        let disk = job.env.disk.as_ref().filter(|_| job.use_cache);
        if let Some(disk) = disk {
            if let Some(bytes) = disk.load(&job.key) {
                match envelope::decode(&bytes, &job.env.identity).and_then(|e| {
                    self.client()
                        .deserialize_and_load(&e.payload, Some(&options))
                }) {
                    Ok(exe) => {
                        bump(&job.env.stats.disk_hits);
                        let meta = ExecutableMeta::read(&exe, self.devices(), portable, &options)?;
                        return Ok((exe, meta));
                    }
                    Err(e) => {
                        // Corrupt, foreign or unloadable: never trusted twice, recompiled now.
                        tracing::warn!(key = %job.key.hex(), error = %e, "dropping a bad compile-cache entry");
                        bump(&job.env.stats.corrupt_entries);
                        disk.remove(&job.key);
                    }
                }
            }
        }
        bump(&job.env.stats.compiles);
        let exe = self.client().compile(&job.code, "mlir", &options)?;
        let meta = ExecutableMeta::read(&exe, self.devices(), portable, &options)?;
        if let Some(disk) = disk {
            let stored = serialize(&exe, portable, &options, &job.env)
                .and_then(|bytes| disk.store(&job.key, &bytes));
            if let Err(e) = stored {
                tracing::warn!(error = %e, "could not write the compile cache");
            }
        }
        Ok((exe, meta))
    }
}

/// Loads envelope-checked bytes on a worker (the async form of deserialize).
pub struct DeserializeJob {
    pub payload: Vec<u8>,
    pub options: Vec<u8>,
    pub portable: bool,
    pub span: Span,
}

impl Message for DeserializeJob {
    type Result = Result<(PjrtLoadedExecutable, ExecutableMeta)>;
}

/// Someone waiting for a compile.
struct Waiter {
    reply: oneshot::Sender<Result<Arc<ExecutableCore>>>,
    cancel: Option<CancelToken>,
}

impl Waiter {
    fn abandoned(&self) -> bool {
        self.reply.is_closed() || self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }
}

struct Queued {
    site: crate::site::Site,
    key: CompileKey,
    code: Arc<Vec<u8>>,
    options: CompileOptionsProto,
    use_cache: bool,
    span: Span,
}

/// Submit a compile. The answer comes on `reply`.
pub struct Submit {
    /// Where the first request for this key came from (for heap profiles).
    pub site: crate::site::Site,
    pub key: CompileKey,
    pub code: Arc<Vec<u8>>,
    pub options: CompileOptionsProto,
    pub use_cache: bool,
    pub reply: oneshot::Sender<Result<Arc<ExecutableCore>>>,
    pub cancel: Option<CancelToken>,
    pub span: Span,
}

impl Message for Submit {
    type Result = ();
}

/// Forget every executable in the memory cache (they stay loaded while handles hold them).
pub struct ClearMemoryCache;

impl Message for ClearMemoryCache {
    type Result = usize;
}

pub struct CompileService {
    pool: Addr<CompilerActor>,
    pool_size: usize,
    running: usize,
    queue: VecDeque<Queued>,
    in_flight: HashMap<CompileKey, Vec<Waiter>>,
    memory: Arc<MemoryCache>,
    resources: Arc<ClientResources>,
    env: CompileEnv,
}

impl CompileService {
    pub fn new(
        pool: Addr<CompilerActor>,
        pool_size: usize,
        memory: Arc<MemoryCache>,
        resources: Arc<ClientResources>,
        env: CompileEnv,
    ) -> Self {
        CompileService {
            pool,
            pool_size,
            running: 0,
            queue: VecDeque::new(),
            in_flight: HashMap::new(),
            memory,
            resources,
            env,
        }
    }

    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        while self.running < self.pool_size {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            let waiters = self.in_flight.entry(job.key).or_default();
            waiters.retain(|w| !w.abandoned());
            if waiters.is_empty() {
                // Everyone who asked has gone: the request leaves the queue uncompiled.
                self.in_flight.remove(&job.key);
                bump(&self.env.stats.cancelled);
                continue;
            }
            self.running += 1;
            let key = job.key;
            let use_cache = job.use_cache;
            let site = job.site.clone();
            let request = self.pool.send(CompileJob {
                key,
                code: job.code,
                options: job.options,
                use_cache,
                env: self.env.clone(),
                span: job.span,
            });
            ctx.spawn(request.into_actor(self).map(move |result, act, ctx| {
                act.running -= 1;
                let result = result.unwrap_or(Err(Error::ShutDown));
                act.finish(key, use_cache, site, result);
                act.dispatch(ctx);
            }));
        }
    }

    fn finish(
        &mut self,
        key: CompileKey,
        use_cache: bool,
        site: crate::site::Site,
        result: Result<(PjrtLoadedExecutable, ExecutableMeta)>,
    ) {
        let waiters = self.in_flight.remove(&key).unwrap_or_default();
        let result = result.map(|(exe, meta)| {
            let res = &self.resources;
            ExecutableCore::register(&res.executables, exe, meta, res.devices.len(), site)
        });
        let mut delivered = false;
        for w in waiters {
            if !w.abandoned() {
                delivered |= w.reply.send(result.clone()).is_ok();
            }
        }
        match (result, delivered) {
            (Ok(core), true) if use_cache => self.remember(key, core),
            (_, true) => {}
            // Abandoned mid-compile: the result is dropped here, unregistered, not leaked.
            (_, false) => bump(&self.env.stats.cancelled),
        }
    }

    fn remember(&mut self, key: CompileKey, core: Arc<ExecutableCore>) {
        self.memory.insert(key, core);
    }
}

impl Actor for CompileService {
    type Context = Context<Self>;
}

impl Handler<Submit> for CompileService {
    type Result = ();

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        let _entered = msg.span.enter();
        let stats = &self.env.stats;
        // Handles check the memory cache before sending; check again for a compile that
        // finished in between.
        if msg.use_cache {
            if let Some(core) = self.memory.get(&msg.key) {
                tracing::debug!(key = %msg.key.hex(), hit = true, "compile");
                let _ = msg.reply.send(Ok(core));
                return;
            }
        }
        let waiter = Waiter {
            reply: msg.reply,
            cancel: msg.cancel,
        };
        if let Some(waiters) = self.in_flight.get_mut(&msg.key) {
            bump(&stats.joined);
            waiters.push(waiter);
            return;
        }
        bump(&stats.misses);
        tracing::debug!(key = %msg.key.hex(), hit = false, "compile");
        self.in_flight.insert(msg.key, vec![waiter]);
        self.queue.push_back(Queued {
            site: msg.site.clone(),
            key: msg.key,
            code: msg.code,
            options: msg.options,
            use_cache: msg.use_cache,
            span: msg.span.clone(),
        });
        self.dispatch(ctx);
    }
}

impl Handler<ClearMemoryCache> for CompileService {
    type Result = usize;

    fn handle(&mut self, _: ClearMemoryCache, _: &mut Context<Self>) -> usize {
        self.memory.clear()
    }
}
