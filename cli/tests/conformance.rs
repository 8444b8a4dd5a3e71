//! `pjrt-actors conformance` on the plugin under test: the built-in cases (StableHLO's test data
//! and ours) run whole, the atan cases fail exactly where the known-defect table says, the table
//! lines it writes are the shipped ones, and a case that aborts or hangs its child is reported
//! while the run goes on.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

/// The cases that fail on scripts/bootstrap's default plugin (its atan), none elsewhere.
const ATAN_FAILS_ON_DEFAULT: [&str; 5] = [
    "atan2_by_one_float32_400",
    "atan2_by_one_float64_400",
    "atan_float32_400_chlo",
    "atan_float64_20_20_chlo",
    "atan_float64_400_chlo",
];
const DEFAULT_PLUGIN_SHA256: &str =
    "ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2";

fn conformance(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .arg("conformance")
        .args(args)
        .output()
        .unwrap()
}

fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Whether the plugin in use is the default build the table names, by its file's sha256.
fn on_default_build(report: &Value) -> bool {
    let path = report["plugin"].as_str().unwrap();
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout).starts_with(DEFAULT_PLUGIN_SHA256)
}

#[test]
fn the_built_in_cases_run_whole_and_atan_fails_where_the_table_says() {
    let report = json_of(&conformance(&["--json"]));
    let cases = report["cases"].as_array().unwrap();
    let builtin =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/stablehlo"))
            .unwrap()
            .chain(
                std::fs::read_dir(
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/pjrt-actors"),
                )
                .unwrap(),
            )
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "mlir")
            })
            .count();
    assert_eq!(cases.len(), builtin);
    let default = on_default_build(&report);
    let mut not_passed = Vec::new();
    for case in cases {
        let (name, status) = (
            case["name"].as_str().unwrap(),
            case["status"].as_str().unwrap(),
        );
        // Every case ran to an answer: none unreadable, none ended its child, none hung.
        assert!(
            matches!(status, "pass" | "fail" | "compile_error"),
            "{case}"
        );
        if ATAN_FAILS_ON_DEFAULT.contains(&name) {
            let want = if default { "fail" } else { "pass" };
            assert_eq!(status, want, "{case}");
        }
        if status != "pass" {
            not_passed.push(format!("{name}: {}", case["detail"]));
        }
    }
    // Beyond atan, a plugin misses StableHLO's tolerance on a few cases by a few ULP (sinh on
    // f64 by 4, a triangular solve by 5-9) and the 0.81 one cannot parse one i1 constant.
    assert!(not_passed.len() <= 8, "{not_passed:#?}");
    let summary = &report["summary"];
    let total: u64 = [
        "pass",
        "fail",
        "compile_error",
        "unsupported",
        "aborted",
        "timeout",
        "error",
    ]
    .iter()
    .map(|s| summary[s].as_u64().unwrap())
    .sum();
    assert_eq!(total as usize, cases.len());
}

#[test]
fn the_table_and_filters_name_ops_and_dtypes() {
    let o = conformance(&["--ops", "atan", "--dtypes", "float64,float32"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines().next().unwrap().starts_with("plugin "),
        "{text}"
    );
    assert!(
        text.contains("atan (chlo)                  float64            2"),
        "{text}"
    );
    assert!(
        text.contains("atan (chlo)                  float32            2"),
        "{text}"
    );
    assert!(
        text.contains("summary: 4 cases, 2 op/dtype pairs"),
        "{text}"
    );
    // A caller's own --allow-known-defects reaches the child once (a flag twice is refused).
    let allowed = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args([
            "--allow-known-defects",
            "conformance",
            "--ops",
            "atan",
            "--dtypes",
            "float64",
        ])
        .output()
        .unwrap();
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("summary: 2 cases"));
    let none = conformance(&["--ops", "no_such_op"]);
    assert!(!none.status.success());
    assert!(common::error_line(&none).contains("no case matches"));
}

#[test]
fn the_defect_lines_it_writes_are_the_shipped_tables() {
    let dir = scratch("write-defects");
    let file = dir.join("defects.tsv");
    let report = json_of(&conformance(&[
        "--ops",
        "atan,atan2_by_one",
        "--json",
        "--write-defects",
        file.to_str().unwrap(),
    ]));
    let written = std::fs::read_to_string(&file).unwrap_or_default();
    let key = |l: &str| l.split('\t').take(6).collect::<Vec<_>>().join("\t");
    let mut written: Vec<String> = written.lines().map(key).collect();
    written.sort();
    if on_default_build(&report) {
        let shipped = include_str!("../../actors/src/compile/known_defects.tsv");
        let mut shipped: Vec<String> = (shipped.lines())
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(key)
            .collect();
        shipped.sort();
        assert_eq!(written, shipped);
    } else {
        assert!(written.is_empty(), "{written:?}");
    }
    // Written again, nothing is added twice.
    let before = std::fs::read_to_string(&file).unwrap_or_default();
    json_of(&conformance(&[
        "--ops",
        "atan,atan2_by_one",
        "--json",
        "--write-defects",
        file.to_str().unwrap(),
    ]));
    assert_eq!(std::fs::read_to_string(&file).unwrap_or_default(), before);
}

/// With the table's fixes applied (as every compile applies them), every atan and atan2 case,
/// StableHLO's and our own, passes on every plugin: on the default build only because of them
/// (the test above sees the same cases fail there as written).
#[test]
fn with_the_fixes_every_atan_case_passes_on_every_plugin() {
    let report = json_of(&conformance(&[
        "--ops",
        "atan,atan2,atan2_by_one",
        "--with-fixes",
        "--json",
    ]));
    let statuses = statuses(&report);
    let names: Vec<&str> = statuses.iter().map(|(n, _, _)| n.as_str()).collect();
    for own in [
        "atan2_by_one_float32_400",
        "atan2_by_one_float64_400",
        "atan2_float32_400_float32_400",
        "atan2_float64_400_float64_400",
        "atan_float32_400_chlo",
        "atan_float64_400_chlo",
        "atan_float64_20_20_chlo",
    ] {
        assert!(names.contains(&own), "{own} not run: {names:?}");
    }
    for (name, status, detail) in &statuses {
        assert_eq!(status, "pass", "{name}: {detail}");
    }
}

/// `--write-defects` checks its file before the run and never replaces what it cannot read:
/// a file that is not UTF-8 is left byte for byte, a FIFO is refused instead of blocking, a
/// folder is refused before any case runs.
#[test]
fn write_defects_refuses_what_it_cannot_read_before_the_run() {
    let dir = scratch("write-defects-refusals");
    let latin1 = dir.join("latin1.tsv");
    let bytes = b"# caf\xe9 comment\nline one\n".to_vec();
    std::fs::write(&latin1, &bytes).unwrap();
    let fifo = dir.join("fifo.tsv");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let folder = dir.join("folder.tsv");
    std::fs::create_dir(&folder).unwrap();
    for (path, why) in [
        (&latin1, "not UTF-8"),
        (&fifo, "not a regular file"),
        (&folder, "not a regular file"),
    ] {
        let started = std::time::Instant::now();
        let o = conformance(&[
            "--ops",
            "atan",
            "--dtypes",
            "float64",
            "--write-defects",
            path.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{path:?}");
        assert!(
            common::error_line(&o).contains(why),
            "{path:?}: {}",
            common::error_line(&o)
        );
        // Refused before any case ran: no table printed.
        assert!(o.stdout.is_empty(), "{path:?}");
        assert!(started.elapsed() < Duration::from_secs(20), "{path:?}");
    }
    assert_eq!(std::fs::read(&latin1).unwrap(), bytes);
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "pjrt-actors-conformance-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A case that never ends: a loop whose step adds its input (zero), so XLA cannot fold it.
const ENDLESS: &str = r#"module @jit_main {
  func.func public @main() -> (tensor<i64>) {
    %0 = call @inputs() : () -> tensor<i64>
    %1 = call @expected() : () -> tensor<i64>
    %2 = stablehlo.while(%iterArg = %0) : tensor<i64>
    cond {
      %c = stablehlo.constant dense<0> : tensor<i64>
      %3 = stablehlo.compare  GE, %iterArg, %c,  SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    } do {
      %3 = stablehlo.add %iterArg, %0 : tensor<i64>
      stablehlo.return %3 : tensor<i64>
    }
    stablehlo.custom_call @check.expect_eq(%2, %1) {has_side_effect = true} : (tensor<i64>, tensor<i64>) -> ()
    return %2 : tensor<i64>
  }
  func.func private @inputs() -> (tensor<i64>) {
    %c = stablehlo.constant dense<0> : tensor<i64>
    return %c : tensor<i64>
  }
  func.func private @expected() -> (tensor<i64>) {
    %c = stablehlo.constant dense<0> : tensor<i64>
    return %c : tensor<i64>
  }
}
"#;

/// A suite of the endless case and one of StableHLO's, in that order.
fn endless_suite(name: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::write(dir.join("a_endless_int64.mlir"), ENDLESS).unwrap();
    let abs =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/stablehlo/abs_int32_20_20.mlir");
    std::fs::copy(abs, dir.join("abs_int32_20_20.mlir")).unwrap();
    dir
}

fn statuses(report: &Value) -> Vec<(String, String, String)> {
    (report["cases"].as_array().unwrap().iter())
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            (s("name"), s("status"), s("detail"))
        })
        .collect()
}

#[test]
fn a_case_past_its_time_is_killed_and_the_run_goes_on() {
    let dir = endless_suite("timeout");
    let report = json_of(&conformance(&[
        "--suite",
        dir.to_str().unwrap(),
        "--case-timeout",
        "5",
        "--json",
    ]));
    let s = statuses(&report);
    assert_eq!(
        (s[0].0.as_str(), s[0].1.as_str()),
        ("a_endless_int64", "timeout"),
        "{s:?}"
    );
    assert_eq!(
        (s[1].0.as_str(), s[1].1.as_str()),
        ("abs_int32_20_20", "pass"),
        "{s:?}"
    );
}

#[test]
fn a_case_that_aborts_its_child_is_reported_and_the_run_goes_on() {
    let dir = endless_suite("abort");
    let run = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .args(["conformance", "--suite", dir.to_str().unwrap(), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The child running the endless case ends as a plugin's abort() would end it: SIGABRT.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let child = loop {
        if let Some(pid) = child_of(run.id()) {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "no conformance child");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Killed once it spins in the endless loop: most of a second of CPU within a second.
    let cpu = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks = |k: usize| f.get(k).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        ticks(11) + ticks(12)
    };
    loop {
        let before = cpu(child);
        std::thread::sleep(Duration::from_secs(1));
        if cpu(child) - before >= 70 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the child never spun");
    }
    assert!(
        Command::new("kill")
            .args(["-ABRT", &child.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let report = json_of(&run.wait_with_output().unwrap());
    let s = statuses(&report);
    assert_eq!(
        (s[0].0.as_str(), s[0].1.as_str()),
        ("a_endless_int64", "aborted"),
        "{s:?}"
    );
    assert!(
        s[0].2.contains("SIGABRT") || s[0].2.contains("signal: 6"),
        "{s:?}"
    );
    assert_eq!(
        (s[1].0.as_str(), s[1].1.as_str()),
        ("abs_int32_20_20", "pass"),
        "{s:?}"
    );
}

/// The pid of `parent`'s conformance child (its command line holds `--child-from`).
fn child_of(parent: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(&parent.to_string())
            && String::from_utf8_lossy(&cmdline).contains("--child-from")
        {
            return Some(pid);
        }
    }
    None
}
