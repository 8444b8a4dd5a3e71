//! What running jaxlib's LAPACK custom calls through the runtime costs over calling LAPACK
//! directly: an LU (`lapack_dgetrf_ffi`) executed as a one-op program against the same `dgetrf`
//! called in-process on a copy, at several sizes, sampled interleaved. Last line: one JSON object.

mod support;

use pjrt_actors::{Client, CompileOptions, ElementType, HostBuffer};
use support::{interleaved, percentile_us, round3, time_us};

/// A program whose only op is jaxlib's LU custom call on an n x n f64 matrix.
fn getrf_program(n: usize) -> String {
    let m = format!("tensor<{n}x{n}xf64>");
    format!(
        "module @lu {{\n  func.func public @main(%a: {m}) -> ({m}, tensor<{n}xi32>, tensor<i32>) {{\n    %r:3 = stablehlo.custom_call @lapack_dgetrf_ffi(%a) {{api_version = 4 : i32, backend_config = {{}}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]}} : ({m}) -> ({m}, tensor<{n}xi32>, tensor<i32>)\n    return %r#0, %r#1, %r#2 : {m}, tensor<{n}xi32>, tensor<i32>\n  }}\n}}\n"
    )
}

fn main() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    println!(
        "LAPACK: {}",
        pjrt_actors::lapack::library_name().expect("a LAPACK library")
    );
    println!(
        "{:>6} {:>14} {:>14} {:>8}",
        "n", "runtime p50 us", "direct p50 us", "ratio"
    );
    let mut ratios = Vec::new();
    for n in [8usize, 64, 256, 512] {
        let exe = client
            .compile_and_load(getrf_program(n), &CompileOptions::default())
            .unwrap();
        // Diagonally dominant, so no pivoting differences matter.
        let a: Vec<f64> = (0..n * n)
            .map(|i| {
                if i % (n + 1) == 0 {
                    n as f64
                } else {
                    ((i * 7919) % 13) as f64 / 13.0
                }
            })
            .collect();
        let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        let input = client
            .buffer_from_host(
                HostBuffer::Copy(&bytes),
                ElementType::F64,
                &[n as i64, n as i64],
                device,
                None,
            )
            .unwrap();
        let samples = if n >= 512 {
            20
        } else if n >= 256 {
            60
        } else {
            400
        };
        let mut scratch = a.clone();
        let mut ipiv = vec![0i32; n];
        let (mut ours, mut direct) = interleaved(
            samples,
            10,
            || {
                time_us(|| {
                    let out = exe.execute(&[&input]).unwrap();
                    // The result is ready when the runtime hands it back; reading info waits.
                    out[2].to_vec::<i32>().unwrap();
                })
            },
            || {
                time_us(|| {
                    // The copy stands in for the runtime's copy of the operand to its result.
                    scratch.copy_from_slice(&a);
                    pjrt_actors::lapack::baseline_dgetrf(&mut scratch, n as i32, &mut ipiv)
                        .unwrap();
                })
            },
        );
        let (p_ours, p_direct) = (
            percentile_us(&mut ours, 50.0),
            percentile_us(&mut direct, 50.0),
        );
        let ratio = p_ours / p_direct;
        println!("{n:>6} {p_ours:>14.1} {p_direct:>14.1} {ratio:>8.2}");
        ratios.push((n, ratio));
    }
    let json: Vec<String> = ratios
        .iter()
        .map(|(n, r)| format!("\"getrf_{n}_ratio\": {}", round3(*r)))
        .collect();
    println!("{{{}}}", json.join(", "));
}
