//! Actor threads look for their next message for a moment before they park (a round trip
//! without a wake-up), and then sleep: a client nobody uses costs no CPU to speak of. Alone in
//! its binary, since it reads the CPU time of every thread of the process.

#[path = "suite/common/mod.rs"]
mod common;

use std::time::Duration;

use pjrt_actors::{Client, CompileOptions, wait};

/// This process's CPU time in ms: the binary holds this one test, so it is the test's own.
fn process_cpu_ms() -> f64 {
    common::cpu::process_cpu_ns() as f64 / 1e6
}

/// A look that never ended would cost a core a thread; `cargo bench --bench execute` measures
/// what an idle client costs (`idle_cpu_ms_per_10s`: well under 1 ms).
#[test]
fn an_idle_clients_actor_threads_sleep() {
    let client = Client::open().unwrap();
    let device = client.devices()[0].clone();
    let options = CompileOptions {
        devices: Some(vec![device.id()]),
        ..Default::default()
    };
    let exe = client
        .compile_and_load(common::add_f32x4(), &options)
        .unwrap();
    let a = device.put(&[1f32; 4], &[4]).unwrap();
    // Work through the device, client and memory-space actors, so each thread has looked.
    for _ in 0..100 {
        let out = wait(exe.execute_async(&[&a, &a])).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0; 4]);
        device.memory_stats().unwrap();
        wait(client.buffer_from_host_async(
            pjrt_actors::HostBuffer::Copy(&[0; 16]),
            pjrt_actors::ElementType::F32,
            &[4],
            &device,
            None,
        ))
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = process_cpu_ms();
    std::thread::sleep(Duration::from_secs(2));
    let used = process_cpu_ms() - before;
    assert!(
        used < 100.0,
        "an idle client used {used:.1} ms of CPU in 2 s"
    );
}
