//! `serve --api-key-file` and `--access-log` (issue 53) with real clients: curl, tritonclient's
//! HTTP and gRPC clients and OpenAI's own client. Without a key only the health and readiness
//! probes answer; with one, every route does; refusals are counted; and the access log has a
//! line for each request (JSON), with its model, status, sizes and a generation's tokens, and
//! never a key.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::server::{Server, http, openai_python, python_script, triton_script};
use serde_json::{Value, json};

const KEY: &str = "k3y-for-the-test-0123456789abcdef";

fn exported() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported")
}

/// A key file of two keys (the test's second), readable by its owner only.
fn key_file(mode: u32) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "pjrt-actors-api-keys-{}-{mode:o}",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!("# the test's keys\nanother-key-entirely\n\n{KEY}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn serve(extra: &[&str]) -> Result<Server, String> {
    let (dir, keys) = (exported(), key_file(0o600));
    let mut args = vec![
        "--model".to_string(),
        format!("lm={}", dir.join("serve/transformer.exported").display()),
        "--params".into(),
        format!("lm={}", dir.join("serve/transformer.safetensors").display()),
        "--generation".into(),
        format!("tm={}", dir.join("generate_text").display()),
        "--api-key-file".into(),
        keys.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::start(&args)
}

/// curl's status code and body for `path`, with `headers`.
fn curl(port: u16, path: &str, headers: &[&str]) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "-w",
        "\n%{http_code}",
        &format!("http://127.0.0.1:{port}{path}"),
    ]);
    for h in headers {
        c.args(["-H", h]);
    }
    let out = String::from_utf8(c.output().unwrap().stdout).unwrap();
    let (body, code) = out.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

fn bearer() -> String {
    format!("Authorization: Bearer {KEY}")
}

fn metric(port: u16, name: &str) -> f64 {
    let (status, body) = curl(port, "/metrics", &[&bearer()]);
    assert_eq!(status, 200);
    (body.lines())
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[test]
fn api_keys_guard_every_route_but_the_probes_and_the_access_log_has_each_request() {
    let mut server = serve(&["--access-log", "json"]).unwrap();
    let port = server.http;
    // curl: the probes open, the rest 401 in each protocol's shape, then answered with a key.
    for path in ["/v2/health/live", "/v2/health/ready", "/v2/models/lm/ready"] {
        assert_eq!(curl(port, path, &[]).0, 200, "{path}");
    }
    let (status, body) = curl(port, "/v2/models/lm", &[]);
    assert_eq!(status, 401, "{body}");
    assert!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("Bearer")
    );
    let (status, body) = curl(port, "/v1/models", &["Authorization: Bearer wrong"]);
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "invalid_api_key"
    );
    assert_eq!(
        curl(port, "/metrics", &[]).0,
        401,
        "metrics need the key by default"
    );
    let (status, body) = curl(port, "/v2/models/lm", &[&bearer()]);
    assert_eq!(
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap()["name"].clone()
        ),
        (200, json!("lm"))
    );
    let (status, body) = curl(port, "/v2/models/tm/generate", &[&bearer()]);
    assert_eq!(status, 405, "GET on a POST route, past the gate: {body}");
    let generate = http(
        port,
        "POST",
        "/v2/models/tm/generate",
        &[("Authorization", format!("Bearer {KEY}"))],
        json!({"text_input": "The", "max_tokens": 3})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(generate.0, 200, "{}", String::from_utf8_lossy(&generate.2));

    let npz = exported().join("serve/requests.npz").display().to_string();
    let triton = triton_script(
        "auth_clients.py",
        &[
            port.to_string(),
            server.grpc.to_string(),
            npz.clone(),
            KEY.into(),
            "tm".into(),
        ],
    );
    assert!(
        triton["checked"]["http infer with the key"] == 1,
        "{triton}"
    );
    let openai = python_script(
        &openai_python(),
        "auth_clients.py",
        &[
            port.to_string(),
            server.grpc.to_string(),
            npz,
            KEY.into(),
            "tm".into(),
            "openai".into(),
        ],
    );
    // Refused: 3 by curl, 12 by tritonclient (6 routes, no key and a wrong one), 3 by OpenAI's
    // client over HTTP; 10 by tritonclient over gRPC.
    let refused = |p: &str| {
        metric(
            port,
            &format!("pjrt_actors_server_unauthenticated_total{{protocol=\"{p}\"}}"),
        )
    };
    assert_eq!((refused("http"), refused("grpc")), (18.0, 10.0));

    server.terminate(Duration::from_secs(30));
    let log = server.stderr();
    assert!(!log.contains(KEY), "no key is ever written");
    let lines: Vec<Value> = (log.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "pjrt_actors::access")
        .collect();
    let find = |what: &str, pick: &dyn Fn(&Value) -> bool| -> Value {
        (lines.iter().find(|v| pick(v)).cloned())
            .unwrap_or_else(|| panic!("no line for {what} in {log}"))
    };
    let at = |v: &Value, k: &str| v[k].clone();
    let infer = find("an HTTP inference", &|v| {
        at(v, "route") == "/v2/models/lm/infer" && at(v, "status") == 200
    });
    assert_eq!(
        (
            at(&infer, "model"),
            at(&infer, "protocol"),
            at(&infer, "method")
        ),
        (json!("lm"), json!("http"), json!("POST"))
    );
    assert!(
        infer["request_bytes"].as_u64().unwrap() > 0 && infer["answer_bytes"].as_u64().unwrap() > 0,
        "{infer}"
    );
    assert!(
        infer["latency_us"].as_u64().is_some()
            && infer["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{infer}"
    );
    let refused_line = find("a refusal", &|v| {
        at(v, "route") == "/v2/models/lm" && at(v, "status") == 401
    });
    assert!(refused_line["answer_bytes"].as_u64().unwrap() > 0);
    let grpc = find("a gRPC inference", &|v| {
        at(v, "route") == "/inference.GRPCInferenceService/ModelInfer"
            && at(v, "grpc_status") == "0"
    });
    assert_eq!(
        (at(&grpc, "model"), at(&grpc, "protocol")),
        (json!("lm"), json!("grpc"))
    );
    find("a refused gRPC call", &|v| {
        at(v, "protocol") == "grpc" && at(v, "grpc_status") == "16"
    });
    let generated: Value = serde_json::from_slice(&generate.2).unwrap();
    let made = generated["output_ids"].as_array().unwrap().len() as u64;
    let gen_line = find("a generation", &|v| {
        at(v, "route") == "/v2/models/tm/generate" && at(v, "status") == 200
    });
    assert_eq!(
        (gen_line["tokens_out"].as_u64(), at(&gen_line, "finish")),
        (Some(made), generated["finish_reason"].clone())
    );
    assert!(gen_line["tokens_in"].as_u64().unwrap() >= 1, "{gen_line}");
    let completion = find("an OpenAI completion", &|v| {
        at(v, "route") == "/v1/completions" && at(v, "status") == 200
    });
    assert_eq!(
        (
            completion["tokens_in"].clone(),
            completion["tokens_out"].clone(),
            at(&completion, "model")
        ),
        (
            openai["checked"]["prompt_tokens"].clone(),
            openai["checked"]["completion_tokens"].clone(),
            json!("tm")
        )
    );
}

#[test]
fn public_metrics_open_only_metrics_and_a_bad_key_file_is_refused_at_start() {
    let server = serve(&["--public-metrics"]).unwrap();
    assert_eq!(curl(server.http, "/metrics", &[]).0, 200);
    assert_eq!(curl(server.http, "/v2", &[]).0, 401);
    drop(server);
    let world = key_file(0o644);
    let err = Server::start(&[
        "--model".into(),
        "x=y".into(),
        "--api-key-file".into(),
        world.display().to_string(),
    ])
    .err()
    .unwrap();
    assert!(err.contains("world-readable"), "{err}");
    let dir = exported();
    let err = Server::start(&[
        "--model".into(),
        format!("lm={}", dir.join("serve/transformer.exported").display()),
        "--public-metrics".into(),
    ])
    .err()
    .unwrap();
    assert!(
        err.contains("--public-metrics needs --api-key-file"),
        "{err}"
    );
}
