//! Every operation in an MLIR bytecode program with the element types of its results: the IR
//! section walked op by op (regions, blocks, isolated-region sections, use-list orders), each
//! result's type read from the type table (builtin types by their codes, others by their text).
//! Hostile or unknown bytes read as `None`, never a panic.

use super::mlir_bytecode::{
    ATTR_OFFSETS, ATTRS, ELIDE_UNKNOWN_BLOCK_ARG_LOCATION, Entry, HAS_ATTRS, IR, Reader, read_names,
};

// The op encoding mask (MLIR's Encoding.h), past `HAS_ATTRS`.
const HAS_RESULTS: u8 = 0x02;
const HAS_OPERANDS: u8 = 0x04;
const HAS_SUCCESSORS: u8 = 0x08;
const HAS_REGIONS: u8 = 0x10;
const HAS_USE_LIST_ORDERS: u8 = 0x20;
const HAS_PROPERTIES: u8 = 0x40;
// Bytecode versions: isolated regions in their own section, use-list orders.
const LAZY_LOADING: u64 = 2;
const USE_LIST_ORDERING: u64 = 3;
/// Regions nested deeper than this are not followed (the reader gives up: `None`).
const MAX_DEPTH: usize = 512;

/// One dialect's type codes, as far as an element type needs them.
struct TypeCodes {
    /// Scalar types by code, as MLIR writes them.
    scalars: &'static [(u64, &'static str)],
    /// The code of an integer type whose width and signedness follow (builtin only).
    integer: Option<u64>,
    complex: u64,
    ranked_tensor: u64,
    ranked_tensor_with_encoding: u64,
}

/// The builtin dialect's (MLIR's BuiltinDialectBytecode.td).
const BUILTIN: TypeCodes = TypeCodes {
    scalars: &[(3, "bf16"), (4, "f16"), (5, "f32"), (6, "f64")],
    integer: Some(0),
    complex: 9,
    ranked_tensor: 13,
    ranked_tensor_with_encoding: 14,
};

/// The portable (vhlo) dialect's (StableHLO's VhloBytecode.cpp): JAX's serialized programs are
/// written in it.
const VHLO: TypeCodes = TypeCodes {
    scalars: &[(0, "i1"), (2, "bf16"), (3, "f16"), (4, "f32"), (5, "f64")],
    integer: None,
    complex: 1,
    ranked_tensor: 20,
    ranked_tensor_with_encoding: 21,
};

/// One operation: its name (`chlo.atan`) and its results' element types as MLIR writes them
/// (`f64`, `i32`, `complex<f32>`; `?` where the type table could not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpTypes {
    pub name: String,
    pub results: Vec<String>,
}

/// Every operation of `code`, in the order the program holds them; `None` where the bytecode
/// cannot be read to its end.
pub fn ops_with_result_types(code: &[u8]) -> Option<Vec<OpTypes>> {
    let names = read_names(code)?;
    let table =
        super::mlir_bytecode::attributes(names.section(ATTR_OFFSETS)?, names.section(ATTRS)?)?;
    let builtin = names.dialects.iter().position(|d| d == "builtin");
    let vhlo = names.dialects.iter().position(|d| d == "vhlo");
    let mut walk = Walk {
        version: names.version,
        ops: &names.ops,
        types: &table.types,
        texts: &table.type_bytes,
        builtin,
        vhlo,
        found: Vec::new(),
    };
    let mut ir = Reader::new(names.section(IR)?);
    // The top level is one block (the module's), with no arguments.
    let (count, args) = walk.block_header(&mut ir)?;
    if args {
        return None;
    }
    for _ in 0..count {
        walk.op(&mut ir, 0)?;
    }
    Some(walk.found)
}

struct Walk<'w, 'a> {
    version: u64,
    ops: &'w [String],
    types: &'w [Entry<'a>],
    texts: &'w [&'a [u8]],
    builtin: Option<usize>,
    vhlo: Option<usize>,
    found: Vec<OpTypes>,
}

/// A varint whose low bit is a flag.
fn with_flag(r: &mut Reader<'_>) -> Option<(u64, bool)> {
    let v = r.varint()?;
    Some((v >> 1, v & 1 == 1))
}

impl Walk<'_, '_> {
    /// A block's header: its op count and whether it had arguments (read past, with their
    /// use-list orders).
    fn block_header(&self, r: &mut Reader<'_>) -> Option<(u64, bool)> {
        let (count, has_args) = with_flag(r)?;
        if count > r.bytes_left() as u64 {
            return None;
        }
        if has_args {
            let n = r.varint()?;
            if n > r.bytes_left() as u64 {
                return None;
            }
            for _ in 0..n {
                if self.version >= ELIDE_UNKNOWN_BLOCK_ARG_LOCATION {
                    let (_ty, has_loc) = with_flag(r)?;
                    if has_loc {
                        r.varint()?;
                    }
                } else {
                    r.varint()?;
                    r.varint()?;
                }
            }
            if self.version >= USE_LIST_ORDERING && r.byte()? != 0 {
                use_list_orders(r, n)?;
            }
        }
        Some((count, has_args))
    }

    fn region(&mut self, r: &mut Reader<'_>, depth: usize) -> Option<()> {
        let blocks = r.varint()?;
        if blocks == 0 {
            return Some(());
        }
        if blocks > r.bytes_left() as u64 {
            return None;
        }
        r.varint()?; // values defined in the region
        for _ in 0..blocks {
            let (count, _) = self.block_header(r)?;
            for _ in 0..count {
                self.op(r, depth)?;
            }
        }
        Some(())
    }

    fn op(&mut self, r: &mut Reader<'_>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let name = self.ops.get(r.index()?)?.clone();
        let mask = r.byte()?;
        r.varint()?; // location
        if mask & HAS_ATTRS != 0 {
            r.varint()?;
        }
        if mask & HAS_PROPERTIES != 0 {
            r.varint()?; // an index into the properties section, or an attribute
        }
        let mut results = Vec::new();
        if mask & HAS_RESULTS != 0 {
            let n = r.varint()?;
            if n > r.bytes_left() as u64 {
                return None;
            }
            for _ in 0..n {
                results.push(self.element_type(r.index()?));
            }
        }
        for bit in [HAS_OPERANDS, HAS_SUCCESSORS] {
            if mask & bit != 0 {
                let n = r.varint()?;
                if n > r.bytes_left() as u64 {
                    return None;
                }
                for _ in 0..n {
                    r.varint()?;
                }
            }
        }
        if self.version >= USE_LIST_ORDERING && mask & HAS_USE_LIST_ORDERS != 0 {
            use_list_orders(r, results.len() as u64)?;
        }
        self.found.push(OpTypes { name, results });
        if mask & HAS_REGIONS != 0 {
            let (regions, isolated) = with_flag(r)?;
            if regions > r.bytes_left() as u64 {
                return None;
            }
            if isolated && self.version >= LAZY_LOADING {
                // All of an isolated op's regions lie in one nested IR section.
                let (id, bytes) = r.section()?;
                if id != IR {
                    return None;
                }
                let mut inner = Reader::new(bytes);
                for _ in 0..regions {
                    self.region(&mut inner, depth + 1)?;
                }
            } else {
                for _ in 0..regions {
                    self.region(r, depth + 1)?;
                }
            }
        }
        Some(())
    }

    /// A result type's element type, as MLIR writes it; `?` where it cannot be read.
    fn element_type(&self, index: usize) -> String {
        self.element_type_at(index, 0)
            .unwrap_or_else(|| "?".to_string())
    }

    fn element_type_at(&self, index: usize, depth: usize) -> Option<String> {
        if depth > 8 {
            return None;
        }
        let (dialect, bytes) = match self.types.get(index)? {
            // A type without a bytecode encoding is kept as its text: `tensor<4xf64>`.
            (_, None) => return text_element_type(self.texts.get(index)?),
            (d, Some(bytes)) => (Some(*d), *bytes),
        };
        let codes = match dialect {
            d if d == self.builtin => &BUILTIN,
            d if d == self.vhlo => &VHLO,
            _ => return None,
        };
        let mut r = Reader::new(bytes);
        let code = r.varint()?;
        if let Some(&(_, name)) = codes.scalars.iter().find(|(c, _)| *c == code) {
            return Some(name.into());
        }
        if codes.integer == Some(code) {
            // Width and signedness: width << 2 | signedness (0 signless, 1 signed, 2 unsigned).
            let v = r.varint()?;
            let prefix = match v & 3 {
                0 => "i",
                1 => "si",
                _ => "ui",
            };
            return Some(format!("{prefix}{}", v >> 2));
        }
        if code == codes.complex {
            let inner = self.element_type_at(r.index()?, depth + 1)?;
            return Some(format!("complex<{inner}>"));
        }
        if code == codes.ranked_tensor || code == codes.ranked_tensor_with_encoding {
            if code == codes.ranked_tensor_with_encoding {
                r.varint()?; // the encoding attribute
            }
            let rank = r.varint()?;
            if rank > bytes.len() as u64 {
                return None;
            }
            for _ in 0..rank {
                r.signed_varint()?;
            }
            return self.element_type_at(r.index()?, depth + 1);
        }
        None
    }
}

/// The element type a type's text names: `f64` of `tensor<4x4xf64>`, `f32` itself.
fn text_element_type(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text.strip_suffix(b"\0").unwrap_or(text)).ok()?;
    let inner = match text.strip_prefix("tensor<") {
        Some(rest) => rest.strip_suffix('>')?,
        None => text,
    };
    Some(shaped_element(inner).to_string())
}

/// The element type of a shaped type's body (`20x?xcomplex<f32>` → `complex<f32>`): what follows
/// the last `x` of the dims outside angle brackets, up to an encoding's comma. The text readers
/// of programs share it.
pub(crate) fn shaped_element(body: &str) -> &str {
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in body.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            'x' if depth == 0
                && body[start..i]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '?') =>
            {
                start = i + 1
            }
            _ => {}
        }
    }
    body[start..].split(',').next().unwrap_or("").trim()
}

/// Use-list orders for `values` results or arguments: read past.
fn use_list_orders(r: &mut Reader<'_>, values: u64) -> Option<()> {
    let entries = if values > 1 { r.varint()? } else { 1 };
    if entries > r.bytes_left() as u64 {
        return None;
    }
    for _ in 0..entries {
        if values > 1 {
            r.varint()?; // which value
        }
        let (n, _pairs) = with_flag(r)?;
        if n > r.bytes_left() as u64 {
            return None;
        }
        for _ in 0..n {
            r.varint()?;
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_read_from_text() {
        let cases: [(&[u8], &str); 6] = [
            (b"tensor<4x4xf64>\0", "f64"),
            (b"tensor<4xf32, #sparse>", "f32"),
            (b"tensor<f32>", "f32"),
            (b"tensor<2xcomplex<f64>>", "complex<f64>"),
            (b"tensor<?x3xi1>", "i1"),
            (b"bf16", "bf16"),
        ];
        for (text, want) in cases {
            assert_eq!(text_element_type(text).as_deref(), Some(want), "{text:?}");
        }
    }

    fn data(path: &str) -> Vec<u8> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
        std::fs::read(root.join(path)).unwrap()
    }

    #[test]
    fn plain_bytecode_names_each_op_with_its_result_type() {
        // Written by jaxlib's MLIR bindings (scripts/known-defects-data): chlo kept as written.
        for ty in ["f64", "f32"] {
            let ops = ops_with_result_types(&data(&format!("known_defects/atan_{ty}.mlirbc")));
            let names: Vec<(String, Vec<String>)> = (ops.unwrap().into_iter())
                .map(|o| (o.name, o.results))
                .collect();
            assert_eq!(
                names,
                [
                    ("builtin.module".to_string(), vec![]),
                    ("func.func".to_string(), vec![]),
                    ("chlo.atan".to_string(), vec![ty.to_string()]),
                    ("func.return".to_string(), vec![]),
                ]
            );
        }
    }

    #[test]
    fn jaxs_sharded_bytecode_reads_to_its_end_with_typed_results() {
        for name in ["all_reduce", "all_gather", "dp_mlp"] {
            let ops = ops_with_result_types(&data(&format!("spmd/{name}.mlirbc"))).unwrap();
            // A portable artifact: vhlo ops and types, sdy's ops among them, the last op read.
            assert!(
                (ops.iter())
                    .any(|o| o.name.starts_with("vhlo.") && o.results.iter().any(|t| t == "f32")),
                "{name}: {ops:?}"
            );
            assert!(ops.iter().any(|o| o.name == "sdy.mesh"), "{name}");
            assert!(
                ops.last()
                    .is_some_and(|o| o.name.starts_with("vhlo.return")),
                "{name}: {ops:?}"
            );
        }
    }

    #[test]
    fn cut_or_flipped_bytecode_never_panics() {
        let code = data("spmd/dp_mlp.mlirbc");
        for n in 0..code.len() {
            let _ = ops_with_result_types(&code[..n]);
        }
        let mut flipped = code.clone();
        for i in (8..flipped.len()).step_by(7) {
            flipped[i] ^= 0x5a;
            let _ = ops_with_result_types(&flipped);
        }
    }
}
