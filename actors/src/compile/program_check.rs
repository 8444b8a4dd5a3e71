//! What a program must satisfy before the plugin parses it, checked cheaply on its text: not
//! empty, not nested deeper than the compiler's stack can follow, no tensor type whose size
//! overflows (XLA throws a C++ exception on one, which aborts the process), and no empty
//! tensor type whose compile grows without bound (`tensor<2147483647x0xf32>`).

use crate::error::{Error, Result};

/// The deepest nesting of braces, brackets and parentheses a text program may have. The MLIR
/// parser recurses once per level; compile workers get a stack sized for this (see `open.rs`).
pub const MAX_NESTING: usize = 2048;

/// The stack a compile worker runs on: room for `MAX_NESTING` parser levels with a wide margin
/// (1,000 levels overflowed the default 2 MiB). Reserved, not committed: untouched pages cost
/// nothing.
pub const COMPILE_STACK_BYTES: usize = 64 << 20;

/// MLIR bytecode starts with these bytes; the text checks do not apply to it.
const BYTECODE_MAGIC: &[u8] = b"ML\xefR";

/// Checks a program before the plugin of `platform` at PJRT C API `api` compiles it: the checks
/// every plugin needs, and those of one plugin's known defects.
pub fn check_program_for(code: &[u8], platform: &str, api: (i32, i32)) -> Result<()> {
    check_program(code)?;
    if platform == "cpu" && api >= (0, 100) {
        check_empty_custom_calls(code)?;
    }
    Ok(())
}

/// The producer a bytecode artifact names after its magic (`StableHLO_v1.15.0`), if any.
pub fn artifact_producer(code: &[u8]) -> Option<String> {
    let rest = code.strip_prefix(BYTECODE_MAGIC)?;
    // A version byte, then the producer as a NUL-terminated string.
    let name = rest.get(1..)?.split(|b| *b == 0).next()?;
    let name = std::str::from_utf8(name).ok()?;
    (!name.is_empty() && name.is_ascii()).then(|| name.to_string())
}

/// The newest StableHLO the plugin parses, from its attributes (`1.13.3`), or `unknown`.
pub fn plugin_stablehlo(attributes: &[(String, crate::pjrt::NamedValue)]) -> String {
    match attributes
        .iter()
        .find(|(k, _)| k == "stablehlo_current_version")
    {
        Some((_, crate::pjrt::NamedValue::Int64List(parts))) => parts
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join("."),
        Some((_, other)) => other.to_string(),
        None => "unknown".into(),
    }
}

/// Whether a bytecode artifact's producer (`StableHLO_v1.20.0`) is newer than `plugin_version`.
fn producer_newer(code: &[u8], plugin_version: &str) -> bool {
    let parse = |v: &str| -> Option<Vec<u64>> { v.split('.').map(|p| p.parse().ok()).collect() };
    let producer = artifact_producer(code);
    match (
        producer
            .as_deref()
            .and_then(|p| p.strip_prefix("StableHLO_v")),
        parse(plugin_version),
    ) {
        (Some(v), Some(plugin)) => parse(v).is_some_and(|v| v > plugin),
        _ => false,
    }
}

/// Says what a compile error means when the plugin could not parse the program's StableHLO
/// (it was written for a newer one): `Error::StableHloTooNew`, naming the plugin's version
/// (`plugin_version`, from its attributes) and the artifact's producer. Other errors pass.
pub fn explain_parse_failure(err: Error, code: &[u8], plugin_version: &str) -> Error {
    match &err {
        // The plugin adds its "Failed to parse using StableHLO" line to every parse failure, so
        // only an operation of the portable (vhlo) dialect it does not know, or an artifact
        // from a newer producer, says the program is too new rather than malformed.
        Error::Pjrt { message, .. }
            if message.contains("Failed to parse using StableHLO")
                && (message.contains("operation 'vhlo.")
                    || producer_newer(code, plugin_version)) =>
        {
            Error::StableHloTooNew {
                plugin: plugin_version.to_string(),
                artifact: artifact_producer(code),
                message: message.clone(),
            }
        }
        _ => err,
    }
}

/// Checks a program before the plugin parses it.
pub fn check_program(code: &[u8]) -> Result<()> {
    let bad = |m: String| Error::InvalidArgument(format!("program: {m}"));
    if code.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(bad("it is empty".into()));
    }
    if code.starts_with(BYTECODE_MAGIC) {
        return Ok(());
    }
    let depth = nesting_depth(code);
    if depth > MAX_NESTING {
        return Err(bad(format!(
            "it nests {depth} levels deep; at most {MAX_NESTING} are compiled"
        )));
    }
    check_tensor_sizes(code).map_err(bad)
}

/// The deepest nesting of `{`, `[` and `(` outside string literals.
fn nesting_depth(code: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in code {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Bytes of one element of an MLIR element type, as far as a size check needs (unknown
/// types count as 8, the widest scalar).
fn element_bytes(ty: &str) -> u128 {
    let ty = ty.trim();
    if let Some(inner) = ty
        .strip_prefix("complex<")
        .and_then(|t| t.strip_suffix('>'))
    {
        return 2 * element_bytes(inner);
    }
    let bits: Option<u128> = ty
        .trim_start_matches(|c: char| c.is_ascii_alphabetic())
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok());
    match bits {
        Some(bits) if bits > 0 => bits.div_ceil(8),
        _ => 8,
    }
}

/// The largest product of the dims before an empty tensor type's first zero. The CPU plugin's
/// compile takes time and memory in proportion to it (measured on a parameter and result:
/// about 60 ns and 5 bytes each; 2^24 compiles in 1 s and 150 MB, 2^26 in 3.9 s, 2^30 ran out
/// of 8 GB), whatever follows the zero; a zero first costs nothing.
pub const MAX_EMPTY_LEADING: u128 = 1 << 24;

/// The `tensor<…>` types in `text`, in order: each as written (for messages), its dims (`None`
/// for `?`; the list stops at the first part that is not a size, such as an encoding), and its
/// element type.
fn tensor_types(text: &str) -> Vec<(&str, Vec<Option<u128>>, &str)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("tensor<") {
        rest = &rest[at + "tensor<".len()..];
        let end = rest.find(['>', '\n']).unwrap_or(rest.len());
        // Element types such as `complex<f32>` hold a `<`: take the type up to its own `>`.
        let ty_end = match rest[..end].find('<') {
            Some(_) => rest.find(">>").map_or(end, |e| e + 1),
            None => end,
        };
        let ty = &rest[..ty_end];
        let parts: Vec<&str> = ty.split('x').collect();
        let (dims, element) = parts.split_at(parts.len().saturating_sub(1));
        let mut sizes = Vec::new();
        for dim in dims {
            match dim.trim() {
                "?" | "" => sizes.push(None),
                d => match d.parse::<u128>() {
                    Ok(n) => sizes.push(Some(n)),
                    Err(_) => break, // not a shape (an encoding, say): nothing more to read
                },
            }
        }
        found.push((ty, sizes, element.first().copied().unwrap_or("")));
    }
    found
}

/// Refuses a `tensor<…>` type whose byte size does not fit in 63 bits (XLA computes it in an
/// `int64_t` and throws, through the C API, when it overflows), or an empty one whose dims
/// before its first zero multiply past `MAX_EMPTY_LEADING`.
fn check_tensor_sizes(code: &[u8]) -> std::result::Result<(), String> {
    let text = String::from_utf8_lossy(code);
    for (ty, dims, element) in tensor_types(&text) {
        let mut bytes: u128 = if element.is_empty() {
            8
        } else {
            element_bytes(element)
        };
        // The product of the dims before the first zero, once one is seen.
        let (mut leading, mut empty) = (1u128, false);
        for n in dims.into_iter().flatten() {
            bytes = bytes.saturating_mul(n);
            empty |= n == 0;
            if !empty {
                leading = leading.saturating_mul(n);
            }
        }
        let shown: String = ty.chars().take(80).collect();
        if empty && leading > MAX_EMPTY_LEADING {
            return Err(format!(
                "the empty type tensor<{shown}> has {leading} elements' worth of dims before its zero, past the {MAX_EMPTY_LEADING} the compiler handles in bounded time and memory: put the zero dim first, or make the others smaller"
            ));
        }
        if bytes > i64::MAX as u128 {
            return Err(format!(
                "the type tensor<{shown}> is too large: its byte size does not fit in 63 bits"
            ));
        }
    }
    Ok(())
}

/// Refuses, for the 0.115 CPU compiler, a custom call with an empty operand and an empty result
/// among several: that compiler divides by zero on one (SIGFPE), which ends the process (an
/// SVD of a 0 x 3 matrix is one). Reads the call's signature on its line of text; bytecode is
/// not read.
pub fn check_empty_custom_calls(code: &[u8]) -> Result<()> {
    if code.starts_with(BYTECODE_MAGIC) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(code);
    let is_empty = |dims: &Vec<Option<u128>>| dims.contains(&Some(0));
    for line in text.lines().filter(|l| l.contains("custom_call")) {
        let Some((head, results)) = line.rsplit_once("->") else {
            continue;
        };
        let operands = head.rsplit_once(" : ").map_or("", |(_, o)| o);
        let results = tensor_types(results);
        if results.len() > 1
            && results.iter().any(|(_, d, _)| is_empty(d))
            && tensor_types(operands).iter().any(|(_, d, _)| is_empty(d))
        {
            let target = (line.split('@').nth(1))
                .and_then(|t| t.split(['(', ' ', '"']).next())
                .unwrap_or("?");
            return Err(Error::InvalidArgument(format!(
                "program: the custom call @{target} has an empty operand and an empty result among several, which crashes this plugin's compiler (the 0.115 CPU plugin divides by zero); skip the call for empty inputs, or use the 0.81 CPU plugin"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_the_compiler_would_crash_on_are_refused_and_ordinary_ones_pass() {
        let deep = |n: usize| format!("{}{}", "module {".repeat(n), "}".repeat(n));
        let cases: Vec<(String, Option<&str>)> = vec![
            ("".into(), Some("empty")),
            (" \n\t ".into(), Some("empty")),
            ("module {}".into(), None),
            (deep(MAX_NESTING), None),
            (deep(MAX_NESTING + 1), Some("nests 2049 levels")),
            (
                format!("x = {}{}", "[".repeat(3000), "]".repeat(3000)),
                Some("nests"),
            ),
            // Braces inside a string literal do not nest.
            (format!("s = \"{}\"", "{".repeat(5000)), None),
            (
                "%a: tensor<4611686018427387904x4xf32>".into(),
                Some("too large"),
            ),
            (
                "%a: tensor<1073741824x1073741824x8xf64>".into(),
                Some("too large"),
            ),
            (
                "%a: tensor<?x4xf32>, %b: tensor<f32>, %c: tensor<0x7xi1>".into(),
                None,
            ),
            ("%a: tensor<1000000x1000000xf32>".into(), None),
            // Empty types: the dims before the first zero are what the compiler pays for.
            ("%a: tensor<2147483647x0xf32>".into(), Some("empty type")),
            (
                "%0 = stablehlo.constant : tensor<8x4194304x0x2xf32>".into(),
                Some("empty type"),
            ),
            ("%a: tensor<0x2147483647xf32>".into(), None),
            ("%a: tensor<4096x4096x0x1000000xf32>".into(), None),
            ("%a: tensor<4097x4096x0xf32>".into(), Some("empty type")),
            ("%a: tensor<5x0x?xf32>".into(), None),
            (
                "%a: tensor<3037000499x3037000499xcomplex<f64>>".into(),
                Some("too large"),
            ),
        ];
        for (program, refused) in cases {
            let shown: String = program.chars().take(40).collect();
            match (check_program(program.as_bytes()), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(words)) => assert!(e.to_string().contains(words), "{shown}: {e}"),
                (got, _) => panic!("{shown}: got {got:?}, expected {refused:?}"),
            }
        }
    }

    #[test]
    fn empty_custom_calls_the_new_cpu_compiler_dies_on_are_refused() {
        let call = |operand: &str, results: &str| {
            format!(
                "  %r:2 = stablehlo.custom_call @lapack_sgesdd_ffi(%a0) {{api_version = 4 : i32}} : ({operand}) -> ({results})"
            )
        };
        let cases = [
            (
                call("tensor<0x3xf32>", "tensor<0x3xf32>, tensor<i32>"),
                true,
            ),
            (call("tensor<0x3xf32>", "tensor<4xf32>, tensor<i32>"), false),
            (
                call("tensor<4x4xf32>", "tensor<4x4xf32>, tensor<0xi32>"),
                false,
            ),
            (call("tensor<0x4xf32>", "tensor<0x4xf32>"), false),
            (
                "%0 = stablehlo.add %a, %b : tensor<0x3xf32> -> (tensor<0xf32>, tensor<0xf32>)"
                    .into(),
                false,
            ),
        ];
        for (line, refused) in cases {
            let got = check_empty_custom_calls(line.as_bytes());
            assert_eq!(got.is_err(), refused, "{line}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().contains("@lapack_sgesdd_ffi"), "{e}");
            }
        }
    }

    #[test]
    fn a_parse_failure_says_which_stablehlo_versions_and_what_to_do() {
        let mut artifact = BYTECODE_MAGIC.to_vec();
        artifact.extend(b"\rStableHLO_v1.15.0\0\x01\x2f");
        assert_eq!(
            artifact_producer(&artifact).as_deref(),
            Some("StableHLO_v1.15.0")
        );
        assert_eq!(artifact_producer(b"module {}"), None);
        let parse = Error::Pjrt {
            function: "PJRT_Client_Compile",
            code: crate::PjrtCode::Unknown,
            message: "error: unregistered operation 'vhlo.composite_v2' found in dialect ('vhlo')\n<unknown>:0: error: Failed to parse using StableHLO v1.13.3, this could indicate forward incompatibility".into(),
            context: None,
        };
        let err = explain_parse_failure(parse, &artifact, "1.13.3");
        let text = err.to_string();
        assert!(matches!(err, Error::StableHloTooNew { .. }), "{err:?}");
        for words in [
            "the plugin's is 1.13.3",
            "written by StableHLO_v1.15.0",
            "0.115 CPU plugin",
            "older target",
        ] {
            assert!(text.contains(words), "{words}: {text}");
        }
        // Malformed text gets the same trailing line from the plugin: it stays the plugin's.
        let malformed = Error::Pjrt {
            function: "PJRT_Client_Compile",
            code: crate::PjrtCode::Unknown,
            message: "-:1:1: error: expected operation name in quotes\n<unknown>:0: error: Failed to parse using StableHLO v1.13.3".into(),
            context: None,
        };
        assert!(matches!(
            explain_parse_failure(malformed, b"garbage", "1.13.3"),
            Error::Pjrt { .. }
        ));
        let other = Error::InvalidArgument("x".into());
        assert!(matches!(
            explain_parse_failure(other, &artifact, "1.13.3"),
            Error::InvalidArgument(_)
        ));
    }

    #[test]
    fn bytecode_is_not_read_as_text() {
        let mut bytecode = BYTECODE_MAGIC.to_vec();
        bytecode.extend(std::iter::repeat_n(b'{', 5000));
        assert!(check_program(&bytecode).is_ok());
    }

    #[test]
    fn element_widths() {
        for (ty, bytes) in [
            ("f32", 4),
            ("bf16", 2),
            ("i1", 1),
            ("ui64", 8),
            ("complex<f64>", 16),
            ("!stablehlo.token", 8),
        ] {
            assert_eq!(element_bytes(ty), bytes, "{ty}");
        }
    }
}
