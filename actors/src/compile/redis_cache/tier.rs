//! The Redis tier itself, on redis-rs (the `redis` feature): one connection (a server's
//! connection manager, or a cluster's connection) on a one-thread tokio runtime, leases renewed
//! in the background, every round trip bounded.

use crate::lock_rank::{REDIS_CONNECTION, REDIS_MAP_ASKED, REDIS_SKIPS, RankedMutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;

use super::{Lookup, MAX_LEASE, RedisCacheConfig, redact};
use crate::compile::cache::{CacheStats, CompileKey, bump};
use crate::compile::signing::{CacheKeys, SignatureCount};
use crate::error::{Error, Result};
use crate::fleet::target::{RedisConnection, RedisTarget};

use super::keys;
use super::skip::{self, Skips};

/// Takes the lease key for `token` with expiry ARGV[2] ms: 1 when it was free, 2 when it held
/// a stale lease (no expiry, or more than ARGV[3] ms left: a foreign or corrupted value that
/// would otherwise hold every process back for good), 0 while a live holder has it.
const TAKE: &str = "local left = redis.call('PTTL', KEYS[1]) if left == -2 then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 elseif left == -1 or left > tonumber(ARGV[3]) then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end return 0";

/// Renews the lease key while `token` still holds it.
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
/// Deletes the lease key if `token` still holds it.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The Redis tier of one client.
pub struct RedisTier {
    config: RedisCacheConfig,
    /// One server, or a cluster's seed nodes.
    target: RedisTarget,
    /// Drives the connection manager and lease renewals; callers wait on channels.
    /// Taken on drop and shut down in the background: the last handle may go on a thread
    /// that runs another runtime (an actor's), where a blocking runtime drop would panic.
    rt: Option<tokio::runtime::Runtime>,
    conn: RankedMutex<Option<RedisConnection>>,
    /// After a connection failure or timeout, Redis (a cluster: that key's master) is skipped
    /// for a second, so an unreachable server costs one timeout per second, not one per
    /// compile. Shared with the task that reads a cluster's slot map.
    skips: Arc<RankedMutex<Skips>>,
    /// When the slot map was last asked for (at most once per skip).
    map_asked: RankedMutex<Option<Instant>>,
    stats: Arc<CacheStats>,
    warned: AtomicBool,
    /// This process's lease tokens: host, pid and a counter.
    token_prefix: String,
    tokens: std::sync::atomic::AtomicU64,
    /// Waiters on other processes' compiles, woken by the subscription.
    wakes: Arc<super::wake::Wakes>,
}

/// A held lease: renewed in the background until released (on drop, or by `publish`).
pub struct Lease {
    tier: Arc<RedisTier>,
    /// The compile it is for: its lease key, wake-up channel and cluster slot follow.
    key: CompileKey,
    token: String,
    stop: Arc<AtomicBool>,
}

impl RedisTier {
    /// A tier for `config`; nothing is connected until the first use.
    pub fn new(config: RedisCacheConfig, stats: Arc<CacheStats>) -> Result<Arc<RedisTier>> {
        if config.lease > MAX_LEASE || config.lease < Duration::from_millis(30) {
            return Err(Error::InvalidOption {
                name: "RedisCacheConfig::lease".into(),
                reason: format!(
                    "{:?}: a lease lasts from 30 ms to {MAX_LEASE:?} (longer ones are taken for stale)",
                    config.lease
                ),
            });
        }
        if let Some(reason) = keys::namespace_problem(&config.namespace) {
            return Err(Error::InvalidOption {
                name: "RedisCacheConfig::namespace".into(),
                reason,
            });
        }
        let target =
            RedisTarget::open(&config.url, config.op_timeout).map_err(|reason| Error::Cache {
                path: redact(&config.url),
                reason,
            })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pjrt-actors-redis")
            .enable_all()
            .build()
            .map_err(|e| Error::ThreadSpawn {
                what: "redis",
                reason: e.to_string(),
            })?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Ok(Arc::new(RedisTier {
            token_prefix: format!("{}:{}", host.trim(), std::process::id()),
            config,
            target,
            rt: Some(rt),
            conn: RankedMutex::new(REDIS_CONNECTION, None),
            skips: Arc::new(RankedMutex::new(REDIS_SKIPS, Skips::default())),
            map_asked: RankedMutex::new(REDIS_MAP_ASKED, None),
            stats,
            warned: AtomicBool::new(false),
            tokens: Default::default(),
            wakes: Default::default(),
        }))
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.rt
            .as_ref()
            .expect("the runtime lives until the tier is dropped")
    }

    /// The tier's settings.
    pub fn config(&self) -> &RedisCacheConfig {
        &self.config
    }

    fn key(&self, key: &CompileKey, kind: &str) -> String {
        keys::name(&self.config.namespace, kind, &key.hex())
    }

    /// Runs `op` on the tier's runtime with the round-trip limit, waiting on this thread.
    fn run<T, F>(&self, op: impl FnOnce(RedisConnection) -> F) -> std::result::Result<T, String>
    where
        T: Send + 'static,
        F: Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        self.run_on(None, op)
    }

    /// `run` for a round trip on keys of `key`'s compile (their cluster slot).
    fn run_for<T, F>(
        &self,
        key: &CompileKey,
        op: impl FnOnce(RedisConnection) -> F,
    ) -> std::result::Result<T, String>
    where
        T: Send + 'static,
        F: Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        self.run_on(Some(skip::slot(&key.hex())), op)
    }

    fn run_on<T, F>(
        &self,
        slot: Option<u16>,
        op: impl FnOnce(RedisConnection) -> F,
    ) -> std::result::Result<T, String>
    where
        T: Send + 'static,
        F: Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        if !self.skips.lock().allows(slot, Instant::now()) {
            bump(&self.stats.redis_skips);
            return Err("skipped after a recent failure".into());
        }
        let conn = self.connection()?;
        let limit = self.config.op_timeout;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let fut = op(conn);
        self.runtime().spawn(async move {
            let _ = tx.send(tokio::time::timeout(limit, fut).await);
        });
        let outcome = match rx.recv_timeout(limit + Duration::from_secs(1)) {
            Ok(Ok(Ok(v))) => return Ok(v),
            Ok(Ok(Err(e))) if !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) => {
                // The server answered (out of memory, a wrong type): no reason to stop asking.
                return Err(self.fail(e.to_string(), false, slot));
            }
            Ok(Ok(Err(e))) => e.to_string(),
            Ok(Err(_)) | Err(_) => format!("no answer within {limit:?}"),
        };
        Err(self.fail(outcome, true, slot))
    }

    /// The shared connection, made on first use (it reconnects by itself after).
    fn connection(&self) -> std::result::Result<RedisConnection, String> {
        if !self.skips.lock().allows(None, Instant::now()) {
            bump(&self.stats.redis_skips);
            return Err("skipped after a recent failure".into());
        }
        let mut slot = self.conn.lock();
        if let Some(conn) = &*slot {
            return Ok(conn.clone());
        }
        let (target, timeout) = (self.target.clone(), self.config.op_timeout);
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.runtime().spawn(async move {
            let _ = tx.send(target.connect(timeout).await);
        });
        let made = rx.recv_timeout(self.config.op_timeout * 3);
        let conn = match made {
            Ok(Ok(conn)) => slot.insert(conn).clone(),
            failed => {
                // Let go of the slot first: `fail` looks at the connection too.
                drop(slot);
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "connecting timed out".into(),
                };
                return Err(self.fail(why, true, None));
            }
        };
        drop(slot);
        self.read_slot_map(conn.clone());
        Ok(conn)
    }

    /// Counts a failure and warns the first time; with `skip`, stops asking for a second: all
    /// of Redis, or with the failed round trip's `slot` on a cluster, that slot's master.
    fn fail(&self, why: String, skip: bool, slot: Option<u16>) -> String {
        bump(&self.stats.redis_errors);
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(url = %redact(&self.config.url), error = %why, "the Redis compile cache failed; compiling locally (warned once, counted in compile_cache_stats)");
        }
        if skip {
            self.skips.lock().failed(slot, Instant::now());
            // The connection's lock is let go before the slot map is asked for (an `if let`
            // would hold it through its block).
            let conn = self.conn.lock().clone();
            if let Some(conn) = conn {
                self.read_slot_map(conn);
            }
        }
        why
    }

    /// Reads a cluster's slot map in the background (at most once per skip), for the next
    /// failure to skip only its master's keys.
    fn read_slot_map(&self, conn: RedisConnection) {
        let RedisConnection::Cluster(_) = conn else {
            return;
        };
        let now = Instant::now();
        let mut asked = self.map_asked.lock();
        if asked.is_some_and(|t| now < t + skip::SKIP) {
            return;
        }
        *asked = Some(now);
        let (skips, limit) = (self.skips.clone(), self.config.op_timeout);
        self.runtime().spawn(async move {
            let mut conn = conn;
            if let Ok(Ok(map)) = tokio::time::timeout(limit, conn.slot_map()).await {
                skips.lock().set_map(map);
            }
        });
    }

    /// An entry's bytes, if Redis has one of acceptable size.
    fn get(&self, key: &CompileKey) -> std::result::Result<Option<Vec<u8>>, String> {
        let entry = self.key(key, "exe");
        let value: Option<Vec<u8>> =
            self.run_for(key, move |mut c| async move { c.get(entry).await })?;
        Ok(value)
    }

    /// Finds `key`'s entry, or takes the lease to compile it, or waits while another process
    /// holds the lease (taking it over if that process dies), or gives up to compile here.
    pub fn lookup(self: &Arc<Self>, key: &CompileKey) -> Lookup {
        let (started, mut waited, mut delay) = (Instant::now(), false, Duration::ZERO);
        // Watched before the first look: a store published between a look and the wait wakes it.
        let mut watch = self.wakes.watch(self.key(key, "wake"));
        loop {
            match self.get(key) {
                Err(_) => return Lookup::Compile,
                Ok(Some(bytes)) if bytes.len() > self.config.max_value_bytes => {
                    bump(&self.stats.redis_too_large);
                    self.remove(key);
                    return Lookup::Compile;
                }
                Ok(Some(bytes)) => {
                    bump(&self.stats.redis_hits);
                    return Lookup::Hit(bytes);
                }
                Ok(None) => {
                    if !waited {
                        bump(&self.stats.redis_misses);
                    }
                }
            }
            if self.config.read_only {
                return Lookup::Compile;
            }
            let lease_key = self.key(key, "lease");
            let token = format!(
                "{}:{}",
                self.token_prefix,
                self.tokens.fetch_add(1, Ordering::Relaxed)
            );
            let ms = self.config.lease.as_millis() as u64;
            let (k, t) = (lease_key.clone(), token.clone());
            let max = MAX_LEASE.as_millis() as u64;
            let taken: std::result::Result<i64, String> =
                self.run_for(key, move |mut c| async move {
                    redis::Script::new(TAKE)
                        .key(k)
                        .arg(t)
                        .arg(ms)
                        .arg(max)
                        .invoke_async(&mut c)
                        .await
                });
            match taken {
                Err(_) => return Lookup::Compile,
                Ok(how @ (1 | 2)) => {
                    let lease = self.hold(key, lease_key, token);
                    // The holder before us may have stored the entry and released the lease
                    // between our look and our lease: look again before compiling.
                    if let Ok(Some(bytes)) = self.get(key)
                        && bytes.len() <= self.config.max_value_bytes
                    {
                        bump(&self.stats.redis_hits);
                        return Lookup::Hit(bytes);
                    }
                    if waited || how == 2 {
                        bump(&self.stats.redis_takeovers);
                    }
                    return Lookup::Lease(lease);
                }
                Ok(_) => {}
            }
            if !waited {
                waited = true;
                bump(&self.stats.redis_lease_waits);
            }
            if started.elapsed() >= self.config.max_wait {
                return Lookup::Compile;
            }
            if self.config.wake_ups {
                let pattern = format!("{}:wake:*", keys::glob_literal(&self.config.namespace));
                self.wakes
                    .start(self.runtime(), self.target.subscribers(), pattern);
            }
            let live = self.config.wake_ups && self.wakes.is_live();
            delay = super::wake::next_poll(delay, live);
            if watch.wait(delay) {
                bump(&self.stats.redis_wakeups);
            }
        }
    }

    /// Starts renewing a lease just taken on `lease_key`, `key`'s.
    fn hold(self: &Arc<Self>, key: &CompileKey, lease_key: String, token: String) -> Lease {
        let stop = Arc::new(AtomicBool::new(false));
        let (period, ms) = (self.config.lease / 3, self.config.lease.as_millis() as u64);
        let (k, t, s) = (lease_key, token.clone(), stop.clone());
        if let Ok(conn) = self.connection() {
            self.runtime().spawn(async move {
                let mut conn = conn;
                let script = redis::Script::new(RENEW);
                loop {
                    tokio::time::sleep(period).await;
                    if s.load(Ordering::Acquire) {
                        break;
                    }
                    let renewed: redis::RedisResult<i64> =
                        script.key(&k).arg(&t).arg(ms).invoke_async(&mut conn).await;
                    // Lost (expired and taken) or unreachable: the compile goes on; its store
                    // is NX, so it never replaces another holder's entry.
                    if !matches!(renewed, Ok(1)) {
                        break;
                    }
                }
            });
        }
        Lease {
            tier: self.clone(),
            key: *key,
            token,
            stop,
        }
    }

    /// Stores a compiled entry (unless one is there already: a stale holder never replaces a
    /// newer entry), then releases `lease` if held.
    pub fn publish(&self, key: &CompileKey, bytes: &[u8], lease: Option<Lease>) {
        // The entry goes in before the lease is released (when `lease` drops at the end), so
        // a process that takes the lease next finds the entry on its second look.
        let _lease = lease;
        if self.config.read_only {
            return;
        }
        if bytes.len() > self.config.max_value_bytes {
            bump(&self.stats.redis_too_large);
            return;
        }
        let (entry, value, ttl) = (self.key(key, "exe"), bytes.to_vec(), self.config.ttl);
        let stored: std::result::Result<Option<String>, String> =
            self.run_for(key, move |mut c| async move {
                let mut cmd = redis::cmd("SET");
                cmd.arg(entry).arg(value).arg("NX");
                if let Some(ttl) = ttl {
                    cmd.arg("PX").arg(ttl.as_millis() as u64);
                }
                cmd.query_async(&mut c).await
            });
        if let Ok(Some(_)) = stored {
            bump(&self.stats.redis_stores);
        }
        self.wake(self.key(key, "wake"));
    }

    /// Publishes a wake-up on `channel`, without waiting and without counting a failure (an
    /// ACL user without channels, say: its waiters poll).
    fn wake(&self, channel: String) {
        if let Ok(mut conn) = self.connection() {
            self.runtime().spawn(async move {
                let _: redis::RedisResult<i64> = conn.publish(channel, 1).await;
            });
        }
    }

    /// Deletes a bad entry (corrupt, truncated, foreign, or too large).
    pub fn remove(&self, key: &CompileKey) {
        let entry = self.key(key, "exe");
        let _: std::result::Result<i64, String> =
            self.run_for(key, move |mut c| async move { c.del(entry).await });
    }

    /// Entries and their total bytes under this namespace.
    pub fn usage(&self) -> Result<(u64, u64)> {
        let (target, namespace) = (self.target.clone(), self.config.namespace.clone());
        self.run(move |mut c| async move {
            let keys = keys::ours(&target, &mut c, &namespace, &["exe"]).await?;
            let count = keys.len() as u64;
            Ok((count, keys::sum_over(c, keys, "STRLEN").await?))
        })
        .map_err(|reason| self.cache_error(reason))
    }

    /// The entries under this namespace by signature (`keys`: which of them verify).
    pub fn signatures(&self, keys: Option<&CacheKeys>) -> Result<SignatureCount> {
        let (target, namespace) = (self.target.clone(), self.config.namespace.clone());
        let fleet_keys = keys.cloned();
        self.run(move |mut c| async move {
            let names = keys::ours(&target, &mut c, &namespace, &["exe"]).await?;
            keys::signatures(c, names, fleet_keys).await
        })
        .map_err(|reason| self.cache_error(reason))
    }

    /// Deletes every entry and lease under this namespace, and nothing else: only keys this
    /// tier writes (`NS:exe:` or `NS:lease:` and a SHA-256 in hex in braces), the namespace taken
    /// literally (`*` is no wildcard); returns how many keys went.
    pub fn clear(&self) -> Result<u64> {
        let (target, namespace) = (self.target.clone(), self.config.namespace.clone());
        self.run(move |mut c| async move {
            let keys = keys::ours(&target, &mut c, &namespace, &["exe", "lease"]).await?;
            keys::sum_over(c, keys, "DEL").await
        })
        .map_err(|reason| self.cache_error(reason))
    }

    fn cache_error(&self, reason: String) -> Error {
        Error::Cache {
            path: redact(&self.config.url),
            reason,
        }
    }
}

impl Drop for RedisTier {
    fn drop(&mut self) {
        // The connection goes with the runtime's tasks; nothing waits for them.
        self.conn.lock().take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let (lease_key, token) = (self.tier.key(&self.key, "lease"), self.token.clone());
        let released: std::result::Result<i64, String> =
            self.tier.run_for(&self.key, move |mut c| async move {
                redis::Script::new(RELEASE)
                    .key(lease_key)
                    .arg(token)
                    .invoke_async(&mut c)
                    .await
            });
        if matches!(released, Ok(1)) {
            self.tier.wake(self.tier.key(&self.key, "wake"));
        }
    }
}
