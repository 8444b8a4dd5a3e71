//! Where a batcher's time went, as Triton's model statistics count it: per request, its queue
//! wait and its batch's input, execute and output phases; per executed batch size, the same
//! phases; rows inferred, batches executed, and when the last one ended. Atomics only.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many times something happened and how long it took in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timed {
    /// How many times.
    pub count: u64,
    /// All of them together.
    pub total: Duration,
}

/// One executed batch size's phases, each counted once per batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSizeStatistics {
    /// The rows executed (padded to an allowed size).
    pub batch_size: usize,
    /// Concatenating, padding and uploading the inputs.
    pub compute_input: Timed,
    /// Executing, until the first output is on the host.
    pub compute_infer: Timed,
    /// Reading the other outputs and cutting each request's rows out.
    pub compute_output: Timed,
}

/// A batcher's statistics since it started ([`crate::serving::Batcher::statistics`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatcherStatistics {
    /// Rows answered (a request of 3 rows counts 3), as Triton's `inference_count`.
    pub inferences: u64,
    /// Batches executed, as Triton's `execution_count`.
    pub executions: u64,
    /// When the last batch ended; `None` before the first.
    pub last_inference: Option<SystemTime>,
    /// Each request that ran: from its submission to the start of its batch.
    pub queue: Timed,
    /// Each request that ran, charged its batch's whole phase (Triton's rule): concatenating,
    /// padding and uploading the inputs.
    pub compute_input: Timed,
    /// The same for executing: from the execute call until its first output is on the host
    /// (on an asynchronous plugin the end of the execute is seen only there).
    pub compute_infer: Timed,
    /// The same for reading the other outputs and cutting each request's rows out of them.
    pub compute_output: Timed,
    /// Per allowed batch size, ascending; sizes never executed have zero counts.
    pub batch_sizes: Vec<BatchSizeStatistics>,
}

/// The three phases of one batch.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Phases {
    pub(crate) input: Duration,
    pub(crate) infer: Duration,
    pub(crate) output: Duration,
}

/// A count and a total in nanoseconds, added to together.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Tally {
    fn add(&self, n: u64, each: Duration) {
        self.count.fetch_add(n, Relaxed);
        let ns = u64::try_from(each.as_nanos()).unwrap_or(u64::MAX);
        self.ns.fetch_add(ns.saturating_mul(n), Relaxed);
    }

    fn read(&self) -> Timed {
        Timed {
            count: self.count.load(Relaxed),
            total: Duration::from_nanos(self.ns.load(Relaxed)),
        }
    }
}

/// The batcher's side: written by its device workers, read by anyone.
pub(crate) struct Statistics {
    inferences: AtomicU64,
    executions: AtomicU64,
    /// Milliseconds since the Unix epoch; 0 before the first batch.
    last_ms: AtomicU64,
    queue: Tally,
    /// Per request: input, infer, output.
    phases: [Tally; 3],
    /// Per allowed size (as `sizes`): input, infer, output.
    by_size: Vec<[Tally; 3]>,
    sizes: Vec<usize>,
}

impl Statistics {
    pub(crate) fn new(allowed: &[usize]) -> Statistics {
        Statistics {
            inferences: AtomicU64::new(0),
            executions: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            queue: Tally::default(),
            phases: Default::default(),
            by_size: allowed.iter().map(|_| Default::default()).collect(),
            sizes: allowed.to_vec(),
        }
    }

    pub(crate) fn queued(&self, waited: Duration) {
        self.queue.add(1, waited);
    }

    /// One batch of `requests` requests and `rows` rows, executed at `size`, answered.
    pub(crate) fn executed(&self, size: usize, requests: usize, rows: usize, phases: Phases) {
        let each = [phases.input, phases.infer, phases.output];
        for (tally, d) in self.phases.iter().zip(each) {
            tally.add(requests as u64, d);
        }
        if let Some(k) = self.sizes.iter().position(|&s| s == size) {
            for (tally, d) in self.by_size[k].iter().zip(each) {
                tally.add(1, d);
            }
        }
        self.inferences.fetch_add(rows as u64, Relaxed);
        self.executions.fetch_add(1, Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_ms.store(now.as_millis() as u64, Relaxed);
    }

    pub(crate) fn read(&self) -> BatcherStatistics {
        let last = self.last_ms.load(Relaxed);
        BatcherStatistics {
            inferences: self.inferences.load(Relaxed),
            executions: self.executions.load(Relaxed),
            last_inference: (last > 0).then(|| UNIX_EPOCH + Duration::from_millis(last)),
            queue: self.queue.read(),
            compute_input: self.phases[0].read(),
            compute_infer: self.phases[1].read(),
            compute_output: self.phases[2].read(),
            batch_sizes: (self.sizes.iter().zip(&self.by_size))
                .map(|(&batch_size, t)| BatchSizeStatistics {
                    batch_size,
                    compute_input: t[0].read(),
                    compute_infer: t[1].read(),
                    compute_output: t[2].read(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_charges_each_request_its_phases_and_its_size_once() {
        let s = Statistics::new(&[1, 4]);
        let ms = Duration::from_millis;
        let phases = Phases {
            input: ms(1),
            infer: ms(5),
            output: ms(2),
        };
        s.queued(ms(3));
        s.queued(ms(1));
        s.executed(4, 2, 3, phases);
        let r = s.read();
        assert_eq!((r.inferences, r.executions), (3, 1));
        assert!(r.last_inference.is_some());
        assert_eq!(
            r.queue,
            Timed {
                count: 2,
                total: ms(4)
            }
        );
        assert_eq!(
            r.compute_infer,
            Timed {
                count: 2,
                total: ms(10)
            }
        );
        assert_eq!(r.batch_sizes[0].compute_infer.count, 0);
        assert_eq!(r.batch_sizes[1].batch_size, 4);
        assert_eq!(
            r.batch_sizes[1].compute_output,
            Timed {
                count: 1,
                total: ms(2)
            }
        );
    }
}
