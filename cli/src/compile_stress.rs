//! `pjrt-actors compile-stress`: many distinct generated modules through the compiler pool,
//! in one process or, with `--processes N`, in N at once (each re-running this command), to
//! show what a shared compile cache saves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pjrt_actors::{CompileOptions, Error, Result};

use crate::common::{GlobalArgs, open_with, spawn_worker, usage, worker_count};

/// What `compile-stress` was asked to do.
pub struct Stress {
    pub modules: usize,
    pub concurrency: usize,
    pub processes: usize,
    pub cache_redis: Option<String>,
    pub report_json: bool,
}

/// The most processes `--processes` starts.
const MAX_PROCESSES: usize = 64;

fn generated_module(i: usize) -> String {
    let n = 4 + i % 29;
    let m = 1 + i / 29;
    let t = format!("tensor<{n}x{m}xf32>");
    format!(
        "module @stress{i} {{\n  func.func public @main(%a: {t}, %b: {t}) -> {t} {{\n    %0 = stablehlo.multiply %a, %b : {t}\n    %1 = stablehlo.tanh %0 : {t}\n    %2 = stablehlo.add %1, %a : {t}\n    return %2 : {t}\n  }}\n}}\n"
    )
}

pub fn compile_stress(cli: &GlobalArgs, stress: Stress) -> Result<()> {
    if stress.processes == 0 || stress.processes > MAX_PROCESSES {
        return Err(usage(format!(
            "--processes must be between 1 and {MAX_PROCESSES}, got {}",
            stress.processes
        )));
    }
    if stress.processes > 1 {
        return fleet(cli, &stress);
    }
    let modules = stress.modules;
    let concurrency = worker_count("--concurrency", stress.concurrency)?;
    let client = open_with(cli, stress.cache_redis.as_deref())?;
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
    if stress.report_json {
        out!(
            "{}",
            serde_json::json!({
                "seconds": elapsed,
                "compiles": stats.compiles,
                "redis_hits": stats.redis_hits,
                "redis_lease_waits": stats.redis_lease_waits,
                "redis_errors": stats.redis_errors,
            })
        );
        return Ok(());
    }
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
    if stress.cache_redis.is_some() || stats.redis_hits + stats.redis_misses > 0 {
        out!(
            "redis: {} hits, {} misses, {} lease waits, {} takeovers, {} errors",
            stats.redis_hits,
            stats.redis_misses,
            stats.redis_lease_waits,
            stats.redis_takeovers,
            stats.redis_errors
        );
    }
    Ok(())
}

/// Runs the same stress in `processes` child processes at once and sums what they report.
fn fleet(cli: &GlobalArgs, stress: &Stress) -> Result<()> {
    let me =
        std::env::current_exe().map_err(|e| usage(format!("cannot find this program: {e}")))?;
    let mut common: Vec<String> = Vec::new();
    if let Some(plugin) = &cli.plugin {
        common.extend(["--plugin".into(), plugin.display().to_string()]);
    }
    if let Some(n) = cli.cpu_devices {
        common.extend(["--cpu-devices".into(), n.to_string()]);
    }
    for option in &cli.options {
        common.extend(["--option".into(), option.clone()]);
    }
    common.extend([
        "compile-stress".into(),
        "--modules".into(),
        stress.modules.to_string(),
        "--concurrency".into(),
        stress.concurrency.to_string(),
        "--report-json".into(),
    ]);
    if let Some(url) = &stress.cache_redis {
        common.extend(["--cache-redis".into(), url.clone()]);
    }
    let start = Instant::now();
    let children = (0..stress.processes)
        .map(|_| {
            std::process::Command::new(&me)
                .args(&common)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| usage(format!("cannot start a process: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut totals = [0u64; 4];
    for child in children {
        let output = child
            .wait_with_output()
            .map_err(|e| usage(format!("a process failed: {e}")))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let report: serde_json::Value = (text.lines().last())
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| {
                usage(format!(
                    "a process failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ))
            })?;
        for (total, key) in totals.iter_mut().zip([
            "compiles",
            "redis_hits",
            "redis_lease_waits",
            "redis_errors",
        ]) {
            *total += report[key].as_u64().unwrap_or(0);
        }
    }
    let [compiles, hits, waits, errors] = totals;
    out!(
        "{} processes x {} modules in {:.2} s: {compiles} plugin compiles across the fleet ({} without a shared cache)",
        stress.processes,
        stress.modules,
        start.elapsed().as_secs_f64(),
        stress.processes * stress.modules
    );
    out!("redis: {hits} hits, {waits} lease waits, {errors} errors");
    Ok(())
}
