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

// The builtin dialect's type codes (MLIR's BuiltinDialectBytecode.td).
const BF16: u64 = 3;
const F16: u64 = 4;
const F32: u64 = 5;
const F64: u64 = 6;
const COMPLEX: u64 = 9;
const RANKED_TENSOR: u64 = 13;
const RANKED_TENSOR_WITH_ENCODING: u64 = 14;
const INTEGER: u64 = 0;
// The portable (vhlo) dialect's type codes (StableHLO's VhloBytecode.cpp): JAX's serialized
// programs are written in it.
const VHLO_BOOLEAN: u64 = 0;
const VHLO_COMPLEX: u64 = 1;
const VHLO_BF16: u64 = 2;
const VHLO_F16: u64 = 3;
const VHLO_F32: u64 = 4;
const VHLO_F64: u64 = 5;
const VHLO_RANKED_TENSOR: u64 = 20;
const VHLO_RANKED_TENSOR_WITH_ENCODING: u64 = 21;

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
        match self.types.get(index)? {
            (d, Some(bytes)) if Some(*d) == self.builtin => {
                let mut r = Reader::new(bytes);
                match r.varint()? {
                    INTEGER => {
                        // Width and signedness: width << 2 | signedness (0 signless, 1 signed,
                        // 2 unsigned).
                        let v = r.varint()?;
                        let prefix = match v & 3 {
                            0 => "i",
                            1 => "si",
                            _ => "ui",
                        };
                        Some(format!("{prefix}{}", v >> 2))
                    }
                    BF16 => Some("bf16".into()),
                    F16 => Some("f16".into()),
                    F32 => Some("f32".into()),
                    F64 => Some("f64".into()),
                    COMPLEX => Some(format!(
                        "complex<{}>",
                        self.element_type_at(r.index()?, depth + 1)?
                    )),
                    code @ (RANKED_TENSOR | RANKED_TENSOR_WITH_ENCODING) => self.tensor_element(
                        &mut r,
                        code == RANKED_TENSOR_WITH_ENCODING,
                        bytes.len(),
                        depth,
                    ),
                    _ => None,
                }
            }
            (d, Some(bytes)) if Some(*d) == self.vhlo => {
                let mut r = Reader::new(bytes);
                match r.varint()? {
                    VHLO_BOOLEAN => Some("i1".into()),
                    VHLO_BF16 => Some("bf16".into()),
                    VHLO_F16 => Some("f16".into()),
                    VHLO_F32 => Some("f32".into()),
                    VHLO_F64 => Some("f64".into()),
                    VHLO_COMPLEX => Some(format!(
                        "complex<{}>",
                        self.element_type_at(r.index()?, depth + 1)?
                    )),
                    code @ (VHLO_RANKED_TENSOR | VHLO_RANKED_TENSOR_WITH_ENCODING) => self
                        .tensor_element(
                            &mut r,
                            code == VHLO_RANKED_TENSOR_WITH_ENCODING,
                            bytes.len(),
                            depth,
                        ),
                    _ => None,
                }
            }
            // A type without a bytecode encoding is kept as its text: `tensor<4xf64>`.
            (_, None) => text_element_type(self.texts.get(index)?),
            _ => None,
        }
    }
}

impl Walk<'_, '_> {
    /// A ranked tensor type's element type: past its encoding (if any) and its shape.
    fn tensor_element(
        &self,
        r: &mut Reader<'_>,
        encoded: bool,
        len: usize,
        depth: usize,
    ) -> Option<String> {
        if encoded {
            r.varint()?; // the encoding attribute
        }
        let rank = r.varint()?;
        if rank > len as u64 {
            return None;
        }
        for _ in 0..rank {
            r.signed_varint()?;
        }
        self.element_type_at(r.index()?, depth + 1)
    }
}

/// The element type a type's text names: `f64` of `tensor<4x4xf64>`, `f32` itself.
fn text_element_type(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text.strip_suffix(b"\0").unwrap_or(text)).ok()?;
    let inner = match text.strip_prefix("tensor<") {
        Some(rest) => rest.strip_suffix('>')?,
        None => text,
    };
    // The element type follows the last `x` of the shape that is outside angle brackets.
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            'x' if depth == 0
                && inner[start..i]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '?') =>
            {
                start = i + 1
            }
            _ => {}
        }
    }
    Some(inner[start..].trim().to_string())
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
        let cases: [(&[u8], &str); 5] = [
            (b"tensor<4x4xf64>\0", "f64"),
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
