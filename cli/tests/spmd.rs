//! `run` and `bench` on SPMD programs jax exported over 4 devices (tests/data/spmd): global
//! inputs split by the parameter shardings, global outputs with their sharding and devices.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(name: &str) -> String {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/spmd");
    dir.join(name).display().to_string()
}

fn cli(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(args)
        .output()
        .unwrap()
}

fn inputs(case: &str, n: usize) -> Vec<String> {
    (0..n)
        .flat_map(|k| {
            [
                "--input".to_string(),
                format!("@{}", data(&format!("{case}.in{k}.npy"))),
            ]
        })
        .collect()
}

/// The values of a float32 `.npy` file JAX wrote.
fn jax_values(file: &str) -> Vec<f64> {
    common::npy_values(Path::new(&data(file)))
}

#[test]
fn run_splits_global_inputs_and_reports_each_outputs_sharding_and_devices() {
    let mut args = vec!["run".into(), data("dp_mlp.mlir"), "--json".into()];
    args.extend(inputs("dp_mlp", 4));
    let o = cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let outputs = v["outputs"].as_array().unwrap();
    assert_eq!(outputs[0]["shape"], serde_json::json!([16, 4]));
    assert_eq!(outputs[0]["sharding"], "{devices=[4,1]0,1,2,3}");
    assert_eq!(outputs[0]["devices"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(outputs[1]["shape"], serde_json::json!([]));
    for (k, out) in outputs.iter().enumerate() {
        let got: Vec<f64> = (out["data"].as_array().unwrap().iter())
            .map(|x| x.as_f64().unwrap())
            .collect();
        let want = jax_values(&format!("dp_mlp.out{k}.npy"));
        assert_eq!(got.len(), want.len());
        assert!(
            got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5),
            "output {k}"
        );
    }
}

#[test]
fn bytecode_runs_as_jax_serialized_it_and_a_partition_count_it_contradicts_is_refused() {
    let mut args = vec!["run".into(), data("tp_mlp.mlirbc"), "--json".into()];
    args.extend(inputs("tp_mlp", 3));
    let o = cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let got = common::json_output(&v, 0);
    let want = jax_values("tp_mlp.out0.npy");
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
    args.extend(["--partitions".into(), "2".into()]);
    let o = cli(&args);
    assert!(!o.status.success());
    assert!(common::error_line(&o).contains("mhlo.num_partitions = 4"));
}

#[test]
fn bench_runs_an_spmd_program_over_its_devices() {
    let o = cli(&[
        "bench".into(),
        data("heads_attention.mlir"),
        "--requests".into(),
        "200".into(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("200 executes from 4 threads over 4 devices"),
        "{text}"
    );
}

/// Zeros for an SPMD program's inputs are capped as a whole: a parameter of 128 MiB split four
/// ways (32 MiB a shard) is refused, asking for a file (each shard was checked alone, and
/// a 16-way program made 1 GiB of zeros under the 64 MiB cap).
#[test]
fn bench_caps_an_spmd_programs_zeros_as_a_whole() {
    let dir = std::env::temp_dir().join(format!("pjrt-actors-spmd-zeros-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = "tensor<8192x4096xf32>";
    let s = r#"{sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}"#;
    let program = format!(
        "module @big attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{\n  sdy.mesh @mesh = <[\"d\"=4]>\n  func.func public @main(%arg0: {t} {s}) -> ({t} {s}) {{\n    return %arg0 : {t}\n  }}\n}}\n"
    );
    let path = dir.join("big.mlir");
    std::fs::write(&path, program).unwrap();
    let o = cli(&[
        "bench".into(),
        path.display().to_string(),
        "--requests".into(),
        "1".into(),
    ]);
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let line = common::error_line(&o);
    assert!(
        line.contains("134217728 bytes") && line.contains("at most 64 MiB"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_whole_spmd_corpus_runs_through_run_on_four_devices_and_matches_jax() {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("manifest.json")).unwrap()).unwrap();
    for c in manifest["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let mut args = vec![
            "run".into(),
            data(c["program"].as_str().unwrap()),
            "--json".into(),
        ];
        args.extend(inputs(name, c["inputs"].as_array().unwrap().len()));
        let o = cli(&args);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for (k, out) in v["outputs"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                out["devices"].as_array().unwrap().len(),
                4,
                "{name} output {k}"
            );
            let got: Vec<f64> = (out["data"].as_array().unwrap().iter())
                .map(|x| x.as_f64().unwrap())
                .collect();
            let want = jax_values(c["outputs"][k]["file"].as_str().unwrap());
            let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
            assert!(
                got.len() == want.len()
                    && got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| (a - b).abs() <= 1e-5 * scale),
                "{name} output {k}"
            );
        }
    }
}
