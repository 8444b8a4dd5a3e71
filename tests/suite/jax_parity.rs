//! Results that depend on compile defaults match JAX's: min and max over NaN, from the program
//! jax 0.10.2 exported and its recorded answers (tests/data/stablehlo, scripts/jax-stablehlo-data),
//! on whichever CPU plugin the suite runs on.

use std::path::Path;

use pjrt_actors::host_data::HostArray;
use pjrt_actors::{Client, CompileOptions, ElementType, XlaOption};
use serde_json::Value;

use crate::jax_lapack::{run, values};

fn data(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/stablehlo")
            .join(name),
    )
    .unwrap()
}

/// The outputs of `nan_reductions` compiled with `options`, as text the way Python prints them.
fn reductions(client: &Client, options: &CompileOptions) -> (Vec<Vec<String>>, Value) {
    let recorded: Value = serde_json::from_slice(&data("nan_reductions.json")).unwrap();
    let input: Vec<f32> = (recorded["input"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    let input = HostArray {
        dtype: ElementType::F32,
        dims: vec![input.len() as i64],
        bytes: input.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let exe = client
        .compile_and_load(data("nan_reductions.mlirbc"), options)
        .unwrap();
    let shown = |v: f64| match v {
        v if v.is_nan() => "nan".to_string(),
        v if v.is_infinite() => (if v > 0.0 { "inf" } else { "-inf" }).to_string(),
        v => format!("{v:?}"),
    };
    let outputs = (run(&exe, &[input]).unwrap().iter())
        .map(|o| values(o).into_iter().map(shown).collect())
        .collect();
    (outputs, recorded["outputs"].clone())
}

#[test]
fn min_and_max_over_nan_give_what_jax_gives() {
    let client = Client::open().unwrap();
    let (got, jax) = reductions(&client, &CompileOptions::default());
    let jax: Vec<Vec<String>> = serde_json::from_value(jax).unwrap();
    assert_eq!(got, jax, "ours, then JAX's");
    assert_eq!(got[0], ["nan"], "jnp.max over NaN is NaN in JAX");
}

#[test]
fn xla_options_reach_the_compiler_and_override_jax_defaults() {
    // XLA's own default, fast min/max, drops NaN: asking for it through `xla_options` must
    // change the answer, which shows the option reached the plugin's compiler.
    let client = Client::open().unwrap();
    let fast = CompileOptions {
        xla_options: vec![("xla_cpu_enable_fast_min_max".into(), XlaOption::Bool(true))],
        ..Default::default()
    };
    let (got, _) = reductions(&client, &fast);
    assert_eq!(got[0], ["inf"], "fast max skips the NaN");
    assert_eq!(got[1], ["-inf"], "fast min skips the NaN");
    // An option the compiler does not have is the plugin's typed error, not a silent no-op.
    let unknown = CompileOptions {
        xla_options: vec![("xla_no_such_option".into(), XlaOption::Int(1))],
        ..Default::default()
    };
    let err = client
        .compile_and_load(data("nan_reductions.mlirbc"), &unknown)
        .unwrap_err();
    assert!(err.to_string().contains("xla_no_such_option"), "{err}");
}
