//! Wake-ups for processes waiting on another's compile: one pattern subscription per tier on
//! `NS:wake:*` (on a cluster, on any one node). Storing an entry or releasing a lease publishes the key's channel, and
//! a waiter on that key wakes at once instead of at its next poll; the poll stays, slower, as
//! the fallback for a lost message or a subscription that is down (or an ACL without channels).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::Condvar;

use crate::lock_rank::{REDIS_WAKE, RankedMutex};

/// Polling while wake-ups arrive: from the first delay to the cap, only as the fallback for a
/// lost message (a dead holder sends none; its lease expiring is found by this poll).
const WOKEN_POLL: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(250));
/// Polling without wake-ups (the subscription down, or not allowed): 2 ms doubling to 50 ms.
const BLIND_POLL: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(50));

/// The next wait after `delay`: doubled, within the bounds for whether wake-ups arrive.
pub fn next_poll(delay: Duration, live: bool) -> Duration {
    let (first, cap) = if live { WOKEN_POLL } else { BLIND_POLL };
    (delay * 2).clamp(first, cap)
}

/// Who waits on which channel, and how often each was woken. Owned by the tier; only channels
/// with a waiter are kept, so a fleet's other keys cost nothing here.
pub struct Wakes {
    /// channel -> (waiters, wake-ups seen). A Mutex with a Condvar: waiters block on compile
    /// threads (the tier's callers), the subscription task only flips counters.
    waiting: RankedMutex<HashMap<String, (usize, u64)>>,
    woken: Condvar,
    /// Whether the subscription is up (a waiter then polls slowly).
    live: AtomicBool,
    /// Whether the subscription task was started (on the first wait).
    started: AtomicBool,
}

/// A waiter's interest in one channel, from before its first look (so a wake-up between that
/// look and its wait is not lost) until it is dropped.
pub struct Watch<'a> {
    wakes: &'a Wakes,
    channel: String,
    seen: u64,
}

impl Default for Wakes {
    fn default() -> Self {
        Wakes {
            waiting: RankedMutex::new(REDIS_WAKE, HashMap::new()),
            woken: Condvar::new(),
            live: AtomicBool::new(false),
            started: AtomicBool::new(false),
        }
    }
}

impl Wakes {
    pub fn watch(&self, channel: String) -> Watch<'_> {
        let mut waiting = self.waiting.lock();
        let entry = waiting.entry(channel.clone()).or_insert((0, 0));
        entry.0 += 1;
        let seen = entry.1;
        Watch {
            wakes: self,
            channel,
            seen,
        }
    }

    fn wake(&self, channel: &str) {
        let mut waiting = self.waiting.lock();
        if let Some(entry) = waiting.get_mut(channel) {
            entry.1 += 1;
            self.woken.notify_all();
        }
    }

    /// Whether wake-ups arrive now.
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Starts the subscription task on `rt` once: it keeps a pattern subscription up on one
    /// of `nodes` (the next one a second after any failure: a cluster relays every publish to
    /// every node, so any node will do) and wakes the waiters of each channel a message names.
    pub fn start(
        self: &Arc<Self>,
        rt: &tokio::runtime::Runtime,
        nodes: Vec<redis::Client>,
        pattern: String,
    ) {
        if self.started.swap(true, Ordering::AcqRel) || nodes.is_empty() {
            return;
        }
        let wakes = self.clone();
        rt.spawn(async move {
            for client in nodes.iter().cycle() {
                let subscribed = tokio::time::timeout(Duration::from_secs(2), async {
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.psubscribe(&pattern).await?;
                    redis::RedisResult::Ok(pubsub)
                });
                if let Ok(Ok(pubsub)) = subscribed.await {
                    wakes.live.store(true, Ordering::Release);
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        wakes.wake(message.get_channel_name());
                    }
                }
                wakes.live.store(false, Ordering::Release);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
}

impl Watch<'_> {
    /// Waits until the channel is woken (true) or `timeout` passes (false).
    pub fn wait(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut waiting = self.wakes.waiting.lock();
        loop {
            let now = waiting.get(&self.channel).map_or(self.seen, |e| e.1);
            if now != self.seen {
                self.seen = now;
                return true;
            }
            if waiting.wait_until(&self.wakes.woken, deadline).timed_out() {
                return false;
            }
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut waiting = self.wakes.waiting.lock();
        if let Some(entry) = waiting.get_mut(&self.channel) {
            entry.0 -= 1;
            if entry.0 == 0 {
                waiting.remove(&self.channel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_before_the_wait_is_kept_and_other_channels_are_ignored() {
        let wakes = Wakes::default();
        let mut watch = wakes.watch("ns:wake:a".into());
        wakes.wake("ns:wake:b"); // nobody waits there: not kept
        assert!(!watch.wait(Duration::from_millis(10)));
        wakes.wake("ns:wake:a"); // before the wait: still seen
        assert!(watch.wait(Duration::from_secs(5)));
        assert!(
            !watch.wait(Duration::from_millis(10)),
            "one wake-up is seen once"
        );
        drop(watch);
        assert!(
            wakes.waiting.lock().is_empty(),
            "a channel without waiters is forgotten"
        );
    }

    #[test]
    fn a_wake_from_another_thread_ends_the_wait_at_once() {
        let wakes = Arc::new(Wakes::default());
        let mut watch = wakes.watch("c".into());
        let other = wakes.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.wake("c");
        });
        let start = Instant::now();
        assert!(watch.wait(Duration::from_secs(10)));
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
    }
}
