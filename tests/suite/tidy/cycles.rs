//! The import-cycle check: each crate's module graph, read from its `crate::` and `super::`
//! paths and use groups, the crate root included, must have no cycle.

use std::collections::{BTreeMap, BTreeSet};

use super::{CRATES, ITEM_KINDS, is_ident, module_of, rust_files, without_pub, workspace};

/// What the cycle check knows of one crate: its modules, and the names its root file defines
/// itself (a `crate::Name` of one of those is an edge to the root; a re-export there is not).
struct CrateMap {
    modules: BTreeSet<String>,
    root_items: BTreeSet<String>,
}

impl CrateMap {
    fn new(modules: BTreeSet<String>, root_code: &str) -> Self {
        let root_items = (root_code.lines())
            .filter_map(|line| {
                let decl = without_pub(line);
                let rest =
                    (ITEM_KINDS.iter()).find_map(|k| decl.strip_prefix(k)?.strip_prefix(' '))?;
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
