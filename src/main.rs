//! The `pjrt-actors` command line: look at what a PJRT plugin offers and run work on it.
//! Conventions follow IREE's `iree-run-module` / `iree-benchmark-module`; errors print one
//! line and exit non-zero.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use pjrt_actors::host_data::{HostData, json_values, parse_literal, read_npy, write_npy};
use pjrt_actors::{Client, CompileOptions, Error, HostBuffer, LoadedExecutable, NamedValue};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "pjrt-actors",
    version,
    about = "XLA PJRT plugins driven as actors"
)]
struct Cli {
    /// The PJRT plugin file (default: PJRT_PLUGIN_PATH, then the bootstrap folder, then
    /// xla_plugins/ in Python's site-packages).
    #[arg(long, global = true)]
    plugin: Option<PathBuf>,
    /// Number of CPU devices the CPU plugin creates.
    #[arg(long, global = true)]
    cpu_devices: Option<i64>,
    /// Print tracing output (RUST_LOG refines it).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List devices and their memory spaces.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Compile a module (.mlir text or bytecode) and run it once.
    Run {
        module: PathBuf,
        /// An input, in parameter order: `2x2xf32=1,2,3,4`, `f32=5`, or `@file.npy`.
        #[arg(long = "input")]
        inputs: Vec<String>,
        /// The device to run on.
        #[arg(long, default_value_t = 0)]
        device: i32,
        /// Print `{"outputs":[{"dtype":..,"shape":[..],"data":[..]}]}`.
        #[arg(long)]
        json: bool,
        /// Write output i to `@path.npy` (repeat, in output order).
        #[arg(long = "output")]
        outputs: Vec<String>,
    },
    /// Run a module from many threads and report throughput and latency percentiles.
    Bench {
        module: PathBuf,
        /// Inputs as for `run`; zeros of the parameter types when none are given.
        #[arg(long = "input")]
        inputs: Vec<String>,
        /// Worker threads, spread over the devices.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Total executes (default 10,000 when no duration is given).
        #[arg(long, conflicts_with = "duration")]
        requests: Option<u64>,
        /// Run for this many seconds instead of a number of requests.
        #[arg(long)]
        duration: Option<f64>,
    },
    /// Run a small workload and write a heap profile (pprof) of what it left alive.
    Profile {
        /// Where to write the profile (open it with `go tool pprof -http=: FILE`).
        #[arg(long)]
        out: PathBuf,
    },
    /// Compile many distinct generated modules through the compiler pool.
    CompileStress {
        #[arg(long, default_value_t = 64)]
        modules: usize,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
}

fn open(cli: &Cli) -> pjrt_actors::Result<Client> {
    let mut builder = Client::builder();
    if let Some(path) = &cli.plugin {
        builder = builder.plugin_path(path);
    }
    if let Some(n) = cli.cpu_devices {
        builder = builder.cpu_device_count(n);
    }
    builder.open()
}

fn named_value_json(v: &NamedValue) -> Value {
    match v {
        NamedValue::String(s) => json!(s),
        NamedValue::Int64(i) => json!(i),
        NamedValue::Int64List(l) => json!(l),
        NamedValue::Float(f) => json!(f),
        NamedValue::Bool(b) => json!(b),
    }
}

fn devices_json(client: &Client) -> Value {
    let devices: Vec<Value> = client
        .devices()
        .iter()
        .map(|d| {
            let default = d.default_memory_space().ok().map(|m| m.id());
            json!({
                "id": d.id(),
                "kind": d.kind(),
                "process_index": d.process_index(),
                "local_hardware_id": d.local_hardware_id(),
                "addressable": d.is_addressable(),
                "debug_string": d.debug_string(),
                "display_string": d.display_string(),
                "attributes": d.attributes().iter().map(|(k, v)| (k.clone(), named_value_json(v))).collect::<serde_json::Map<_, _>>(),
                "memory_spaces": d.memory_spaces().iter().map(|m| json!({
                    "id": m.id(),
                    "kind": m.kind(),
                    "kind_id": m.kind_id(),
                    "default": Some(m.id()) == default,
                    "debug_string": m.debug_string(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "platform": client.platform(),
        "platform_version": client.platform_version(),
        "plugin": client.plugin_path().display().to_string(),
        "pjrt_c_api_version": [client.plugin_api_version().0, client.plugin_api_version().1],
        "plugin_attributes": client.plugin_attributes().iter().map(|(k, v)| (k.clone(), named_value_json(v))).collect::<serde_json::Map<_, _>>(),
        "devices": devices,
    })
}

fn print_devices_table(client: &Client) {
    let (major, minor) = client.plugin_api_version();
    println!(
        "platform {} (version {}), PJRT C API {major}.{minor}, plugin {}",
        client.platform(),
        client.platform_version(),
        client.plugin_path().display()
    );
    println!(
        "{:>3}  {:<6} {:>5}  {:<28} {:>4}  {:<14} {:<8}",
        "id", "kind", "hw id", "device", "mem", "memory kind", "default"
    );
    for d in client.devices() {
        let default = d.default_memory_space().ok();
        for (i, m) in d.memory_spaces().iter().enumerate() {
            let (id, kind, hw, name) = if i == 0 {
                (
                    d.id().to_string(),
                    d.kind().to_string(),
                    d.local_hardware_id().map_or("-".into(), |h| h.to_string()),
                    d.display_string().to_string(),
                )
            } else {
                Default::default()
            };
            let is_default = if default.as_ref() == Some(m) {
                "yes"
            } else {
                ""
            };
            println!(
                "{id:>3}  {kind:<6} {hw:>5}  {name:<28} {:>4}  {:<14} {is_default:<8}",
                m.id(),
                m.kind()
            );
        }
    }
}

fn usage(message: String) -> Error {
    Error::InvalidArgument(message)
}

/// An `--input`: a literal, or `@path` to a `.npy` file.
fn read_input(text: &str) -> pjrt_actors::Result<HostData> {
    match text.strip_prefix('@') {
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| usage(format!("input `{text}`: cannot read {path}: {e}")))?;
            read_npy(&bytes).map_err(|e| usage(format!("input `{text}`: {e}")))
        }
        None => parse_literal(text),
    }
}

fn load_module(
    client: &Client,
    path: &PathBuf,
    device: i32,
) -> pjrt_actors::Result<LoadedExecutable> {
    let program =
        std::fs::read(path).map_err(|e| usage(format!("module {}: {e}", path.display())))?;
    if device < 0 || device as usize >= client.device_count() {
        return Err(usage(format!(
            "--device {device}: the client has devices 0..{}",
            client.device_count()
        )));
    }
    let options = CompileOptions {
        devices: Some(vec![device]),
        ..Default::default()
    };
    client.compile_and_load(program, &options)
}

/// The inputs, checked against the program's parameters; zeros when `texts` is empty and
/// `zeros_if_none`.
fn inputs_for(
    exe: &LoadedExecutable,
    texts: &[String],
    zeros_if_none: bool,
) -> pjrt_actors::Result<Vec<HostData>> {
    let params = exe.parameter_types();
    if texts.is_empty() && zeros_if_none {
        return params
            .iter()
            .map(|p| {
                Ok(HostData {
                    dtype: p.dtype,
                    dims: p.dims.clone(),
                    bytes: vec![0; pjrt_actors_core_byte_size(p)?],
                })
            })
            .collect();
    }
    // Each input parses (and names itself in its error) before the count is checked.
    let inputs = texts
        .iter()
        .map(|t| read_input(t))
        .collect::<pjrt_actors::Result<Vec<_>>>()?;
    if texts.len() != params.len() {
        return Err(usage(format!(
            "the module takes {} inputs, {} --input given",
            params.len(),
            texts.len()
        )));
    }
    for (i, (input, p)) in inputs.iter().zip(params).enumerate() {
        if input.dtype != p.dtype || input.dims != p.dims {
            return Err(usage(format!(
                "input {i} (`{}`) is {}{:?}; the module expects {}{:?}",
                texts[i], input.dtype, input.dims, p.dtype, p.dims
            )));
        }
    }
    Ok(inputs)
}

fn pjrt_actors_core_byte_size(t: &pjrt_actors::ArrayType) -> pjrt_actors::Result<usize> {
    Ok(t.dims.iter().product::<i64>().max(0) as usize * t.dtype.byte_size())
}

fn upload(
    exe: &LoadedExecutable,
    inputs: &[HostData],
) -> pjrt_actors::Result<Vec<pjrt_actors::Array>> {
    let client = exe.client();
    let device = &exe.addressable_devices()[0];
    inputs
        .iter()
        .map(|h| {
            client.buffer_from_host(HostBuffer::Copy(&h.bytes), h.dtype, &h.dims, device, None)
        })
        .collect()
}

fn run(cli: &Cli) -> pjrt_actors::Result<()> {
    match &cli.command {
        Command::Devices { json } => {
            let client = open(cli)?;
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&devices_json(&client)).unwrap_or_default()
                );
            } else {
                print_devices_table(&client);
            }
        }
        Command::Run {
            module,
            inputs,
            device,
            json,
            outputs,
        } => {
            // Check every --output before doing any work.
            let output_paths = outputs
                .iter()
                .map(|o| {
                    o.strip_prefix('@')
                        .map(PathBuf::from)
                        .ok_or_else(|| usage(format!("--output `{o}`: expected @path.npy")))
                })
                .collect::<pjrt_actors::Result<Vec<_>>>()?;
            // Inputs parse before anything is compiled.
            for text in inputs {
                read_input(text)?;
            }
            let client = open(cli)?;
            let exe = load_module(&client, module, *device)?;
            let inputs = inputs_for(&exe, inputs, false)?;
            let args = upload(&exe, &inputs)?;
            let refs: Vec<&pjrt_actors::Array> = args.iter().collect();
            let results = exe.execute(&refs)?;
            if output_paths.len() > results.len() {
                return Err(usage(format!(
                    "{} --output given; the module has {} outputs",
                    output_paths.len(),
                    results.len()
                )));
            }
            let host: Vec<HostData> = results
                .iter()
                .map(|r| {
                    Ok(HostData {
                        dtype: r.dtype(),
                        dims: r.dims().to_vec(),
                        bytes: r.to_bytes()?,
                    })
                })
                .collect::<pjrt_actors::Result<_>>()?;
            for (path, data) in output_paths.iter().zip(&host) {
                std::fs::write(path, write_npy(data)?)
                    .map_err(|e| usage(format!("writing {}: {e}", path.display())))?;
            }
            if *json {
                let items: Vec<String> = host
                    .iter()
                    .map(|h| {
                        format!(
                            "{{\"dtype\":\"{}\",\"shape\":{},\"data\":{}}}",
                            h.dtype,
                            serde_json::to_string(&h.dims).unwrap_or_default(),
                            json_values(h)
                        )
                    })
                    .collect();
                println!("{{\"outputs\":[{}]}}", items.join(","));
            } else {
                for (i, h) in host.iter().enumerate() {
                    let dims: Vec<String> = h.dims.iter().map(|d| d.to_string()).collect();
                    let ty = if dims.is_empty() {
                        h.dtype.to_string()
                    } else {
                        format!("{}x{}", dims.join("x"), h.dtype)
                    };
                    println!("result[{i}]: {ty}={}", json_values(h));
                }
            }
        }
        Command::Bench {
            module,
            inputs,
            threads,
            requests,
            duration,
        } => bench(cli, module, inputs, *threads, *requests, *duration)?,
        Command::CompileStress {
            modules,
            concurrency,
        } => compile_stress(cli, *modules, *concurrency)?,
        Command::Profile { out } => profile(cli, out)?,
    }
    Ok(())
}

fn bench(
    cli: &Cli,
    module: &PathBuf,
    inputs: &[String],
    threads: usize,
    requests: Option<u64>,
    duration: Option<f64>,
) -> pjrt_actors::Result<()> {
    if threads == 0 {
        return Err(usage("--threads must be at least 1".into()));
    }
    let client = open(cli)?;
    let devices = client.device_count();
    let per_device = (0..devices.min(threads))
        .map(|d| {
            let exe = load_module(&client, module, d as i32)?;
            let data = inputs_for(&exe, inputs, true)?;
            let args = upload(&exe, &data)?;
            Ok((exe, args))
        })
        .collect::<pjrt_actors::Result<Vec<_>>>()?;
    let deadline = duration.map(Duration::from_secs_f64);
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
    let histograms: Vec<hdrhistogram::Histogram<u64>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (exe, args) = &per_device[t % per_device.len()];
                let (issued, failed, bar) = (&issued, &failed, &bar);
                s.spawn(move || {
                    let mut h = hdrhistogram::Histogram::<u64>::new(3)
                        .expect("3 significant digits is valid");
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
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
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
    println!(
        "{} executes from {threads} threads over {} devices in {elapsed:.2} s",
        all.len(),
        per_device.len()
    );
    println!("throughput  {:.0} executes/s", all.len() as f64 / elapsed);
    println!(
        "latency us  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        us(0.5),
        us(0.9),
        us(0.99),
        all.max() as f64 / 1000.0
    );
    Ok(())
}

fn generated_module(i: usize) -> String {
    let n = 4 + i % 29;
    let m = 1 + i / 29;
    let t = format!("tensor<{n}x{m}xf32>");
    format!(
        "module @stress{i} {{\n  func.func public @main(%a: {t}, %b: {t}) -> {t} {{\n    %0 = stablehlo.multiply %a, %b : {t}\n    %1 = stablehlo.tanh %0 : {t}\n    %2 = stablehlo.add %1, %a : {t}\n    return %2 : {t}\n  }}\n}}\n"
    )
}

fn compile_stress(cli: &Cli, modules: usize, concurrency: usize) -> pjrt_actors::Result<()> {
    if concurrency == 0 {
        return Err(usage("--concurrency must be at least 1".into()));
    }
    let client = open(cli)?;
    let bar = indicatif::ProgressBar::new(modules as u64);
    let next = AtomicU64::new(0);
    let start = Instant::now();
    let errors: Vec<Error> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, bar, next) = (&client, &bar, &next);
                s.spawn(move || {
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
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    bar.finish_and_clear();
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = client.compile_cache_stats();
    println!(
        "{modules} modules compiled by {} compiler threads from {concurrency} submitters in {elapsed:.2} s ({:.1} modules/s)",
        client.compile_threads(),
        modules as f64 / elapsed
    );
    println!(
        "cache: {} compiles, {} memory hits, {} disk hits, {} joined in flight, {} misses",
        stats.compiles, stats.memory_hits, stats.disk_hits, stats.joined, stats.misses
    );
    Ok(())
}

/// A small workload: weights on every device, a few compiled programs, some results kept.
fn profile(cli: &Cli, out: &PathBuf) -> pjrt_actors::Result<()> {
    let client = open(cli)?;
    let mut keep = Vec::new();
    for device in client.devices() {
        keep.push(device.put(&vec![0.5f32; 256 * 256], &[256, 256])?);
        keep.push(device.put(&vec![1i32; 1024], &[1024])?);
    }
    let program = "module @square {\n  func.func public @main(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {\n    %0 = stablehlo.multiply %x, %x : tensor<256x256xf32>\n    return %0 : tensor<256x256xf32>\n  }\n}\n";
    let exe = client.compile_and_load(program, &CompileOptions::default())?;
    keep.extend(exe.execute(&[&keep[0]])?);
    let bytes = client.heap_profile()?;
    std::fs::write(out, &bytes).map_err(|e| usage(format!("writing {}: {e}", out.display())))?;
    println!(
        "wrote {} ({} bytes): {} arrays, 1 executable; open with `go tool pprof -http=: {}`",
        out.display(),
        bytes.len(),
        keep.len(),
        out.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.verbose > 0 {
        let level = if cli.verbose > 1 { "trace" } else { "debug" };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pjrt-actors: error: {e}");
            ExitCode::FAILURE
        }
    }
}
