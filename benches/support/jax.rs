//! JAX beside a benchmark: the pinned venvs (scripts/jax-venv), and a helper process that
//! answers one JSON line per request line, so its timed blocks interleave with ours.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// The python of a venv with jax `version`, made if missing; `Err` says why it cannot be.
pub fn venv(version: &str) -> Result<PathBuf, String> {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/jax-venv"))
        .arg(version)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    match out.status.success() {
        true => Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
    }
}

/// A running helper script: its first line is `hello`, then one answer per request.
pub struct JaxHelper {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    pub hello: Value,
}

impl JaxHelper {
    /// Starts `script` with `args` on JAX's CPU backend, without our XLA_FLAGS.
    pub fn start(python: &Path, script: &Path, args: &[&str]) -> JaxHelper {
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .env("JAX_PLATFORMS", "cpu")
            .env_remove("XLA_FLAGS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut helper = JaxHelper {
            child,
            input,
            output,
            hello: Value::Null,
        };
        helper.hello = helper.read();
        helper
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("the JAX helper said {line:?}: {e}"))
    }

    /// Sends one request line and reads its answer.
    pub fn ask(&mut self, request: &str) -> Value {
        writeln!(self.input, "{request}").unwrap();
        self.read()
    }

    /// The jax version the helper runs.
    pub fn version(&self) -> String {
        self.hello["jax"].as_str().unwrap_or("?").to_string()
    }
}

impl Drop for JaxHelper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
