//! `pjrt-actors serve` on a free loopback port, tested with real clients: tritonclient's HTTP
//! and gRPC clients (cli/tests/data/triton_clients.py, in the venv scripts/triton-venv makes)
//! and raw HTTP from here: metadata, inference checked against JAX's answers, the protocol's
//! errors, a model repository, a slow client cut off, and SIGTERM draining.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::server::{Server, at, data, get, http, infer_json, triton_script};
use pjrt_actors::host_data::read_npz;
use serde_json::{Value, json};

/// The recorded requests and JAX's logits for them.
fn recorded() -> (Vec<i32>, Vec<f32>) {
    let npz = read_npz(&std::fs::read(data().join("requests.npz")).unwrap()).unwrap();
    let find = |k: &str| npz.iter().find(|(n, _)| n == k).unwrap().1.bytes.clone();
    let ints = find("tokens")
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let floats = find("logits")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (ints, floats)
}

fn close(got: &[f32], want: &[f32]) -> bool {
    let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| (a - b).abs() <= 1e-4 * scale)
}

#[test]
fn tritonclient_talks_to_serve_over_http_and_grpc_with_every_answer_checked() {
    let server = Server::transformer(&[]);
    let summary = triton_script(
        "triton_clients.py",
        &[
            server.http.to_string(),
            server.grpc.to_string(),
            at("requests.npz"),
            "64".into(),
            "3".into(),
        ],
    );
    assert_eq!(summary["ok"], true, "{summary}");
    assert!(
        summary["concurrent_answers"].as_u64().unwrap() >= 64,
        "{summary}"
    );
}

#[test]
fn raw_http_gets_metadata_answers_as_jax_and_the_protocols_errors() {
    let (tokens, logits) = recorded();
    let config = std::env::temp_dir().join(format!(
        "pjrt-actors-serve-config-{}.json",
        std::process::id()
    ));
    let policy =
        json!({"default_queue_policy": {"allow_timeout_override": true, "max_queue_size": 1}});
    std::fs::write(&config, policy.to_string()).unwrap();
    let server = Server::transformer(&[
        "--config",
        &format!("lm={}", config.display()),
        "--max-body-bytes",
        "100000",
    ]);
    let port = server.http;
    assert_eq!(get(port, "/v2/health/live").0, 200);
    assert_eq!(get(port, "/v2/health/ready").0, 200);
    assert_eq!(get(port, "/v2").1["name"], "pjrt-actors");
    let (status, meta) = get(port, "/v2/models/lm");
    assert_eq!(
        (status, &meta["inputs"][0]["shape"]),
        (200, &json!([-1, 8]))
    );
    let (status, err) = get(port, "/v2/models/nope");
    assert_eq!(status, 404);
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("unknown model `nope`"),
        "{err}"
    );
    assert_eq!(get(port, "/no/such/path").0, 404);
    // JSON tensors: two requests' rows, answered as JAX answered them.
    let rows = &tokens[8..24];
    let body =
        json!({"inputs": [{"name": "tokens", "datatype": "INT32", "shape": [2, 8], "data": rows}]});
    let (status, answer) = infer_json(port, "lm", &body);
    assert_eq!(status, 200, "{answer}");
    let got: Vec<f32> = (answer["outputs"][0]["data"].as_array().unwrap().iter())
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert!(close(&got, &logits[64..192]), "{got:?}");
    // Binary tensor data both ways, as tritonclient sends it.
    let header = json!({
        "inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 8], "parameters": {"binary_data_size": 32}}],
        "outputs": [{"name": "output0", "parameters": {"binary_data": true}}],
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend(tokens[..8].iter().flat_map(|t| t.to_le_bytes()));
    let length = [("Inference-Header-Content-Length", header.len().to_string())];
    let (status, headers, raw) = http(port, "POST", "/v2/models/lm/infer", &length, &body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
    let json_len: usize = (headers
        .iter()
        .find(|(k, _)| k == "inference-header-content-length"))
    .unwrap()
    .1
    .parse()
    .unwrap();
    let got: Vec<f32> = raw[json_len..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(close(&got, &logits[..64]));
    // The errors, each with the protocol's status and a message naming what is wrong.
    let one = |name: &str, dtype: &str, shape: Value, data: Value| json!({"inputs": [{"name": name, "datatype": dtype, "shape": shape, "data": data}]});
    let cases = [
        (
            one("x", "INT32", json!([1, 8]), json!(&tokens[..8])),
            400,
            "`x` is not one of its inputs; its inputs are `tokens`",
        ),
        (
            one("tokens", "FP32", json!([1, 8]), json!(&tokens[..8])),
            400,
            "datatype FP32",
        ),
        (
            one("tokens", "INT32", json!([1, 7]), json!(&tokens[..7])),
            400,
            "shape [1, 7]",
        ),
        (
            one("tokens", "INT32", json!([17, 8]), json!(vec![0; 136])),
            400,
            "17 rows",
        ),
        (
            one("tokens", "INT32", json!([1, 8]), json!(&tokens[..7])),
            400,
            "`data` holds 7 values; the shape [1, 8] holds 8",
        ),
    ];
    for (body, status, text) in cases {
        let (got, err) = infer_json(port, "lm", &body);
        assert_eq!(got, status, "{err}");
        assert!(
            err["error"].as_str().unwrap().contains(text),
            "{err} lacks {text}"
        );
    }
    let (status, err) = infer_json(
        port,
        "nope",
        &one("tokens", "INT32", json!([1, 8]), json!(&tokens[..8])),
    );
    assert_eq!(status, 404, "{err}");
    let (status, _, body) = http(port, "POST", "/v2/models/lm/infer", &[], b"{not json");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let (status, _, _) = http(
        port,
        "POST",
        "/v2/models/lm/infer",
        &[],
        &vec![b' '; 200_000],
    );
    assert_eq!(status, 413, "a body past --max-body-bytes");
    // A deadline already past: 504, never run.
    let mut late = one("tokens", "INT32", json!([1, 8]), json!(&tokens[..8]));
    late["parameters"] = json!({"timeout": 1});
    let (status, err) = infer_json(port, "lm", &late);
    assert_eq!(status, 504, "{err}");
    // A full queue (max_queue_size 1) under a burst: 503 for some, the right answer for the rest.
    let outcomes: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..48)
            .map(|_| {
                s.spawn(|| {
                    infer_json(
                        port,
                        "lm",
                        &one("tokens", "INT32", json!([1, 8]), json!(&tokens[..8])),
                    )
                    .0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        outcomes.iter().all(|s| *s == 200 || *s == 503),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&503),
        "a queue of one overflows under 48 at once: {outcomes:?}"
    );
    let (_, _, metrics) = http(port, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8_lossy(&metrics);
    for want in [
        "outcome=\"ok\"",
        "outcome=\"invalid\"",
        "outcome=\"expired\"",
        "outcome=\"unavailable\"",
        "pjrt_actors_server_request_seconds_bucket",
        // The client's own: its device actors' and memory spaces'.
        "pjrt_device_executes_total{device=",
        "pjrt_memory_bytes_held{memory=",
    ] {
        assert!(metrics.contains(want), "metrics lack {want}:\n{metrics}");
    }
    std::fs::remove_file(config).unwrap();
}

#[test]
fn a_client_that_sends_slowly_is_cut_off() {
    let server = Server::transformer(&["--request-timeout", "1"]);
    let mut s = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    s.write_all(
        b"POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"inp",
    )
    .unwrap();
    let start = Instant::now();
    let mut answer = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.read_to_string(&mut answer);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "cut off after {:?}",
        start.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
}

#[test]
fn sigterm_drains_in_flight_requests_then_stops() {
    let mut server = Server::transformer(&["--drain-timeout", "10"]);
    let (tokens, _) = recorded();
    let port = server.http;
    let body = json!({"inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 8], "data": &tokens[..8]}]});
    assert_eq!(infer_json(port, "lm", &body).0, 200);
    let (status, _) = server.terminate(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    let err = server.stderr();
    assert!(err.contains("SIGTERM: draining"), "{err}");
}

#[test]
fn a_model_repository_is_served_and_what_cannot_be_served_is_refused_saying_why() {
    let repo = std::env::temp_dir().join(format!("pjrt-actors-repo-{}", std::process::id()));
    let lm = repo.join("lm");
    std::fs::create_dir_all(&lm).unwrap();
    std::fs::copy(
        data().join("transformer.exported"),
        lm.join("model.exported"),
    )
    .unwrap();
    std::fs::copy(
        data().join("transformer.safetensors"),
        lm.join("weights.safetensors"),
    )
    .unwrap();
    let config = |c: Value| std::fs::write(lm.join("config.json"), c.to_string()).unwrap();
    config(
        json!({"max_batch_size": 16, "priority_levels": 2, "max_queue_delay_microseconds": 100}),
    );
    let repository = ["--model-repository".to_string(), repo.display().to_string()];
    {
        let server = Server::start(&repository).unwrap();
        let (status, meta) = get(server.http, "/v2/models/lm");
        assert_eq!((status, &meta["platform"]), (200, &json!("jax_exported")));
    }
    let refusal = |c: Value, text: &str| {
        config(c);
        let err = Server::start(&repository).err().expect("refused");
        assert!(err.contains(text), "{err} lacks {text}");
    };
    refusal(json!({"max_batch": 16}), "`max_batch`, which is not one of");
    refusal(json!({"priority_levels": 3}), "3 priority levels");
    refusal(json!({"max_batch_size": 64}), "exactly 16 rows");
    refusal(
        json!({"default_queue_policy": {"timeout_action": "DELAY"}}),
        "DELAY is not served",
    );
    std::fs::remove_file(lm.join("config.json")).unwrap();
    // A file that leads out of the repository is refused.
    std::fs::remove_file(lm.join("weights.safetensors")).unwrap();
    std::os::unix::fs::symlink(
        data().join("transformer.safetensors"),
        lm.join("weights.safetensors"),
    )
    .unwrap();
    let err = Server::start(&repository).err().expect("refused");
    assert!(err.contains("leads out of the model repository"), "{err}");
    std::fs::remove_dir_all(&repo).unwrap();
    let err = Server::start(&["--model".into(), "no-equals-sign".into()])
        .err()
        .unwrap();
    assert!(err.contains("--model takes NAME=PATH"), "{err}");
}
