//! Many compilations in flight at once through the compiler pool, some cancelled: every one
//! that completes runs correctly, cancelled ones never compile, and identical requests compile
//! once.
//!
//! `cargo run --release --example concurrent_compile [-- --fast]`

use std::time::{Duration, Instant};

use pjrt_actors::{CancelToken, Client, CompileOptions, Error};

fn module(i: usize) -> (String, i64) {
    let n = (i % 61 + 1) as i64;
    let t = format!("tensor<{n}xf32>");
    (
        format!(
            "module @c{i} {{\n  func.func public @main(%a: {t}) -> {t} {{\n    %k = stablehlo.constant dense<{i}.0> : {t}\n    %0 = stablehlo.add %a, %k : {t}\n    return %0 : {t}\n  }}\n}}\n"
        ),
        n,
    )
}

/// Compiles `modules` distinct modules from `threads` threads, cancelling two in ten (one while
/// in flight, one before it is sent); returns
/// (completed, cancelled, compiles the plugin ran).
pub fn run(modules: usize, threads: usize) -> pjrt_actors::Result<(usize, usize, u64)> {
    let client = Client::builder().compile_queue_bound(16).open()?;
    let outcomes = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let client = &client;
                s.spawn(move || -> pjrt_actors::Result<(usize, usize)> {
                    let (mut done, mut cancelled) = (0, 0);
                    for i in (t..modules).step_by(threads) {
                        let (program, n) = module(i);
                        let token = CancelToken::new();
                        if i % 10 == 7 {
                            // Cancelled before it is sent: never compiled, always cancelled.
                            token.cancel();
                        }
                        if i % 10 == 3 {
                            let token = token.clone();
                            std::thread::spawn(move || {
                                std::thread::sleep(Duration::from_millis(2));
                                token.cancel();
                            });
                        }
                        match client
                            .compile_request(&program)
                            .options(&CompileOptions::default())
                            .cancel_with(&token)
                            .load()
                        {
                            Ok(exe) => {
                                let a = client.devices()[0].put(&vec![1f32; n as usize], &[n])?;
                                let y = exe.execute(&[&a])?[0].to_vec::<f32>()?;
                                assert!(
                                    y.iter().all(|v| *v == 1.0 + i as f32),
                                    "module {i} computed {y:?}"
                                );
                                done += 1;
                            }
                            Err(Error::RequestCancelled { .. }) => cancelled += 1,
                            Err(e) => return Err(e),
                        }
                    }
                    Ok((done, cancelled))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect::<Vec<_>>()
    });
    let (mut done, mut cancelled) = (0, 0);
    for o in outcomes {
        let (d, c) = o?;
        done += d;
        cancelled += c;
    }
    // Identical requests in flight together compile once.
    let (program, _) = module(modules + 1);
    let before = client.compile_cache_stats().compiles;
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                client
                    .compile_and_load(&program, &CompileOptions::default())
                    .map(|_| ())
            });
        }
    });
    assert_eq!(client.compile_cache_stats().compiles, before + 1);
    Ok((done, cancelled, client.compile_cache_stats().compiles))
}

#[allow(dead_code)] // the tests include this file for `run`
fn main() -> std::process::ExitCode {
    let fast = std::env::args().any(|a| a == "--fast");
    let (modules, threads) = (if fast { 40 } else { 400 }, 16);
    let start = Instant::now();
    match run(modules, threads) {
        Ok((done, cancelled, compiles)) => {
            println!(
                "{modules} modules from {threads} threads in {:.2} s: {done} compiled and run, {cancelled} cancelled, {compiles} compiles by the plugin",
                start.elapsed().as_secs_f64()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("concurrent_compile: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
