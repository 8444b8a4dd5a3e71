//! Model-like programs JAX exported (tests/data/models: a GPT block, a tiny GPT forward pass, a
//! conv net, a `lax.scan` RNN, a batch-64 MLP) executed by us and by JAX's jitted call on the
//! same arguments, in one run: single-thread p50 on our default client, on a one-device client,
//! and JAX with asynchronous CPU dispatch off and on; then calls/s from 4 threads, ours against
//! JAX's from 4 Python threads. JAX runs in helper processes (tests/data/models/jax_time.py)
//! that answer requests between our blocks, so drift hits both alike. Outputs are checked
//! against JAX's recorded ones first. Prints a table, then one JSON object as the last line.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use pjrt_actors::host_data::{HostArray, read_npy};
use pjrt_actors::{
    Array, Client, CompileOptions, ElementType, HostBuffer, LoadedExecutable, NamedValue,
};
use pjrt_actors_core::compile::DeviceFacts;
use pjrt_actors_core::pjrt::{self as raw, PjrtBuffer, PjrtClient, PjrtLoadedExecutable, Plugin};
use serde_json::{Value, json};
use support::jax::{self, JaxHelper};
use support::*;

const ROUNDS: usize = 10;
const BLOCK: usize = 60;
const RATE_SECS: f64 = 1.0;
const RATE_ROUNDS: usize = 3;
const THREADS: usize = 4;
/// The jax whose XLA is the 0.115 CPU plugin's; the bench falls back to the data's jax.
const JAX_SAME_XLA: &str = "0.11.2";
const JAX_FALLBACK: &str = "0.10.2";

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/models")
}

/// Argument `k` of a case, as export.py's `inputs` makes it.
fn argument(k: usize, arg: &Value) -> HostArray {
    let dims: Vec<i64> = (arg["shape"].as_array().unwrap().iter())
        .map(|d| d.as_i64().unwrap())
        .collect();
    let n = dims.iter().product::<i64>() as usize;
    let (dtype, bytes) = match arg["dtype"].as_str().unwrap() {
        "int32" => (
            ElementType::S32,
            (0..n)
                .flat_map(|i| (((7 * i + k) % 128) as i32).to_le_bytes())
                .collect(),
        ),
        "float32" => (
            ElementType::F32,
            (0..n)
                .flat_map(|i| {
                    let v = ((0.7 * i as f64 + 1.3 * k as f64).sin() / 4.0) as f32;
                    v.to_le_bytes()
                })
                .collect(),
        ),
        other => panic!("no argument formula for {other}"),
    };
    HostArray { dtype, dims, bytes }
}

fn f32s(h: &HostArray) -> Vec<f32> {
    (h.bytes.chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// One case compiled and its arguments resident on one device of one client.
struct Prepared {
    exe: LoadedExecutable,
    args: Vec<Array>,
}

impl Prepared {
    fn new(client: &Client, case: &Value, device: usize) -> Prepared {
        let program = std::fs::read(data_dir().join(case["program"].as_str().unwrap())).unwrap();
        let options = CompileOptions {
            devices: Some(vec![device as i32]),
            ..Default::default()
        };
        let exe = client.compile_and_load(&program, &options).unwrap();
        let target = &client.devices()[device];
        let args = (case["args"].as_array().unwrap().iter().enumerate())
            .map(|(k, a)| {
                let h = argument(k, a);
                let array = client
                    .buffer_from_host(HostBuffer::Copy(&h.bytes), h.dtype, &h.dims, target, None)
                    .unwrap();
                array.block_until_ready().unwrap();
                array
            })
            .collect();
        Prepared { exe, args }
    }

    fn call(&self) -> Vec<Array> {
        let refs: Vec<&Array> = self.args.iter().collect();
        let out = self.exe.execute(&refs).unwrap();
        for o in &out {
            o.block_until_ready().unwrap();
        }
        out
    }

    /// The outputs against JAX's: the largest difference relative to the largest magnitude.
    fn check(&self, case: &Value) -> f64 {
        let got = self.call();
        let want = case["outputs"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{}: output count", case["name"]);
        let mut worst = 0f64;
        for (g, w) in got.iter().zip(want) {
            let w = read_npy(&std::fs::read(data_dir().join(w.as_str().unwrap())).unwrap());
            let (g, w) = (f32s(&g.to_host_array().unwrap()), f32s(&w.unwrap()));
            assert_eq!(g.len(), w.len(), "{}: output size", case["name"]);
            let scale = w.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
            for (a, b) in g.iter().zip(&w) {
                worst = worst.max(((a - b).abs() / scale) as f64);
            }
        }
        assert!(
            worst < 1e-3,
            "{}: off JAX's outputs by {worst:e}",
            case["name"]
        );
        worst
    }
}

/// The same program and arguments on a bare PJRT client of the same plugin, called straight
/// through the fence: what the plugin itself takes, without our execute path around it.
struct RawCase {
    exe: PjrtLoadedExecutable,
    args: Vec<PjrtBuffer>,
    outputs: usize,
}

impl RawCase {
    fn new(client: &PjrtClient, case: &Value) -> RawCase {
        let program = std::fs::read(data_dir().join(case["program"].as_str().unwrap())).unwrap();
        let facts = DeviceFacts {
            devices: vec![(0, true)],
            memory_limits: Vec::new(),
        };
        let options = CompileOptions {
            devices: Some(vec![0]),
            ..Default::default()
        };
        let exe = (client.compile(&program, "mlir", &options.to_bytes(&facts).unwrap())).unwrap();
        let device = &client.devices().unwrap()[0];
        let args = (case["args"].as_array().unwrap().iter().enumerate())
            .map(|(k, a)| {
                let h = argument(k, a);
                let b = client
                    .upload(
                        raw::HostBuffer::Copy(&h.bytes),
                        h.dtype,
                        &h.dims,
                        device,
                        None,
                    )
                    .unwrap();
                b.wait_ready().unwrap();
                b
            })
            .collect();
        let outputs = case["outputs"].as_array().unwrap().len();
        RawCase { exe, args, outputs }
    }

    fn call(&self) {
        let refs: Vec<&PjrtBuffer> = self.args.iter().collect();
        let out = (self
            .exe
            .execute(&[&refs], self.outputs, &[], None, None, None))
        .unwrap();
        for o in &out {
            o.wait_ready().unwrap();
        }
    }
}

/// A jax_time.py process: one JAX client with one dispatch mode, answering requests.
struct Jax(JaxHelper);

impl Jax {
    fn start(python: &Path, mode: &str) -> Jax {
        Jax(JaxHelper::start(
            python,
            &data_dir().join("jax_time.py"),
            &[mode],
        ))
    }

    fn call_times(&mut self, name: &str, n: usize) -> Vec<f64> {
        let answer = self.0.ask(&format!("p50 {name} {n}"));
        serde_json::from_value(answer["us"].clone()).unwrap()
    }

    fn rate(&mut self, name: &str) -> f64 {
        let answer = self.0.ask(&format!("rate {name} {THREADS} {RATE_SECS}"));
        answer["per_s"].as_f64().unwrap()
    }
}

/// The python of a venv with the jax sharing the 0.115 plugin's XLA, else the data's jax, and
/// what was given up on.
fn jax_python() -> (PathBuf, Option<String>) {
    match jax::venv(JAX_SAME_XLA) {
        Ok(python) => (python, None),
        Err(why) => (jax::venv(JAX_FALLBACK).unwrap(), Some(why)),
    }
}

/// Calls/s of THREADS threads, thread t calling `calls[t % calls.len()]`.
fn our_rate(calls: &[Prepared]) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (stop, count, p) = (stop.clone(), count.clone(), &calls[t % calls.len()]);
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    p.call();
                    n += 1;
                }
                count.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(RATE_SECS));
        stop.store(true, Ordering::Relaxed);
    });
    count.load(Ordering::Relaxed) as f64 / RATE_SECS
}

fn median(mut v: Vec<f64>) -> f64 {
    percentile_us(&mut v, 50.0)
}

/// A one-device client of the plugin under test; `synchronous` runs each execute on the
/// calling thread (the CPU plugin's `asynchronous = false`, as JAX's synchronous dispatch).
fn one_device(plugin: &Path, synchronous: bool) -> Client {
    let builder = Client::builder().plugin_path(plugin).cpu_device_count(1);
    match synchronous {
        true => builder.option("asynchronous", NamedValue::Bool(false)),
        false => builder,
    }
    .open()
    .unwrap()
}

fn main() {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(data_dir().join("manifest.json")).unwrap()).unwrap();
    let (python, fallback) = jax_python();
    if let Some(why) = &fallback {
        println!("{why}");
        println!("comparing with jax {JAX_FALLBACK} instead: not the same XLA as the plugin");
    }
    let (mut sync, mut asynchronous) = (Jax::start(&python, "sync"), Jax::start(&python, "async"));
    let default = Client::open().unwrap();
    let plugin = default.plugin_path().to_owned();
    // The 0.81 CPU plugin has no `asynchronous` option (it ignores it): there, sync is async.
    let has_sync = default.plugin_api_version() >= (0, 100);
    let (one_async, one_sync) = (one_device(&plugin, false), one_device(&plugin, has_sync));
    let mut bare_options = vec![("cpu_device_count".to_string(), NamedValue::Int64(1))];
    if has_sync {
        bare_options.push(("asynchronous".into(), NamedValue::Bool(false)));
    }
    let bare = PjrtClient::create(Plugin::load(&plugin).unwrap(), &bare_options).unwrap();
    let devices = default.device_count();
    println!(
        "plugin PJRT C API {:?}, {}; jax {}; default client {devices} devices, asynchronous",
        default.plugin_api_version(),
        plugin.display(),
        sync.0.version()
    );
    println!(
        "microseconds per call, p50 of {ROUNDS} interleaved blocks of {BLOCK}; calls/s from {THREADS} threads"
    );
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>8} {:>6}",
        "case",
        "default",
        "1 async",
        "1 sync",
        "raw sync",
        "jax sync",
        "jax asy",
        "/sync",
        "/async",
        "ours/s",
        "jax/s",
        "x jax"
    );
    let mut cases = serde_json::Map::new();
    let (mut max_sync, mut max_async, mut min_rate) = (0f64, 0f64, f64::INFINITY);
    for case in manifest["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let paths = [
            Prepared::new(&default, case, 0),
            Prepared::new(&one_async, case, 0),
            Prepared::new(&one_sync, case, 0),
        ];
        let worst = paths.iter().map(|p| p.check(case)).fold(0f64, f64::max);
        let bare_case = RawCase::new(&bare, case);
        // Ours on each client, the bare C API, JAX sync, JAX async.
        let mut samples: [Vec<f64>; 6] = Default::default();
        sync.call_times(name, BLOCK);
        asynchronous.call_times(name, BLOCK);
        for round in 0..ROUNDS + 1 {
            let block = |f: &dyn Fn()| (0..BLOCK).map(|_| time_us(f)).collect::<Vec<f64>>();
            let blocks = [
                block(&|| drop(paths[0].call())),
                block(&|| drop(paths[1].call())),
                block(&|| drop(paths[2].call())),
                block(&|| bare_case.call()),
                sync.call_times(name, BLOCK),
                asynchronous.call_times(name, BLOCK),
            ];
            // The first round warms every path up.
            if round > 0 {
                for (all, new) in samples.iter_mut().zip(blocks) {
                    all.extend(new);
                }
            }
        }
        let [
            default_p50,
            async_p50,
            sync_p50,
            raw_p50,
            jax_sync,
            jax_async,
        ] = samples.map(median);
        // Throughput: our threads share the synchronous one-device client's executable (each
        // runs its calls itself, like JAX's threads), against JAX's better dispatch mode.
        let (mut our_rates, mut jax_rates) = (Vec::new(), Vec::new());
        for _ in 0..RATE_ROUNDS {
            our_rates.push(our_rate(std::slice::from_ref(&paths[2])));
            jax_rates.push(sync.rate(name).max(asynchronous.rate(name)));
        }
        let (our_rate, jax_rate) = (median(our_rates), median(jax_rates));
        let (vs_sync, vs_async, vs_rate) = (
            sync_p50 / jax_sync,
            async_p50 / jax_async,
            our_rate / jax_rate,
        );
        println!(
            "{name:<12} {default_p50:>8.1} {async_p50:>8.1} {sync_p50:>8.1} {raw_p50:>8.1} {jax_sync:>8.1} {jax_async:>8.1} {vs_sync:>7.3} {vs_async:>7.3} {our_rate:>8.0} {jax_rate:>8.0} {vs_rate:>6.2}"
        );
        (max_sync, max_async) = (max_sync.max(vs_sync), max_async.max(vs_async));
        min_rate = min_rate.min(vs_rate);
        cases.insert(
            name.into(),
            json!({
                "ours_sync_vs_jax_sync": round3(vs_sync),
                "ours_async_vs_jax_async": round3(vs_async),
                "default_client_vs_jax_async": round3(default_p50 / jax_async),
                "default_client_vs_one_device": round3(default_p50 / async_p50),
                "async_vs_sync": round3(async_p50 / sync_p50),
                "ours_sync_vs_raw_c_api": round3(sync_p50 / raw_p50),
                "threads_vs_jax_threads": round3(vs_rate),
                "max_rel_diff_vs_jax": worst,
            }),
        );
    }
    let summary = json!({
        "bench": "models",
        "jax": sync.0.version(),
        "same_xla_as_plugin": fallback.is_none(),
        "plugin_api_version": [default.plugin_api_version().0, default.plugin_api_version().1],
        "default_devices": devices,
        "cases": cases,
        "max_ratio_vs_jax_sync": round3(max_sync),
        "max_ratio_vs_jax_async": round3(max_async),
        "min_throughput_vs_jax_4_threads": round3(min_rate),
    });
    println!("{summary}");
}
