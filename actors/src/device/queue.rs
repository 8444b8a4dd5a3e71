//! A device actor's queue of async work as its senders see it: how many requests are waiting in
//! its mailbox or still computing, the limit past which a new one is refused (`Error::Busy`),
//! and the client actor's least-loaded choice among devices, as plain data.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// One device's async work in flight. Owned by its device actor, which makes it and is the only
/// one to release what was reserved (when the work's outputs are computed); a sender (the
/// client actor, routing) may only reserve a slot, and fails past the limit. An atomic, not a
/// message: the router reads every device's depth for each portable run.
#[derive(Debug)]
pub struct DeviceQueue {
    in_flight: AtomicUsize,
    limit: usize,
}

impl DeviceQueue {
    /// A queue that refuses work past `limit` requests in flight (`None`: no limit).
    pub fn new(limit: Option<usize>) -> Arc<Self> {
        Arc::new(DeviceQueue {
            in_flight: AtomicUsize::new(0),
            limit: limit.unwrap_or(usize::MAX).max(1),
        })
    }

    /// Requests sent to the device's actor and not finished: waiting, running, or computing.
    pub fn depth(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The limit (`usize::MAX` when unlimited).
    #[cfg(test)]
    fn limit(&self) -> usize {
        self.limit
    }

    /// Takes a slot for one request: `Error::Busy` when `limit` are in flight already. The slot
    /// goes back when the returned guard is dropped, wherever that is (the request's outputs
    /// computed, or the request dropped unserved), so a slot is never lost.
    pub fn try_reserve(self: &Arc<Self>) -> Result<QueueSlot> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .map_err(|_| Error::Busy {
                what: "the device's async queue",
            })?;
        Ok(QueueSlot(self.clone()))
    }
}

/// One reserved slot of a [`DeviceQueue`]; dropping it releases the slot.
#[derive(Debug)]
pub struct QueueSlot(Arc<DeviceQueue>);

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The least-loaded of `depths` (one per device; `None` for a device that cannot run it),
/// ties broken by the first at or after `start` in circular order, so that idle devices take
/// turns. `None` when no device can run it.
pub fn least_loaded(depths: &[Option<usize>], start: usize) -> Option<usize> {
    let n = depths.len();
    (0..n)
        .map(|k| (start + k) % n.max(1))
        .filter_map(|d| depths[d].map(|depth| (depth, d)))
        .min_by_key(|&(depth, _)| depth)
        .map(|(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_loaded_takes_the_shallowest_queue_and_rotates_among_ties() {
        /// (depths, start, choice)
        type Case = (&'static [Option<usize>], usize, Option<usize>);
        let table: &[Case] = &[
            (&[Some(3), Some(1), Some(2)], 0, Some(1)),
            (&[Some(0), Some(0), Some(0)], 0, Some(0)),
            (&[Some(0), Some(0), Some(0)], 1, Some(1)),
            (&[Some(0), Some(0), Some(0)], 5, Some(2)),
            (&[None, Some(4), Some(4)], 0, Some(1)),
            (&[Some(9), None, Some(2)], 1, Some(2)),
            (&[None, None], 0, None),
            (&[], 0, None),
        ];
        for &(depths, start, want) in table {
            assert_eq!(least_loaded(depths, start), want, "{depths:?} from {start}");
        }
    }

    #[test]
    fn a_full_queue_is_busy_until_a_slot_is_released() {
        let queue = DeviceQueue::new(Some(2));
        let a = queue.try_reserve().unwrap();
        let _b = queue.try_reserve().unwrap();
        assert_eq!(queue.depth(), 2);
        assert!(matches!(queue.try_reserve(), Err(Error::Busy { .. })));
        drop(a);
        assert_eq!(queue.depth(), 1);
        let _c = queue.try_reserve().unwrap();
        assert_eq!(DeviceQueue::new(None).limit(), usize::MAX);
    }
}
