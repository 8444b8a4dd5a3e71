//! Dropping the last handle stops every actor and joins every thread the client started, also
//! when that last handle goes on one of the client's own threads; alone in its binary so the
//! thread count is this test's own.

#[path = "suite/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use common::{eventually, within};
use pjrt_actors::{ArrayType, CallbackKind, Client, CompileOptions, ElementType, HostCallback};

/// This process's threads, by thread id, with their names.
fn threads() -> BTreeMap<u64, String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((tid, name.trim().to_string()))
        })
        .collect()
}

/// Threads alive now that were not alive in `before`.
fn new_since(before: &BTreeMap<u64, String>) -> Vec<String> {
    threads()
        .into_iter()
        .filter(|(tid, _)| !before.contains_key(tid))
        .map(|(tid, name)| format!("{tid}:{name}"))
        .collect()
}

fn one_client_lifetime(round: usize) {
    let client = Client::builder()
        .cpu_device_count(4)
        .compile_threads(2)
        .open()
        .unwrap();
    let ours = threads()
        .values()
        .filter(|n| n.starts_with("pjrt-actors") || n.starts_with("actix-rt|"))
        .count();
    // The system thread, one arbiter per device, two compilers.
    assert!(
        ours >= 7,
        "round {round}: actors not started: {:?}",
        threads()
    );
    let exe = client
        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
        .unwrap();
    let device = client.devices()[0].clone();
    let space = device.default_memory_space().unwrap();
    let array = device.put(&[1f32; 4], &[4]).unwrap();
    drop(client);
    // Other handles keep the actors alive and working.
    assert_eq!(device.memory_stats().unwrap(), None);
    assert_eq!(space.describe().unwrap().1, vec![0]);
    assert_eq!(
        exe.execute(&[&array, &array]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![2.; 4]
    );
}

#[test]
fn dropping_the_last_handle_joins_every_thread() {
    within(Duration::from_secs(120), move || {
        // The plugin starts process-wide threads of its own the first time it compiles (they
        // inherit the compiling thread's name); let that happen before the baseline.
        one_client_lifetime(0);
        let before = threads();
        for round in 1..=5 {
            one_client_lifetime(round);
            // Joined threads are gone the moment the drop returns.
            let joined: Vec<String> = new_since(&before)
                .into_iter()
                .filter(|t| t.contains(":actix-rt|") || t.contains(":pjrt-actors-sys"))
                .collect();
            assert!(joined.is_empty(), "round {round}: not joined: {joined:?}");
            // System and arbiter threads are joined and compile workers waited for by the
            // drop itself; only the plugin's own per-client threads may take a moment.
            assert!(
                eventually(Duration::from_secs(5), || new_since(&before).is_empty()),
                "round {round}: threads left behind: {:?}",
                new_since(&before)
            );
        }
    });
}

/// A pure f32[4] callback that sleeps before doubling, so an execution is still running on a
/// device actor's thread when the caller lets go of everything.
fn slow_double() -> HostCallback {
    let f32x4 = || ArrayType {
        dtype: ElementType::F32,
        dims: vec![4],
    };
    HostCallback::new(
        "slow_double",
        CallbackKind::Pure,
        vec![f32x4()],
        vec![f32x4()],
        |ins, outs| {
            std::thread::sleep(Duration::from_millis(300));
            let x = ins[0].as_slice::<f32>().ok_or("not f32")?;
            let y = outs[0].as_mut_slice::<f32>().ok_or("not f32")?;
            for (o, i) in y.iter_mut().zip(x) {
                *o = 2.0 * i;
            }
            Ok(())
        },
    )
    .unwrap()
}

#[test]
fn the_last_handle_dropped_on_an_actor_thread_still_ends_every_thread() {
    within(Duration::from_secs(120), move || {
        one_client_lifetime(0);
        let before = threads();
        let client = Client::open().unwrap();
        let cb = slow_double();
        let program = format!(
            "module @slow {{\n  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{\n    {}\n    return %r : tensor<4xf32>\n  }}\n}}\n",
            cb.call_text("%r", &["%x"])
        );
        let exe = client
            .compile_request(program)
            .callbacks(&[cb])
            .load()
            .unwrap();
        let a = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
        // Poll the async execute once, so its request is on its way to the device actor, then
        // drop the future and every handle: the request in flight holds the last reference,
        // and lets it go on the device actor's own thread once the execution ends.
        let mut run = Box::pin(exe.execute_async(&[&a]));
        let waker = std::task::Waker::noop();
        let pending = run
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_pending();
        assert!(pending, "a 300 ms callback cannot have finished yet");
        drop((run, exe, a, client));
        assert!(
            eventually(Duration::from_secs(10), || new_since(&before).is_empty()),
            "threads left behind: {:?}",
            new_since(&before)
        );
    });
}
