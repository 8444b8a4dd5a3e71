//! The actor protocol's rules, read from the actors' own source: every handler runs under
//! `guarded` (or `serve`, which calls it), every message is crate-private so only its actor's
//! handle builds it, and the client actor handles only what it owns (`client::OWNED_HERE`).

use crate::client::actor::OWNED_HERE;

/// Each actor file's name and text, as compiled into this test binary.
const SOURCES: &[(&str, &str)] = &[
    ("client.rs", include_str!("../client/actor.rs")),
    ("compile_service.rs", include_str!("../compile/service.rs")),
    ("compiler.rs", include_str!("../compile/compiler.rs")),
    ("device.rs", include_str!("../device/actor.rs")),
    ("memory_space.rs", include_str!("../device/memory_space.rs")),
    ("buffer_registry.rs", include_str!("../arrays/registry.rs")),
];

/// One `impl Handler<M> for A { … }` block: the message, the actor and the block's text.
struct HandlerImpl<'a> {
    message: &'a str,
    actor: &'a str,
    body: &'a str,
}

/// The text from the `{` at `open` to its matching `}` (comments and strings are not skipped:
/// the actors' sources hold no unbalanced brace in either).
fn block(code: &str, open: usize) -> &str {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &code[open..=open + i];
                }
            }
            _ => {}
        }
    }
    &code[open..]
}

/// Every handler implementation in `code`.
fn handlers(code: &str) -> Vec<HandlerImpl<'_>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("Handler<") {
        let start = from + at;
        from = start + "Handler<".len();
        let line_start = code[..start].rfind('\n').map_or(0, |n| n + 1);
        if !code[line_start..start].trim_start().starts_with("impl") {
            continue;
        }
        let rest = &code[from..];
        let Some(close) = rest.find('>') else { break };
        let message = rest[..close].rsplit("::").next().unwrap_or("").trim();
        let Some(after_for) = rest[close..].find(" for ").map(|f| close + f + 5) else {
            continue;
        };
        let actor = rest[after_for..]
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("");
        let Some(open) = rest[after_for..].find('{').map(|o| from + after_for + o) else {
            continue;
        };
        out.push(HandlerImpl {
            message,
            actor,
            body: block(code, open),
        });
    }
    out
}

/// Handlers whose body neither calls `guarded` nor `serve`: a panic there would take the
/// actor's thread (and every message behind it) down.
fn unguarded(code: &str) -> Vec<String> {
    (handlers(code).into_iter())
        .filter(|h| !(h.body.contains("guarded(") || h.body.contains("serve::<")))
        .map(|h| format!("{} for {}", h.message, h.actor))
        .collect()
}

/// Message types declared `pub`: anyone outside the core could build one and skip its handle.
fn public_messages(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = code.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() != "#[derive(Message)]" {
            continue;
        }
        // The declaration follows its attributes (`#[rtype]`, `#[cfg]`, docs).
        for decl in lines.by_ref() {
            let decl = decl.trim();
            if decl.starts_with("#[") || decl.starts_with("//") {
                continue;
            }
            if decl.starts_with("pub struct") || decl.starts_with("pub enum") {
                out.push(decl.to_string());
            }
            break;
        }
    }
    out
}

/// The message types `code` declares (`#[derive(Message)]`), each with how a value is written:
/// `Name {` for a struct with fields, `Name(` for a tuple struct, the bare name for a unit one.
fn declared_messages(code: &str) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let mut lines = code.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() != "#[derive(Message)]" {
            continue;
        }
        for decl in lines.by_ref() {
            let decl = decl.trim();
            if decl.starts_with("#[") || decl.starts_with("//") {
                continue;
            }
            let Some(rest) = decl.split("struct ").nth(1) else {
                break;
            };
            let name: String = (rest.chars())
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let form = match rest[name.len()..].trim_start().chars().next() {
                Some('(') => "(",
                Some(';') => "",
                _ => " {",
            };
            out.push((name, form));
            break;
        }
    }
    out
}

/// The byte ranges of `code`'s `impl … XHandle … {` blocks: where an actor's handle builds its
/// messages.
fn handle_impls(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let t = line.trim_start();
        let head = t.split('{').next().unwrap_or("");
        let is_handle_impl = t.starts_with("impl")
            && !head.contains(" for ")
            && (head.split(|c: char| !(c.is_alphanumeric() || c == '_')))
                .any(|w| w.ends_with("Handle"));
        if is_handle_impl && let Some(open) = line.find('{') {
            let start = at + open;
            out.push(start..start + block(code, start).len());
        }
        at += line.len();
    }
    out
}

/// Where `files` (name, text) build a message of `messages` (name, form, declaring file)
/// anywhere but inside its own file's handle impls: `file: Name`, once per place.
fn built_outside_their_handle(
    files: &[(String, String)],
    messages: &[(String, &'static str, &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (file, code) in files {
        let handles = handle_impls(code);
        // Line comments blanked, keeping offsets, so prose naming a message builds nothing.
        let code: String = (code.split_inclusive('\n'))
            .map(|l| match l.trim_start().starts_with("//") {
                true => " ".repeat(l.len() - 1) + "\n",
                false => l.to_string(),
            })
            .collect();
        for (name, form, home) in messages {
            // Elsewhere a message is reached only through a `use`; without one the name is
            // something else's (an error variant, say).
            let imported = (code.lines())
                .any(|l| l.trim_start().starts_with("use ") && l.contains(name.as_str()));
            if file.as_str() != *home && !imported {
                continue;
            }
            let mut from = 0;
            while let Some(found) = code[from..].find(name.as_str()) {
                let at = from + found;
                from = at + name.len();
                let before = code[..at].chars().last().unwrap_or(' ');
                let after = &code[from..];
                let ident = |c: char| c.is_alphanumeric() || c == '_';
                let whole_word = !(ident(before) || after.starts_with(ident));
                // A declaration, a type (`msg: Name`), or another item's path (`Error::Name`).
                let declared = ["struct ", "enum ", "impl ", "Handler<", "for ", ": ", "::"]
                    .iter()
                    .any(|p| code[..at].ends_with(p));
                let built = match *form {
                    "" => after.starts_with([')', ',', ';']),
                    f => after.starts_with(f) || after.starts_with("::new("),
                };
                let in_its_handle =
                    file.as_str() == *home && handles.iter().any(|h| h.contains(&at));
                if whole_word && built && !declared && !in_its_handle {
                    out.push(format!("{file}: {name}"));
                }
            }
        }
    }
    out
}

/// Every .rs file under `dir`, as (path from `dir`, text).
fn sources_under(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources_under(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// What is wrong with the client actor's handlers against `owned` (message, what it owns, with
/// each owned field named in backticks): a handler not listed (a forward belongs in a handle),
/// a listed message with no handler, or a handler that never reads a field it claims.
fn ownership_problems(code: &str, owned: &[(&str, &str)]) -> Vec<String> {
    let client: Vec<HandlerImpl<'_>> = (handlers(code).into_iter())
        .filter(|h| h.actor == "ClientActor")
        .collect();
    let mut problems = Vec::new();
    for h in &client {
        match owned.iter().find(|(m, _)| *m == h.message) {
            None => problems.push(format!("{} is handled but owns nothing here", h.message)),
            Some((_, what)) => {
                let fields = what.split('`').skip(1).step_by(2);
                for field in fields {
                    if !h.body.contains(&format!("self.{field}")) {
                        problems.push(format!("{} never reads `{field}`", h.message));
                    }
                }
            }
        }
    }
    for (m, _) in owned {
        if !client.iter().any(|h| h.message == *m) {
            problems.push(format!("{m} is listed but not handled"));
        }
    }
    problems
}

#[test]
fn every_handler_runs_under_guarded() {
    let found: Vec<(&str, usize)> = SOURCES
        .iter()
        .map(|(f, c)| (*f, handlers(c).len()))
        .collect();
    // The reader must see the handlers it checks, or the check passes on nothing.
    assert!(found.iter().all(|(_, n)| *n > 0), "{found:?}");
    let problems: Vec<String> = (SOURCES.iter())
        .flat_map(|(file, code)| {
            unguarded(code)
                .into_iter()
                .map(move |h| format!("{file}: {h}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "handlers outside `guarded`: {problems:?}"
    );
}

#[test]
fn only_an_actors_own_handle_builds_its_messages() {
    let problems: Vec<String> = (SOURCES.iter())
        .flat_map(|(file, code)| {
            (public_messages(code).into_iter()).map(move |d| format!("{file}: {d}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "messages public outside the core: {problems:?}"
    );
}

/// The actor files as paths under src/, for `SOURCES`' names.
const ACTOR_FILES: &[(&str, &str)] = &[
    ("client.rs", "client/actor.rs"),
    ("compile_service.rs", "compile/service.rs"),
    ("compiler.rs", "compile/compiler.rs"),
    ("device.rs", "device/actor.rs"),
    ("memory_space.rs", "device/memory_space.rs"),
    ("buffer_registry.rs", "arrays/registry.rs"),
];

#[test]
fn each_message_is_built_only_by_its_own_actors_handle() {
    let messages: Vec<(String, &'static str, &str)> = (SOURCES.iter())
        .flat_map(|(file, code)| {
            let home = ACTOR_FILES.iter().find(|(f, _)| f == file).unwrap().1;
            (declared_messages(code).into_iter()).map(move |(n, f)| (n, f, home))
        })
        .collect();
    assert!(messages.len() >= 20, "{messages:?}");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources_under(&src, &src, &mut files);
    files.retain(|(f, _)| f != "protocol/check.rs");
    let problems = built_outside_their_handle(&files, &messages);
    assert!(
        problems.is_empty(),
        "messages built outside their actor's handle: {problems:?}"
    );
}

/// Where `files` send to an actor other than through `supervision`'s one send helper
/// (`do_send`, or an address's own `send`, which answers through actix instead of the request's
/// own channel).
fn sends_outside_the_helper(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (file, code) in files {
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            if line.contains("do_send(") || line.contains("addr.send(") {
                out.push(format!("{file}:{}", n + 1));
            }
        }
    }
    out
}

#[test]
fn every_send_goes_through_the_one_helper_and_every_answer_on_its_own_channel() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources_under(&src, &src, &mut files);
    files.retain(|(f, _)| f != "protocol/supervision.rs" && f != "protocol/check.rs");
    assert!(files.len() > 40, "{}", files.len());
    let problems = sends_outside_the_helper(&files);
    assert!(problems.is_empty(), "sends outside `tell`: {problems:?}");
    // Every actor answers `ask`'s envelope: `ask` sends by `tell`, answers come on its channel.
    for (file, code) in SOURCES {
        assert!(
            code.contains("answers_asked!("),
            "{file} does not take `Asked`"
        );
    }
    let bad = vec![(
        "x.rs".to_string(),
        "fn f() { self.addr.do_send(m); } // addr.send( in prose\nlet r = to.addr.send(m);"
            .to_string(),
    )];
    assert_eq!(sends_outside_the_helper(&bad), ["x.rs:1", "x.rs:2"]);
}

#[test]
fn the_client_actor_handles_only_what_it_owns() {
    let (_, client) = SOURCES.iter().find(|(f, _)| *f == "client.rs").unwrap();
    let problems = ownership_problems(client, OWNED_HERE);
    assert!(problems.is_empty(), "{problems:?}");
}

/// The checks see what they are for: each bad source is caught, each good one passes.
#[test]
fn the_protocol_checks_see_what_breaks_them() {
    let guarded_one =
        "impl Handler<A> for X {\n    fn handle(&mut self) { guarded(\"a\", || Ok(())) }\n}";
    let served_one =
        "impl Handler<A> for X {\n    fn handle() { serve::<Self, _>(ctx, \"a\", f) }\n}";
    let bare =
        "impl Handler<super::m::B> for X {\n    fn handle(&mut self) { self.y.do_send(b) }\n}";
    assert_eq!(unguarded(guarded_one), Vec::<String>::new());
    assert_eq!(unguarded(served_one), Vec::<String>::new());
    assert_eq!(unguarded(&format!("{guarded_one}\n{bare}")), ["B for X"]);

    let private = "#[derive(Message)]\n#[rtype(result = \"()\")]\npub(crate) struct A;";
    let public = "#[derive(Message)]\n/// docs\n#[rtype(result = \"()\")]\npub struct B { x: u8 }";
    assert!(public_messages(private).is_empty());
    assert_eq!(public_messages(public), ["pub struct B { x: u8 }"]);

    let declared = "#[derive(Message)]\n#[rtype(result = \"()\")]\npub(crate) struct Run {\n    x: u8,\n}\n#[derive(Message)]\npub(crate) struct Stop;\n#[derive(Message)]\npub(crate) struct Forget(u8);";
    let messages: Vec<(String, &'static str, &str)> = (declared_messages(declared).into_iter())
        .map(|(n, f)| (n, f, "a.rs"))
        .collect();
    assert_eq!(messages.len(), 3);
    let handle = "impl AHandle {\n    fn run(&self) { ask(&self.addr, Run { x: 1 }); tell(&self.addr, Stop); ask(&self.addr, Forget(2)) }\n}\nimpl Handler<Stop> for A {}\n// Run { x } in prose\n";
    let files = |code: &str, name: &str| vec![(name.to_string(), code.to_string())];
    assert!(built_outside_their_handle(&files(handle, "a.rs"), &messages).is_empty());
    // The same handle in another actor's file builds messages that are not its own.
    let moved = format!("use crate::a::{{Forget, Run, Stop}};\n{handle}");
    assert_eq!(
        built_outside_their_handle(&files(&moved, "b.rs"), &messages),
        ["b.rs: Run", "b.rs: Stop", "b.rs: Forget"]
    );
    // A message as a type is no value; another file's variant of the same name is not it.
    let typed = "impl Handler<Stop> for A {\n    fn handle(&mut self, _: Stop, msg: Run) {}\n}";
    assert!(built_outside_their_handle(&files(typed, "a.rs"), &messages).is_empty());
    let variant = "enum E {\n    Run { x: u8 },\n}\nfn f() -> E { E::Run { x: 1 } }";
    assert!(built_outside_their_handle(&files(variant, "e.rs"), &messages).is_empty());
    let elsewhere = "impl Service {\n    fn go(&self) { self.pool.send(Run { x: 1 }); let r = Run::new(2); }\n}";
    assert_eq!(
        built_outside_their_handle(&files(elsewhere, "a.rs"), &messages),
        ["a.rs: Run", "a.rs: Run"]
    );
    let imported = format!("use crate::a::{{Run, Stop}};\n{elsewhere}");
    assert_eq!(
        built_outside_their_handle(&files(&imported, "c.rs"), &messages),
        ["c.rs: Run", "c.rs: Run"]
    );

    let owned: &[(&str, &str)] = &[("Route", "the choice (`next`)")];
    let routes = "impl Handler<Route> for ClientActor {\n    fn handle(&mut self) { guarded(\"r\", || { self.next += 1; Ok(()) }) }\n}";
    let forwards = "impl Handler<Load> for ClientActor {\n    fn handle(&mut self) { self.routes.compiler.do_send(m) }\n}";
    let ignores = "impl Handler<Route> for ClientActor {\n    fn handle(&mut self) { self.routes.x.do_send(m) }\n}";
    assert!(ownership_problems(routes, owned).is_empty());
    assert_eq!(
        ownership_problems(&format!("{routes}\n{forwards}"), owned),
        ["Load is handled but owns nothing here"]
    );
    assert_eq!(
        ownership_problems(ignores, owned),
        ["Route never reads `next`"]
    );
    assert_eq!(
        ownership_problems("", owned),
        ["Route is listed but not handled"]
    );
}
