//! Checks on the source tree itself, the rules ARCHITECTURE.md names: no module imports one that
//! imports it back, `unsafe` is forbidden outside the fence, no file grows past about 500 lines
//! without a reason written down here, and suite tests that need the CPU plugin say so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates and their source roots, relative to the workspace.
const CRATES: &[&str] = &["fence/src", "actors/src", "src", "cli/src"];

/// Files allowed past the line limit, and why.
const LONG_FILES: &[(&str, &str)] = &[
    (
        "tests/suite/reliability.rs",
        "one case table of every bad input, kept whole so it reads as a list",
    ),
    (
        "fence/src/client.rs",
        "the client, device, memory and topology owners: one PJRT object family",
    ),
    (
        "fence/src/executable.rs",
        "one PJRT object: compile, metadata, parameter types and execute of a loaded executable",
    ),
    (
        "actors/src/callbacks.rs",
        "the callback type, its two program-text builders and the id reader, which must agree",
    ),
    (
        "tests/suite/callbacks.rs",
        "every host-callback behaviour against the real plugin, sharing its helpers",
    ),
    (
        "tests/suite/executables.rs",
        "compile, cache, serialize and load behaviour against the real plugin, sharing its module generators",
    ),
    (
        "tests/suite/serving.rs",
        "every batcher behaviour against the real plugin, sharing one model and its helpers",
    ),
];

const LINE_LIMIT: usize = 500;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `actors/client.rs` → `actors::client`; `actors/mod.rs` → `actors`; the crate root → "".
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// What the cycle check knows of one crate: its modules, and the names its root file defines
/// itself (a `crate::Name` of one of those is an edge to the root; a re-export there is not).
struct CrateMap {
    modules: BTreeSet<String>,
    root_items: BTreeSet<String>,
}

impl CrateMap {
    fn new(modules: BTreeSet<String>, root_code: &str) -> Self {
        const KINDS: &[&str] = &[
            "fn ",
            "struct ",
            "enum ",
            "const ",
            "static ",
            "trait ",
            "type ",
            "union ",
            "macro_rules! ",
        ];
        let root_items = (root_code.lines())
            .filter_map(|line| {
                let decl = ["pub(crate) ", "pub "]
                    .iter()
                    .find_map(|p| line.strip_prefix(p))
                    .unwrap_or(line);
                let rest = KINDS.iter().find_map(|k| decl.strip_prefix(k))?;
                let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
                (!name.is_empty()).then_some(name)
            })
            .collect();
        CrateMap {
            modules,
            root_items,
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a use tree at the start of `text` names: `a::b::{c, d::{e, self}}` names
/// `a::b::c`, `a::b::d::e` and `a::b::d`; a plain path names itself.
fn use_paths(text: &str) -> Vec<Vec<String>> {
    let mut head: Vec<String> = Vec::new();
    let mut rest = text;
    loop {
        let segment: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if segment.is_empty() {
            break;
        }
        rest = &rest[segment.len()..];
        if segment != "self" {
            head.push(segment);
        }
        match rest.strip_prefix("::") {
            Some(after) => rest = after.trim_start(),
            None => return vec![head],
        }
    }
    let Some(group) = rest.strip_prefix('{') else {
        return vec![head];
    };
    // The group's entries, split at commas outside nested braces.
    let (mut depth, mut entry_start, mut paths) = (0usize, 0usize, Vec::new());
    for (i, c) in group.char_indices() {
        let end = match c {
            '{' => {
                depth += 1;
                false
            }
            '}' if depth == 0 => true,
            '}' => {
                depth -= 1;
                false
            }
            ',' => depth == 0,
            _ => false,
        };
        if end {
            for tail in use_paths(group[entry_start..i].trim()) {
                paths.push(head.iter().cloned().chain(tail).collect());
            }
            entry_start = i + 1;
            if c == '}' {
                break;
            }
        }
    }
    paths
}

/// The modules `code` (of `module`) names: through `crate::` or `super::` paths and groups
/// (the longest module that exists; a name the crate root defines is the root), and for the
/// root itself, through the paths that start at one of its child modules.
fn imports(module: &str, code: &str, krate: &CrateMap) -> BTreeSet<String> {
    let parent: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    // Line comments out, so a mention in prose is no import.
    let code: String = (code.lines())
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut prefixes: Vec<(String, Vec<&str>)> = vec![
        ("crate::".into(), Vec::new()),
        (
            "super::".into(),
            parent[..parent.len().saturating_sub(1)].to_vec(),
        ),
    ];
    if module.is_empty() {
        // The root reaches its children by their bare names (`run::run(…)`, `pub use x::Y`).
        let children = (krate.modules.iter()).filter(|m| !m.is_empty() && !m.contains("::"));
        prefixes.extend(children.map(|m| (format!("{m}::"), vec![m.as_str()])));
    }
    let mut out = BTreeSet::new();
    for (prefix, base) in &prefixes {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(prefix.as_str()) {
            let preceded_by_ident =
                (rest[..at].chars().last()).is_some_and(|c| is_ident(c) || c == ':');
            rest = &rest[at + prefix.len()..];
            if preceded_by_ident {
                continue;
            }
            for path in use_paths(rest) {
                let mut full: Vec<&str> = base.clone();
                full.extend(path.iter().map(String::as_str));
                let first = full.first().copied();
                while !full.is_empty() {
                    let candidate = full.join("::");
                    if krate.modules.contains(&candidate) {
                        if candidate != module {
                            out.insert(candidate);
                        }
                        break;
                    }
                    full.pop();
                }
                let root_item = first.is_some_and(|n| krate.root_items.contains(n));
                if full.is_empty() && root_item && !module.is_empty() {
                    out.insert(String::new());
                }
            }
        }
    }
    out
}

/// Every cycle's modules, as strongly connected components of more than one module.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability by repeated search: the graphs are a few dozen modules.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, r) in &reachable {
        let component: Vec<String> = r
            .iter()
            .filter(|other| reachable.get(other).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        if component.len() > 1 {
            found.insert(component);
        }
    }
    found.into_iter().collect()
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut problems = Vec::new();
    for name in CRATES {
        let root = workspace().join(name);
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        let modules: BTreeSet<String> = files.iter().map(|f| module_of(&root, f)).collect();
        let root_file = ["lib.rs", "main.rs"].map(|f| root.join(f));
        let root_code = (root_file.iter())
            .find_map(|f| std::fs::read_to_string(f).ok())
            .unwrap_or_default();
        let krate = CrateMap::new(modules, &root_code);
        let graph: BTreeMap<String, BTreeSet<String>> = files
            .iter()
            .map(|f| {
                let module = module_of(&root, f);
                let code = std::fs::read_to_string(f).unwrap();
                let edges = imports(&module, &code, &krate);
                (module, edges)
            })
            .collect();
        for cycle in cycles(&graph) {
            let names: Vec<&str> = (cycle.iter())
                .map(|m| if m.is_empty() { "(crate root)" } else { m })
                .collect();
            problems.push(format!("{name}: {}", names.join(" <-> ")));
        }
    }
    assert!(
        problems.is_empty(),
        "import cycles:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d::e", "d", "f", "g", ""]
        .map(String::from)
        .into();
    let root = "mod a;\npub fn shared() {}\npub use a::Thing;\nfn main() { f::run(); }";
    let krate = CrateMap::new(modules, root);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", "use crate::b::Thing;"),
        ("b", "fn f() { crate::c::g() }"),
        ("c", "use crate::{\n    a,\n    d::{self, e::X},\n};"),
        (
            "d",
            "// crate::a is only mentioned in a comment\nuse crate::Thing;",
        ),
        (
            "d::e",
            "use super::a; // resolves to crate::d::a, which does not exist",
        ),
        ("f", "use crate::shared;"),
        ("g", "use super::{shared, a::Y};"),
        ("", root),
    ]
    .into_iter()
    .map(|(m, code)| (m.to_string(), imports(m, code, &krate)))
    .collect();
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(graph["a"], set(&["b"]));
    // A group, nested, over lines; `self` names the group's own module.
    assert_eq!(graph["c"], set(&["a", "d", "d::e"]));
    // A comment names nothing; a re-export of the root is not the root.
    assert!(graph["d"].is_empty());
    assert_eq!(graph["d::e"], set(&["d"]));
    // A name the root defines is the root, by `crate::` or a top module's `super::`.
    assert_eq!(graph["f"], set(&[""]));
    assert_eq!(graph["g"], set(&["", "a"]));
    // The root reaches its children by bare paths.
    assert_eq!(graph[""], set(&["a", "f"]));
    assert_eq!(cycles(&graph), vec![vec!["", "f"], vec!["a", "b", "c"]]);
}

#[test]
fn unsafe_code_is_forbidden_outside_the_fence() {
    for krate in ["actors/src/lib.rs", "src/lib.rs", "cli/src/main.rs"] {
        let root = std::fs::read_to_string(workspace().join(krate)).unwrap();
        assert!(
            root.contains("#![forbid(unsafe_code)]"),
            "{krate} must forbid unsafe code"
        );
    }
}

#[test]
fn no_file_grows_past_the_limit_without_a_reason() {
    let mut files = Vec::new();
    for dir in CRATES
        .iter()
        .copied()
        .chain(["tests", "benches", "examples"])
    {
        rust_files(&workspace().join(dir), &mut files);
    }
    let mut over = Vec::new();
    for f in files {
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        let rel = f
            .strip_prefix(workspace())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if lines > LINE_LIMIT && !LONG_FILES.iter().any(|(p, _)| *p == rel) {
            over.push(format!("{rel}: {lines} lines"));
        }
    }
    assert!(
        over.is_empty(),
        "files over {LINE_LIMIT} lines with no reason given:\n{}",
        over.join("\n")
    );
}

/// Every `module::test` ARCHITECTURE.md names as what enforces an invariant.
fn named_tests(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    for token in doc.split('`').skip(1).step_by(2) {
        let parts: Vec<&str> = token.split("::").collect();
        let is_path = parts.len() >= 2
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            });
        // Test names are sentences: at least three words.
        if is_path && parts.last().unwrap().matches('_').count() >= 2 {
            out.push(token.to_string());
        }
    }
    out
}

#[test]
fn every_test_the_architecture_names_exists() {
    let doc = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let mut sources = String::new();
    let mut files = Vec::new();
    for dir in ["tests", "actors", "fence/src", "src", "cli"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    for f in files {
        sources.push_str(&std::fs::read_to_string(f).unwrap());
    }
    let named = named_tests(&doc);
    assert!(
        named.len() >= 15,
        "only {} tests named: {named:?}",
        named.len()
    );
    let missing: Vec<&String> = named
        .iter()
        .filter(|t| !sources.contains(&format!("fn {}(", t.rsplit("::").next().unwrap())))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names tests that do not exist: {missing:?}"
    );
}

/// Lines (1-based) of `code` that open a client with a CPU device count outside a
/// `mod cpu_plugin` block. Other plugins refuse `cpu_device_count` at create, so a test that
/// needs one is about the CPU plugin, and the GPU check skips `cpu_plugin` modules by name.
/// Counts the library refuses before any plugin sees them (0, or past 2,048) may go anywhere.
fn cpu_sized_opens_outside_cpu_plugin(code: &str) -> Vec<usize> {
    let mut depth_at_entry = None;
    let mut depth = 0i64;
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        if depth_at_entry.is_none() && line.trim_start().starts_with("mod cpu_plugin {") {
            depth_at_entry = Some(depth);
        }
        for (at, _) in line.match_indices("cpu_device_count(") {
            let arg: String = line[at + "cpu_device_count(".len()..]
                .chars()
                .take_while(|c| *c != ')')
                .collect();
            let refused = arg
                .trim()
                .parse::<i64>()
                .is_ok_and(|n| !(1..=2048).contains(&n));
            if !refused && depth_at_entry.is_none() {
                out.push(i + 1);
            }
        }
        depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
        if depth_at_entry.is_some_and(|d| depth <= d) {
            depth_at_entry = None;
        }
    }
    out
}

#[test]
fn the_cpu_plugin_check_sees_opens_outside_its_modules() {
    let cases: &[(&str, &[usize])] = &[
        (
            "let c = Client::builder().cpu_device_count(2).open();",
            &[1],
        ),
        (
            "let c = Client::builder().cpu_device_count(n).open();",
            &[1],
        ),
        ("let e = Client::builder().cpu_device_count(0).open();", &[]),
        ("let e = b.cpu_device_count(2049).open();", &[]),
        (
            "mod cpu_plugin {\n    fn t() { b.cpu_device_count(2); }\n}",
            &[],
        ),
        (
            "mod cpu_plugin {\n    fn t() {}\n}\nfn u() { b.cpu_device_count(2); }",
            &[4],
        ),
    ];
    for (code, lines) in cases {
        assert_eq!(cpu_sized_opens_outside_cpu_plugin(code), *lines, "{code}");
    }
}

#[test]
fn suite_tests_that_need_the_cpu_plugin_live_in_cpu_plugin_modules() {
    let mut files = Vec::new();
    rust_files(&workspace().join("tests/suite"), &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("tidy.rs")) {
        for line in cpu_sized_opens_outside_cpu_plugin(&std::fs::read_to_string(f).unwrap()) {
            found.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "clients with a CPU device count outside `mod cpu_plugin`: {found:?}"
    );
}
