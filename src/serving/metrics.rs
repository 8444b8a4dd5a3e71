//! A batcher's metrics: counters, a queue-depth gauge and fixed-bucket histograms, all atomics
//! written by the batcher's own threads and read by anyone, rendered in the Prometheus text
//! exposition format.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use crate::prometheus::{Exposition, Kind};

/// A histogram with fixed upper bounds (and +Inf), its sum and count.
pub(crate) struct Histogram {
    bounds: Vec<f64>,
    /// One counter per bound, then +Inf; not cumulative (made so when rendered).
    counts: Vec<AtomicU64>,
    /// The sum, in millionths of the unit (integer, so one atomic add).
    sum_micro: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: Vec<f64>) -> Self {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            bounds,
            counts,
            sum_micro: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, value: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(self.bounds.len());
        self.counts[slot].fetch_add(1, Relaxed);
        self.sum_micro
            .fetch_add((value * 1e6).round().max(0.0) as u64, Relaxed);
    }

    fn render(&self, page: &mut Exposition, name: &str, model: &str) {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        page.histogram(
            name,
            &[("model", model)],
            &self.bounds,
            counts.iter().copied(),
            counts.iter().sum(),
            self.sum_micro.load(Relaxed) as f64 / 1e6,
        );
    }
}

/// Latency buckets in seconds, 50 µs to 2.5 s.
const LATENCY_BOUNDS: [f64; 15] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

/// How requests ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Done,
    Failed,
    Expired,
    Cancelled,
    /// Refused at once: the queue was full.
    Busy,
    /// Refused before queueing: wrong shape or dtype, or the batcher had stopped.
    Rejected,
}

const OUTCOMES: [(Outcome, &str); 6] = [
    (Outcome::Done, "done"),
    (Outcome::Failed, "failed"),
    (Outcome::Expired, "expired"),
    (Outcome::Cancelled, "cancelled"),
    (Outcome::Busy, "busy"),
    (Outcome::Rejected, "rejected"),
];

/// Everything a batcher counts.
pub(crate) struct Metrics {
    pub(crate) model: String,
    /// Requests queued now (also the bound `Busy` checks against).
    pub(crate) queued: AtomicUsize,
    outcomes: [AtomicU64; 6],
    pub(crate) batches: AtomicU64,
    /// Rows per batch, before padding.
    pub(crate) batch_rows: Histogram,
    /// Rows per batch after padding to an allowed size.
    pub(crate) padded_rows: Histogram,
    /// Seconds from submission to the start of the request's batch.
    pub(crate) queue_seconds: Histogram,
    /// Seconds a batch took: upload, execute, read back.
    pub(crate) execute_seconds: Histogram,
    /// Where the time went, as Triton's statistics count it.
    pub(crate) statistics: super::statistics::Statistics,
}

impl Metrics {
    pub(crate) fn new(model: &str, allowed: &[usize]) -> Self {
        let sizes: Vec<f64> = allowed.iter().map(|&s| s as f64).collect();
        Metrics {
            model: model.to_string(),
            queued: AtomicUsize::new(0),
            outcomes: Default::default(),
            batches: AtomicU64::new(0),
            batch_rows: Histogram::new(sizes.clone()),
            padded_rows: Histogram::new(sizes),
            queue_seconds: Histogram::new(LATENCY_BOUNDS.to_vec()),
            execute_seconds: Histogram::new(LATENCY_BOUNDS.to_vec()),
            statistics: super::statistics::Statistics::new(allowed),
        }
    }

    pub(crate) fn count(&self, outcome: Outcome, n: u64) {
        let i = OUTCOMES
            .iter()
            .position(|(o, _)| *o == outcome)
            .expect("listed");
        self.outcomes[i].fetch_add(n, Relaxed);
    }

    pub(crate) fn outcome(&self, outcome: Outcome) -> u64 {
        let i = OUTCOMES
            .iter()
            .position(|(o, _)| *o == outcome)
            .expect("listed");
        self.outcomes[i].load(Relaxed)
    }

    pub(crate) fn observe_queue(&self, waited: Duration) {
        self.queue_seconds.observe(waited.as_secs_f64());
        self.statistics.queued(waited);
    }

    fn histograms(&self) -> [&Histogram; 4] {
        [
            &self.batch_rows,
            &self.padded_rows,
            &self.queue_seconds,
            &self.execute_seconds,
        ]
    }
}

const HISTOGRAMS: [(&str, &str); 4] = [
    ("pjrt_batcher_batch_size", "Rows per batch, before padding."),
    (
        "pjrt_batcher_padded_batch_size",
        "Rows per batch as executed, padded to an allowed size.",
    ),
    (
        "pjrt_batcher_queue_latency_seconds",
        "Time from submission to the start of the request's batch.",
    ),
    (
        "pjrt_batcher_execute_latency_seconds",
        "Time a batch took to upload, execute and read back.",
    ),
];

/// The Prometheus text exposition of every metric of these batchers: each family's HELP and
/// TYPE once, then one sample set per model, labelled with its name.
pub(crate) fn render(all: &[&Metrics]) -> String {
    let mut page = Exposition::new();
    page.family(
        "pjrt_batcher_queue_depth",
        Kind::Gauge,
        "Requests waiting in the queue.",
    );
    for m in all {
        let model = [("model", m.model.as_str())];
        page.sample("pjrt_batcher_queue_depth", &model, m.queued.load(Relaxed));
    }
    page.family(
        "pjrt_batcher_requests_total",
        Kind::Counter,
        "Requests by how they ended.",
    );
    for m in all {
        for (i, (_, outcome)) in OUTCOMES.iter().enumerate() {
            page.sample(
                "pjrt_batcher_requests_total",
                &[("model", m.model.as_str()), ("outcome", outcome)],
                m.outcomes[i].load(Relaxed),
            );
        }
    }
    page.family(
        "pjrt_batcher_batches_total",
        Kind::Counter,
        "Batches executed.",
    );
    for m in all {
        let model = [("model", m.model.as_str())];
        page.sample(
            "pjrt_batcher_batches_total",
            &model,
            m.batches.load(Relaxed),
        );
    }
    for (k, (name, help)) in HISTOGRAMS.iter().enumerate() {
        page.family(name, Kind::Histogram, help);
        for m in all {
            m.histograms()[k].render(&mut page, name, &m.model);
        }
    }
    page.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let m = Metrics::new("mlp", &[1, 4]);
        for rows in [1.0, 3.0, 4.0, 9.0] {
            m.batch_rows.observe(rows);
        }
        m.count(Outcome::Done, 3);
        m.count(Outcome::Expired, 1);
        let text = render(&[&m]);
        for line in [
            "pjrt_batcher_batch_size_bucket{model=\"mlp\",le=\"1\"} 1",
            "pjrt_batcher_batch_size_bucket{model=\"mlp\",le=\"4\"} 3",
            "pjrt_batcher_batch_size_bucket{model=\"mlp\",le=\"+Inf\"} 4",
            "pjrt_batcher_batch_size_sum{model=\"mlp\"} 17",
            "pjrt_batcher_batch_size_count{model=\"mlp\"} 4",
            "pjrt_batcher_requests_total{model=\"mlp\",outcome=\"done\"} 3",
            "pjrt_batcher_requests_total{model=\"mlp\",outcome=\"expired\"} 1",
            "# TYPE pjrt_batcher_queue_depth gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in:\n{text}"
            );
        }
    }

    #[test]
    fn a_model_name_is_escaped_in_labels() {
        let m = Metrics::new("a\"b", &[1]);
        assert!(render(&[&m]).contains("model=\"a\\\"b\""));
    }
}
