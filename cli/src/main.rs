//! The `pjrt-actors` command line: look at what a PJRT plugin offers and run work on it.
//! Conventions follow IREE's `iree-run-module` / `iree-benchmark-module`; errors print one
//! line and exit non-zero.

#![forbid(unsafe_code)]

/// Prints a line to standard output; see [`print_line`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::common::print_line(format_args!($($arg)*)) };
}

mod bench;
mod cache;
mod common;
mod compile_stress;
mod conformance;
mod devices;
mod files;
mod generate;
mod inspect;
mod literal;
mod profile;
mod run;
mod serve;
mod text;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use common::GlobalArgs;
use pjrt_actors::Result;

#[derive(Parser)]
#[command(
    name = "pjrt-actors",
    version,
    about = "XLA PJRT plugins driven as actors"
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve models over the KServe v2 inference protocol (HTTP and gRPC; Triton's clients
    /// work), each on a dynamic batcher. Prints `listening http=HOST:PORT grpc=HOST:PORT` once
    /// serving; SIGTERM or SIGINT drains in-flight requests, then stops.
    Serve(serve::ServeArgs),
    /// Generate tokens from JAX's prefill, insert and decode exports (the KV cache resident
    /// and donated at each step), printing each token id as it is made.
    Generate(generate::GenerateArgs),
    /// Print a serialized jax.export artifact's signature: argument paths, types, shardings,
    /// platforms, effects, the arguments the module keeps, the calling convention.
    Inspect {
        artifact: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run StableHLO's interpreter test data on the plugin (each case's inputs and expected
    /// values from its file, a child process per run so an abort is reported, not fatal) and
    /// print a table by op and dtype.
    Conformance(conformance::ConformanceArgs),
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
        /// Give up after this many seconds (the program itself cannot be stopped; the command
        /// exits without waiting for it).
        #[arg(long)]
        timeout: Option<f64>,
        /// Partitions of an SPMD program, where the program does not say (it says its own as
        /// `mhlo.num_partitions`, in text and in JAX's bytecode). Inputs and outputs of an SPMD
        /// program are global arrays.
        #[arg(long)]
        partitions: Option<usize>,
        /// Weights for a jax.export artifact: a `.safetensors` (or `np.savez` `.npz`) file whose tensors name
        /// arguments by path (`layer0.w` for `[0][0]['layer0']['w']`); `--input`s give the rest.
        #[arg(long)]
        params: Option<PathBuf>,
    },
    /// Run a module from many threads and report throughput and latency percentiles.
    Bench(bench::BenchArgs),
    /// Run a small workload and write a heap profile (pprof) of what it left alive.
    Profile {
        /// Where to write the profile (open it with `go tool pprof -http=: FILE`).
        #[arg(long)]
        out: PathBuf,
    },
    /// Compile many distinct generated modules through the compiler pool; with `--processes`,
    /// the same modules in that many processes at once, to show a shared cache's effect.
    CompileStress {
        #[arg(long, default_value_t = 64)]
        modules: usize,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Processes, each with its own client, compiling the same modules at once.
        #[arg(long, default_value_t = 1)]
        processes: usize,
        /// The compile cache's Redis tier: redis://, rediss://, or redis+cluster://HOST:PORT,…
        /// (default: PJRT_ACTORS_CACHE_REDIS).
        #[arg(long)]
        cache_redis: Option<String>,
        /// Print one JSON line of this process's figures (how `--processes` gathers them).
        #[arg(long, hide = true)]
        report_json: bool,
    },
    /// The persistent compile cache's tiers: the disk directory and Redis.
    Cache {
        #[command(subcommand)]
        action: cache::CacheAction,
        /// The disk tier's directory (default: PJRT_ACTORS_CACHE_DIR).
        #[arg(long, global = true)]
        dir: Option<PathBuf>,
        /// The Redis tier's URL: redis://, rediss://, or redis+cluster://HOST:PORT,… for a
        /// cluster (default: PJRT_ACTORS_CACHE_REDIS).
        #[arg(long, global = true)]
        redis: Option<String>,
        /// The Redis tier's key namespace.
        #[arg(long, global = true, default_value = "pjrt-actors")]
        namespace: String,
    },
}

fn dispatch(cli: &Cli) -> Result<()> {
    let (command, cli) = (&cli.command, &cli.global);
    match command {
        Command::Devices { json } => devices::devices(cli, *json),
        Command::Conformance(args) => conformance::conformance(cli, args),
        Command::Inspect { artifact, json } => inspect::inspect(artifact, *json),
        Command::Serve(args) => serve::serve(cli, args),
        Command::Generate(args) => generate::generate(cli, args),
        Command::Run {
            module,
            inputs,
            device,
            json,
            outputs,
            timeout,
            partitions,
            params,
        } => run::run(
            cli,
            &run::RunSpec {
                module,
                inputs,
                device: *device,
                json: *json,
                outputs,
                timeout: *timeout,
                partitions: *partitions,
                params: params.as_deref(),
            },
        ),
        Command::Bench(args) => bench::bench(cli, args),
        Command::CompileStress {
            modules,
            concurrency,
            processes,
            cache_redis,
            report_json,
        } => compile_stress::compile_stress(
            cli,
            compile_stress::Stress {
                modules: *modules,
                concurrency: *concurrency,
                processes: *processes,
                cache_redis: cache_redis.clone(),
                report_json: *report_json,
            },
        ),
        Command::Cache {
            action,
            dir,
            redis,
            namespace,
        } => cache::cache(action, dir.clone(), redis.clone(), namespace),
        Command::Profile { out } => profile::profile(cli, out),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.global.verbose > 0 {
        let level = if cli.global.verbose > 1 {
            "trace"
        } else {
            "debug"
        };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    match dispatch(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Whose call failed (a source location) is for -v, not a user's error line.
            let e = match cli.global.verbose {
                0 => e.without_context(),
                _ => e,
            };
            eprintln!("pjrt-actors: error: {e}");
            ExitCode::FAILURE
        }
    }
}
