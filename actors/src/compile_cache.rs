//! The compile caches and what a compile carries: `CompileKey`, the counters, the memory cache
//! (written by the compile service, read by handles), the disk cache (read and written by the
//! compiler workers), `CancelToken`, and the envelope a serialized executable travels in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::executable::ExecutableCore;

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
    /// The Redis tier: entries found, not found, round trips that failed, waits for another
    /// process's compile, leases taken over from a holder that died, entries stored, entries
    /// too large to store or load.
    pub redis_hits: AtomicU64,
    pub redis_misses: AtomicU64,
    pub redis_errors: AtomicU64,
    pub redis_lease_waits: AtomicU64,
    pub redis_takeovers: AtomicU64,
    pub redis_stores: AtomicU64,
    pub redis_too_large: AtomicU64,
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
    map: parking_lot::RwLock<HashMap<CompileKey, (V, AtomicU64)>>,
    clock: AtomicU64,
    capacity: usize,
    stats: Arc<CacheStats>,
}

impl<V: Clone> LruCache<V> {
    pub fn new(capacity: usize, stats: Arc<CacheStats>) -> Self {
        LruCache {
            map: Default::default(),
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

    pub(crate) fn insert(&self, key: CompileKey, value: V) {
        if self.capacity == 0 {
            return;
        }
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut map = self.map.write();
        map.insert(key, (value, AtomicU64::new(tick)));
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

    /// Forgets `key`'s entry; returns whether there was one.
    pub fn remove(&self, key: &CompileKey) -> bool {
        self.map.write().remove(key).is_some()
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

/// How old a temporary file must be before the disk cache takes it for a dead store's.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(600);

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
        let cache = DiskCache {
            dir: dir.to_owned(),
            max_bytes,
            stats,
        };
        cache.remove_stale_temporaries();
        Ok(cache)
    }

    /// Removes temporary files a store left behind when its process died mid-write (`kill
    /// -9`): a store takes milliseconds, so one older than `STALE_TEMPORARY` is nobody's.
    fn remove_stale_temporaries(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let is_temporary = entry.file_name().to_string_lossy().starts_with(".tmp-");
            let age = (entry.metadata().and_then(|m| m.modified()).ok())
                .and_then(|modified| now.duration_since(modified).ok());
            if is_temporary && age.is_some_and(|age| age > STALE_TEMPORARY) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
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

    /// Entries and their total bytes.
    pub fn usage(&self) -> (u64, u64) {
        let entries = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        (entries.filter(|e| e.path().extension().is_some_and(|x| x == "pjx")))
            .filter_map(|e| e.metadata().ok())
            .fold((0, 0), |(n, bytes), m| (n + 1, bytes + m.len()))
    }

    /// Removes every entry; returns how many there were.
    pub fn clear(&self) -> u64 {
        let entries = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        (entries.filter(|e| e.path().extension().is_some_and(|x| x == "pjx")))
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count() as u64
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
        self.remove_stale_temporaries();
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
        cache.insert(key(1), "one");
        cache.insert(key(2), "two");
        assert_eq!(cache.get(&key(1)), Some("one")); // 1 is now newer than 2
        cache.insert(key(3), "three");
        assert_eq!(cache.get(&key(2)), None, "2 was the least recently used");
        assert_eq!(cache.get(&key(1)), Some("one"));
        assert_eq!(cache.get(&key(3)), Some("three"));
        assert_eq!(stats.memory_evictions.load(Ordering::Relaxed), 1);
        assert_eq!(stats.memory_hits.load(Ordering::Relaxed), 3);
        assert_eq!(cache.clear(), 2);
        assert_eq!(cache.get(&key(1)), None);
    }

    #[test]
    fn a_cache_of_capacity_zero_keeps_nothing() {
        let cache = LruCache::new(0, Arc::new(CacheStats::default()));
        cache.insert(key(1), 1);
        assert_eq!(cache.get(&key(1)), None);
    }

    #[test]
    fn a_cancel_token_wakes_a_waiter_and_stays_cancelled() {
        let token = CancelToken::new();
        let waiter = token.clone();
        let woke = std::thread::spawn(move || {
            crate::runtime::block_on(waiter.cancelled()).unwrap();
            waiter.is_cancelled()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        token.cancel();
        assert!(woke.join().unwrap());
        // Cancelled before anyone waits: resolves at once.
        crate::runtime::block_on(token.cancelled()).unwrap();
    }
}

#[cfg(test)]
mod disk_tests {
    use super::*;

    #[test]
    fn temporaries_a_dead_store_left_are_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("pjrt-actors-tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (stale, fresh, entry) = (
            dir.join(".tmp-aa-1-x"),
            dir.join(".tmp-bb-2-y"),
            dir.join("cc.pjx"),
        );
        for path in [&stale, &fresh, &entry] {
            std::fs::write(path, b"bytes").unwrap();
        }
        let an_hour_ago = SystemTime::now() - std::time::Duration::from_secs(3600);
        for path in [&stale, &entry] {
            let f = std::fs::File::options().write(true).open(path).unwrap();
            f.set_modified(an_hour_ago).unwrap();
        }
        DiskCache::open(&dir, 1 << 20, Arc::new(CacheStats::default())).unwrap();
        assert!(!stale.exists(), "a dead store's temporary stays behind");
        assert!(fresh.exists(), "a store in progress lost its file");
        assert!(entry.exists(), "an old entry is not a temporary");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
