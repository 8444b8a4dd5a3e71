//! The client's own metrics in the Prometheus text format: what each device actor served and
//! holds in flight, what each memory space's account holds against its budget, and the compile
//! cache's counters (a served fleet's compiles and Redis hits are read from them).

use std::future::Future;

use crate::DeviceWorkStats;
use pjrt_actors_core::Result;

use crate::handles::{Client, wait};
use crate::prometheus::{Exposition, Kind};

impl Client {
    /// The client's metrics, in the Prometheus text exposition format: per addressable device
    /// (label `device`, its id), the async executes its actor ran and failed, its reads, busy
    /// and queue-wait seconds, its longest queue wait and the runs in flight; per memory space
    /// (labels `memory` and `kind`), the bytes our arrays hold and its budget where one is set;
    /// the compile cache's counters (`pjrt_compile_cache_events_total`, label `event`: those of
    /// [`CompileCacheStats`](crate::CompileCacheStats)). `pjrt-actors serve` adds them to its
    /// `/metrics`.
    pub fn metrics(&self) -> Result<String> {
        wait(self.metrics_async())
    }

    /// The async form of [`metrics`](Self::metrics): each device actor is asked for its
    /// statistics.
    pub fn metrics_async(&self) -> impl Future<Output = Result<String>> + use<> {
        let devices = self.local_devices();
        let asked: Vec<_> = devices.iter().map(|d| d.work_stats_async()).collect();
        let client = self.clone();
        async move {
            let mut stats = Vec::with_capacity(asked.len());
            for (device, ask) in devices.iter().zip(asked) {
                stats.push((device.id(), ask.await?));
            }
            Ok(render(&client, &stats))
        }
    }
}

/// Each device metric: name, type, help, and its value from a device's statistics.
type DeviceMetric = (
    &'static str,
    Kind,
    &'static str,
    fn(&DeviceWorkStats) -> f64,
);

const DEVICE_METRICS: [DeviceMetric; 9] = [
    (
        "pjrt_device_executes_total",
        Kind::Counter,
        "Async executes the device's actor ran.",
        |s| s.executes as f64,
    ),
    (
        "pjrt_device_failed_total",
        Kind::Counter,
        "Of those, the ones that failed.",
        |s| s.failed as f64,
    ),
    (
        "pjrt_device_reads_total",
        Kind::Counter,
        "Async reads to the host.",
        |s| s.reads as f64,
    ),
    (
        "pjrt_device_busy_seconds_total",
        Kind::Counter,
        "Time the actor spent serving them.",
        |s| s.busy.as_secs_f64(),
    ),
    (
        "pjrt_device_queue_wait_seconds_total",
        Kind::Counter,
        "Time executes waited in the mailbox.",
        |s| s.queue_wait.as_secs_f64(),
    ),
    (
        "pjrt_device_max_queue_wait_seconds",
        Kind::Gauge,
        "The longest such wait.",
        |s| s.max_queue_wait.as_secs_f64(),
    ),
    (
        "pjrt_device_in_flight",
        Kind::Gauge,
        "Async executes sent and not yet computed.",
        |s| s.in_flight as f64,
    ),
    (
        "pjrt_device_frees_deferred_total",
        Kind::Counter,
        "Deleted arrays whose buffer was in use, freed by the device's actor later.",
        |s| s.frees_deferred as f64,
    ),
    (
        "pjrt_device_pending_frees",
        Kind::Gauge,
        "Of those, the ones still in use.",
        |s| s.pending_frees as f64,
    ),
];

fn render(client: &Client, stats: &[(i32, DeviceWorkStats)]) -> String {
    let mut page = Exposition::new();
    for (name, kind, help, value) in DEVICE_METRICS {
        page.family(name, kind, help);
        for (id, s) in stats {
            page.sample(name, &[("device", &id.to_string())], value(s));
        }
    }
    let mut memories: Vec<_> = (client.local_devices().iter())
        .flat_map(|d| d.memory_spaces())
        .collect();
    memories.sort_by_key(|m| m.id());
    memories.dedup();
    let labels = |m: &crate::MemorySpace| [m.id().to_string(), m.kind().to_string()];
    page.family(
        "pjrt_memory_bytes_held",
        Kind::Gauge,
        "Bytes this client's arrays hold in the memory space.",
    );
    for m in &memories {
        let [id, kind] = labels(m);
        page.sample(
            "pjrt_memory_bytes_held",
            &[("memory", &id), ("kind", &kind)],
            m.bytes_held(),
        );
    }
    page.family(
        "pjrt_memory_budget_bytes",
        Kind::Gauge,
        "The budget set on the memory space.",
    );
    for m in &memories {
        if let Some(budget) = m.budget() {
            let [id, kind] = labels(m);
            page.sample(
                "pjrt_memory_budget_bytes",
                &[("memory", &id), ("kind", &kind)],
                budget,
            );
        }
    }
    let c = client.compile_cache_stats();
    let events = [
        ("compiles", c.compiles),
        ("memory_hits", c.memory_hits),
        ("disk_hits", c.disk_hits),
        ("joined", c.joined),
        ("corrupt_entries", c.corrupt_entries),
        ("unsigned_entries", c.unsigned_entries),
        ("redis_hits", c.redis_hits),
        ("redis_misses", c.redis_misses),
        ("redis_errors", c.redis_errors),
        ("redis_lease_waits", c.redis_lease_waits),
        ("redis_takeovers", c.redis_takeovers),
        ("redis_wakeups", c.redis_wakeups),
        ("redis_stores", c.redis_stores),
    ];
    let name = "pjrt_compile_cache_events_total";
    page.family(
        name,
        Kind::Counter,
        "The compile cache's counters, by event.",
    );
    for (event, n) in events {
        page.sample(name, &[("event", event)], n as f64);
    }
    page.finish()
}
