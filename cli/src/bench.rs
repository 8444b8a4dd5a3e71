//! `pjrt-actors bench`: run a module from many threads; throughput and latency percentiles.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pjrt_actors::Result;

use crate::run::{check_inputs, load_module, read_inputs, upload, zeros_for};
use crate::{Cli, open, spawn_worker, usage, worker_count};

/// The longest `--duration` accepted: a day.
const MAX_DURATION_SECS: f64 = 86_400.0;

/// A `--duration` in seconds: finite, positive, at most a day.
fn bench_duration(secs: f64) -> Result<Duration> {
    if !(secs > 0.0 && secs <= MAX_DURATION_SECS) {
        return Err(usage(format!(
            "--duration must be a number of seconds above 0 and at most {MAX_DURATION_SECS}, got {secs}"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn bench(
    cli: &Cli,
    module: &Path,
    inputs: &[String],
    threads: usize,
    requests: Option<u64>,
    duration: Option<f64>,
) -> Result<()> {
    let threads = worker_count("--threads", threads)?;
    let deadline = duration.map(bench_duration).transpose()?;
    // Inputs are read (each once) before anything compiles.
    let parsed = (!inputs.is_empty())
        .then(|| read_inputs(inputs))
        .transpose()?;
    let client = open(cli)?;
    let devices = client.device_count();
    let per_device = (0..devices.min(threads))
        .map(|d| {
            let exe = load_module(&client, module, d as i32)?;
            let data = match &parsed {
                Some(parsed) => check_inputs(&exe, inputs, parsed.clone())?,
                None => zeros_for(&exe)?,
            };
            let args = upload(&exe, &data)?;
            Ok((exe, args))
        })
        .collect::<Result<Vec<_>>>()?;
    let total = requests.unwrap_or(if deadline.is_some() { u64::MAX } else { 10_000 });
    let bar = match deadline {
        Some(d) => indicatif::ProgressBar::new(d.as_millis() as u64),
        None => indicatif::ProgressBar::new(total),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let issued = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let start = Instant::now();
    let histograms = std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(threads);
        let mut refused = None;
        for t in 0..threads {
            let (exe, args) = &per_device[t % per_device.len()];
            let (issued, failed, bar) = (&issued, &failed, &bar);
            let worker = spawn_worker(s, move || {
                let mut h =
                    hdrhistogram::Histogram::<u64>::new(3).expect("3 significant digits is valid");
                let refs: Vec<&pjrt_actors::Array> = args.iter().collect();
                loop {
                    if deadline.is_some_and(|d| start.elapsed() >= d)
                        || failed.load(Ordering::Relaxed)
                    {
                        break;
                    }
                    if issued.fetch_add(1, Ordering::Relaxed) >= total {
                        break;
                    }
                    let t0 = Instant::now();
                    let ok = exe
                        .execute(&refs)
                        .and_then(|out| out.iter().try_for_each(|o| o.block_until_ready()));
                    if ok.is_err() {
                        failed.store(true, Ordering::Relaxed);
                        break;
                    }
                    let _ = h.record(t0.elapsed().as_nanos() as u64);
                    match deadline {
                        Some(_) => bar.set_position(start.elapsed().as_millis() as u64),
                        None => bar.inc(1),
                    }
                }
                h
            });
            match worker {
                Ok(w) => workers.push(w),
                Err(e) => {
                    // The ones already running stop at their next request.
                    failed.store(true, Ordering::Relaxed);
                    refused = Some(e);
                    break;
                }
            }
        }
        let histograms: Vec<hdrhistogram::Histogram<u64>> = (workers.into_iter())
            .map(|w| w.join().expect("a worker panicked"))
            .collect();
        refused.map_or(Ok(histograms), Err)
    })?;
    bar.finish_and_clear();
    if failed.load(Ordering::Relaxed) {
        let (exe, args) = &per_device[0];
        exe.execute(&args.iter().collect::<Vec<_>>())?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("valid");
    for h in &histograms {
        all.add(h).map_err(|e| usage(format!("histogram: {e}")))?;
    }
    let us = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    out!(
        "{} executes from {threads} threads over {} devices in {elapsed:.2} s",
        all.len(),
        per_device.len()
    );
    out!("throughput  {:.0} executes/s", all.len() as f64 / elapsed);
    out!(
        "latency us  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        us(0.5),
        us(0.9),
        us(0.99),
        all.max() as f64 / 1000.0
    );
    Ok(())
}
