//! What the command-line test files share: reading the one error line a failed command prints.
#![allow(dead_code)]

use std::process::Output;

/// The error line, without the plugin's own log lines; there must be exactly one.
pub fn error_line(o: &Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("pjrt-actors: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "exactly one error line: {stderr}");
    lines[0].to_string()
}

/// Whether the plugin the CLI finds speaks PJRT C API 0.115 or later, as `devices --json`
/// says: its CPU client refuses create options it does not know (0.81 ignores them).
pub fn new_abi() -> bool {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["devices", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["api_version"][1].as_i64().unwrap() >= 100
}
