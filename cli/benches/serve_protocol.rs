//! What the protocol layer costs: the exported transformer (tests/data/exported/serve) served
//! by `pjrt-actors serve` and driven over HTTP and gRPC by Triton's own load tool,
//! perf_analyzer (C++, binary tensors; scripts/perf-analyzer installs it), against the same
//! model on a batcher in this process driven by threads here, at the same concurrency: 1 request
//! in flight (what the protocol adds to one) and 16 (throughput), one-sequence requests,
//! interleaved twice. Every 25th in-process answer is checked against JAX's (the served answers
//! are checked by the server's tests). The floor: the same load on bare hyper and tonic servers
//! that replay the real server's answers (serve_floor.rs), so what the protocol costs can be set
//! against what the stacks alone cost. And HTTPS (`--tls-cert`, keep-alive) against plain HTTP
//! at 16 in flight: what TLS adds to the server's CPU a request. Last line: one JSON object.

#[path = "../../tests/suite/common/certificates.rs"]
mod certificates;
#[allow(dead_code)]
#[path = "../../tests/suite/common/cpu.rs"]
mod cpu;
#[path = "support/serve_floor.rs"]
mod floor;
#[path = "../tests/common/server.rs"]
mod server;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use server::{Server, data};

use pjrt_actors::host_data::{HostArray, read_npz};
use pjrt_actors::serving::{Batcher, BatcherConfig, InferRequest};
use pjrt_actors::{Client, ElementType};
use serde_json::json;

/// Requests in flight for throughput; latency is measured with one.
const CLIENTS: usize = 16;
const SECONDS: f64 = 2.0;
const CHECK_EVERY: usize = 25;

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

/// Requests/s, p50 and p99 in µs, and the CPU time a request took on the client's side (in
/// process: the client threads and the batcher; served: perf_analyzer) and in the server.
#[derive(Clone, Copy)]
struct Load {
    rps: f64,
    p50: f64,
    p99: f64,
    here_cpu_us: f64,
    server_cpu_us: f64,
}

/// Runs `client(k, end)` on `clients` threads until SECONDS pass; their latencies summarised.
fn closed_loop(clients: usize, client: impl Fn(usize, Instant) -> Vec<f64> + Sync) -> Load {
    let here0 = cpu::all_threads_cpu_ns("self");
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
        server_cpu_us: 0.0,
    }
}

/// The CPU server process `server` has used, in nanoseconds.
fn cpu_ns(server: &Server) -> u64 {
    cpu::all_threads_cpu_ns(&server.child.id().to_string())
}

/// The floor for `real`: this bench's binary again, as the floor server of its ports.
fn start_floor(real: &Server) -> Server {
    let child = Command::new(std::env::current_exe().unwrap())
        .env(floor::FLOOR_OF, format!("{},{}", real.http, real.grpc))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Server::from_child(child).unwrap_or_else(|e| panic!("the floor: {e}"))
}

/// What perf_analyzer (Triton's load tool, scripts/perf-analyzer) measured against the server
/// over `protocol` with `clients` requests in flight: its stable windows' throughput and
/// client-side p50 and p99, and the CPU the server took per request it answered meanwhile.
fn perf_analyzer_load(server: &Server, protocol: &str, clients: usize) -> Load {
    perf_analyzer_over(server, protocol, clients, None)
}

/// As `perf_analyzer_load`, over HTTPS trusting `ca` when given.
fn perf_analyzer_over(server: &Server, protocol: &str, clients: usize, ca: Option<&Path>) -> Load {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/perf-analyzer");
    let port = if protocol == "http" {
        server.http
    } else {
        server.grpc
    };
    let (served0, server0) = (served_requests(server.http, ca), cpu_ns(server));
    let client0 = cpu::waited_children_cpu_ns("self");
    let url = match ca {
        Some(_) => format!("https://127.0.0.1:{port}"),
        None => format!("127.0.0.1:{port}"),
    };
    let tls: Vec<String> = (ca.iter())
        .flat_map(|ca| {
            [
                "--ssl-https-ca-certificates-file".into(),
                ca.display().to_string(),
            ]
        })
        .collect();
    let o = Command::new(script)
        .args(["-m", "lm", "-u", &url, "-i", protocol])
        .args(&tls)
        .args(["--concurrency-range", &clients.to_string()])
        .args([
            "--measurement-interval",
            &((SECONDS * 1000.0) as u64).to_string(),
        ])
        // Three windows within 30% of each other (tighter fails often on two shared cores).
        .args(["--stability-percentage", "30", "--max-trials", "10"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "perf_analyzer: {text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let number = |key: &str| -> f64 {
        let at = text
            .find(key)
            .unwrap_or_else(|| panic!("no `{key}`: {text}"))
            + key.len();
        (text[at..].split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("`{key}` is not a number: {text}"))
    };
    let served = (served_requests(server.http, ca) - served0).max(1);
    Load {
        rps: number("Throughput:"),
        p50: number("p50 latency:"),
        p99: number("p99 latency:"),
        // perf_analyzer's CPU over the requests the server answered meanwhile (its warm-up
        // and unstable windows included, as in the server's figure).
        here_cpu_us: (cpu::waited_children_cpu_ns("self") - client0) as f64 / 1e3 / served as f64,
        server_cpu_us: (cpu_ns(server) - server0) as f64 / 1e3 / served as f64,
    }
}

/// Requests the server has answered `ok` so far (Triton's statistics, over HTTP; over HTTPS
/// with curl, trusting `ca`).
fn served_requests(http_port: u16, ca: Option<&Path>) -> u64 {
    let path = "/v2/models/lm/stats";
    let (status, stats) = match ca {
        None => server::get(http_port, path),
        Some(ca) => {
            let out = Command::new("curl")
                .args(["-s", "--cacert", &ca.display().to_string()])
                .arg(format!("https://127.0.0.1:{http_port}{path}"))
                .output()
                .unwrap();
            (200, serde_json::from_slice(&out.stdout).unwrap_or_default())
        }
    };
    assert_eq!(status, 200, "{stats}");
    stats["model_stats"][0]["inference_stats"]["success"]["count"]
        .as_u64()
        .unwrap()
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

fn main() {
    if let Ok(of) = std::env::var(floor::FLOOR_OF) {
        return floor::run(&of);
    }
    let r = recorded();
    let server = Server::transformer(&[]);
    let floor = start_floor(&server);
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
    let best = |a: Load, b: Load| if a.rps >= b.rps { a } else { b };
    // Each protocol and the in-process batcher in turn, twice; the better run of each kept.
    let keep = |kept: &mut Option<Load>, l: Load| *kept = Some(kept.map_or(l, |p| best(p, l)));
    // The floor's answers are recorded from the real server on its first request of each kind.
    let measure = |clients: usize| {
        let (mut local, mut http, mut grpc) = (None::<Load>, None::<Load>, None::<Load>);
        let (mut floor_http, mut floor_grpc) = (None::<Load>, None::<Load>);
        for _ in 0..2 {
            keep(&mut local, in_process_load(&batcher, &r, clients));
            keep(&mut http, perf_analyzer_load(&server, "http", clients));
            keep(&mut floor_http, perf_analyzer_load(&floor, "http", clients));
            keep(&mut grpc, perf_analyzer_load(&server, "grpc", clients));
            keep(&mut floor_grpc, perf_analyzer_load(&floor, "grpc", clients));
        }
        let floors = (floor_http.unwrap(), floor_grpc.unwrap());
        (local.unwrap(), http.unwrap(), grpc.unwrap(), floors)
    };
    let (one, many) = (measure(1), measure(CLIENTS));
    // HTTPS against plain HTTP, 16 in flight, interleaved twice, the better of each.
    let certs = std::env::temp_dir().join(format!("pjrt-actors-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&certs).unwrap();
    certificates::certificates(&certs, "bench");
    let at = |f: &str| certs.join(f).display().to_string();
    let tls_server = Server::transformer(&[
        "--tls-cert",
        &at("bench.pem"),
        "--tls-key",
        &at("bench.key"),
    ]);
    let ca = certs.join("bench-ca.pem");
    let (mut plain, mut tls) = (None::<Load>, None::<Load>);
    for _ in 0..2 {
        keep(&mut plain, perf_analyzer_load(&server, "http", CLIENTS));
        keep(
            &mut tls,
            perf_analyzer_over(&tls_server, "http", CLIENTS, Some(&ca)),
        );
    }
    let (plain, tls) = (plain.unwrap(), tls.unwrap());
    drop(tls_server);
    let _ = std::fs::remove_dir_all(&certs);
    println!(
        "one-sequence requests; in process: {SECONDS} s a run; served: perf_analyzer's stable {SECONDS} s windows; better of two interleaved runs"
    );
    println!(
        "{:>11} {:>8} {:>12} {:>10} {:>10} {:>12} {:>12}",
        "", "in flight", "requests/s", "p50 us", "p99 us", "cpu us client", "cpu us serve"
    );
    println!(
        "{:>11} {CLIENTS:>8} {:>12.0} {:>10.1} {:>10.1} {:>12.1} {:>12.1}",
        "HTTP", plain.rps, plain.p50, plain.p99, plain.here_cpu_us, plain.server_cpu_us
    );
    println!(
        "{:>11} {CLIENTS:>8} {:>12.0} {:>10.1} {:>10.1} {:>12.1} {:>12.1}",
        "HTTPS", tls.rps, tls.p50, tls.p99, tls.here_cpu_us, tls.server_cpu_us
    );
    for (clients, (local, http, grpc, (floor_http, floor_grpc))) in [(1, one), (CLIENTS, many)] {
        for (name, l) in [
            ("in-process", local),
            ("HTTP", http),
            ("HTTP floor", floor_http),
            ("gRPC", grpc),
            ("gRPC floor", floor_grpc),
        ] {
            println!(
                "{name:>11} {clients:>8} {:>12.0} {:>10.1} {:>10.1} {:>12.1} {:>12.1}",
                l.rps, l.p50, l.p99, l.here_cpu_us, l.server_cpu_us
            );
        }
    }
    let ratio = |a: f64, b: f64| (a / b * 100.0).round() / 100.0;
    let ((local1, http1, grpc1, floor1), (local, http, grpc, floor)) = (one, many);
    // Server CPU a request over the protocol, less the model's own in process, at 16 in flight
    // (goals 25 and 35 µs), against the bare stacks' (the added cost at most twice theirs).
    let http_added = http.server_cpu_us - local.here_cpu_us;
    let grpc_added = grpc.server_cpu_us - local.here_cpu_us;
    println!(
        "{}",
        json!({
            "in_process_rps": local.rps.round(),
            // HTTPS with keep-alive over plain HTTP, 16 in flight: reported, no goal.
            "tls_added_server_cpu_us": (tls.server_cpu_us - plain.server_cpu_us).round(),
            "https_server_cpu_us": tls.server_cpu_us.round(),
            "http_added_server_cpu_us": http_added.round(),
            "grpc_added_server_cpu_us": grpc_added.round(),
            "http_floor_cpu_us": floor.0.server_cpu_us.round(),
            "grpc_floor_cpu_us": floor.1.server_cpu_us.round(),
            "http_added_vs_floor": ratio(http_added, floor.0.server_cpu_us),
            "grpc_added_vs_floor": ratio(grpc_added, floor.1.server_cpu_us),
            "http_floor_p50_us": floor1.0.p50.round(),
            "grpc_floor_p50_us": floor1.1.p50.round(),
            // What the protocol adds to one request, with one in flight (goals 60 and 80 us).
            "http_added_p50_us": (http1.p50 - local1.p50).round(),
            "grpc_added_p50_us": (grpc1.p50 - local1.p50).round(),
            // Requests/s over the protocol / in process, 16 in flight (goal 0.8 each).
            "http_throughput_ratio": ratio(http.rps, local.rps),
            "grpc_throughput_ratio": ratio(grpc.rps, local.rps),
            "http_p99_ratio": ratio(http.p99, local.p99),
            "grpc_p99_ratio": ratio(grpc.p99, local.p99),
            // CPU per request at 16 in flight (µs), where client and server share the cores:
            // in process, all of it; served, the server's and perf_analyzer's.
            "cpu_us_per_request": {
                "in_process": local.here_cpu_us.round(),
                "http_server": http.server_cpu_us.round(),
                "http_client": http.here_cpu_us.round(),
                "grpc_server": grpc.server_cpu_us.round(),
                "grpc_client": grpc.here_cpu_us.round(),
            },
        })
    );
}
