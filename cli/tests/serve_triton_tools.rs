//! Triton's own tools against `pjrt-actors serve`: perf_analyzer (installed by
//! scripts/perf-analyzer) measures the exported transformer over HTTP and gRPC and reports the
//! server's breakdown from our statistics; a model config renames the tensors Triton's config
//! and inference see.

mod common;

use std::path::Path;
use std::process::Command;

use common::server::{Scratch, Server, get, infer_json};
use serde_json::json;

/// perf_analyzer's report of one concurrency: client throughput, and the server's request
/// count and average phases (µs) as it read them from the statistics endpoint.
#[derive(Debug)]
struct Report {
    throughput: f64,
    server_inferences: u64,
    latency_us: u64,
    queue_us: u64,
    compute_infer_us: u64,
}

/// The number after `key` in `text` (perf_analyzer's report, or one section of it).
fn number_after(text: &str, key: &str) -> f64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no `{key}` in:\n{text}"))
        + key.len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("`{key}` is not followed by a number:\n{text}"))
}

/// perf_analyzer's report on model `lm` at `url` over `protocol`, `concurrency` in flight,
/// with `extra` arguments; it must succeed.
fn perf_analyzer_text(url: &str, protocol: &str, concurrency: &str, extra: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/perf-analyzer");
    let o = Command::new(script)
        .args(["-m", "lm", "-u", url, "-i", protocol])
        .args([
            "--measurement-interval",
            "500",
            "--concurrency-range",
            concurrency,
        ])
        // Any three windows do: this checks what it reports, not how steady the machine is.
        .args(["--stability-percentage", "1000"])
        .args(extra)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

fn perf_analyzer(url: &str, protocol: &str) -> Report {
    let text = perf_analyzer_text(url, protocol, "4", &[]);
    // The server's breakdown is its own section (`Server:`), its phases one `+`-joined list:
    // `(overhead N usec + queue N usec + compute input N usec + compute infer N usec + ...)`.
    let server = &text[text
        .find("Server:")
        .unwrap_or_else(|| panic!("no server section:\n{text}"))..];
    let phases = &server[server
        .find("(overhead")
        .unwrap_or_else(|| panic!("no server breakdown:\n{server}"))..];
    Report {
        throughput: number_after(&text, "Throughput:"),
        server_inferences: number_after(server, "Inference count:") as u64,
        latency_us: number_after(server, "Avg request latency:") as u64,
        queue_us: number_after(phases, "+ queue") as u64,
        compute_infer_us: number_after(phases, "+ compute infer") as u64,
    }
}

#[test]
fn perf_analyzer_measures_serve_over_http_and_grpc_with_the_servers_breakdown() {
    let server = Server::transformer(&[]);
    for (port, protocol) in [(server.http, "http"), (server.grpc, "grpc")] {
        let r = perf_analyzer(&format!("127.0.0.1:{port}"), protocol);
        // It ran requests, read the statistics before and after, and split the server's time:
        // each request queued and computed, inside the whole the server measured.
        assert!(r.throughput > 100.0, "{protocol}: {r:?}");
        assert!(r.server_inferences > 100, "{protocol}: {r:?}");
        assert!(r.compute_infer_us > 0, "{protocol}: {r:?}");
        assert!(
            r.latency_us >= r.compute_infer_us + r.queue_us,
            "{protocol}: {r:?}"
        );
    }
}

/// A generation model, found as Triton's decoupled model: perf_analyzer streams requests to it
/// over gRPC with no version named (it picks the version whose queue count grew, so the
/// statistics must count each request's wait for a slot), and reads the server's side.
#[test]
fn perf_analyzer_streams_to_a_generation_model_and_reads_its_statistics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate");
    let server = Server::start(&["--generation".into(), format!("lm={}", dir.display())]).unwrap();
    let scratch = Scratch::new("perf-analyzer-generate");
    let input = scratch.write(
        "in.json",
        &json!({"data": [{"input_ids": {"content": [5, 6, 7], "shape": [3]}, "max_tokens": [4]}]})
            .to_string(),
    );
    let url = format!("127.0.0.1:{}", server.grpc);
    let text = perf_analyzer_text(&url, "grpc", "2", &["--streaming", "--input-data", &input]);
    assert!(text.contains("Detected decoupled model"), "{text}");
    let server_side = &text[text.find("Server:").unwrap_or_else(|| panic!("{text}"))..];
    assert!(
        number_after(server_side, "Successful request count:") > 10.0,
        "{text}"
    );
    assert!(number_after(&text, "Throughput:") > 10.0, "{text}");
}

#[test]
fn a_model_config_renames_its_tensors_for_triton_and_inference() {
    let scratch = Scratch::new("triton-rename");
    let config = scratch.write(
        "lm.json",
        &json!({
            "input": [{"name": "input_ids", "data_type": "TYPE_INT32", "dims": [8]}],
            "output": [{"name": "logits"}],
        })
        .to_string(),
    );
    let server = Server::transformer(&["--config", &format!("lm={config}")]);
    let (status, config) = get(server.http, "/v2/models/lm/config");
    assert_eq!(status, 200, "{config}");
    assert_eq!(config["input"][0]["name"], "input_ids");
    assert_eq!(config["output"][0]["name"], "logits");
    let (_, meta) = get(server.http, "/v2/models/lm");
    assert_eq!(meta["inputs"][0]["name"], "input_ids");
    let body = json!({"inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [1, 8], "data": [1, 2, 3, 4, 5, 6, 7, 8]}]});
    let (status, answer) = infer_json(server.http, "lm", &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outputs"][0]["name"], "logits");
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 64]));
    // The export's own name is no longer one of its inputs.
    let old = json!({"inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 8], "data": [1, 2, 3, 4, 5, 6, 7, 8]}]});
    let (status, err) = infer_json(server.http, "lm", &old);
    assert_eq!(status, 400, "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("input_ids"),
        "{err}"
    );
    // A rename that contradicts the model stops the server at start, saying why.
    let wrong = scratch.write(
        "wrong.json",
        &json!({"input": [{"name": "x", "dims": [9]}]}).to_string(),
    );
    let err = Server::start(&[
        "--model".into(),
        format!("lm={}", common::server::at("transformer.exported")),
        "--params".into(),
        format!("lm={}", common::server::at("transformer.safetensors")),
        "--config".into(),
        format!("lm={wrong}"),
    ])
    .err()
    .expect("a wrong rename is refused");
    assert!(err.contains("input[0].dims is [9]"), "{err}");
    // The same renames over gRPC: metadata, config and inference (tritonclient's protos).
    let answers = common::server::grpc_cases(
        &server,
        &json!([
            {"method": "ModelMetadata", "model": "lm"},
            {"method": "ModelConfig", "model": "lm"},
            {"model": "lm", "inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [1, 8],
                "contents": {"int_contents": [1, 2, 3, 4, 5, 6, 7, 8]}}]},
            {"model": "lm", "inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 8],
                "contents": {"int_contents": [1, 2, 3, 4, 5, 6, 7, 8]}}]},
        ]),
    );
    assert_eq!(answers[0]["inputs"], json!(["input_ids"]), "{}", answers[0]);
    assert_eq!(answers[0]["outputs"], json!(["logits"]), "{}", answers[0]);
    assert_eq!(answers[1]["inputs"], json!(["input_ids"]), "{}", answers[1]);
    assert_eq!(answers[1]["outputs"], json!(["logits"]), "{}", answers[1]);
    assert_eq!(answers[2]["code"], "OK", "{}", answers[2]);
    assert_eq!(answers[2]["outputs"][0]["name"], "logits", "{}", answers[2]);
    assert_eq!(answers[2]["outputs"][0]["shape"], json!([1, 64]));
    assert_eq!(answers[3]["code"], "INVALID_ARGUMENT", "{}", answers[3]);
}
