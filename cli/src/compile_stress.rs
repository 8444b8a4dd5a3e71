//! `pjrt-actors compile-stress`: many distinct generated modules through the compiler pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pjrt_actors::{CompileOptions, Error, Result};

use crate::{Cli, open, spawn_worker, worker_count};

fn generated_module(i: usize) -> String {
    let n = 4 + i % 29;
    let m = 1 + i / 29;
    let t = format!("tensor<{n}x{m}xf32>");
    format!(
        "module @stress{i} {{\n  func.func public @main(%a: {t}, %b: {t}) -> {t} {{\n    %0 = stablehlo.multiply %a, %b : {t}\n    %1 = stablehlo.tanh %0 : {t}\n    %2 = stablehlo.add %1, %a : {t}\n    return %2 : {t}\n  }}\n}}\n"
    )
}

pub fn compile_stress(cli: &Cli, modules: usize, concurrency: usize) -> Result<()> {
    let concurrency = worker_count("--concurrency", concurrency)?;
    let client = open(cli)?;
    let bar = indicatif::ProgressBar::new(modules as u64);
    let next = AtomicU64::new(0);
    let start = Instant::now();
    let errors: Vec<Error> = std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(concurrency);
        let mut refused = None;
        for _ in 0..concurrency {
            let (client, bar, next) = (&client, &bar, &next);
            let worker = spawn_worker(s, move || {
                let mut errors = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= modules {
                        break errors;
                    }
                    if let Err(e) =
                        client.compile_and_load(generated_module(i), &CompileOptions::default())
                    {
                        errors.push(e);
                    }
                    bar.inc(1);
                }
            });
            match worker {
                Ok(w) => workers.push(w),
                Err(e) => {
                    // The ones already running finish the modules between them.
                    refused = Some(e);
                    break;
                }
            }
        }
        let errors = workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker panicked"));
        refused.into_iter().chain(errors).collect()
    });
    bar.finish_and_clear();
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = client.compile_cache_stats();
    out!(
        "{modules} modules compiled by {} compiler threads from {concurrency} submitters in {elapsed:.2} s ({:.1} modules/s)",
        client.compile_threads(),
        modules as f64 / elapsed
    );
    out!(
        "cache: {} compiles, {} memory hits, {} disk hits, {} joined in flight, {} misses",
        stats.compiles,
        stats.memory_hits,
        stats.disk_hits,
        stats.joined,
        stats.misses
    );
    Ok(())
}
