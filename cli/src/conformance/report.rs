//! What `conformance` prints: the plugin it ran on, a table by op and dtype with the cases that
//! did not pass spelled out, or all of it as JSON; and the known-defect lines it can write.

use std::collections::BTreeMap;

use pjrt_actors::known_defects::{KnownDefect, plugin_sha256};

use super::runner::{CaseResult, PluginFacts};

/// Counts by status.
#[derive(Default)]
struct Counts {
    by: BTreeMap<String, usize>,
    total: usize,
}

impl Counts {
    fn add(&mut self, status: &str) {
        *self.by.entry(status.to_string()).or_default() += 1;
        self.total += 1;
    }

    fn get(&self, status: &str) -> usize {
        self.by.get(status).copied().unwrap_or(0)
    }

    /// `aborted`, `timeout` and `error` together.
    fn other(&self) -> usize {
        self.get("aborted") + self.get("timeout") + self.get("error")
    }
}

const STATUSES: [&str; 7] = [
    "pass",
    "fail",
    "compile_error",
    "unsupported",
    "aborted",
    "timeout",
    "error",
];

fn summary(results: &[CaseResult]) -> Counts {
    let mut all = Counts::default();
    for r in results {
        all.add(&r.status);
    }
    all
}

/// The table: one row per op and dtype, then a summary, then every case that did not pass.
pub fn table(plugin: &PluginFacts, results: &[CaseResult]) -> Vec<String> {
    let mut rows: BTreeMap<(&str, &str), Counts> = BTreeMap::new();
    for r in results {
        rows.entry((&r.op, &r.dtype)).or_default().add(&r.status);
    }
    let mut out = vec![
        format!(
            "plugin {} (platform {}, PJRT {}, StableHLO {})",
            plugin.path, plugin.platform, plugin.api, plugin.stablehlo
        ),
        format!(
            "{:<28} {:<14} {:>5} {:>5} {:>5} {:>8} {:>6} {:>6}",
            "op", "dtype", "cases", "pass", "fail", "compile", "unsup", "other"
        ),
    ];
    for ((op, dtype), c) in &rows {
        out.push(format!(
            "{op:<28} {dtype:<14} {:>5} {:>5} {:>5} {:>8} {:>6} {:>6}",
            c.total,
            c.get("pass"),
            c.get("fail"),
            c.get("compile_error"),
            c.get("unsupported"),
            c.other()
        ));
    }
    let all = summary(results);
    let parts: Vec<String> = (STATUSES.iter())
        .filter(|s| all.get(s) > 0)
        .map(|s| format!("{} {s}", all.get(s)))
        .collect();
    out.push(format!(
        "summary: {} cases, {} op/dtype pairs: {}",
        all.total,
        rows.len(),
        parts.join(", ")
    ));
    for r in results
        .iter()
        .filter(|r| !matches!(r.status.as_str(), "pass" | "unsupported"))
    {
        out.push(format!("{} {}: {}", r.status, r.name, r.detail));
    }
    out
}

/// Everything as one JSON object.
pub fn json(plugin: &PluginFacts, results: &[CaseResult]) -> String {
    let all = summary(results);
    let summary: serde_json::Map<String, serde_json::Value> = (STATUSES.iter())
        .map(|s| (s.to_string(), all.get(s).into()))
        .collect();
    serde_json::json!({
        "plugin": plugin.path,
        "platform": plugin.platform,
        "pjrt_api": plugin.api,
        "stablehlo": plugin.stablehlo,
        "summary": summary,
        "cases": results,
    })
    .to_string()
}

/// The known-defect table's lines for the failing cases that run one op: one per (op, result
/// dtype) of that op, the first failing case naming it.
pub fn defect_lines(plugin: &PluginFacts, results: &[CaseResult], right_on: &str) -> Vec<String> {
    let sha = plugin_sha256(std::path::Path::new(&plugin.path)).unwrap_or_default();
    let mut lines = Vec::new();
    let mut seen = Vec::new();
    for r in results.iter().filter(|r| r.status == "fail") {
        let ops: Vec<&String> = r.op_types.iter().map(|(op, _)| op).collect();
        if ops.is_empty() || ops.iter().any(|o| *o != ops[0]) {
            continue; // more than one op: which one is wrong is not known
        }
        for (op, dtype) in &r.op_types {
            if seen.contains(&(op, dtype)) {
                continue;
            }
            seen.push((op, dtype));
            let line = KnownDefect {
                platform: plugin.platform.clone(),
                pjrt_api: plugin.api.clone(),
                stablehlo: plugin.stablehlo.clone(),
                plugin_sha256: sha.clone(),
                op: op.clone(),
                dtype: dtype.clone(),
                case: r.name.clone(),
                right_on: right_on.to_string(),
                fix: String::new(),
            }
            .to_line();
            lines.push(line);
        }
    }
    lines
}
