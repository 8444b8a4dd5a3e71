//! What `pjrt-actors serve` says when something is wrong: each refusal names the key it is
//! about, `--help` gives each flag its own text, an unknown model's answer lists what is served,
//! and a /generate for a batched model is not counted against that model (round-5 findings).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::server::{Scratch, Server, get, http, identity_program};

#[test]
fn help_gives_generation_and_params_each_its_own_text() {
    let o = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    let after = |flag: &str| {
        let lines: Vec<&str> = help.lines().collect();
        let at = (lines.iter())
            .position(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} missing: {help}"));
        lines[at + 1].trim().to_string()
    };
    assert!(
        after("--generation").starts_with("A generation model"),
        "{help}"
    );
    assert!(
        after("--params").starts_with("NAME=FILE: a model's weights"),
        "{help}"
    );
}

#[test]
fn config_refusals_name_the_key_and_value_at_fault() {
    let dir = Scratch::new("serve-messages-config");
    let model = dir.write("m.mlir", &identity_program("4x2", "f32"));
    for (config, says) in [
        (r#"{"max_batch_size": 0}"#, "max_batch_size is 0"),
        (
            r#"{"default_queue_policy": {"allow_timeout_override": "yes"}}"#,
            r#"allow_timeout_override is true or false, not "yes""#,
        ),
    ] {
        let path = dir.write("config.json", config);
        let err = Server::start(&[
            "--model".into(),
            format!("m={model}"),
            "--config".into(),
            format!("m={path}"),
        ])
        .err()
        .expect("refused");
        assert!(err.contains(says), "{config}: {err}");
        assert!(!err.contains("max_queued"), "{config}: {err}");
    }
}

fn generation_dir() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/exported/generate")
        .display()
        .to_string()
}

#[test]
fn a_generation_only_server_says_what_it_serves() {
    let server =
        Server::start(&["--generation".into(), format!("lm={}", generation_dir())]).unwrap();
    let (status, answer) = get(server.http, "/v2/models/nope");
    assert_eq!(status, 404);
    let says = common::server::message(&answer);
    assert!(
        says.contains("serves only generation models (lm)"),
        "{says}"
    );
    assert!(!says.ends_with("serves "), "{says}");
}

/// A /generate on a batched model is 404, counted under no model's statistics (it was a
/// failure in that model's own).
#[test]
fn a_generate_for_a_batched_model_is_not_counted_against_it() {
    let dir = Scratch::new("serve-messages-stats");
    let model = dir.write("m.mlir", &identity_program("4x2", "f32"));
    let server = Server::start(&[
        "--model".into(),
        format!("m={model}"),
        "--generation".into(),
        format!("lm={}", generation_dir()),
    ])
    .unwrap();
    let (status, _, _) = http(
        server.http,
        "POST",
        "/v2/models/m/generate",
        &[],
        br#"{"input_ids": [1]}"#,
    );
    assert_eq!(status, 404);
    let (status, stats) = get(server.http, "/v2/models/m/stats");
    assert_eq!(status, 200);
    let fail = &stats["model_stats"][0]["inference_stats"]["fail"]["count"];
    assert_eq!(fail, 0, "{stats}");
    let metrics = http(server.http, "GET", "/metrics", &[], b"").2;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        !metrics
            .lines()
            .any(|l| l.contains("model=\"m\"") && l.contains("not_found")),
        "{metrics}"
    );
}
