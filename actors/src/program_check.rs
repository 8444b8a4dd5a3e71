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

/// Refuses a `tensor<…>` type whose byte size does not fit in 63 bits (XLA computes it in an
/// `int64_t` and throws, through the C API, when it overflows), or an empty one whose dims
/// before its first zero multiply past `MAX_EMPTY_LEADING`.
fn check_tensor_sizes(code: &[u8]) -> std::result::Result<(), String> {
    let text = String::from_utf8_lossy(code);
    let mut rest: &str = &text;
    while let Some(at) = rest.find("tensor<") {
        rest = &rest[at + "tensor<".len()..];
        let end = rest.find(['>', '\n']).unwrap_or(rest.len());
        // Element types such as `complex<f32>` hold a `<`: take the type up to its own `>`.
        let ty_end = match rest[..end].find('<') {
            Some(_) => rest.find(">>").map_or(end, |e| e + 1),
            None => end,
        };
        let parts: Vec<&str> = rest[..ty_end].split('x').collect();
        let (dims, element) = parts.split_at(parts.len().saturating_sub(1));
        let mut bytes: u128 = element.first().map_or(8, |e| element_bytes(e));
        // The product of the dims before the first zero, once one is seen.
        let (mut leading, mut empty) = (1u128, false);
        for dim in dims {
            let dim = dim.trim();
            if dim == "?" || dim.is_empty() {
                continue;
            }
            let Ok(n) = dim.parse::<u128>() else {
                break; // not a shape (an encoding, say): nothing to check
            };
            bytes = bytes.saturating_mul(n);
            empty |= n == 0;
            if !empty {
                leading = leading.saturating_mul(n);
            }
        }
        if empty && leading > MAX_EMPTY_LEADING {
            let shown: String = rest[..ty_end].chars().take(80).collect();
            return Err(format!(
                "the empty type tensor<{shown}> has {leading} elements' worth of dims before its zero, past the {MAX_EMPTY_LEADING} the compiler handles in bounded time and memory: put the zero dim first, or make the others smaller"
            ));
        }
        if bytes > i64::MAX as u128 {
            let shown: String = rest[..ty_end].chars().take(80).collect();
            return Err(format!(
                "the type tensor<{shown}> is too large: its byte size does not fit in 63 bits"
            ));
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
