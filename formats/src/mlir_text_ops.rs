//! The operations an MLIR text program runs, read as MLIR's parser reads them rather than line by
//! line: op names in custom form (`chlo.atan %0 : …`) or generic form (`"chlo.atan"(%0)`), each
//! with its results' element types, whatever the spelling (type aliases, spaces, lines broken).

use std::collections::HashMap;

use super::mlir_bytecode_ops::shaped_element;

/// Aliases are resolved at most this deep (an alias naming an alias naming …): past it the type
/// reads as unknown (`?`), never a loop.
const MAX_ALIAS_DEPTH: usize = 16;

/// The most characters one op's resolved types may grow to: an alias naming itself twice
/// doubles at every level (hostile text found by the fuzz target `read_ops` grew past memory).
const MAX_RESOLVED: usize = 1 << 16;

/// The element type of a result the reader could not resolve.
pub const UNKNOWN: &str = "?";

/// The names of the ops `text` runs, in order, each time it runs one (`chlo.atan`): an op, not a
/// string (a composite's name, whose decomposition runs instead), a symbol (`@chlo.atan`), an
/// alias or an attribute. One pass, no type read: what a known defect's fix asks.
pub fn op_names(text: &str) -> impl Iterator<Item = &str> {
    op_sites(text).map(|(name, _)| name)
}

/// Every op `text` runs, with the element types of its results: those after its `->`, or, with
/// none, its trailing `:` type. Type aliases (`!t = tensor<4xf64>`) are resolved; a result whose
/// type cannot be read is [`UNKNOWN`], so a caller can treat it as any.
pub fn ops_used(text: &str) -> Vec<(String, String)> {
    let aliases = aliases(text);
    let mut found = Vec::new();
    // Every op's types are scanned from the op on; unbalanced brackets could make each scan run
    // to the text's end. All the scans together read at most this much; past it, types read as
    // unknown (linear work, whatever the text).
    let mut scan_budget = 8 * text.len() + 4096;
    for (name, after) in op_sites(text) {
        let types = result_types(&text[after..], &mut scan_budget);
        let mut room = MAX_RESOLVED;
        let resolved = resolve(types, &aliases, 0, &mut room);
        let mut elements = match room {
            0 => Vec::new(),
            _ => element_types(&resolved),
        };
        if elements.is_empty() {
            elements.push(UNKNOWN.to_string());
        }
        found.extend(elements.into_iter().map(|e| (name.to_string(), e)));
    }
    found
}

/// Each op's name and the offset just past it: a bare dotted identifier that starts a statement
/// (after `=`, or first on its line) or a string directly followed by `(` (generic form). Strings
/// and `//` comments are skipped whole.
fn op_sites(text: &str) -> impl Iterator<Item = (&str, usize)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    // What came before the current token, ignoring whitespace: an op name follows `=`, or starts
    // a line (`{`, `}` and a line's start count too: an op without results).
    let mut statement_start = true;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
                i += bytes[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .unwrap_or(bytes.len() - i);
                continue;
            }
            if c == b'"' {
                let start = i + 1;
                let end = string_end(bytes, start);
                i = end + 1;
                let next = bytes[i.min(bytes.len())..]
                    .iter()
                    .find(|b| !b.is_ascii_whitespace());
                let was_start = std::mem::replace(&mut statement_start, false);
                if was_start && next == Some(&b'(') {
                    let name = &text[start..end.min(bytes.len())];
                    if is_op_name(name) {
                        return Some((name, i.min(bytes.len())));
                    }
                }
                continue;
            }
            if is_ident_start(c) {
                let start = i;
                while i < bytes.len() && is_ident(bytes[i]) {
                    i += 1;
                }
                let prefixed = start > 0 && b"@#!%^$".contains(&bytes[start - 1]);
                let was_start = std::mem::replace(&mut statement_start, false);
                let name = &text[start..i];
                // `mhlo.sharding = …` names an attribute.
                let next = bytes[i..].iter().position(|b| !b.is_ascii_whitespace());
                let attribute = next
                    .is_some_and(|n| bytes[i + n] == b'=' && bytes.get(i + n + 1) != Some(&b'='));
                if was_start && !prefixed && !attribute && is_op_name(name) {
                    return Some((name, i));
                }
                continue;
            }
            match c {
                b'=' => statement_start = bytes.get(i + 1) != Some(&b'='),
                b'\n' | b'{' | b'}' => statement_start = true,
                c if c.is_ascii_whitespace() => {}
                _ => statement_start = false,
            }
            i += 1;
        }
        None
    })
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$')
}

/// A dialect-qualified op name: `dialect.op`, neither part empty.
fn is_op_name(name: &str) -> bool {
    matches!(name.split_once('.'), Some((d, o)) if !d.is_empty() && !o.is_empty())
        && name.bytes().all(is_ident)
}

/// The offset of the quote that closes a string opened before `start` (escapes skipped), or the
/// text's length.
fn string_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// The result types of the op whose text follows `rest`: its statement runs to the first line
/// break outside brackets and strings once a `:` has been seen outside them (a type broken over
/// lines stays inside `<…>`); the types are those after its last `->` there, else after its `:`.
fn result_types<'t>(rest: &'t str, budget: &mut usize) -> &'t str {
    let bytes = rest.as_bytes();
    let (mut depth, mut colon, mut arrow) = (0i32, None, None);
    let mut i = 0;
    let mut end = bytes.len();
    while i < bytes.len() {
        if *budget == 0 {
            return "";
        }
        *budget -= 1;
        match bytes[i] {
            b'"' => i = string_end(bytes, i + 1),
            b'-' if bytes.get(i + 1) == Some(&b'>') => {
                if depth == 0 {
                    arrow = Some(i + 2);
                }
                i += 1;
            }
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => {
                depth -= 1;
                if depth < 0 {
                    end = i;
                    break;
                }
            }
            b':' if depth == 0 && colon.is_none() => colon = Some(i + 1),
            b'\n' if depth == 0 && colon.is_some() => {
                // A line ending in `->` or `,` goes on; so does one whose next line starts `->`.
                let line_so_far = rest[..i].trim_end();
                let next = rest[i + 1..].trim_start();
                if !(line_so_far.ends_with("->")
                    || line_so_far.ends_with(',')
                    || line_so_far.ends_with(':')
                    || next.starts_with("->"))
                {
                    end = i;
                    break;
                }
            }
            _ => {}
        }
        i += 1;
    }
    match (arrow, colon) {
        (Some(a), _) if a <= end => &rest[a..end],
        (_, Some(c)) if c <= end => &rest[c..end],
        _ => "",
    }
}

/// The type aliases a program defines: `!name = type`, at the start of a line.
fn aliases(text: &str) -> HashMap<&str, &str> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix('!') else {
            continue;
        };
        let Some((name, value)) = rest.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if !name.is_empty() && name.bytes().all(is_ident) {
            out.insert(name, value.trim());
        }
    }
    out
}

/// `types` with each `!alias` replaced by what it names, recursively; an unknown or too-deep
/// alias becomes [`UNKNOWN`]. At most `room` characters are written: past it, `room` is 0 and
/// what was resolved is not to be read.
fn resolve(types: &str, aliases: &HashMap<&str, &str>, depth: usize, room: &mut usize) -> String {
    let mut out = String::new();
    let push = |out: &mut String, s: &str, room: &mut usize| match s.len() <= *room {
        true => {
            *room -= s.len();
            out.push_str(s);
        }
        false => *room = 0,
    };
    let mut rest = types;
    while let Some(at) = rest.find('!') {
        push(&mut out, &rest[..at], room);
        let after = &rest[at + 1..];
        let len = after.bytes().take_while(|&b| is_ident(b)).count();
        let name = &after[..len];
        match aliases.get(name) {
            Some(value) if depth < MAX_ALIAS_DEPTH && *room > 0 => {
                let inner = resolve(value, aliases, depth + 1, room);
                out.push_str(&inner);
            }
            _ => push(&mut out, UNKNOWN, room),
        }
        if *room == 0 {
            return String::new();
        }
        rest = &after[len..];
    }
    push(&mut out, rest, room);
    out
}

/// The element types of the `tensor<…>` types (or bare scalar types) in `types`, spaces and line
/// breaks inside a type ignored (`tensor<128 x f64>`).
fn element_types(types: &str) -> Vec<String> {
    let types: String = types.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut rest = types.as_str();
    while let Some(at) = rest.find("tensor<") {
        let body = &rest[at + "tensor<".len()..];
        let mut depth = 1;
        let end = body
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(body.len(), |(i, _)| i);
        let compact: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        let element = shaped_element(&compact);
        out.push(if element.is_empty() { UNKNOWN } else { element }.to_string());
        rest = &body[end..];
    }
    if out.is_empty() {
        let t = types.trim().trim_matches(|c| c == '(' || c == ')').trim();
        if matches!(t, "f16" | "bf16" | "f32" | "f64" | UNKNOWN)
            || t.starts_with('i') && t[1..].parse::<u32>().is_ok()
        {
            out.push(t.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
        (want.iter())
            .map(|(o, t)| (o.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn ops_are_read_with_their_result_element_types_however_spelled() {
        let table: &[(&str, &[(&str, &str)])] = &[
            (
                "%2 = chlo.atan %0 : tensor<20x20xf64> -> tensor<20x20xf64>",
                &[("chlo.atan", "f64")],
            ),
            (
                "%1 = \"chlo.atan\"(%0) : (tensor<4xf32>) -> tensor<4xf32>",
                &[("chlo.atan", "f32")],
            ),
            (
                "%3 = stablehlo.atan2 %0, %1 : tensor<400xf64>",
                &[("stablehlo.atan2", "f64")],
            ),
            (
                "%0 = stablehlo.add %a, %b : tensor<2xcomplex<f32>>",
                &[("stablehlo.add", "complex<f32>")],
            ),
            // A composite named after the op runs its decomposition, not the op.
            (
                "%0 = stablehlo.composite \"chlo.atan\" %arg0 {decomposition = @d} : (tensor<4xf64>) -> tensor<4xf64>",
                &[("stablehlo.composite", "f64")],
            ),
            ("%0 = call @inputs() : () -> tensor<4xf64>", &[]),
            // Spaces inside a type, a type broken over lines, and aliases, one naming another.
            (
                "%0 = chlo.atan %a : tensor<128 x f64>",
                &[("chlo.atan", "f64")],
            ),
            (
                "%0 = chlo.atan %a : tensor<128x\n      f64>\n%1 = stablehlo.add %0, %0 : tensor<2xf32>",
                &[("chlo.atan", "f64"), ("stablehlo.add", "f32")],
            ),
            (
                "%0 = chlo.atan %a\n   : tensor<4xf64>\n   -> tensor<4xf64>",
                &[("chlo.atan", "f64")],
            ),
            (
                "!t = tensor<128xf64>\n  %0 = chlo.atan %a : !t\n  return %0 : !t\n",
                &[("chlo.atan", "f64")],
            ),
            (
                "!e = f64\n!t = tensor<128x!e>\n%0 = chlo.atan %a : !t",
                &[("chlo.atan", "f64")],
            ),
            // An alias that cannot be resolved reads as unknown, not as nothing.
            ("%0 = chlo.atan %a : !nowhere", &[("chlo.atan", "?")]),
            // Two statements on one line; an op in a comment or symbol is none.
            (
                "{ %0 = chlo.atan %a : tensor<4xf32> } // chlo.atan %x : tensor<4xf64>",
                &[("chlo.atan", "f32")],
            ),
        ];
        for (text, want) in table {
            assert_eq!(ops_used(text), pairs(want), "{text}");
        }
    }

    /// Hostile text costs linear work: an alias naming itself twice (it doubled at each of 16
    /// levels, past memory: found by the fuzz target `read_ops`), and ops whose brackets never
    /// close (each scan ran to the text's end).
    #[test]
    fn hostile_aliases_and_brackets_cost_bounded_work() {
        let doubling = "!t = tensor<!t x !t>\n%0 = chlo.atan %a : !t\n";
        assert_eq!(
            ops_used(doubling),
            [("chlo.atan".to_string(), "?".to_string())]
        );
        // 20,000 ops each opening a bracket: quadratic, this was 4 * 10^9 bytes scanned.
        let unclosed = "%0 = a.b %x : tensor<\n".repeat(20_000);
        let ops = ops_used(&unclosed);
        assert_eq!(ops.len(), 20_000);
        assert!(ops.iter().all(|(op, _)| op == "a.b"));
    }

    fn uses_op(text: &str, op: &str) -> bool {
        op_names(text).any(|name| name == op)
    }

    #[test]
    fn an_op_is_found_by_name_whatever_its_types() {
        assert!(uses_op("%0 = chlo.atan %a : !t", "chlo.atan"));
        assert!(uses_op("%0 = \"chlo.atan\" (%a) : (!t) -> !t", "chlo.atan"));
        assert!(uses_op("%0 =chlo.atan %a : tensor<4 x\nf64>", "chlo.atan"));
        assert!(!uses_op(
            "%0 = stablehlo.composite \"chlo.atan\" %a",
            "chlo.atan"
        ));
        assert!(!uses_op("func.call @chlo.atan(%a)", "chlo.atan"));
        assert!(!uses_op(
            "%0 = stablehlo.atan2 %a, %b : tensor<4xf32>",
            "chlo.atan"
        ));
        assert!(!uses_op("// %0 = chlo.atan %a", "chlo.atan"));
        assert!(!uses_op(
            "%0 = foo.bar %a {note = \"chlo.atan\"}",
            "chlo.atan"
        ));
        assert!(!uses_op(
            "func.func @f(%a: tensor<4xf64> {chlo.atan = 1})",
            "chlo.atan"
        ));
    }
}
