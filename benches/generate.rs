//! Token-by-token generation's costs. Donation: a decode-style step that writes one row of a
//! 64 MiB cache (`dynamic_update_slice`, the cache aliased to the output as `donate_argnums=0`
//! exports it), run donating the cache against run copying it, interleaved; and the memory held
//! over 10,000 donated steps. Prints a table, then one JSON object as the last line.

mod support;

use pjrt_actors::{Client, CompileOptions, LoadedExecutable};
use serde_json::json;
use support::*;

/// The cache: `ROWS` x `WIDTH` f32, 64 MiB.
const ROWS: i64 = 256;
const WIDTH: i64 = 65_536;
const STEPS: usize = 10_000;
const SAMPLES: usize = 400;
const BLOCK: usize = 20;

/// `step(cache, row, at) = cache with `row` written at row `at``: the cache update of a decode
/// step, its cache aliased to the output.
fn step_program() -> String {
    let cache = format!("tensor<{ROWS}x{WIDTH}xf32>");
    let row = format!("tensor<1x{WIDTH}xf32>");
    format!(
        r#"module @jit_step {{
  func.func public @main(%cache: {cache} {{tf.aliasing_output = 0 : i32}}, %row: {row}, %at: tensor<i32>) -> ({cache}) {{
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_update_slice %cache, %row, %at, %zero : ({cache}, {row}, tensor<i32>, tensor<i32>) -> {cache}
    return %0 : {cache}
  }}
}}"#
    )
}

fn main() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    let exe: LoadedExecutable = client
        .compile_and_load(step_program(), &CompileOptions::default())
        .unwrap();
    assert_eq!(exe.donatable_parameters(), &[0]);
    let memory = device.default_memory_space().unwrap();
    let row = device
        .put(&vec![1f32; WIDTH as usize], &[1, WIDTH])
        .unwrap();
    let ats: Vec<_> = (0..ROWS as i32)
        .map(|i| device.put(&[i], &[]).unwrap())
        .collect();
    let cache = device
        .put(&vec![0f32; (ROWS * WIDTH) as usize], &[ROWS, WIDTH])
        .unwrap();
    let mut k = 0usize;
    let mut next_at = || {
        k += 1;
        &ats[k % ats.len()]
    };

    // Each step waits until its output is computed, so a step's time is its own.
    let cell = std::cell::RefCell::new(cache);
    let (mut donated, mut copied) = {
        let cache = &cell;
        let at_cell = std::cell::RefCell::new(&mut next_at);
        interleaved(
            SAMPLES,
            BLOCK,
            || {
                let at = (at_cell.borrow_mut())();
                let mut c = cache.borrow_mut();
                time_us(|| {
                    let out = exe.execute_donating(&[&c, &row, at], &[0]).unwrap();
                    out[0].block_until_ready().unwrap();
                    *c = out.into_iter().next().unwrap();
                })
            },
            || {
                let at = (at_cell.borrow_mut())();
                let mut c = cache.borrow_mut();
                time_us(|| {
                    let out = exe.execute(&[&c, &row, at]).unwrap();
                    out[0].block_until_ready().unwrap();
                    *c = out.into_iter().next().unwrap();
                })
            },
        )
    };
    let (donated_us, copied_us) = (
        percentile_us(&mut donated, 50.0),
        percentile_us(&mut copied, 50.0),
    );

    // Memory over a long run of donated steps: what is held after the first and after all.
    let mut cache = cell.into_inner();
    cache = exe.execute(&[&cache, &row, &ats[0]]).unwrap().remove(0);
    cache = exe
        .execute_donating(&[&cache, &row, &ats[1]], &[0])
        .unwrap()
        .remove(0);
    cache.block_until_ready().unwrap();
    let held_first = memory.bytes_held();
    let plugin_first = device.memory_stats().ok().flatten().map(|s| s.bytes_in_use);
    for i in 0..STEPS {
        cache = exe
            .execute_donating(&[&cache, &row, &ats[i % ats.len()]], &[0])
            .unwrap()
            .remove(0);
    }
    cache.block_until_ready().unwrap();
    let held_last = memory.bytes_held();
    let plugin_last = device.memory_stats().ok().flatten().map(|s| s.bytes_in_use);
    let growth = held_last as f64 / held_first as f64;
    let first_row: Vec<f32> = cache.to_vec::<f32>().unwrap()[..4].to_vec();
    assert_eq!(first_row, vec![1.0; 4], "every row was written");

    println!("decode-style step on a 64 MiB cache, p50 of {SAMPLES} interleaved each");
    println!("{:>28} {:>12}", "", "us");
    println!("{:>28} {donated_us:>12.1}", "donating the cache");
    println!("{:>28} {copied_us:>12.1}", "copying the cache");
    println!(
        "bytes held after 1 donated step {held_first}, after {STEPS} more {held_last}; plugin bytes in use {plugin_first:?} -> {plugin_last:?}"
    );
    println!(
        "{}",
        json!({
            "donated_step_us": round3(donated_us),
            "copied_step_us": round3(copied_us),
            "donated_step_ratio": round3(donated_us / copied_us),
            "bytes_held_first": held_first,
            "bytes_held_last": held_last,
            "bytes_held_growth": round3(growth),
            "plugin_bytes_in_use_first": plugin_first,
            "plugin_bytes_in_use_last": plugin_last,
        })
    );
}
