//! Checks on the source tree itself, the rules ARCHITECTURE.md names: no module imports one that
//! imports it back, `unsafe` is forbidden outside the fence, the core's format readers touch
//! neither PJRT nor the actors, no file grows past about 500 lines without a reason written down
//! here, and suite tests that need the CPU plugin say so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The crates and their source roots, relative to the workspace.
const CRATES: &[&str] = &["formats/src", "fence/src", "actors/src", "src", "cli/src"];

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
        "actors/src/callbacks/mod.rs",
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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The keywords that declare an item.
const ITEM_KINDS: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "union",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "macro_rules!",
];

/// `line` without a leading `pub` or `pub(crate)`.
fn without_pub(line: &str) -> &str {
    (["pub(crate) ", "pub "].iter())
        .find_map(|p| line.strip_prefix(p))
        .unwrap_or(line)
}

/// ARCHITECTURE.md's text.
fn architecture() -> String {
    std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap()
}

/// What `doc` writes in backticks.
fn backticked(doc: &str) -> impl Iterator<Item = &str> {
    doc.split('`').skip(1).step_by(2)
}

/// The text of every Rust file below the workspace folders `dirs`, one after another.
fn sources_under(dirs: &[&str]) -> String {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&workspace().join(dir), &mut files);
    }
    (files.iter())
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect()
}

mod cycles;
mod locks;

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

/// The dependencies a manifest's `[dependencies]` table names that the format crate may not
/// have: anything but prost (and its well-known types) and thiserror. Not the fence, pjrt-sys's
/// bindings, actix or an async runtime.
fn format_crate_dependencies_past_its_room(manifest: &str) -> Vec<String> {
    const ALLOWED: &[&str] = &["prost", "prost-types", "thiserror"];
    (locks::dependencies(manifest).into_iter())
        .filter(|name| !ALLOWED.contains(&name.as_str()))
        .collect()
}

#[test]
fn the_format_readers_need_neither_pjrt_nor_the_actors() {
    let manifest = std::fs::read_to_string(workspace().join("formats/Cargo.toml")).unwrap();
    let problems = format_crate_dependencies_past_its_room(&manifest);
    assert!(
        problems.is_empty(),
        "the format crate depends on {problems:?}: it must build without PJRT, the actors or a runtime"
    );
    let mut files = Vec::new();
    rust_files(&workspace().join("formats/src"), &mut files);
    assert!(files.len() >= 12, "{files:?}");
    // The check sees what it is for.
    let bad = "[dependencies]\nprost.workspace = true\n# a comment\npjrt-sys = \"0.2\"\nactix = { version = \"0.13\" }\n\n[build-dependencies]\nprost-build = \"0.13\"\n";
    assert_eq!(
        format_crate_dependencies_past_its_room(bad),
        ["pjrt-sys", "actix"]
    );
}

#[test]
fn unsafe_code_is_forbidden_outside_the_fence() {
    for krate in [
        "formats/src/lib.rs",
        "actors/src/lib.rs",
        "src/lib.rs",
        "cli/src/main.rs",
    ] {
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
    for token in backticked(doc) {
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

/// The file and folder paths `doc` names in backticks (`x.rs`, `dir/`), none with a space.
fn named_paths(doc: &str) -> Vec<&str> {
    backticked(doc)
        .filter(|t| !t.contains(char::is_whitespace) && (t.ends_with(".rs") || t.ends_with('/')))
        .collect()
}

/// Every path in the repository below `dir`, files and folders, relative to it; build outputs,
/// virtual environments and plugins left out.
fn tree(dir: &Path, rel: &str, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        let path = format!("{rel}{name}");
        if entry.path().is_dir() {
            out.insert(format!("{path}/"));
            tree(&entry.path(), &format!("{path}/"), out);
        } else {
            out.insert(path);
        }
    }
}

/// The markdown links of `doc` to files of this tree (`[text](path)`, an anchor cut off).
fn local_links(doc: &str) -> Vec<&str> {
    (doc.split("](").skip(1))
        .filter_map(|rest| rest.split(')').next())
        .map(|link| link.split('#').next().unwrap_or(link))
        .filter(|link| !link.is_empty() && !link.contains("://"))
        .collect()
}

#[test]
fn the_readme_is_short_and_its_book_pages_exist() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "README.md is {lines} lines: the rest belongs in docs/"
    );
    let links = local_links(&readme);
    let pages: BTreeSet<&str> = (links.iter().copied())
        .filter(|l| l.starts_with("docs/"))
        .collect();
    assert!(
        pages.len() >= 10,
        "the README's table of contents: {pages:?}"
    );
    let missing: Vec<&&str> = (links.iter())
        .filter(|l| !workspace().join(l).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "the README links to what does not exist: {missing:?}"
    );
    // Every page is compiled for its examples (src/lib.rs's `docs` doctest module).
    let lib = std::fs::read_to_string(workspace().join("src/lib.rs")).unwrap();
    for page in &pages {
        assert!(
            lib.contains(&format!("include_str!(\"../{page}\")")),
            "{page}'s examples are not doc-tested"
        );
    }
    // The check sees a link, with or without an anchor, and not a web address.
    assert_eq!(
        local_links("[a](docs/x.md#y) and [b](https://e.org) [c](ARCH.md)"),
        ["docs/x.md", "ARCH.md"]
    );
}

#[test]
fn the_architecture_is_at_most_600_lines() {
    let lines = architecture().lines().count();
    assert!(
        lines <= 600,
        "ARCHITECTURE.md is {lines} lines: it holds what changes rarely (the map, the owners, the invariants, the entry points); the rest belongs in docs/dev/"
    );
}

#[test]
fn every_path_the_architecture_names_exists() {
    let doc = architecture();
    let mut paths = BTreeSet::new();
    tree(&workspace(), "", &mut paths);
    // A name is found when some path is it or ends with it after a `/`.
    let found = |name: &str| (paths.iter()).any(|p| p == name || p.ends_with(&format!("/{name}")));
    let named = named_paths(&doc);
    assert!(named.len() >= 40, "only {} paths named", named.len());
    let missing: Vec<&&str> = named.iter().filter(|n| !found(n)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
    // The check sees a stale name.
    assert!(!found("redis_cache.rs") && found("redis_cache/") && found("compile/options.rs"));
    assert_eq!(named_paths("`a.rs`, `b c.rs`, `d/`, `e`"), ["a.rs", "d/"]);
}

/// The items `doc` names by path in backticks (`a::b::item`, `Type::method`): each path's
/// last segment, as far as it is an identifier.
fn named_items(doc: &str) -> Vec<&str> {
    backticked(doc)
        .filter(|t| t.contains("::") && !t.contains(char::is_whitespace) && !t.contains('{'))
        .filter(|t| !t.starts_with("pjrt_sys"))
        .filter_map(|t| {
            let last = t.rsplit("::").next()?;
            let end = last.find(|c: char| !is_ident(c)).unwrap_or(last.len());
            let item = &last[..end];
            item.starts_with(|c: char| c.is_alphabetic() || c == '_')
                .then_some(item)
        })
        .collect()
}

/// Whether `sources` declare `item`: a function, type, constant, module or macro, or an enum
/// variant or struct field (a line that starts with it, `pub` or not).
fn declares(sources: &str, item: &str) -> bool {
    let ends_there = |text: &str, end: usize| !text[end..].chars().next().is_some_and(is_ident);
    let an_item = ITEM_KINDS.iter().any(|k| {
        let decl = format!("{k} {item}");
        (sources.match_indices(&decl)).any(|(at, _)| ends_there(sources, at + decl.len()))
    });
    let a_member = sources.lines().any(|line| {
        let line = without_pub(line.trim_start());
        line.starts_with(item)
            && line[item.len()..].starts_with([',', '(', ':', '{', ' '])
            && !line[item.len()..].starts_with(" =")
    });
    an_item || a_member
}

#[test]
fn every_item_the_architecture_names_exists() {
    let doc = architecture();
    let sources = sources_under(&[
        "actors",
        "formats",
        "fence/src",
        "src",
        "cli",
        "tests",
        "benches",
        "examples",
    ]);
    let named = named_items(&doc);
    assert!(named.len() >= 40, "only {} items named", named.len());
    let missing: Vec<&&str> = named.iter().filter(|n| !declares(&sources, n)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names items that do not exist: {missing:?}"
    );
    // The check sees what it is for.
    assert_eq!(
        named_items("`a::b::c(x)`, `d::E`, `f`, `g h::i`"),
        ["c", "E"]
    );
    assert!(declares("pub fn guarded<T>()", "guarded") && !declares("fn guarded_x()", "guarded"));
    assert!(declares("enum E {\n    ShutDown,\n}", "ShutDown"));
    assert!(
        declares("    pub skipped: usize,", "skipped") && !declares("let skipped = 1;", "skipped")
    );
}

#[test]
fn every_test_the_architecture_names_exists() {
    let doc = architecture();
    let sources = sources_under(&["tests", "actors", "formats", "fence/src", "src", "cli"]);
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
    // The tidy checks themselves hold examples of what they catch.
    for f in files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tidy"))
    {
        for line in cpu_sized_opens_outside_cpu_plugin(&std::fs::read_to_string(f).unwrap()) {
            found.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "clients with a CPU device count outside `mod cpu_plugin`: {found:?}"
    );
}
