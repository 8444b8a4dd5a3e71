//! The persistent compile cache: one file per key in a directory that several processes may
//! share. It reads only regular files of its own (no FIFO, device or link: a hostile entry
//! cannot block or exhaust a compile), at most its size bound, and deletes only its own.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::compile::cache::{CacheStats, CompileKey, bump};
use crate::compile::envelope;
use crate::compile::signing::{CacheKeys, SignatureCount};
use crate::error::{Error, Result};

/// How old a temporary file must be before the disk cache takes it for a dead store's.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(600);

/// The largest entry read, whatever the bound: a frame a compile worker could send.
const MAX_ENTRY_BYTES: u64 = 4 << 30;

/// The persistent cache: one file per key, written atomically, bounded in bytes with the
/// least recently used entries (by modification time, refreshed on every hit) evicted first.
/// Several processes may share a directory: readers only ever see whole files.
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    stats: Arc<CacheStats>,
}

/// Opens `path` for reading if it is a regular file: never through a link (`O_NOFOLLOW`),
/// never waiting for a FIFO's writer (`O_NONBLOCK`; checked with `fstat` once open).
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(crate::pjrt::os::NO_LINK_NO_WAIT)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Whether `path` is an entry of ours: a regular `.pjx` file that starts with our envelope or
/// a signed one.
fn is_entry(path: &Path) -> bool {
    if path.extension().is_none_or(|x| x != "pjx") {
        return false;
    }
    let mut head = [0u8; envelope::MAGIC.len()];
    open_regular(path).is_ok_and(|mut f| f.read_exact(&mut head).is_ok())
        && (envelope::is_envelope(&head) || crate::compile::signing::is_signed(&head))
}

/// Removes a temporary file unless it was renamed into place.
struct Temporary(Option<PathBuf>);

impl Drop for Temporary {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl DiskCache {
    /// Opens `dir`, creating it if missing (what a client does).
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

    /// Opens `dir` only if it is a directory already (what `cache stats` and `cache clear` do:
    /// they read, never create).
    pub fn open_existing(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Cache {
                path: dir.display().to_string(),
                reason: "no cache directory there".into(),
            });
        }
        Ok(DiskCache {
            dir: dir.to_owned(),
            max_bytes: u64::MAX,
            stats: Arc::default(),
        })
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

    /// The entry for `key`, if a regular file is there within the size bound. Anything else
    /// at its path (a FIFO, a device, a link, a file too large) is removed as corrupt.
    pub fn load(&self, key: &CompileKey) -> Option<Vec<u8>> {
        let path = self.path(key);
        let limit = self.max_bytes.min(MAX_ENTRY_BYTES);
        let read = open_regular(&path).and_then(|f| {
            let mut bytes = Vec::new();
            (&f).take(limit + 1).read_to_end(&mut bytes)?;
            Ok((f, bytes))
        });
        let (file, bytes) = match read {
            Ok((file, bytes)) if bytes.len() as u64 <= limit => (file, bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            other => {
                let why = other.map_or_else(|e| e.to_string(), |_| format!("over {limit} bytes"));
                tracing::warn!(path = %path.display(), why, "removing what is not a cache entry");
                bump(&self.stats.corrupt_entries);
                let _ = std::fs::remove_file(&path);
                return None;
            }
        };
        // Refresh recency for LRU eviction on the handle just read (an explicit time needs the
        // file's owner, not a writable handle); failure only makes eviction less exact.
        let _ = file.set_modified(SystemTime::now());
        Some(bytes)
    }

    pub fn remove(&self, key: &CompileKey) {
        let _ = std::fs::remove_file(self.path(key));
    }

    /// Our entries: paths, sizes and modification times.
    fn entries(&self) -> Vec<(SystemTime, u64, PathBuf)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        (dir.flatten())
            .filter(|e| is_entry(&e.path()))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect()
    }

    /// Entries and their total bytes.
    pub fn usage(&self) -> (u64, u64) {
        (self.entries().iter()).fold((0, 0), |(n, bytes), e| (n + 1, bytes + e.1))
    }

    /// The entries by signature (`keys`: which of them verify): each read whole, one at a time.
    pub fn signatures(&self, keys: Option<&CacheKeys>) -> SignatureCount {
        let mut count = SignatureCount::default();
        for (_, _, path) in self.entries() {
            let mut bytes = Vec::new();
            if (open_regular(&path))
                .is_ok_and(|f| (&f).take(MAX_ENTRY_BYTES).read_to_end(&mut bytes).is_ok())
            {
                count.tally(&bytes, keys);
            }
        }
        count
    }

    /// Removes every entry of ours (files that are not are left alone); returns how many.
    pub fn clear(&self) -> u64 {
        (self.entries().into_iter())
            .filter(|(_, _, path)| std::fs::remove_file(path).is_ok())
            .count() as u64
    }

    /// Writes through a temporary file and a rename, so no reader sees a partial entry; the
    /// temporary is removed on every error (a full disk, a write refused).
    pub fn store(&self, key: &CompileKey, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let err = |e: std::io::Error| Error::Cache {
            path: self.dir.display().to_string(),
            reason: e.to_string(),
        };
        let path = self.dir.join(format!(
            ".tmp-{}-{}-{:?}",
            key.hex(),
            std::process::id(),
            std::thread::current().id()
        ));
        let mut tmp = Temporary(None);
        let mut f = std::fs::File::create(&path).map_err(err)?;
        tmp.0 = Some(path.clone());
        f.write_all(bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        std::fs::rename(&path, self.path(key)).map_err(err)?;
        tmp.0 = None;
        self.evict();
        Ok(())
    }

    fn evict(&self) {
        self.remove_stale_temporaries();
        let mut files = self.entries();
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

    #[test]
    fn a_hit_refreshes_its_entrys_time_for_eviction() {
        let dir = std::env::temp_dir().join(format!("pjrt-actors-hit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = DiskCache::open(&dir, 1 << 20, Arc::new(CacheStats::default())).unwrap();
        let key = CompileKey::new("test", b"program", b"options");
        let bytes = crate::compile::envelope::encode(&crate::compile::envelope::Envelope {
            identity: "test".into(),
            portable: false,
            options: vec![],
            topology: vec![],
            payload: vec![1],
            cache_key: key.0.to_vec(),
        });
        cache.store(&key, &bytes).unwrap();
        let path = cache.path(&key);
        let an_hour_ago = SystemTime::now() - std::time::Duration::from_secs(3600);
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(an_hour_ago).unwrap();
        assert_eq!(cache.load(&key).as_deref(), Some(&bytes[..]));
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(modified > an_hour_ago + std::time::Duration::from_secs(3000));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
