//! The composition root: validate the options, load the plugin, create the PJRT client, read
//! its facts into the shared state, then start the actors and wire their routes. Every typed
//! error happens before a thread starts; nothing else in the crate builds an actor.

use crate::lock_rank::{RankedMutex, WORKER_TOKENS};
use std::path::PathBuf;
use std::sync::Arc;

use actix::{Actor, SyncArbiter};

use crate::compile::topology::TopologyDescription;

use crate::arrays::registry::BufferRegistryActor;
use crate::client::actor::{ClientActor, Routes};
use crate::client::config::{
    CACHE_DIR_ENV, ClientConfig, check_visible_devices, options_from_env, refused_option,
    validate_options,
};
use crate::client::guard::ClientGuard;
use crate::client::runtime::{Runtime, WorkerCount};
use crate::client::state::{ClientState, StateParts, read_snapshot};
use crate::compile::cache::CacheStats;
use crate::compile::compiler::CompilerActor;
use crate::compile::disk_cache::DiskCache;
use crate::compile::env::CompileEnv;
use crate::compile::envelope;
use crate::compile::program_check::COMPILE_STACK_BYTES;
use crate::compile::redis_cache::{
    CACHE_REDIS_ENV, CACHE_REDIS_LEASE_MS_ENV, CACHE_REDIS_READ_ONLY_ENV, RedisCacheConfig,
    RedisTier,
};
use crate::compile::service::CompileService;
use crate::compile::signing::CacheKeys;
use crate::compile::worker::{
    COMPILE_TIMEOUT_ENV, COMPILE_WORKER_MEMORY_ENV, DEFAULT_COMPILE_TIMEOUT, WorkerLimits,
    WorkerSpec, parse_bytes, parse_seconds,
};
use crate::device::actor::DeviceActor;
use crate::device::memory_space::MemorySpaceActor;
use crate::device::queue::DeviceQueue;
use crate::error::{Error, Result};
use crate::pjrt::{PjrtClient, Plugin};
use crate::protocol::supervision::Mailbox;

/// Opens a client: everything that can fail with a typed error happens before a thread starts.
pub fn open_client(mut config: ClientConfig) -> Result<ClientGuard> {
    // Options the environment sets (`PJRT_ACTORS_PREALLOCATE`, JAX's `XLA_PYTHON_CLIENT_*`),
    // where the caller set none.
    let from_env = options_from_env(&config.options, |v| std::env::var(v).ok())?;
    let mut env_names: Vec<String> = from_env.iter().map(|(n, _)| n.clone()).collect();
    config.options.extend(from_env);
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
    let isolation = match &config.compile_worker {
        Some(worker) => Some((worker_binary(worker)?, worker_limits(&config)?)),
        None => None,
    };
    let plugin = match &config.plugin_path {
        Some(path) => Plugin::load(path)?,
        None => Plugin::discover()?,
    };
    let cache_stats = Arc::new(CacheStats::default());
    let cache_dir =
        (config.cache_dir.clone()).or_else(|| cache_dir_from_env(std::env::var_os(CACHE_DIR_ENV)));
    let disk = match &cache_dir {
        Some(dir) => Some(Arc::new(DiskCache::open(
            dir,
            config.cache_max_bytes.unwrap_or(1 << 30),
            cache_stats.clone(),
        )?)),
        None => None,
    };
    // The fleet's keys are read with the other cache settings: a bad key file is said before
    // a client is made.
    let keys = match config.cache_keys.clone() {
        Some(keys) => Some(keys),
        None => CacheKeys::from_env()?,
    }
    .map(Arc::new);
    // Programs that call host callbacks name our FFI handler; it must be registered before
    // they compile. A plugin without the FFI extension still opens (callbacks then fail).
    if let Err(e) = plugin.host_callbacks() {
        tracing::info!(error = %e, "host callbacks unavailable on this plugin");
    }
    let store = config.kv_store.as_ref().map(|s| s.0.clone());
    // JAX applies its `XLA_PYTHON_CLIENT_*` settings only where the backend has them; a plugin
    // that refuses an option the environment set (the 0.115 CPU plugin refuses `preallocate`)
    // opens without it. The caller's own options are never dropped.
    let pjrt = loop {
        match PjrtClient::create_with_store(plugin.clone(), &config.options, store.clone()) {
            Err(e)
                if let Some(name) = refused_option(&e.detail_of_plugin())
                    && let Some(at) = env_names.iter().position(|n| *n == name) =>
            {
                tracing::info!(option = %name, "the plugin has no such option; the one the environment set is not used");
                env_names.remove(at);
                config.options.retain(|(n, _)| *n != name);
            }
            created => break created?,
        }
    };
    let (snapshot, devices, memories) = read_snapshot(&pjrt)?;
    let local_ids: Vec<i32> = (snapshot.devices.iter())
        .map(|d| d.local_hardware_id.unwrap_or(d.description.id))
        .collect();
    check_visible_devices(&config.options, &local_ids)?;
    let xla_version = (snapshot.plugin_attributes.iter())
        .find(|(k, _)| k == "xla_version")
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    let identity = envelope::identity(
        &snapshot.platform_name,
        &snapshot.platform_version,
        &xla_version,
        snapshot.plugin_api_version,
    );
    let plugin_topology = pjrt.topology()?;
    let topology = Arc::new(plugin_topology.serialize()?);
    // Read once, here, where the plugin describes it (a fact that never changes); a plugin
    // that cannot is asked again per call, which then says why.
    let topology_description = TopologyDescription::describe(&plugin_topology).ok();
    let compile_context = compile_context(&identity, &snapshot.plugin_path);
    let state = Arc::new(ClientState::new(StateParts {
        pjrt,
        site_capture: config.site_capture,
        identity,
        compile_context,
        topology,
        topology_description,
        snapshot,
        devices,
        memories,
        memory_cache_entries: config.memory_cache_entries.unwrap_or(512),
        cache_stats: cache_stats.clone(),
        compile_queue_bound: config.compile_queue_bound.unwrap_or(256).max(1),
        allow_known_defects: config.allow_known_defects
            || std::env::var("PJRT_ACTORS_ALLOW_KNOWN_DEFECTS")
                .is_ok_and(|v| v == "1" || v == "true"),
        compile_threads,
    }));
    let isolation = isolation.map(|(binary, limits)| WorkerSpec {
        binary,
        plugin: state.snapshot.plugin_path.clone(),
        options: config.options.clone(),
        limits,
    });
    let redis = match (config.cache_redis.clone()).or_else(redis_from_env) {
        Some(redis) => Some(RedisTier::new(redis, cache_stats.clone())?),
        None => None,
    };
    let env = CompileEnv {
        identity: state.identity.clone(),
        topology: state.topology.clone(),
        disk,
        redis,
        stats: cache_stats,
        keys,
    };

    let device_queue_limit = config.device_queue_limit;
    let workers = WorkerCount::default();
    // Tokens are taken now, so shutdown waits even for a worker that has not started yet.
    let tokens: Vec<_> = (0..compile_threads).map(|_| workers.token()).collect();
    let tokens = Arc::new(RankedMutex::new(WORKER_TOKENS, tokens));
    let (st, wk) = (state.clone(), workers.clone());
    let (runtime, (client, routes)) = Runtime::start("pjrt-actors", workers, move |tag| {
        let mut arbiters = Vec::new();
        let devices = (st.snapshot.devices.iter().enumerate())
            .map(|(index, s)| {
                // Non-addressable devices have no work to serve here.
                s.is_addressable.then(|| {
                    let (arbiter, mail) = tag.new_device_arbiter(index);
                    let (st, queue) = (st.clone(), DeviceQueue::new(device_queue_limit));
                    let actor_queue = queue.clone();
                    let addr = actix::Supervisor::start_in_arbiter(&arbiter.handle(), move |_| {
                        DeviceActor::new(st, index, actor_queue)
                    });
                    arbiters.push(arbiter);
                    (Mailbox { addr, mail }, queue)
                })
            })
            .collect::<Vec<_>>();
        // Off the system thread, on one thread of their own: an async upload is a plugin call,
        // and the system thread's actors (the client actor, the compile service) must never
        // wait on one.
        let memories = {
            let (arbiter, mail) = tag.new_arbiter();
            let memories = (0..st.memories.len())
                .map(|index| {
                    let st = st.clone();
                    let addr = MemorySpaceActor::start_in_arbiter(&arbiter.handle(), move |_| {
                        MemorySpaceActor::new(st, index)
                    });
                    let mail = mail.clone();
                    Mailbox { addr, mail }
                })
                .collect::<Vec<_>>();
            arbiters.push(arbiter);
            memories
        };
        let (pjrt, pjrt_devices) = (st.pjrt.clone(), st.devices.clone());
        let name = || {
            std::thread::Builder::new()
                .name("pjrt-actors-compile".into())
                .stack_size(COMPILE_STACK_BYTES)
        };
        let compiler = SyncArbiter::start_with_thread_builder(compile_threads, name, move || {
            tag.mark_current_thread();
            // A restarted worker (after a panic) takes a fresh token.
            let token = tokens.lock().pop().unwrap_or_else(|| wk.token());
            CompilerActor::new(pjrt.clone(), pjrt_devices.clone(), isolation.clone(), token)
        });
        // The system thread's actors (the client actor, the compile service) share its flag;
        // the compiler pool's threads are actix's, not tokio's, and watch none.
        let system_mail = crate::client::runtime::current_mail();
        let compiler = Mailbox {
            addr: compiler,
            mail: Default::default(),
        };
        let routes = Arc::new(Routes {
            compile_service: Mailbox {
                addr: CompileService::new(compiler.clone(), compile_threads, st.clone(), env)
                    .start(),
                mail: system_mail.clone(),
            },
            compiler,
            queues: (devices.iter())
                .map(|d| d.as_ref().map(|(_, q)| q.clone()))
                .collect(),
            devices: devices.into_iter().map(|d| d.map(|(a, _)| a)).collect(),
            memories,
            // On a thread of its own: a defragment or heap profile of many arrays must
            // not stall the client actor and the compile service, which share the system
            // thread, nor the memory spaces' uploads.
            buffer_registry: {
                let (arbiter, mail) = tag.new_arbiter();
                let st = st.clone();
                let addr = BufferRegistryActor::start_in_arbiter(&arbiter.handle(), move |_| {
                    BufferRegistryActor::new(st)
                });
                arbiters.push(arbiter);
                Mailbox { addr, mail }
            },
        });
        let client = Mailbox {
            addr: ClientActor::new(st, routes.clone()).start(),
            mail: system_mail,
        };
        ((client, routes), arbiters)
    })?;
    if let Some(wait) = config.shutdown_timeout {
        runtime.set_shutdown_timeout(wait);
    }
    Ok(ClientGuard::new(runtime, state, client, routes))
}

/// The cache directory the environment names: an empty value counts as unset (it would
/// otherwise put cache files in the current directory), as `PJRT_PLUGIN_PATH` does.
/// The Redis tier the environment names (`PJRT_ACTORS_CACHE_REDIS`, read-only with
/// `PJRT_ACTORS_CACHE_REDIS_READ_ONLY=1`); an empty value counts as unset.
fn redis_from_env() -> Option<RedisCacheConfig> {
    let url = std::env::var(CACHE_REDIS_ENV)
        .ok()
        .filter(|v| !v.is_empty())?;
    let mut config = RedisCacheConfig::new(url);
    config.read_only = std::env::var(CACHE_REDIS_READ_ONLY_ENV).is_ok_and(|v| v == "1");
    if let Some(ms) =
        (std::env::var(CACHE_REDIS_LEASE_MS_ENV).ok()).and_then(|v| v.parse::<u64>().ok())
    {
        config.lease = std::time::Duration::from_millis(ms).clamp(
            std::time::Duration::from_millis(30),
            crate::compile::redis_cache::MAX_LEASE,
        );
    }
    Some(config)
}

fn cache_dir_from_env(value: Option<std::ffi::OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// What besides the program and its options changes the code a compile produces: the plugin's
/// identity, `XLA_FLAGS` (read here, at open, as the plugin reads it once per process), and
/// the plugin file's build (its size and modification time; a rebuilt plugin of the same
/// version differs in both). JAX's cache key covers the flags too.
fn compile_context(identity: &str, plugin: &std::path::Path) -> String {
    let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
    let build = std::fs::metadata(plugin)
        .map(|m| {
            let modified = (m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{} bytes, modified {modified}", m.len())
        })
        .unwrap_or_default();
    format!("{identity}; XLA_FLAGS={flags}; plugin file {build}")
}

/// The worker binary as an absolute path: a relative one would be looked up on `PATH` (no
/// slash) or against whatever the working directory is when a worker starts.
fn worker_binary(worker: &std::path::Path) -> Result<std::path::PathBuf> {
    let refuse = |reason: String| Error::InvalidOption {
        name: "compile_worker".into(),
        reason,
    };
    if !worker.is_file() {
        return Err(refuse(format!(
            "no compile worker binary at {} (from {})",
            worker.display(),
            std::env::current_dir().map_or("?".into(), |d| d.display().to_string())
        )));
    }
    std::fs::canonicalize(worker)
        .map_err(|e| refuse(format!("cannot resolve {}: {e}", worker.display())))
}

/// Each worker compile's time limit and a worker's memory limit: the builder's, else the
/// environment's, else the defaults. A bad environment value is refused, not ignored.
fn worker_limits(config: &ClientConfig) -> Result<WorkerLimits> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let refuse = |name: &str, reason: String| Error::InvalidOption {
        name: name.into(),
        reason,
    };
    let compile_timeout = match (config.compile_timeout, env(COMPILE_TIMEOUT_ENV)) {
        (Some(t), _) => t,
        (None, Some(text)) => parse_seconds(&text).map_err(|r| refuse(COMPILE_TIMEOUT_ENV, r))?,
        (None, None) => DEFAULT_COMPILE_TIMEOUT,
    };
    let memory_bytes = match (config.compile_worker_memory, env(COMPILE_WORKER_MEMORY_ENV)) {
        (Some(0), _) => None,
        (Some(bytes), _) => Some(bytes),
        // `0`: no limit, as the builder's 0 is.
        (None, Some(text)) if text.trim() == "0" => None,
        (None, Some(text)) => {
            Some(parse_bytes(&text).map_err(|r| refuse(COMPILE_WORKER_MEMORY_ENV, r))?)
        }
        (None, None) => WorkerLimits::default_memory(),
    };
    Ok(WorkerLimits {
        compile_timeout,
        memory_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cache_dir_variable_counts_as_unset() {
        assert_eq!(cache_dir_from_env(None), None);
        assert_eq!(cache_dir_from_env(Some("".into())), None);
        assert_eq!(
            cache_dir_from_env(Some("/tmp/cache".into())),
            Some(PathBuf::from("/tmp/cache"))
        );
    }

    #[test]
    fn the_compile_context_names_the_plugin_build() {
        let here = std::env::current_exe().unwrap();
        let context = compile_context("platform cpu", &here);
        assert!(context.starts_with("platform cpu; XLA_FLAGS="), "{context}");
        let len = std::fs::metadata(&here).unwrap().len();
        assert!(
            context.contains(&format!("plugin file {len} bytes")),
            "{context}"
        );
    }
}
