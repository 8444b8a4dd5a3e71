//! A device actor owns the statistics of the async work it serves: the executes and reads
//! sent to its device are counted there, with the time they took and waited, and no other
//! device's counts move.

use std::time::{Duration, Instant};

use pjrt_actors::{Array, Client, CompileOptions, LoadedExecutable, wait};

/// A client, a distinct two-argument program `seed` compiled for its device 0, and an argument
/// of ones there.
fn on_device_0(seed: usize) -> (Client, LoadedExecutable, Array) {
    let client = Client::open().unwrap();
    let device = client.devices()[0].clone();
    let (program, dims) = crate::common::distinct_module(seed, 1);
    let options = CompileOptions {
        devices: Some(vec![device.id()]),
        ..Default::default()
    };
    let exe = client.compile_and_load(&program, &options).unwrap();
    let n: i64 = dims.iter().product();
    let a = device.put(&vec![1f32; n as usize], &dims).unwrap();
    (client, exe, a)
}

#[test]
fn each_device_actor_counts_the_async_work_it_served() {
    let (client, exe, a) = on_device_0(3);
    let devices = client.devices();
    let before = (
        devices[0].work_stats().unwrap(),
        devices[1].work_stats().unwrap(),
    );
    let runs: Vec<_> = (0..10).map(|_| exe.execute_async(&[&a, &a])).collect();
    let outputs: Vec<_> = runs.into_iter().map(|r| wait(r).unwrap()).collect();
    // An async read served by the same actor; a blocking execute, which is not.
    let read = wait(outputs[0][0].to_bytes_async()).unwrap();
    assert_eq!(
        f32::from_le_bytes(read[..4].try_into().unwrap()),
        3.0,
        "(1 + 1) * 1 + 1"
    );
    exe.execute(&[&a, &a]).unwrap();
    let (after, other) = (
        devices[0].work_stats().unwrap(),
        devices[1].work_stats().unwrap(),
    );
    assert_eq!(after.executes - before.0.executes, 10, "{after:?}");
    assert_eq!(after.failed, before.0.failed, "{after:?}");
    assert_eq!(after.reads - before.0.reads, 1, "{after:?}");
    assert!(after.busy > before.0.busy && after.max_queue_wait >= before.0.max_queue_wait);
    assert!(after.queue_wait >= after.max_queue_wait);
    assert_eq!(other, before.1, "device 1 served nothing");
}

/// An async execute is sent to its device when it is called, as JAX dispatches at the call:
/// the future only waits for the answer. (Sent at the first poll instead, runs a caller keeps as
/// futures went out one at a time, as it awaited each.)
#[test]
fn an_async_execute_runs_before_its_future_is_polled() {
    let (client, exe, a) = on_device_0(4);
    let device = &client.devices()[0];
    let before = device.work_stats().unwrap().executes;
    let runs: Vec<_> = (0..4).map(|_| exe.execute_async(&[&a, &a])).collect();
    // Nothing polls the runs; their device's actor serves them all the same.
    let deadline = Instant::now() + Duration::from_secs(60);
    while device.work_stats().unwrap().executes - before < 4 {
        assert!(Instant::now() < deadline, "the runs were never sent");
        std::thread::sleep(Duration::from_millis(5));
    }
    for run in runs {
        let out = wait(run).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap()[0], 3.0, "(1 + 1) * 1 + 1");
    }
}

/// The value of the one sample of `metric` whose labels contain `labels`.
fn sample(text: &str, metric: &str, labels: &str) -> f64 {
    let found: Vec<f64> = (text.lines())
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(labels))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels} in\n{text}");
    found[0]
}

#[test]
fn the_client_metrics_are_what_its_device_and_memory_actors_own() {
    let (client, exe, a) = on_device_0(4);
    let devices = client.devices();
    let n = a.element_count() as u64;
    let runs: Vec<_> = (0..3).map(|_| exe.execute_async(&[&a, &a])).collect();
    let outputs: Vec<_> = runs.into_iter().map(|r| wait(r).unwrap()).collect();
    let memory = devices[0].default_memory_space().unwrap();
    memory.set_budget(Some(1 << 20)).unwrap();
    let text = client.metrics().unwrap();
    let device = format!("device=\"{}\"", devices[0].id());
    let stats = devices[0].work_stats().unwrap();
    assert_eq!(sample(&text, "pjrt_device_executes_total", &device), 3.0);
    assert_eq!(stats.executes, 3);
    assert_eq!(sample(&text, "pjrt_device_failed_total", &device), 0.0);
    assert!(sample(&text, "pjrt_device_busy_seconds_total", &device) > 0.0);
    assert_eq!(sample(&text, "pjrt_device_in_flight", &device), 0.0);
    let other = format!("device=\"{}\"", devices[1].id());
    assert_eq!(sample(&text, "pjrt_device_executes_total", &other), 0.0);
    let labels = format!("memory=\"{}\"", memory.id());
    let held = sample(&text, "pjrt_memory_bytes_held", &labels);
    assert_eq!(held as u64, memory.bytes_held());
    assert_eq!(held as u64, 4 * 4 * n, "the argument and three outputs");
    assert_eq!(
        sample(&text, "pjrt_memory_budget_bytes", &labels),
        (1 << 20) as f64
    );
    assert!(text.contains("# TYPE pjrt_device_executes_total counter"));
    // The compile cache's counters, as compile_cache_stats gives them.
    let cache = client.compile_cache_stats();
    assert!(cache.compiles >= 1, "{cache:?}");
    let event = |e: &str| {
        sample(
            &text,
            "pjrt_compile_cache_events_total",
            &format!("event=\"{e}\""),
        )
    };
    assert_eq!(event("compiles"), cache.compiles as f64);
    assert_eq!(event("memory_hits"), cache.memory_hits as f64);
    assert_eq!(event("redis_hits"), 0.0);
    drop(outputs);
}
