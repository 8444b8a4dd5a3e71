//! Our execute path against the raw PJRT C API, measured in one run on any plugin (the CPU one
//! here, a GPU's in the GPU check): execute of a tiny `f32[4]` add with ready buffers, the full
//! round trip (two uploads, execute, read back into a Vec), and aggregate throughput of 8
//! threads over up to 4 devices vs one thread. The raw side runs on its own PJRT client of the
//! same plugin, built from the fence directly.
//! Prints a table, then one JSON object as the last line.

#[path = "../tests/suite/common/cpu.rs"]
mod cpu;
mod support;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use pjrt_actors::{Client, CompileOptions};
use pjrt_actors_core::client::runtime::block_on;
use pjrt_actors_core::compile::DeviceFacts;
use pjrt_actors_core::pjrt::{HostBuffer, PjrtClient, PjrtLoadedExecutable, Plugin};
use pjrt_actors_fence::baseline::RawAdd;
use prost::Message;
use support::*;

const SAMPLES: usize = 40_000;
const BLOCK: usize = 100;
const ASYNC_SAMPLES: usize = 5_000;
const THREAD_RUN: Duration = Duration::from_millis(300);
const THREAD_ROUNDS: usize = 9;

fn raw_compile(client: &PjrtClient, device_id: i32, devices: usize) -> PjrtLoadedExecutable {
    let facts = DeviceFacts {
        devices: (0..devices as i32).map(|i| (i, true)).collect(),
        memory_limits: Vec::new(),
    };
    let options = CompileOptions {
        devices: Some(vec![device_id]),
        ..Default::default()
    };
    let proto = options.to_proto(&facts).unwrap().encode_to_vec();
    client
        .compile(ADD_F32X4.as_bytes(), "mlir", &proto)
        .unwrap()
}

/// Executes/s of `threads` threads, thread t on device t % n (up to 4 devices), each running
/// `step` in a loop.
fn throughput<'a>(
    threads: usize,
    step: impl Fn(usize) -> Box<dyn FnMut() + Send + 'a> + Sync,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(threads + 1));
    std::thread::scope(|s| {
        for t in 0..threads {
            let mut f = step(t);
            let (stop, count, barrier) = (stop.clone(), count.clone(), barrier.clone());
            s.spawn(move || {
                for _ in 0..200 {
                    f();
                }
                barrier.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    f();
                    n += 1;
                }
                count.fetch_add(n, Ordering::Relaxed);
            });
        }
        barrier.wait();
        std::thread::sleep(THREAD_RUN);
        stop.store(true, Ordering::Relaxed);
    });
    count.load(Ordering::Relaxed) as f64 / THREAD_RUN.as_secs_f64()
}

/// 1-thread and 8-thread windows, alternated so drift hits both alike: median executes/s of
/// each, and the median over rounds of the 8-thread / 1-thread ratio.
fn scaling<'a>(step: &(impl Fn(usize) -> Box<dyn FnMut() + Send + 'a> + Sync)) -> (f64, f64, f64) {
    let (mut ones, mut eights, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..THREAD_ROUNDS {
        let one = throughput(1, step);
        let eight = throughput(8, step);
        ones.push(one);
        eights.push(eight);
        ratios.push(eight / one);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    (median(&mut ones), median(&mut eights), median(&mut ratios))
}

fn main() {
    let client = Client::open().expect("run scripts/bootstrap first");
    let devices = client.devices();
    let exes: Vec<_> = devices
        .iter()
        .map(|d| {
            client
                .compile_and_load(
                    ADD_F32X4,
                    &CompileOptions {
                        devices: Some(vec![d.id()]),
                        ..Default::default()
                    },
                )
                .unwrap()
        })
        .collect();

    let plugin = Plugin::discover().unwrap();
    let raw_client = PjrtClient::create(plugin, &[]).unwrap();
    let raw_devices = raw_client.addressable_devices().unwrap();
    // Up to 4 devices: the CPU plugin's 4, a one-GPU machine's 1 (and no more than our client
    // has, which the environment may have set apart from the raw one's).
    let n = raw_devices.len().min(devices.len()).min(4);
    let raw_exes: Vec<_> = (0..n)
        .map(|i| {
            raw_compile(
                &raw_client,
                raw_devices[i].description().unwrap().id,
                raw_devices.len(),
            )
        })
        .collect();

    let x = [1f32, 2., 3., 4.];
    let y = [10f32, 20., 30., 40.];

    // Execute with ready device buffers, until the output is ready.
    let a = devices[0].put(&x, &[4]).unwrap();
    let b = devices[0].put(&y, &[4]).unwrap();
    let upload_to = |v: &[f32; 4], device: usize| {
        let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_ne_bytes()).collect();
        raw_client
            .upload(
                HostBuffer::Copy(&bytes),
                pjrt_actors::ElementType::F32,
                &[4],
                &raw_devices[device],
                None,
            )
            .unwrap()
    };
    let upload = |v: &[f32; 4]| upload_to(v, 0);
    let (ra, rb) = (upload(&x), upload(&y));
    ra.wait_ready().unwrap();
    rb.wait_ready().unwrap();
    let raw0 = RawAdd::new(&raw_client, &raw_exes[0], &raw_devices[0]);
    let ours_execute = || {
        time_us(|| {
            let out = exes[0].execute(&[&a, &b]).unwrap();
            out[0].block_until_ready().unwrap();
            black_box(out);
        })
    };
    let raw_execute = || time_us(|| raw0.execute_until_ready(&ra, &rb));
    interleaved(2_000, BLOCK, ours_execute, raw_execute);
    let (mut ex, mut raw_ex) = interleaved(SAMPLES, BLOCK, ours_execute, raw_execute);

    // Round trip: two uploads, execute, read back into a new Vec.
    let ours_roundtrip = || {
        time_us(|| {
            let a = devices[0].put(&x, &[4]).unwrap();
            let b = devices[0].put(&y, &[4]).unwrap();
            let out = exes[0].execute(&[&a, &b]).unwrap();
            black_box(out[0].to_vec::<f32>().unwrap());
        })
    };
    let raw_roundtrip = || time_us(|| drop(black_box(raw0.roundtrip(&x, &y))));
    assert_eq!(raw0.roundtrip(&x, &y), vec![11., 22., 33., 44.]);
    interleaved(2_000, BLOCK, ours_roundtrip, raw_roundtrip);
    let (mut rt, mut raw_rt) = interleaved(SAMPLES, BLOCK, ours_roundtrip, raw_roundtrip);

    // The async form: through the client actor to the device actor and back, against the
    // blocking form on the caller's thread. This is the mailbox hop the hot path avoids.
    let blocking_execute = || {
        time_us(|| {
            let out = exes[0].execute(&[&a, &b]).unwrap();
            out[0].block_until_ready().unwrap();
        })
    };
    let async_execute = || {
        time_us(|| {
            let out = block_on(exes[0].execute_async(&[&a, &b])).unwrap().unwrap();
            out[0].block_until_ready().unwrap();
        })
    };
    interleaved(500, BLOCK, async_execute, blocking_execute);
    let (mut asy, mut blk) = interleaved(ASYNC_SAMPLES, BLOCK, async_execute, blocking_execute);
    // One round trip to a device actor and back (no routing, no plugin work): what any
    // mailbox hop costs here, for scale.
    let device_hop = || {
        time_us(|| {
            black_box(block_on(devices[0].memory_stats_async()).unwrap().unwrap());
        })
    };
    let (mut hop, _) = interleaved(ASYNC_SAMPLES, BLOCK, device_hop, || 0.0);

    // Aggregate throughput: 8 threads over 4 devices vs 1 thread, ours and raw.
    let ready: Vec<_> = devices
        .iter()
        .map(|d| (d.put(&x, &[4]).unwrap(), d.put(&y, &[4]).unwrap()))
        .collect();
    let ours_step = |t: usize| -> Box<dyn FnMut() + Send + '_> {
        let (exe, (a, b)) = (exes[t % n].clone(), ready[t % n].clone());
        Box::new(move || {
            let out = exe.execute(&[&a, &b]).unwrap();
            out[0].block_until_ready().unwrap();
        })
    };
    let (one, eight, speedup) = scaling(&ours_step);
    let raw_ready: Vec<_> = (0..n)
        .map(|i| (upload_to(&x, i), upload_to(&y, i)))
        .collect();
    let raw_step = |t: usize| -> Box<dyn FnMut() + Send + '_> {
        let raw = RawAdd::new(&raw_client, &raw_exes[t % n], &raw_devices[t % n]);
        let (a, b) = (&raw_ready[t % n].0, &raw_ready[t % n].1);
        Box::new(move || raw.execute_until_ready(a, b))
    };
    let (raw_one, raw_eight, raw_speedup) = scaling(&raw_step);

    let p = |s: &mut Vec<f64>, q| round3(percentile_us(s, q));
    let (e50, e90, re50, re90) = (
        p(&mut ex, 50.),
        p(&mut ex, 90.),
        p(&mut raw_ex, 50.),
        p(&mut raw_ex, 90.),
    );
    let (r50, r90, rr50, rr90) = (
        p(&mut rt, 50.),
        p(&mut rt, 90.),
        p(&mut raw_rt, 50.),
        p(&mut raw_rt, 90.),
    );
    let (a50, b50, h50) = (p(&mut asy, 50.), p(&mut blk, 50.), p(&mut hop, 50.));
    println!("{:<34} {:>10} {:>10}", "measure (us)", "p50", "p90");
    println!("{:<34} {:>10}", "execute_async via the actors", a50);
    println!("{:<34} {:>10}", "one device-actor round trip", h50);
    println!("{:<34} {:>10} {:>10}", "execute, ours", e50, e90);
    println!("{:<34} {:>10} {:>10}", "execute, raw C API", re50, re90);
    println!("{:<34} {:>10} {:>10}", "round trip, ours", r50, r90);
    println!("{:<34} {:>10} {:>10}", "round trip, raw C API", rr50, rr90);
    println!(
        "{:<34} {:>10.0} {:>10.0}",
        "executes/s, 1 thread / 8 threads", one, eight
    );
    println!(
        "{:<34} {:>10.0} {:>10.0}",
        "same, raw C API", raw_one, raw_eight
    );
    // What the client costs while nobody uses it: every thread's CPU time over 10 s idle, after
    // a second for the actor threads' last look for work to end.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let before = cpu::process_cpu_ns();
    std::thread::sleep(std::time::Duration::from_secs(10));
    let idle_ms = (cpu::process_cpu_ns().saturating_sub(before)) as f64 / 1e6;
    println!(
        "{:<34} {:>10.3}",
        "CPU ms of an idle client over 10 s", idle_ms
    );
    drop(client);
    println!(
        "{{\"execute_us\":{{\"p50\":{e50},\"p90\":{e90}}},\"raw_execute_us\":{{\"p50\":{re50},\"p90\":{re90}}},\"execute_ratio\":{},\"roundtrip_us\":{{\"p50\":{r50},\"p90\":{r90}}},\"raw_roundtrip_us\":{{\"p50\":{rr50},\"p90\":{rr90}}},\"roundtrip_ratio\":{},\"threads_speedup\":{},\"raw_threads_speedup\":{},\"async_execute_us\":{a50},\"actor_round_trip_us\":{h50},\"async_over_blocking\":{},\"idle_cpu_ms_per_10s\":{},\"samples\":{SAMPLES}}}",
        round3(e50 / re50),
        round3(r50 / rr50),
        round3(speedup),
        round3(raw_speedup),
        round3(a50 / b50),
        round3(idle_ms),
    );
}
