//! A fleet of `pjrt-actors serve` replicas on one Redis compile cache: 4 replicas started at
//! once on 8 models (dense stacks, each a real compile) count the plugin compiles across the
//! fleet (goal: one per model) and the time until every replica answers ready; a fifth started
//! later against a cold replica alone (goal: ready in at most a fifth of the time); and a
//! replica killed (SIGKILL) while it holds a model's lease, whose waiting peer takes the lease
//! over within the lease time. Compiles are read from each replica's /metrics. Last line: one
//! JSON object.

#[path = "../../tests/suite/common/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODELS: usize = 8;
const LAYERS: usize = 4;
const LEASE_MS: u64 = 1000;

/// Model `i`: `layers` dense 64x64 layers with distinct constants, so a distinct compile.
fn model(i: usize, layers: usize) -> String {
    let t = "tensor<4x64xf32>";
    let w = "tensor<64x64xf32>";
    let mut body = String::new();
    let mut prev = "%x".to_string();
    for l in 0..layers {
        let c = format!("{:.6}", (i * 1000 + l) as f64 / 997.0);
        body += &format!(
            "    %w{l} = stablehlo.constant dense<{c}> : {w}\n    %d{l} = stablehlo.dot_general {prev}, %w{l}, contracting_dims = [1] x [0] : ({t}, {w}) -> {t}\n    %h{l} = stablehlo.tanh %d{l} : {t}\n"
        );
        prev = format!("%h{l}");
    }
    format!(
        "module @m{i} {{\n  func.func public @main(%x: {t}) -> {t} {{\n{body}    return {prev} : {t}\n  }}\n}}\n"
    )
}

fn repository(name: &str, models: &[(usize, usize)]) -> (PathBuf, Vec<String>) {
    let dir = std::env::temp_dir().join(format!(
        "pjrt-actors-serve-fleet-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = Vec::new();
    for &(i, layers) in models {
        let path = dir.join(format!("m{i}.mlir"));
        std::fs::write(&path, model(i, layers)).unwrap();
        args.push("--model".to_string());
        args.push(format!("m{i}={}", path.display()));
    }
    (dir, args)
}

struct Replica {
    child: Child,
    http: u16,
    started: Instant,
}

/// Starts a replica (on the Redis tier `redis`, if any); `listen` waits for it.
fn spawn(models: &[String], redis: Option<&str>) -> (Child, Instant) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"));
    command
        .args(["--cpu-devices", "1", "serve"])
        .args(models)
        .args(["--http-port", "0", "--grpc-port", "0"])
        .env("PJRT_ACTORS_CACHE_REDIS_LEASE_MS", LEASE_MS.to_string())
        .env_remove("PJRT_ACTORS_CACHE_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    match redis {
        Some(url) => command.env("PJRT_ACTORS_CACHE_REDIS", url),
        None => command.env_remove("PJRT_ACTORS_CACHE_REDIS"),
    };
    (command.spawn().unwrap(), Instant::now())
}

/// Reads a replica's listening line (printed once its models are loaded).
fn listen((mut child, started): (Child, Instant)) -> Replica {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let at = line.find("http=").unwrap_or_else(|| panic!("{line}")) + 5;
    let addr = line[at..].split_whitespace().next().unwrap();
    let http = addr.rsplit(':').next().unwrap().parse().unwrap();
    Replica {
        child,
        http,
        started,
    }
}

fn start(models: &[String], redis: Option<&str>) -> Replica {
    listen(spawn(models, redis))
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

impl Replica {
    /// Seconds from its start until it answers ready (every model loaded).
    fn ready(&self) -> f64 {
        loop {
            if let Some((200, _)) = get(self.http, "/v2/health/ready") {
                return self.started.elapsed().as_secs_f64();
            }
            assert!(
                self.started.elapsed() < Duration::from_secs(300),
                "never ready"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One of its compile cache's counters, from /metrics.
    fn events(&self, event: &str) -> u64 {
        let (_, text) = get(self.http, "/metrics").unwrap();
        let key = format!("pjrt_compile_cache_events_total{{event=\"{event}\"}} ");
        (text.lines())
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {key} in /metrics")) as u64
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn flush(server: &redis_server::RedisServer) {
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.connection().unwrap())
        .unwrap();
}

fn main() {
    let server = redis_server::RedisServer::start(&[]);
    let url = server.url();
    let (dir, models) = repository(
        "eight",
        &(0..MODELS).map(|i| (i, LAYERS)).collect::<Vec<_>>(),
    );

    // A cold replica alone, on no cache: the time a replica takes to compile its models.
    let cold = start(&models, None);
    let cold_s = cold.ready();
    let cold_compiles = cold.events("compiles");
    cold.stop();

    // Four at once on one Redis, then a fifth once they serve.
    flush(&server);
    let fleet: Vec<Replica> = (0..4).map(|_| start(&models, Some(&url))).collect();
    let fleet_ready: Vec<f64> = fleet.iter().map(Replica::ready).collect();
    let all_ready_s = fleet_ready.iter().cloned().fold(0.0, f64::max);
    let compiles: u64 = fleet.iter().map(|r| r.events("compiles")).sum();
    let hits: u64 = fleet.iter().map(|r| r.events("redis_hits")).sum();
    let wakeups: u64 = fleet.iter().map(|r| r.events("redis_wakeups")).sum();
    let waits: u64 = fleet.iter().map(|r| r.events("redis_lease_waits")).sum();
    let late = start(&models, Some(&url));
    let late_s = late.ready();
    let late_compiles = late.events("compiles");
    late.stop();
    for r in fleet {
        r.stop();
    }
    println!(
        "cold replica alone: ready in {cold_s:.2} s ({cold_compiles} compiles); 4 at once on one Redis: all ready in {all_ready_s:.2} s, {compiles} compiles across the fleet, {hits} Redis hits, {waits} waits on a peer's lease, {wakeups} of them woken"
    );
    println!("a fifth replica later: ready in {late_s:.2} s, {late_compiles} compiles");

    // A replica killed while it holds a lease: one slow model; its peer waits, then takes over.
    flush(&server);
    let (slow_dir, slow) = repository("slow", &[(100, 300)]);
    let (mut holder, _) = spawn(&slow, Some(&url));
    let mut conn = server.connection().unwrap();
    let leased = |conn: &mut redis::Connection| -> bool {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("pjrt-actors:lease:*")
            .query(conn)
            .unwrap();
        !keys.is_empty()
    };
    let t = Instant::now();
    while !leased(&mut conn) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the holder never took the lease"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let peer = spawn(&slow, Some(&url));
    std::thread::sleep(Duration::from_millis(500)); // the peer opens and waits on the lease
    holder.kill().unwrap();
    let killed = Instant::now();
    let _ = holder.wait();
    let peer = listen(peer);
    peer.ready();
    let peer_ready_after_kill = killed.elapsed().as_secs_f64();
    let takeovers = peer.events("redis_takeovers");
    let peer_compiles = peer.events("compiles");
    peer.stop();
    println!(
        "a replica killed holding a lease: its peer took over ({takeovers} takeover, {peer_compiles} compile) and was ready {peer_ready_after_kill:.2} s after the kill (lease {LEASE_MS} ms)"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&slow_dir);
    println!(
        "{{\"serve_fleet_compiles\": {compiles}, \"models\": {MODELS}, \"all_ready_s\": {all_ready_s:.3}, \"cold_ready_s\": {cold_s:.3}, \"late_ready_s\": {late_s:.3}, \"warm_ready_ratio\": {:.3}, \"late_compiles\": {late_compiles}, \"killed_holder_takeovers\": {takeovers}, \"peer_ready_after_kill_s\": {peer_ready_after_kill:.3}}}",
        late_s / cold_s
    );
}
