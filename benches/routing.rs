//! Least-loaded routing against round-robin under skewed load, in one run: a CPU client of 4
//! devices, device 0 kept busy by 4 async runs in flight of a program whose host callback
//! sleeps 2 ms, and one caller running a small portable program, both policies interleaved.
//! Prints a table, then one JSON object as the last line.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pjrt_actors::{Client, CompileOptions, HostCallback, wait};
use support::*;

const T: &str = "tensor<4xf32>";
const SAMPLES: usize = 400;

fn main() {
    let client = Client::builder()
        .cpu_device_count(4)
        .open()
        .expect("run scripts/bootstrap first");
    let devices = client.devices();
    let portable = CompileOptions {
        portable: true,
        ..Default::default()
    };
    // The skew: 2 ms of host work per run, 4 runs always in flight on device 0.
    let sleep = HostCallback::map::<f32, f32>("sleep", &[1], |x| {
        std::thread::sleep(Duration::from_millis(2));
        x
    })
    .unwrap();
    let t1 = "tensor<1xf32>";
    let heavy = client
        .compile_request(format!(
            "module @heavy {{ func.func public @main(%x: {t1}) -> {t1} {{ {} \n return %r : {t1} }} }}",
            sleep.call_text("%r", &["%x"])
        ))
        .options(&portable)
        .callbacks(&[sleep])
        .load()
        .unwrap();
    let light = client
        .compile_and_load(
            format!("module @light {{ func.func public @main(%x: {T}) -> {T} {{ %o = stablehlo.add %x, %x : {T} \n return %o : {T} }} }}"),
            &portable,
        )
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..4)
        .map(|_| {
            let (heavy, device, stop) = (heavy.clone(), devices[0].clone(), stop.clone());
            std::thread::spawn(move || {
                let x = device.put(&[1f32], &[1]).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    wait(heavy.execute_on_async(&device, &[&x])).unwrap();
                }
            })
        })
        .collect();
    while devices[0].queue_depth() < 4 {
        std::thread::sleep(Duration::from_millis(1));
    }

    // Round-robin places each argument on its device itself; least-loaded is given one on
    // device 1 and copies it where it runs elsewhere.
    let xs: Vec<_> = (devices.iter())
        .map(|d| d.put(&[1f32, 2., 3., 4.], &[4]).unwrap())
        .collect();
    let mut next = 0;
    let on_device_0 = [std::cell::Cell::new(0usize), std::cell::Cell::new(0usize)];
    let (mut round_robin, mut least_loaded) = interleaved(
        SAMPLES,
        20,
        || {
            let d = next % devices.len();
            next += 1;
            on_device_0[0].set(on_device_0[0].get() + (d == 0) as usize);
            time_us(|| {
                let out = wait(light.execute_on_async(&devices[d], &[&xs[d]])).unwrap();
                out[0].block_until_ready().unwrap();
            })
        },
        || {
            time_us(|| {
                let out = wait(light.execute_least_loaded_async(&[&xs[1]])).unwrap();
                out[0].block_until_ready().unwrap();
                let placed = (out[0].device() == devices[0]) as usize;
                on_device_0[1].set(on_device_0[1].get() + placed);
            })
        },
    );
    stop.store(true, Ordering::Relaxed);
    for loader in loaders {
        loader.join().unwrap();
    }
    let total = |s: &[f64]| s.iter().sum::<f64>();
    let (rr_total, ll_total) = (total(&round_robin), total(&least_loaded));
    let rr = [50.0, 99.0].map(|p| percentile_us(&mut round_robin, p));
    let ll = [50.0, 99.0].map(|p| percentile_us(&mut least_loaded, p));
    let throughput_ratio = rr_total / ll_total;

    println!(
        "{:<48} {:>12} {:>12}",
        "light portable run (us)", "round-robin", "least-loaded"
    );
    println!("{:<48} {:>12.1} {:>12.1}", "p50", rr[0], ll[0]);
    println!("{:<48} {:>12.1} {:>12.1}", "p99", rr[1], ll[1]);
    println!(
        "{:<48} {:>12} {:>12}",
        "runs placed on the loaded device 0",
        on_device_0[0].get(),
        on_device_0[1].get()
    );
    println!(
        "{:<48} {:>12.2}",
        "light runs/s, least-loaded over round-robin", throughput_ratio
    );
    println!(
        "{{\"samples\":{SAMPLES},\"round_robin_p50_us\":{},\"least_loaded_p50_us\":{},\"round_robin_p99_us\":{},\"least_loaded_p99_us\":{},\"p99_ratio\":{},\"throughput_ratio\":{},\"round_robin_on_loaded\":{},\"least_loaded_on_loaded\":{}}}",
        round3(rr[0]),
        round3(ll[0]),
        round3(rr[1]),
        round3(ll[1]),
        round3(rr[1] / ll[1]),
        round3(throughput_ratio),
        on_device_0[0].get(),
        on_device_0[1].get()
    );
}
