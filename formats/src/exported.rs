//! JAX's serialized `Exported` (what `jax.export`'s `Exported.serialize()` writes), read from
//! its FlatBuffers schema (jax/_src/export/serialization.fbs, versions 2 to 11) into plain data:
//! the function's name, its input and output trees and types, shardings, platforms, effects,
//! calling convention, the arguments the module keeps, and the module itself.

use std::fmt;

use crate::protos::xla::OpSharding;
use prost::Message as _;

use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::flatbuf::{Table, Vector};
pub use crate::pytree::PyTree;

/// How deep a pytree may nest: a hostile artifact could recurse without end.
const MAX_TREE_DEPTH: usize = 256;

/// One dimension of an argument or result: a number, or a symbolic expression of a
/// shape-polymorphic export (`b`, `2*b + 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    Known(i64),
    Symbolic(String),
}

/// An argument's or result's element type as JAX names it: an array type, or a PRNG key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportedDtype {
    Array(ElementType),
    /// A PRNG key of this implementation (`fry`, `rbg`, `unsafe_rbg`).
    Key(&'static str),
    /// A dtype code this reader does not know (a newer JAX's).
    Unknown(u8),
}

/// An argument's or result's abstract value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aval {
    pub dims: Vec<Dim>,
    pub dtype: ExportedDtype,
    /// Whether it is an effect token rather than an array.
    pub token: bool,
}

/// How an argument or result is sharded, as the artifact says.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportedSharding {
    /// A named sharding: the mesh's (axis name, size)s and, per dimension, the axes splitting it.
    Named {
        mesh: Vec<(String, usize)>,
        spec: Vec<Vec<String>>,
    },
    /// The older form: an XLA HloSharding (boxed: the proto is large).
    Hlo(Box<OpSharding>),
}

/// The `serialization_version`s this reader knows: 2 (the f0 dtype) through 12 (jax 0.11's,
/// which adds the writer's jax version). A newer one may mean fields it would misread.
pub const SERIALIZATION_VERSIONS: std::ops::RangeInclusive<u16> = 2..=12;

/// A serialized `Exported`, read.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The schema version the bytes say: jax 0.10 writes 3 whatever its schema (11), jax 0.11
    /// its true one (12).
    pub serialization_version: u16,
    /// The jax that wrote it, where the artifact says (serialization version 12 on).
    pub jax_version: Option<String>,
    pub function_name: String,
    pub in_tree: PyTree,
    pub out_tree: PyTree,
    pub in_avals: Vec<Aval>,
    pub out_avals: Vec<Aval>,
    pub in_shardings: Vec<Option<ExportedSharding>>,
    pub out_shardings: Vec<Option<ExportedSharding>>,
    pub nr_devices: u32,
    pub platforms: Vec<String>,
    pub ordered_effects: Vec<String>,
    pub unordered_effects: Vec<String>,
    /// Disabled safety checks: `platform`, `shape_assertions`, or `custom_call:TARGET`.
    pub disabled_checks: Vec<String>,
    pub calling_convention_version: u16,
    /// The indices of the function's arguments the module takes (JAX drops unused ones).
    pub module_kept_var_idx: Vec<u16>,
    pub uses_global_constants: bool,
    /// The StableHLO module, as MLIR bytecode.
    pub module: Vec<u8>,
}

pub(crate) fn bad(what: impl fmt::Display) -> Error {
    Error::InvalidArgument(format!("exported artifact: {what}"))
}

/// A vector field's elements through `read`, each required.
fn each<'a, T>(
    v: Option<Vector<'a>>,
    what: &str,
    read: impl Fn(&Vector<'a>, usize) -> Option<T>,
) -> Result<Vec<T>> {
    let Some(v) = v else { return Ok(Vec::new()) };
    (0..v.len())
        .map(|i| read(&v, i).ok_or_else(|| bad(format!("{what} {i} cannot be read"))))
        .collect()
}

/// JAX's dtype codes (serialization.fbs `DType`); those we have no element type for (int4,
/// the fnuz and other 8-bit floats) read as `Unknown`.
fn dtype_of(code: u8) -> ExportedDtype {
    use ElementType::*;
    let array = match code {
        0 => Pred,
        1 => S8,
        2 => S16,
        3 => S32,
        4 => S64,
        5 => U8,
        6 => U16,
        7 => U32,
        8 => U64,
        9 => F16,
        10 => F32,
        11 => F64,
        12 => C64,
        13 => C128,
        14 => BF16,
        18 => F8E4M3FN,
        20 => F8E5M2,
        27 => return ExportedDtype::Key("fry"),
        28 => return ExportedDtype::Key("rbg"),
        29 => return ExportedDtype::Key("unsafe_rbg"),
        other => return ExportedDtype::Unknown(other),
    };
    ExportedDtype::Array(array)
}

fn aval(t: &Table<'_>) -> Result<Aval> {
    let dims = each(t.vector(6, 4), "a dimension", |v, i| v.string(i))?
        .into_iter()
        .map(|d| match d.trim().parse::<i64>() {
            Ok(n) if n >= 0 => Dim::Known(n),
            _ => Dim::Symbolic(d.to_string()),
        })
        .collect();
    Ok(Aval {
        dims,
        dtype: dtype_of(t.u8(8).unwrap_or(0)),
        token: t.u8(4).unwrap_or(0) == 1,
    })
}

/// Reads a pytree. `budget` counts the nodes still allowed: a buffer can point at one node
/// from many places, so a few bytes could otherwise describe a tree of 2^depth nodes.
fn tree(t: &Table<'_>, depth: usize, budget: &mut usize) -> Result<PyTree> {
    if depth > MAX_TREE_DEPTH {
        return Err(bad(format!("a pytree nested past {MAX_TREE_DEPTH} levels")));
    }
    *budget = budget
        .checked_sub(1)
        .ok_or_else(|| bad("a pytree with more nodes than the artifact has bytes"))?;
    let mut children = || -> Result<Vec<PyTree>> {
        each(t.vector(6, 4), "a pytree child", |v, i| v.table(i))?
            .iter()
            .map(|c| tree(c, depth + 1, budget))
            .collect()
    };
    Ok(match t.u8(4).unwrap_or(0) {
        0 => PyTree::Leaf,
        1 => PyTree::None,
        2 => PyTree::Tuple(children()?),
        3 => PyTree::List(children()?),
        4 => {
            let names = each(t.vector(8, 4), "a dict key", |v, i| v.string(i))?;
            let kids = children()?;
            if names.len() != kids.len() {
                return Err(bad("a dict whose keys and values differ in number"));
            }
            PyTree::Dict(names.into_iter().map(String::from).zip(kids).collect())
        }
        5 => PyTree::Custom(t.string(10).unwrap_or("").to_string(), children()?),
        k => return Err(bad(format!("pytree node kind {k} is unknown"))),
    })
}

fn mesh(t: &Table<'_>) -> Result<Vec<(String, usize)>> {
    let sizes = each(t.vector(4, 4), "a mesh axis size", |v, i| v.u32(i))?;
    let names = each(t.vector(6, 4), "a mesh axis name", |v, i| v.string(i))?;
    if sizes.len() != names.len() {
        return Err(bad("a mesh whose axis names and sizes differ in number"));
    }
    Ok(names
        .into_iter()
        .map(String::from)
        .zip(sizes.into_iter().map(|s| s as usize))
        .collect())
}

fn named_sharding(t: &Table<'_>, meshes: &[Vec<(String, usize)>]) -> Result<ExportedSharding> {
    let mesh = match (meshes.is_empty(), t.table(4)) {
        (false, _) => {
            let i = t.u32(10).unwrap_or(0) as usize;
            meshes
                .get(i)
                .cloned()
                .ok_or_else(|| bad(format!("abstract mesh {i} is not there")))?
        }
        (true, Some(m)) => mesh(&m)?,
        (true, None) => return Err(bad("a named sharding without a mesh")),
    };
    let spec = match t.table(6) {
        Some(s) => each(s.vector(4, 4), "a partition", |v, i| v.table(i))?
            .iter()
            .map(|one| {
                let axes = each(one.vector(4, 4), "a partition axis", |v, i| v.string(i))?;
                Ok(axes.into_iter().map(String::from).collect())
            })
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    Ok(ExportedSharding::Named { mesh, spec })
}

impl Exported {
    /// Reads a serialized `Exported`; truncated, garbled or foreign bytes are a typed error.
    pub fn parse(bytes: &[u8]) -> Result<Exported> {
        let e = Table::root(bytes).ok_or_else(|| bad("not a serialized jax.export artifact"))?;
        let version = e.u16(4).unwrap_or(0);
        if !SERIALIZATION_VERSIONS.contains(&version) {
            return Err(bad(format!(
                "serialization version {version}; this reader knows {}..={}",
                SERIALIZATION_VERSIONS.start(),
                SERIALIZATION_VERSIONS.end()
            )));
        }
        let function_name = e
            .string(6)
            .ok_or_else(|| bad("no function name"))?
            .to_string();
        let module = e
            .vector(30, 1)
            .ok_or_else(|| bad("no module"))?
            .as_bytes()
            .to_vec();
        let tables = |slot| each(e.vector(slot, 4), "an entry", |v, i| v.table(i));
        let indices = |slot| each(e.vector(slot, 4), "an index", |v, i| v.u32(i));
        let unique_avals = tables(42)?.iter().map(aval).collect::<Result<Vec<_>>>()?;
        let meshes = tables(44)?.iter().map(mesh).collect::<Result<Vec<_>>>()?;
        let unique_shardings = (tables(46)?.iter())
            .map(|t| named_sharding(t, &meshes))
            .collect::<Result<Vec<_>>>()?;
        // Newer artifacts index into the unique lists; older ones list each in place.
        let avals = |idx_slot, list_slot| -> Result<Vec<Aval>> {
            let idx = indices(idx_slot)?;
            if idx.is_empty() {
                return tables(list_slot)?.iter().map(aval).collect();
            }
            (idx.iter())
                .map(|&i| {
                    (unique_avals.get(i as usize).cloned())
                        .ok_or_else(|| bad(format!("aval {i} is not there")))
                })
                .collect()
        };
        let shardings = |idx_slot, list_slot| -> Result<Vec<Option<ExportedSharding>>> {
            let idx = indices(idx_slot)?;
            if idx.is_empty() {
                return (tables(list_slot)?.iter())
                    .map(|s| match (s.table(8), s.vector(6, 1)) {
                        (Some(n), _) => named_sharding(&n, &meshes).map(Some),
                        (None, Some(proto)) => OpSharding::decode(proto.as_bytes())
                            .map(|p| Some(ExportedSharding::Hlo(Box::new(p))))
                            .map_err(|e| bad(format!("an HloSharding proto: {e}"))),
                        (None, None) => Ok(None),
                    })
                    .collect();
            }
            (idx.iter())
                .map(|&i| match i {
                    0 => Ok(None),
                    i => (unique_shardings.get(i as usize - 1).cloned().map(Some))
                        .ok_or_else(|| bad(format!("sharding {i} is not there"))),
                })
                .collect()
        };
        let strings = |slot, what: &str| -> Result<Vec<String>> {
            Ok(each(e.vector(slot, 4), what, |v, i| v.string(i))?
                .into_iter()
                .map(String::from)
                .collect())
        };
        let effects = |slot| -> Result<Vec<String>> {
            Ok(each(e.vector(slot, 4), "an effect", |v, i| v.table(i))?
                .iter()
                .map(|t| t.string(4).unwrap_or("").to_string())
                .collect())
        };
        let disabled_checks = (each(e.vector(28, 4), "a disabled check", |v, i| v.table(i))?)
            .iter()
            .map(|t| match t.u8(4).unwrap_or(0) {
                0 => "platform".to_string(),
                1 => format!("custom_call:{}", t.string(6).unwrap_or("")),
                2 => "shape_assertions".to_string(),
                k => format!("unknown check {k}"),
            })
            .collect();
        let mut budget = bytes.len();
        let kept = e.vector(34, 2);
        let module_kept_var_idx = each(kept, "a kept argument", |v, i| v.u16(i))?;
        let exported = Exported {
            serialization_version: version,
            jax_version: e.string(56).map(String::from),
            function_name,
            in_tree: tree(
                &e.table(8).ok_or_else(|| bad("no input tree"))?,
                0,
                &mut budget,
            )?,
            out_tree: tree(
                &e.table(12).ok_or_else(|| bad("no output tree"))?,
                0,
                &mut budget,
            )?,
            in_avals: avals(48, 10)?,
            out_avals: avals(50, 14)?,
            in_shardings: shardings(52, 18)?,
            out_shardings: shardings(54, 20)?,
            nr_devices: e
                .u32(40)
                .filter(|&n| n > 0)
                .or(e.i16(16).map(|n| n as u32))
                .unwrap_or(1),
            platforms: strings(22, "a platform")?,
            ordered_effects: effects(24)?,
            unordered_effects: effects(26)?,
            disabled_checks,
            calling_convention_version: e.u16(32).unwrap_or(0),
            module_kept_var_idx,
            uses_global_constants: e.bool(36).unwrap_or(false),
            module,
        };
        exported.check()?;
        Ok(exported)
    }

    /// The input leaves' paths as `jax.tree_util.keystr` writes them, argument position first:
    /// `[0]['layer0']['w']`.
    pub fn in_paths(&self) -> Vec<String> {
        self.in_tree.paths()
    }

    pub fn out_paths(&self) -> Vec<String> {
        self.out_tree.paths()
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Symbolic(s) => write!(f, "{s}"),
        }
    }
}

impl fmt::Display for Aval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.token {
            return write!(f, "token");
        }
        let dims: Vec<String> = self.dims.iter().map(Dim::to_string).collect();
        match self.dtype {
            ExportedDtype::Array(t) => write!(f, "{t}[{}]", dims.join(",")),
            ExportedDtype::Key(k) => write!(f, "key<{k}>[{}]", dims.join(",")),
            ExportedDtype::Unknown(c) => write!(f, "dtype#{c}[{}]", dims.join(",")),
        }
    }
}

impl fmt::Display for ExportedSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportedSharding::Named { mesh, spec } => {
                let mesh: Vec<String> = mesh.iter().map(|(n, s)| format!("'{n}': {s}")).collect();
                let spec: Vec<String> = (spec.iter())
                    .map(|axes| match axes.as_slice() {
                        [] => "None".to_string(),
                        [one] => format!("'{one}'"),
                        many => format!(
                            "({})",
                            many.iter()
                                .map(|a| format!("'{a}'"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })
                    .collect();
                write!(
                    f,
                    "NamedSharding(mesh={{{}}}, spec=P({}))",
                    mesh.join(", "),
                    spec.join(", ")
                )
            }
            ExportedSharding::Hlo(op) => write!(f, "HloSharding({op:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `levels` tuple nodes, each pointing twice at the next (offsets only run
    /// forward, so a buffer cannot loop, but it can share): 2^levels leaves in a few bytes.
    fn shared_chain(levels: usize) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(16u32.to_le_bytes()); // the root: the first node
        for v in [8u16, 24, 4, 8] {
            b.extend(v.to_le_bytes()); // one vtable for every node: kind at +4, children at +8
        }
        b.extend([0; 4]);
        for k in 0..levels {
            let pos = b.len();
            b.extend(((pos - 4) as i32).to_le_bytes());
            let kind = if k + 1 == levels { 0u8 } else { 2 }; // the last is a leaf
            b.extend([kind, 0, 0, 0]);
            b.extend(4u32.to_le_bytes()); // children: the vector just after
            b.extend(2u32.to_le_bytes());
            b.extend(8u32.to_le_bytes()); // both children: the next node, 24 bytes on
            b.extend(4u32.to_le_bytes());
        }
        b
    }

    #[test]
    fn a_tree_that_shares_its_nodes_cannot_grow_past_the_artifact() {
        let small = shared_chain(3);
        let t = Table::root(&small).unwrap();
        let mut budget = small.len();
        assert_eq!(tree(&t, 0, &mut budget).unwrap().leaves(), 4);
        let hostile = shared_chain(60);
        let t = Table::root(&hostile).unwrap();
        let start = std::time::Instant::now();
        let err = tree(&t, 0, &mut hostile.len()).unwrap_err();
        assert!(err.to_string().contains("more nodes"), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }
}
