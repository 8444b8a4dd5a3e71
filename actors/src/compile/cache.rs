//! The compile caches and what a compile carries: `CompileKey`, the counters, the memory cache
//! (written by the compile service, read by handles) and `CancelToken`; the disk cache, read
//! and written by the compiler workers, is `disk_cache`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::execute::executable::ExecutableCore;
use crate::lock_rank::{COMPILE_CACHE, RankedRwLock};

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

    /// Another key for the same compile, told apart by `why` (a compile that must not share
    /// its executable with the unmarked one).
    pub fn marked(&self, why: &str) -> CompileKey {
        CompileKey::new(why, &self.0, &[])
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
    /// Entries with no signature or a wrong one while fleet keys are set: refused, removed,
    /// compiled locally.
    pub unsigned_entries: AtomicU64,
    /// The Redis tier: entries found, not found, round trips that failed, waits for another
    /// process's compile, leases taken over from a holder that died, entries stored, entries
    /// too large to store or load.
    pub redis_hits: AtomicU64,
    pub redis_misses: AtomicU64,
    pub redis_errors: AtomicU64,
    pub redis_lease_waits: AtomicU64,
    pub redis_takeovers: AtomicU64,
    pub redis_wakeups: AtomicU64,
    pub redis_stores: AtomicU64,
    pub redis_too_large: AtomicU64,
    /// Lookups and stores not tried because Redis (a cluster: the key's master) failed within
    /// the last second (the skip policy): each compiled or kept locally.
    pub redis_skips: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The memory compile cache: written only by the compile service, read by handles directly so
/// a hit costs a hash and a read lock, not two thread hops.
pub type MemoryCache = LruCache<Arc<ExecutableCore>>;

/// A map from compile keys to values, least recently used evicted past `capacity` entries. A
/// hit refreshes recency under the read lock (an atomic tick per entry), so readers never
/// contend with each other; only inserts take the write lock.
pub struct LruCache<V> {
    map: RankedRwLock<HashMap<CompileKey, (V, AtomicU64)>>,
    clock: AtomicU64,
    capacity: usize,
    stats: Arc<CacheStats>,
}

impl<V: Clone> LruCache<V> {
    pub fn new(capacity: usize, stats: Arc<CacheStats>) -> Self {
        LruCache {
            map: RankedRwLock::with_default(COMPILE_CACHE),
            clock: AtomicU64::new(0),
            capacity,
            stats,
        }
    }

    /// A hit refreshes the entry's recency and counts as a memory hit.
    pub fn get(&self, key: &CompileKey) -> Option<V> {
        let map = self.map.read();
        let (value, last) = map.get(key)?;
        last.store(
            self.clock.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        bump(&self.stats.memory_hits);
        Some(value.clone())
    }

    /// Inserts `value`, and gives back what left the cache for it (the entry it replaced and
    /// the least recently used past the capacity), for the caller to drop where it may: an
    /// executable's drop unregisters it and calls the plugin, which is nothing to do under the
    /// cache's lock (its rank is a leaf) nor on the actor system's thread.
    #[must_use = "what left the cache is the caller's to drop where plugin calls may run"]
    pub(crate) fn insert(&self, key: CompileKey, value: V) -> Vec<V> {
        if self.capacity == 0 {
            return vec![value];
        }
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut map = self.map.write();
        let mut evicted = Vec::new();
        evicted.extend(map.insert(key, (value, AtomicU64::new(tick))));
        while map.len() > self.capacity {
            let oldest = map
                .iter()
                .min_by_key(|(_, (_, t))| t.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                evicted.extend(map.remove(&k));
                bump(&self.stats.memory_evictions);
            }
        }
        drop(map);
        evicted.into_iter().map(|(v, _)| v).collect()
    }

    /// Takes `key`'s entry out, for the caller to drop (see `insert`).
    #[must_use = "what left the cache is the caller's to drop where plugin calls may run"]
    pub fn take(&self, key: &CompileKey) -> Option<V> {
        self.map.write().remove(key).map(|(v, _)| v)
    }

    /// Empties the cache; gives back every entry, for the caller to drop (see `insert`).
    #[must_use = "what left the cache is the caller's to drop where plugin calls may run"]
    pub fn clear(&self) -> Vec<V> {
        let all = std::mem::take(&mut *self.map.write());
        all.into_values().map(|(v, _)| v).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> CompileKey {
        CompileKey::new("identity", &[n], b"options")
    }

    #[test]
    fn keys_differ_by_identity_program_and_options_and_by_where_parts_split() {
        let base = CompileKey::new("cpu", b"program", b"options");
        assert_eq!(base, CompileKey::new("cpu", b"program", b"options"));
        for other in [
            CompileKey::new("gpu", b"program", b"options"),
            CompileKey::new("cpu", b"program2", b"options"),
            CompileKey::new("cpu", b"program", b"options2"),
            // The same bytes split differently: lengths are hashed too.
            CompileKey::new("cpup", b"rogram", b"options"),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base.hex().len(), 64);
    }

    #[test]
    fn the_least_recently_used_entry_goes_first_and_hits_refresh_recency() {
        let stats = Arc::new(CacheStats::default());
        let cache = LruCache::new(2, stats.clone());
        assert!(cache.insert(key(1), "one").is_empty());
        assert!(cache.insert(key(2), "two").is_empty());
        assert_eq!(cache.get(&key(1)), Some("one")); // 1 is now newer than 2
        assert_eq!(
            cache.insert(key(3), "three"),
            ["two"],
            "given back, not dropped"
        );
        assert_eq!(cache.get(&key(2)), None, "2 was the least recently used");
        assert_eq!(cache.get(&key(1)), Some("one"));
        assert_eq!(cache.get(&key(3)), Some("three"));
        assert_eq!(stats.memory_evictions.load(Ordering::Relaxed), 1);
        assert_eq!(stats.memory_hits.load(Ordering::Relaxed), 3);
        let mut all = cache.clear();
        all.sort();
        assert_eq!(all, ["one", "three"]);
        assert_eq!(cache.get(&key(1)), None);
    }

    #[test]
    fn a_cache_of_capacity_zero_keeps_nothing() {
        let cache = LruCache::new(0, Arc::new(CacheStats::default()));
        assert_eq!(cache.insert(key(1), 1), [1]);
        assert_eq!(cache.get(&key(1)), None);
    }

    #[test]
    fn a_cancel_token_wakes_a_waiter_and_stays_cancelled() {
        let token = CancelToken::new();
        let waiter = token.clone();
        let woke = std::thread::spawn(move || {
            crate::client::runtime::block_on(waiter.cancelled()).unwrap();
            waiter.is_cancelled()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        token.cancel();
        assert!(woke.join().unwrap());
        // Cancelled before anyone waits: resolves at once.
        crate::client::runtime::block_on(token.cancelled()).unwrap();
    }
}
