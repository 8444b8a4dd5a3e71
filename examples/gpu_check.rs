//! The GPU check's own checks in one binary (what `scripts/gpu-check build` carries to a GPU
//! machine, which has no Rust toolchain): the plugin's devices, compile for a topology,
//! defragment compaction, the DMA round trip, host send/recv callbacks, the main job batched
//! and unbatched, and two processes forming one distributed client through Redis. Prints a
//! line per check and, last, one JSON object. Runs on any plugin (`PJRT_PLUGIN_PATH`); on CPU
//! it checks itself.
//!
//! `gpu_check [--requests N] [--redis-server PATH]`; `gpu_check --node I --nodes N --redis URL`
//! is one node (started by the check itself).

#[allow(dead_code)]
#[path = "serve.rs"]
mod serve;

#[allow(dead_code)]
#[path = "distributed_node.rs"]
mod distributed_node;

#[allow(dead_code)]
#[path = "send_recv_callbacks.rs"]
mod send_recv_callbacks;

use std::process::{Command, Stdio};
use std::time::Duration;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}

/// One node: open, print `devices addressable process_index`.
fn node(node: i64, nodes: i64, url: &str) -> pjrt_actors::Result<()> {
    let client = distributed_node::open_node(node, nodes, url, "gpu-check", false)?;
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
    std::thread::sleep(Duration::from_millis(300));
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
/// whether anything stayed loaded, and what the plugin answers to a topology made by name.
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
        let by_name = match client.create_topology(
            &topology.platform_name,
            &[("topology", pjrt_actors::NamedValue::String("1x1x1".into()))],
        ) {
            Ok(t) => format!("{} devices", t.device_descriptions.len()),
            Err(e) => format!("refused: {e}"),
        };
        Ok(if y == [2.0, 4.0, 6.0, 8.0] {
            format!(
                "ok via {path}, {left_loaded} left loaded; create_topology(\"{}\", topology=1x1x1): {by_name}",
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
    let client = pjrt_actors::Client::open().expect("a plugin");
    println!(
        "platform {} {}, {} devices",
        client.platform(),
        client.platform_version(),
        client.device_count()
    );
    let topology = compile_for_topology(&client);
    println!("compile for the client's topology: {topology}");
    let defragment = defragment_compaction(&client);
    println!("defragment after freeing every other of 4,000 arrays: {defragment}");
    let dma = dma_round_trip(&client);
    println!("DMA round trip: {dma}");
    drop(client);
    let send_recv = match send_recv_callbacks::run() {
        Ok((_, json)) => json,
        Err(e) => format!(
            "{{\"send_recv\":\"failed: {}\"}}",
            e.to_string().replace('"', "'")
        ),
    };
    println!("send/recv callbacks: {send_recv}");
    let batched =
        serve::run(requests, serve::WORKERS, 97, serve::Mode::Batched).expect("batched serve");
    let unbatched =
        serve::run(requests, serve::WORKERS, 97, serve::Mode::Unbatched).expect("unbatched serve");
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
    let nodes = match arg("--redis-server") {
        Some(path) => two_nodes(&path),
        None => Err("no --redis-server given".into()),
    };
    match &nodes {
        Ok(n) => println!("two nodes: (devices, addressable, process index) = {n:?}"),
        Err(e) => println!("two nodes: not run: {e}"),
    }
    println!(
        "{{\"batched_rps\": {:.0}, \"unbatched_rps\": {:.0}, \"batching_speedup\": {:.2}, \"batched_p99_us\": {:.0}, \"unbatched_p99_us\": {:.0}, \"mismatches\": {}, \"two_nodes\": \"{}\", \"compile_for_topology\": \"{}\", \"defragment\": \"{}\", \"dma\": \"{}\", \"send_recv\": {send_recv}}}",
        rps(&batched),
        rps(&unbatched),
        rps(&batched) / rps(&unbatched),
        batched.p99_us,
        unbatched.p99_us,
        batched.mismatches + unbatched.mismatches,
        match &nodes {
            Ok(n) => format!("{n:?}"),
            Err(e) => e.replace('"', "'"),
        },
        topology.replace('"', "'"),
        defragment.replace('"', "'"),
        dma.replace('"', "'"),
    );
    std::process::ExitCode::SUCCESS
}
