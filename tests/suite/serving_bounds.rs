//! The batcher under values and programs that once hung or aborted it (issue 22, B5 and B9):
//! sizes past what can be allocated, durations past what an `Instant` holds, and a program
//! that never ends, which `shutdown` must outlast within its grace.

use std::time::{Duration, Instant};

use pjrt_actors::serving::{Batcher, BatcherConfig, InferRequest, ShutdownMode};
use pjrt_actors::{Client, Error};

use crate::common::within;
use crate::serving::{affine_model, config, infer_until_stopped, request_of, values_of};

#[test]
fn sizes_that_cannot_be_served_are_refused_at_start_and_say_the_limit() {
    let client = Client::open().unwrap();
    let cases: [(&str, BatcherConfig, &str); 4] = [
        // Above 2^63 the default sizes' shift wrapped and never ended (release builds).
        (
            "2^63 + 1 rows",
            config((1usize << 63) + 1, Duration::from_millis(1)),
            "rows a padded batch may have",
        ),
        (
            "2^40 rows",
            config(1 << 40, Duration::from_millis(1)),
            "rows a padded batch may have",
        ),
        (
            "an allowed size of 2^40 rows",
            BatcherConfig {
                allowed_batch_sizes: vec![1, 1 << 40],
                ..config(8, Duration::from_millis(1))
            },
            "batch size 1099511627776",
        ),
        // 2^30 rows of 3 f32s in and out: 24 GiB, past half of any machine this runs on.
        (
            "2^30 rows",
            config(1 << 30, Duration::from_millis(1)),
            "half this machine's memory",
        ),
    ];
    for (what, cfg, words) in cases {
        let start = Instant::now();
        let err = within(Duration::from_secs(60), move || {
            let client = Client::open().unwrap();
            Batcher::start(&client, affine_model("affine", None), cfg)
                .map(|_| ())
                .unwrap_err()
        });
        assert!(matches!(err, Error::InvalidArgument(_)), "{what}: {err:?}");
        assert!(err.to_string().contains(words), "{what}: {err}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: {:?}",
            start.elapsed()
        );
    }
    // The client serves on.
    let batcher = Batcher::start(
        &client,
        affine_model("affine", None),
        config(8, Duration::from_millis(1)),
    )
    .unwrap();
    let (x, want) = request_of(1, 2);
    assert_eq!(
        values_of(&batcher.infer(InferRequest::new(vec![x])).unwrap().outputs[0]),
        want
    );
}

#[test]
fn durations_past_an_instant_saturate_instead_of_panicking() {
    let client = Client::open().unwrap();
    // max_delay: Duration::MAX panicked the batcher thread on the first request.
    let batcher = Batcher::start(
        &client,
        affine_model("affine", None),
        config(2, Duration::MAX),
    )
    .unwrap();
    within(Duration::from_secs(20), move || {
        // Two rows fill the batch, so it goes at once although its delay never falls due.
        let (x, want) = request_of(2, 2);
        // timeout(Duration::MAX) panicked in the caller; it is no deadline.
        let answer = batcher
            .infer(InferRequest::new(vec![x]).timeout(Duration::MAX))
            .unwrap();
        assert_eq!(values_of(&answer.outputs[0]), want);
        // One row waits for a second; draining at shutdown sends it.
        let (x, want) = request_of(3, 1);
        let pending = batcher.infer_async(InferRequest::new(vec![x]));
        std::thread::sleep(Duration::from_millis(50));
        batcher.shutdown(ShutdownMode::Drain);
        let answer = pjrt_actors::wait(pending).unwrap();
        assert_eq!(values_of(&answer.outputs[0]), want);
        assert_eq!(batcher.counts().done, 2);
    });
}

/// A model whose program calls a host callback that never returns (for this test: 60 s) when
/// any input is below -1000, as `?gesvd` on an infinity once did.
fn stuck_model() -> pjrt_actors::serving::BatchModel {
    let stall = crate::serving::input_guard("stall", |_| {
        std::thread::sleep(Duration::from_secs(60));
        Ok(())
    });
    affine_model("stuck", Some(stall))
}

#[test]
fn a_program_that_never_ends_cannot_hang_shutdown() {
    for mode in [ShutdownMode::Fail, ShutdownMode::Drain] {
        let client = Client::open().unwrap();
        let grace = Duration::from_secs(1);
        let cfg = BatcherConfig {
            devices: Some(vec![client.devices()[0].id()]),
            shutdown_grace: grace,
            ..config(1, Duration::from_millis(1))
        };
        let batcher = Batcher::start(&client, stuck_model(), cfg).unwrap();
        let stuck = batcher.infer_async(InferRequest::new(vec![crate::serving::f32s(
            &[-5000.0, 0.0, 0.0],
            1,
        )]));
        std::thread::sleep(Duration::from_millis(200));
        // Queued behind the stuck batch on the one device.
        let behind = batcher.infer_async(InferRequest::new(vec![request_of(4, 1).0]));
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        let behind = within(Duration::from_secs(20), move || {
            batcher.shutdown(mode);
            pjrt_actors::wait(behind)
        });
        let took = start.elapsed();
        assert!(
            took >= grace.mul_f64(0.9) && took < grace * 5,
            "{mode:?}: shutdown took {took:?}"
        );
        let err = behind.unwrap_err();
        assert!(matches!(err, Error::Stopped { .. }), "{mode:?}: {err}");
        drop(stuck);
    }
}

/// A request whose caller saw the batcher accepting, then lost the CPU while `shutdown` ran,
/// reached the actor after it had gone and was dropped unanswered (a clean clone's CI run).
/// Many rounds of callers racing an immediate shutdown: each is answered or refused `Stopped`.
#[test]
fn a_request_racing_shutdown_is_answered_or_refused_never_dropped() {
    let client = Client::open().unwrap();
    for round in 0..400 {
        let mode = [ShutdownMode::Drain, ShutdownMode::Fail][round % 2];
        let batcher = Batcher::start(
            &client,
            affine_model("affine", None),
            config(4, Duration::from_micros(100)),
        )
        .unwrap();
        within(Duration::from_secs(30), {
            let batcher = batcher.clone();
            move || {
                std::thread::scope(|s| {
                    for t in 0..6u32 {
                        let batcher = &batcher;
                        s.spawn(move || {
                            infer_until_stopped(batcher, t, &format!("round {round} ({mode:?})"))
                        });
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    batcher.shutdown(mode);
                });
            }
        });
        assert_eq!(batcher.queue_depth(), 0, "round {round} ({mode:?})");
    }
}
