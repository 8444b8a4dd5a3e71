//! JAX's recorded outputs, shared by the suite and the CLI's tests (which include this file by
//! path): the export corpus's files, values as f64s, and a check of type, shape and values.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pjrt_actors::ElementType;
use pjrt_actors::host_data::{HostArray, read_npz};
use serde_json::Value;

/// The corpus folder, from the root package's tests or the CLI's (a folder below it).
pub fn corpus_dir() -> PathBuf {
    (Path::new(env!("CARGO_MANIFEST_DIR")).ancestors())
        .map(|a| a.join("tests/data/exported/corpus"))
        .find(|d| d.is_dir())
        .expect("tests/data/exported/corpus")
}

pub fn corpus() -> Vec<Value> {
    let text = std::fs::read(corpus_dir().join("corpus.json")).unwrap();
    let v: Value = serde_json::from_slice(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

pub fn read(name: &str) -> Vec<u8> {
    std::fs::read(corpus_dir().join(name)).unwrap()
}

/// JAX's outputs of a case, in order.
pub fn wanted(name: &str) -> Vec<HostArray> {
    let mut outs = read_npz(&read(&format!("{name}.want.npz"))).unwrap();
    outs.sort_by_key(|(k, _)| k[3..].parse::<usize>().unwrap());
    outs.into_iter().map(|(_, h)| h).collect()
}

/// The tolerance a case's outputs are held to: float32 work, and a few functions whose
/// results carry more rounding (iterations, factorizations, bf16 and f16 casts).
pub fn tolerance(name: &str) -> f64 {
    match name {
        "mixed_precision" => 1e-2,
        // The older 0.81 plugin's XLA fuses the training step's reductions otherwise.
        "gpt_train_step" => 5e-4,
        "gpt_forward" | "llama_block" | "eigh" | "svd" | "qr" => 1e-4,
        _ => 2e-5,
    }
}

/// An array's values as f64s (complex: re, im pairs); integers exactly.
pub fn values(h: &HostArray) -> Vec<f64> {
    let chunks = |w: usize| h.bytes.chunks_exact(w);
    match h.dtype {
        ElementType::F32 | ElementType::C64 => chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        ElementType::F64 | ElementType::C128 => chunks(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        ElementType::S32 => chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        ElementType::U32 => chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        ElementType::S64 => chunks(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        ElementType::S8 => h.bytes.iter().map(|&b| b as i8 as f64).collect(),
        ElementType::U8 | ElementType::Pred => h.bytes.iter().map(|&b| b as f64).collect(),
        other => panic!("unexpected output type {other}"),
    }
}

/// Checks each output against JAX's: type, shape, and values within `rtol` of the largest
/// magnitude (integers and booleans exactly, as their f64 values compare).
pub fn check_outputs(name: &str, got: &[HostArray], want: &[HostArray], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: output count");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            (g.dtype, &g.dims),
            (w.dtype, &w.dims),
            "{name} output {k}: type"
        );
        let (gv, wv) = (values(g), values(w));
        let exact = !matches!(g.dtype, ElementType::F32 | ElementType::F64);
        let scale = wv.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
            let ok = if exact {
                a == b
            } else {
                (a - b).abs() <= rtol * scale
            };
            assert!(ok, "{name} output {k}[{i}]: {a}, JAX has {b}");
        }
    }
}
