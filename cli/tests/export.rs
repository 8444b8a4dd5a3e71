//! `inspect` on serialized jax.export artifacts (tests/data/exported): the signature a caller
//! needs, as text and JSON, and a typed error line for a file that is not one.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn cli(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn inspect_prints_an_exports_signature_and_refuses_what_is_not_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
    let at = |name: &str| dir.join(name).display().to_string();
    let o = cli(&["inspect".into(), at("unused_arg.exported")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("[0][1]") && text.contains("(unused: dropped)"),
        "{text}"
    );
    let o = cli(&["inspect".into(), at("sharded.exported"), "--json".into()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["nr_devices"], 4);
    assert_eq!(v["inputs"][0]["path"], "[0][0]");
    assert_eq!(v["inputs"][0]["type"], "f32[8,6]");
    assert_eq!(
        v["inputs"][0]["sharding"],
        "NamedSharding(mesh={'data': 2, 'model': 2}, spec=P('data', None))"
    );
    let o = cli(&["inspect".into(), at("manifest.json")]);
    assert!(!o.status.success());
    assert!(common::error_line(&o).contains("not a serialized jax.export artifact"));
}

#[test]
fn run_calls_an_export_from_its_bytes_and_refuses_a_shape_polymorphic_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
    let at = |name: &str| dir.join(name).display().to_string();
    // The unused argument is given, checked and dropped, as JAX's call does.
    let mut args = vec![
        "run".to_string(),
        at("unused_arg.exported"),
        "--json".into(),
    ];
    for k in 0..3 {
        args.extend([
            "--input".into(),
            format!("@{}", at(&format!("unused_arg.input{k}.npy"))),
        ]);
    }
    let o = cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let got = common::json_output(&v, 0);
    let want = common::npy_values(&dir.join("unused_arg.output0.npy"));
    assert!(
        got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6),
        "{got:?} {want:?}"
    );
    let o = cli(&[
        "run".into(),
        at("poly.exported"),
        "--input".into(),
        "3xf32=1,2,3".into(),
    ]);
    assert!(common::error_line(&o).contains("shape-polymorphic"));
}

#[test]
fn run_takes_an_exports_weights_from_a_safetensors_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
    let at = |name: &str| dir.join(name).display().to_string();
    let o = cli(&[
        "run".into(),
        at("mlp.exported"),
        "--params".into(),
        at("mlp.safetensors"),
        "--input".into(),
        format!("@{}", at("mlp.input3.npy")),
        "--json".into(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outputs"][1]["shape"], serde_json::json!([2, 4]));
    // Without the weights the call lacks three arguments, and says which.
    let o = cli(&[
        "run".into(),
        at("mlp.exported"),
        "--input".into(),
        format!("@{}", at("mlp.input3.npy")),
    ]);
    assert!(common::error_line(&o).contains("takes 4 arguments"));
    let o = cli(&[
        "run".into(),
        at("../spmd/tp_mlp.mlir"),
        "--params".into(),
        at("mlp.safetensors"),
    ]);
    assert!(common::error_line(&o).contains("--params"));
}

#[test]
fn bench_runs_an_export_with_its_weights_resident() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
    let at = |name: &str| dir.join(name).display().to_string();
    let o = cli(&[
        "bench".into(),
        at("serve/transformer.exported"),
        "--params".into(),
        at("serve/transformer.safetensors"),
        "--requests".into(),
        "40".into(),
        "--threads".into(),
        "2".into(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("40 executes from 2 threads"), "{text}");
    // A wrong free input is said once, before the workers start.
    let o = cli(&[
        "bench".into(),
        at("mlp.exported"),
        "--params".into(),
        at("mlp.safetensors"),
        "--input".into(),
        "3xf32=1,2,3".into(),
    ]);
    assert!(common::error_line(&o).contains("[0][1]"), "{o:?}");
    let o = cli(&[
        "bench".into(),
        at("../spmd/tp_mlp.mlir"),
        "--params".into(),
        at("mlp.safetensors"),
    ]);
    assert!(common::error_line(&o).contains("--params"));
}

#[test]
fn bench_makes_no_zeros_past_the_literal_bound_nor_for_a_dropped_argument() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/huge");
    let at = |name: &str| dir.join(name).display().to_string();
    // A valid export of f32[2^38]: refused with the bound's words (it aborted the process,
    // SIGABRT, filling 1 TiB with zeros).
    let o = cli(&[
        "bench".into(),
        at("huge_input.exported"),
        "--requests".into(),
        "1".into(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = common::error_line(&o);
    assert!(
        line.contains("input [0][0] (f32[274877906944]) is 1099511627776 bytes; zeros are made for at most 64 MiB"),
        "{line}"
    );
    // Its f32[2^40] argument is dropped by the module: no zeros are made for it, and it runs.
    let o = cli(&[
        "bench".into(),
        at("huge_unused.exported"),
        "--requests".into(),
        "20".into(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
