//! `pjrt-actors bench`: run a module from many threads; throughput and latency percentiles.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pjrt_actors::export::ExportedModel;
use pjrt_actors::host_data::HostArray;
use pjrt_actors::{Array, Client, LoadedExecutable, Result, ShardedArray};

use crate::common::{GlobalArgs, open, spawn_worker, usage, worker_count};
use crate::run::{check_inputs, is_export, load_module, read_inputs, upload, zeros, zeros_for};

/// What one worker runs: a program on one device, an SPMD program over its devices, or a
/// jax.export artifact called as JAX calls it (its free inputs from the host, its outputs back).
enum Prepared {
    OnDevice(LoadedExecutable, Vec<Array>),
    Sharded(LoadedExecutable, Vec<ShardedArray>),
    Exported(Box<ExportedModel>, Vec<HostArray>),
}

impl Prepared {
    /// One execute, until its outputs are ready.
    fn call(&self) -> Result<()> {
        match self {
            Prepared::OnDevice(exe, args) => {
                let refs: Vec<&Array> = args.iter().collect();
                let out = exe.execute(&refs)?;
                out.iter().try_for_each(|o| o.block_until_ready())
            }
            Prepared::Sharded(exe, args) => {
                let out = exe.execute_sharded(&args.iter().collect::<Vec<_>>())?;
                out.iter().try_for_each(|o| o.block_until_ready())
            }
            Prepared::Exported(model, args) => model.call(args).map(drop),
        }
    }
}

/// An SPMD program's global zeros, each capped as a whole (the cap applied to each shard let a
/// 16-way program make 1 GiB of zeros under a 64 MiB cap).
fn global_zeros(exe: &LoadedExecutable) -> Result<Vec<pjrt_actors::host_data::HostArray>> {
    (exe.global_parameter_types().iter().enumerate())
        .map(|(i, t)| zeros(&format!("parameter {i}"), t))
        .collect()
}

/// A module on each of `workers` devices, or an SPMD one once over its devices, with its
/// inputs (the ones given, or zeros) uploaded.
fn prepare_module(
    client: &Client,
    module: &Path,
    inputs: &[String],
    parsed: Option<Vec<HostArray>>,
    workers: usize,
) -> Result<Vec<Prepared>> {
    let first = load_module(client, module, 0, None)?;
    Ok(match first.parameter_shardings() {
        Some(shardings) => {
            let data = match &parsed {
                Some(parsed) => check_inputs(&first, inputs, parsed.clone())?,
                None => global_zeros(&first)?,
            };
            let args = (data.iter().zip(&shardings))
                .map(|(h, s)| client.put_sharded(h, s))
                .collect::<Result<Vec<_>>>()?;
            vec![Prepared::Sharded(first, args)]
        }
        None => (0..workers)
            .map(|d| {
                let exe = match d {
                    0 => first.clone(),
                    _ => load_module(client, module, d as i32, None)?,
                };
                let data = match &parsed {
                    Some(parsed) => check_inputs(&exe, inputs, parsed.clone())?,
                    None => zeros_for(&exe)?,
                };
                let args = upload(&exe, &data)?;
                Ok(Prepared::OnDevice(exe, args))
            })
            .collect::<Result<Vec<_>>>()?,
    })
}

/// The longest span a seconds flag (`bench --duration`, `serve --request-timeout`) takes: a day.
const MAX_DURATION_SECS: f64 = 86_400.0;

/// A seconds flag's value: finite, positive, at most a day.
pub fn seconds_flag(flag: &str, secs: f64) -> Result<Duration> {
    if !(secs > 0.0 && secs <= MAX_DURATION_SECS) {
        return Err(usage(format!(
            "{flag} must be a number of seconds above 0 and at most {MAX_DURATION_SECS}, got {secs}"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A jax.export artifact with its weights resident, and its free inputs: the ones given, or
/// zeros of their types.
fn prepare_export(
    client: &Client,
    module: &Path,
    params: Option<&Path>,
    parsed: Option<Vec<HostArray>>,
) -> Result<Prepared> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path).map_err(|e| usage(format!("{what} {}: {e}", path.display())))
    };
    let mut model = client.load_exported(&read(module, "artifact")?)?;
    if let Some(path) = params {
        model.load_params(&read(path, "--params")?)?;
    }
    let args = match parsed {
        Some(parsed) => parsed,
        // Zeros for each input the module reads, bounded as for a program's parameters; one
        // it drops is passed by its type alone (a dropped f32[2^40] needs no 4 TiB).
        None => (model.free_input_types().into_iter())
            .zip(model.free_inputs())
            .zip(model.free_inputs_used())
            .map(|((t, path), used)| {
                let t =
                    t.ok_or_else(|| usage(format!("{path} is of a dtype with no zeros here")))?;
                match used {
                    true => zeros(&format!("input {path}"), &t),
                    false => Ok(HostArray {
                        dtype: t.dtype,
                        dims: t.dims,
                        bytes: Vec::new(),
                    }),
                }
            })
            .collect::<Result<_>>()?,
    };
    // A wrong input is said once, here, not by every worker.
    model.call(&args)?;
    Ok(Prepared::Exported(Box::new(model), args))
}

/// What `bench` runs and how long.
#[derive(clap::Args)]
pub struct BenchArgs {
    pub module: PathBuf,
    /// Inputs as for `run`; zeros of the parameter types when none are given.
    #[arg(long = "input")]
    pub inputs: Vec<String>,
    /// Weights for a jax.export artifact, as for `run`; `--input`s give the rest.
    #[arg(long)]
    pub params: Option<PathBuf>,
    /// Worker threads, spread over the devices.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Total executes (default 10,000 when no duration is given).
    #[arg(long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Run for this many seconds instead of a number of requests.
    #[arg(long)]
    pub duration: Option<f64>,
}

pub fn bench(cli: &GlobalArgs, args: &BenchArgs) -> Result<()> {
    let BenchArgs {
        module,
        inputs,
        params,
        threads,
        requests,
        duration,
    } = args;
    let (params, threads, requests, duration) = (params.as_deref(), *threads, *requests, *duration);
    if params.is_some() && !is_export(module) {
        return Err(usage(format!(
            "--params gives a jax.export artifact's weights; {} is not one (.exported, .jax_exported)",
            module.display()
        )));
    }
    let threads = worker_count("--threads", threads)?;
    let deadline = (duration.map(|d| seconds_flag("--duration", d))).transpose()?;
    // Inputs are read (each once) before anything compiles.
    let parsed = (!inputs.is_empty())
        .then(|| read_inputs(inputs))
        .transpose()?;
    let client = open(cli)?;
    let devices = client.device_count();
    // An export is loaded once (an SPMD one over its devices), its weights resident; an SPMD
    // program is compiled once, over its devices; any other once per device.
    let per_device: Vec<Prepared> = if is_export(module) {
        vec![prepare_export(&client, module, params, parsed)?]
    } else {
        prepare_module(&client, module, inputs, parsed, devices.min(threads))?
    };
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
            let prepared = &per_device[t % per_device.len()];
            let (issued, failed, bar) = (&issued, &failed, &bar);
            let worker = spawn_worker(s, move || {
                let mut h =
                    hdrhistogram::Histogram::<u64>::new(3).expect("3 significant digits is valid");
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
                    if prepared.call().is_err() {
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
        // Run once more to say why.
        per_device[0].call()?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("valid");
    for h in &histograms {
        all.add(h).map_err(|e| usage(format!("histogram: {e}")))?;
    }
    let us = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    let over = match &per_device[0] {
        Prepared::Sharded(exe, _) => exe.addressable_devices().len(),
        Prepared::Exported(model, _) => model.executable().addressable_devices().len(),
        Prepared::OnDevice(..) => per_device.len(),
    };
    out!(
        "{} executes from {threads} threads over {over} devices in {elapsed:.2} s",
        all.len()
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
