//! Dropping the last handle stops every actor and joins every thread the client started; alone
//! in its binary so the thread count is this test's own.

#[path = "suite/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{eventually, within};
use pjrt_actors::{Client, CompileOptions};

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
