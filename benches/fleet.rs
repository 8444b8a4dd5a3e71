//! Fleet compile caching: 8 processes, each with its own client, compile the same 24 distinct
//! modules at once, first each alone, then sharing one Redis (single flight across processes).
//! Then a fetch-and-load against a compile of the same modules, and a lease holder killed with
//! SIGKILL mid-compile. And waiters on another's compile: Redis commands each sends and the time
//! from the entry's store to each one's hit, polling only and woken by pub/sub. And the fleet
//! again on a Redis Cluster of three masters and three replicas. Last line: one JSON object.
//!
//! The benchmark re-runs itself as its worker processes (`FLEET_ROLE` in the environment).

#[path = "../tests/suite/common/redis_cluster.rs"]
mod redis_cluster;
#[path = "../tests/suite/common/redis_server.rs"]
mod redis_server;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pjrt_actors::{Client, CompileOptions, RedisCacheConfig};
// p50 of milliseconds here: the helper's percentile is unit-agnostic.
use support::percentile_us;

const PROCESSES: usize = 8;
const MODULES: usize = 24;

/// Module `i` of the fleet: `layers` dense layers of width 64 (distinct constants per `i`), so
/// each is a real compile of some hundreds of milliseconds.
fn module(i: usize, layers: usize) -> String {
    let t = "tensor<64x64xf32>";
    let mut body = String::new();
    let mut prev = "%x".to_string();
    for l in 0..layers {
        let c = format!("{:.6}", (i * 1000 + l) as f64 / 997.0);
        body += &format!(
            "    %w{l} = stablehlo.constant dense<{c}> : {t}\n    %d{l} = stablehlo.dot_general {prev}, %w{l}, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}\n    %h{l} = stablehlo.tanh %d{l} : {t}\n    %s{l} = stablehlo.sine %h{l} : {t}\n    %a{l} = stablehlo.add %s{l}, {prev} : {t}\n"
        );
        prev = format!("%a{l}");
    }
    format!(
        "module @fleet{i} {{\n  func.func public @main(%x: {t}) -> {t} {{\n{body}    return {prev} : {t}\n  }}\n}}\n"
    )
}

const LAYERS: usize = 10;

fn open(redis: Option<&str>, lease_ms: u64) -> Client {
    let mut b = Client::builder().compile_threads(2);
    if let Some(url) = redis {
        let mut config = RedisCacheConfig::new(url);
        config.namespace = "fleet-bench".into();
        config.lease = Duration::from_millis(lease_ms);
        b = b.compile_cache_redis_config(config);
    }
    b.open().unwrap()
}

/// A worker process: compiles `modules` (all at once, or one after another with `sequential`)
/// and prints `compiles hits takeovers ms0,ms1,...` (each module's compile-and-load time).
fn worker() {
    let role = std::env::var("FLEET_ROLE").unwrap();
    let redis = std::env::var("FLEET_REDIS").ok().filter(|v| !v.is_empty());
    let lease_ms: u64 = std::env::var("FLEET_LEASE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let (first, count, layers): (usize, usize, usize) = {
        let v: Vec<usize> = std::env::var("FLEET_MODULES")
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        (v[0], v[1], v[2])
    };
    let client = open(redis.as_deref(), lease_ms);
    let compile = |i: usize| {
        let start = Instant::now();
        client
            .compile_and_load(module(i, layers), &CompileOptions::default())
            .unwrap();
        start.elapsed().as_secs_f64() * 1e3
    };
    let times: Vec<f64> = if role == "sequential" {
        (first..first + count).map(compile).collect()
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = (first..first + count)
                .map(|i| s.spawn(move || compile(i)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let s = client.compile_cache_stats();
    let times: Vec<String> = times.iter().map(|t| format!("{t:.2}")).collect();
    println!(
        "{} {} {} {}",
        s.compiles,
        s.redis_hits,
        s.redis_takeovers,
        times.join(",")
    );
}

struct Report {
    compiles: u64,
    hits: u64,
    takeovers: u64,
    times_ms: Vec<f64>,
}

fn spawn(
    role: &str,
    redis: Option<&str>,
    modules: (usize, usize, usize),
    lease_ms: u64,
) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .env("FLEET_ROLE", role)
        .env("FLEET_REDIS", redis.unwrap_or(""))
        .env(
            "FLEET_MODULES",
            format!("{},{},{}", modules.0, modules.1, modules.2),
        )
        .env("FLEET_LEASE_MS", lease_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn report(child: std::process::Child) -> Report {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "a worker failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let f: Vec<&str> = text.split_whitespace().collect();
    Report {
        compiles: f[0].parse().unwrap(),
        hits: f[1].parse().unwrap(),
        takeovers: f[2].parse().unwrap(),
        times_ms: f[3].split(',').map(|t| t.parse().unwrap()).collect(),
    }
}

/// Eight processes compiling the 24 modules at once; wall time and their reports.
fn fleet(redis: Option<&str>) -> (f64, Vec<Report>) {
    let start = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| spawn("fleet", redis, (0, MODULES, LAYERS), 3000))
        .collect();
    let reports: Vec<Report> = children.into_iter().map(report).collect();
    (start.elapsed().as_secs_f64(), reports)
}

fn clear(server: &redis_server::RedisServer) {
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.connection().unwrap())
        .unwrap();
}

/// A holder killed with SIGKILL mid-compile: how long until another process holds the lease.
fn takeover(server: &redis_server::RedisServer, lease_ms: u64) -> (bool, f64) {
    clear(server);
    let url = server.url();
    // A module that takes seconds to compile, so the holder is surely mid-compile when killed.
    let slow = (1000, 1, 1500);
    let mut holder = spawn("sequential", Some(&url), slow, lease_ms);
    let mut conn = server.connection().unwrap();
    let lease_of = |conn: &mut redis::Connection| -> Option<String> {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("fleet-bench:lease:*")
            .query(conn)
            .unwrap();
        let key = keys.first()?;
        redis::cmd("GET").arg(key).query(conn).unwrap()
    };
    let start = Instant::now();
    while lease_of(&mut conn).is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the holder never took the lease"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let waiter = spawn("sequential", Some(&url), slow, lease_ms);
    // Give the waiter time to open its client and start waiting on the lease.
    std::thread::sleep(Duration::from_millis(700));
    let holder_pid = holder.id();
    holder.kill().unwrap();
    let killed = Instant::now();
    let _ = holder.wait();
    let waiter_pid = waiter.id();
    let mut taken_after = None;
    while killed.elapsed() < Duration::from_secs(60) {
        if let Some(token) = lease_of(&mut conn) {
            let pid: u32 = token
                .split(':')
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if pid == waiter_pid {
                taken_after = Some(killed.elapsed().as_secs_f64());
                break;
            }
            assert!(pid == holder_pid, "an unknown lease holder {token}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let r = report(waiter);
    let after = taken_after.unwrap_or(f64::INFINITY);
    let ok = r.compiles == 1 && r.takeovers == 1 && after <= lease_ms as f64 / 1e3 + 1.0;
    (ok, after)
}

/// Commands the server has processed so far.
fn commands(server: &redis_server::RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.connection().unwrap())
        .unwrap();
    (info.lines())
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Waiters on another's compile, in this process at the tier's level: per round a holder takes
/// a fresh key's lease, 8 waiters look it up, the holder stores after `HOLD` (a compile's time).
/// Redis commands per waiter (the round's, less a holder-alone round's) and the p50 time from
/// the store to a waiter's hit, with wake-ups `on` or polling only.
fn waiters(server: &redis_server::RedisServer, on: bool) -> (f64, f64) {
    use pjrt_actors_core::compile::cache::CompileKey;
    use pjrt_actors_core::compile::redis_cache::Lookup;
    const WAITERS: usize = 8;
    const ROUNDS: usize = 10;
    const HOLD: Duration = Duration::from_millis(200);
    let tier = || {
        let mut config = RedisCacheConfig::new(server.url());
        config.namespace = "wait-bench".into();
        config.wake_ups = on;
        pjrt_actors::RedisTier::new(config, Default::default()).unwrap()
    };
    let holder = tier();
    let tiers: Vec<_> = (0..WAITERS).map(|_| tier()).collect();
    let round = |n: usize, waiting: &[std::sync::Arc<pjrt_actors::RedisTier>]| {
        let key = CompileKey::new(&format!("{on}"), format!("{n}").as_bytes(), b"");
        let Lookup::Lease(lease) = holder.lookup(&key) else {
            panic!("the holder takes the lease")
        };
        let before = commands(server);
        let delays = std::thread::scope(|s| {
            let handles: Vec<_> = (waiting.iter())
                .map(|t| {
                    let key = &key;
                    s.spawn(move || {
                        assert!(matches!(t.lookup(key), Lookup::Hit(_)));
                        Instant::now()
                    })
                })
                .collect();
            std::thread::sleep(HOLD);
            holder.publish(&key, b"entry", Some(lease));
            let stored = Instant::now();
            (handles.into_iter())
                .map(|h| {
                    h.join()
                        .unwrap()
                        .saturating_duration_since(stored)
                        .as_secs_f64()
                        * 1e3
                })
                .collect::<Vec<f64>>()
        });
        (commands(server) - before, delays)
    };
    // Warm every tier's connection (and subscription) first, then the holder alone.
    for t in &tiers {
        let _ = t.lookup(&CompileKey::new("warm", b"", b""));
    }
    let _ = round(1000, &tiers);
    let alone: Vec<u64> = (0..3).map(|n| round(2000 + n, &[]).0).collect();
    let alone = alone.iter().min().copied().unwrap_or(0);
    let (mut sent, mut all) = (0u64, Vec::new());
    for n in 0..ROUNDS {
        let (c, d) = round(n, &tiers);
        sent += c.saturating_sub(alone);
        all.extend(d);
    }
    let per_waiter = sent as f64 / (ROUNDS * WAITERS) as f64;
    (per_waiter, percentile_us(&mut all, 50.0))
}

fn main() {
    if std::env::var("FLEET_ROLE").is_ok() {
        return worker();
    }
    let server = redis_server::RedisServer::start(&[
        "--maxmemory",
        "256mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ]);
    let url = server.url();
    // Interleaved twice; the better of each counts.
    let (mut alone, mut shared) = (f64::INFINITY, f64::INFINITY);
    let mut plugin_compiles = 0;
    for _ in 0..2 {
        alone = alone.min(fleet(None).0);
        clear(&server);
        let (wall, reports) = fleet(Some(&url));
        shared = shared.min(wall);
        plugin_compiles = reports.iter().map(|r| r.compiles).sum::<u64>();
        let hits: u64 = reports.iter().map(|r| r.hits).sum();
        println!("shared: {wall:.2} s, {plugin_compiles} plugin compiles, {hits} Redis hits");
    }
    println!(
        "{PROCESSES} processes x {MODULES} modules: {alone:.2} s alone, {shared:.2} s sharing one Redis"
    );
    // The same fleet on a cluster (its slots spread over three masters).
    let cluster = redis_cluster::RedisCluster::start(&[]);
    let (cluster_wall, reports) = fleet(Some(&cluster.url()));
    let cluster_plugin_compiles = reports.iter().map(|r| r.compiles).sum::<u64>();
    let cluster_hits: u64 = reports.iter().map(|r| r.hits).sum();
    println!(
        "on a cluster: {cluster_wall:.2} s, {cluster_plugin_compiles} plugin compiles, {cluster_hits} Redis hits"
    );
    drop(cluster);
    // Each module compiled alone in a fresh process, then fetched and loaded in another.
    let mut compile = report(spawn("sequential", None, (0, MODULES, LAYERS), 3000));
    let mut hit = report(spawn("sequential", Some(&url), (0, MODULES, LAYERS), 3000));
    assert_eq!(
        (hit.compiles, hit.hits),
        (0, MODULES as u64),
        "every module was in Redis"
    );
    let (compile_ms, hit_ms) = (
        percentile_us(&mut compile.times_ms, 50.0),
        percentile_us(&mut hit.times_ms, 50.0),
    );
    println!("per module, p50: compile {compile_ms:.1} ms, Redis fetch + load {hit_ms:.1} ms");
    let lease_ms = 1000;
    let (takeover_ok, after) = takeover(&server, lease_ms);
    println!(
        "lease holder killed: another process held the lease {after:.2} s later (lease {lease_ms} ms)"
    );
    clear(&server);
    let (polled_commands, polled_delay) = waiters(&server, false);
    let (woken_commands, woken_delay) = waiters(&server, true);
    println!(
        "8 waiters on a 200 ms compile: polling, {polled_commands:.1} commands each and the hit {polled_delay:.2} ms after the store (p50); woken, {woken_commands:.1} and {woken_delay:.2} ms"
    );
    println!(
        "{{\"redis_commands_per_waiter_polled\": {polled_commands:.2}, \"redis_commands_per_waiter\": {woken_commands:.2}, \"wake_delay_ms_p50_polled\": {polled_delay:.3}, \"wake_delay_ms_p50\": {woken_delay:.3}, \"plugin_compiles\": {plugin_compiles}, \"cluster_plugin_compiles\": {cluster_plugin_compiles}, \"fleet_speedup\": {:.2}, \"cluster_fleet_speedup\": {:.2}, \"redis_hit_ms\": {hit_ms:.2}, \"redis_hit_ratio\": {:.3}, \"lease_takeover_ok\": {takeover_ok}, \"takeover_after_s\": {after:.2}}}",
        alone / shared,
        alone / cluster_wall,
        hit_ms / compile_ms
    );
}
