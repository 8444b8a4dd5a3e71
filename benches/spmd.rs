//! A data-parallel MLP over 4 CPU devices (tests/data/spmd/bench_*.mlir, exported by jax), in
//! one run: one SPMD execute of the whole batch, against 4 single-device executes of a quarter
//! batch each (dispatched together, then all awaited: the same work), and against JAX's jit of
//! the same function over the same mesh (tests/data/spmd/jax_time.py, answering between our
//! blocks). The SPMD output is checked against the single-device ones first. Prints a table,
//! then one JSON object as the last line.

mod support;

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::HostArray;
use pjrt_actors::{Array, Client, CompileOptions, ElementType, ShardedArray};
use serde_json::json;
use support::jax::{self, JaxHelper};
use support::*;

const ROUNDS: usize = 10;
const BLOCK: usize = 40;
const BATCH: i64 = 256;
const WIDTH: i64 = 256;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spmd")
}

/// Argument `k` as export.py's `arg` makes it: sin(0.7 i + 1.3 k) / 4 in f64, then f32.
fn argument(k: usize, dims: &[i64]) -> HostArray {
    let n = dims.iter().product::<i64>() as usize;
    HostArray {
        dtype: ElementType::F32,
        dims: dims.to_vec(),
        bytes: (0..n)
            .flat_map(|i| (((0.7 * i as f64 + 1.3 * k as f64).sin() / 4.0) as f32).to_le_bytes())
            .collect(),
    }
}

fn shapes(batch: i64) -> [Vec<i64>; 4] {
    [
        vec![batch, WIDTH],
        vec![WIDTH, WIDTH],
        vec![WIDTH, WIDTH],
        vec![WIDTH, 16],
    ]
}

fn f32s(h: &HostArray) -> Vec<f32> {
    (h.bytes.chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn main() {
    let client = Client::open().unwrap();
    assert!(client.device_count() >= 4, "the bench needs 4 CPU devices");
    let read = |name: &str| std::fs::read(data_dir().join(name)).unwrap();

    // One SPMD executable over devices 0..4, on the whole batch.
    let spmd =
        (client.compile_and_load(read("bench_dp_mlp.mlir"), &CompileOptions::default())).unwrap();
    let shardings = spmd.parameter_shardings().unwrap();
    let global: Vec<HostArray> = (shapes(BATCH).iter().enumerate())
        .map(|(k, s)| argument(k, s))
        .collect();
    let sharded: Vec<ShardedArray> = (global.iter().zip(&shardings))
        .map(|(h, s)| client.put_sharded(h, s).unwrap())
        .collect();
    let spmd_call = || {
        let out = spmd
            .execute_sharded(&sharded.iter().collect::<Vec<_>>())
            .unwrap();
        out[0].block_until_ready().unwrap();
        out
    };

    // Four single-device executables, each on its quarter of the rows and the same weights.
    let quarter = read("bench_mlp_quarter.mlir");
    let singles: Vec<(pjrt_actors::LoadedExecutable, Vec<Array>)> = (0..4)
        .map(|d| {
            let options = CompileOptions {
                devices: Some(vec![d]),
                ..Default::default()
            };
            let exe = client.compile_and_load(&quarter, &options).unwrap();
            let args = (0..4)
                .map(|k| {
                    sharded[k]
                        .shard_on(&client.devices()[d as usize])
                        .unwrap()
                        .clone()
                })
                .collect();
            (exe, args)
        })
        .collect();
    let singles_call = || {
        // Dispatched together (the plugin runs each on its own threads), then all awaited.
        let outs: Vec<Vec<Array>> = (singles.iter())
            .map(|(exe, args)| exe.execute(&args.iter().collect::<Vec<_>>()).unwrap())
            .collect();
        for o in &outs {
            o[0].block_until_ready().unwrap();
        }
        outs
    };

    // The same numbers both ways: the SPMD output's rows are the quarters'.
    let whole = f32s(&spmd_call()[0].to_host().unwrap());
    let parts: Vec<f32> = (singles_call().iter())
        .flat_map(|o| f32s(&o[0].to_host_array().unwrap()))
        .collect();
    let worst = whole
        .iter()
        .zip(&parts)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        whole.len() == parts.len() && worst < 1e-4,
        "SPMD and per-device differ by {worst}"
    );

    let python = jax::venv("0.10.2").unwrap();
    let mut helper = JaxHelper::start(&python, &data_dir().join("jax_time.py"), &[]);
    let mut jax_block = |n: usize| -> Vec<f64> {
        serde_json::from_value(helper.ask(&format!("p50 {n}"))["us"].clone()).unwrap()
    };

    let mut samples: [Vec<f64>; 3] = Default::default();
    for round in 0..ROUNDS + 1 {
        let blocks = [
            (0..BLOCK)
                .map(|_| time_us(|| drop(spmd_call())))
                .collect::<Vec<_>>(),
            (0..BLOCK)
                .map(|_| time_us(|| drop(singles_call())))
                .collect(),
            jax_block(BLOCK),
        ];
        if round > 0 {
            for (all, new) in samples.iter_mut().zip(blocks) {
                all.extend(new);
            }
        }
    }
    let [spmd_p50, singles_p50, jax_p50] = samples.map(|mut s| percentile_us(&mut s, 50.0));
    println!(
        "data-parallel MLP, batch {BATCH}, width {WIDTH}, 4 CPU devices; jax {}",
        helper.version()
    );
    println!("p50 of {ROUNDS} interleaved blocks of {BLOCK}, microseconds per call:");
    println!("  one SPMD execute            {spmd_p50:>9.1}");
    println!("  4 single-device executes    {singles_p50:>9.1}");
    println!("  JAX jit over the same mesh  {jax_p50:>9.1}");
    println!(
        "{}",
        json!({
            "bench": "spmd",
            "spmd_vs_four_executes": round3(spmd_p50 / singles_p50),
            "spmd_vs_jax": round3(spmd_p50 / jax_p50),
            "max_abs_diff_spmd_vs_per_device": worst,
            "jax": helper.version(),
        })
    );
}
