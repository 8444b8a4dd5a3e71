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
