//! The lock check: every mutex and reader-writer lock in the core is a ranked type
//! (`RankedMutex`, `RankedRwLock`, with a rank of lock_rank.rs, a named leaf at least), so no
//! lock is taken unchecked.

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
