//! Running jax.export artifacts from their bytes (tests/data/exported: the served transformer
//! and model-like cases of the export corpus), ours against JAX's own call of the deserialized
//! artifact, in one run: the load (parse or deserialize, compile, first call), then the p50 of
//! a call with the weights resident and the other inputs from the host, outputs back to the
//! host, in interleaved blocks. A served export through the batcher against its plain calls
//! closes the table. Prints a table, then one JSON object as the last line.

mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use pjrt_actors::Client;
use pjrt_actors::export::{ExportedModel, dotted_path};
use pjrt_actors::host_data::{HostArray, read_npz};
use pjrt_actors::serving::{Batcher, BatcherConfig, InferRequest};
use serde_json::{Value, json};
use support::jax::{self, JaxHelper};
use support::*;

const ROUNDS: usize = 8;
const BLOCK: usize = 40;
const LOADS: usize = 3;

/// (case, artifact, its inputs): the weights are the inputs under `[0][0]` (the first
/// argument, a pytree of parameters), the rest are given per call.
const CASES: &[(&str, &str, &str)] = &[
    (
        "transformer",
        "serve/transformer.exported",
        "serve/transformer.args.npz",
    ),
    (
        "gpt_forward",
        "corpus/gpt_forward.exported",
        "corpus/gpt_forward.args.npz",
    ),
    (
        "gpt_train",
        "corpus/gpt_train_step.exported",
        "corpus/gpt_train_step.args.npz",
    ),
    (
        "llama_block",
        "corpus/llama_block.exported",
        "corpus/llama_block.args.npz",
    ),
    (
        "conv_net",
        "corpus/conv_net.exported",
        "corpus/conv_net.args.npz",
    ),
    (
        "rnn_scan",
        "corpus/rnn_scan.exported",
        "corpus/rnn_scan.args.npz",
    ),
];

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exported")
}

/// An export loaded with its weights (the `0.0.` tensors) resident; the rest, per call.
fn load(
    client: &Client,
    file: &str,
    args: &[(String, HostArray)],
) -> (ExportedModel, Vec<HostArray>) {
    let mut model = client
        .load_exported(&std::fs::read(data_dir().join(file)).unwrap())
        .unwrap();
    let (weights, free): (Vec<_>, Vec<_>) = args
        .iter()
        .cloned()
        .partition(|(name, _)| name.starts_with("0.0."));
    model.load_tensors(weights).unwrap();
    // The free inputs in path order, as `call` takes them.
    let mut free = free;
    let order = model.free_inputs();
    free.sort_by_key(|(name, _)| order.iter().position(|p| dotted_path(p) == *name));
    (model, free.into_iter().map(|(_, h)| h).collect())
}

fn main() {
    let python = jax::venv("0.10.2").unwrap();
    let mut helper = JaxHelper::start(&python, &data_dir().join("jax_time.py"), &[]);
    let client = Client::open().unwrap();
    println!(
        "plugin PJRT C API {:?}; jax {} (its own call of the deserialized export)",
        client.plugin_api_version(),
        helper.version()
    );
    println!(
        "load: parse/deserialize + compile + first call, median of {LOADS}; call: us p50 of {ROUNDS} interleaved blocks of {BLOCK}"
    );
    println!(
        "{:<12} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7}",
        "case", "load ms", "jax ms", "x", "call us", "jax us", "x"
    );
    let mut out = serde_json::Map::new();
    for &(name, file, args_file) in CASES {
        let args_path = data_dir().join(args_file);
        let args = read_npz(&std::fs::read(&args_path).unwrap()).unwrap();
        let artifact = data_dir().join(file).display().to_string();
        let args_arg = args_path.display().to_string();
        // Loads: ours on a fresh client each time (its compile cache empty), JAX's a fresh jit.
        let mut ours_load = Vec::new();
        let mut jax_load = Vec::new();
        for _ in 0..LOADS {
            let fresh = Client::open().unwrap();
            let t = Instant::now();
            let (model, free) = load(&fresh, file, &args);
            model.call(&free).unwrap();
            ours_load.push(t.elapsed().as_secs_f64() * 1e3);
            let answer = helper.ask(&format!("load {artifact} {args_arg}"));
            jax_load.push(answer["s"].as_f64().unwrap() * 1e3);
        }
        let (model, free) = load(&client, file, &args);
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS + 1 {
            let block: Vec<f64> = (0..BLOCK)
                .map(|_| time_us(|| drop(model.call(&free).unwrap())))
                .collect();
            let answer = helper.ask(&format!("p50 {artifact} {args_arg} {BLOCK}"));
            let jax_block: Vec<f64> = serde_json::from_value(answer["us"].clone()).unwrap();
            if round > 0 {
                ours.extend(block);
                theirs.extend(jax_block);
            }
        }
        let (load_ms, jax_ms) = (median(ours_load), median(jax_load));
        let (call_us, jax_us) = (median(ours), median(theirs));
        println!(
            "{name:<12} {load_ms:>10.1} {jax_ms:>10.1} {:>7.2} {call_us:>10.1} {jax_us:>10.1} {:>7.2}",
            load_ms / jax_ms,
            call_us / jax_us
        );
        out.insert(
            name.into(),
            json!({"load_ratio": round3(load_ms / jax_ms), "call_ratio": round3(call_us / jax_us)}),
        );
    }
    let served = serve_ratio(&client);
    println!(
        "transformer through the batcher from 16 threads: {:.2}x the calls/s of 16 threads calling it",
        served
    );
    out.insert("batched_over_calls".into(), json!(round3(served)));
    println!("{}", Value::Object(out));
}

/// One-sequence requests/s through a batcher (up to 16 a batch) from 16 threads, over the
/// export's plain calls/s from 16 threads (each call one padded 16-sequence batch).
fn serve_ratio(client: &Client) -> f64 {
    let args =
        read_npz(&std::fs::read(data_dir().join("serve/transformer.args.npz")).unwrap()).unwrap();
    let (model, free) = load(client, "serve/transformer.exported", &args);
    let one = free[0].rows(0, 1).unwrap();
    let config = BatcherConfig {
        max_batch_size: 16,
        ..Default::default()
    };
    let batcher = Batcher::start(
        client,
        model.batch_model("lm", &["tokens"]).unwrap(),
        config,
    )
    .unwrap();
    let rate = |f: &(dyn Fn() + Sync)| {
        let n = 400;
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..16 {
                s.spawn(|| (0..n).for_each(|_| f()));
            }
        });
        (16 * n) as f64 / t.elapsed().as_secs_f64()
    };
    let calls = rate(&|| drop(model.call(&free).unwrap()));
    let served = rate(&|| drop(batcher.infer(InferRequest::new(vec![one.clone()])).unwrap()));
    served / calls
}

fn median(mut v: Vec<f64>) -> f64 {
    percentile_us(&mut v, 50.0)
}
