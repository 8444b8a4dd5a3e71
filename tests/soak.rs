//! A bounded soak (20 s by default, `PJRT_ACTORS_SOAK_SECS` for longer): 8 threads of mixed
//! work with every result checked, a watchdog that fails the run if any thread is stuck for
//! 10 s, and at the end nothing alive and resident memory back near its warmed-up size.

#[path = "suite/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pjrt_actors::{ArrayType, CallbackKind, Client, CompileOptions, ElementType, HostCallback};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// One unit of mixed work, chosen by `step`; panics on a wrong result.
fn step(client: &Client, t: usize, step: u64, callback: &HostCallback) {
    let device = &client.devices()[t % 4];
    let x = (t as u64 * 1_000_000 + step) as f32;
    match step % 8 {
        0 | 1 => {
            // Execute, with a cache hit on the executable.
            let options = CompileOptions {
                devices: Some(vec![(t % 4) as i32]),
                ..Default::default()
            };
            let exe = client
                .compile_and_load(common::add_f32x4(), &options)
                .unwrap();
            let a = device.put(&[x; 4], &[4]).unwrap();
            assert_eq!(
                exe.execute(&[&a, &a]).unwrap()[0].to_vec::<f32>().unwrap(),
                vec![2.0 * x; 4]
            );
        }
        2 => {
            // A compile that misses (a new shape every so often), then runs.
            let (program, dims) = common::distinct_module((step / 8 % 50) as usize + 100 * t, 1);
            let options = CompileOptions {
                devices: Some(vec![(t % 4) as i32]),
                ..Default::default()
            };
            let exe = client.compile_and_load(&program, &options).unwrap();
            common::check_distinct(&exe, device, &dims, 1);
        }
        3 => {
            // Create, read, copy and delete.
            let a = device.put(&[x, x + 1.0, x + 2.0], &[3]).unwrap();
            let b = a.copy_to_device(&client.devices()[(t + 1) % 4]).unwrap();
            assert_eq!(b.to_vec::<f32>().unwrap(), vec![x, x + 1.0, x + 2.0]);
            a.delete();
            assert!(a.is_deleted());
        }
        4 => {
            // A program calling a Rust callback.
            let program = format!(
                "module @soakcb {{ func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{ {} \n return %r : tensor<4xf32> }} }}",
                callback.call_text("%r", &["%x"])
            );
            let options = CompileOptions {
                devices: Some(vec![(t % 4) as i32]),
                ..Default::default()
            };
            let exe = client
                .compile_request(&program)
                .options(&options)
                .callbacks(std::slice::from_ref(callback))
                .load()
                .unwrap();
            let a = device.put(&[x; 4], &[4]).unwrap();
            assert_eq!(
                exe.execute(&[&a]).unwrap()[0].to_vec::<f32>().unwrap(),
                vec![x + 1.0; 4]
            );
        }
        5 => {
            let profile = client.heap_profile().unwrap();
            assert!(!profile.is_empty());
        }
        6 if t == 0 && step % 64 == 6 => {
            client.defragment().unwrap();
        }
        _ => {
            let a = device.put(&[step as i64; 16], &[4, 4]).unwrap();
            assert_eq!(a.to_vec::<i64>().unwrap(), vec![step as i64; 16]);
        }
    }
}

fn run_for(client: &Client, seconds: f64, callback: &HostCallback) {
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..8).map(|_| AtomicU64::new(0)).collect());
    let start = Instant::now();
    let elapsed_ms = move || start.elapsed().as_millis() as u64;
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let (client, stop, progress, callback) = (
                client.clone(),
                stop.clone(),
                progress.clone(),
                callback.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    step(&client, t, n, &callback);
                    progress[t].store(elapsed_ms(), Ordering::Relaxed);
                    n += 1;
                }
                n
            })
        })
        .collect();
    // The watchdog: every thread must make progress at least every 10 s.
    while start.elapsed().as_secs_f64() < seconds {
        std::thread::sleep(Duration::from_millis(200));
        let now = elapsed_ms();
        for (t, p) in progress.iter().enumerate() {
            let last = p.load(Ordering::Relaxed);
            assert!(
                now.saturating_sub(last) < 10_000,
                "thread {t} stuck for {} ms",
                now - last
            );
        }
        if workers.iter().any(|w| w.is_finished()) {
            break; // a worker panicked; join reports it
        }
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = workers
        .into_iter()
        .map(|w| w.join().expect("a soak worker failed"))
        .sum();
    assert!(total > 0);
}

#[test]
fn soak() {
    let seconds: f64 = std::env::var("PJRT_ACTORS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    let f32x4 = ArrayType {
        dtype: ElementType::F32,
        dims: vec![4],
    };
    let callback = HostCallback::new(
        "soak_plus_one",
        CallbackKind::Pure,
        vec![f32x4.clone()],
        vec![f32x4],
        |ins, outs| {
            let x = ins[0].as_slice::<f32>().ok_or("f32")?;
            for (o, i) in outs[0]
                .as_mut_slice::<f32>()
                .ok_or("f32")?
                .iter_mut()
                .zip(x)
            {
                *o = i + 1.0;
            }
            Ok(())
        },
    )
    .unwrap();
    let client = Client::builder().memory_cache_entries(64).open().unwrap();
    // Warm up (caches filled, allocator grown), then measure.
    run_for(&client, (seconds / 10.0).max(2.0), &callback);
    client.clear_compile_cache().unwrap();
    let warm = resident_bytes();
    run_for(&client, seconds, &callback);
    client.clear_compile_cache().unwrap();
    assert_eq!(client.live_array_count(), 0, "arrays leaked");
    assert!(
        client.live_executables().unwrap().is_empty(),
        "executables leaked"
    );
    let end = resident_bytes();
    eprintln!(
        "resident after warm-up {} KiB, at the end {} KiB",
        warm >> 10,
        end >> 10
    );
    assert!(
        end as f64 <= warm as f64 * 1.10,
        "resident memory grew from {} MiB to {} MiB",
        warm >> 20,
        end >> 20
    );
}
