//! What a program says about its own partitioning, as JAX writes it: `mhlo.num_partitions` and
//! `mhlo.num_replicas` in the module op's own attribute dictionary (nowhere else: not a
//! comment, a string or a function's attributes), and whether it uses Shardy. Read from
//! program text, and from MLIR bytecode (`mlir_bytecode`: its dialects, ops and module).

/// A program's partitioning, as far as it says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramPartitioning {
    pub num_partitions: Option<usize>,
    pub num_replicas: Option<usize>,
    /// Shardy ops or attributes (`sdy.mesh`, `sdy.manual_computation`, `sdy.sharding`): XLA
    /// must use the Shardy partitioner, or it fails an internal check.
    pub shardy: bool,
    /// Bytecode with sharding attributes whose partition count could not be read.
    pub sharded_bytecode: bool,
}

const BYTECODE_MAGIC: &[u8] = b"ML\xefR";
const COUNTS: [&str; 2] = ["mhlo.num_partitions", "mhlo.num_replicas"];

/// A count as the program gives it: zero or negative partitions mean nothing (found by the
/// fuzz target `read_bytecode`), and none are read.
fn count(v: Option<i64>) -> Option<usize> {
    v.and_then(|n| usize::try_from(n).ok()).filter(|&n| n > 0)
}

/// Reads `code`'s partitioning.
pub fn read(code: &[u8]) -> ProgramPartitioning {
    if code.starts_with(BYTECODE_MAGIC) {
        return read_bytecode(code);
    }
    // A memory cache hit reads this per call: `from_utf8` checks UTF-8 (as programs are) faster
    // than the lossy form's own walk, which is left for text that is not.
    let text = match std::str::from_utf8(code) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(code),
    };
    let dictionary = module_dictionary(&text).unwrap_or("");
    let integer = |name: &str| count(dictionary_integer(dictionary, name));
    ProgramPartitioning {
        num_partitions: integer(COUNTS[0]),
        num_replicas: integer(COUNTS[1]),
        // Most programs hold no `sdy.` at all: the comment-aware look only runs where one does.
        shardy: text.contains("sdy.") && {
            let code = code_outside_comments_and_strings(&text);
            code.contains("sdy.mesh") || code.contains("sdy.sharding")
        },
        sharded_bytecode: false,
    }
}

/// Bytecode: the dialects and ops it names say whether it uses Shardy (JAX's bytecode names the
/// `sdy` dialect, and its ops and attributes apart, never `sdy.sharding` whole), and the
/// module op's dictionary gives the counts.
fn read_bytecode(code: &[u8]) -> ProgramPartitioning {
    let summary = crate::mlir_bytecode::summary(code, &COUNTS).unwrap_or_default();
    let num_partitions = count(summary.module_integers.first().copied().flatten());
    let num_replicas = count(summary.module_integers.get(1).copied().flatten());
    // Shardy ops (`sdy.mesh`, `sdy.manual_computation`), or a sharding attribute by name. A
    // LAPACK call's `sdy.sharding_rule` alone is neither.
    let shardy =
        summary.ops.iter().any(|op| op.starts_with("sdy.")) || contains(code, b"\0sdy.sharding\0");
    let sharded = shardy || contains(code, b"\0mhlo.sharding\0");
    ProgramPartitioning {
        num_partitions,
        num_replicas,
        shardy,
        sharded_bytecode: sharded && num_partitions.is_none(),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A cursor over program text that steps over comments and string literals.
struct Text<'a> {
    b: &'a [u8],
    at: usize,
}

impl Text<'_> {
    fn starts(&self, word: &[u8]) -> bool {
        self.b[self.at.min(self.b.len())..].starts_with(word)
    }

    /// Past spaces and `//` comments.
    fn space(&mut self) {
        while self.at < self.b.len() {
            match self.b[self.at] {
                b' ' | b'\t' | b'\r' | b'\n' => self.at += 1,
                b'/' if self.starts(b"//") => {
                    while self.at < self.b.len() && self.b[self.at] != b'\n' {
                        self.at += 1;
                    }
                }
                _ => return,
            }
        }
    }

    /// Past a string literal that starts here (its escapes included).
    fn string(&mut self) {
        self.at += 1;
        while self.at < self.b.len() {
            match self.b[self.at] {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return;
                }
                _ => self.at += 1,
            }
        }
    }

    /// Past a balanced run that ends at `stop` at depth 0 (not consumed), or at the end.
    fn balanced(&mut self, stop: impl Fn(u8) -> bool) {
        let mut depth = 0usize;
        while self.at < self.b.len() {
            let c = self.b[self.at];
            match c {
                b'"' => {
                    self.string();
                    continue;
                }
                b'/' if self.starts(b"//") => {
                    self.space();
                    continue;
                }
                _ if depth == 0 && stop(c) => return,
                b'{' | b'[' | b'(' | b'<' => depth += 1,
                b'}' | b']' | b')' | b'>' => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.at += 1;
        }
    }
}

fn ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.' | b'-')
}

/// The inside of the module op's attribute dictionary in program text (`module @m attributes
/// {...} {`): the first top-level op after the attribute and type aliases, if it is a module
/// with attributes.
fn module_dictionary(text: &str) -> Option<&str> {
    let mut t = Text {
        b: text.as_bytes(),
        at: 0,
    };
    loop {
        t.space();
        match t.b.get(t.at)? {
            // `#alias = ...` and `!alias = ...`: to the end of their line, at depth 0.
            b'#' | b'!' => t.balanced(|c| c == b'\n'),
            _ if t.starts(b"module") && !t.b.get(t.at + 6).copied().is_some_and(ident_char) => {
                t.at += 6;
                break;
            }
            _ => return None,
        }
    }
    t.space();
    if t.starts(b"@") {
        t.at += 1;
        match t.starts(b"\"") {
            true => t.string(),
            false => {
                while t.b.get(t.at).copied().is_some_and(ident_char) {
                    t.at += 1;
                }
            }
        }
        t.space();
    }
    if !t.starts(b"attributes") {
        return None;
    }
    t.at += "attributes".len();
    t.space();
    if !t.starts(b"{") {
        return None;
    }
    t.at += 1;
    let start = t.at;
    t.balanced(|c| c == b'}');
    text.get(start..t.at)
}

/// The integer value of `name` in a dictionary's inside (`a = 1 : i32, "b" = 2 : i64`).
fn dictionary_integer(dictionary: &str, name: &str) -> Option<i64> {
    let mut t = Text {
        b: dictionary.as_bytes(),
        at: 0,
    };
    while t.at < t.b.len() {
        t.space();
        let start = t.at;
        t.balanced(|c| c == b',');
        let entry = dictionary.get(start..t.at)?;
        t.at += 1;
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        if key.trim().trim_matches('"') == name {
            let value = value.trim_start();
            let end = (value.char_indices())
                .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                .map_or(value.len(), |(i, _)| i);
            return value[..end].parse().ok();
        }
    }
    None
}

/// `text` with its comments and string literals left out.
fn code_outside_comments_and_strings(text: &str) -> String {
    let mut t = Text {
        b: text.as_bytes(),
        at: 0,
    };
    let mut out = String::with_capacity(text.len());
    while t.at < t.b.len() {
        let start = t.at;
        while t.at < t.b.len() && t.b[t.at] != b'"' && !t.starts(b"//") {
            t.at += 1;
        }
        out.push_str(text.get(start..t.at).unwrap_or(""));
        out.push(' ');
        match t.starts(b"\"") {
            true => t.string(),
            false => t.space(),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioning_is_read_from_the_module_op_alone() {
        let jax = "#loc1 = loc(\"x.py\":3:4)\nmodule @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n  sdy.mesh @mesh = <[\"d\"=4]>";
        let four = ProgramPartitioning {
            num_partitions: Some(4),
            num_replicas: Some(1),
            shardy: true,
            sharded_bytecode: false,
        };
        let none = ProgramPartitioning::default();
        let cases: [(&str, &ProgramPartitioning); 9] = [
            (jax, &four),
            // A comment saying `= 2` on JAX's 4-way program (it broke its compile).
            (&format!("// mhlo.num_partitions = 2 : i32\n{jax}"), &four),
            ("module { func.func @main() { return } }", &none),
            (
                "module attributes {mhlo.num_partitions = 0 : i32} {}",
                &none,
            ),
            // A doc string and a function's attributes are not the module's.
            (
                "module @m attributes {jax.doc = \"mhlo.num_partitions = 2 : i32\"} {\n  func.func @main() attributes {mhlo.num_partitions = 2 : i32} { return }\n}",
                &none,
            ),
            (
                "module @m {\n  func.func public @main() attributes {mhlo.num_partitions = 2 : i32} { return }\n}",
                &none,
            ),
            // Shardy named only in a comment or a string is not Shardy.
            (
                "module @m {\n  // sdy.mesh @mesh = <[\"d\"=2]>\n  func.func @main() attributes {doc = \"sdy.sharding\"} { return }\n}",
                &none,
            ),
            // A quoted key, and nested values before it.
            (
                "module @m attributes {a = [1, {b = 2}], \"mhlo.num_partitions\" = 2 : i32} {}",
                &ProgramPartitioning {
                    num_partitions: Some(2),
                    ..Default::default()
                },
            ),
            // A program with no module around it says nothing.
            (
                "func.func @main() attributes {mhlo.num_partitions = 2 : i32} { return }",
                &none,
            ),
        ];
        for (code, want) in cases {
            assert_eq!(&read(code.as_bytes()), want, "{code}");
        }
    }

    #[test]
    fn garbage_bytecode_reads_as_saying_nothing() {
        for code in [
            &b"ML\xefR\x06StableHLO\0mhlo.num_partitions\0jax\0"[..],
            b"ML\xefR\x06x\0sdy.sharding_rule\0",
        ] {
            let p = read(code);
            assert_eq!((p.num_partitions, p.shardy), (None, false), "{code:?}");
        }
    }
}
