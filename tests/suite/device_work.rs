//! A device actor owns the statistics of the async work it serves: the executes and reads
//! sent to its device are counted there, with the time they took and waited, and no other
//! device's counts move.

use pjrt_actors::{Client, CompileOptions, serving::wait};

#[test]
fn each_device_actor_counts_the_async_work_it_served() {
    let client = Client::open().unwrap();
    let devices = client.devices();
    let (program, dims) = crate::common::distinct_module(3, 1);
    let options = CompileOptions {
        devices: Some(vec![devices[0].id()]),
        ..Default::default()
    };
    let exe = client.compile_and_load(&program, &options).unwrap();
    let n: i64 = dims.iter().product();
    let a = devices[0].put(&vec![1f32; n as usize], &dims).unwrap();
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
