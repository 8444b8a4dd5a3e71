//! What one request, and all of them together, may cost the server: body and answer bytes,
//! time, connections and their idle time, and the memory requests in flight hold at once
//! (a budget they reserve from before they read a body or decode it).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ServeError;

/// The server's bounds, from its flags.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest request body (HTTP) or message (gRPC), and the largest answer.
    pub body_bytes: usize,
    /// The longest a request may take, its body's arrival included.
    pub request_time: Duration,
    /// How long a connection may go with no request in flight (a half-sent request head
    /// included) before it is closed.
    pub idle_time: Duration,
    /// Connections open at once, both ports together; past it, new ones wait to be accepted.
    pub connections: usize,
    /// Concurrent HTTP/2 streams on one gRPC connection.
    pub streams_per_connection: u32,
}

/// Bodies at least this long are read and decoded on a blocking thread, never on one of the
/// two runtime threads that answer every connection (a 59 MiB body parsed there stalled
/// `/v2/health/live` for seconds).
pub const OFF_THREAD_BYTES: usize = 64 << 10;

/// Runs `f` on a blocking thread when `big`, else here: a small request skips the hop.
pub async fn off_thread<T: Send + 'static>(
    big: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ServeError> {
    match big {
        false => Ok(f()),
        true => (tokio::task::spawn_blocking(f).await)
            .map_err(|e| ServeError::Internal(format!("a request's decoding thread: {e}"))),
    }
}

/// The bytes the requests in flight may hold at once: each reserves what its body, its
/// decoded inputs and its answer take before it holds them, and waits for room (within its
/// time limit) when the budget is spent.
#[derive(Clone)]
pub struct MemoryBudget {
    /// Permits of one KiB each (a semaphore counts at most 2^32 permits at a time).
    kib: Arc<Semaphore>,
    total_bytes: usize,
}

impl MemoryBudget {
    pub fn new(total_bytes: usize) -> MemoryBudget {
        let kib = total_bytes.div_ceil(1024).min(Semaphore::MAX_PERMITS);
        MemoryBudget {
            kib: Arc::new(Semaphore::new(kib)),
            total_bytes,
        }
    }

    /// Room for `bytes` (`what` they are, for the message), held until the permit drops.
    pub async fn reserve(
        &self,
        bytes: usize,
        what: &str,
    ) -> Result<OwnedSemaphorePermit, ServeError> {
        let kib = bytes.div_ceil(1024).max(1);
        let Some(kib) = u32::try_from(kib)
            .ok()
            .filter(|&k| k as usize * 1024 <= self.total_bytes.max(1024))
        else {
            return Err(ServeError::TooLarge(format!(
                "{what} would hold {bytes} bytes; the server holds at most {} for the requests in flight (--max-inflight-bytes)",
                self.total_bytes
            )));
        };
        (self.kib.clone().acquire_many_owned(kib).await)
            .map_err(|_| ServeError::Unavailable("the server is shutting down".into()))
    }

    /// Bytes not reserved now.
    #[cfg(test)]
    pub fn free_bytes(&self) -> usize {
        self.kib.available_permits() * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn reservations_wait_for_room_and_one_past_the_whole_budget_is_refused() {
        let budget = MemoryBudget::new(4 << 20);
        let a = budget.reserve(3 << 20, "a").await.unwrap();
        assert_eq!(budget.free_bytes(), 1 << 20);
        // A second 3 MiB waits until the first lets go.
        let b = budget.reserve(3 << 20, "b");
        tokio::pin!(b);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut b)
                .await
                .is_err()
        );
        drop(a);
        let b = b.await.unwrap();
        assert_eq!(budget.free_bytes(), 1 << 20);
        drop(b);
        let err = budget.reserve(5 << 20, "the request").await.unwrap_err();
        assert_eq!(err.http_status(), 413);
        assert!(err.message().contains("--max-inflight-bytes"), "{err:?}");
        assert_eq!(budget.free_bytes(), 4 << 20);
    }
}
