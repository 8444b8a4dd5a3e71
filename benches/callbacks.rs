//! Host callbacks on the CPU plugin, measured in one run: the p50 cost a pure `f32[4] -> f32[4]`
//! callback adds to an execute (the same program with and without it, interleaved), a callback
//! that executes another executable 1,000 times, and callbacks/s of 8 threads running a
//! program with 4 callbacks. Prints a table, then one JSON object as the last line.

mod support;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pjrt_actors::{ArrayType, CallbackKind, Client, CompileOptions, ElementType, HostCallback};
use support::*;

fn f32x4() -> ArrayType {
    ArrayType {
        dtype: ElementType::F32,
        dims: vec![4],
    }
}

fn map(name: &str, f: impl Fn(f32) -> f32 + Send + Sync + 'static) -> HostCallback {
    HostCallback::map::<f32, f32>(name, &[4], f).unwrap()
}

const T: &str = "tensor<4xf32>";

fn main() {
    let client = Client::open().expect("run scripts/bootstrap first");
    let device = client.devices()[0].clone();
    let options = CompileOptions::default();

    // Overhead of one callback: `cb(x) + x` against `x + x`.
    let double = map("double", |v| 2.0 * v);
    let with = client
        .compile_request(format!(
                "module @with {{ func.func public @main(%x: {T}) -> {T} {{ {} \n %o = stablehlo.add %r, %x : {T} \n return %o : {T} }} }}",
                double.call_text("%r", &["%x"])
            )).options(&options).callbacks(std::slice::from_ref(&double)).load()
        .unwrap();
    let without = client
        .compile_and_load(
            format!("module @without {{ func.func public @main(%x: {T}) -> {T} {{ %o = stablehlo.add %x, %x : {T} \n return %o : {T} }} }}"),
            &options,
        )
        .unwrap();
    let x = device.put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    let run = |exe: &pjrt_actors::LoadedExecutable| {
        time_us(|| {
            let out = exe.execute(&[&x]).unwrap();
            out[0].block_until_ready().unwrap();
            black_box(out);
        })
    };
    interleaved(2_000, 100, || run(&with), || run(&without));
    let (mut w, mut wo) = interleaved(20_000, 100, || run(&with), || run(&without));
    let (with_p50, without_p50) = (percentile_us(&mut w, 50.0), percentile_us(&mut wo, 50.0));
    let overhead = round3(with_p50 - without_p50);

    // A callback that executes another executable, 1,000 times.
    let add = client
        .compile_and_load(
            format!("module @add {{ func.func public @main(%a: {T}, %b: {T}) -> {T} {{ %o = stablehlo.add %a, %b : {T} \n return %o : {T} }} }}"),
            &options,
        )
        .unwrap();
    let inner_client = client.clone();
    let reenter = HostCallback::new(
        "reenter",
        CallbackKind::Pure,
        vec![f32x4()],
        vec![f32x4()],
        move |ins, outs| {
            let x = ins[0].as_slice::<f32>().ok_or("f32")?;
            let a = inner_client.devices()[0]
                .put(x, &[4])
                .map_err(|e| e.to_string())?;
            let y = add.execute(&[&a, &a]).map_err(|e| e.to_string())?[0]
                .to_vec::<f32>()
                .map_err(|e| e.to_string())?;
            outs[0]
                .as_mut_slice::<f32>()
                .ok_or("f32")?
                .copy_from_slice(&y);
            Ok(())
        },
    )
    .unwrap();
    let outer = client
        .compile_request(format!(
                "module @outer {{ func.func public @main(%x: {T}) -> {T} {{ {} \n return %r : {T} }} }}",
                reenter.call_text("%r", &["%x"])
            )).options(&options).callbacks(&[reenter]).load()
        .unwrap();
    let reentrant_ok = (0..1000).all(|i| {
        let v = i as f32;
        let a = device.put(&[v; 4], &[4]).unwrap();
        outer
            .execute(&[&a])
            .ok()
            .and_then(|o| o[0].to_vec::<f32>().ok())
            == Some(vec![2.0 * v; 4])
    });

    // 8 threads, a program with 4 callbacks each.
    let chain = [
        map("c0", |v| v + 1.0),
        map("c1", |v| v * 2.0),
        map("c2", |v| v - 3.0),
        map("c3", |v| -v),
    ];
    let program = format!(
        "module @chain {{ func.func public @main(%x: {T}) -> {T} {{ {} \n {} \n {} \n {} \n return %d : {T} }} }}",
        chain[0].call_text("%a", &["%x"]),
        chain[1].call_text("%b", &["%a"]),
        chain[2].call_text("%c", &["%b"]),
        chain[3].call_text("%d", &["%c"]),
    );
    let stop = AtomicBool::new(false);
    let runs = AtomicU64::new(0);
    let window = Duration::from_secs(2);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (client, program, chain, stop, runs) = (&client, &program, &chain, &stop, &runs);
            s.spawn(move || {
                let options = CompileOptions {
                    devices: Some(vec![(t % 4) as i32]),
                    ..Default::default()
                };
                let exe = client
                    .compile_request(program)
                    .options(&options)
                    .callbacks(chain)
                    .load()
                    .unwrap();
                let a = client.devices()[t % 4].put(&[t as f32; 4], &[4]).unwrap();
                let expected = vec![-(((t as f32 + 1.0) * 2.0) - 3.0); 4];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(
                        exe.execute(&[&a]).unwrap()[0].to_vec::<f32>().unwrap(),
                        expected
                    );
                    n += 1;
                }
                runs.fetch_add(n, Ordering::Relaxed);
            });
        }
        let start = Instant::now();
        while start.elapsed() < window {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let calls_per_s = (runs.load(Ordering::Relaxed) * 4) as f64 / window.as_secs_f64();

    println!("{:<46} {:>10}", "measure", "value");
    println!(
        "{:<46} {:>10.3}",
        "execute with one callback, p50 (us)", with_p50
    );
    println!(
        "{:<46} {:>10.3}",
        "same program without it, p50 (us)", without_p50
    );
    println!("{:<46} {:>10.3}", "callback overhead (us)", overhead);
    println!(
        "{:<46} {:>10}",
        "re-entrant callback, 1,000 runs correct", reentrant_ok
    );
    println!(
        "{:<46} {:>10.0}",
        "callbacks/s, 8 threads x 4 callbacks", calls_per_s
    );
    println!(
        "{{\"with_callback_us\":{},\"without_callback_us\":{},\"callback_overhead_us\":{overhead},\"reentrant_ok\":{reentrant_ok},\"pipeline_calls_per_s\":{}}}",
        round3(with_p50),
        round3(without_p50),
        calls_per_s.round()
    );
}
