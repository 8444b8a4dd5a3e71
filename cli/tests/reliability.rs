//! The command line under the red team's inputs (issue 22): a cache entry from a compile
//! worker that later processes run, compile time limits, cache commands that touch only what
//! is theirs, and flag values refused with a message that says what would be right.

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
