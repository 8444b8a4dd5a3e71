//! The server's request metrics: every answered inference request, refused ones included
//! (while parsing, past the time limit), counted and timed by model, protocol and outcome,
//! written as Prometheus text with every label value escaped.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use pjrt_actors::prometheus::{Exposition, Kind};
use pjrt_actors::serving::Timed;

/// Upper bounds (seconds) of the request latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Latencies {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Counts and latencies by (model, protocol, outcome). A mutex: each answer takes it once
/// for a few additions, and a scrape once; no lock is held across an await.
#[derive(Default)]
pub struct RequestMetrics {
    by_key: Mutex<BTreeMap<(String, &'static str, &'static str), Latencies>>,
}

impl RequestMetrics {
    /// One answered request. `model` is a served model's name or the one label unknown
    /// names share (`ServerState::label`).
    pub fn record(
        &self,
        model: String,
        protocol: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        let l = by_key.entry((model, protocol, outcome)).or_default();
        let s = took.as_secs_f64();
        l.count += 1;
        l.sum += s;
        if let Some(b) = BUCKETS.iter().position(|&b| s <= b) {
            l.buckets[b] += 1;
        }
    }

    /// A model's requests that were answered `ok` and those that were not, over both
    /// protocols: how many, and how long they took in all (Triton's success and fail).
    pub fn outcomes(&self, model: &str) -> (Timed, Timed) {
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        let (mut ok, mut failed) = (Timed::default(), Timed::default());
        for ((m, _, outcome), l) in by_key.iter() {
            if m == model {
                let t = if *outcome == "ok" {
                    &mut ok
                } else {
                    &mut failed
                };
                t.count += l.count;
                t.total += Duration::from_secs_f64(l.sum);
            }
        }
        (ok, failed)
    }

    /// The Prometheus text of the counts, then the latency histograms.
    pub fn render(&self, page: &mut Exposition) {
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        fn labels<'a>(key: &'a (String, &'static str, &'static str)) -> [(&'a str, &'a str); 3] {
            let (model, protocol, outcome) = key;
            [
                ("model", model),
                ("protocol", protocol),
                ("outcome", outcome),
            ]
        }
        page.family(
            "pjrt_actors_server_requests_total",
            Kind::Counter,
            "Inference requests by model, protocol and outcome.",
        );
        for (key, l) in by_key.iter() {
            page.sample("pjrt_actors_server_requests_total", &labels(key), l.count);
        }
        page.family(
            "pjrt_actors_server_request_seconds",
            Kind::Histogram,
            "Inference request latency, arrival to answer.",
        );
        for (key, l) in by_key.iter() {
            page.histogram(
                "pjrt_actors_server_request_seconds",
                &labels(key),
                &BUCKETS,
                l.buckets,
                l.count,
                l.sum,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_is_counted_and_names_are_escaped() {
        let m = RequestMetrics::default();
        m.record("a\"b".into(), "http", "ok", Duration::from_millis(2));
        m.record("a\"b".into(), "http", "ok", Duration::from_secs(9));
        m.record("(unknown)".into(), "grpc", "not_found", Duration::ZERO);
        let mut page = Exposition::new();
        m.render(&mut page);
        let text = page.finish();
        for want in [
            "pjrt_actors_server_requests_total{model=\"a\\\"b\",protocol=\"http\",outcome=\"ok\"} 2",
            "pjrt_actors_server_requests_total{model=\"(unknown)\",protocol=\"grpc\",outcome=\"not_found\"} 1",
            "pjrt_actors_server_request_seconds_bucket{model=\"a\\\"b\",protocol=\"http\",outcome=\"ok\",le=\"0.0025\"} 1",
            "pjrt_actors_server_request_seconds_bucket{model=\"a\\\"b\",protocol=\"http\",outcome=\"ok\",le=\"+Inf\"} 2",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }
}
