//! A generation model is a model on every endpoint a model has, over HTTP and gRPC, as Triton's
//! own clients read them (readiness, metadata, config with `decoupled`, statistics, a version it
//! lacks refused); and `ModelStreamInfer` reads a request as the HTTP generate routes do: the
//! same parameters, `stop` included, each refusal naming its request, every request counted.

mod common;

use std::path::PathBuf;

use common::server::{Scratch, Server, http, identity_program, triton_script};
use serde_json::{Value, json};

fn exported() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported")
}

/// The first of JAX's greedy cases whose second token differs from its first and that makes
/// at least four tokens: stopping on its second token gives two tokens, "stop".
fn stoppable_case() -> (Vec<i64>, Vec<i64>) {
    let greedy: Value =
        serde_json::from_slice(&std::fs::read(exported().join("generate/greedy.json")).unwrap())
            .unwrap();
    let ids = |v: &Value| -> Vec<i64> {
        (v.as_array().unwrap().iter())
            .map(|t| t.as_i64().unwrap())
            .collect()
    };
    (greedy["cases"].as_array().unwrap().iter())
        .map(|c| (ids(&c["prompt"]), ids(&c["tokens"])))
        .find(|(_, t)| t.len() >= 4 && t[1] != t[0])
        .unwrap()
}

/// `v` with every string that is a whole number written as the number: protobuf's JSON, which
/// tritonclient.grpc's `as_json` answers give, writes 64-bit integers (shapes, dims) as strings.
fn numbers(v: &Value) -> Value {
    match v {
        Value::String(s) => s.parse::<i64>().map_or_else(|_| v.clone(), Value::from),
        Value::Array(a) => Value::Array(a.iter().map(numbers).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), numbers(v))).collect()),
        _ => v.clone(),
    }
}

/// A counter of `/metrics` with these labels, 0 when absent.
fn counted(port: u16, family: &str, labels: &str) -> f64 {
    let (status, _, body) = http(port, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let prefix = format!("{family}{{{labels}}} ");
    (String::from_utf8(body).unwrap().lines())
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0.0)
}

#[test]
fn a_generation_model_is_a_model_on_every_endpoint_and_both_protocols_read_it_alike() {
    let dir = exported();
    let scratch = Scratch::new("generate-endpoints");
    let batched = scratch.write("id.mlir", &identity_program("4x2", "f32"));
    let server = Server::start(&[
        "--generation".into(),
        format!("lm={}", dir.join("generate").display()),
        "--model".into(),
        format!("id={batched}"),
    ])
    .unwrap();
    let (prompt, tokens) = stoppable_case();
    let prompt_text: Vec<String> = prompt.iter().map(|t| t.to_string()).collect();
    let seen = triton_script(
        "generation_endpoints.py",
        &[
            server.http.to_string(),
            server.grpc.to_string(),
            "lm".into(),
            prompt_text.join(","),
            tokens[1].to_string(),
        ],
    );
    assert_eq!(seen["ready"], json!([true, true, true, true]), "{seen}");
    // Metadata: the prompt's ids in, a token's ids out, the same over both protocols.
    let ids = |name: &str| json!({"name": name, "datatype": "INT32", "shape": [-1]});
    for key in ["metadata_http", "metadata_grpc"] {
        let m = &numbers(&seen[key]);
        assert_eq!(m["name"], "lm", "{key}: {m}");
        assert_eq!(m["versions"], json!([1]), "{key}: {m}");
        assert_eq!(m["platform"], "pjrt_generate", "{key}: {m}");
        assert_eq!(m["inputs"], json!([ids("input_ids")]), "{key}: {m}");
        assert_eq!(m["outputs"], json!([ids("output_ids")]), "{key}: {m}");
    }
    // Config: Triton's decoupled model, unbatched at the protocol.
    for key in ["config_http", "config_grpc"] {
        let c = &numbers(&seen[key]);
        assert_eq!(c["name"], "lm", "{key}: {c}");
        assert_eq!(
            c["model_transaction_policy"]["decoupled"], true,
            "{key}: {c}"
        );
        assert_eq!(c["input"][0]["name"], "input_ids", "{key}: {c}");
        assert_eq!(c["input"][0]["data_type"], "TYPE_INT32", "{key}: {c}");
        assert_eq!(c["output"][0]["name"], "output_ids", "{key}: {c}");
        // gRPC's JSON leaves out fields at their default: max_batch_size 0 among them.
        assert!(c.get("max_batch_size").is_none_or(|b| b == 0), "{key}: {c}");
        assert!(c.get("dynamic_batching").is_none(), "{key}: {c}");
    }
    for key in ["config_http", "config_grpc"] {
        assert_eq!(
            numbers(&seen[key]["input"][0]["dims"]),
            json!([-1]),
            "{seen}"
        );
    }
    assert_eq!(seen["every_model"], json!(["id", "lm"]), "{seen}");
    // Triton's repository index lists both kinds, ready, over both protocols.
    let index = json!([["id", "READY"], ["lm", "READY"]]);
    assert_eq!(seen["index_http"], index, "{seen}");
    assert_eq!(seen["index_grpc"], index, "{seen}");
    assert_eq!(seen["ready_version_2_http"], false, "{seen}");
    let (status, _, body) = http(
        server.http,
        "GET",
        "/v2/models/lm/versions/2/ready",
        &[],
        b"",
    );
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("no version `2`"));
    assert_eq!(seen["version_2"].as_array().unwrap().len(), 7, "{seen}");
    for r in seen["version_2"].as_array().unwrap() {
        assert!(r.as_str().unwrap().contains("no version `2`"), "{seen}");
    }

    // The stream: a stop list as a string and a single id both end the sequence at its stop
    // token (the stop token is the last one streamed), as HTTP's stop list does.
    let s = &seen["stream"];
    for id in ["stopped", "one-stop"] {
        assert_eq!(s[id]["tokens"], json!(tokens[..2]), "{id}: {s}");
        assert_eq!(s[id]["finish"], "stop", "{id}: {s}");
        assert_eq!(s[id]["error"], "", "{id}: {s}");
    }
    let body = json!({"input_ids": prompt, "max_tokens": 12, "stop": [tokens[1]]});
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/lm/generate",
        &[("Content-Type", "application/json".into())],
        body.to_string().as_bytes(),
    );
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["output_ids"], s["stopped"]["tokens"], "{answer}");
    // Each refusal carries its request's id and model, so a client can tell which failed.
    for (id, says) in [
        ("unknown", "unknown field `beam_width`"),
        ("version", "no version `2`"),
        ("two-contents", "int64_contents holds"),
    ] {
        let e = s[id]["error"].as_str().unwrap();
        assert!(e.contains(says), "{id}: {s}");
        assert_eq!(s[id]["model"], "lm", "{id}: {s}");
        assert_eq!(s[id]["tokens"], json!([]), "{id}: {s}");
    }
    // Every stream request is counted under gRPC: two answered, three refused.
    let family = "pjrt_actors_server_requests_total";
    let grpc = |outcome: &str| format!("model=\"lm\",protocol=\"grpc\",outcome=\"{outcome}\"");
    assert_eq!(counted(server.http, family, &grpc("ok")), 2.0);
    assert_eq!(
        counted(server.http, family, &grpc("invalid"))
            + counted(server.http, family, &grpc("not_found")),
        3.0
    );
    // Triton's statistics count them too, over both protocols.
    let (status, _, stats) = http(server.http, "GET", "/v2/models/lm/stats", &[], b"");
    assert_eq!(status, 200);
    let stats: Value = serde_json::from_slice(&stats).unwrap();
    let s = &stats["model_stats"][0];
    assert_eq!(s["inference_stats"]["success"]["count"], 3, "{stats}");
    assert_eq!(s["inference_stats"]["fail"]["count"], 3, "{stats}");
    assert_eq!(s["inference_count"], 3, "{stats}");
    assert!(s["last_inference"].as_u64().unwrap() > 0, "{stats}");
    // The versioned generate routes exist, and refuse a version the model lacks.
    for (version, want) in [("1", 200), ("2", 404)] {
        let (status, _, _) = http(
            server.http,
            "POST",
            &format!("/v2/models/lm/versions/{version}/generate"),
            &[("Content-Type", "application/json".into())],
            br#"{"input_ids": [5, 6, 7], "max_tokens": 2}"#,
        );
        assert_eq!(status, want, "version {version}");
    }
}
