//! The GPU check's own checks in one binary (what `scripts/gpu-check build` carries to a GPU
//! machine, which has no Rust toolchain): the plugin's devices, compile for a topology,
//! defragment compaction, the DMA round trip, host send/recv callbacks, the main job batched
//! and unbatched, two-platform jax.export artifacts, `pjrt-actors serve` on the plugin, and
//! two processes forming one distributed client through Redis. Prints a
//! line per check and, last, one JSON object. Runs on any plugin (`PJRT_PLUGIN_PATH`); on CPU
//! it checks itself.
//!
//! `gpu_check [--requests N] [--redis-server PATH] [--budget SECONDS]` runs every step, each in
//! a process of its own so that a plugin abort loses only that step; `gpu_check --step NAME`
//! is one step and `gpu_check --node I --nodes N --redis URL` one node (both started by the
//! check itself).

#[allow(dead_code)]
#[path = "serve.rs"]
mod serve;

#[allow(dead_code)]
#[path = "distributed_node.rs"]
mod distributed_node;

#[allow(dead_code)]
#[path = "send_recv_callbacks.rs"]
mod send_recv_callbacks;

#[path = "gpu_check/exported.rs"]
mod exported;
#[path = "gpu_check/summary.rs"]
mod summary;
use summary::failed_steps;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}

/// One node: open, print `devices addressable process_index`.
fn node(node: i64, nodes: i64, url: &str) -> pjrt_actors::Result<()> {
    // Preallocation comes from the environment (scripts/gpu-check sets PJRT_ACTORS_PREALLOCATE
    // =false), which a plugin without the option (the 0.115 CPU one) opens without.
    let client = distributed_node::open_node(node, nodes, url, "gpu-check", true)?;
    println!(
        "{} {} {}",
        client.device_count(),
        client.local_device_count(),
        client.process_index()
    );
    Ok(())
}

/// Two nodes through a Redis started from `redis_server`: each one's (devices, addressable).
fn two_nodes(redis_server: &str) -> Result<Vec<(u64, u64, u64)>, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| e.to_string())?
        .local_addr()
        .map_err(|e| e.to_string())?
        .port();
    let mut server = Command::new(redis_server)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {redis_server}: {e}"))?;
    // Wait until it listens (as the tests' RedisServer does), not a fixed while.
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() > Duration::from_secs(10) {
            let _ = server.kill();
            return Err(format!(
                "{redis_server} did not listen on port {port} within 10 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("redis://127.0.0.1:{port}");
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let children: Vec<_> = (0..2)
        .map(|i| {
            Command::new(&me)
                .args(["--node", &i.to_string(), "--nodes", "2", "--redis", &url])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for child in children {
        let o = child.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&o.stdout);
        let v: Vec<u64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() != 3 {
            let _ = server.kill();
            return Err(format!(
                "a node failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        out.push((v[0], v[1], v[2]));
    }
    let _ = server.kill();
    Ok(out)
}

/// Compiles unloaded for the client's own topology, loads the result and runs it; says which
/// path compiled it (`PJRT_Compile`, or the compile service's load-and-release fallback),
/// whether anything stayed loaded, and what the plugin answers to a topology made by name (eight
/// devices: compiled for, then refused at load where this process has fewer).
fn compile_for_topology(client: &pjrt_actors::Client) -> String {
    let run = || -> pjrt_actors::Result<String> {
        let program = "module @twice { func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> { %0 = stablehlo.add %x, %x : tensor<4xf32>\n return %0 : tensor<4xf32> } }";
        let topology = client.topology()?;
        let (live, compiles) = (
            client.live_executables()?.len(),
            client.compile_cache_stats().compiles,
        );
        let exe = client.compile_for_topology(program, &Default::default(), &topology)?;
        let path = if client.compile_cache_stats().compiles == compiles {
            "PJRT_Compile"
        } else {
            "load-and-release fallback"
        };
        let left_loaded = client.live_executables()?.len() - live;
        let loaded = exe.load(client)?;
        let x = client.devices()[0].put(&[1.0f32, 2.0, 3.0, 4.0], &[4])?;
        let y = loaded.execute(&[&x])?[0].to_vec::<f32>()?;
        // Eight devices, which this process has not got (on a one-GPU machine): built ahead
        // of time all the same where the plugin has `PJRT_Compile`, and refused at load here.
        let by_name = match client.create_topology(
            &topology.platform_name,
            &[("topology", pjrt_actors::NamedValue::String("1x1x8".into()))],
        ) {
            Ok(t) => {
                let ahead = match client.compile_for_topology(program, &Default::default(), &t) {
                    Ok(exe) => format!(
                        "compiled for it ({} bytes), load here: {}",
                        exe.serialize().len(),
                        match exe.load(client) {
                            Ok(_) => "ok".to_string(),
                            Err(e) => format!("refused ({e})"),
                        }
                    ),
                    Err(e) => format!("compile for it failed: {e}"),
                };
                format!("{} devices; {ahead}", t.device_descriptions.len())
            }
            Err(e) => format!("refused: {e}"),
        };
        Ok(if y == [2.0, 4.0, 6.0, 8.0] {
            format!(
                "ok via {path}, {left_loaded} left loaded; create_topology(\"{}\", topology=1x1x8): {by_name}",
                topology.platform_name
            )
        } else {
            format!("wrong answer {y:?}")
        })
    };
    run().unwrap_or_else(|e| format!("failed: {e}"))
}

/// 4,000 arrays of 16 KiB, every other one deleted, then a defragment: what moved and how the
/// allocator's largest free block compares with its free bytes before and after.
fn defragment_compaction(client: &pjrt_actors::Client) -> String {
    let run = || -> pjrt_actors::Result<String> {
        let device = &client.devices()[0];
        let arrays = (0..4000)
            .map(|i| device.put(&vec![i as f32; 4096], &[4096]))
            .collect::<pjrt_actors::Result<Vec<_>>>()?;
        let kept: Vec<_> = arrays.into_iter().step_by(2).collect();
        let report = client.defragment()?;
        let intact = (kept.iter().enumerate())
            .all(|(i, a)| a.to_vec::<f32>().is_ok_and(|v| v[0] == (2 * i) as f32));
        let ratio = report.free_block_ratio.map_or(
            "not reported (no allocator statistics)".to_string(),
            |(before, after)| format!("{before:.3} -> {after:.3}"),
        );
        Ok(format!(
            "moved {} ({} bytes), free-block ratio before/after {ratio}, data intact: {intact}",
            report.moved, report.bytes
        ))
    };
    run().unwrap_or_else(|e| format!("failed: {e}"))
}

/// The DMA round trip of 64 MiB (upload, then read back), with mapped staging on both ends
/// against the same through plain host memory: data checked, medians of 9 interleaved rounds.
fn dma_round_trip(client: &pjrt_actors::Client) -> String {
    use pjrt_actors::{ElementType, HostBuffer, SharedBytes};
    const BYTES: usize = 64 << 20;
    let run = || -> pjrt_actors::Result<String> {
        let device = &client.devices()[0];
        let filled = || {
            let mut b = SharedBytes::zeroed(BYTES);
            for (i, x) in b.get_mut().expect("new").iter_mut().enumerate() {
                *x = (i % 251) as u8;
            }
            b
        };
        let up = match client.dma_map(filled()) {
            Err(pjrt_actors::Error::Unsupported { .. }) => {
                return Ok("not supported by this plugin".into());
            }
            other => other?,
        };
        let mut down = client.dma_map(SharedBytes::zeroed(BYTES))?;
        let plain_up = filled();
        let mut plain_down = vec![0u8; BYTES];
        let dims = [(BYTES / 4) as i64];
        let trip = |source: SharedBytes, target: &mut [u8]| -> pjrt_actors::Result<f64> {
            let start = std::time::Instant::now();
            let x = client.buffer_from_host(
                HostBuffer::ZeroCopy(source),
                ElementType::F32,
                &dims,
                device,
                None,
            )?;
            x.read_bytes_into(target)?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        };
        let (mut mapped, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..9 {
            mapped.push(trip(up.bytes(), down.memory_mut()?)?);
            plain.push(trip(plain_up.clone(), &mut plain_down)?);
        }
        if down.memory() != up.memory() || plain_down != plain_up[..] {
            return Ok("failed: the bytes read back differ from those uploaded".into());
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (m, p) = (median(&mut mapped), median(&mut plain));
        Ok(format!(
            "64 MiB up and back: mapped staging {m:.2} ms, plain host memory {p:.2} ms, ratio {:.3}",
            m / p
        ))
    };
    run().unwrap_or_else(|e| format!("failed: {e}"))
}

/// The steps, each run in a process of its own (so a plugin abort in one loses only that
/// step), with its time limit in seconds.
const STEPS: &[(&str, u64)] = &[
    ("devices", 20),
    ("topology", 30),
    ("defragment", 40),
    ("dma", 40),
    ("send_recv", 30),
    ("serve", 60),
    ("exported", 30),
    ("kserve", 40),
    ("nodes", 40),
];

/// One step in this process: prints what it found, then one JSON object, last.
fn step(name: &str, requests: u64) -> Result<serde_json::Value, String> {
    let open = || pjrt_actors::Client::open().map_err(|e| e.to_string());
    Ok(match name {
        "devices" => {
            let client = open()?;
            println!(
                "platform {} {}, {} devices",
                client.platform(),
                client.platform_version(),
                client.device_count()
            );
            json!({"platform": client.raw_platform_name(), "devices": client.device_count()})
        }
        "topology" => {
            let result = compile_for_topology(&open()?);
            println!("compile for the client's topology: {result}");
            json!({ "compile_for_topology": result })
        }
        "defragment" => {
            let result = defragment_compaction(&open()?);
            println!("defragment after freeing every other of 4,000 arrays: {result}");
            json!({ "defragment": result })
        }
        "dma" => {
            let result = dma_round_trip(&open()?);
            println!("DMA round trip: {result}");
            json!({ "dma": result })
        }
        "send_recv" => {
            let (_, line) = send_recv_callbacks::run().map_err(|e| e.to_string())?;
            println!("send/recv callbacks: {line}");
            json!({ "send_recv": serde_json::from_str::<serde_json::Value>(&line).map_err(|e| e.to_string())? })
        }
        "serve" => {
            let run =
                |mode| serve::run(requests, serve::WORKERS, 97, mode).map_err(|e| e.to_string());
            let (batched, unbatched) = (run(serve::Mode::Batched)?, run(serve::Mode::Unbatched)?);
            let rps = |r: &serve::Report| r.requests as f64 / r.seconds;
            println!(
                "serve: batched {:.0} requests/s (p99 {:.0} us, {} mismatches), unbatched {:.0} requests/s (p99 {:.0} us, {} mismatches)",
                rps(&batched),
                batched.p99_us,
                batched.mismatches,
                rps(&unbatched),
                unbatched.p99_us,
                unbatched.mismatches
            );
            json!({
                "batched_rps": rps(&batched).round(),
                "unbatched_rps": rps(&unbatched).round(),
                "batching_speedup": (rps(&batched) / rps(&unbatched) * 100.0).round() / 100.0,
                "batched_p99_us": batched.p99_us.round(),
                "unbatched_p99_us": unbatched.p99_us.round(),
                "mismatches": batched.mismatches + unbatched.mismatches,
            })
        }
        "exported" => {
            let result = exported::exported(&open()?)?;
            println!("two-platform exports: {result}");
            json!({ "exported": result })
        }
        "kserve" => {
            let result = exported::kserve()?;
            println!("pjrt-actors serve: {result}");
            json!({ "kserve": result })
        }
        "nodes" => {
            let path = arg("--redis-server").ok_or("no --redis-server given")?;
            match two_nodes(&path) {
                Ok(nodes) => {
                    println!("two nodes: (devices, addressable, process index) = {nodes:?}");
                    json!({ "two_nodes": format!("{nodes:?}") })
                }
                // The 0.115 CPU plugin has no multi-process client (the 0.81 one has).
                Err(e) if e.contains("Unexpected option name") && e.contains("num_nodes") => {
                    println!("two nodes: not supported by this plugin: {e}");
                    json!({ "two_nodes": format!("not supported by this plugin: {e}") })
                }
                Err(e) => return Err(e),
            }
        }
        other => return Err(format!("no step `{other}`")),
    })
}

/// Runs every step in a child process within `budget` seconds in all: their lines, then the
/// merged JSON. A step that fails, is killed or runs out of time says so under its name.
fn run_steps(budget: u64) -> serde_json::Value {
    use std::io::Read;
    let me = std::env::current_exe().expect("own path");
    let passed: Vec<String> = ["--requests", "--redis-server"]
        .iter()
        .filter_map(|f| arg(f).map(|v| [f.to_string(), v]))
        .flatten()
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(budget);
    let mut summary = serde_json::Map::new();
    for (name, limit) in STEPS {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let limit = Duration::from_secs(*limit).min(left);
        if limit.is_zero() {
            println!("{name}: not run (the check's time is up)");
            summary.insert(name.to_string(), "not run: the check's time is up".into());
            continue;
        }
        let spawned = Command::new(&me)
            .args(["--step", name])
            .args(&passed)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                summary.insert(name.to_string(), format!("not started: {e}").into());
                continue;
            }
        };
        // Drained while it runs: the plugin logs freely to stderr, and a full pipe would stall it.
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_string(&mut text);
                }
                text
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let start = std::time::Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if start.elapsed() < limit => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let (out, err) = (
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        );
        let last = out.lines().rev().find(|l| l.starts_with('{'));
        for line in out.lines().filter(|l| !l.starts_with('{')) {
            println!("{line}");
        }
        let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        match (
            status,
            last.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()),
        ) {
            (Some(s), Some(serde_json::Value::Object(found))) if s.success() => {
                summary.extend(found)
            }
            (Some(s), _) => {
                let why = format!("failed ({s}): {tail}");
                println!("{name}: {why}");
                summary.insert(name.to_string(), why.into());
            }
            (None, _) => {
                let why = format!("killed after {limit:?} (time limit): {tail}");
                println!("{name}: {why}");
                summary.insert(name.to_string(), why.into());
            }
        }
    }
    summary.into()
}

fn main() -> std::process::ExitCode {
    if let Some(i) = arg("--node") {
        let nodes = arg("--nodes").and_then(|v| v.parse().ok()).unwrap_or(2);
        return match node(
            i.parse().unwrap_or(0),
            nodes,
            &arg("--redis").unwrap_or_default(),
        ) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let requests: u64 = arg("--requests")
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    if let Some(name) = arg("--step") {
        return match step(&name, requests) {
            Ok(json) => {
                println!("{json}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let budget = arg("--budget").and_then(|v| v.parse().ok()).unwrap_or(260);
    let mut summary = run_steps(budget);
    // The exit status says whether every step passed: a failed, wrong, killed or unrun step
    // fails the check (it exited 0 whatever failed).
    let failed = failed_steps(&summary);
    summary["failed_steps"] = json!(failed);
    println!("{summary}");
    match failed.is_empty() {
        true => std::process::ExitCode::SUCCESS,
        false => std::process::ExitCode::FAILURE,
    }
}
