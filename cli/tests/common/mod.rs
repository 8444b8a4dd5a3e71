//! What the command-line test files share: reading the one error line a failed command prints,
//! and (`server`) running `pjrt-actors serve` for the server tests.
#![allow(dead_code)]

pub mod server;

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
    api_minor() >= 100
}

/// Whether the CLI's plugin is the 0.115 CPU client, which refuses create options it does not
/// know (zml's 0.106 build and the 0.81 one ignore them and check `visible_devices` themselves).
pub fn strict_cpu_client() -> bool {
    api_minor() >= 115
}

/// The minor PJRT C API version of the plugin the CLI finds.
pub fn api_minor() -> i64 {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["devices", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["api_version"][1].as_i64().unwrap()
}

/// The values of `--json` output `k`.
pub fn json_output(v: &serde_json::Value, k: usize) -> Vec<f64> {
    (v["outputs"][k]["data"].as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The values of a float32 `.npy` file.
pub fn npy_values(path: &std::path::Path) -> Vec<f64> {
    let h = pjrt_actors::host_data::read_npy(&std::fs::read(path).unwrap()).unwrap();
    (h.bytes.chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
        .collect()
}
