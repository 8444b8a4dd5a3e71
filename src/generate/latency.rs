//! The engine's latency histograms (time to first token, time between tokens): counts per
//! fixed bucket, written with one atomic add each by the engine's thread and read whole by
//! anyone, so percentiles can be read off, not only a mean.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Each bucket's upper bound in seconds; a last bucket holds the rest. From 100 µs (a decode
/// step of a tiny model) to 10 s (a long prefill behind a queue).
pub const LATENCY_BOUNDS: [f64; 16] = [
    0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
    10.0,
];

/// Observed durations, written by one thread, read by any.
#[derive(Default)]
pub(crate) struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    pub(crate) fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let k = (LATENCY_BOUNDS.iter())
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[k].fetch_add(1, Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Latencies {
        Latencies {
            per_bucket: std::array::from_fn(|k| self.buckets[k].load(Relaxed)),
            sum: Duration::from_nanos(self.sum_ns.load(Relaxed)),
        }
    }
}

/// A histogram's counts at one moment: per bucket of [`LATENCY_BOUNDS`] (the last: past them),
/// and the sum of what was observed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latencies {
    /// Durations observed in each bucket (not cumulative).
    pub per_bucket: [u64; LATENCY_BOUNDS.len() + 1],
    /// Their sum.
    pub sum: Duration,
}

impl Latencies {
    /// Durations observed.
    pub fn count(&self) -> u64 {
        self.per_bucket.iter().sum()
    }

    /// The mean, if any was observed.
    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| self.sum / n as u32)
    }

    /// The upper bound of the bucket holding quantile `q` (0 to 1): the `q` quantile is at most
    /// this (`None` when nothing was observed or it lies past the last bound), as Prometheus's
    /// `histogram_quantile` reads buckets but without interpolating.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, &c) in self.per_bucket.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return LATENCY_BOUNDS.get(k).map(|&b| Duration::from_secs_f64(b));
            }
        }
        None
    }

    /// What was observed between `earlier` and this.
    pub fn since(&self, earlier: &Latencies) -> Latencies {
        Latencies {
            per_bucket: std::array::from_fn(|k| {
                self.per_bucket[k].saturating_sub(earlier.per_bucket[k])
            }),
            sum: self.sum.saturating_sub(earlier.sum),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_read_off_the_buckets() {
        let h = LatencyHistogram::default();
        assert_eq!(h.snapshot().quantile(0.5), None);
        // 98 fast, 2 slow: the median is in the fast bucket, p99 in the slow one.
        for _ in 0..98 {
            h.observe(Duration::from_micros(150));
        }
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_millis(40));
        let s = h.snapshot();
        assert_eq!(s.count(), 100);
        assert_eq!(s.quantile(0.5), Some(Duration::from_secs_f64(0.0002)));
        assert_eq!(s.quantile(0.98), Some(Duration::from_secs_f64(0.0002)));
        assert_eq!(s.quantile(0.99), Some(Duration::from_secs_f64(0.05)));
        assert_eq!(s.quantile(1.0), Some(Duration::from_secs_f64(0.05)));
        assert_eq!(
            s.sum,
            Duration::from_micros(98 * 150) + Duration::from_millis(70)
        );
        // Past the last bound: no bound to give.
        h.observe(Duration::from_secs(60));
        assert_eq!(h.snapshot().quantile(1.0), None);
        let later = h.snapshot();
        assert_eq!(later.since(&s).count(), 1);
    }
}
