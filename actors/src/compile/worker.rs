//! Compile crash isolation: a compile worker is a child process (the
//! `pjrt-actors-compile-worker` binary) that loads the same plugin, compiles, and hands back
//! the serialized executable. A program that crashes the compiler (a failed CHECK, a C++
//! exception, a stack overflow) kills the worker, not this process; it comes back as
//! `Error::CompilerCrashed` and the next compile starts a fresh worker.
//!
//! The protocol, over the worker's stdin and stdout: first the worker says whether it started
//! (`READY`, or `START_FAILED` and its reason, length-prefixed), having loaded the plugin and
//! made its client. Then a request is the program and the serialized `CompileOptionsProto`,
//! each a little-endian u64 length then the bytes; an answer is one status byte, then (0) the
//! executable's serialized bytes, or (1) the plugin's error code (u32) and its message, each
//! length-prefixed.
//!
//! Bounds: each compile has a time limit (a watchdog kills a worker past it, answered
//! `DeadlineExceeded`), the worker an address-space limit (`CompilerCrashed` when a compile
//! outgrows it), and a worker dies with the thread that started it (`PR_SET_PDEATHSIG`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lock_rank::{RankedMutex, WORKER_PROCESS};
use crate::pjrt::NamedValue;

/// The protocol the client and its worker speak, given to the worker as `--protocol`: a worker
/// binary of another build (a stale `PJRT_ACTORS_COMPILE_WORKER`) refuses it, or does not know
/// the flag, and exits at once, rather than leave the client waiting for a `READY` it never
/// sends.
pub const PROTOCOL: &str = "2";

/// The worker's first byte when it has loaded the plugin and made its client.
pub const READY: u8 = b'R';

/// The worker's first byte when it could not start; its reason follows, length-prefixed.
pub const START_FAILED: u8 = b'F';

/// The environment variable naming the compile worker binary.
pub const COMPILE_WORKER_ENV: &str = "PJRT_ACTORS_COMPILE_WORKER";

/// The worker binary's file name.
pub const COMPILE_WORKER_NAME: &str = "pjrt-actors-compile-worker";

/// Where the worker binary is, if anywhere: env `PJRT_ACTORS_COMPILE_WORKER` (an empty value
/// counts as unset), else beside the running executable (where cargo builds it).
pub fn find_worker() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(COMPILE_WORKER_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // Test and bench binaries live one folder below the others (`target/*/deps/`).
    [
        dir.join(COMPILE_WORKER_NAME),
        dir.join("..").join(COMPILE_WORKER_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The environment variable setting each worker compile's time limit, in seconds.
pub const COMPILE_TIMEOUT_ENV: &str = "PJRT_ACTORS_COMPILE_TIMEOUT";

/// The environment variable setting a worker's address-space limit (bytes; `K`, `M`, `G`
/// suffixes are powers of 1024).
pub const COMPILE_WORKER_MEMORY_ENV: &str = "PJRT_ACTORS_COMPILE_WORKER_MEMORY";

/// The default time limit of one compile in a worker: far past any real program's compile
/// (seconds to a few minutes), short of forever.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(600);

/// What bounds a worker: each compile's time, and its address space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerLimits {
    pub compile_timeout: Duration,
    /// `None`: no limit.
    pub memory_bytes: Option<u64>,
}

impl WorkerLimits {
    /// The default address-space limit: half the machine's memory, at least 4 GiB (the plugin
    /// maps about 1 GiB before it compiles anything).
    pub fn default_memory() -> Option<u64> {
        crate::client::config::machine_memory().map(|bytes| (bytes / 2).max(4 << 30))
    }
}

/// Parses a byte count with an optional `K`, `M` or `G` suffix (powers of 1024).
pub fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let (digits, scale) = match text.char_indices().last() {
        Some((i, 'K' | 'k')) => (&text[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&text[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    (digits.trim().parse::<u64>().ok())
        .and_then(|n| n.checked_mul(scale))
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!(
                "`{text}` is not a byte count above 0 (a whole number, optionally with K, M or G)"
            )
        })
}

/// Parses a time limit in seconds: finite, above 0, at most a year.
pub fn parse_seconds(text: &str) -> std::result::Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    time_limit(secs)
}

/// A number of seconds as a `Duration`: refused unless finite and from 1 ms to a year.
pub fn time_limit(secs: f64) -> std::result::Result<Duration, String> {
    const YEAR: f64 = 365.0 * 86_400.0;
    if !secs.is_finite() || secs <= 0.0 {
        Err(format!(
            "{secs} seconds: it must be a finite number above 0"
        ))
    } else if secs < 1e-3 {
        Err(format!("{secs} seconds is below the 1 ms this can time"))
    } else if secs > YEAR {
        Err(format!(
            "{secs} seconds is over a year; give at most {YEAR}"
        ))
    } else {
        Ok(Duration::from_secs_f64(secs))
    }
}

/// How to start a worker: its binary, the plugin, the client's create options and its limits.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub binary: PathBuf,
    pub plugin: PathBuf,
    pub options: Vec<(String, NamedValue)>,
    pub limits: WorkerLimits,
}

impl WorkerSpec {
    /// The command line: the plugin, this process (the parent it must die with), its memory
    /// limit, then one `--option name=type:value` per create option.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command.arg("--plugin").arg(&self.plugin);
        command.arg("--parent").arg(std::process::id().to_string());
        command.arg("--protocol").arg(PROTOCOL);
        if let Some(bytes) = self.limits.memory_bytes {
            command.arg("--memory-limit").arg(bytes.to_string());
        }
        for (name, value) in &self.options {
            command.arg("--option").arg(encode_option(name, value));
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        command
    }
}

/// `name=type:value`, the one text form of a create option that the worker parses back.
pub fn encode_option(name: &str, value: &NamedValue) -> String {
    let text = match value {
        NamedValue::Int64List(v) => v.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    };
    format!("{name}={}:{text}", value.type_name())
}

/// Parses `encode_option`'s form back (the worker's side).
pub fn decode_option(text: &str) -> std::result::Result<(String, NamedValue), String> {
    let (name, rest) = text.split_once('=').ok_or("expected name=type:value")?;
    let (ty, value) = rest.split_once(':').ok_or("expected name=type:value")?;
    let bad = || format!("option {name}: bad {ty} value `{value}`");
    let value = match ty {
        "int64" => NamedValue::Int64(value.parse().map_err(|_| bad())?),
        "float" => NamedValue::Float(value.parse().map_err(|_| bad())?),
        "bool" => NamedValue::Bool(value.parse().map_err(|_| bad())?),
        "string" => NamedValue::String(value.to_string()),
        "int64 list" => NamedValue::Int64List(
            (value.split(',').filter(|v| !v.is_empty()))
                .map(|v| v.parse().map_err(|_| bad()))
                .collect::<std::result::Result<_, _>>()?,
        ),
        other => return Err(format!("option {name}: unknown type `{other}`")),
    };
    Ok((name.to_string(), value))
}

/// A worker's answer: the serialized executable, or the plugin's error code and message.
type WorkerAnswer = std::result::Result<Vec<u8>, (Vec<u8>, Vec<u8>)>;

/// One running worker process, owned by one compiler actor.
pub struct CompileWorker {
    /// Shared with a compile's watchdog, which kills it past the time limit. It is reaped only
    /// after the watchdog has been joined, so its pid cannot be another process's by then.
    child: Arc<RankedMutex<Child>>,
    stdin: ChildStdin,
    stdout: ChildStdout,
    timeout: Duration,
    /// Its address-space limit, for what a failed start says.
    memory_limit: Option<u64>,
    /// Whether it has said it started.
    started: bool,
}

impl CompileWorker {
    /// Starts a worker.
    pub fn start(spec: &WorkerSpec) -> Result<Self> {
        let mut child = spec.command().spawn().map_err(|e| Error::ThreadSpawn {
            what: "compile worker process",
            reason: format!("{}: {e}", spec.binary.display()),
        })?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => unreachable!("both pipes were asked for"),
        };
        Ok(CompileWorker {
            child: Arc::new(RankedMutex::new(WORKER_PROCESS, child)),
            stdin,
            stdout,
            timeout: spec.limits.compile_timeout,
            memory_limit: spec.limits.memory_bytes,
            started: false,
        })
    }

    /// Compiles `code` with `options` in the worker; the executable comes back serialized.
    /// A worker that dies on the way is `Error::CompilerCrashed`, one past the time limit is
    /// killed and `Error::DeadlineExceeded`; neither is to be used again.
    pub fn compile(&mut self, code: &[u8], options: &[u8]) -> Result<Vec<u8>> {
        // The watchdog: killing the worker ends a blocked write or read on its pipes.
        let (done, cancelled) = mpsc::channel::<()>();
        let (child, timeout) = (self.child.clone(), self.timeout);
        let watchdog = std::thread::Builder::new()
            .name("pjrt-actors-compile-watchdog".into())
            .spawn(move || {
                let fired = cancelled.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout);
                if fired {
                    let _ = child.lock().kill();
                }
                fired
            })
            .map_err(|e| Error::ThreadSpawn {
                what: "compile watchdog",
                reason: e.to_string(),
            })?;
        // Its start is waited for under the same watchdog: a worker that hangs loading the
        // plugin is killed as one that hangs compiling.
        let answer = self.started().map(|()| self.exchange(code, options));
        drop(done);
        let fired = watchdog.join().unwrap_or(true);
        if fired {
            let _ = self.crash();
            return Err(Error::DeadlineExceeded {
                what: format!(
                    "a compile in a worker process (set {COMPILE_TIMEOUT_ENV} or ClientBuilder::compile_timeout for more)"
                ),
                after: timeout,
                killed: true,
            });
        }
        match answer? {
            Ok(Ok(executable)) => Ok(executable),
            Ok(Err((code, message))) => {
                let code = u32::from_le_bytes(code.try_into().unwrap_or([0; 4]));
                Err(Error::Pjrt {
                    function: "PJRT_Client_Compile (in a compile worker)",
                    code: crate::PjrtCode::from_raw(code),
                    message: String::from_utf8_lossy(&message).into_owned(),
                    context: None,
                })
            }
            Err(_) => Err(self.crash()),
        }
    }

    /// Waits for the worker to say it started, the first time. One that could not start is
    /// `Error::CompileWorkerStart`, with its own reason where it gave one: no program is to
    /// blame.
    fn started(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        let mut first = [0u8; 1];
        let said = match self.stdout.read_exact(&mut first) {
            Ok(()) if first[0] == READY => {
                self.started = true;
                return Ok(());
            }
            Ok(()) if first[0] == START_FAILED => read_frame(&mut self.stdout)
                .map(|m| String::from_utf8_lossy(&m).into_owned())
                .unwrap_or_default(),
            _ => String::new(),
        };
        // A worker that said why exits by itself at once: it is waited for, not killed, so
        // that its own exit is what is reported.
        let how = match self.ended(said.is_empty()) {
            Error::CompilerCrashed { how, .. } if how.starts_with("killed") => format!("was {how}"),
            Error::CompilerCrashed { how, .. } => how,
            other => other.to_string(),
        };
        let limit = match self.memory_limit {
            Some(bytes) => format!(
                "; its address space is limited to {bytes} bytes ({COMPILE_WORKER_MEMORY_ENV} or ClientBuilder::compile_worker_memory; 0 for no limit), and the plugin maps about 1 GiB to load"
            ),
            None => String::new(),
        };
        Err(Error::CompileWorkerStart {
            reason: match said.is_empty() {
                true => format!("it {how} before it was ready{limit}"),
                false => format!("{said} (it {how}){limit}"),
            },
        })
    }

    /// One request and its answer: the executable, or the plugin's code and message.
    fn exchange(&mut self, code: &[u8], options: &[u8]) -> std::io::Result<WorkerAnswer> {
        let sent = write_frame(&mut self.stdin, code)
            .and_then(|()| write_frame(&mut self.stdin, options))
            .and_then(|()| self.stdin.flush());
        sent.and_then(|()| {
            let mut status = [0u8; 1];
            self.stdout.read_exact(&mut status)?;
            let first = read_frame(&mut self.stdout)?;
            match status[0] {
                0 => Ok(Ok(first)),
                _ => Ok(Err((first, read_frame(&mut self.stdout)?))),
            }
        })
    }

    /// How the worker ended, once its pipe broke; under an address-space limit (whose failed
    /// allocations end it with status 127 or an abort) the limit is named with what to do.
    fn crash(&mut self) -> Error {
        let mut crashed = self.ended(true);
        if let (Error::CompilerCrashed { how, .. }, Some(bytes)) = (&mut crashed, self.memory_limit)
        {
            *how = format!(
                "{how}, under an address-space limit of {bytes} bytes that may be too small for this compile: raise {COMPILE_WORKER_MEMORY_ENV} or ClientBuilder::compile_worker_memory, 0 for no limit"
            );
        }
        crashed
    }

    /// How the worker ended: killed first, or (`kill` false) waited for as it exits.
    fn ended(&mut self, kill: bool) -> Error {
        let mut child = self.child.lock();
        if kill {
            let _ = child.kill();
        }
        match child.wait() {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                let signal = status.signal();
                let how = match (signal, status.code()) {
                    (Some(6), _) => {
                        "killed by SIGABRT: a failed check or an uncaught exception".into()
                    }
                    (Some(11), _) => "killed by SIGSEGV".into(),
                    (Some(s), _) => format!("killed by signal {s}"),
                    (None, Some(c)) => format!("exited with status {c}"),
                    (None, None) => "ended".into(),
                };
                Error::CompilerCrashed {
                    signal,
                    how,
                    context: None,
                }
            }
            Err(e) => Error::CompilerCrashed {
                signal: None,
                how: format!("could not be waited for: {e}"),
                context: None,
            },
        }
    }
}

impl Drop for CompileWorker {
    fn drop(&mut self) {
        // No watchdog outlives a compile, so nothing else holds the child now; waiting reaps it.
        let mut child = self.child.lock();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Writes one length-prefixed frame.
pub fn write_frame(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(&(bytes.len() as u64).to_le_bytes())?;
    w.write_all(bytes)
}

/// The largest frame either side accepts: a program or an executable of 4 GiB.
const MAX_FRAME: u64 = 4 << 30;

/// Reads one length-prefixed frame.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_survive_their_text_form() {
        let options = [
            ("cpu_device_count", NamedValue::Int64(8)),
            ("memory_fraction", NamedValue::Float(0.5)),
            ("preallocate", NamedValue::Bool(false)),
            ("platform_name", NamedValue::String("cpu:a=b".into())),
            ("visible_devices", NamedValue::Int64List(vec![0, 2, 3])),
            ("visible_devices", NamedValue::Int64List(vec![])),
        ];
        for (name, value) in options {
            let text = encode_option(name, &value);
            assert_eq!(
                decode_option(&text).unwrap(),
                (name.to_string(), value),
                "{text}"
            );
        }
        assert!(decode_option("cpu_device_count=int64:many").is_err());
    }

    #[test]
    fn limits_parse_and_say_what_would_be_right() {
        let bytes: [(&str, std::result::Result<u64, &str>); 6] = [
            ("1024", Ok(1024)),
            ("8G", Ok(8 << 30)),
            ("512m", Ok(512 << 20)),
            ("0", Err("above 0")),
            ("lots", Err("optionally with K, M or G")),
            ("99999999999G", Err("not a byte count")),
        ];
        for (text, want) in bytes {
            match (parse_bytes(text), want) {
                (Ok(n), Ok(w)) => assert_eq!(n, w, "{text}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
        let secs: [(f64, std::result::Result<f64, &str>); 6] = [
            (2.5, Ok(2.5)),
            (1e-12, Err("below the 1 ms")),
            (1e300, Err("over a year")),
            (0.0, Err("above 0")),
            (f64::NAN, Err("finite")),
            (-1.0, Err("above 0")),
        ];
        for (s, want) in secs {
            match (time_limit(s), want) {
                (Ok(d), Ok(w)) => assert_eq!(d.as_secs_f64(), w, "{s}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{s}: {e}"),
                (got, want) => panic!("{s}: got {got:?}, want {want:?}"),
            }
        }
        assert!(parse_seconds("ten").unwrap_err().contains("not a number"));
    }

    #[test]
    fn frames_round_trip_and_a_short_one_is_an_error() {
        let mut buffer = Vec::new();
        write_frame(&mut buffer, b"program").unwrap();
        write_frame(&mut buffer, b"").unwrap();
        let mut reader = &buffer[..];
        assert_eq!(read_frame(&mut reader).unwrap(), b"program");
        assert_eq!(read_frame(&mut reader).unwrap(), b"");
        assert!(read_frame(&mut &buffer[..10]).is_err());
    }
}
