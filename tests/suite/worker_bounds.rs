//! A compile worker is bounded (issue 22, B6–B8): a worker that stops answering is killed at
//! the compile's time limit and replaced, one that outgrows its memory limit ends as
//! `CompilerCrashed`, and a worker never outlives the client that started it.

use std::time::{Duration, Instant};

use pjrt_actors::{Client, CompileOptions, Error};

use crate::common::{check_distinct, distinct_module, eventually, scratch_dir};
use crate::isolation::worker;

/// The compile workers this process started, by their parent pid in /proc.
pub fn worker_pids(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so read after the last ')'.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
            && stat.contains("(pjrt-actors-com")
        {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` is gone (or a zombie nobody reaped: it holds no memory and runs nothing).
/// Bytes process `pid` has read through read(2) and its kind (`rchar` of `/proc/PID/io`).
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    (io.lines().find_map(|l| l.strip_prefix("rchar:")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            stat[stat.rfind(')').map_or(0, |i| i + 1)..]
                .split_whitespace()
                .next()
                == Some("Z")
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// Compiles `program` (a `distinct_module`) through `client` and checks what it computes.
fn compiles_and_runs(client: &Client, program: &str, dims: &[i64]) {
    let exe = client
        .compile_and_load(program, &CompileOptions::default())
        .unwrap();
    check_distinct(&exe, &client.devices()[0], dims, 1);
}

/// A client compiling in one worker whose address space is held to `bytes` (0: no limit).
fn memory_limited(bytes: u64) -> Client {
    Client::builder()
        .compile_in_worker(worker())
        .compile_threads(1)
        .compile_worker_memory(bytes)
        .open()
        .unwrap()
}

fn isolated(timeout: Duration) -> Client {
    Client::builder()
        .compile_in_worker(worker())
        .compile_threads(1)
        .compile_timeout(timeout)
        .memory_cache_entries(0)
        .open()
        .unwrap()
}

#[test]
fn a_stopped_worker_is_killed_at_the_time_limit_and_replaced() {
    let client = isolated(Duration::from_secs(2));
    let (program, dims) = distinct_module(700, 1);
    compiles_and_runs(&client, &program, &dims);
    let pids = worker_pids(std::process::id());
    assert_eq!(pids.len(), 1, "one worker: {pids:?}");
    signal(pids[0], "-STOP");
    let start = Instant::now();
    let (program, dims) = distinct_module(701, 1);
    match client.compile_and_load(&program, &CompileOptions::default()) {
        Err(e @ Error::DeadlineExceeded { after, killed, .. }) => {
            assert_eq!((after, killed), (Duration::from_secs(2), true));
            // It says the worker was killed (it said the compile "runs on to its end").
            let words = e.to_string();
            assert!(
                words.ends_with("; it was killed") && !words.contains("runs on"),
                "{words}"
            );
        }
        other => panic!("expected DeadlineExceeded, got {:?}", other.map(|_| ())),
    }
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    assert!(
        eventually(Duration::from_secs(5), || gone(pids[0])),
        "the stopped worker was killed"
    );
    // The next compile starts a fresh worker and works.
    compiles_and_runs(&client, &program, &dims);
    let fresh = worker_pids(std::process::id());
    assert!(fresh.len() == 1 && fresh[0] != pids[0], "{fresh:?}");
}

#[test]
fn a_worker_binary_that_never_answers_cannot_take_the_pool() {
    // PJRT_ACTORS_COMPILE_WORKER pointing to a script that sleeps, as the red team did, with
    // two compiler threads: every compile is answered at the limit, none waits for ever.
    let dir = scratch_dir("silent-worker");
    let script = dir.join("silent-worker");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 1000\n").unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let client = Client::builder()
        .compile_in_worker(&script)
        .compile_threads(2)
        .compile_timeout(Duration::from_secs(1))
        .open()
        .unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        for i in 0..4 {
            let client = &client;
            s.spawn(move || {
                let (program, _) = distinct_module(710 + i, 1);
                let err = client
                    .compile_and_load(&program, &CompileOptions::default())
                    .map(|_| ())
                    .unwrap_err();
                assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
            });
        }
    });
    // Four compiles on two threads, one second each.
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(5), || worker_pids(std::process::id())
            .is_empty()),
        "every silent worker was killed"
    );
}

/// A program whose compile holds a 48 MiB constant several times over (its text, the parsed
/// attribute, XLA's literal): a few hundred MB of address space.
fn heavy_program() -> String {
    let n = 12 << 20;
    let hex = "0000803F".repeat(n); // n f32 ones, little-endian, MLIR's hex form
    format!(
        "func.func public @main(%a: tensor<f32>) -> tensor<f32> {{\n  %c = stablehlo.constant dense<\"0x{hex}\"> : tensor<{n}xf32>\n  %r = stablehlo.reduce(%c init: %a) applies stablehlo.add across dimensions = [0] : (tensor<{n}xf32>, tensor<f32>) -> tensor<f32>\n  return %r : tensor<f32>\n}}\n"
    )
}

#[test]
fn a_compile_that_outgrows_the_workers_memory_is_a_crash_not_a_machine_filled() {
    // The worker idles at about 1.2 GB of address space (the plugin's own mappings); 1.3 GB
    // leaves ordinary compiles room and this one none.
    let client = memory_limited(1300 << 20);
    let (program, dims) = distinct_module(720, 1);
    compiles_and_runs(&client, &program, &dims);
    let start = Instant::now();
    match client.compile_and_load(heavy_program(), &CompileOptions::default()) {
        Err(Error::CompilerCrashed { .. }) => {}
        other => panic!("expected CompilerCrashed, got {:?}", other.map(|_| ())),
    }
    // A guard against a worker left to thrash, not a speed goal: the crash comes after about
    // 20 s on an idle 2-core machine, and took 33 s with six tests at once on its two cores.
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
    // A fresh worker under the same limit compiles ordinary programs.
    let (program, dims) = distinct_module(721, 1);
    compiles_and_runs(&client, &program, &dims);
    // Without the limit the same program compiles: the limit is what ended it.
    let unlimited = memory_limited(0);
    let exe = unlimited
        .compile_and_load(heavy_program(), &CompileOptions::default())
        .unwrap();
    let zero = unlimited.devices()[0].put(&[0f32], &[]).unwrap();
    let sum = exe.execute(&[&zero]).unwrap()[0].to_vec::<f32>().unwrap();
    assert_eq!(sum, [(12 << 20) as f32]);
}

#[test]
fn a_worker_that_cannot_start_under_its_memory_limit_blames_no_program() {
    // 100 MiB: far below what the plugin maps to load (about 1 GiB).
    let client = memory_limited(100 << 20);
    let (program, _) = distinct_module(730, 1);
    for _ in 0..2 {
        match client.compile_and_load(&program, &CompileOptions::default()) {
            Err(e @ Error::CompileWorkerStart { .. }) => {
                let words = e.to_string();
                assert!(
                    words.contains("limited to 104857600 bytes")
                        && words.contains("0 for no limit")
                        && !words.contains("this program"),
                    "{words}"
                );
            }
            // It was `CompilerCrashed`: "the compiler crashed on this program".
            other => panic!("expected CompileWorkerStart, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_worker_binary_that_will_not_speak_our_protocol_is_refused_at_once() {
    // As an older build's worker does with `--protocol`: it refuses an argument and exits.
    let dir = crate::common::scratch_dir("worker-protocol");
    let script = dir.join("old-worker");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"unexpected argument\" >&2\nexit 1\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let client = Client::builder()
        .compile_in_worker(&script)
        .compile_threads(1)
        .open()
        .unwrap();
    let (program, _) = distinct_module(740, 1);
    let start = Instant::now();
    match client.compile_and_load(&program, &CompileOptions::default()) {
        Err(Error::CompileWorkerStart { reason }) => {
            assert!(
                reason.contains("exited with status 1 before it was ready"),
                "{reason}"
            )
        }
        other => panic!("expected CompileWorkerStart, got {:?}", other.map(|_| ())),
    }
    // Not the compile's 600 s limit: it said at once.
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// A small program the compiler takes seconds over: eight empty parameters of distinct
/// shapes near the program check's limit (about a second each on this machine).
fn slow_program() -> String {
    let types: Vec<String> = (0..8)
        .map(|i| format!("tensor<{}x4096x0xf32>", 4096 - i))
        .collect();
    let params: Vec<String> = (types.iter().enumerate())
        .map(|(i, t)| format!("%a{i}: {t}"))
        .collect();
    let names: Vec<String> = (0..8).map(|i| format!("%a{i}")).collect();
    let results = types.join(", ");
    format!(
        "func.func public @main({}) -> ({results}) {{\n return {} : {results}\n}}\n",
        params.join(", "),
        names.join(", ")
    )
}

/// The child side of `a_worker_dies_with_a_client_killed_by_sigkill`: sets its worker
/// compiling a program that takes it seconds, says the worker's pid, and waits to be killed.
#[test]
#[ignore = "a child process of a_worker_dies_with_a_client_killed_by_sigkill"]
fn orphan_parent_child() {
    let client = memory_limited(0);
    // A first compile starts the worker; it then waits on its pipe, its reads counted.
    (client.compile_and_load(crate::common::add_f32x4(), &CompileOptions::default())).unwrap();
    let worker = worker_pids(std::process::id())[0];
    let read_before = bytes_read(worker);
    let program = slow_program();
    let len = program.len() as u64;
    std::thread::spawn(move || client.compile_and_load(program, &CompileOptions::default()));
    // The request has reached the worker once it has read the program: it is compiling (not
    // waiting on its pipe) when the client dies; an idle worker ends anyway when its stdin
    // closes.
    assert!(eventually(Duration::from_secs(20), || bytes_read(worker)
        >= read_before + len));
    println!("worker {worker}");
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_worker_dies_with_a_client_killed_by_sigkill() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "worker_bounds::orphan_parent_child",
            "--ignored",
            "--nocapture",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let worker: u32 = lines
        .by_ref()
        .map_while(|l| l.ok())
        .find_map(|l| l.strip_prefix("worker ").map(|p| p.trim().parse().unwrap()))
        .expect("the child names its worker");
    assert!(!gone(worker), "the worker runs while its client does");
    child.kill().unwrap();
    child.wait().unwrap();
    // Its compile takes several seconds more: only dying with the client ends it this soon.
    assert!(
        eventually(Duration::from_secs(2), || gone(worker)),
        "worker {worker} outlived the client killed by SIGKILL, compiling"
    );
}

#[test]
fn the_last_drop_waits_for_a_running_compile_no_longer_than_the_shutdown_timeout() {
    // An in-process compile of a long program (about 3 s: PJRT cannot stop it): the last
    // handle's drop returns at the 0.2 s shutdown timeout, leaving the compile to finish
    // unjoined, instead of waiting for it.
    let client = Client::builder()
        .compile_threads(1)
        .shutdown_timeout(Duration::from_millis(200))
        .open()
        .unwrap();
    let (program, _) = distinct_module(734, 4_000);
    let compiling = client.compile_and_load_async(program, &CompileOptions::default());
    let mut compiling = Box::pin(compiling);
    // Polled once, so the compile is queued; then under way on the compile thread once the
    // compile service counts its miss.
    let waker = std::task::Waker::noop();
    let _ = compiling
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker));
    assert!(eventually(Duration::from_secs(20), || client
        .compile_cache_stats()
        .misses
        > 0));
    let start = Instant::now();
    drop(compiling);
    drop(client);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "the last drop took {took:?}");
    // The compile goes on unjoined. Let it end before this test's process exits: an exit tears
    // the plugin down under a thread still compiling in it (a SIGSEGV after the test passed,
    // seen once in a clean clone's CI run), and the exit is not what this test is about. The
    // compile is the only work left in the process, so it has ended once the process's CPU
    // time stops growing.
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut last = cpu_ticks();
    let mut idle = 0;
    while idle < 2 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(250));
        let now = cpu_ticks();
        idle = if now == last { idle + 1 } else { 0 };
        last = now;
    }
}

/// This process's user and system CPU time, in clock ticks (`/proc/self/stat`).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces), from the state field on.
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line; 12 and 13 counting from the state.
    fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
}
