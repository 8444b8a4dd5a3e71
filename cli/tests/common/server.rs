//! `pjrt-actors serve` as the server tests run it: started on free loopback ports, raw HTTP/1.1
//! exchanges with it, tritonclient's Python for gRPC, and small MLIR models written to a
//! temporary folder.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/serve")
}

pub fn at(name: &str) -> String {
    data().join(name).display().to_string()
}

/// A running server and its ports; killed when dropped.
pub struct Server {
    pub child: Child,
    pub http: u16,
    pub grpc: u16,
    /// The server's stderr, read from its start by a thread of its own: a server that writes
    /// more than a pipe holds (a plugin's log lines on every executable it loads) must not
    /// block on a reader that only looks once the server ended.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// Starts `serve` with `args` on free ports and waits for its `listening` line; its
    /// stderr, if it ends first.
    pub fn start(args: &[String]) -> Result<Server, String> {
        Server::start_with(args, &[])
    }

    /// As `start`, with environment variables set.
    pub fn start_with(args: &[String], env: &[(&str, &str)]) -> Result<Server, String> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"));
        command.arg("serve").args(args);
        if !args.iter().any(|a| a == "--http-port") {
            command.args(["--http-port", "0", "--grpc-port", "0"]);
        }
        let child = command
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Server::from_child(child)
    }

    /// A server process already spawned with its stdout and stderr piped (`serve`, or another
    /// that prints `listening http=… grpc=…` as `serve` does), once it has printed that line;
    /// its stderr, if it ends first.
    pub fn from_child(mut child: Child) -> Result<Server, String> {
        let mut err_pipe = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut err = Vec::new();
            let _ = err_pipe.read_to_end(&mut err);
            String::from_utf8_lossy(&err).into_owned()
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let Some(Ok(line)) = lines.next() else {
            let _ = child.wait();
            return Err(stderr.join().unwrap_or_default());
        };
        let port = |key: &str| -> u16 {
            let at = line.find(key).unwrap_or_else(|| panic!("{line}")) + key.len();
            let addr = line[at..].split_whitespace().next().unwrap();
            addr.rsplit(':').next().unwrap().parse().unwrap()
        };
        assert!(line.starts_with("listening http="), "{line}");
        Ok(Server {
            http: port("http="),
            grpc: port("grpc="),
            child,
            stderr: Some(stderr),
        })
    }

    /// The exported transformer with its weights, and `extra` flags.
    pub fn transformer(extra: &[&str]) -> Server {
        let mut args = vec![
            "--model".to_string(),
            format!("lm={}", at("transformer.exported")),
            "--params".into(),
            format!("lm={}", at("transformer.safetensors")),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::start(&args).unwrap_or_else(|e| panic!("serve: {e}"))
    }

    /// Everything the server wrote to stderr, once it has ended (`terminate` first).
    pub fn stderr(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.stderr.take())
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the server to exit, at most `limit` (past it, the test
    /// fails): its status, and how long it took.
    pub fn terminate(
        &mut self,
        limit: std::time::Duration,
    ) -> (std::process::ExitStatus, std::time::Duration) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, start.elapsed());
            }
            assert!(
                start.elapsed() < limit,
                "still running {limit:?} after SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// A line of the server's `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`).
    fn status_bytes(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }

    /// Starts measuring the server's peak resident memory afresh (Linux's `clear_refs` 5
    /// resets `VmHWM` to the present RSS); the RSS now.
    pub fn reset_peak_rss(&self) -> u64 {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").unwrap();
        self.status_bytes("VmRSS:")
    }

    /// The server's resident memory high-water mark since the last reset, in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP answer: status, headers lowercased, body.
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// Reads one HTTP/1.1 answer to its end (the connection closes after it).
pub fn read_answer(s: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_answer(&raw)
}

pub fn parse_answer(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = (lines.filter_map(|l| l.split_once(':')))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, raw[split + 4..].to_vec())
}

/// One HTTP/1.1 exchange on a connection of its own.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    s.write_all(head.as_bytes()).unwrap();
    // A server that answers before reading the whole body may close early: the answer counts.
    let _ = s.write_all(body);
    read_answer(&mut s)
}

pub fn get(port: u16, path: &str) -> (u16, Value) {
    let (status, _, body) = http(port, "GET", path, &[], b"");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

pub fn infer_json(port: u16, model: &str, body: &Value) -> (u16, Value) {
    infer_text(port, model, &body.to_string())
}

pub fn infer_text(port: u16, model: &str, body: &str) -> (u16, Value) {
    let (status, _, body) = http(
        port,
        "POST",
        &format!("/v2/models/{model}/infer"),
        &[],
        body.as_bytes(),
    );
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The error message of a refused answer.
pub fn message(v: &Value) -> String {
    v["error"].as_str().unwrap_or_default().to_string()
}

/// A folder of its own under the temporary directory, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pjrt-actors-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `text` to `name` in the folder; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An MLIR program answering its one input unchanged: `tensor<ROWSxDIMSxTY>`.
pub fn identity_program(rows_and_dims: &str, ty: &str) -> String {
    format!(
        "func.func @main(%x: tensor<{rows_and_dims}x{ty}>) -> tensor<{rows_and_dims}x{ty}> {{\n  return %x : tensor<{rows_and_dims}x{ty}>\n}}\n"
    )
}

/// The python of the venv `script` (in scripts/) makes and prints, asked once per test process.
fn venv_python(script: &str, cell: &'static std::sync::OnceLock<String>) -> String {
    cell.get_or_init(|| {
        let o = Command::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scripts")
                .join(script),
        )
        .output()
        .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    })
    .clone()
}

/// The python of the venv holding tritonclient (scripts/triton-venv makes it).
pub fn triton_python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    venv_python("triton-venv", &PYTHON)
}

/// The python of the venv holding OpenAI's client (scripts/openai-venv makes it).
pub fn openai_python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    venv_python("openai-venv", &PYTHON)
}

/// Runs `script` (in cli/tests/data) with `args` on tritonclient's venv, checks it succeeded,
/// and returns the JSON object of its last line.
pub fn triton_script(script: &str, args: &[String]) -> Value {
    python_script(&triton_python(), script, args)
}

/// Runs `script` (in cli/tests/data) with `args` on `python`, checks it succeeded, and returns
/// the JSON of its last line.
pub fn python_script(python: &str, script: &str, args: &[String]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(script);
    // The scripts import their shared checks.py; no __pycache__ is left in the source tree.
    let o = Command::new(python)
        .arg(script)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// Runs cli/tests/data/grpc_cases.py against the server's gRPC port: one JSON answer per case
/// (`code`, `message`, and the outputs of a success).
pub fn grpc_cases(server: &Server, cases: &Value) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/grpc_cases.py");
    let mut child = Command::new(triton_python())
        .arg(script)
        .arg(server.grpc.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(cases.to_string().as_bytes()).unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    out.as_array().unwrap().clone()
}
