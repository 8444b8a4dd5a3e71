//! `pjrt-actors serve`'s streams and bodies under hostile clients (round-5 red-team findings):
//! a `ModelStreamInfer` stream whose answers are never read, idle streams, a message that cannot
//! be read mid-stream, streams open at SIGTERM (gRPC and server-sent events), bodies trickled
//! without a length, compressed bodies, and request lists past their bounds.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::server::{Scratch, Server, http, identity_program, infer_json, triton_python};
use serde_json::{Value, json};

fn generation_args() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
    vec![
        "--generation".into(),
        format!("lm={}", dir.join("generate").display()),
        "--generation".into(),
        format!("long={}", dir.join("generate_long").display()),
    ]
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Runs stream_hostile.py MODE against the server's gRPC port: its JSON line.
fn hostile(server: &Server, mode: &str, model: &str, arg: Option<usize>) -> Value {
    let mut args = vec![mode.to_string(), server.grpc.to_string(), model.to_string()];
    args.extend(arg.map(|a| a.to_string()));
    common::server::triton_script("stream_hostile.py", &args)
}

/// A generation counter of `model` from `/metrics`.
fn metric(port: u16, name: &str, model: &str) -> f64 {
    let (status, _, body) = http(port, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let prefix = format!("pjrt_actors_generate_{name}{{model=\"{model}\"}} ");
    let text = String::from_utf8(body).unwrap();
    (text.lines().find_map(|l| l.strip_prefix(&prefix)))
        .unwrap_or_else(|| panic!("no {prefix}"))
        .trim()
        .parse()
        .unwrap()
}

/// A client that sends 200 long requests on one stream and reads none of their answers: the
/// server starts at most a stream's bound of sequences, queues at most its bound of answers,
/// and reads no further request, so at most a few wait for a slot (it read and queued all 200,
/// and queued their answers without bound: four unread long requests took its RSS from 106 to
/// 403 MB in 16 s).
#[test]
fn a_stream_whose_answers_are_not_read_is_not_read_either() {
    let server = Server::start(&generation_args()).unwrap();
    let probe = std::thread::spawn({
        let port = server.http;
        move || {
            std::thread::sleep(Duration::from_secs(3));
            metric(port, "waiting", "long")
        }
    });
    let out = hostile(&server, "unread", "long", Some(200));
    assert_eq!(out["sent"], 200);
    let waiting = probe.join().unwrap();
    assert!(
        waiting <= 16.0,
        "{waiting} of 200 requests waiting for a slot"
    );
    assert!(metric(server.http, "requests_total", "long") >= 1.0);
    // The client gone, its sequences end and free their slots.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(server.http, "running", "long") > 0.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(server.http, "running", "long"), 0.0);
    assert_eq!(metric(server.http, "waiting", "long"), 0.0);
}

/// Streams that send nothing are closed at the idle timeout (DEADLINE_EXCEEDED, saying why),
/// and give back their connections: with a cap of two connections held by two idle streams, a
/// health check is answered once they close (it waited for ever).
#[test]
fn idle_streams_are_closed_and_give_their_connections_back() {
    let server = Server::start(
        &[
            generation_args(),
            vec![
                "--idle-timeout".into(),
                "1".into(),
                "--max-connections".into(),
                "2".into(),
            ],
        ]
        .concat(),
    )
    .unwrap();
    let grpc = server.grpc;
    let idle = std::thread::spawn(move || {
        let mut cmd = Command::new(triton_python());
        cmd.arg(script("stream_hostile.py"))
            .args(["idle", &grpc.to_string(), "lm", "2"]);
        cmd.output().unwrap()
    });
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    let o = idle.join().unwrap();
    let out: Value = serde_json::from_slice(o.stdout.trim_ascii_end()).unwrap_or_else(|_| {
        panic!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    for stream in out["streams"].as_array().unwrap() {
        assert_eq!(stream["code"], "DEADLINE_EXCEEDED", "{stream}");
        assert!(
            stream["message"]
                .as_str()
                .unwrap()
                .contains("--idle-timeout")
        );
        assert!(stream["after"].as_f64().unwrap() < 8.0, "{stream}");
    }
}

/// A message past `--max-body-bytes` mid-stream ends the stream with a non-OK status that says
/// why, after the request before it was answered in full (the stream ended OK without a word,
/// and every later request was lost).
#[test]
fn a_message_that_cannot_be_read_ends_its_stream_with_an_error() {
    let server = Server::start(
        &[
            generation_args(),
            vec!["--max-body-bytes".into(), "65536".into()],
        ]
        .concat(),
    )
    .unwrap();
    let out = hostile(&server, "bad", "lm", Some(200_000));
    assert_ne!(out["code"], "OK", "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("a request on the stream could not be read"),
        "{out}"
    );
    let good: Vec<&Value> = (out["answers"].as_array().unwrap().iter())
        .filter(|a| a["id"] == "good")
        .collect();
    assert_eq!(good.len(), 4, "{out}");
    assert_eq!(good[3]["final"], true, "{out}");
}

/// At SIGTERM a running gRPC stream ends with a final response whose finish reason is
/// `shutdown`, an idle one ends at once, a server-sent event stream ends with a last event and
/// its chunked terminator, and the server exits 0 well within --drain-timeout (it waited the
/// whole drain for an idle stream and exited 1; running streams were cut without a word).
#[test]
fn streams_open_at_sigterm_end_cleanly_and_the_server_exits_at_once() {
    let mut server = Server::start(
        &[
            generation_args(),
            vec!["--drain-timeout".into(), "30".into()],
        ]
        .concat(),
    )
    .unwrap();
    let mut child = Command::new(triton_python())
        .arg(script("stream_hostile.py"))
        .args(["drain", &server.grpc.to_string(), "long"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // A server-sent event stream, its first event read.
    let mut sse = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    let body = r#"{"input_ids": [5, 6, 7], "max_tokens": 100000, "stop": []}"#;
    write!(
        sse,
        "POST /v2/models/long/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    sse.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let mut chunk = [0u8; 512];
        let n = sse.read(&mut chunk).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    let (status, took) = server.terminate(Duration::from_secs(25));
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let mut rest = Vec::new();
    sse.read_to_end(&mut rest).unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains(r#""finish_reason":"shutdown""#), "{rest}");
    assert!(rest.ends_with("0\r\n\r\n"), "{rest}");
    let out: Value = serde_json::from_str(&lines.last().unwrap().unwrap()).unwrap();
    child.wait().unwrap();
    assert_eq!(out["code"], "OK", "{out}");
    assert_eq!(out["final"]["finish_reason"], "shutdown", "{out}");
    assert!(out["tokens"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(out["idle"]["code"], "OK", "{out}");
    assert!(out["idle"]["after"].as_f64().unwrap() < 10.0, "{out}");
}

/// Bodies with no Content-Length reserve from the in-flight budget as their bytes arrive: four
/// clients trickling chunked bodies hold a few KiB each, and a request beside them runs at once
/// (each reserved the whole 64 MiB bound up front: four held a 256 MiB budget, and every other
/// request waited for its time limit).
#[test]
fn trickled_bodies_without_a_length_hold_only_what_has_arrived() {
    let dir = Scratch::new("serve-trickle");
    let model = format!("m={}", dir.write("m.mlir", &identity_program("4x2", "f32")));
    let server = Server::start(&[
        "--model".into(),
        model,
        "--max-body-bytes".into(),
        (64 << 20).to_string(),
        "--max-inflight-bytes".into(),
        (256 << 20).to_string(),
    ])
    .unwrap();
    let trickles: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
            s.write_all(
                b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
            )
            .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let body = json!({"inputs": [{"name": "input0", "datatype": "FP32", "shape": [4, 2],
        "data": [1, 2, 3, 4, 5, 6, 7, 8]}]});
    let (status, answer) = infer_json(server.http, "m", &body);
    assert_eq!(status, 200, "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(trickles);
}

/// tritonclient's compressed request bodies (gzip and deflate, binary and JSON tensors) are
/// decompressed as Triton does (they were 400 with a message about header lengths); another
/// encoding is 415, and a compression bomb is 413 once past the body bound.
#[test]
fn compressed_bodies_are_taken_and_bombs_and_other_encodings_are_refused() {
    let dir = Scratch::new("serve-compressed");
    let model = format!("m={}", dir.write("m.mlir", &identity_program("4x2", "f32")));
    let server = Server::start(&[
        "--model".into(),
        model,
        "--max-body-bytes".into(),
        (1 << 20).to_string(),
    ])
    .unwrap();
    let out =
        common::server::triton_script("compressed.py", &[server.http.to_string(), "m".into()]);
    let outputs = out["outputs"].as_object().unwrap();
    assert_eq!(outputs.len(), 6, "{out}");
    for (how, got) in outputs {
        assert_eq!(got, &out["input"], "{how}");
    }
    let body = br#"{"inputs": [{"name": "input0", "datatype": "FP32", "shape": [4, 2], "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}"#;
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/m/infer",
        &[("Content-Encoding", "br".into())],
        body,
    );
    assert_eq!(status, 415, "{}", String::from_utf8_lossy(&answer));
    // 64 MiB of zeros gzipped: 64 KiB sent, refused once 1 MiB has been made.
    let bomb = Command::new("sh")
        .args(["-c", "head -c 67108864 /dev/zero | gzip -c"])
        .output()
        .unwrap()
        .stdout;
    assert!(bomb.len() < 1 << 20);
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/m/infer",
        &[("Content-Encoding", "gzip".into())],
        &bomb,
    );
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&answer));
    let (status, _, _) = http(
        server.http,
        "POST",
        "/v2/models/m/infer",
        &[("Content-Encoding", "gzip".into())],
        body,
    );
    assert_eq!(status, 400, "not gzip data");
}

/// Every list a generate request carries is bounded as it is read: a stop list past 1024 ids
/// and a prompt past 2^20 are refused with 400 (30 million stop ids were held outside the
/// memory budget and scanned at every token).
#[test]
fn generate_request_lists_past_their_bounds_are_refused() {
    let server = Server::start(&generation_args()).unwrap();
    let post = |body: String| {
        http(
            server.http,
            "POST",
            "/v2/models/lm/generate",
            &[],
            body.as_bytes(),
        )
    };
    let ids = |n: usize| vec!["1"; n].join(",");
    let (status, _, answer) = post(format!(
        r#"{{"input_ids": [5, 6, 7], "stop": [{}]}}"#,
        ids(1025)
    ));
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&answer).contains("more than 1024"));
    let (status, _, answer) = post(format!(
        r#"{{"input_ids": [5, 6, 7], "parameters": {{"stop": [{}]}}}}"#,
        ids(1025)
    ));
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    let (status, _, answer) = post(format!(r#"{{"input_ids": [{}]}}"#, ids((1 << 20) + 1)));
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&answer).contains("more than 1048576"));
    // Within the bounds, the same request is answered.
    let (status, _, answer) = post(format!(
        r#"{{"input_ids": [5, 6, 7], "max_tokens": 3, "stop": [{}]}}"#,
        ids(1024)
    ));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
}
