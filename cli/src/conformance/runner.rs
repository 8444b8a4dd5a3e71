//! Runs the cases in a child process of this binary (`--child-from N`), one JSON line a case:
//! a case that aborts the plugin ends the child, is reported with the signal, and a new child
//! goes on from the next case; one that runs past its time is killed the same way.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use pjrt_actors::{Array, Client, CompileOptions, HostArray, Result};
use serde::{Deserialize, Serialize};

use super::Case;
use super::case::{op_and_dtype, prepare};
use super::compare::compare;
use crate::common::{GlobalArgs, open, usage};

/// The plugin the cases ran on, as the child that opened it reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginFacts {
    pub path: String,
    pub platform: String,
    pub api: String,
    pub stablehlo: String,
}

impl PluginFacts {
    pub fn of(client: &Client) -> Self {
        let (major, minor) = client.plugin_api_version();
        PluginFacts {
            path: client.plugin_path().display().to_string(),
            platform: client.platform().to_string(),
            api: format!("{major}.{minor}"),
            stablehlo: client.plugin_stablehlo_version(),
        }
    }
}

/// What one case came to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub index: usize,
    pub name: String,
    /// The case's op and dtype, from its name.
    pub op: String,
    pub dtype: String,
    /// The ops its `main` computes with, each with its result element type.
    pub op_types: Vec<(String, String)>,
    /// `pass`, `fail`, `compile_error`, `error`, `unsupported`, `aborted` or `timeout`.
    pub status: String,
    pub detail: String,
    pub mismatches: usize,
    pub elements: usize,
}

impl CaseResult {
    fn new(index: usize, case: &Case, status: &str, detail: String) -> Self {
        let (op, dtype) = op_and_dtype(&case.name);
        CaseResult {
            index,
            name: case.name.clone(),
            op,
            dtype,
            op_types: Vec::new(),
            status: status.into(),
            detail,
            mismatches: 0,
            elements: 0,
        }
    }
}

/// The child: opens the plugin (then a `{"ready":{facts}}` line), runs cases `from..`, a
/// `{"start":i}` line before each and its result's line after.
pub fn child(cli: &GlobalArgs, cases: &[Case], from: usize) -> Result<()> {
    let client = open(cli)?;
    // Ready, with the plugin's facts (the parent opens no plugin of its own): the case timeout
    // starts counting from here, not from the plugin's start-up.
    let ready = serde_json::json!({ "ready": PluginFacts::of(&client) });
    out!("{ready}");
    for (i, case) in cases.iter().enumerate().skip(from) {
        out!("{{\"start\":{i}}}");
        let result = run_case(&client, i, case);
        out!("{}", serde_json::to_string(&result).unwrap_or_default());
    }
    Ok(())
}

/// Compiles `text` for device 0 and runs it once on `inputs`.
fn run_program(
    client: &Client,
    text: &str,
    inputs: &[HostArray],
) -> std::result::Result<Vec<HostArray>, (&'static str, String)> {
    let options = CompileOptions {
        devices: Some(vec![0]),
        ..Default::default()
    };
    let exe = (client.compile_and_load(text.as_bytes(), &options))
        .map_err(|e| ("compile_error", e.to_string()))?;
    let run = || -> Result<Vec<HostArray>> {
        let args = crate::run::upload(&exe, inputs)?;
        let refs: Vec<&Array> = args.iter().collect();
        let results = exe.execute(&refs)?;
        results.iter().map(Array::to_host_array).collect()
    };
    run().map_err(|e| ("error", e.to_string()))
}

fn run_case(client: &Client, index: usize, case: &Case) -> CaseResult {
    let prepared = match prepare(&case.text) {
        Ok(p) => p,
        Err(why) => return CaseResult::new(index, case, "unsupported", why),
    };
    let mut result = CaseResult::new(index, case, "pass", String::new());
    result.op_types = pjrt_actors::known_defects::ops_used(prepared.program.as_bytes())
        .unwrap_or_default()
        .into_iter()
        .filter(|(op, _)| prepared.ops.contains(op))
        .fold(Vec::new(), |mut v, pair| {
            if !v.contains(&pair) {
                v.push(pair);
            }
            v
        });
    let inputs = match &prepared.inputs {
        Some(program) => match run_program(client, program, &[]) {
            Ok(values) => values,
            Err((status, why)) => {
                result.status = status.into();
                result.detail = format!("its inputs: {why}");
                return result;
            }
        },
        None => Vec::new(),
    };
    let outputs = match run_program(client, &prepared.program, &inputs) {
        Ok(outputs) => outputs,
        Err((status, why)) => {
            result.status = status.into();
            result.detail = why;
            return result;
        }
    };
    for (k, kind) in prepared.checks.iter().enumerate() {
        let (Some(actual), Some(expected)) = (outputs.get(2 * k), outputs.get(2 * k + 1)) else {
            result.status = "error".into();
            result.detail = format!(
                "{} outputs for {} checks",
                outputs.len(),
                prepared.checks.len()
            );
            return result;
        };
        match compare(*kind, actual, expected) {
            Ok(o) => {
                result.mismatches += o.mismatches;
                result.elements += o.elements;
                if let (Some(first), true) = (o.first, result.detail.is_empty()) {
                    result.status = "fail".into();
                    result.detail = format!(
                        "check {k} ({kind:?}): {} of {} elements differ; {first}",
                        o.mismatches, o.elements
                    );
                }
            }
            Err(why) => {
                result.status = "error".into();
                result.detail = why;
                return result;
            }
        }
    }
    result
}

/// How long a child may take to open the plugin before it is taken for broken.
const STARTUP_LIMIT: Duration = Duration::from_secs(300);

/// The last bytes of a child's stderr, kept for the report of a case that ended it.
const STDERR_TAIL: usize = 2048;

/// Runs every case in children of this binary, restarting past any case that ends one: each
/// case's result, and the plugin the first child reported. `as_written`: the cases compile as
/// written, known defects and all (no fix, no refusal).
pub fn run_all(
    cases: &[Case],
    timeout: Duration,
    as_written: bool,
) -> Result<(Vec<CaseResult>, PluginFacts)> {
    let exe = std::env::current_exe().map_err(|e| usage(format!("this binary: {e}")))?;
    let mut base: Vec<String> = std::env::args().skip(1).collect();
    // The child runs what the plugin is given, known defects too (clap refuses a flag twice).
    if as_written && !base.iter().any(|a| a == "--allow-known-defects") {
        base.push("--allow-known-defects".into());
    }
    let mut results: Vec<Option<CaseResult>> = vec![None; cases.len()];
    let (mut next, mut plugin) = (0, None);
    while next < cases.len() {
        let mut child = Command::new(&exe)
            .args(&base)
            .args(["--child-from", &next.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| usage(format!("cannot start a conformance child: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        // Drained from the start: a plugin's log lines must not fill the pipe and stall it.
        let tail = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = stderr.read_to_end(&mut all);
            let from = all.len().saturating_sub(STDERR_TAIL);
            String::from_utf8_lossy(&all[from..]).into_owned()
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (mut current, mut ready) = (None, false);
        loop {
            match rx.recv_timeout(if ready { timeout } else { STARTUP_LIMIT }) {
                Ok(line) => {
                    let value = serde_json::from_str::<serde_json::Value>(&line).ok();
                    let field = |k: &str| value.as_ref().and_then(|v| v.get(k).cloned());
                    if let Some(facts) = field("ready") {
                        ready = true;
                        plugin = plugin.or_else(|| serde_json::from_value(facts).ok());
                    } else if let Some(i) = field("start").and_then(|s| s.as_u64()) {
                        current = Some(i as usize);
                    } else if let Ok(r) = serde_json::from_str::<CaseResult>(&line) {
                        next = r.index + 1;
                        current = None;
                        if let Some(slot) = results.get_mut(r.index) {
                            *slot = Some(r);
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !ready => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(usage(format!(
                        "the conformance child did not open the plugin within {STARTUP_LIMIT:?}"
                    )));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let i = current.unwrap_or(next);
                    results[i] = Some(CaseResult::new(
                        i,
                        &cases[i],
                        "timeout",
                        format!("no answer within {timeout:?}; its child was killed"),
                    ));
                    next = i + 1;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().map_err(|e| usage(format!("{e}")))?;
                    let err = tail.join().unwrap_or_default();
                    match current {
                        Some(i) => {
                            results[i] = Some(CaseResult::new(
                                i,
                                &cases[i],
                                "aborted",
                                format!(
                                    "the plugin ended its process ({status}): {}",
                                    last_line(&err)
                                ),
                            ));
                            next = i + 1;
                        }
                        None if next < cases.len() => {
                            return Err(usage(format!(
                                "the conformance child ended ({status}) before case {next}: {}",
                                err.trim()
                            )));
                        }
                        None => {}
                    }
                    break;
                }
            }
        }
    }
    let plugin = plugin.ok_or_else(|| usage("no conformance child reported its plugin".into()))?;
    Ok((results.into_iter().flatten().collect(), plugin))
}

/// The last non-empty line of a child's stderr.
fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    line.chars().take(300).collect()
}
