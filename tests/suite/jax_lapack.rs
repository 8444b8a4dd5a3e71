//! Programs `jax.export` produced (tests/data/jax_lapack, made by scripts/jax-lapack-data) run
//! through the runtime's LAPACK custom calls and are checked against JAX's own outputs, and
//! against residuals where results are not unique; then a table of malformed custom calls,
//! each a typed error that leaves the client working.

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::{HostArray, read_npy};
use pjrt_actors::{Client, CompileOptions, Error, HostBuffer, LoadedExecutable};
use serde_json::Value;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jax_lapack")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(data_dir().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn npy(name: &str) -> HostArray {
    read_npy(&std::fs::read(data_dir().join(name)).unwrap()).unwrap()
}

pub(crate) use crate::jax_outputs::values;

/// Compares `got` with JAX's `want`: same type and shape, NaN and infinities where JAX has
/// them, and finite values within `rtol` of the largest finite magnitude.
fn compare(got: &HostArray, want: &HostArray, rtol: f64) -> Result<(), String> {
    if got.dtype != want.dtype || got.dims != want.dims {
        return Err(format!(
            "got {}{:?}, JAX has {}{:?}",
            got.dtype, got.dims, want.dtype, want.dims
        ));
    }
    let (g, w) = (values(got), values(want));
    let scale = w
        .iter()
        .filter(|v| v.is_finite())
        .fold(1e-30f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let same = if b.is_finite() {
            (a - b).abs() <= rtol * scale
        } else {
            a.is_nan() && b.is_nan() || a == b
        };
        if !same {
            return Err(format!("value {i}: got {a}, JAX has {b} (scale {scale:e})"));
        }
    }
    Ok(())
}

pub(crate) fn load(client: &Client, program: &[u8]) -> Result<LoadedExecutable, Error> {
    client.compile_and_load(program, &CompileOptions::default())
}

pub(crate) fn run(exe: &LoadedExecutable, inputs: &[HostArray]) -> Result<Vec<HostArray>, Error> {
    let client = exe.client();
    let device = &client.devices()[0];
    let arrays = inputs
        .iter()
        .map(|h| {
            client.buffer_from_host(HostBuffer::Copy(&h.bytes), h.dtype, &h.dims, device, None)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<_> = arrays.iter().collect();
    exe.execute(&refs)?
        .iter()
        .map(pjrt_actors::Array::to_host_array)
        .collect()
}

/// Runs one manifest case; `Err` says what differs.
fn check_case(client: &Client, case: &Value) -> Result<(), String> {
    let name = case["name"].as_str().unwrap();
    let program = std::fs::read(data_dir().join(case["program"].as_str().unwrap())).unwrap();
    let inputs: Vec<HostArray> = (case["inputs"].as_array().unwrap().iter())
        .map(|f| npy(f.as_str().unwrap()))
        .collect();
    let exe = load(client, &program).map_err(|e| format!("{name}: compile: {}", e.detail()))?;
    let outputs = run(&exe, &inputs).map_err(|e| format!("{name}: execute: {}", e.detail()))?;
    let expected: Vec<HostArray> = (case["outputs"].as_array().unwrap().iter())
        .map(|f| npy(f.as_str().unwrap()))
        .collect();
    if outputs.len() != expected.len() {
        return Err(format!(
            "{name}: {} outputs, JAX has {}",
            outputs.len(),
            expected.len()
        ));
    }
    let compared = case["compared"].as_u64().unwrap() as usize;
    let rtol = case["rtol"].as_f64().unwrap();
    let bound = case["residual_bound"].as_f64().unwrap();
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        if i < compared {
            compare(got, want, rtol).map_err(|e| format!("{name}: output {i}: {e}"))?;
        } else {
            let residual = values(got)[0];
            if residual.is_nan() || residual > bound {
                return Err(format!(
                    "{name}: residual {i} is {residual:e} (bound {bound:e}; JAX's {:e})",
                    values(want)[0]
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn every_target_jaxlib_registers_is_provided() {
    let mut ours = pjrt_actors::lapack::target_names();
    ours.sort();
    let theirs: Vec<String> = (manifest()["targets"].as_array().unwrap().iter())
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        theirs.len(),
        60,
        "the data covers jaxlib's 60 LAPACK targets"
    );
    assert_eq!(ours, theirs);
    pjrt_actors::lapack::library_name().expect("scripts/bootstrap installs a LAPACK");
}

#[test]
fn jax_exported_linear_algebra_matches_jax() {
    let client = Client::open().unwrap();
    let m = manifest();
    let cases = m["cases"].as_array().unwrap();
    assert!(
        cases.len() >= 100,
        "the data has a case per function and dtype"
    );
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| check_case(&client, case).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn kernels_are_safe_from_many_threads_at_once() {
    let client = Client::open().unwrap();
    let m = manifest();
    let pick = |name: &str| {
        (m["cases"].as_array().unwrap().iter())
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let cases = ["svd_gesdd_full.f64", "eig.c128", "solve.f32", "eigh.c64"].map(pick);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (client, cases) = (&client, &cases);
            s.spawn(move || {
                for round in 0..5 {
                    let case = &cases[(t + round) % cases.len()];
                    check_case(client, case).unwrap();
                }
            });
        }
    });
}

/// A custom call to `target` on `operand_ty` operands, returning `result_tys`, with `attrs`.
pub(crate) fn custom_call(
    target: &str,
    operands: &[&str],
    results: &[&str],
    attrs: &str,
) -> String {
    let params: Vec<String> = (operands.iter().enumerate())
        .map(|(i, t)| format!("%a{i}: {t}"))
        .collect();
    let args: Vec<String> = (0..operands.len()).map(|i| format!("%a{i}")).collect();
    // The dims before the element type (`complex<f32>` has an x of its own).
    let rank = |t: &str| {
        (t.trim_start_matches("tensor<").split('x'))
            .take_while(|d| d.parse::<i64>().is_ok())
            .count()
    };
    // jaxlib's layouts, as jax's lowering writes them (the highest-rank operand is a matrix).
    let batch = operands
        .iter()
        .map(|t| rank(t))
        .max()
        .unwrap_or(0)
        .saturating_sub(2);
    let layouts = |tys: &[&str]| -> String {
        let l: Vec<String> = tys
            .iter()
            .map(|t| {
                let order =
                    pjrt_actors_core::compile::custom_call_layouts::jaxlib_layout(rank(t), batch);
                if order.is_empty() {
                    "dense<> : tensor<0xindex>".into()
                } else {
                    let order: Vec<String> = order.iter().map(i64::to_string).collect();
                    format!(
                        "dense<[{}]> : tensor<{}xindex>",
                        order.join(", "),
                        order.len()
                    )
                }
            })
            .collect();
        l.join(", ")
    };
    let outs = if results.len() == 1 {
        results[0].to_string()
    } else {
        format!("({})", results.join(", "))
    };
    let names: Vec<String> = (0..results.len()).map(|i| format!("%r#{i}")).collect();
    let bind = if results.len() == 1 {
        "%r".to_string()
    } else {
        format!("%r:{}", results.len())
    };
    let ret = if results.len() == 1 {
        "%r".to_string()
    } else {
        names.join(", ")
    };
    format!(
        "module @bad {{\n  func.func public @main({}) -> {outs} {{\n    {bind} = stablehlo.custom_call @{target}({}) {{api_version = 4 : i32, backend_config = {{{attrs}}}, operand_layouts = [{}], result_layouts = [{}]}} : ({}) -> {outs}\n    return {ret} : {}\n  }}\n}}\n",
        params.join(", "),
        args.join(", "),
        layouts(operands),
        layouts(results),
        operands.join(", "),
        results.join(", "),
    )
}

/// (what, program, a word the error must contain)
type BadCall = (&'static str, String, &'static str);

fn bad_calls() -> Vec<BadCall> {
    let m = "tensor<4x4xf32>";
    vec![
        (
            "pivots of the wrong length",
            custom_call(
                "lapack_sgetrf_ffi",
                &[m],
                &[m, "tensor<3xi32>", "tensor<i32>"],
                "",
            ),
            "pivots",
        ),
        (
            "info of the wrong type",
            custom_call(
                "lapack_sgetrf_ffi",
                &[m],
                &[m, "tensor<4xi32>", "tensor<f32>"],
                "",
            ),
            "info",
        ),
        (
            "a rank-1 operand",
            custom_call(
                "lapack_spotrf_ffi",
                &["tensor<4xf32>"],
                &["tensor<4xf32>", "tensor<i32>"],
                "uplo = 76 : ui8",
            ),
            "rank",
        ),
        (
            "a non-square Cholesky",
            custom_call(
                "lapack_spotrf_ffi",
                &["tensor<4x3xf32>"],
                &["tensor<4x3xf32>", "tensor<i32>"],
                "uplo = 76 : ui8",
            ),
            "square",
        ),
        (
            "an unknown uplo",
            custom_call(
                "lapack_spotrf_ffi",
                &[m],
                &[m, "tensor<i32>"],
                "uplo = 88 : ui8",
            ),
            "uplo",
        ),
        (
            "a missing attribute",
            custom_call("lapack_spotrf_ffi", &[m], &[m, "tensor<i32>"], ""),
            "uplo",
        ),
        (
            "an attribute of the wrong type",
            custom_call(
                "lapack_spotrf_ffi",
                &[m],
                &[m, "tensor<i32>"],
                "uplo = 76 : i32",
            ),
            "uplo",
        ),
        (
            "SVD mode 'O'",
            custom_call(
                "lapack_sgesdd_ffi",
                &[m],
                &[m, "tensor<4xf32>", m, m, "tensor<i32>"],
                "mode = 79 : ui8",
            ),
            "mode",
        ),
        (
            "Hessenberg low = 0 (LAPACK would stop the process)",
            custom_call(
                "lapack_sgehrd_ffi",
                &[m],
                &[m, "tensor<3xf32>", "tensor<i32>"],
                "low = 0 : i32, high = 4 : i32",
            ),
            "low",
        ),
        (
            "a Schur sort",
            custom_call(
                "lapack_sgees_ffi",
                &[m],
                &[
                    m,
                    m,
                    "tensor<4xf32>",
                    "tensor<4xf32>",
                    "tensor<i32>",
                    "tensor<i32>",
                ],
                "mode = 86 : ui8, sort = 83 : ui8",
            ),
            "sort",
        ),
        (
            "the wrong element type",
            custom_call(
                "lapack_dgetrf_ffi",
                &[m],
                &[m, "tensor<4xi32>", "tensor<i32>"],
                "",
            ),
            "f64",
        ),
        (
            "too few results",
            custom_call("lapack_sgetrf_ffi", &[m], &[m, "tensor<4xi32>"], ""),
            "result",
        ),
        (
            "orgqr with more reflectors than columns",
            custom_call(
                "lapack_sorgqr_ffi",
                &["tensor<4x2xf32>", "tensor<3xf32>"],
                &["tensor<4x2xf32>"],
                "",
            ),
            "reflectors",
        ),
        (
            "a triangular matrix of the wrong order",
            custom_call(
                "lapack_strsm_ffi",
                &["tensor<3x3xf32>", "tensor<4x2xf32>"],
                &["tensor<4x2xf32>"],
                "diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8",
            ),
            "triangular",
        ),
    ]
}

#[test]
fn malformed_lapack_calls_are_typed_errors_and_the_client_keeps_working() {
    let client = Client::open().unwrap();
    let good = (manifest()["cases"].as_array().unwrap().iter())
        .find(|c| c["name"] == "lu.f64")
        .unwrap()
        .clone();
    for (what, program, word) in bad_calls() {
        let err = load(&client, program.as_bytes())
            .and_then(|exe| {
                let inputs: Vec<HostArray> = exe
                    .parameter_types()
                    .iter()
                    .map(|t| HostArray {
                        dtype: t.dtype,
                        dims: t.dims.clone(),
                        bytes: vec![
                            0;
                            t.dtype.byte_size() * t.dims.iter().product::<i64>() as usize
                        ],
                    })
                    .collect();
                run(&exe, &inputs)
            })
            .err()
            .unwrap_or_else(|| panic!("{what}: ran"));
        let text = err.detail();
        assert!(
            matches!(err, Error::Pjrt { .. } | Error::InvalidArgument(_)),
            "{what}: not a typed plugin error: {err:?}"
        );
        assert!(
            text.contains(word),
            "{what}: the error does not say `{word}`: {text}"
        );
        check_case(&client, &good).unwrap_or_else(|e| panic!("after {what}: {e}"));
    }
}
