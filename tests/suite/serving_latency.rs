//! The batcher's latency policy: an idle batcher runs a request at once (waiting for company
//! would only add latency), and batches form from what queues while other batches run.

use std::time::{Duration, Instant};

use pjrt_actors::Client;
use pjrt_actors::serving::{Batcher, BatcherConfig, InferRequest};

use crate::serving::{affine_model, request_of, values_of};

#[test]
fn an_idle_batcher_runs_a_request_at_once_and_batches_only_while_others_run() {
    let client = Client::open().unwrap();
    let cfg = BatcherConfig {
        max_batch_size: 64,
        max_delay: Duration::from_secs(10),
        devices: Some(vec![client.devices()[0].id()]),
        ..Default::default()
    };
    let batcher = Batcher::start(&client, affine_model("affine", None), cfg).unwrap();
    // Alone: it runs at once, not after the 10 s max_delay.
    let start = Instant::now();
    let (x, want) = request_of(1, 1);
    let answer = batcher.infer(InferRequest::new(vec![x])).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(values_of(&answer.outputs[0]), want);
    // A burst from threads on one device: later requests queue while a batch runs, so
    // batches form and every caller is answered well before the 10 s delay.
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..8 {
            let batcher = batcher.clone();
            s.spawn(move || {
                for i in 0..20 {
                    let (x, want) = request_of(t * 100 + i, 1);
                    let got = batcher.infer(InferRequest::new(vec![x])).unwrap();
                    assert_eq!(values_of(&got.outputs[0]), want);
                }
            });
        }
    });
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    let counts = batcher.counts();
    assert_eq!(counts.done, 161);
    assert!(
        counts.batches < 161,
        "some requests shared a batch: {counts:?}"
    );
}
