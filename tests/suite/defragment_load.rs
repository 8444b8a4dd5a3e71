//! The registry actor runs on a thread of its own: a defragment of 10,000 arrays does not
//! stall the actors on the system thread, so a compile and an upload through the memory space's
//! actor started while it runs finish before it does.

use std::time::{Duration, Instant};

use pjrt_actors::{Client, CompileOptions, HostBuffer};
use pjrt_actors_core::client::runtime::block_on;

#[test]
fn a_compile_and_an_upload_finish_while_a_defragment_of_10000_arrays_runs() {
    let client = Client::open().unwrap();
    let device = client.devices()[0].clone();
    // 10,000 arrays of 32 KiB: 320 MiB to copy out and back in.
    let bytes = vec![7u8; 32 << 10];
    let arrays: Vec<_> = (0..10_000)
        .map(|_| {
            client
                .buffer_from_host(
                    HostBuffer::Copy(&bytes),
                    pjrt_actors::ElementType::U8,
                    &[32 << 10],
                    &device,
                    None,
                )
                .unwrap()
        })
        .collect();
    arrays.last().unwrap().block_until_ready().unwrap();
    let (program, _) = crate::common::distinct_module(977, 3);
    let started = Instant::now();
    let (defragmented, compiled, uploaded) = std::thread::scope(|s| {
        let defragment = s.spawn(|| {
            let report = client.defragment().unwrap();
            (report, started.elapsed())
        });
        // Once the defragment is under way (it holds every buffer for its whole pass).
        std::thread::sleep(Duration::from_millis(30));
        let compile = s.spawn(|| {
            client
                .compile_and_load(&program, &CompileOptions::default())
                .unwrap();
            started.elapsed()
        });
        // The async form: served by the memory space's actor, as the blocking form is not.
        let upload = s.spawn(|| {
            let a = block_on(client.buffer_from_host_async(
                HostBuffer::Copy(&[1, 2, 3, 4]),
                pjrt_actors::ElementType::U8,
                &[4],
                &device,
                None,
            ))
            .unwrap()
            .unwrap();
            assert_eq!(a.to_vec::<u8>().unwrap(), [1, 2, 3, 4]);
            started.elapsed()
        });
        (
            defragment.join().unwrap(),
            compile.join().unwrap(),
            upload.join().unwrap(),
        )
    });
    let (report, defragment_took) = defragmented;
    assert_eq!(report.moved, 10_000, "{report:?}");
    assert!(
        compiled < defragment_took && uploaded < defragment_took,
        "compile done at {compiled:?}, upload at {uploaded:?}, defragment at {defragment_took:?}"
    );
    // The arrays kept their contents through the move.
    assert_eq!(arrays[4321].to_vec::<u8>().unwrap(), bytes);
}
