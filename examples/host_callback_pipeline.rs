//! A pipeline whose program calls Rust: each run scales its input by a Rust callback,
//! normalises it with a second one, and reports its mean to an observer, from several threads.
//!
//! `cargo run --release --example host_callback_pipeline [-- --fast]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pjrt_actors::{ArrayType, CallbackKind, Client, CompileOptions, ElementType, HostCallback};

const N: i64 = 8;

fn f32n(n: i64) -> ArrayType {
    ArrayType {
        dtype: ElementType::F32,
        dims: vec![n],
    }
}

/// Runs `runs` executions from each of `threads` threads; returns (callback calls, mismatches).
pub fn run(threads: usize, runs: usize) -> pjrt_actors::Result<(u64, u64)> {
    let client = Client::open()?;
    let observed = Arc::new(AtomicU64::new(0));
    let scale = HostCallback::map::<f32, f32>("scale", &[N], |x| 3.0 * x)?;
    let normalise = HostCallback::new(
        "normalise",
        CallbackKind::Pure,
        vec![f32n(N)],
        vec![f32n(N)],
        |ins, outs| {
            let x = ins[0].as_slice::<f32>().ok_or("f32 expected")?;
            let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            for (y, x) in outs[0]
                .as_mut_slice::<f32>()
                .ok_or("f32 expected")?
                .iter_mut()
                .zip(x)
            {
                *y = x / norm;
            }
            Ok(())
        },
    )?;
    let seen = observed.clone();
    let report = HostCallback::new(
        "report",
        CallbackKind::Observer,
        vec![f32n(N)],
        vec![],
        move |ins, _| {
            let _mean = ins[0]
                .as_slice::<f32>()
                .ok_or("f32 expected")?
                .iter()
                .sum::<f32>()
                / N as f32;
            seen.fetch_add(1, Ordering::Relaxed);
            Ok(())
        },
    )?;
    let t = format!("tensor<{N}xf32>");
    let program = format!(
        "module @pipeline {{\n  func.func public @main(%x: {t}) -> {t} {{\n    {}\n    {}\n    {}\n    return %n : {t}\n  }}\n}}\n",
        scale.call_text("%s", &["%x"]),
        normalise.call_text("%n", &["%s"]),
        report.call_text("", &["%n"]),
    );
    let callbacks = [scale, normalise, report];
    let calls = AtomicU64::new(0);
    let mismatches = AtomicU64::new(0);
    std::thread::scope(|s| -> pjrt_actors::Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (client, program, callbacks, calls, mismatches) =
                    (&client, &program, &callbacks, &calls, &mismatches);
                s.spawn(move || -> pjrt_actors::Result<()> {
                    let device = &client.devices()[t % client.device_count()];
                    let options = CompileOptions {
                        devices: Some(vec![device.id()]),
                        ..Default::default()
                    };
                    let exe = client
                        .compile_request(program)
                        .options(&options)
                        .callbacks(callbacks)
                        .load()?;
                    for i in 0..runs {
                        let x: Vec<f32> = (0..N)
                            .map(|k| (k as f32 + 1.0) * (i % 5 + 1) as f32)
                            .collect();
                        let y = exe.execute(&[&device.put(&x, &[N])?])?[0].to_vec::<f32>()?;
                        let norm = x.iter().map(|v| 9.0 * v * v).sum::<f32>().sqrt();
                        if y.iter()
                            .zip(&x)
                            .any(|(y, x)| (y - 3.0 * x / norm).abs() > 1e-5)
                        {
                            mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                        calls.fetch_add(3, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("worker panicked")?;
        }
        Ok(())
    })?;
    assert_eq!(
        observed.load(Ordering::Relaxed) * 3,
        calls.load(Ordering::Relaxed)
    );
    Ok((
        calls.load(Ordering::Relaxed),
        mismatches.load(Ordering::Relaxed),
    ))
}

#[allow(dead_code)] // the tests include this file for `run`
fn main() -> std::process::ExitCode {
    let fast = std::env::args().any(|a| a == "--fast");
    let (threads, runs) = (8, if fast { 200 } else { 20_000 });
    let start = Instant::now();
    match run(threads, runs) {
        Ok((calls, mismatches)) => {
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{threads} threads x {runs} runs: {calls} callback calls in {secs:.2} s ({:.0}/s), {mismatches} wrong results",
                calls as f64 / secs
            );
            if mismatches == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("host_callback_pipeline: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
