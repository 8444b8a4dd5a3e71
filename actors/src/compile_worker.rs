//! Compile crash isolation: a compile worker is a child process (the
//! `pjrt-actors-compile-worker` binary) that loads the same plugin, compiles, and hands back
//! the serialized executable. A program that crashes the compiler (a failed CHECK, a C++
//! exception, a stack overflow) kills the worker, not this process; it comes back as
//! `Error::CompilerCrashed` and the next compile starts a fresh worker.
//!
//! The protocol, over the worker's stdin and stdout: a request is the program and the
//! serialized `CompileOptionsProto`, each a little-endian u64 length then the bytes; an answer
//! is one status byte, then (0) the executable's serialized bytes, or (1) the plugin's error
//! code (u32) and its message, each length-prefixed.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::error::{Error, Result};
use crate::pjrt::NamedValue;

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

/// How to start a worker: its binary, the plugin, and the client's create options.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub binary: PathBuf,
    pub plugin: PathBuf,
    pub options: Vec<(String, NamedValue)>,
}

impl WorkerSpec {
    /// The command line: the plugin, then one `--option name=type:value` per create option.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command.arg("--plugin").arg(&self.plugin);
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

/// One running worker process, owned by one compiler actor.
pub struct CompileWorker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
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
            child,
            stdin,
            stdout,
        })
    }

    /// Compiles `code` with `options` in the worker; the executable comes back serialized.
    /// A worker that dies on the way is `Error::CompilerCrashed`, and is not to be used again.
    pub fn compile(&mut self, code: &[u8], options: &[u8]) -> Result<Vec<u8>> {
        let sent = write_frame(&mut self.stdin, code)
            .and_then(|()| write_frame(&mut self.stdin, options))
            .and_then(|()| self.stdin.flush());
        let answer = sent.and_then(|()| {
            let mut status = [0u8; 1];
            self.stdout.read_exact(&mut status)?;
            let first = read_frame(&mut self.stdout)?;
            match status[0] {
                0 => Ok(Ok(first)),
                _ => Ok(Err((first, read_frame(&mut self.stdout)?))),
            }
        });
        match answer {
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

    /// How the worker ended, once its pipe broke.
    fn crash(&mut self) -> Error {
        let _ = self.child.kill();
        match self.child.wait() {
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
        // Closing stdin ends the worker's loop; waiting reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
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
