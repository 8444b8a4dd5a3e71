//! The dynamic batcher against the real CPU plugin: the right rows back to the right callers
//! under load from threads and from async tasks, deadlines, `Busy`, cancellation, a failing
//! batch, bad requests, shutdown under load, and the Prometheus metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pjrt_actors::host_data::HostArray;
use pjrt_actors::serving::{
    BatchModel, Batcher, BatcherConfig, InferRequest, ModelServer, Priority, ShutdownMode,
};
use pjrt_actors::{ArrayType, CallbackKind, Client, ElementType, Error, HostCallback, wait};

use crate::common::within;

/// y = 2x + b over rows of 3, b = [1, 2, 3]; with `guarded`, a host callback fails the whole
/// execution when any input is below -1000.
pub(crate) fn affine_template(guarded: Option<&HostCallback>) -> String {
    let t = "tensor<{batch}x3xf32>";
    let guard = match guarded {
        None => format!("    return %z : {t}"),
        Some(cb) => format!(
            "    %inf = stablehlo.constant dense<0x7F800000> : tensor<f32>\n    %m = stablehlo.reduce(%x init: %inf) applies stablehlo.minimum across dimensions = [0, 1] : ({t}, tensor<f32>) -> tensor<f32>\n    {}\n    %g0 = stablehlo.constant dense<0.0> : tensor<f32>\n    %gz = stablehlo.multiply %g, %g0 : tensor<f32>\n    %gb = stablehlo.broadcast_in_dim %gz, dims = [] : (tensor<f32>) -> {t}\n    %out = stablehlo.add %z, %gb : {t}\n    return %out : {t}",
            cb.call_text("%g", &["%m"])
        ),
    };
    format!(
        "module @affine {{\n  func.func public @main(%x: {t}, %b: tensor<3xf32>) -> {t} {{\n    %two = stablehlo.constant dense<2.0> : {t}\n    %y = stablehlo.multiply %x, %two : {t}\n    %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<3xf32>) -> {t}\n    %z = stablehlo.add %y, %bb : {t}\n{guard}\n  }}\n}}\n"
    )
}

pub(crate) fn f32s(values: &[f32], rows: usize) -> HostArray {
    HostArray {
        dtype: ElementType::F32,
        dims: vec![rows as i64, (values.len() / rows) as i64],
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub(crate) fn values_of(h: &HostArray) -> Vec<f32> {
    (h.bytes.chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

pub(crate) fn affine_model(name: &str, guard: Option<HostCallback>) -> BatchModel {
    let model = BatchModel::from_template(name, 1, affine_template(guard.as_ref()))
        .fixed_input(f32s(&[1.0, 2.0, 3.0], 1).reshaped(&[3]));
    match guard {
        Some(cb) => model.callbacks(vec![cb]),
        None => model,
    }
}

/// A host callback for `affine_template`'s guard: passes the input's minimum through, and
/// when it is below -1000 (a poisoned request) answers what `on_poison` says.
pub(crate) fn input_guard(
    name: &str,
    on_poison: impl Fn(f32) -> Result<(), String> + Send + Sync + 'static,
) -> HostCallback {
    let scalar = ArrayType {
        dtype: ElementType::F32,
        dims: vec![],
    };
    HostCallback::new(
        name,
        CallbackKind::Pure,
        vec![scalar.clone()],
        vec![scalar],
        move |ins, outs| {
            let m = ins[0].as_slice::<f32>().ok_or("f32")?[0];
            if m < -1000.0 {
                on_poison(m)?;
            }
            outs[0].as_mut_slice::<f32>().ok_or("f32")?[0] = m;
            Ok(())
        },
    )
    .unwrap()
}

trait Reshape {
    fn reshaped(self, dims: &[i64]) -> HostArray;
}

impl Reshape for HostArray {
    fn reshaped(mut self, dims: &[i64]) -> HostArray {
        self.dims = dims.to_vec();
        self
    }
}

/// The request a caller `id` sends: `rows` rows whose values encode the caller.
pub(crate) fn request_of(id: u32, rows: usize) -> (HostArray, Vec<f32>) {
    let x: Vec<f32> = (0..rows * 3).map(|i| id as f32 + i as f32 / 16.0).collect();
    let want: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, v)| 2.0 * v + (i % 3 + 1) as f32)
        .collect();
    (f32s(&x, rows), want)
}

/// A config whose `max_delay` always holds a batch back (`wait_when_idle`), so tests can keep
/// requests queued for as long as they need.
pub(crate) fn config(max_batch_size: usize, max_delay: Duration) -> BatcherConfig {
    BatcherConfig {
        max_batch_size,
        max_delay,
        wait_when_idle: true,
        ..Default::default()
    }
}

#[test]
fn every_caller_gets_its_own_rows_under_load_from_threads() {
    let client = Client::open().unwrap();
    let batcher = Batcher::start(
        &client,
        affine_model("affine", None),
        config(32, Duration::from_micros(300)),
    )
    .unwrap();
    within(Duration::from_secs(60), move || {
        std::thread::scope(|s| {
            for t in 0..16u32 {
                let batcher = &batcher;
                s.spawn(move || {
                    for i in 0..200u32 {
                        let id = t * 1000 + i;
                        let rows = 1 + (id as usize % 4);
                        let (x, want) = request_of(id, rows);
                        let answer = batcher.infer(InferRequest::new(vec![x])).unwrap();
                        assert_eq!(answer.outputs[0].dims, [rows as i64, 3]);
                        assert_eq!(values_of(&answer.outputs[0]), want, "caller {id}");
                        assert!(
                            answer.padded_rows >= answer.batch_rows && answer.batch_rows >= rows
                        );
                    }
                });
            }
        });
        let counts = batcher.counts();
        assert_eq!(counts.done, 3200);
        assert!(
            counts.batches < 3200 / 2,
            "requests were batched: {counts:?}"
        );
    });
}

#[test]
fn async_callers_are_served_and_dropping_a_future_cancels_its_request() {
    let client = Client::open().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    // Started from async code: the compiles and warm-up run on a thread of their own.
    let batcher = rt
        .block_on(Batcher::start_async(
            &client,
            affine_model("affine", None),
            config(64, Duration::from_micros(200)),
        ))
        .unwrap();
    let b = batcher.clone();
    rt.block_on(async move {
        let tasks: Vec<_> = (0..500u32)
            .map(|id| {
                let b = b.clone();
                tokio::spawn(async move {
                    let (x, want) = request_of(id, 2);
                    let answer = b.infer_async(InferRequest::new(vec![x])).await.unwrap();
                    assert_eq!(values_of(&answer.outputs[0]), want);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(batcher.counts().done, 500);

    // A request whose future is dropped before its batch forms is not run.
    let slow = Batcher::start(
        &client,
        affine_model("slow", None),
        config(64, Duration::from_secs(30)),
    )
    .unwrap();
    let (x, _) = request_of(1, 1);
    drop(slow.infer_async(InferRequest::new(vec![x])));
    assert_eq!(slow.queue_depth(), 1);
    slow.shutdown(ShutdownMode::Drain);
    let counts = slow.counts();
    assert_eq!(
        (counts.cancelled, counts.done, counts.batches),
        (1, 0, 0),
        "{counts:?}"
    );
}

#[test]
fn a_request_past_its_deadline_is_answered_at_its_deadline_and_never_run() {
    let client = Client::open().unwrap();
    // A batch would wait 10 s for company; the deadline is 50 ms.
    let batcher = Batcher::start(
        &client,
        affine_model("affine", None),
        config(64, Duration::from_secs(10)),
    )
    .unwrap();
    let (x, _) = request_of(1, 1);
    let start = Instant::now();
    let err = batcher
        .infer(InferRequest::new(vec![x.clone()]).timeout(Duration::from_millis(50)))
        .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    assert!(
        took >= Duration::from_millis(50) && took < Duration::from_secs(2),
        "answered after {took:?}"
    );
    // Already past: refused without queueing.
    let err = batcher
        .infer(InferRequest::new(vec![x]).deadline(Instant::now()))
        .unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    let counts = batcher.counts();
    assert_eq!(
        (counts.expired, counts.batches, counts.done),
        (2, 0, 0),
        "{counts:?}"
    );
}

#[test]
fn a_full_queue_answers_busy_at_once_and_shutdown_fails_what_is_queued() {
    let client = Client::open().unwrap();
    let cfg = BatcherConfig {
        max_queued: 2,
        ..config(64, Duration::from_secs(30))
    };
    let batcher = Batcher::start(&client, affine_model("affine", None), cfg).unwrap();
    let queued: Vec<_> = (0..2)
        .map(|i| batcher.infer_async(InferRequest::new(vec![request_of(i, 1).0])))
        .collect();
    let start = Instant::now();
    let err = batcher
        .infer(InferRequest::new(vec![request_of(9, 1).0]))
        .unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "Busy is at once"
    );
    within(Duration::from_secs(10), move || {
        batcher.shutdown(ShutdownMode::Fail);
        for answer in queued {
            let err = pjrt_actors::wait(answer).unwrap_err();
            assert!(matches!(err, Error::Stopped { .. }), "{err}");
        }
        let err = batcher
            .infer(InferRequest::new(vec![request_of(3, 1).0]))
            .unwrap_err();
        assert!(matches!(err, Error::Stopped { .. }), "{err}");
        let counts = batcher.counts();
        assert_eq!(
            (counts.busy, counts.failed, counts.batches),
            (1, 2, 0),
            "{counts:?}"
        );
    });
}

#[test]
fn a_failing_batch_fails_only_its_own_requests() {
    let client = Client::open().unwrap();
    let guard = input_guard("guard", |m| Err(format!("poisoned input ({m})")));
    // max_delay 0: each request is its own batch when it arrives alone.
    let batcher = Batcher::start(
        &client,
        affine_model("guarded", Some(guard)),
        config(8, Duration::ZERO),
    )
    .unwrap();
    let (good, want) = request_of(5, 2);
    assert_eq!(
        values_of(
            &batcher
                .infer(InferRequest::new(vec![good.clone()]))
                .unwrap()
                .outputs[0]
        ),
        want
    );
    let poisoned = f32s(&[-5000.0, 0.0, 0.0], 1);
    let err = batcher
        .infer(InferRequest::new(vec![poisoned]))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Callback { name, reason } if name == "guard" && reason.contains("poisoned")),
        "{err}"
    );
    assert_eq!(
        values_of(
            &batcher
                .infer(InferRequest::new(vec![good]))
                .unwrap()
                .outputs[0]
        ),
        want
    );
    let counts = batcher.counts();
    assert_eq!((counts.done, counts.failed), (2, 1), "{counts:?}");
}

#[test]
fn bad_requests_and_unknown_models_are_typed_errors_before_queueing() {
    let client = Client::open().unwrap();
    let batcher = Batcher::start(
        &client,
        affine_model("affine", None),
        config(8, Duration::from_micros(100)),
    )
    .unwrap();
    let f64s = HostArray {
        dtype: ElementType::F64,
        dims: vec![1, 3],
        bytes: vec![0; 24],
    };
    let cases: Vec<(&str, Vec<HostArray>)> = vec![
        ("wrong dtype", vec![f64s]),
        ("wrong trailing dims", vec![f32s(&[0.0; 4], 1)]),
        (
            "no rows",
            vec![HostArray {
                dtype: ElementType::F32,
                dims: vec![0, 3],
                bytes: vec![],
            }],
        ),
        ("more rows than a batch", vec![f32s(&[0.0; 27], 9)]),
        (
            "a scalar",
            vec![HostArray {
                dtype: ElementType::F32,
                dims: vec![],
                bytes: vec![0; 4],
            }],
        ),
        (
            "too many inputs",
            vec![f32s(&[0.0; 3], 1), f32s(&[0.0; 3], 1)],
        ),
        (
            "bytes that do not match the dims",
            vec![HostArray {
                dtype: ElementType::F32,
                dims: vec![1, 3],
                bytes: vec![0; 8],
            }],
        ),
    ];
    for (what, inputs) in cases {
        let err = batcher.infer(InferRequest::new(inputs)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{what}: {err}");
    }
    assert_eq!(batcher.counts().rejected, 7);
    assert_eq!(batcher.queue_depth(), 0);
    let server = ModelServer::new(vec![batcher]);
    let err = server
        .infer("nope", InferRequest::new(vec![request_of(1, 1).0]))
        .unwrap_err();
    let unknown = server.infer_async("nope", InferRequest::new(vec![request_of(1, 1).0]));
    assert!(matches!(
        wait(unknown),
        Err(Error::NotFound { what: "model", .. })
    ));
    let (x, want) = request_of(3, 1);
    let answer = wait(server.infer_async("affine", InferRequest::new(vec![x]))).unwrap();
    assert_eq!(values_of(&answer.outputs[0]), want);
    assert!(
        matches!(&err, Error::NotFound { what: "model", key } if key.contains("affine")),
        "{err}"
    );
    let (x, want) = request_of(2, 1);
    assert_eq!(
        values_of(
            &server
                .infer("affine", InferRequest::new(vec![x]))
                .unwrap()
                .outputs[0]
        ),
        want
    );
    // A model whose fixed inputs do not match its program is refused at start.
    let wrong = BatchModel::from_template("wrong", 1, affine_template(None))
        .fixed_input(f32s(&[1.0, 2.0], 1).reshaped(&[2]));
    let err = Batcher::start(&client, wrong, BatcherConfig::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// Caller `t` sends one-row requests until the batcher refuses one `Stopped`, checking every
/// answer; any other error (a request dropped unanswered among them) panics, saying `what`.
pub(crate) fn infer_until_stopped(batcher: &Batcher, t: u32, what: &str) {
    for i in 0.. {
        let (x, want) = request_of(t * 100_000 + i, 1);
        match batcher.infer(InferRequest::new(vec![x])) {
            Ok(a) => assert_eq!(values_of(&a.outputs[0]), want, "{what}"),
            Err(Error::Stopped { .. }) => return,
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

#[test]
fn shutdown_under_load_never_hangs_and_answers_everyone() {
    let client = Client::open().unwrap();
    for mode in [ShutdownMode::Drain, ShutdownMode::Fail] {
        let batcher = Batcher::start(
            &client,
            affine_model("affine", None),
            config(16, Duration::from_micros(500)),
        )
        .unwrap();
        within(Duration::from_secs(30), {
            let batcher = batcher.clone();
            move || {
                std::thread::scope(|s| {
                    for t in 0..8u32 {
                        let batcher = &batcher;
                        s.spawn(move || infer_until_stopped(batcher, t, &format!("{mode:?}")));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                    batcher.shutdown(mode);
                });
            }
        });
        let counts = batcher.counts();
        assert!(counts.done > 100, "{mode:?}: {counts:?}");
        assert_eq!(batcher.queue_depth(), 0, "{mode:?}");
    }
}

#[test]
fn high_priority_requests_are_batched_first() {
    let client = Client::open().unwrap();
    // One device, one row per batch, a long delay: batches form only as the device frees.
    let cfg = BatcherConfig {
        devices: Some(vec![client.devices()[0].id()]),
        ..config(1, Duration::from_secs(30))
    };
    let batcher = Batcher::start(&client, affine_model("affine", None), cfg).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // With max_batch_size 1 every request is a full batch, so the first goes at once; queue
    // the rest behind it and see high priority overtake.
    let futures: Vec<_> = [
        (0, Priority::Low),
        (1, Priority::Low),
        (2, Priority::Low),
        (3, Priority::High),
    ]
    .into_iter()
    .map(|(id, p)| {
        (
            id,
            batcher.infer_async(InferRequest::new(vec![request_of(id, 1).0]).priority(p)),
        )
    })
    .collect();
    for (id, f) in futures {
        let a = pjrt_actors::wait(f).unwrap();
        order.lock().unwrap().push((a.started, id));
    }
    let mut seen = order.lock().unwrap().clone();
    seen.sort();
    let ids: Vec<u32> = seen.into_iter().map(|(_, id)| id).collect();
    let high_at = ids.iter().position(|&id| id == 3).unwrap();
    assert!(
        high_at <= 1,
        "the high-priority request ran at {high_at} of {ids:?}"
    );
}

#[test]
fn metrics_are_prometheus_text_with_every_family() {
    let client = Client::open().unwrap();
    let a = Batcher::start(
        &client,
        affine_model("a", None),
        config(8, Duration::from_micros(100)),
    )
    .unwrap();
    let b = Batcher::start(
        &client,
        affine_model("b", None),
        config(8, Duration::from_micros(100)),
    )
    .unwrap();
    for i in 0..10 {
        a.infer(InferRequest::new(vec![request_of(i, 1).0]))
            .unwrap();
    }
    let text = ModelServer::new(vec![a.clone(), b]).metrics();
    for family in [
        "pjrt_batcher_queue_depth gauge",
        "pjrt_batcher_requests_total counter",
        "pjrt_batcher_batches_total counter",
        "pjrt_batcher_batch_size histogram",
        "pjrt_batcher_queue_latency_seconds histogram",
        "pjrt_batcher_execute_latency_seconds histogram",
    ] {
        assert_eq!(
            text.matches(&format!("# TYPE {family}")).count(),
            1,
            "{family} once in:\n{text}"
        );
    }
    assert!(
        text.contains("pjrt_batcher_requests_total{model=\"a\",outcome=\"done\"} 10"),
        "{text}"
    );
    assert!(
        text.contains("pjrt_batcher_requests_total{model=\"b\",outcome=\"done\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("pjrt_batcher_queue_latency_seconds_count{model=\"a\"} 10"),
        "{text}"
    );
    let batches = a.counts().batches;
    assert!(
        text.contains(&format!(
            "pjrt_batcher_batch_size_count{{model=\"a\"}} {batches}"
        )),
        "{text}"
    );
}
