//! The command line under the red team's inputs (issue 22): a cache entry from a compile
//! worker that later processes run, compile time limits, cache commands that touch only what
//! is theirs, and flag values refused with a message that says what would be right.

mod common;

use common::error_line;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cli_in(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"));
    command.current_dir(dir).args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

/// A fresh directory for one test's files.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pjrt-actors-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The issue's own reproduction: `a + a`.
const ADD_SELF: &str = "func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n %0 = stablehlo.add %a, %a : tensor<4xf32>\n return %0 : tensor<4xf32>\n}\n";

/// The worker cargo built beside the CLI: the CLI's default is to compile in it.
fn worker_beside_the_cli() -> bool {
    Path::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .with_file_name("pjrt-actors-compile-worker")
        .is_file()
}

#[test]
fn a_cached_executable_from_the_worker_runs_in_every_later_process() {
    assert!(
        worker_beside_the_cli(),
        "cargo builds the compile worker beside the CLI (the CLI's default compile path)"
    );
    let dir = scratch_dir("cli-worker-cache");
    std::fs::write(dir.join("add.mlir"), ADD_SELF).unwrap();
    let env = [("PJRT_ACTORS_CACHE_DIR", "c")];
    for process in 0..3 {
        let o = cli_in(&dir, &env, &["run", "add.mlir", "--input", "4xf32=1,2,3,4"]);
        assert!(o.status.success(), "process {process}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("4xf32=[2,4,6,8]"),
            "process {process}: {}",
            text(&o.stdout)
        );
    }
    // What the later processes ran came from the cache: there is one entry, and stats see it.
    let o = cli_in(&dir, &[], &["cache", "stats", "--dir", "c"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("disk: 1 entries"),
        "{}",
        text(&o.stdout)
    );
}

/// A worker that never answers: it reads nothing and sleeps.
fn silent_worker(dir: &Path) -> PathBuf {
    let script = dir.join("silent-worker");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 1000\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    script
}

#[test]
fn flag_values_out_of_range_say_what_is_wrong_and_what_would_be_right() {
    let dir = scratch_dir("cli-flag-values");
    std::fs::write(dir.join("add.mlir"), ADD_SELF).unwrap();
    let run = ["run", "add.mlir", "--input", "4xf32=1"];
    let cases: [(&[&str], &str); 6] = [
        (&["--timeout", "1e-12"], "below the 1 ms"),
        (&["--timeout", "1e300"], "over a year"),
        (
            &["--option", "allocator=bogus"],
            "one of: default, platform, bfc, cuda_async",
        ),
        // Checked against the devices the plugin made; the 0.115 CPU plugin refuses the
        // option itself, by name (the 0.106 and 0.81 ones ignore it, so we check it).
        (
            &["--option", "visible_devices=99"],
            if common::strict_cpu_client() {
                "Unexpected option name passed to PJRT_Client_Create: visible_devices"
            } else {
                "no device 99; its devices are 0"
            },
        ),
        (&["--option", "num_nodes=0"], "at least 1 node"),
        (&["--option", "visible_devices=0,0"], "named twice"),
    ];
    for (flags, words) in cases {
        // Global flags (--option) go before the command, run's own after.
        let args: Vec<&str> = if flags[0] == "--option" {
            flags.iter().copied().chain(run).collect()
        } else {
            run.iter().copied().chain(flags.iter().copied()).collect()
        };
        let o = cli_in(&dir, &[], &args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let line = error_line(&o);
        assert!(line.contains(words), "{args:?}: {line}");
    }
}

#[test]
fn a_worker_memory_limit_of_0_is_none_and_one_too_small_is_said_so() {
    let dir = scratch_dir("cli-worker-memory");
    std::fs::write(dir.join("add.mlir"), ADD_SELF).unwrap();
    let run = ["run", "add.mlir", "--input", "4xf32=1"];
    // 0 means no limit, as the README says (the variable refused it).
    let o = cli_in(&dir, &[("PJRT_ACTORS_COMPILE_WORKER_MEMORY", "0")], &run);
    assert!(o.status.success(), "{}", text(&o.stderr));
    if worker_beside_the_cli() {
        // Below what the plugin maps: the worker cannot start, and no program is blamed.
        let o = cli_in(&dir, &[("PJRT_ACTORS_COMPILE_WORKER_MEMORY", "100M")], &run);
        let line = error_line(&o);
        assert!(
            line.contains("the compile worker could not start")
                && line.contains("limited to 104857600 bytes")
                && !line.contains("this program"),
            "{line}"
        );
        // Enough to start, too little to compile: the crash names the limit and what to do
        // (it read as the program's crash, "exited with status 127"), and the error line
        // names no source location (`(in cli/src/run.rs:228)` is for -v).
        let o = cli_in(&dir, &[("PJRT_ACTORS_COMPILE_WORKER_MEMORY", "1G")], &run);
        if !o.status.success() {
            let line = error_line(&o);
            assert!(
                line.contains("under an address-space limit of 1073741824 bytes")
                    && line.contains("PJRT_ACTORS_COMPILE_WORKER_MEMORY"),
                "{line}"
            );
            assert!(!line.contains("(in "), "{line}");
            let verbose = cli_in(
                &dir,
                &[("PJRT_ACTORS_COMPILE_WORKER_MEMORY", "1G")],
                &["-v", "run", "add.mlir", "--input", "4xf32=1"],
            );
            assert!(error_line(&verbose).contains("(in cli/src/run.rs"));
        }
    }
}

#[test]
fn a_relative_worker_path_is_found_where_it_was_checked() {
    // No slash: a command would look it up on PATH, not where the file check found it.
    let dir = scratch_dir("cli-relative-worker");
    std::fs::write(dir.join("add.mlir"), ADD_SELF).unwrap();
    let built =
        Path::new(env!("CARGO_BIN_EXE_pjrt-actors")).with_file_name("pjrt-actors-compile-worker");
    std::fs::copy(&built, dir.join("my-worker")).unwrap();
    let o = cli_in(
        &dir,
        &[("PJRT_ACTORS_COMPILE_WORKER", "my-worker")],
        &["run", "add.mlir", "--input", "4xf32=1,2,3,4"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("4xf32=[2,4,6,8]"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn run_timeout_bounds_a_compile_that_never_ends() {
    let dir = scratch_dir("cli-compile-timeout");
    std::fs::write(dir.join("add.mlir"), ADD_SELF).unwrap();
    let worker = silent_worker(&dir);
    let worker = worker.to_str().unwrap();
    let start = std::time::Instant::now();
    let o = cli_in(
        &dir,
        &[("PJRT_ACTORS_COMPILE_WORKER", worker)],
        &["run", "add.mlir", "--input", "4xf32=1", "--timeout", "2"],
    );
    let took = start.elapsed();
    assert!(!o.status.success());
    let line = error_line(&o);
    assert!(
        line.contains("did not finish within 2s") && line.contains("compiling"),
        "{line}"
    );
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
    // Without --timeout, the compile's own limit answers.
    let o = cli_in(
        &dir,
        &[
            ("PJRT_ACTORS_COMPILE_WORKER", worker),
            ("PJRT_ACTORS_COMPILE_TIMEOUT", "1"),
        ],
        &["run", "add.mlir", "--input", "4xf32=1"],
    );
    let line = error_line(&o);
    assert!(
        line.contains("a compile in a worker process") && line.contains("1s"),
        "{line}"
    );
    // A bad limit in the environment is refused, not ignored.
    let o = cli_in(
        &dir,
        &[("PJRT_ACTORS_COMPILE_TIMEOUT", "soon")],
        &["run", "add.mlir", "--input", "4xf32=1"],
    );
    let line = error_line(&o);
    assert!(
        line.contains("PJRT_ACTORS_COMPILE_TIMEOUT") && line.contains("not a number"),
        "{line}"
    );
}

#[test]
fn cache_commands_touch_only_what_is_theirs_and_never_create() {
    let dir = scratch_dir("cli-cache-commands");
    std::fs::write(dir.join("add.mlir"), ADD_SELF).unwrap();
    // An entry of ours, and a user's file that happens to end in .pjx.
    let o = cli_in(
        &dir,
        &[("PJRT_ACTORS_CACHE_DIR", "c")],
        &["run", "add.mlir", "--input", "4xf32=1"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::write(dir.join("c/notes.pjx"), "my own file").unwrap();
    let o = cli_in(&dir, &[], &["cache", "stats", "--dir", "c"]);
    assert!(
        text(&o.stdout).contains("disk: 1 entries"),
        "{}",
        text(&o.stdout)
    );
    let o = cli_in(&dir, &[], &["cache", "clear", "--dir", "c"]);
    assert!(
        text(&o.stdout).contains("disk: 1 entries removed"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("c/notes.pjx")).unwrap(),
        "my own file"
    );
    // Stats and clear of a directory that is not there say so, and create nothing.
    for action in ["stats", "clear"] {
        let o = cli_in(&dir, &[], &["cache", action, "--dir", "new/a/b"]);
        assert!(!o.status.success(), "{action}");
        assert!(
            error_line(&o).contains("no cache directory there"),
            "{action}"
        );
        assert!(!dir.join("new").exists(), "{action} created directories");
    }
}
