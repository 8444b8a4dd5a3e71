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
