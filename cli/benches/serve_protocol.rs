//! What the protocol layer costs: the exported transformer (tests/data/exported/serve) served
//! by `pjrt-actors serve` and driven over HTTP (keep-alive connections, Triton's binary tensor
//! data, as tritonclient sends it) and over gRPC (tonic), against the same model on a batcher
//! in this process, at the same concurrency: 1 client (what the protocol adds to a request) and
//! 16 (throughput), one one-sequence request in flight each, interleaved twice. Every 25th
//! answer is checked against JAX's. Last line: one JSON object.

#[allow(dead_code)]
#[path = "../../tests/suite/common/cpu.rs"]
mod cpu;
#[allow(dead_code)]
#[path = "../src/serve/wire/messages.rs"]
mod messages;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pjrt_actors::host_data::{HostArray, read_npz};
use pjrt_actors::serving::{Batcher, BatcherConfig, InferRequest};
use pjrt_actors::{Client, ElementType};
use serde_json::json;

/// Clients for throughput (one request in flight each); latency is measured with one.
const CLIENTS: usize = 16;
const SECONDS: f64 = 2.0;
const CHECK_EVERY: usize = 25;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/serve")
}

/// The recorded one-sequence requests and JAX's logits.
struct Recorded {
    tokens: Vec<[i32; 8]>,
    logits: Vec<Vec<f32>>,
}

fn recorded() -> Recorded {
    let npz = read_npz(&std::fs::read(data().join("requests.npz")).unwrap()).unwrap();
    let find = |k: &str| npz.iter().find(|(n, _)| n == k).unwrap().1.bytes.clone();
    let ints: Vec<i32> = find("tokens")
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let floats: Vec<f32> = find("logits")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    Recorded {
        tokens: ints
            .chunks_exact(8)
            .map(|c| c.try_into().unwrap())
            .collect(),
        logits: floats.chunks_exact(64).map(|c| c.to_vec()).collect(),
    }
}

fn check(r: &Recorded, i: usize, got: &[f32]) {
    let want = &r.logits[i % r.logits.len()];
    let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
    assert!(
        got.len() == 64
            && got
                .iter()
                .zip(want)
                .all(|(a, b)| (a - b).abs() <= 1e-4 * scale),
        "request {i}"
    );
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Requests/s, p50 and p99 in µs, and the CPU time a request took in this process (client
/// threads, and the batcher when in process) and in the server's.
#[derive(Clone, Copy)]
struct Load {
    rps: f64,
    p50: f64,
    p99: f64,
    here_cpu_us: f64,
    server_cpu_us: f64,
}

/// The server's process id, for its CPU time.
static SERVER_PID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn server_cpu_ns() -> u64 {
    SERVER_PID
        .get()
        .map_or(0, |pid| cpu::all_threads_cpu_ns(pid))
}

/// Runs `client(k, end)` on `clients` threads until SECONDS pass; their latencies summarised.
fn closed_loop(clients: usize, client: impl Fn(usize, Instant) -> Vec<f64> + Sync) -> Load {
    let (here0, server0) = (cpu::all_threads_cpu_ns("self"), server_cpu_ns());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(SECONDS);
    let mut lat: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|k| {
                let c = &client;
                s.spawn(move || c(k, end))
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let rps = lat.len() as f64 / start.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    let per_request = |ns: u64| ns as f64 / 1e3 / lat.len() as f64;
    Load {
        rps,
        p50: q(0.5),
        p99: q(0.99),
        here_cpu_us: per_request(cpu::all_threads_cpu_ns("self") - here0),
        server_cpu_us: per_request(server_cpu_ns() - server0),
    }
}

struct Server(Child, u16, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> Server {
    let at = |n: &str| data().join(n).display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args([
            "serve",
            "--model",
            &format!("lm={}", at("transformer.exported")),
        ])
        .args(["--params", &format!("lm={}", at("transformer.safetensors"))])
        .args(["--http-port", "0", "--grpc-port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = SERVER_PID.set(child.id().to_string());
    let line = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let port = |key: &str| -> u16 {
        let rest = &line[line.find(key).unwrap() + key.len()..];
        rest.split_whitespace()
            .next()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    Server(child, port("http="), port("grpc="))
}

/// One keep-alive HTTP/1.1 inference with binary tensors both ways; the logits.
fn http_infer(s: &mut BufReader<TcpStream>, tokens: &[i32; 8]) -> Vec<f32> {
    let header = json!({
        "inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 8], "parameters": {"binary_data_size": 32}}],
        "outputs": [{"name": "output0", "parameters": {"binary_data": true}}],
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend(tokens.iter().flat_map(|t| t.to_le_bytes()));
    let head = format!(
        "POST /v2/models/lm/infer HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nInference-Header-Content-Length: {}\r\n\r\n",
        body.len(),
        header.len()
    );
    let stream = s.get_mut();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    let (mut length, mut json_length) = (0usize, 0usize);
    let mut line = String::new();
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if let Some(v) = l.strip_prefix("inference-header-content-length:") {
            json_length = v.trim().parse().unwrap();
        }
    }
    let mut answer = vec![0; length];
    s.read_exact(&mut answer).unwrap();
    f32s(&answer[json_length..])
}

fn http_load(port: u16, r: &Recorded, clients: usize) -> Load {
    closed_loop(clients, |k, end| {
        let mut s = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
        s.get_ref().set_nodelay(true).unwrap();
        let (mut lat, mut i) = (Vec::new(), k);
        while Instant::now() < end {
            let t = Instant::now();
            let got = http_infer(&mut s, &r.tokens[i % r.tokens.len()]);
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            if i.is_multiple_of(CHECK_EVERY) {
                check(r, i, &got);
            }
            i += clients;
        }
        lat
    })
}

fn grpc_load(runtime: &tokio::runtime::Runtime, port: u16, r: &Recorded, clients: usize) -> Load {
    let channel = runtime.block_on(async {
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    });
    closed_loop(clients, |k, end| {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(
            "/inference.GRPCInferenceService/ModelInfer",
        );
        let (mut lat, mut i) = (Vec::new(), k);
        while Instant::now() < end {
            let tokens = &r.tokens[i % r.tokens.len()];
            let request = messages::ModelInferRequest {
                model_name: "lm".into(),
                inputs: vec![messages::InferInputTensor {
                    name: "tokens".into(),
                    datatype: "INT32".into(),
                    shape: vec![1, 8],
                    ..Default::default()
                }],
                raw_input_contents: vec![tokens.iter().flat_map(|t| t.to_le_bytes()).collect()],
                ..Default::default()
            };
            let t = Instant::now();
            let answer: messages::ModelInferResponse = runtime.block_on(async {
                grpc.ready().await.unwrap();
                let codec = tonic::codec::ProstCodec::default();
                grpc.unary(tonic::Request::new(request), path.clone(), codec)
                    .await
                    .unwrap()
                    .into_inner()
            });
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            if i.is_multiple_of(CHECK_EVERY) {
                check(r, i, &f32s(&answer.raw_output_contents[0]));
            }
            i += clients;
        }
        lat
    })
}

fn in_process_load(batcher: &Batcher, r: &Recorded, clients: usize) -> Load {
    closed_loop(clients, |k, end| {
        let (mut lat, mut i) = (Vec::new(), k);
        while Instant::now() < end {
            let tokens = &r.tokens[i % r.tokens.len()];
            let x = HostArray {
                dtype: ElementType::S32,
                dims: vec![1, 8],
                bytes: tokens.iter().flat_map(|t| t.to_le_bytes()).collect(),
            };
            let t = Instant::now();
            let answer = batcher.infer(InferRequest::new(vec![x])).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            if i.is_multiple_of(CHECK_EVERY) {
                check(r, i, &f32s(&answer.outputs[0].bytes));
            }
            i += clients;
        }
        lat
    })
}

/// Whether `protocol` is measured: `SERVE_PROTOCOL_ONLY=http` (or `grpc`) measures one, to
/// profile its server alone.
fn only(protocol: &str) -> bool {
    std::env::var("SERVE_PROTOCOL_ONLY").map_or(true, |p| p == protocol)
}

fn main() {
    let r = recorded();
    let server = start_server();
    let client = Client::open().unwrap();
    let mut model = client
        .load_exported(&std::fs::read(data().join("transformer.exported")).unwrap())
        .unwrap();
    model
        .load_params(&std::fs::read(data().join("transformer.safetensors")).unwrap())
        .unwrap();
    let config = BatcherConfig {
        max_batch_size: 16,
        ..Default::default()
    };
    let batcher = Batcher::start(
        &client,
        model.batch_model("lm", &["tokens"]).unwrap(),
        config,
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let best = |a: Load, b: Load| if a.rps >= b.rps { a } else { b };
    // Each protocol and the in-process batcher in turn, twice; the better run of each kept.
    let measure = |clients: usize| {
        let (mut local, mut http, mut grpc) = (None::<Load>, None::<Load>, None::<Load>);
        for _ in 0..2 {
            let l = in_process_load(&batcher, &r, clients);
            local = Some(local.map_or(l, |p| best(p, l)));
            if only("http") {
                let h = http_load(server.1, &r, clients);
                http = Some(http.map_or(h, |p| best(p, h)));
            }
            if only("grpc") {
                let g = grpc_load(&runtime, server.2, &r, clients);
                grpc = Some(grpc.map_or(g, |p| best(p, g)));
            }
        }
        let none = Load {
            rps: f64::NAN,
            p50: f64::NAN,
            p99: f64::NAN,
            here_cpu_us: f64::NAN,
            server_cpu_us: f64::NAN,
        };
        let (http, grpc) = (http.unwrap_or(none), grpc.unwrap_or(none));
        (local.unwrap(), http, grpc)
    };
    let (one, many) = (measure(1), measure(CLIENTS));
    println!(
        "one one-sequence request in flight per client, {SECONDS} s a run, better of two interleaved runs"
    );
    println!(
        "{:>11} {:>8} {:>12} {:>10} {:>10} {:>12} {:>12}",
        "", "clients", "requests/s", "p50 us", "p99 us", "cpu us here", "cpu us serve"
    );
    for (clients, (local, http, grpc)) in [(1, one), (CLIENTS, many)] {
        for (name, l) in [("in-process", local), ("HTTP", http), ("gRPC", grpc)] {
            println!(
                "{name:>11} {clients:>8} {:>12.0} {:>10.1} {:>10.1} {:>12.1} {:>12.1}",
                l.rps, l.p50, l.p99, l.here_cpu_us, l.server_cpu_us
            );
        }
    }
    let ratio = |a: f64, b: f64| (a / b * 100.0).round() / 100.0;
    let ((local1, http1, grpc1), (local, http, grpc)) = (one, many);
    println!(
        "{}",
        json!({
            "in_process_rps": local.rps.round(),
            // What the protocol adds to one request, with one in flight (goals 60 and 80 us).
            "http_added_p50_us": (http1.p50 - local1.p50).round(),
            "grpc_added_p50_us": (grpc1.p50 - local1.p50).round(),
            // Requests/s over the protocol / in process, 16 in flight (goal 0.8 each).
            "http_throughput_ratio": ratio(http.rps, local.rps),
            "grpc_throughput_ratio": ratio(grpc.rps, local.rps),
            "http_p99_ratio": ratio(http.p99, local.p99),
            "grpc_p99_ratio": ratio(grpc.p99, local.p99),
        })
    );
}
