//! `pjrt-actors generate` end to end on JAX's prefill, insert and decode exports of a tiny
//! llama (tests/data/exported/generate): greedy tokens equal JAX's, printed as they come or as
//! one JSON object; sampling repeats with its seed; a bad prompt is one error line.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::error_line;
use serde_json::Value;

fn data(name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate");
    dir.join(name).display().to_string()
}

fn generate(extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .arg("generate")
        .args(["--prefill", &data("prefill_8.exported")])
        .args(["--prefill", &data("prefill_16.exported")])
        .args(["--insert", &data("insert.exported")])
        .args(["--decode", &data("decode.exported")])
        .args(["--params", &data("weights.safetensors")])
        .args(extra)
        .output()
        .unwrap()
}

fn joined(tokens: &[i64]) -> String {
    tokens
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn greedy_tokens_equal_jaxs_as_lines_and_as_json() {
    let greedy: Value =
        serde_json::from_slice(&std::fs::read(data("greedy.json")).unwrap()).unwrap();
    let (stop, max_new) = (greedy["stop"].to_string(), greedy["max_new"].to_string());
    let ints = |v: &Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap())
            .collect()
    };
    for case in greedy["cases"].as_array().unwrap().iter().take(6) {
        let (prompt, want) = (ints(&case["prompt"]), ints(&case["tokens"]));
        let base = [
            "--prompt",
            &joined(&prompt),
            "--max-tokens",
            &max_new,
            "--stop",
            &stop,
        ];
        let o = generate(&base);
        assert!(o.status.success(), "{}", error_line(&o));
        let lines: Vec<i64> = (String::from_utf8_lossy(&o.stdout).lines())
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(lines, want, "prompt {prompt:?}");
        let o = generate(&[&base[..], &["--json"]].concat());
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(ints(&v["tokens"]), want);
        let finish = if want.last() == Some(&0) {
            "stop"
        } else {
            "length"
        };
        assert_eq!(v["finish"], finish);
    }
}

#[test]
fn sampling_repeats_with_its_seed_and_bad_prompts_are_one_error_line() {
    let sampled = |seed: &str| {
        let o = generate(&[
            "--prompt",
            "5,6,7",
            "--max-tokens",
            "8",
            "--temperature",
            "1.2",
            "--top-k",
            "16",
            "--seed",
            seed,
            "--json",
        ]);
        assert!(o.status.success(), "{}", error_line(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["tokens"].clone()
    };
    assert_eq!(sampled("9"), sampled("9"));
    assert_eq!(sampled("9").as_array().unwrap().len(), 8);
    let o = generate(&["--prompt", &vec!["1"; 17].join(",")]);
    assert!(!o.status.success());
    assert!(
        error_line(&o).contains("1 to 16 tokens"),
        "{}",
        error_line(&o)
    );
    let o = generate(&["--prompt", "1", "--temperature", "0"]);
    assert!(!o.status.success());
    assert!(error_line(&o).contains("temperature"), "{}", error_line(&o));
}
