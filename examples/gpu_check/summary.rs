//! What the check's summary says about its steps: which did not pass, so that the check's exit
//! status says so.

/// The steps whose result says they did not pass: a process that failed or was killed, a
/// step not run, or a check that answered wrong (its text starts `failed`, `wrong`, `killed`,
/// `not run`, `not started`; `mismatches` above 0).
pub fn failed_steps(summary: &serde_json::Value) -> Vec<String> {
    let bad = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => {
            let s = s.to_ascii_lowercase();
            ["failed", "wrong", "killed", "not run", "not started"]
                .iter()
                .any(|w| s.starts_with(w))
        }
        _ => false,
    };
    let mut failed: Vec<String> = (summary.as_object().into_iter().flatten())
        .filter(|(k, v)| bad(v) || (k.as_str() == "mismatches" && v.as_u64().unwrap_or(0) > 0))
        .map(|(k, _)| k.clone())
        .collect();
    failed.sort();
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_step_that_did_not_pass_fails_the_check() {
        let summary = json!({
            "devices": 4,
            "dma": "failed: the bytes read back differ",
            "compile": "WRONG: off by 1e-2",
            "kserve": "ok: 64 answers",
            "nodes": "not supported by this plugin: num_nodes",
            "serve": "killed after 60s (time limit)",
            "mismatches": 2,
        });
        assert_eq!(
            failed_steps(&summary),
            ["compile", "dma", "mismatches", "serve"]
        );
        assert!(failed_steps(&json!({"devices": 4, "mismatches": 0, "kserve": "ok"})).is_empty());
    }
}
