//! What every subcommand shares: the global flags and the client they open, usage errors,
//! output lines and worker threads. The crate root only parses and dispatches, so no
//! subcommand reaches back into it.

use std::path::PathBuf;

use pjrt_actors::{Client, Error, Result};

/// The flags every subcommand takes.
#[derive(clap::Args)]
pub struct GlobalArgs {
    /// The PJRT plugin file (default: PJRT_PLUGIN_PATH, then the bootstrap folder, then
    /// xla_plugins/ in Python's site-packages).
    #[arg(long, global = true)]
    pub plugin: Option<PathBuf>,
    /// Number of CPU devices the CPU plugin creates.
    #[arg(long, global = true)]
    pub cpu_devices: Option<i64>,
    /// A plugin create option, NAME=VALUE, typed by the known options (`preallocate=false`,
    /// `memory_fraction=0.5`, `allocator=platform`, `visible_devices=0,1`); repeatable.
    #[arg(long = "option", global = true)]
    pub options: Vec<String>,
    /// Compile programs as written where they use an op this plugin build is known to compute
    /// wrong (by default such a program gets the compile options that avoid the defect, or,
    /// with none known, is refused naming a plugin that computes it right).
    #[arg(long, global = true)]
    pub allow_known_defects: bool,
    /// Print tracing output (RUST_LOG refines it).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Writes one line to standard output. When the reader has gone (`pjrt-actors run … | head`),
/// the command exits at once and quietly, as command-line tools do, instead of panicking.
pub fn print_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{args}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("pjrt-actors: error: writing the output: {e}");
        std::process::exit(1);
    }
}

/// The most worker threads `bench` and `compile-stress` start: past this they measure the
/// scheduler, not the runtime, and the system may refuse the threads.
pub const MAX_WORKERS: usize = 1024;

/// Checks a worker-thread count flag.
pub fn worker_count(flag: &str, n: usize) -> Result<usize> {
    if n == 0 || n > MAX_WORKERS {
        return Err(usage(format!(
            "{flag} must be between 1 and {MAX_WORKERS}, got {n}"
        )));
    }
    Ok(n)
}

/// Starts a scoped worker thread; a thread the system refuses is an error, not an abort.
pub fn spawn_worker<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    f: impl FnOnce() -> T + Send + 'scope,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>> {
    std::thread::Builder::new()
        .spawn_scoped(scope, f)
        .map_err(|e| usage(format!("cannot start a worker thread: {e}")))
}

/// Opens the client every subcommand uses. Compiles run in worker processes when the
/// `pjrt-actors-compile-worker` binary is beside this one (cargo builds both) or named by
/// `PJRT_ACTORS_COMPILE_WORKER`: a program that crashes the compiler then ends with an error
/// line instead of taking the command down (1.03x the compile time, measured).
pub fn open(cli: &GlobalArgs) -> Result<Client> {
    open_with(cli, None)
}

/// `open`, with the compile cache's Redis tier at `redis` when given.
pub fn open_with(cli: &GlobalArgs, redis: Option<&str>) -> Result<Client> {
    let mut builder = Client::builder().compile_in_worker_if_found();
    if let Some(url) = redis {
        builder = builder.compile_cache_redis(url);
    }
    if let Some(path) = &cli.plugin {
        builder = builder.plugin_path(path);
    }
    if let Some(n) = cli.cpu_devices {
        builder = builder.cpu_device_count(n);
    }
    if cli.allow_known_defects {
        builder = builder.allow_known_defects(true);
    }
    for text in &cli.options {
        let (name, value) = text
            .split_once('=')
            .ok_or_else(|| usage(format!("--option `{text}`: expected NAME=VALUE")))?;
        builder = builder
            .option_text(name.trim(), value)
            .map_err(|e| usage(format!("--option `{text}`: {}", e.detail())))?;
    }
    builder.open()
}

pub fn usage(message: String) -> Error {
    Error::InvalidArgument(message)
}
