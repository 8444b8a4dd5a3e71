//! Actor threads look for their next message for a moment before they park (a round trip
//! without a wake-up), and then sleep: a client nobody uses costs no CPU to speak of, and round
//! trips in a row find the thread still looking (none do with the look turned off). Alone in
//! its binary, since it reads the CPU time and the spin counts of the whole process.

#[path = "suite/common/mod.rs"]
mod common;

use std::time::Duration;

use pjrt_actors::{Array, Client, CompileOptions, Device, LoadedExecutable, wait};

/// This process's CPU time in ms: the binary holds this one test, so it is the test's own.
fn process_cpu_ms() -> f64 {
    common::cpu::process_cpu_ns() as f64 / 1e6
}

/// A client, its first device, `a + b` compiled for it, and an array of ones there.
fn adding_on_the_first_device() -> (Client, Device, LoadedExecutable, Array) {
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
    (client, device, exe, a)
}

/// A look that never ended would cost a core a thread; `cargo bench --bench execute` measures
/// what an idle client costs (`idle_cpu_ms_per_10s`: well under 1 ms).
#[test]
fn an_idle_clients_actor_threads_sleep() {
    let (client, device, exe, a) = adding_on_the_first_device();
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

/// Round trips one after another find the device actor's thread still looking for its next
/// message (a round trip served without a wake-up): counted by the runtime, and none at all in
/// a process with the look turned off (`PJRT_ACTORS_ACTOR_SPIN_US=0`, this test run again in a
/// child), so the look is what serves them. (The test above passes with the look off too: it
/// checks only that the look ends.)
#[test]
fn round_trips_in_a_row_find_the_actor_thread_still_looking() {
    let (_client, device, exe, a) = adding_on_the_first_device();
    let before = pjrt_actors_core::client::runtime::spin_hits();
    for _ in 0..2000 {
        device.memory_stats().unwrap();
        let out = exe.execute(&[&a, &a]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0; 4]);
    }
    let hits = pjrt_actors_core::client::runtime::spin_hits() - before;
    if std::env::var_os("IDLE_TEST_SPIN_OFF").is_some() {
        assert_eq!(
            hits, 0,
            "the look was off, yet {hits} round trips were served by it"
        );
        return;
    }
    eprintln!("spin hits: {hits} of 4000 round trips");
    assert!(
        hits > 0,
        "no round trip of 4000 found an actor thread still looking"
    );
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "round_trips_in_a_row_find_the_actor_thread_still_looking",
        ])
        .env(pjrt_actors_core::client::runtime::ACTOR_SPIN_ENV, "0")
        .env("IDLE_TEST_SPIN_OFF", "1")
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(String::from_utf8_lossy(&child.stdout).contains("1 passed"));
}
