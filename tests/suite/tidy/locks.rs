//! Checks on where the core's mechanisms live: every mutex and reader-writer lock in the core
//! is a ranked type (`RankedMutex`, `RankedRwLock`, a named leaf at least), and the public
//! crate compiles only through the core's one compile flow (`compile::flow`).

use super::{is_ident, rust_files, workspace};

/// The raw locks `code` names, outside comments: `Mutex` and `RwLock` as whole words (a
/// `RankedMutex` is not one).
fn raw_locks(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or("");
        for word in line.split(|c: char| !is_ident(c)) {
            if word == "Mutex" || word == "RwLock" {
                out.push(format!("line {}: {}", n + 1, line.trim()));
            }
        }
    }
    out
}

#[test]
fn every_lock_in_the_core_is_ranked() {
    let mut files = Vec::new();
    rust_files(&workspace().join("actors/src"), &mut files);
    let problems: Vec<String> = (files.iter())
        .filter(|f| !f.ends_with("lock_rank.rs"))
        .flat_map(|f| {
            let code = std::fs::read_to_string(f).unwrap();
            let name = f.strip_prefix(workspace()).unwrap().display().to_string();
            (raw_locks(&code).into_iter()).map(move |p| format!("{name} {p}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "raw locks in the core (use a RankedMutex or RankedRwLock with its rank, or a named leaf of lock_rank.rs): {problems:?}"
    );
    // The check sees what it is for.
    let bad = "use parking_lot::Mutex;\nstatic A: std::sync::RwLock<u8> = todo!();\nlet m = RankedMutex::new(R, 0); // a Mutex in prose";
    assert_eq!(raw_locks(bad).len(), 2, "{:?}", raw_locks(bad));
}

/// The steps of the compile flow `code` takes itself instead of calling the core's
/// `compile::flow`: option resolution, keys, the checks, the permit, the submit.
fn compile_steps_outside_the_flow(code: &str) -> Vec<&'static str> {
    const STEPS: &[&str] = &[
        "for_program(",
        "fix_known_defects(",
        "check_known_defects(",
        "check_program_for(",
        "compile_key_allowing(",
        "acquire_compile_slot(",
        "CompileSpec",
        "compile_service().submit(",
        "spmd::read(",
    ];
    let code: String = (code.lines())
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    STEPS.iter().copied().filter(|s| code.contains(s)).collect()
}

#[test]
fn the_public_crate_compiles_only_through_the_cores_one_flow() {
    let mut files = Vec::new();
    rust_files(&workspace().join("src"), &mut files);
    let problems: Vec<String> = (files.iter())
        .flat_map(|f| {
            let code = std::fs::read_to_string(f).unwrap();
            let name = f.strip_prefix(workspace()).unwrap().display().to_string();
            (compile_steps_outside_the_flow(&code).into_iter()).map(move |s| format!("{name}: {s}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "compile steps taken outside actors/src/compile/flow.rs: {problems:?}"
    );
    // The check sees what it is for.
    let bad = "let o = options.for_program(&spmd::read(p))?; // for_program( in prose\nstate.check_known_defects(p, false)?;";
    assert_eq!(
        compile_steps_outside_the_flow(bad),
        ["for_program(", "check_known_defects(", "spmd::read("]
    );
}

/// The names of the `[dependencies]` table of a manifest.
pub(super) fn dependencies(manifest: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        let name: String = (line.chars())
            .take_while(|c| is_ident(*c) || *c == '-')
            .collect();
        if inside && !name.is_empty() {
            out.push(name);
        }
    }
    out
}

#[test]
fn the_public_api_names_no_pjrt_sys_type() {
    // The public crate cannot name pjrt-sys at all: it is no dependency of it.
    let root = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let deps = dependencies(&root);
    assert!(deps.contains(&"pjrt-actors-core".to_string()), "{deps:?}");
    assert!(!deps.contains(&"pjrt-sys".to_string()), "{deps:?}");
    // Nor can it get a pjrt-sys type through the core's or the fence's re-exports (XLA's
    // messages come from the format crate).
    for lib in ["actors/src/lib.rs", "fence/src/lib.rs", "src/lib.rs"] {
        let code = std::fs::read_to_string(workspace().join(lib)).unwrap();
        let leaks: Vec<&str> = (code.lines())
            .filter(|l| l.trim_start().starts_with("pub use") && l.contains("pjrt_sys"))
            .collect();
        assert!(leaks.is_empty(), "{lib} re-exports pjrt-sys: {leaks:?}");
    }
    let bad = "[dependencies]\npjrt-sys.workspace = true\n[dev-dependencies]\nserde = \"1\"";
    assert_eq!(dependencies(bad), ["pjrt-sys"]);
}
