//! The `pjrt-actors` command line end to end: `run` with text and `.npy` inputs and `--json`,
//! every input error as one line and a non-zero exit, and `devices --json`.

mod common;

use common::error_line;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pjrt_actors::ElementType;
use pjrt_actors::host_data::{HostArray, read_npy, write_npy};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(args)
        .output()
        .unwrap()
}

/// A fresh directory for one test's files.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pjrt-actors-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn module(name: &str, text: &str) -> String {
    let dir = scratch_dir("cli");
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn add_module() -> String {
    module(
        "add.mlir",
        "module @add {\n  func.func public @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {\n    %0 = stablehlo.add %a, %b : tensor<2x2xf32>\n    return %0 : tensor<2x2xf32>\n  }\n}\n",
    )
}

#[test]
fn run_with_text_inputs() {
    let m = add_module();
    let o = cli(&[
        "run",
        &m,
        "--input",
        "2x2xf32=1,2,3,4",
        "--input",
        "2x2xf32=10",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o).trim(), "result[0]: 2x2xf32=[11,12,13,14]");
}

#[test]
fn run_with_json_output_and_several_dtypes() {
    let m = module(
        "mixed.mlir",
        "module @mixed {\n  func.func public @main(%a: tensor<3xi32>, %s: tensor<f64>) -> (tensor<3xi32>, tensor<f64>, tensor<3xi1>) {\n    %0 = stablehlo.multiply %a, %a : tensor<3xi32>\n    %1 = stablehlo.add %s, %s : tensor<f64>\n    %z = stablehlo.constant dense<0> : tensor<3xi32>\n    %2 = stablehlo.compare GT, %a, %z : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi1>\n    return %0, %1, %2 : tensor<3xi32>, tensor<f64>, tensor<3xi1>\n  }\n}\n",
    );
    let o = cli(&[
        "run",
        &m,
        "--input",
        "3xi32=-2,0,7",
        "--input",
        "f64=1.25",
        "--json",
        "--device",
        "2",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let outputs = v["outputs"].as_array().unwrap();
    assert_eq!(
        outputs[0],
        serde_json::json!({"dtype": "s32", "shape": [3], "data": [4, 0, 49]})
    );
    assert_eq!(
        outputs[1],
        serde_json::json!({"dtype": "f64", "shape": [], "data": [2.5]})
    );
    assert_eq!(
        outputs[2],
        serde_json::json!({"dtype": "pred", "shape": [3], "data": [false, false, true]})
    );
}

#[test]
fn run_with_npy_inputs_and_outputs() {
    let dir = scratch_dir("cli-npy");
    let a = dir.join("a.npy");
    let b = dir.join("b.npy");
    let out = dir.join("out.npy");
    let f32s = |v: &[f32]| HostArray {
        dtype: ElementType::F32,
        dims: vec![2, 2],
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    std::fs::write(&a, write_npy(&f32s(&[1.5, -2., 3., 4.])).unwrap()).unwrap();
    std::fs::write(&b, write_npy(&f32s(&[0.5, 2., 0., 1.])).unwrap()).unwrap();
    let m = add_module();
    let o = cli(&[
        "run",
        &m,
        "--input",
        &format!("@{}", a.display()),
        "--input",
        &format!("@{}", b.display()),
        "--output",
        &format!("@{}", out.display()),
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        read_npy(&std::fs::read(&out).unwrap()).unwrap(),
        f32s(&[2., 0., 3., 5.])
    );
}

#[test]
fn every_input_error_is_one_line_and_a_failure() {
    let m = add_module();
    let missing_npy = "@/nonexistent/x.npy".to_string();
    let bad_npy = {
        let p = scratch_dir("cli-bad").join("bad.npy");
        std::fs::write(&p, b"not numpy").unwrap();
        format!("@{}", p.display())
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["2x2xf32"], "expected DIMSxDTYPE=VALUES"),
        (vec!["2x2xq7=1"], "unknown element type `q7`"),
        (vec!["2xzxf32=1"], "`z` is not a dimension"),
        (vec!["2x2xf32=1,2,3"], "holds 4 values, 3 were given"),
        (vec!["2x2xf32=1,x,3,4"], "`x` is not a number"),
        (vec!["2x2xi8=1,2,3,300"], "`300` does not fit in s8"),
        (vec!["2x2xi1=1,2,0,1"], "is not a boolean"),
        (vec![&missing_npy], "cannot read"),
        (vec![&bad_npy], "not a .npy file"),
        (
            vec!["2x2xf32=1"],
            "the module takes 2 inputs, 1 --input given",
        ),
        (vec!["2x2xf32=1", "3xf32=1"], "the module expects f32[2, 2]"),
    ];
    for (inputs, needle) in cases {
        let mut args = vec!["run", m.as_str()];
        for i in &inputs {
            args.extend(["--input", i]);
        }
        let o = cli(&args);
        assert!(!o.status.success(), "{inputs:?} should fail");
        let line = error_line(&o);
        assert!(
            line.contains(needle),
            "{inputs:?}: {line:?} lacks {needle:?}"
        );
    }
    let o = cli(&[
        "run",
        &m,
        "--input",
        "2x2xf32=1",
        "--input",
        "2x2xf32=2",
        "--output",
        "out.npy",
    ]);
    assert!(error_line(&o).contains("expected @path.npy"));
    let o = cli(&[
        "run",
        &m,
        "--input",
        "2x2xf32=1",
        "--input",
        "2x2xf32=2",
        "--device",
        "9",
    ]);
    assert!(error_line(&o).contains("--device 9"));
    let o = cli(&["run", "/nonexistent.mlir"]);
    assert!(error_line(&o).contains("/nonexistent.mlir"));
    let broken = module("broken.mlir", "module { func.func @main( }");
    let o = cli(&["run", &broken]);
    assert!(error_line(&o).contains("PJRT_Client_Compile"));
}

#[test]
fn devices_as_json() {
    let o = cli(&["devices", "--json", "--cpu-devices", "3"]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["platform"], "cpu");
    // Which plugin: its file, its C API version and the newest StableHLO it parses.
    assert!(Path::new(v["plugin"].as_str().unwrap()).is_file(), "{v}");
    let api = v["api_version"][1].as_i64().unwrap();
    assert!(matches!(api, 81 | 106) || api >= 115, "{v}");
    assert_eq!(
        v["stablehlo_version"].as_array().map(|a| a.len()),
        Some(3),
        "{v}"
    );
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 3);
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d["id"], i);
        let spaces = d["memory_spaces"].as_array().unwrap();
        assert_eq!(spaces.len(), 3);
        assert_eq!(spaces.iter().filter(|m| m["default"] == true).count(), 1);
    }
}

#[test]
fn bench_and_compile_stress_report() {
    let m = add_module();
    let o = cli(&["bench", &m, "--threads", "3", "--requests", "300"]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert!(
        out.contains("300 executes from 3 threads") && out.contains("p99"),
        "{out}"
    );
    let o = cli(&["compile-stress", "--modules", "6", "--concurrency", "3"]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("6 compiles"), "{}", stdout(&o));
}

#[test]
fn profile_writes_a_pprof_file() {
    let out = scratch_dir("cli-profile").join("heap.pb");
    let o = cli(&[
        "profile",
        "--out",
        &out.display().to_string(),
        "--cpu-devices",
        "2",
    ]);
    assert!(o.status.success(), "{o:?}");
    let profile =
        <pjrt_actors_core::arrays::heap_profile::pprof::Profile as prost::Message>::decode(
            std::fs::read(&out).unwrap().as_slice(),
        )
        .unwrap();
    // Two devices x two arrays, one output, one executable.
    let counts: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(counts, 2 * 2 + 1 + 1);
}

/// The red-team pass's command lines (issue 13): each fails with one error line naming the
/// problem, before any work where it can be known before.
#[test]
fn hostile_flags_fail_with_one_line_and_never_a_panic() {
    let m = add_module();
    let huge = module(
        "huge.mlir",
        "module @huge {\n  func.func public @main(%a: tensor<100000x100000xf32>) -> tensor<100000x100000xf32> {\n    return %a : tensor<100000x100000xf32>\n  }\n}\n",
    );
    let folder = scratch_dir("cli-out-folder");
    let (folder_out, missing_out) = (
        format!("@{}", folder.display()),
        "@/nonexistent-folder/y.npy".to_string(),
    );
    let two_inputs = ["--input", "2x2xf32=1", "--input", "2x2xf32=2"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["bench", &m, "--duration", "nan"], "--duration must be"),
        (vec!["bench", &m, "--duration", "inf"], "--duration must be"),
        (vec!["bench", &m, "--duration=-1"], "--duration must be"),
        (
            vec!["bench", &m, "--duration", "1e300"],
            "--duration must be",
        ),
        (
            vec!["bench", &m, "--threads", "100000"],
            "--threads must be between 1 and 1024",
        ),
        (
            vec!["compile-stress", "--concurrency", "100000"],
            "--concurrency must be between",
        ),
        (
            vec!["bench", &huge, "--requests", "1"],
            "zeros are made for at most 64 MiB",
        ),
        (
            [&["run", &m][..], &two_inputs, &["--output", &folder_out]].concat(),
            "is a folder",
        ),
        (
            [&["run", &m][..], &two_inputs, &["--output", &missing_out]].concat(),
            "does not exist",
        ),
        (
            vec!["run", &m, "--input", "2x2xf32=1e40", "--input", "2x2xf32=1"],
            "out of the range of f32",
        ),
    ];
    for (args, needle) in cases {
        let o = cli(&args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let line = error_line(&o);
        assert!(line.contains(needle), "{args:?}: {line:?} lacks {needle:?}");
    }
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    use std::io::Read;
    // A million values printed as text: far more than a pipe holds.
    let m = module(
        "wide.mlir",
        "module @wide {\n  func.func public @main(%a: tensor<f32>) -> tensor<1000000xf32> {\n    %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<1000000xf32>\n    return %0 : tensor<1000000xf32>\n  }\n}\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["run", &m, "--input", "f32=1.5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // then the pipe closes
    let o = child.wait_with_output().unwrap();
    assert_eq!(&first, b"result[0]:");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(o.status.success(), "{:?}: {stderr}", o.status);
}

#[test]
fn an_input_from_standard_input_is_read_once() {
    use std::io::Write;
    let m = add_module();
    let npy = pjrt_actors::host_data::write_npy(&HostArray {
        dtype: ElementType::F32,
        dims: vec![2, 2],
        bytes: [1f32, 2., 3., 4.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    })
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["run", &m, "--input", "@/dev/stdin", "--input", "2x2xf32=10"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&npy).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o).trim(), "result[0]: 2x2xf32=[11,12,13,14]");
}

#[test]
fn a_program_that_crashes_the_compiler_is_an_error_line_not_a_crash() {
    let worker = std::path::Path::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .with_file_name("pjrt-actors-compile-worker");
    assert!(
        worker.is_file(),
        "{} is built with the workspace (cargo build --workspace)",
        worker.display()
    );
    let m = module(
        "topk.mlir",
        "module @crashes { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.custom_call @TopK(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32> } }",
    );
    let o = cli(&["run", &m, "--input", "4xf32=1"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(error_line(&o).contains("the compiler crashed on this program"));
}

#[test]
fn a_run_past_its_timeout_ends_with_an_error_line_at_once() {
    // 10^10 iterations of a loop XLA cannot shorten: minutes of work.
    let m = module(
        "spin.mlir",
        "module @spin {\n  func.func public @main(%n: tensor<i64>) -> tensor<f32> {\n    %c0 = stablehlo.constant dense<0> : tensor<i64>\n    %one = stablehlo.constant dense<1> : tensor<i64>\n    %x0 = stablehlo.constant dense<1.0> : tensor<f32>\n    %k = stablehlo.constant dense<1.0000001> : tensor<f32>\n    %r:2 = stablehlo.while(%i = %c0, %x = %x0) : tensor<i64>, tensor<f32>\n      cond {\n        %lt = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>\n        stablehlo.return %lt : tensor<i1>\n      } do {\n        %next = stablehlo.add %i, %one : tensor<i64>\n        %y = stablehlo.multiply %x, %k : tensor<f32>\n        %z = stablehlo.sine %y : tensor<f32>\n        stablehlo.return %next, %z : tensor<i64>, tensor<f32>\n      }\n    return %r#1 : tensor<f32>\n  }\n}\n",
    );
    let t0 = std::time::Instant::now();
    let o = cli(&["run", &m, "--input", "i64=10000000000", "--timeout", "0.5"]);
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        error_line(&o).contains("did not finish within 500ms"),
        "{o:?}"
    );
    // A short run within its timeout works; a bad timeout is refused.
    let o = cli(&["run", &m, "--input", "i64=1000", "--timeout", "30"]);
    assert!(o.status.success(), "{o:?}");
    let o = cli(&["run", &m, "--input", "i64=1", "--timeout", "nan"]);
    assert!(error_line(&o).contains("--timeout must be"));
}

#[test]
fn run_serves_a_jax_exported_solve_and_matches_jax() {
    // An unchanged `jax.export` artifact: LU and triangular solves through jaxlib's LAPACK
    // custom calls, inputs and JAX's output as .npy files.
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/jax_lapack");
    let dir = scratch_dir("cli-jax-solve");
    let out = dir.join("x.npy");
    let o = cli(&[
        "run",
        data.join("solve.f64.mlirbc").to_str().unwrap(),
        "--input",
        &format!("@{}", data.join("solve.f64.in0.npy").display()),
        "--input",
        &format!("@{}", data.join("solve.f64.in1.npy").display()),
        "--output",
        &format!("@{}", out.display()),
    ]);
    assert!(o.status.success(), "{o:?}");
    let got = read_npy(&std::fs::read(&out).unwrap()).unwrap();
    let want = read_npy(&std::fs::read(data.join("solve.f64.out0.npy")).unwrap()).unwrap();
    assert_eq!((got.dtype, &got.dims), (want.dtype, &want.dims));
    let f64s = |h: &HostArray| -> Vec<f64> {
        (h.bytes.chunks_exact(8))
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    for (g, w) in f64s(&got).iter().zip(f64s(&want)) {
        assert!(
            (g - w).abs() <= 1e-10 * w.abs().max(1.0),
            "{g} vs JAX's {w}"
        );
    }
}

#[path = "../../tests/suite/common/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/suite/common/redis_server.rs"]
mod redis_server;

use redis_cluster::{FleetRedis, Kind};

// The fleet's command-line tests run on one Redis server and on a Redis Cluster.
crate::on_one_and_cluster!(
    compile_stress_over_processes_shares_one_redis_and_cache_commands_see_it,
    cache_clear_deletes_only_our_keys_and_takes_the_namespace_literally,
    a_lease_holder_killed_mid_compile_is_taken_over_by_the_next_process,
);

/// A fleet key file (32 bytes of 0x5a in hex), readable by its owner only.
fn fleet_key_file(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = scratch_dir(name).join("fleet.key");
    std::fs::write(&file, "5a".repeat(32)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

fn compile_stress_over_processes_shares_one_redis_and_cache_commands_see_it(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let url = server.url();
    // A fleet sharing a key shares compiles as one without: the same counts, entries signed.
    let key = fleet_key_file("cli-fleet-key");
    let o = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args([
            "compile-stress",
            "--modules",
            "6",
            "--concurrency",
            "2",
            "--processes",
            "3",
        ])
        .args(["--cache-redis", &url])
        .env(pjrt_actors::CACHE_KEY_FILE_ENV, &key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(
        text.contains("6 plugin compiles across the fleet (18 without a shared cache)"),
        "{text}"
    );
    assert!(text.contains("redis: 12 hits"), "{text}");
    let o = cli(&["cache", "stats", "--redis", &url]);
    assert!(
        stdout(&o).contains("6 entries") && stdout(&o).contains(", 6 signed"),
        "{o:?}"
    );
    let keyed = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["cache", "stats", "--redis", &url])
        .env(pjrt_actors::CACHE_KEY_FILE_ENV, &key)
        .output()
        .unwrap();
    assert!(
        stdout(&keyed).contains("6 signed, 6 verified by the fleet's keys"),
        "{keyed:?}"
    );
    let o = cli(&["cache", "clear", "--redis", &url]);
    assert!(stdout(&o).contains("6 keys removed"), "{o:?}");
    assert!(stdout(&cli(&["cache", "stats", "--redis", &url])).contains("0 entries"));

    let dir = scratch_dir("cli-cache-dir");
    let o = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["compile-stress", "--modules", "3", "--concurrency", "1"])
        .env("PJRT_ACTORS_CACHE_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let d = dir.to_str().unwrap();
    let stats = stdout(&cli(&["cache", "stats", "--dir", d]));
    assert!(
        stats.contains("disk: 3 entries") && stats.contains(", 0 signed"),
        "{stats}"
    );
    assert!(stdout(&cli(&["cache", "clear", "--dir", d])).contains("3 entries removed"));
    let o = cli(&["cache", "stats"]);
    assert!(
        !o.status.success() && error_line(&o).contains("--dir or --redis"),
        "{o:?}"
    );
}

fn cache_clear_deletes_only_our_keys_and_takes_the_namespace_literally(kind: Kind) {
    use redis::Commands;
    let server = FleetRedis::start(kind, &[]);
    let url = server.url();
    let mut conn = server.connection().unwrap();
    let hash = "0123456789abcdef".repeat(4);
    let others = [
        "sessions:alice",
        "billing:2026:invoice",
        "myns:settings",
        "myns:exe:not-a-hash",
    ];
    let ours = [
        format!("myns:exe:{{{hash}}}"),
        format!("myns:lease:{{{hash}}}"),
    ];
    for k in others
        .iter()
        .map(|k| k.to_string())
        .chain(ours.iter().cloned())
    {
        let _: () = conn.set(&k, "v").unwrap();
    }
    // A key under the prefix that is not UTF-8 (one Latin-1 byte): not ours, and no reason for
    // stats or clear to fail (its decoding failed the whole SCAN, and nothing was cleared).
    let latin1: &[u8] = b"myns:exe:caf\xe9";
    let _: () = conn.set(latin1, "v").unwrap();
    let exists =
        |conn: &mut redis_cluster::AnyConnection, k: &str| -> bool { conn.exists(k).unwrap() };
    // A namespace of `*` is a namespace named `*` (it deleted every key on the server).
    let o = cli(&["cache", "clear", "--redis", &url, "--namespace", "*"]);
    assert!(stdout(&o).contains("0 keys removed"), "{o:?}");
    // A literal namespace deletes our entry and lease under it, and nothing else under it.
    let o = cli(&["cache", "stats", "--redis", &url, "--namespace", "myns"]);
    assert!(stdout(&o).contains("1 entries"), "{o:?}");
    let o = cli(&["cache", "clear", "--redis", &url, "--namespace", "myns"]);
    assert!(stdout(&o).contains("2 keys removed"), "{o:?}");
    for k in others {
        assert!(exists(&mut conn, k), "{k} was deleted");
    }
    for k in &ours {
        assert!(!exists(&mut conn, k), "{k} was kept");
    }
    let kept: bool = conn.exists(latin1).unwrap();
    assert!(kept, "the Latin-1 key was deleted");
}

fn a_lease_holder_killed_mid_compile_is_taken_over_by_the_next_process(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    // A module that takes about a second to compile.
    let t = "tensor<64x64xf32>";
    let mut body = String::new();
    let mut prev = "%x".to_string();
    for l in 0..800 {
        body += &format!(
            "    %w{l} = stablehlo.constant dense<{}.5> : {t}\n    %d{l} = stablehlo.dot_general {prev}, %w{l}, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}\n    %a{l} = stablehlo.tanh %d{l} : {t}\n",
            l % 7
        );
        prev = format!("%a{l}");
    }
    let path = scratch_dir("cli-lease").join("slow.mlir");
    std::fs::write(&path, format!("module @slow {{\n  func.func public @main(%x: {t}) -> {t} {{\n{body}    return {prev} : {t}\n  }}\n}}\n")).unwrap();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
            .args([
                "bench",
                path.to_str().unwrap(),
                "--requests",
                "1",
                "--threads",
                "1",
            ])
            .env("PJRT_ACTORS_CACHE_REDIS", server.url())
            .env("PJRT_ACTORS_CACHE_REDIS_LEASE_MS", "600")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut holder = run();
    let mut conn = server.connection().unwrap();
    let start = std::time::Instant::now();
    loop {
        let leases: Vec<String> = redis::cmd("KEYS")
            .arg("pjrt-actors:lease:*")
            .query(&mut conn)
            .unwrap();
        if !leases.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no lease was taken"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    holder.kill().unwrap(); // SIGKILL: no release, no entry
    let _ = holder.wait();
    let entries: Vec<String> = redis::cmd("KEYS")
        .arg("pjrt-actors:exe:*")
        .query(&mut conn)
        .unwrap();
    assert!(entries.is_empty(), "the holder stored before it was killed");
    let next = run().wait_with_output().unwrap();
    assert!(next.status.success(), "{next:?}");
    let entries: Vec<String> = redis::cmd("KEYS")
        .arg("pjrt-actors:exe:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        entries.len(),
        1,
        "the next process compiled and stored the module"
    );
}

#[test]
fn bfloat16_and_float8_npy_files_in_ml_dtypes_form_round_trip_and_mismatches_are_refused() {
    let dir = scratch_dir("cli-bf16");
    // ml_dtypes saves bfloat16 as a 2-byte void: `{'descr': '<V2', ...}`.
    let bf16 = |v: &[f32]| HostArray {
        dtype: ElementType::BF16,
        dims: vec![v.len() as i64],
        bytes: v
            .iter()
            .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
    };
    let x = dir.join("x.npy");
    let written = write_npy(&bf16(&[1.5, -2.0, 3.0])).unwrap();
    assert!(String::from_utf8_lossy(&written[..64]).contains("'descr': '<V2'"));
    std::fs::write(&x, &written).unwrap();
    let program = |ty: &str| {
        module(
            &format!("double_{ty}"),
            &format!(
                "module @d {{\n  func.func public @main(%x: tensor<3x{ty}>) -> tensor<3x{ty}> {{\n    %0 = stablehlo.add %x, %x : tensor<3x{ty}>\n    return %0 : tensor<3x{ty}>\n  }}\n}}\n"
            ),
        )
    };
    // Runs the doubling program for element type `ty` on a .npy input, with a .npy output.
    let run_npy = |ty: &str, input: &std::path::Path, output: Option<&std::path::Path>| {
        let mut args = vec![
            "run".to_string(),
            program(ty),
            "--input".into(),
            format!("@{}", input.display()),
        ];
        if let Some(out) = output {
            args.extend(["--output".into(), format!("@{}", out.display())]);
        }
        cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let y = dir.join("y.npy");
    let o = run_npy("bf16", &x, Some(&y));
    assert!(o.status.success(), "{o:?}");
    let back = std::fs::read(&y).unwrap();
    assert!(
        String::from_utf8_lossy(&back[..64]).contains("'descr': '<V2'"),
        "bf16 results are written as ml_dtypes reads them"
    );
    assert_eq!(read_npy(&back).unwrap(), bf16(&[3.0, -4.0, 6.0]));
    // A 2-byte void into an f16 parameter: refused, saying why.
    let o = run_npy("f16", &x, None);
    assert!(
        !o.status.success() && error_line(&o).contains("<V2"),
        "{o:?}"
    );
    // ml_dtypes' float8 as NumPy saves it (ml_dtypes 0.6, NumPy 2.4): `<V1` for e4m3fn and
    // its other 8-bit types, whose program's parameter says which it is, and `<f1` for e5m2.
    let f8_npy = |descr: &str, bytes: &[u8]| {
        let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (3,), }}");
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        let padded = format!("{header:<117}\n");
        out.extend_from_slice(&(padded.len() as u16).to_le_bytes());
        out.extend_from_slice(padded.as_bytes());
        out.extend_from_slice(bytes);
        out
    };
    // [1.5, -2, 3] in float8_e5m2.
    let f8_path = dir.join("f8.npy");
    std::fs::write(&f8_path, f8_npy("<V1", &[0x3e, 0xc0, 0x42])).unwrap();
    let y8 = dir.join("y8.npy");
    let o = run_npy("f8E5M2", &f8_path, Some(&y8));
    assert!(o.status.success(), "{o:?}");
    let back = std::fs::read(&y8).unwrap();
    assert!(String::from_utf8_lossy(&back[..64]).contains("'descr': '|V1'"));
    // [3, -4, 6] in float8_e5m2.
    assert_eq!(&back[back.len() - 3..], [0x42, 0xc4, 0x46]);
    // The same bytes into an e4m3fn program are e4m3fn: [1.75, -2, 2.5], doubled.
    let o = run_npy("f8E4M3FN", &f8_path, Some(&y8));
    assert!(o.status.success(), "{o:?}");
    let back = std::fs::read(&y8).unwrap();
    assert_eq!(&back[back.len() - 3..], [0x46, 0xc8, 0x4a]);
    // A `<f1` file is e5m2 itself: it runs as e5m2, and is not retyped.
    let e5m2_path = dir.join("e5m2.npy");
    std::fs::write(&e5m2_path, f8_npy("<f1", &[0x3e, 0xc0, 0x42])).unwrap();
    let o = run_npy("f8E5M2", &e5m2_path, None);
    assert_eq!(stdout(&o).trim(), "result[0]: 3xf8e5m2=[3,-4,6]", "{o:?}");
    let o = run_npy("f8E4M3FN", &e5m2_path, None);
    assert!(
        !o.status.success() && error_line(&o).contains("is f8e5m2[3]"),
        "{o:?}"
    );
    // A 1-byte void is no other width's type.
    let o = run_npy("bf16", &f8_path, None);
    assert!(
        !o.status.success() && error_line(&o).contains("1-byte void"),
        "{o:?}"
    );
    // As text in and out: values, rounded to the type (0.3 is 0.3125 in e4m3fn).
    let o = cli(&[
        "run",
        &program("f8E4M3FN"),
        "--input",
        "3xf8e4m3fn=1.5,-2,0.3",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o).trim(), "result[0]: 3xf8e4m3fn=[3,-4,0.625]");
    // e4m3fn has no infinity, and 500 is past its largest value (448): refused.
    for bad in ["3xf8e4m3fn=inf", "3xf8e4m3fn=500"] {
        let o = cli(&["run", &program("f8E4M3FN"), "--input", bad]);
        assert!(
            !o.status.success() && error_line(&o).contains("f8e4m3fn"),
            "{o:?}"
        );
    }
}

#[test]
fn create_options_come_from_flags_and_the_environment_typed_before_the_plugin_sees_them() {
    // A GPU plugin's option: the 0.81 and 0.106 CPU plugins ignore it, the 0.115 one refuses it
    // by name.
    let o = cli(&[
        "--option",
        "cpu_device_count=2",
        "--option",
        "preallocate=false",
        "devices",
        "--json",
    ]);
    if common::strict_cpu_client() {
        assert!(error_line(&o).contains("preallocate"), "{o:?}");
    } else {
        assert!(o.status.success(), "{o:?}");
    }
    let o = cli(&["--option", "cpu_device_count=2", "devices", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["devices"].as_array().map(|d| d.len()), Some(2), "{v}");
    for (flag, words) in [
        ("preallocate=maybe", "not true or false"),
        ("memory_fraction=0", "must be in (0, 1]"),
        ("visible_devices=0,a", "not an integer"),
        ("no_such=1", "unknown option"),
        ("preallocate", "expected NAME=VALUE"),
    ] {
        let o = cli(&["--option", flag, "devices"]);
        assert!(
            !o.status.success() && error_line(&o).contains(words),
            "{flag}: {o:?}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .arg("devices")
        .env("XLA_PYTHON_CLIENT_MEM_FRACTION", "7")
        .output()
        .unwrap();
    assert!(
        !o.status.success() && error_line(&o).contains("XLA_PYTHON_CLIENT_MEM_FRACTION"),
        "{o:?}"
    );
}
