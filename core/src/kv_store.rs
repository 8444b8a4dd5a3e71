//! The key-value store of a multi-process client on Redis: `get` waits for another process's
//! `put` (polling with backoff up to the plugin's timeout), `try_get` answers at once, `put`
//! sets. Keys live under a namespace so several clients can share one server.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Commands;

use crate::pjrt::kv::{KvError, KvStore};

/// A `KvStore` on one Redis server.
pub struct RedisKvStore {
    client: redis::Client,
    namespace: String,
    conn: Mutex<Option<redis::Connection>>,
    timeout: Duration,
}

impl RedisKvStore {
    /// A store on `url` with keys under `{namespace}:kv:`.
    pub fn new(url: &str, namespace: &str) -> crate::error::Result<RedisKvStore> {
        let client = redis::Client::open(url).map_err(|e| crate::error::Error::Cache {
            path: crate::compile::redis_cache::redact(url),
            reason: e.to_string(),
        })?;
        Ok(RedisKvStore {
            client,
            namespace: namespace.to_string(),
            conn: Mutex::new(None),
            timeout: Duration::from_secs(2),
        })
    }

    fn key(&self, key: &str) -> String {
        format!("{}:kv:{key}", self.namespace)
    }

    /// Runs `op` on the shared connection, connecting (again) as needed.
    fn with<T>(
        &self,
        op: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, KvError> {
        let mut slot = self.conn.lock();
        if slot.is_none() {
            let conn = self
                .client
                .get_connection_with_timeout(self.timeout)
                .map_err(|e| KvError::Unavailable(e.to_string()))?;
            let _ = conn.set_read_timeout(Some(self.timeout));
            let _ = conn.set_write_timeout(Some(self.timeout));
            *slot = Some(conn);
        }
        let result = op(slot.as_mut().expect("connected"));
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
        let value: Option<Vec<u8>> = self.with(|c| c.get(k))?;
        value.ok_or(KvError::NotFound)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        let k = self.key(key);
        self.with(|c| c.set(k, value))
    }
}
