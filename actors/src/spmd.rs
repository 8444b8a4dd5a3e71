//! What a program says about its own partitioning, as JAX writes it: `mhlo.num_partitions` and
//! `mhlo.num_replicas` on the module, and Shardy's `sdy.*` attributes. Read from program text,
//! and from MLIR bytecode (`mlir_bytecode`: the module's builtin integer attributes).

/// A program's partitioning, as far as it says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramPartitioning {
    pub num_partitions: Option<usize>,
    pub num_replicas: Option<usize>,
    /// Shardy attributes (`sdy.mesh`, `sdy.sharding`): XLA must use the Shardy partitioner,
    /// or it fails an internal check.
    pub shardy: bool,
    /// Bytecode with sharding attributes whose partition count could not be read.
    pub sharded_bytecode: bool,
}

const BYTECODE_MAGIC: &[u8] = b"ML\xefR";

/// Reads `code`'s partitioning.
pub fn read(code: &[u8]) -> ProgramPartitioning {
    if code.starts_with(BYTECODE_MAGIC) {
        // Bytecode keeps attribute names in its string table, NUL-terminated.
        let sharded = contains(code, b"\0sdy.sharding\0") || contains(code, b"\0mhlo.sharding\0");
        let counts = crate::mlir_bytecode::integer_attributes(
            code,
            &["mhlo.num_partitions", "mhlo.num_replicas"],
        );
        let count = |v: Option<i64>| v.and_then(|n| usize::try_from(n).ok()).filter(|&n| n > 0);
        let num_partitions = count(counts[0]);
        return ProgramPartitioning {
            num_partitions,
            num_replicas: count(counts[1]),
            shardy: contains(code, b"\0sdy.sharding\0"),
            sharded_bytecode: sharded && num_partitions.is_none(),
        };
    }
    // A memory cache hit reads this per call: `from_utf8` checks UTF-8 (as programs are) faster
    // than the lossy form's own walk, which is left for text that is not.
    let text = match std::str::from_utf8(code) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(code),
    };
    ProgramPartitioning {
        num_partitions: attribute(&text, "mhlo.num_partitions"),
        num_replicas: attribute(&text, "mhlo.num_replicas"),
        shardy: text.contains("sdy.mesh") || text.contains("sdy.sharding"),
        sharded_bytecode: false,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `NAME = 4 : i32` on the module: the integer after the first `NAME = `.
fn attribute(text: &str, name: &str) -> Option<usize> {
    let at =
        (text.match_indices(name)).find(|(at, _)| text[at + name.len()..].starts_with(" = "))?;
    let rest = &text[at.0 + name.len() + 3..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    // Zero partitions means nothing (found by the fuzz target `read_bytecode`); none are read.
    digits.parse().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioning_is_read_from_text_and_recognised_in_bytecode() {
        let jax = "module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n  sdy.mesh @mesh = <[\"d\"=4]>";
        let cases: [(&[u8], ProgramPartitioning); 5] = [
            (
                jax.as_bytes(),
                ProgramPartitioning {
                    num_partitions: Some(4),
                    num_replicas: Some(1),
                    shardy: true,
                    sharded_bytecode: false,
                },
            ),
            (
                b"module { func.func @main() { return } }",
                ProgramPartitioning::default(),
            ),
            (
                b"module attributes {mhlo.num_partitions = 0 : i32} {}",
                ProgramPartitioning::default(),
            ),
            (
                b"ML\xefR\x06StableHLO\0mhlo.num_partitions\0sdy.sharding\0jax\0",
                ProgramPartitioning {
                    shardy: true,
                    sharded_bytecode: true,
                    ..Default::default()
                },
            ),
            // A LAPACK call's `sdy.sharding_rule` is not a sharded program.
            (
                b"ML\xefR\x06x\0sdy.sharding_rule\0",
                ProgramPartitioning::default(),
            ),
        ];
        for (code, want) in cases {
            assert_eq!(read(code), want, "{}", String::from_utf8_lossy(code));
        }
    }
}
