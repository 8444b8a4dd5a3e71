//! Shared by the benchmarks: percentiles, a table printer, and the tiny programs.
#![allow(dead_code)]

use std::time::Instant;

pub mod jax;

/// Percentile (0-100) of `samples` in microseconds, by nearest rank.
pub fn percentile_us(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Times `f` once, in microseconds.
pub fn time_us(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1e6
}

/// Samples two paths interleaved in blocks, so drift on a shared machine hits both alike.
pub fn interleaved(
    n: usize,
    block: usize,
    mut ours: impl FnMut() -> f64,
    mut raw: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    while a.len() < n {
        for _ in 0..block {
            a.push(ours());
        }
        for _ in 0..block {
            b.push(raw());
        }
    }
    (a, b)
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub const ADD_F32X4: &str = r#"
module @add {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"#;
