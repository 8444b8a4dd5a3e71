//! The compile service on the CPU plugin, measured in one run: 16 distinct small modules (a few
//! matmuls and a tanh) compiled one after another vs all at once through the pool; a memory
//! cache hit; a disk cache hit vs a plain compile of the same module; and how many compiles 32
//! concurrent identical requests cause; and what the known-defect check (run on every compile
//! miss where the plugin has table entries) costs on the served transformer's portable bytecode
//! and on a long text program, against compiling the transformer; and what the known-defect fix
//! costs a program that uses atan (compile and run, fixed against as written); and a signed
//! Redis hit against an unsigned one (compile/signed.rs). Prints a table, then one JSON object
//! as the last line.

#[path = "../tests/suite/common/redis_server.rs"]
mod redis_server;
#[path = "compile/signed.rs"]
mod signed;
mod support;

use std::time::Instant;

use pjrt_actors::{Client, CompileOptions};
use support::*;

const MODULES: usize = 16;
const ROUNDS: usize = 3;

/// Module `i` of round `round`: distinct shapes within a round; the round's constant makes
/// every round's modules distinct keys without changing the work.
fn module(i: usize, round: usize) -> String {
    let n = 8 + 4 * i;
    let t = format!("tensor<{n}x{n}xf32>");
    format!(
        r#"module @mm{i}_{round} {{
  func.func public @main(%x: {t}, %w: {t}) -> {t} {{
    %c = stablehlo.constant dense<{round}.5> : {t}
    %1 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}
    %2 = stablehlo.add %1, %c : {t}
    %3 = stablehlo.dot_general %2, %w, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}
    %4 = stablehlo.dot_general %3, %w, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}
    %5 = stablehlo.tanh %4 : {t}
    return %5 : {t}
  }}
}}"#
    )
}

fn ms(f: impl FnOnce()) -> f64 {
    time_us(f) / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let options = CompileOptions::default();
    let client = Client::builder()
        .memory_cache_entries(0)
        .open()
        .expect("run scripts/bootstrap first");
    client.compile_and_load(module(0, 99), &options).unwrap(); // warm the plugin up

    // Sequential vs the pool, alternated over rounds.
    let (mut seqs, mut pools) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        seqs.push(ms(|| {
            for i in 0..MODULES {
                client
                    .compile_and_load(module(i, 2 * round), &options)
                    .unwrap();
            }
        }));
        pools.push(ms(|| {
            std::thread::scope(|s| {
                for i in 0..MODULES {
                    let (client, options) = (&client, &options);
                    s.spawn(move || {
                        client
                            .compile_and_load(module(i, 2 * round + 1), options)
                            .unwrap()
                    });
                }
            })
        }));
    }
    let (seq_ms, pool_ms) = (median(seqs), median(pools));

    // A memory cache hit.
    let cached = Client::open().unwrap();
    let program = module(3, 50);
    cached.compile_and_load(&program, &options).unwrap();
    let mut hits: Vec<f64> = (0..2000)
        .map(|_| time_us(|| drop(cached.compile_and_load(&program, &options).unwrap())))
        .collect();
    let memory_hit_us = round3(percentile_us(&mut hits, 50.0));
    assert!(cached.compile_cache_stats().memory_hits >= 2000);

    // A disk hit vs a plain compile of the same module.
    let dir = std::env::temp_dir().join(format!("pjrt-actors-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let disk = Client::builder()
        .compile_cache_dir(&dir)
        .memory_cache_entries(0)
        .open()
        .unwrap();
    let (mut compiles, mut disk_hits) = (Vec::new(), Vec::new());
    for i in 0..8 {
        let program = module(8 + i, 60);
        compiles.push(ms(|| {
            drop(client.compile_and_load(&program, &options).unwrap())
        }));
        disk.compile_and_load(&program, &options).unwrap(); // writes the entry
        disk_hits.push(ms(|| {
            drop(disk.compile_and_load(&program, &options).unwrap())
        }));
    }
    let stats = disk.compile_cache_stats();
    assert_eq!(stats.disk_hits, 8, "every second request is a disk hit");
    let (compile_ms, disk_hit_ms) = (median(compiles), median(disk_hits));
    let _ = std::fs::remove_dir_all(&dir);
    let signed_hit = signed::measure(&module(8, 60));
    let signed_overhead_us = signed_hit.signed_us - signed_hit.unsigned_us;

    // Compile isolation: the same distinct modules compiled in this process and in a worker
    // process (one compile thread each side, so each has one worker, started before timing:
    // spawn amortised). Interleaved, so drift hits both alike.
    let one_thread = |worker: bool| {
        let builder = Client::builder().compile_threads(1).memory_cache_entries(0);
        let builder = match worker {
            true => builder.compile_in_worker(env!("CARGO_BIN_EXE_pjrt-actors-compile-worker")),
            false => builder,
        };
        builder.open().unwrap()
    };
    let (here, isolated) = (one_thread(false), one_thread(true));
    isolated.compile_and_load(module(0, 80), &options).unwrap(); // starts the worker
    let (mut in_process, mut in_worker) = (Vec::new(), Vec::new());
    for i in 0..12 {
        let program = module(i % 12, 90 + i);
        in_process.push(ms(|| {
            drop(here.compile_and_load(&program, &options).unwrap())
        }));
        in_worker.push(ms(|| {
            drop(isolated.compile_and_load(&program, &options).unwrap())
        }));
    }
    let (in_process_ms, in_worker_ms) = (median(in_process), median(in_worker));
    let worker_start_ms = ms(|| {
        let fresh = one_thread(true);
        drop(fresh.compile_and_load(module(1, 200), &options).unwrap());
    }) - ms(|| {
        drop(
            one_thread(false)
                .compile_and_load(module(1, 201), &options)
                .unwrap(),
        )
    });

    // Single flight: 32 concurrent identical requests.
    let flight = Client::open().unwrap();
    let program = module(5, 70);
    let barrier = std::sync::Barrier::new(32);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..32 {
            s.spawn(|| {
                barrier.wait();
                flight.compile_and_load(&program, &options).unwrap();
            });
        }
    });
    let flight_ms = start.elapsed().as_secs_f64() * 1000.0;
    let single_flight = flight.compile_cache_stats().compiles;

    // The known-defect check: reading every op and its result types, as each compile miss on a
    // plugin with table entries does, on the transformer's module (vhlo bytecode) and on a
    // 20,000-op text program; against compiling the transformer itself.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let artifact =
        std::fs::read(root.join("tests/data/exported/serve/transformer.exported")).unwrap();
    let module_bytes = pjrt_actors::export::Exported::parse(&artifact)
        .unwrap()
        .module;
    let long_text = {
        let t = "tensor<64xf32>";
        let ops: String = (0..20_000)
            .map(|i| format!("    %{} = stablehlo.tanh %{i} : {t}\n", i + 1))
            .collect();
        format!(
            "module @long {{\n  func.func public @main(%0: {t}) -> {t} {{\n{ops}    return %20000 : {t}\n  }}\n}}\n"
        )
    };
    let check_us = |code: &[u8]| {
        median(
            (0..20)
                .map(|_| time_us(|| drop(pjrt_actors::known_defects::ops_used(code))))
                .collect(),
        )
    };
    let (check_bytecode_us, check_text_us) =
        (check_us(&module_bytes), check_us(long_text.as_bytes()));
    assert!(
        pjrt_actors::known_defects::ops_used(&module_bytes)
            .unwrap()
            .len()
            > 100
    );
    let transformer_compile_ms = median(
        (0..3)
            .map(|_| ms(|| drop(client.load_exported(&artifact).unwrap())))
            .collect(),
    );
    let check_share = check_bytecode_us / 1000.0 / transformer_compile_ms;

    // The known-defect fix's cost on a program that uses atan (1-D f32, a million values): its
    // compile and its run with the table's fix (as every compile gets it) against as written
    // (known defects allowed), alternated; on a plugin without the entry both are as written.
    let n = 1 << 20;
    let t = format!("tensor<{n}xf32>");
    let atan = format!(
        "func.func public @main(%x: {t}) -> {t} {{\n  %0 = chlo.atan %x : {t} -> {t}\n  return %0 : {t}\n}}\n"
    );
    let as_written = CompileOptions {
        allow_known_defects: true,
        ..Default::default()
    };
    let input: Vec<u8> = (0..n)
        .flat_map(|i| (i as f32 / n as f32 * 8.0 - 4.0).to_le_bytes())
        .collect();
    let device = &client.devices()[0];
    let x = client
        .buffer_from_host(
            pjrt_actors::HostBuffer::Copy(&input),
            pjrt_actors::ElementType::F32,
            &[n as i64],
            device,
            None,
        )
        .unwrap();
    let (mut fix_compile, mut plain_compile, mut fix_run, mut plain_run) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        for (opts, compile, run) in [
            (&options, &mut fix_compile, &mut fix_run),
            (&as_written, &mut plain_compile, &mut plain_run),
        ] {
            let mut exe = None;
            compile.push(ms(|| {
                exe = Some(client.compile_and_load(atan.as_bytes(), opts).unwrap())
            }));
            let exe = exe.unwrap();
            exe.execute(&[&x]).unwrap();
            for _ in 0..10 {
                run.push(time_us(|| drop(exe.execute(&[&x]).unwrap())));
            }
        }
    }
    let (fix_compile_ms, plain_compile_ms) = (median(fix_compile), median(plain_compile));
    let (fix_run_us, plain_run_us) = (median(fix_run), median(plain_run));

    let pool_speedup = seq_ms / pool_ms;
    let disk_hit_ratio = disk_hit_ms / compile_ms;
    println!("{:<46} {:>10}", "measure", "value");
    println!(
        "{:<46} {:>10.1}",
        "16 modules one after another (ms)", seq_ms
    );
    println!(
        "{:<46} {:>10.1}",
        format!(
            "16 modules at once, pool of {} (ms)",
            client.compile_threads()
        ),
        pool_ms
    );
    println!(
        "{:<46} {:>10.3}",
        "memory cache hit, p50 (us)", memory_hit_us
    );
    println!("{:<46} {:>10.2}", "plain compile (ms)", compile_ms);
    println!("{:<46} {:>10.2}", "disk cache hit (ms)", disk_hit_ms);
    println!(
        "{:<46} {:>10}",
        format!("compiles for 32 identical requests ({flight_ms:.0} ms)"),
        single_flight
    );
    println!(
        "{:<46} {:>10.2}",
        "compile in this process (ms)", in_process_ms
    );
    println!(
        "{:<46} {:>10.2}",
        "compile in a worker process (ms)", in_worker_ms
    );
    println!(
        "{:<46} {:>10.1}",
        "starting a worker, first compile (ms)", worker_start_ms
    );
    println!(
        "{:<46} {:>10.1}",
        "known-defect check, transformer bytecode (us)", check_bytecode_us
    );
    println!(
        "{:<46} {:>10.1}",
        "known-defect check, 20,000-op text (us)", check_text_us
    );
    println!(
        "{:<46} {:>10.2}",
        "transformer compile, for scale (ms)", transformer_compile_ms
    );
    println!(
        "{:<46} {:>10.2}",
        "atan program compile, fixed / as written (ms)", fix_compile_ms
    );
    println!("{:<46} {:>10.2}", "", plain_compile_ms);
    println!(
        "{:<46} {:>10.1}",
        "atan on 2^20 f32, fixed / as written (us)", fix_run_us
    );
    println!("{:<46} {:>10.1}", "", plain_run_us);
    println!(
        "{:<46} {:>10.1}",
        "Redis hit, signed / unsigned (us)", signed_hit.signed_us
    );
    println!("{:<46} {:>10.1}", "", signed_hit.unsigned_us);
    println!(
        "{:<46} {:>10.1}",
        format!(
            "  its signature's check, {} bytes (us)",
            signed_hit.entry_bytes
        ),
        signed_hit.verify_us
    );
    println!(
        "{{\"atan_fix_compile_ms\":{},\"atan_as_written_compile_ms\":{},\"atan_fix_run_us\":{},\"atan_as_written_run_us\":{},\"atan_fix_run_ratio\":{},\"defect_check_bytecode_us\":{},\"defect_check_text_us\":{},\"defect_check_share_of_compile\":{},\"seq_ms\":{},\"pool_ms\":{},\"pool_speedup\":{},\"compile_threads\":{},\"memory_hit_us\":{memory_hit_us},\"compile_ms\":{},\"disk_hit_ms\":{},\"disk_hit_ratio\":{},\"single_flight\":{single_flight},\"in_process_compile_ms\":{},\"isolated_compile_ms\":{},\"isolated_compile_overhead\":{},\"worker_start_ms\":{},\"signed_hit_us\":{},\"unsigned_hit_us\":{},\"signed_hit_overhead_us\":{},\"signed_hit_overhead_share\":{},\"signature_verify_us\":{},\"signed_entry_bytes\":{}}}",
        round3(fix_compile_ms),
        round3(plain_compile_ms),
        round3(fix_run_us),
        round3(plain_run_us),
        round3(fix_run_us / plain_run_us),
        round3(check_bytecode_us),
        round3(check_text_us),
        (check_share * 1e6).round() / 1e6,
        round3(seq_ms),
        round3(pool_ms),
        round3(pool_speedup),
        client.compile_threads(),
        round3(compile_ms),
        round3(disk_hit_ms),
        round3(disk_hit_ratio),
        round3(in_process_ms),
        round3(in_worker_ms),
        round3(in_worker_ms / in_process_ms),
        round3(worker_start_ms),
        round3(signed_hit.signed_us),
        round3(signed_hit.unsigned_us),
        round3(signed_overhead_us),
        (signed_overhead_us / signed_hit.unsigned_us * 1e4).round() / 1e4,
        round3(signed_hit.verify_us),
        signed_hit.entry_bytes,
    );
}
