//! The batcher's queue as plain data: two priority levels, deadlines, and the rule for when a
//! batch is ready and which requests it takes. No threads or channels here, so the policy is
//! unit-tested on its own (as `flight.rs` is for single flight).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A request's priority: `High` requests are batched before any `Low` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Batched before any `Low` request.
    High,
    /// The default.
    #[default]
    Low,
}

/// The batcher's state a batch decision depends on, besides the queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct When {
    /// Shutting down: whatever waits goes.
    pub(crate) draining: bool,
    /// No batch is running on any device.
    pub(crate) nothing_running: bool,
}

/// What the queue needs to know of a request.
pub(crate) trait Queued {
    fn rows(&self) -> usize;
    fn arrived(&self) -> Instant;
    fn deadline(&self) -> Option<Instant>;
    /// The caller has gone (dropped its future): nothing to run.
    fn cancelled(&self) -> bool;
}

/// Two FIFO queues, high priority first, and the number of rows in both.
pub(crate) struct BatchQueue<R> {
    high: VecDeque<R>,
    low: VecDeque<R>,
    rows: usize,
}

/// What `take` removed: a batch to run, and requests that must be answered without running.
pub(crate) struct Taken<R> {
    pub(crate) batch: Vec<R>,
    pub(crate) expired: Vec<R>,
    pub(crate) cancelled: Vec<R>,
}

impl<R> Default for Taken<R> {
    fn default() -> Self {
        Taken {
            batch: Vec::new(),
            expired: Vec::new(),
            cancelled: Vec::new(),
        }
    }
}

impl<R: Queued> BatchQueue<R> {
    pub(crate) fn new() -> Self {
        BatchQueue {
            high: VecDeque::new(),
            low: VecDeque::new(),
            rows: 0,
        }
    }

    pub(crate) fn push(&mut self, request: R, priority: Priority) {
        self.rows += request.rows();
        match priority {
            Priority::High => self.high.push_back(request),
            Priority::Low => self.low.push_back(request),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.high.len() + self.low.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When the oldest request has waited `max_delay`: a batch goes then, full or not. A
    /// delay past what an `Instant` can hold never falls due (the batch waits to be full).
    pub(crate) fn due(&self, max_delay: Duration) -> Option<Instant> {
        let oldest = [self.high.front(), self.low.front()]
            .into_iter()
            .flatten()
            .map(|r| r.arrived())
            .min()?;
        oldest.checked_add(max_delay)
    }

    /// The earliest deadline of any queued request (to answer it when it passes).
    pub(crate) fn earliest_deadline(&self) -> Option<Instant> {
        self.high
            .iter()
            .chain(&self.low)
            .filter_map(|r| r.deadline())
            .min()
    }

    /// Whether a batch should go now (to a free device): a full batch is waiting, the oldest
    /// request has waited `max_delay`, the queue is being drained, or no batch is running at
    /// all. Waiting for more rows only pays while other batches run (the rows arriving
    /// meanwhile would wait anyway); on an idle batcher it would only add latency.
    pub(crate) fn ready(
        &self,
        now: Instant,
        max_rows: usize,
        max_delay: Duration,
        when: When,
    ) -> bool {
        !self.is_empty()
            && (when.draining
                || when.nothing_running
                || self.rows >= max_rows
                || self.due(max_delay).is_some_and(|d| now >= d))
    }

    /// Takes up to `max_rows` rows of live requests, high priority first, each level in order;
    /// expired and cancelled requests met on the way are taken out for answering. Stops at the
    /// first request that does not fit.
    pub(crate) fn take(&mut self, max_rows: usize, now: Instant) -> Taken<R> {
        let mut taken = Taken::default();
        let mut rows = 0;
        for level in [&mut self.high, &mut self.low] {
            while let Some(front) = level.front() {
                if front.cancelled() || front.deadline().is_some_and(|d| now >= d) {
                    let r = level.pop_front().expect("a front");
                    self.rows -= r.rows();
                    if r.cancelled() {
                        taken.cancelled.push(r);
                    } else {
                        taken.expired.push(r);
                    }
                    continue;
                }
                if rows + front.rows() > max_rows {
                    return taken;
                }
                let r = level.pop_front().expect("a front");
                rows += r.rows();
                self.rows -= r.rows();
                taken.batch.push(r);
            }
        }
        taken
    }

    /// Takes out every request whose deadline has passed or whose caller has gone.
    pub(crate) fn sweep(&mut self, now: Instant) -> Taken<R> {
        let mut taken = Taken::default();
        for level in [&mut self.high, &mut self.low] {
            let mut keep = VecDeque::with_capacity(level.len());
            for r in level.drain(..) {
                if r.cancelled() {
                    self.rows -= r.rows();
                    taken.cancelled.push(r);
                } else if r.deadline().is_some_and(|d| now >= d) {
                    self.rows -= r.rows();
                    taken.expired.push(r);
                } else {
                    keep.push_back(r);
                }
            }
            *level = keep;
        }
        taken
    }

    /// Everything queued, in priority order (for failing it all at shutdown).
    pub(crate) fn drain_all(&mut self) -> Vec<R> {
        self.rows = 0;
        self.high.drain(..).chain(self.low.drain(..)).collect()
    }
}

/// The smallest allowed batch size that holds `rows` (sizes sorted ascending).
pub(crate) fn padded_size(allowed: &[usize], rows: usize) -> Option<usize> {
    allowed.iter().copied().find(|&s| s >= rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R {
        id: u32,
        rows: usize,
        arrived: Instant,
        deadline: Option<Instant>,
        cancelled: bool,
    }

    impl Queued for R {
        fn rows(&self) -> usize {
            self.rows
        }
        fn arrived(&self) -> Instant {
            self.arrived
        }
        fn deadline(&self) -> Option<Instant> {
            self.deadline
        }
        fn cancelled(&self) -> bool {
            self.cancelled
        }
    }

    fn r(id: u32, rows: usize, at: Instant) -> R {
        R {
            id,
            rows,
            arrived: at,
            deadline: None,
            cancelled: false,
        }
    }

    fn ids(v: &[R]) -> Vec<u32> {
        v.iter().map(|r| r.id).collect()
    }

    #[test]
    fn high_priority_goes_first_and_order_is_kept_within_a_level() {
        let t = Instant::now();
        let mut q = BatchQueue::new();
        q.push(r(1, 1, t), Priority::Low);
        q.push(r(2, 1, t), Priority::High);
        q.push(r(3, 1, t), Priority::Low);
        q.push(r(4, 1, t), Priority::High);
        assert_eq!(ids(&q.take(3, t).batch), [2, 4, 1]);
        assert_eq!(ids(&q.take(3, t).batch), [3]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_batch_stops_at_the_first_request_that_does_not_fit() {
        let t = Instant::now();
        let mut q = BatchQueue::new();
        for (id, rows) in [(1, 3), (2, 4), (3, 1)] {
            q.push(r(id, rows, t), Priority::Low);
        }
        assert_eq!(ids(&q.take(6, t).batch), [1]);
        assert_eq!(ids(&q.take(6, t).batch), [2, 3]);
    }

    #[test]
    fn ready_when_full_when_due_when_draining_or_when_nothing_runs() {
        let t = Instant::now();
        let delay = Duration::from_millis(5);
        let busy = When::default();
        let idle = When {
            nothing_running: true,
            ..busy
        };
        let draining = When {
            draining: true,
            ..busy
        };
        let mut q = BatchQueue::new();
        assert!(!q.ready(t, 4, delay, draining), "nothing to run");
        assert!(!q.ready(t, 4, delay, idle), "nothing to run");
        q.push(r(1, 2, t), Priority::Low);
        assert!(
            !q.ready(t, 4, delay, busy),
            "others run: wait for more rows"
        );
        assert!(q.ready(t, 4, delay, idle), "nothing runs: go at once");
        assert!(q.ready(t, 4, delay, draining));
        assert!(q.ready(t + delay, 4, delay, busy));
        assert_eq!(q.due(delay), Some(t + delay));
        q.push(r(2, 2, t), Priority::High);
        assert!(q.ready(t, 4, delay, busy), "a full batch waits for nothing");
    }

    #[test]
    fn expired_and_cancelled_requests_are_taken_out_not_batched() {
        let t = Instant::now();
        let mut q = BatchQueue::new();
        let mut late = r(1, 1, t);
        late.deadline = Some(t + Duration::from_millis(1));
        let mut gone = r(2, 1, t);
        gone.cancelled = true;
        q.push(late, Priority::Low);
        q.push(gone, Priority::Low);
        q.push(r(3, 1, t), Priority::Low);
        assert_eq!(q.earliest_deadline(), Some(t + Duration::from_millis(1)));
        let taken = q.take(8, t + Duration::from_millis(2));
        assert_eq!(
            (
                ids(&taken.batch),
                ids(&taken.expired),
                ids(&taken.cancelled)
            ),
            (vec![3], vec![1], vec![2])
        );
        assert!(q.is_empty());
    }

    #[test]
    fn sweep_keeps_live_requests_in_order() {
        let t = Instant::now();
        let mut q = BatchQueue::new();
        let mut late = r(2, 1, t);
        late.deadline = Some(t);
        q.push(r(1, 1, t), Priority::Low);
        q.push(late, Priority::Low);
        q.push(r(3, 1, t), Priority::Low);
        let swept = q.sweep(t);
        assert_eq!(ids(&swept.expired), [2]);
        assert_eq!(ids(&q.take(8, t).batch), [1, 3]);
    }

    #[test]
    fn padding_picks_the_smallest_allowed_size_that_fits() {
        let allowed = [1, 2, 4, 8, 16];
        let cases = [
            (1, Some(1)),
            (3, Some(4)),
            (8, Some(8)),
            (9, Some(16)),
            (17, None),
        ];
        for (rows, want) in cases {
            assert_eq!(padded_size(&allowed, rows), want, "{rows} rows");
        }
    }
}
