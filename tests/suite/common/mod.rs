//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cpu;
pub mod fleet;
pub mod redis_cluster;
pub mod redis_server;
pub mod tcp_proxy;

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Threads in this process, from /proc.
pub fn thread_count() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Waits until `f` holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// Runs `f` on a thread and fails the test if it does not finish in `timeout`.
pub fn within<T: Send + 'static>(timeout: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(timeout) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The worker panicked: re-raise its panic here, with its own message.
            std::panic::resume_unwind(worker.join().unwrap_err())
        }
        Err(_) => panic!("did not finish within {timeout:?}: hang"),
    }
}

/// A scratch directory unique to this test process.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pjrt-actors-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The disk compile cache's entries in `dir` (its `.pjx` files), sorted.
pub fn cache_entries(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (std::fs::read_dir(dir).unwrap().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pjx"))
        .collect();
    files.sort();
    files
}

/// `tensor<2x3xf32>`, or `tensor<f32>` for a scalar.
pub fn tensor(dims: &[i64], elem: &str) -> String {
    if dims.is_empty() {
        format!("tensor<{elem}>")
    } else {
        let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        format!("tensor<{}x{elem}>", d.join("x"))
    }
}

/// A module whose `main` applies a binary StableHLO op to two arguments of one type.
pub fn binary_program(op: &str, dims: &[i64], elem: &str) -> String {
    let t = tensor(dims, elem);
    format!(
        "module @{op}_prog {{\n  func.func public @main(%a: {t}, %b: {t}) -> {t} {{\n    %0 = stablehlo.{op} %a, %b : {t}\n    return %0 : {t}\n  }}\n}}\n"
    )
}

/// The tiny `f32[4]` add every benchmark and stress test uses.
pub fn add_f32x4() -> String {
    binary_program("add", &[4], "f32")
}

/// A module over `n` replicas (`num_replicas` in its attributes) adding two f32[4] arrays.
pub fn replicated_add(n: usize) -> String {
    format!(
        "module @replicated attributes {{mhlo.num_replicas = {n} : i32, mhlo.num_partitions = 1 : i32}} {{\n  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {{\n    %0 = stablehlo.add %a, %b : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }}\n}}\n"
    )
}

/// Module `i` of a family of distinct programs: `(a + b) * a` over `f32[rows, cols]`, shapes
/// differing by `i`, with `extra` chained `add`s of `b` to make compiles slower when wanted.
/// Its result on small integers is exact: `(a + b) * a + extra * b`.
pub fn distinct_module(i: usize, extra: usize) -> (String, Vec<i64>) {
    let dims = vec![(i % 13 + 1) as i64, (i / 13 + 1) as i64];
    let t = tensor(&dims, "f32");
    let mut body =
        format!("    %s = stablehlo.add %a, %b : {t}\n    %p0 = stablehlo.multiply %s, %a : {t}\n");
    for k in 0..extra {
        body.push_str(&format!(
            "    %p{} = stablehlo.add %p{k}, %b : {t}\n",
            k + 1
        ));
    }
    let program = format!(
        "module @m{i} {{\n  func.func public @main(%a: {t}, %b: {t}) -> {t} {{\n{body}    return %p{extra} : {t}\n  }}\n}}\n"
    );
    (program, dims)
}

/// Runs module `i` of `distinct_module` and checks its result.
pub fn check_distinct(
    exe: &pjrt_actors::LoadedExecutable,
    device: &pjrt_actors::Device,
    dims: &[i64],
    extra: usize,
) {
    let n = dims.iter().product::<i64>() as usize;
    let a: Vec<f32> = (0..n).map(|k| (k % 7) as f32).collect();
    let b: Vec<f32> = (0..n).map(|k| (k % 5) as f32 + 1.0).collect();
    let out = exe
        .execute(&[
            &device.put(&a, dims).unwrap(),
            &device.put(&b, dims).unwrap(),
        ])
        .unwrap();
    let expected: Vec<f32> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| (a + b) * a + extra as f32 * b)
        .collect();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), expected, "{}", exe.name());
}

/// The client's `k`-th device, or the one `k` wraps to on a client with fewer (a one-GPU
/// machine): for tests that place work off device 0 where they can, but whose subject is not
/// which device it lands on.
pub fn nth_device(client: &pjrt_actors::Client, k: usize) -> pjrt_actors::Device {
    let devices = client.devices();
    devices[k % devices.len()].clone()
}

/// Runs the ignored test `name` of this binary in a child process with `env` set, killed after
/// `timeout`, and fails unless it ran and passed. A process that ends itself (LAPACK's XERBLA
/// exits with status 0) or a test filter that matched nothing also exits 0, so success is the
/// child's own report that its one test passed.
pub fn run_child_test(name: &str, env: &[(&str, String)], timeout: Duration) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", name, "--ignored", "--nocapture"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} did not finish within {timeout:?}: hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} ({env:?}) failed or did not run ({:?}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The plugin under test's PJRT C API version, `(major, minor)`.
pub fn plugin_api() -> (i32, i32) {
    static API: std::sync::OnceLock<(i32, i32)> = std::sync::OnceLock::new();
    *API.get_or_init(|| pjrt_actors::Client::open().unwrap().plugin_api_version())
}

/// Whether the plugin under test speaks PJRT C API 0.100 or later (zml's CPU build, 0.106, and
/// the jaxlib 0.11 one, 0.115), whose answers differ from 0.81's where the tests say: a newer
/// StableHLO, no cost analysis on the CPU client.
pub fn new_abi() -> bool {
    plugin_api() >= (0, 100)
}

/// Whether the plugin's CPU client is the 0.115 one: it refuses create options it does not know
/// (zml's 0.106 build and 0.81 ignore them), `num_nodes` and `node_id` among them, and has
/// `PJRT_Compile` (compiling for another topology); the 0.106 and 0.81 builds have neither.
pub fn strict_cpu_client() -> bool {
    plugin_api() >= (0, 115)
}

/// A multi-process client's open on the plugin under test: on 0.115, whose CPU client takes
/// neither `num_nodes` nor `node_id`, the typed refusal naming the first it meets (and `None`);
/// on 0.81 and 0.106 the client.
pub fn node_or_refusal(
    opened: pjrt_actors::Result<pjrt_actors::Client>,
) -> Option<pjrt_actors::Client> {
    if !strict_cpu_client() {
        return Some(opened.unwrap());
    }
    let text = opened.map(|_| ()).unwrap_err().to_string();
    assert!(
        text.contains("num_nodes") || text.contains("node_id"),
        "{text}"
    );
    None
}
