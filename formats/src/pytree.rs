//! A pytree's structure as `jax.tree_util` flattens it: its leaves in order, and each leaf's
//! key path as `jax.tree_util.keystr` writes it (`[0]['layer0']['w']`).

/// A pytree's structure, as `jax.tree_util` flattens it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PyTree {
    Leaf,
    None,
    Tuple(Vec<PyTree>),
    List(Vec<PyTree>),
    Dict(Vec<(String, PyTree)>),
    /// A registered custom node (a namedtuple, a dataclass) by its serialization name.
    Custom(String, Vec<PyTree>),
}

impl PyTree {
    /// How many leaves the tree has.
    pub fn leaves(&self) -> usize {
        match self {
            PyTree::Leaf => 1,
            PyTree::None => 0,
            PyTree::Tuple(c) | PyTree::List(c) | PyTree::Custom(_, c) => {
                c.iter().map(PyTree::leaves).sum()
            }
            PyTree::Dict(c) => c.iter().map(|(_, t)| t.leaves()).sum(),
        }
    }

    /// Each leaf's key path, in flattening order.
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_paths(String::new(), &mut out);
        out
    }

    fn collect_paths(&self, at: String, out: &mut Vec<String>) {
        match self {
            PyTree::Leaf => out.push(at),
            PyTree::None => {}
            PyTree::Tuple(c) | PyTree::List(c) | PyTree::Custom(_, c) => {
                for (i, t) in c.iter().enumerate() {
                    t.collect_paths(format!("{at}[{i}]"), out);
                }
            }
            PyTree::Dict(c) => {
                for (k, t) in c {
                    t.collect_paths(format!("{at}['{k}']"), out);
                }
            }
        }
    }
}
