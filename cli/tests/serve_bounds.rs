//! `pjrt-actors serve` under clients that try to exhaust it (round-4 red-team findings):
//! half-sent heads and idle connections, more connections than it takes (on either port),
//! large JSON bodies (no stall, bounded memory), a FIFO in the model repository, configs that
//! lie, and a start that binds its ports before anything else.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::server::{Scratch, Server, get, http, identity_program, message};
use serde_json::json;

/// How long until the server closes `s` (a read that ends or fails), within `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(start.elapsed());
            }
            Err(_) => return None,
        }
    }
}

fn small_model(dir: &Scratch) -> String {
    format!("m={}", dir.write("m.mlir", &identity_program("4x2", "f32")))
}

#[test]
fn half_sent_heads_and_idle_connections_are_closed_and_shutdown_drops_idle_ones() {
    let dir = Scratch::new("serve-idle");
    let mut server = Server::start(&[
        "--model".into(),
        small_model(&dir),
        "--idle-timeout".into(),
        "1".into(),
        "--drain-timeout".into(),
        "20".into(),
    ])
    .unwrap();
    // A head that never ends, on HTTP; nothing at all, on gRPC (not even HTTP/2's preface).
    let mut half = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    half.write_all(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Le")
        .unwrap();
    let mut silent = TcpStream::connect(("127.0.0.1", server.grpc)).unwrap();
    let opened = Instant::now();
    for (what, s) in [
        ("a half-sent head", &mut half),
        ("a silent gRPC connection", &mut silent),
    ] {
        let closed = closed_within(s, Duration::from_secs(15)).map(|_| opened.elapsed());
        assert!(
            closed.is_some_and(|t| t >= Duration::from_millis(800)),
            "{what}: closed after {closed:?}, not at the 1 s idle timeout"
        );
    }
    // A keep-alive connection goes idle after its answer, and is closed too.
    let mut kept = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    kept.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    assert!(closed_within(&mut kept, Duration::from_secs(15)).is_some());
    // At SIGTERM, a connection with no request in flight is dropped at once: the server does
    // not wait out --drain-timeout for it (it waited the whole 20 s, and exited 1).
    let mut half = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    half.write_all(b"GET /v2/health/live HTTP/1.1\r\nHo")
        .unwrap();
    // Taken by the server (open beside the connection asking): not still in the backlog.
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_connections(server.http) < 2 {
        assert!(
            Instant::now() < deadline,
            "the half-sent head was never taken"
        );
    }
    let (status, took) = server.terminate(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "exited after {took:?}");
}

#[test]
fn connections_past_the_cap_wait_to_be_accepted_until_idle_ones_close() {
    let dir = Scratch::new("serve-cap");
    let server = Server::start(&[
        "--model".into(),
        small_model(&dir),
        "--max-connections".into(),
        "2".into(),
        "--idle-timeout".into(),
        "2".into(),
    ])
    .unwrap();
    // Two gRPC connections that send nothing take both places (the accept loop takes them in
    // turn); each is known taken when the server's HTTP/2 SETTINGS frame comes.
    let mut held: Vec<TcpStream> = [server.grpc, server.grpc]
        .iter()
        .map(|&p| TcpStream::connect(("127.0.0.1", p)).unwrap())
        .collect();
    for s in &mut held {
        assert!(grpc_served_within(s, Duration::from_secs(10)));
    }
    // A third waits in the backlog, unanswered, until an idle one is closed at 2 s; then it
    // is served. (Without the cap it was served at once; with no idle timeout, never.)
    let start = Instant::now();
    let (status, _) = get(server.http, "/v2/health/ready");
    let waited = start.elapsed();
    assert_eq!(status, 200);
    assert!(
        waited >= Duration::from_millis(1200) && waited < Duration::from_secs(20),
        "answered after {waited:?}"
    );
}

/// The server's open connections (`/metrics`), this one asking among them.
fn open_connections(port: u16) -> u64 {
    let (_, _, body) = http(port, "GET", "/metrics", &[], b"");
    let text = String::from_utf8_lossy(&body);
    (text.lines())
        .find_map(|l| l.strip_prefix("pjrt_actors_server_connections "))
        .unwrap_or_else(|| panic!("no connections gauge: {text}"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

/// Whether the gRPC port has taken `s`: hyper's HTTP/2 server writes its SETTINGS frame as
/// soon as it serves a connection, before the client's preface.
fn grpc_served_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut frame_head = [0u8; 9];
    // Byte 3 of a frame head is its type; 4 is SETTINGS.
    s.read_exact(&mut frame_head).is_ok() && frame_head[3] == 4
}

#[test]
fn a_cap_of_one_connection_serves_either_port_in_turn() {
    let dir = Scratch::new("serve-cap-one");
    let server = Server::start(&[
        "--model".into(),
        small_model(&dir),
        "--max-connections".into(),
        "1".into(),
    ])
    .unwrap();
    // The gRPC port first, then HTTP, then gRPC again, each closed before the next. An accept
    // loop per port, each taking a slot before waiting on its own port, left the one slot
    // with the HTTP port: the gRPC connection waited in the backlog for good.
    for round in 0..2 {
        let mut grpc = TcpStream::connect(("127.0.0.1", server.grpc)).unwrap();
        assert!(
            grpc_served_within(&mut grpc, Duration::from_secs(5)),
            "round {round}: the gRPC port did not take its connection"
        );
        // While it is open, an HTTP connection waits.
        let mut waiting = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
        waiting
            .write_all(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        waiting
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut head = [0u8; 12];
        assert!(waiting.read_exact(&mut head).is_err(), "round {round}");
        // Closed, the slot goes to the waiting connection, which is answered.
        drop(grpc);
        waiting
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        waiting.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "round {round}");
    }
}

/// An INT8 model of `width` values a row, answering each row's sum: its input is large, its
/// answer tiny.
fn summing_model(dir: &Scratch, width: usize) -> String {
    let program = format!(
        "func.func @main(%x: tensor<2x{width}xi8>) -> tensor<2xi32> {{
  %w = stablehlo.convert %x : (tensor<2x{width}xi8>) -> tensor<2x{width}xi32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %s = stablehlo.reduce(%w init: %z) applies stablehlo.add across dimensions = [1] : (tensor<2x{width}xi32>, tensor<i32>) -> tensor<2xi32>
  return %s : tensor<2xi32>
}}
"
    );
    let config = json!({"max_batch_size": 2, "preferred_batch_size": [1, 2]}).to_string();
    dir.write("sum.json", &config);
    dir.write("sum.mlir", &program)
}

#[test]
fn large_json_bodies_are_read_off_the_runtime_threads_at_a_bounded_cost() {
    const WIDTH: usize = 4 << 20;
    let dir = Scratch::new("serve-large");
    let model = summing_model(&dir, WIDTH);
    let server = Server::start(&[
        "--model".into(),
        format!("sum={model}"),
        "--config".into(),
        format!("sum={}", dir.0.join("sum.json").display()),
    ])
    .unwrap();
    // Two rows of 4 Mi small numbers: a 16 MiB body of 8 Mi values, each `1,` or `2,`.
    let mut data = String::with_capacity(2 * WIDTH * 2);
    for k in 0..2 * WIDTH {
        data.push_str(if k % 2 == 0 { "1," } else { "2," });
    }
    data.pop();
    let body = format!(
        r#"{{"inputs":[{{"name":"input0","datatype":"INT8","shape":[2,{WIDTH}],"data":[{data}]}}]}}"#
    );
    let before = server.reset_peak_rss();
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/sum/infer",
        &[],
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    let row = (3 * WIDTH / 2) as i64;
    assert_eq!(answer["outputs"][0]["data"], json!([row, row]));
    // A tree of JSON values costs tens of bytes a value (8 Mi values: hundreds of MiB); read
    // straight into bytes, the request costs its body, its 8 MiB of data and the device's copy.
    let grew = server.peak_rss().saturating_sub(before);
    assert!(grew < 160 << 20, "peak RSS grew by {} MiB", grew >> 20);
    // Four such bodies at once on two runtime threads: health checks are still answered at
    // once while they are read (they waited seconds when bodies were parsed on those threads).
    let port = server.http;
    let body = body.as_bytes();
    let worst = std::thread::scope(|s| {
        let big: Vec<_> = (0..4)
            .map(|_| s.spawn(|| http(port, "POST", "/v2/models/sum/infer", &[], body).0))
            .collect();
        let mut worst = Duration::ZERO;
        while big.iter().any(|b| !b.is_finished()) {
            let start = Instant::now();
            let (status, _) = get(port, "/v2/health/live");
            assert_eq!(status, 200);
            worst = worst.max(start.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        for b in big {
            assert_eq!(b.join().unwrap(), 200);
        }
        worst
    });
    assert!(
        worst < Duration::from_secs(1),
        "a health check waited {worst:?}"
    );
}

#[test]
fn a_fifo_in_the_model_repository_is_refused_at_once_not_waited_on() {
    let dir = Scratch::new("serve-fifo");
    std::fs::create_dir_all(dir.0.join("m")).unwrap();
    let fifo = dir.0.join("m/model.mlir");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let start = Instant::now();
    let err = Server::start(&["--model-repository".into(), dir.0.display().to_string()])
        .err()
        .expect("refused");
    assert!(err.contains("is not a regular file (a FIFO)"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(20));
    // The same for a weights file named by a flag.
    std::fs::remove_file(&fifo).unwrap();
    let model = dir.write("m/model.mlir", &identity_program("4x2", "f32"));
    let err = Server::start(&[
        "--model".into(),
        format!("m={model}"),
        "--config".into(),
        format!("m={}", dir.0.join("m").display()),
    ])
    .err()
    .expect("refused");
    assert!(err.contains("is not a regular file (a directory)"), "{err}");
}

#[test]
fn an_mlir_model_refuses_batched_inputs_and_ports_are_bound_before_models_load() {
    let dir = Scratch::new("serve-start");
    let model = small_model(&dir);
    let config = dir.write("c.json", &json!({"batched_inputs": ["x"]}).to_string());
    let err = Server::start(&[
        "--model".into(),
        model.clone(),
        "--config".into(),
        format!("m={config}"),
    ])
    .err()
    .expect("refused");
    assert!(err.contains("batched_inputs [\"x\"]"), "{err}");
    // A port in use is said before any model is read: here the model does not even exist.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let err = Server::start(&[
        "--model".into(),
        "m=/no/such/model.mlir".into(),
        "--http-port".into(),
        port,
        "--grpc-port".into(),
        "0".into(),
    ])
    .err()
    .expect("refused");
    assert!(
        err.contains("binding 127.0.0.1:") && err.contains("in use"),
        "{err}"
    );
    // An IPv6 address is taken bare, as `--host ::1` (it was refused; only `[::1]` worked).
    let server = Server::start(&["--model".into(), model, "--host".into(), "::1".into()]).unwrap();
    let mut s = TcpStream::connect(("::1", server.http)).unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn a_request_naming_an_input_the_model_lacks_is_told_which_it_has() {
    let dir = Scratch::new("serve-names2");
    let server = Server::start(&["--model".into(), small_model(&dir)]).unwrap();
    let body =
        json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]});
    let (status, err) = common::server::infer_json(server.http, "m", &body);
    assert_eq!(status, 400);
    assert!(
        message(&err).contains("`x` is not one of its inputs; its inputs are `input0`"),
        "{err}"
    );
}
