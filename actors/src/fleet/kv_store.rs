//! The key-value store of a multi-process client on Redis: `get` waits for another process's
//! `put` (polling with backoff up to the plugin's timeout), `try_get` answers at once, `put`
//! sets. Keys live under a namespace so several clients can share one server.

use crate::lock_rank::{REDIS_CONNECTION, RankedMutex};
use std::time::{Duration, Instant};

use crate::fleet::target::RedisTarget;
use crate::pjrt::kv::{KvError, KvStore};

/// A `KvStore` on one Redis server or a cluster.
pub struct RedisKvStore {
    target: RedisTarget,
    namespace: String,
    conn: RankedMutex<Option<Box<dyn redis::ConnectionLike + Send>>>,
    timeout: Duration,
}

impl RedisKvStore {
    /// A store on `url` (`redis://`, `rediss://`, or a cluster's `redis+cluster://` seeds)
    /// with keys under `{namespace}:kv:`.
    pub fn new(url: &str, namespace: &str) -> crate::error::Result<RedisKvStore> {
        let timeout = Duration::from_secs(2);
        let target =
            RedisTarget::open(url, timeout).map_err(|reason| crate::error::Error::Cache {
                path: crate::compile::redis_cache::redact(url),
                reason,
            })?;
        Ok(RedisKvStore {
            target,
            namespace: namespace.to_string(),
            conn: RankedMutex::new(REDIS_CONNECTION, None),
            timeout,
        })
    }

    fn key(&self, key: &str) -> String {
        format!("{}:kv:{key}", self.namespace)
    }

    /// Runs `op` on the shared connection, connecting (again) as needed.
    fn with<T>(
        &self,
        op: impl FnOnce(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, KvError> {
        let mut slot = self.conn.lock();
        if slot.is_none() {
            let conn = (self.target.connect_blocking(self.timeout))
                .map_err(|e| KvError::Unavailable(e.to_string()))?;
            *slot = Some(conn);
        }
        let result = op(slot.as_deref_mut().expect("connected"));
        if let Err(e) = &result
            && (e.is_io_error() || e.is_connection_dropped() || e.is_timeout())
        {
            *slot = None;
        }
        result.map_err(|e| KvError::Unavailable(e.to_string()))
    }
}

impl KvStore for RedisKvStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(1);
        loop {
            match self.try_get(key) {
                Err(KvError::NotFound) => {}
                other => return other,
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(KvError::DeadlineExceeded);
            }
            std::thread::sleep(delay.min(deadline - now));
            delay = (delay * 2).min(Duration::from_millis(20));
        }
    }

    fn try_get(&self, key: &str) -> Result<Vec<u8>, KvError> {
        let k = self.key(key);
        let value: Option<Vec<u8>> = self.with(|c| redis::cmd("GET").arg(k).query(c))?;
        value.ok_or(KvError::NotFound)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        let k = self.key(key);
        self.with(|c| redis::cmd("SET").arg(k).arg(value).query(c))
    }
}
