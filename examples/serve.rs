//! The main job: serving from 16 worker threads on the CPU plugin. A generator sends requests
//! over a channel, and workers serve them through a dynamic [`Batcher`]. The model is a
//! transformer exported from JAX with its weights in a .safetensors file (serve/transformer.rs,
//! answers checked against JAX's), or with `--model mlp` a small MLP (examples/mlp.mlir,
//! answers checked against a Rust reference), which `--no-batching` serves one execute per
//! request on the device each worker owns. The run reports throughput and latency percentiles.
//!
//! `cargo run --release --example serve [-- --model transformer|mlp] [--requests N] [--fast]
//! [--no-batching] [--metrics]`

#[path = "serve/transformer.rs"]
pub mod transformer;

use std::time::{Duration, Instant};

use pjrt_actors::host_data::HostArray;
use pjrt_actors::serving::{BatchModel, Batcher, BatcherConfig, InferRequest};
use pjrt_actors::{Array, Client, CompileOptions, Device, ElementType, LoadedExecutable};

const MLP: &str = include_str!("mlp.mlir");
const BATCH: usize = 4;
const IN: usize = 16;
const HIDDEN: usize = 32;
const OUT: usize = 8;
pub const WORKERS: usize = 16;
/// Requests each worker keeps in flight through the batcher (a blocking execute has one).
pub const WINDOW: usize = 16;

/// Deterministic pseudo-random values in [-0.5, 0.5) (an LCG, so every run serves the same model).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// The model's weights: w1 (16x32), b1 (32), w2 (32x8), b2 (8).
pub struct Weights {
    pub w1: Vec<f32>,
    pub b1: Vec<f32>,
    pub w2: Vec<f32>,
    pub b2: Vec<f32>,
}

impl Default for Weights {
    fn default() -> Self {
        Self::new()
    }
}

impl Weights {
    pub fn new() -> Self {
        Weights {
            w1: values(1, IN * HIDDEN),
            b1: values(2, HIDDEN),
            w2: values(3, HIDDEN * OUT),
            b2: values(4, OUT),
        }
    }

    /// The same MLP in plain Rust.
    fn reference(&self, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; BATCH * OUT];
        for r in 0..BATCH {
            let hidden: Vec<f32> = (0..HIDDEN)
                .map(|j| {
                    let s: f32 = (0..IN)
                        .map(|k| x[r * IN + k] * self.w1[k * HIDDEN + j])
                        .sum();
                    (s + self.b1[j]).max(0.0)
                })
                .collect();
            for o in 0..OUT {
                let s: f32 = (0..HIDDEN).map(|j| hidden[j] * self.w2[j * OUT + o]).sum();
                y[r * OUT + o] = s + self.b2[o];
            }
        }
        y
    }
}

fn f32_data(values: &[f32], dims: &[i64]) -> HostArray {
    HostArray {
        dtype: ElementType::F32,
        dims: dims.to_vec(),
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// How requests are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Through one dynamic batcher over every device.
    Batched,
    /// One execute per request, on the device the worker owns.
    Unbatched,
}

/// The batcher serving the MLP: batches of up to 256 rows (64 requests of 4), padded to a
/// power of two, gathered for at most 200 µs.
pub fn mlp_batcher(client: &Client, weights: &Weights) -> pjrt_actors::Result<Batcher> {
    // The program is written for 4 rows; the batcher respecialises it per allowed size.
    let model = BatchModel::from_program("mlp", 1, MLP, BATCH)
        .fixed_input(f32_data(&weights.w1, &[IN as i64, HIDDEN as i64]))
        .fixed_input(f32_data(&weights.b1, &[HIDDEN as i64]))
        .fixed_input(f32_data(&weights.w2, &[HIDDEN as i64, OUT as i64]))
        .fixed_input(f32_data(&weights.b2, &[OUT as i64]));
    let config = BatcherConfig {
        max_batch_size: 256,
        allowed_batch_sizes: vec![4, 8, 16, 32, 64, 128, 256],
        max_delay: Duration::from_micros(200),
        ..Default::default()
    };
    Batcher::start(client, model, config)
}

/// One device's executable and its resident weights.
struct Replica {
    device: Device,
    exe: LoadedExecutable,
    weights: [Array; 4],
}

struct Request {
    id: u64,
    input: HostArray,
    sent: Instant,
}

/// What a serving run measured.
pub struct Report {
    pub requests: u64,
    pub seconds: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub checked: u64,
    pub mismatches: u64,
    /// The batcher's metrics (Prometheus text), when batched.
    pub metrics: Option<String>,
}

/// Serves `requests` requests of the MLP with `workers` threads; every `check_every`-th
/// answer is compared with the Rust reference.
pub fn run(
    requests: u64,
    workers: usize,
    check_every: u64,
    mode: Mode,
) -> pjrt_actors::Result<Report> {
    let client = Client::open()?;
    let weights = Weights::new();
    let batcher = match mode {
        Mode::Batched => Some(mlp_batcher(&client, &weights)?),
        Mode::Unbatched => None,
    };
    let replicas = client
        .devices()
        .into_iter()
        .map(|device| {
            let options = CompileOptions {
                devices: Some(vec![device.id()]),
                ..Default::default()
            };
            let exe = client.compile_and_load(MLP, &options)?;
            let weights = [
                device.put(&weights.w1, &[IN as i64, HIDDEN as i64])?,
                device.put(&weights.b1, &[HIDDEN as i64])?,
                device.put(&weights.w2, &[HIDDEN as i64, OUT as i64])?,
                device.put(&weights.b2, &[OUT as i64])?,
            ];
            Ok(Replica {
                device,
                exe,
                weights,
            })
        })
        .collect::<pjrt_actors::Result<Vec<_>>>()?;
    let input = |id: u64| f32_data(&values(1000 + id, BATCH * IN), &[BATCH as i64, IN as i64]);
    let check = |_: u64, x: &HostArray, y: &HostArray| {
        let want = weights.reference(&f32s(x));
        let got = f32s(y);
        let close = (got.iter().zip(&want)).all(|(a, b)| (a - b).abs() <= 1e-4 * (1.0 + b.abs()));
        (!close).then(|| format!("got {got:?}, want {want:?}"))
    };
    drive(
        batcher.as_ref(),
        &replicas,
        Load {
            requests,
            workers,
            check_every,
        },
        &input,
        &check,
    )
}

fn f32s(h: &HostArray) -> Vec<f32> {
    (h.bytes.chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect()
}

/// How many requests, from how many threads, and how often an answer is checked.
struct Load {
    requests: u64,
    workers: usize,
    check_every: u64,
}

/// The generator and workers of a run: requests made by `input`, served through `batcher`
/// (up to WINDOW in flight a worker) or, without one, by the worker's MLP replica; every
/// `check_every`-th answer given to `check`, which describes a wrong one.
fn drive(
    batcher: Option<&Batcher>,
    replicas: &[Replica],
    load: Load,
    input: &(dyn Fn(u64) -> HostArray + Sync),
    check: &(dyn Fn(u64, &HostArray, &HostArray) -> Option<String> + Sync),
) -> pjrt_actors::Result<Report> {
    let Load {
        requests,
        workers,
        check_every,
    } = load;
    let window = if batcher.is_some() { WINDOW } else { 1 };
    let (tx, rx) = crossbeam_channel::bounded::<Request>(workers * window * 4);
    let start = Instant::now();
    let results = std::thread::scope(|s| {
        let generator = s.spawn(move || {
            for id in 0..requests {
                let request = Request {
                    id,
                    input: input(id),
                    sent: Instant::now(),
                };
                if tx.send(request).is_err() {
                    break;
                }
            }
        });
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let rx = rx.clone();
                let replica = replicas.get(w % replicas.len().max(1));
                s.spawn(
                    move || -> pjrt_actors::Result<(hdrhistogram::Histogram<u64>, u64, u64)> {
                        let mut latency =
                            hdrhistogram::Histogram::<u64>::new(3).expect("valid precision");
                        let (mut checked, mut mismatches) = (0, 0);
                        let mut answered = |req: &Request, y: &HostArray| {
                            let _ = latency.record(req.sent.elapsed().as_nanos() as u64);
                            if req.id.is_multiple_of(check_every) {
                                checked += 1;
                                if let Some(wrong) = check(req.id, &req.input, y) {
                                    mismatches += 1;
                                    eprintln!("request {}: {wrong}", req.id);
                                }
                            }
                        };
                        match (batcher, replica) {
                            // Up to WINDOW requests in flight, answered in order.
                            (Some(batcher), _) => {
                                let mut in_flight = std::collections::VecDeque::new();
                                loop {
                                    while in_flight.len() < WINDOW {
                                        let next = if in_flight.is_empty() {
                                            rx.recv().ok()
                                        } else {
                                            rx.try_recv().ok()
                                        };
                                        let Some(req) = next else { break };
                                        let request = InferRequest::new(vec![req.input.clone()]);
                                        in_flight.push_back((req, batcher.infer_async(request)));
                                    }
                                    let Some((req, answer)) = in_flight.pop_front() else {
                                        break;
                                    };
                                    let answer = pjrt_actors::wait(answer)?;
                                    answered(&req, &answer.outputs[0]);
                                }
                            }
                            (None, Some(replica)) => {
                                for req in rx.iter() {
                                    let x = replica.device.put_array(&req.input)?;
                                    let [w1, b1, w2, b2] = &replica.weights;
                                    let y = replica.exe.execute(&[&x, w1, b1, w2, b2])?;
                                    answered(&req, &y[0].to_host_array()?);
                                }
                            }
                            (None, None) => unreachable!("an unbatched run has replicas"),
                        }
                        Ok((latency, checked, mismatches))
                    },
                )
            })
            .collect();
        drop(rx);
        let _ = generator.join();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect::<Vec<_>>()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("valid precision");
    let (mut checked, mut mismatches) = (0, 0);
    for r in results {
        let (h, c, m) = r?;
        all.add(&h).expect("same precision");
        checked += c;
        mismatches += m;
    }
    let us = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    Ok(Report {
        requests: all.len(),
        seconds,
        p50_us: us(0.5),
        p90_us: us(0.9),
        p99_us: us(0.99),
        max_us: all.max() as f64 / 1000.0,
        checked,
        mismatches,
        metrics: batcher.map(|b| b.metrics()),
    })
}

#[allow(dead_code)] // the tests include this file for `run`
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let fast = args.iter().any(|a| a == "--fast");
    let mode = if args.iter().any(|a| a == "--no-batching") {
        Mode::Unbatched
    } else {
        Mode::Batched
    };
    let show_metrics = args.iter().any(|a| a == "--metrics");
    let flag = |name: &str| args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone());
    let requests = (flag("--requests").and_then(|r| r.parse().ok())).unwrap_or(if fast {
        2_000
    } else {
        100_000
    });
    let model = flag("--model").unwrap_or_else(|| "transformer".into());
    let served = match (model.as_str(), mode) {
        ("transformer", Mode::Batched) => {
            println!(
                "serving a transformer exported from JAX (8 tokens -> 64 logits, weights from .safetensors) with {WORKERS} workers, {requests} requests, batched (up to 16 sequences per execute) ..."
            );
            transformer::run_transformer(requests, WORKERS, 1)
        }
        ("transformer", Mode::Unbatched) => {
            eprintln!(
                "serve: error: --no-batching serves --model mlp (the export runs batches of 16)"
            );
            return std::process::ExitCode::FAILURE;
        }
        ("mlp", _) => {
            println!(
                "serving an MLP (4x16 -> 32 -> 8) with {WORKERS} workers, {requests} requests, {} ...",
                match mode {
                    Mode::Batched =>
                        "batched (up to 256 rows per execute; --no-batching to compare)",
                    Mode::Unbatched => "one execute per request (--no-batching)",
                }
            );
            run(requests, WORKERS, 97, mode)
        }
        (other, _) => {
            eprintln!("serve: error: --model {other}: transformer or mlp");
            return std::process::ExitCode::FAILURE;
        }
    };
    let reference = if model == "mlp" {
        "the Rust reference"
    } else {
        "JAX's recorded answers"
    };
    match served {
        Ok(r) => {
            println!(
                "{} requests in {:.2} s: {:.0} requests/s",
                r.requests,
                r.seconds,
                r.requests as f64 / r.seconds
            );
            println!(
                "latency (queue + execute) us: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
                r.p50_us, r.p90_us, r.p99_us, r.max_us
            );
            println!(
                "checked {} answers against {reference}: {} mismatches",
                r.checked, r.mismatches
            );
            if let (true, Some(metrics)) = (show_metrics, &r.metrics) {
                print!("{metrics}");
            }
            if r.mismatches == 0 && r.requests == requests {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("serve: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
