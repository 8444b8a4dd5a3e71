//! Custom calls to jaxlib's LAPACK targets with arbitrary operands, results, attributes and
//! layouts, compiled and run on the real CPU plugin, on inputs holding NaN and infinities, at
//! sizes up to 64: a typed error or an answer, never a crash or a hang (reference LAPACK stops
//! the process on an argument it refuses, so the kernels' checks must catch every one).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pjrt_actors::{Client, CompileOptions};

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::builder()
            .memory_cache_entries(0)
            .cpu_device_count(1)
            .open()
            .expect("run scripts/bootstrap first")
    })
}

fn targets() -> &'static [String] {
    static TARGETS: OnceLock<Vec<String>> = OnceLock::new();
    TARGETS.get_or_init(pjrt_actors::lapack::target_names)
}

/// Reads small numbers from the input, then zeros.
struct Draw<'a>(&'a [u8]);

impl Draw<'_> {
    fn next(&mut self, n: usize) -> usize {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b as usize % n.max(1)
            }
            None => 0,
        }
    }
}

const ELEMENTS: [&str; 6] = ["f32", "f64", "complex<f32>", "complex<f64>", "i32", "i8"];

/// Each family's operand and result counts and attribute names (jaxlib's signatures), so most
/// inputs reach the kernels' shape checks and LAPACK itself rather than stopping at the count.
const SIGNATURES: [(&str, usize, usize, &[&str]); 18] = [
    ("trsm", 2, 1, &["side", "uplo", "trans_x", "diag"]),
    ("getrf", 1, 3, &[]),
    ("geqrf", 1, 2, &[]),
    ("geqp3", 2, 3, &[]),
    ("orgqr", 2, 1, &[]),
    ("ungqr", 2, 1, &[]),
    ("ormqr", 3, 1, &["left", "transpose"]),
    ("unmqr", 3, 1, &["left", "transpose"]),
    ("potrf", 1, 2, &["uplo"]),
    ("gtsv", 4, 5, &[]),
    ("gesdd", 1, 5, &["mode"]),
    ("gesvd", 1, 5, &["mode"]),
    ("evd", 1, 3, &["uplo", "mode"]),
    ("geev", 1, 5, &["compute_left", "compute_right"]),
    ("gees", 1, 6, &["mode", "sort"]),
    ("gehrd", 1, 3, &["low", "high"]),
    ("sytrd", 1, 5, &["uplo"]),
    ("hetrd", 1, 5, &["uplo"]),
];

/// The element type of a target's matrices (`lapack_zgeev_ffi`: complex<f64>).
fn element_of(target: &str) -> &'static str {
    match target.as_bytes().get(7) {
        Some(b's') => "f32",
        Some(b'd') => "f64",
        Some(b'c') => "complex<f32>",
        _ => "complex<f64>",
    }
}
const ATTRIBUTES: [(&str, &str); 13] = [
    ("uplo", "ui8"), ("mode", "ui8"), ("side", "ui8"), ("trans_x", "ui8"), ("diag", "ui8"),
    ("compute_left", "ui8"), ("compute_right", "ui8"), ("sort", "ui8"), ("low", "i32"),
    ("high", "i32"), ("left", "bool"), ("transpose", "bool"), ("mode", "i32"),
];

fn tensor(d: &mut Draw<'_>, usual: &str) -> (String, usize) {
    // An exhausted input reads zeros: those mean the usual case (rank 2, 3 x 3, the target's
    // own type and counts), so short inputs reach the kernels and longer ones vary them.
    let rank = (d.next(4) + 2) % 4;
    // Mostly small; sometimes the sizes where LAPACK changes algorithm (jax's SVD goes to
    // gesdd past 25) and up to 64.
    const LARGE: [usize; 6] = [16, 25, 26, 27, 32, 64];
    let dims: Vec<String> = (0..rank)
        .map(|_| match d.next(8) {
            7 => LARGE[d.next(LARGE.len())],
            n => (n + 3) % 6,
        })
        .map(|n| n.to_string())
        .collect();
    // Mostly the target's own type (or i32, for pivots and info), now and then anything.
    let element = match d.next(8) {
        7 => ELEMENTS[d.next(ELEMENTS.len())],
        5 | 6 => "i32",
        _ => usual,
    };
    let text = if dims.is_empty() {
        format!("tensor<{element}>")
    } else {
        format!("tensor<{}x{element}>", dims.join("x"))
    };
    (text, rank)
}

/// jaxlib's layout when `jaxlib` (a matrix, of rank `batch + 2`, column-major; the rest
/// row-major), else row-major for everything.
fn layout(rank: usize, batch: usize, jaxlib: bool) -> String {
    let order: Vec<String> = if jaxlib && rank >= 2 && rank == batch + 2 {
        [rank - 2, rank - 1].into_iter().chain((0..rank - 2).rev()).map(|x| x.to_string()).collect()
    } else {
        (0..rank).rev().map(|x| x.to_string()).collect()
    };
    if order.is_empty() {
        "dense<> : tensor<0xindex>".into()
    } else {
        format!("dense<[{}]> : tensor<{}xindex>", order.join(", "), order.len())
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut d = Draw(bytes);
    let target = &targets()[d.next(targets().len())];
    let usual = element_of(target);
    let (_, args_n, rets_n, names) = SIGNATURES
        .iter()
        .find(|(family, ..)| target.contains(family))
        .copied()
        .unwrap_or(("", 1, 1, &[]));
    // Usually the family's own counts and attributes, sometimes off by some.
    let (args_n, rets_n) = match d.next(4) {
        3 => (1 + d.next(4), 1 + d.next(6)),
        _ => (args_n, rets_n),
    };
    let operands: Vec<(String, usize)> = (0..args_n).map(|_| tensor(&mut d, usual)).collect();
    let results: Vec<(String, usize)> = (0..rets_n).map(|_| tensor(&mut d, usual)).collect();
    let mut attrs = Vec::new();
    let picks = if d.next(4) == 3 { d.next(5) } else { names.len() };
    for k in 0..picks {
        let (name, ty) = match names.get(k) {
            Some(&n) if d.next(6) != 5 => {
                let ty = ATTRIBUTES.iter().find(|(a, _)| *a == n).map_or("ui8", |(_, t)| *t);
                (n, ty)
            }
            _ => ATTRIBUTES[d.next(ATTRIBUTES.len())],
        };
        let value = match ty {
            "ui8" => format!("{} : ui8", b"LUNTCVASOR"[d.next(10)] as usize + d.next(2)),
            "i32" => format!("{} : i32", d.next(8) as i32 - 2),
            _ => (if d.next(2) == 1 { "true" } else { "false" }).to_string(),
        };
        if !attrs.iter().any(|a: &String| a.starts_with(&format!("{name} ="))) {
            attrs.push(format!("{name} = {value}"));
        }
    }
    let jaxlib_layouts = d.next(4) != 0;
    let batch = operands.iter().map(|(_, r)| *r).max().unwrap_or(0).saturating_sub(2);
    let params: Vec<String> = (operands.iter().enumerate()).map(|(i, (t, _))| format!("%a{i}: {t}")).collect();
    let args: Vec<String> = (0..operands.len()).map(|i| format!("%a{i}")).collect();
    let in_types: Vec<&str> = operands.iter().map(|(t, _)| t.as_str()).collect();
    let out_types: Vec<&str> = results.iter().map(|(t, _)| t.as_str()).collect();
    let in_layouts: Vec<String> = operands.iter().map(|(_, r)| layout(*r, batch, jaxlib_layouts)).collect();
    let out_layouts: Vec<String> = results.iter().map(|(_, r)| layout(*r, batch, jaxlib_layouts)).collect();
    let outs = format!("({})", out_types.join(", "));
    let names: Vec<String> = (0..results.len()).map(|i| format!("%r#{i}")).collect();
    let program = format!(
        "module @fuzz {{\n  func.func public @main({}) -> {outs} {{\n    %r:{} = stablehlo.custom_call @{target}({}) {{api_version = 4 : i32, backend_config = {{{}}}, operand_layouts = [{}], result_layouts = [{}]}} : ({}) -> {outs}\n    return {} : {}\n  }}\n}}\n",
        params.join(", "),
        results.len(),
        args.join(", "),
        attrs.join(", "),
        in_layouts.join(", "),
        out_layouts.join(", "),
        in_types.join(", "),
        names.join(", "),
        out_types.join(", "),
    );
    let client = client();
    let Ok(exe) = client.compile_and_load(program.as_bytes(), &CompileOptions::default()) else {
        return;
    };
    let device = &client.devices()[0];
    let inputs: Result<Vec<_>, _> = (exe.parameter_types().iter())
        .map(|t| {
            let n = t.byte_size().unwrap_or(0);
            // A non-trivial pattern, so NaN checks and pivoting see varied values; then, often,
            // a NaN or an infinity at a drawn element of a floating-point input.
            let mut bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 251) as u8 & 0x3f).collect();
            let width = match t.dtype {
                pjrt_actors::ElementType::F32 | pjrt_actors::ElementType::C64 => 4,
                pjrt_actors::ElementType::F64 | pjrt_actors::ElementType::C128 => 8,
                _ => 0,
            };
            let plants = if width > 0 { d.next(3) } else { 0 };
            for _ in 0..plants {
                let at = d.next(n / width.max(1)) * width;
                let special: [f64; 3] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
                let v = special[d.next(3)];
                let raw = if width == 4 { (v as f32).to_le_bytes().to_vec() } else { v.to_le_bytes().to_vec() };
                if at + width <= bytes.len() {
                    bytes[at..at + width].copy_from_slice(&raw);
                }
            }
            client.buffer_from_host(pjrt_actors::HostBuffer::Copy(&bytes), t.dtype, &t.dims, device, None)
        })
        .collect();
    if let Ok(inputs) = inputs {
        let refs: Vec<_> = inputs.iter().collect();
        let _ = exe.execute(&refs);
    }
});
