//! Shardings as plain data: how one global array is laid out over devices. A `Sharding` is
//! HloSharding's tiled form (each dimension cut into even tiles, each tile held by the same
//! number of devices); `Mesh` and `PartitionSpec` build one as JAX's `NamedSharding` does, and
//! the compiler's `OpSharding` protos convert to one. Plain data with unit tables, no plugin;
//! the bytes of each shard are cut and placed by `shard_blocks`.

use std::fmt;
use std::ops::Range;

use crate::protos::xla::{HloModuleProto, OpSharding, op_sharding};

use crate::error::{Error, Result};
use crate::shard_blocks::strides;

/// A device mesh: named axes with sizes, and the device ids in mesh (row-major) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mesh {
    axes: Vec<(String, usize)>,
    devices: Vec<i32>,
}

/// Per array dimension, the mesh axes that split it (none: not split), as JAX's
/// `PartitionSpec`; dimensions past its end are not split.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionSpec(pub Vec<Vec<String>>);

impl PartitionSpec {
    /// `PartitionSpec::new(&[&["data"], &[]])` is JAX's `P("data", None)`.
    pub fn new(dims: &[&[&str]]) -> PartitionSpec {
        PartitionSpec(
            dims.iter()
                .map(|axes| axes.iter().map(|a| a.to_string()).collect())
                .collect(),
        )
    }
}

fn bad(message: String) -> Error {
    Error::InvalidArgument(format!("sharding: {message}"))
}

impl Mesh {
    /// A mesh of `axes` (name, size) over `devices`, row-major.
    pub fn new(axes: &[(&str, usize)], devices: &[i32]) -> Result<Mesh> {
        let size: usize = axes.iter().map(|(_, n)| *n).product();
        if axes.iter().any(|(_, n)| *n == 0) || size != devices.len() {
            return Err(bad(format!(
                "a mesh of shape {:?} needs {size} devices, {} given",
                axes.iter().map(|(_, n)| n).collect::<Vec<_>>(),
                devices.len()
            )));
        }
        for (i, (name, _)) in axes.iter().enumerate() {
            if axes[..i].iter().any(|(n, _)| n == name) {
                return Err(bad(format!("mesh axis `{name}` appears twice")));
            }
        }
        if let Some(d) = duplicate(devices) {
            return Err(bad(format!("device {d} appears twice in the mesh")));
        }
        Ok(Mesh {
            axes: axes.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
            devices: devices.to_vec(),
        })
    }

    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    pub fn devices(&self) -> &[i32] {
        &self.devices
    }
}

fn duplicate(devices: &[i32]) -> Option<i32> {
    let mut seen = std::collections::HashSet::new();
    devices.iter().copied().find(|d| !seen.insert(*d))
}

/// The elements of the row-major array `items` of `shape`, transposed by `perm` (output axis
/// `i` is input axis `perm[i]`), row-major.
fn transpose<T: Copy>(items: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let from = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut out = Vec::with_capacity(items.len());
    let mut index = vec![0usize; shape.len()];
    for _ in 0..items.len() {
        let at: usize = (0..perm.len()).map(|i| index[i] * from[perm[i]]).sum();
        out.push(items[at]);
        for i in (0..index.len()).rev() {
            index[i] += 1;
            if index[i] < out_shape[i] {
                break;
            }
            index[i] = 0;
        }
    }
    out
}

/// How an array is laid out over devices: dimension `d` cut into `tiles[d]` even tiles, each
/// tile held by `replicas` devices; `devices` lists them tile-major (row-major over the tile
/// grid), a tile's replicas adjacent, as HloSharding's tile assignment with
/// `last_tile_dim_replicate`. Ids are physical devices for arrays, logical (partition
/// indices) as the compiler reports them until the executable maps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharding {
    tiles: Vec<usize>,
    replicas: usize,
    devices: Vec<i32>,
}

impl Sharding {
    /// Every device holds the whole array.
    pub fn replicated(rank: usize, devices: &[i32]) -> Sharding {
        Sharding {
            tiles: vec![1; rank],
            replicas: devices.len(),
            devices: devices.to_vec(),
        }
    }

    /// JAX's `NamedSharding(mesh, spec)` for an array of `rank` dimensions.
    pub fn named(mesh: &Mesh, spec: &PartitionSpec, rank: usize) -> Result<Sharding> {
        if spec.0.len() > rank {
            return Err(bad(format!(
                "the partition spec has {} entries for an array of rank {rank}",
                spec.0.len()
            )));
        }
        let axis = |name: &str| mesh.axes.iter().position(|(n, _)| n == name);
        let mut used = Vec::new();
        let mut tiles = vec![1usize; rank];
        for (d, names) in spec.0.iter().enumerate() {
            for name in names {
                let a = axis(name).ok_or_else(|| bad(format!("no mesh axis `{name}`")))?;
                if used.contains(&a) {
                    return Err(bad(format!("mesh axis `{name}` splits two dimensions")));
                }
                used.push(a);
                tiles[d] *= mesh.axes[a].1;
            }
        }
        let rest: Vec<usize> = (0..mesh.axes.len()).filter(|a| !used.contains(a)).collect();
        let replicas = rest.iter().map(|&a| mesh.axes[a].1).product();
        let perm: Vec<usize> = used.iter().chain(&rest).copied().collect();
        let shape: Vec<usize> = mesh.axes.iter().map(|(_, n)| *n).collect();
        Ok(Sharding {
            tiles,
            replicas,
            devices: transpose(&mesh.devices, &shape, &perm),
        })
    }

    /// The compiler's sharding of one array of `rank` dimensions over `num_devices` logical
    /// devices. Tuple shardings are the caller's to split; manual ones are refused.
    pub fn from_op_sharding(op: &OpSharding, rank: usize, num_devices: usize) -> Result<Sharding> {
        use op_sharding::Type;
        let all: Vec<i32> = (0..num_devices as i32).collect();
        match Type::try_from(op.r#type).unwrap_or(Type::Unknown) {
            Type::Replicated => return Ok(Sharding::replicated(rank, &all)),
            Type::Maximal => {
                let device = *op.tile_assignment_devices.first().unwrap_or(&0) as i32;
                return Ok(Sharding::replicated(rank, &[device]));
            }
            Type::Other => {}
            other => {
                return Err(bad(format!(
                    "a {} sharding is not an array's layout",
                    other.as_str_name()
                )));
            }
        }
        let dims: Vec<usize> = (op.tile_assignment_dimensions.iter())
            .map(|&d| usize::try_from(d).map_err(|_| bad(format!("tile dimension {d}"))))
            .collect::<Result<_>>()?;
        let count: usize = dims.iter().product();
        let devices: Vec<i32> = if !op.tile_assignment_devices.is_empty() {
            op.tile_assignment_devices
                .iter()
                .map(|&d| d as i32)
                .collect()
        } else {
            // The iota form: 0..n reshaped to `iota_reshape_dims`, transposed, flattened.
            let shape: Vec<usize> = op.iota_reshape_dims.iter().map(|&d| d as usize).collect();
            let perm: Vec<usize> = op.iota_transpose_perm.iter().map(|&p| p as usize).collect();
            let n: usize = shape.iter().product();
            if perm.len() != shape.len() || n != count {
                return Err(bad(
                    "an iota tile assignment that does not fit its tiles".into()
                ));
            }
            transpose(&(0..n as i32).collect::<Vec<_>>(), &shape, &perm)
        };
        // Trailing tile dimensions that are not the array's: replication, as one flag or as
        // subgroup types.
        let extra = if op.replicate_on_last_tile_dim {
            1
        } else {
            op.last_tile_dims.len()
        };
        let manual = op_sharding::Type::Manual as i32;
        if op.last_tile_dims.contains(&manual) {
            return Err(bad("a manual subgroup is not an array's layout".into()));
        }
        if devices.len() != count || dims.len() != rank + extra {
            return Err(bad(format!(
                "tile assignment {dims:?} with {} devices for an array of rank {rank}",
                devices.len()
            )));
        }
        Ok(Sharding {
            tiles: dims[..rank].to_vec(),
            replicas: dims[rank..].iter().product(),
            devices,
        })
    }

    pub fn tiles(&self) -> &[usize] {
        &self.tiles
    }

    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The devices holding shards, tile-major, a tile's replicas adjacent.
    pub fn devices(&self) -> &[i32] {
        &self.devices
    }

    /// The same layout with each device id replaced (logical partition ids to devices).
    pub fn map_devices<E>(
        &self,
        f: impl Fn(i32) -> std::result::Result<i32, E>,
    ) -> std::result::Result<Sharding, E> {
        Ok(Sharding {
            devices: (self.devices.iter().map(|&d| f(d))).collect::<std::result::Result<_, E>>()?,
            ..self.clone()
        })
    }

    /// Each shard's dimensions for an array of `dims`; an uneven split is an error, as in JAX.
    pub fn shard_dims(&self, dims: &[i64]) -> Result<Vec<i64>> {
        if dims.len() != self.tiles.len() {
            return Err(bad(format!(
                "a sharding of rank {} for an array of rank {}",
                self.tiles.len(),
                dims.len()
            )));
        }
        (dims.iter().zip(&self.tiles).enumerate())
            .map(|(d, (&n, &t))| match n % t as i64 {
                0 => Ok(n / t as i64),
                _ => Err(bad(format!(
                    "dimension {d} of size {n} does not split into {t} even shards"
                ))),
            })
            .collect()
    }

    /// For each device in `devices()` order, the ranges of the global array its shard holds.
    pub fn shard_ranges(&self, dims: &[i64]) -> Result<Vec<Vec<Range<i64>>>> {
        let shard = self.shard_dims(dims)?;
        let tile_strides = strides(&self.tiles);
        Ok((0..self.devices.len())
            .map(|k| {
                let tile = k / self.replicas;
                (0..dims.len())
                    .map(|d| {
                        let c = (tile / tile_strides[d] % self.tiles[d]) as i64;
                        c * shard[d]..(c + 1) * shard[d]
                    })
                    .collect()
            })
            .collect())
    }
}

impl fmt::Display for Sharding {
    /// HloSharding's text: `{replicated}`, `{maximal device=D}`, or
    /// `{devices=[2,2]0,1,2,3}` with ` last_tile_dim_replicate` when tiles are replicated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |d: &[i32]| d.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
        if self.tiles.iter().all(|&t| t == 1) {
            return match self.devices.as_slice() {
                [one] => write!(f, "{{maximal device={one}}}"),
                all => write!(f, "{{replicated devices={}}}", ids(all)),
            };
        }
        let mut dims: Vec<String> = self.tiles.iter().map(usize::to_string).collect();
        if self.replicas > 1 {
            dims.push(self.replicas.to_string());
        }
        write!(f, "{{devices=[{}]{}", dims.join(","), ids(&self.devices))?;
        if self.replicas > 1 {
            write!(f, " last_tile_dim_replicate")?;
        }
        write!(f, "}}")
    }
}

/// The shardings the SPMD partitioner gave an optimized program's parameters and outputs
/// (ranks given), over `partitions` logical devices; `None` when the module has none (a program
/// compiled for one partition).
pub fn module_shardings(
    module: &HloModuleProto,
    parameter_ranks: &[usize],
    output_ranks: &[usize],
    partitions: usize,
) -> Result<Option<(Vec<Sharding>, Vec<Sharding>)>> {
    let Some(output) = &module.spmd_output_sharding else {
        return Ok(None);
    };
    if module.spmd_parameters_shardings.len() != parameter_ranks.len() {
        return Err(bad(format!(
            "the program has {} parameters and {} parameter shardings",
            parameter_ranks.len(),
            module.spmd_parameters_shardings.len()
        )));
    }
    let parameters = (module.spmd_parameters_shardings.iter().zip(parameter_ranks))
        .map(|(op, &rank)| Sharding::from_op_sharding(op, rank, partitions))
        .collect::<Result<Vec<_>>>()?;
    let tuple = op_sharding::Type::Tuple as i32;
    let outputs = match (output.r#type == tuple, output_ranks) {
        (true, ranks) if output.tuple_shardings.len() == ranks.len() => {
            (output.tuple_shardings.iter().zip(ranks))
                .map(|(op, &rank)| Sharding::from_op_sharding(op, rank, partitions))
                .collect::<Result<Vec<_>>>()?
        }
        (false, [rank]) => vec![Sharding::from_op_sharding(output, *rank, partitions)?],
        // One sharding for every output of a tuple.
        (false, ranks) => (ranks.iter())
            .map(|&rank| Sharding::from_op_sharding(output, rank, partitions))
            .collect::<Result<Vec<_>>>()?,
        (true, ranks) => {
            return Err(bad(format!(
                "the program has {} outputs and {} output shardings",
                ranks.len(),
                output.tuple_shardings.len()
            )));
        }
    };
    Ok(Some((parameters, outputs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard_blocks::{copy_block, place_block};

    /// (spec, rank, tiles, replicas, devices)
    type NamedCase<'a> = (&'a [&'a [&'a str]], usize, &'a [usize], usize, &'a [i32]);

    fn mesh_2x2() -> Mesh {
        Mesh::new(&[("x", 2), ("y", 2)], &[0, 1, 2, 3]).unwrap()
    }

    #[test]
    fn named_shardings_lay_devices_out_as_jax_does() {
        // (spec, rank, tiles, replicas, devices): JAX's `NamedSharding(mesh, spec)` for a 2x2
        // mesh of devices 0..4, as its `_to_xla_hlo_sharding` gives them.
        let cases: [NamedCase; 6] = [
            (&[&["x"], &["y"]], 2, &[2, 2], 1, &[0, 1, 2, 3]),
            (&[&["y"], &["x"]], 2, &[2, 2], 1, &[0, 2, 1, 3]),
            (&[&["x"]], 2, &[2, 1], 2, &[0, 1, 2, 3]),
            (&[&["y"]], 2, &[2, 1], 2, &[0, 2, 1, 3]),
            (&[&["x", "y"]], 1, &[4], 1, &[0, 1, 2, 3]),
            (&[], 2, &[1, 1], 4, &[0, 1, 2, 3]),
        ];
        for (spec, rank, tiles, replicas, devices) in cases {
            let s = Sharding::named(&mesh_2x2(), &PartitionSpec::new(spec), rank).unwrap();
            assert_eq!(
                (s.tiles(), s.replicas(), s.devices()),
                (tiles, replicas, devices),
                "{spec:?}"
            );
        }
    }

    #[test]
    fn bad_meshes_and_specs_are_refused() {
        let refused = |r: Result<Sharding>, what: &str| {
            let e = r.unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        assert!(Mesh::new(&[("x", 2)], &[0, 1, 2]).is_err());
        assert!(Mesh::new(&[("x", 2), ("x", 1)], &[0, 1]).is_err());
        assert!(Mesh::new(&[("x", 2)], &[1, 1]).is_err());
        let m = mesh_2x2();
        refused(
            Sharding::named(&m, &PartitionSpec::new(&[&["z"]]), 1),
            "no mesh axis",
        );
        refused(
            Sharding::named(&m, &PartitionSpec::new(&[&["x"], &["x"]]), 2),
            "splits two",
        );
        refused(
            Sharding::named(&m, &PartitionSpec::new(&[&[], &[], &[]]), 2),
            "rank 2",
        );
    }

    #[test]
    fn the_compilers_shardings_convert_in_either_device_form() {
        let tiled = |dims: Vec<i64>, devices: Vec<i64>, replicate: bool| OpSharding {
            r#type: op_sharding::Type::Other as i32,
            tile_assignment_dimensions: dims,
            tile_assignment_devices: devices,
            replicate_on_last_tile_dim: replicate,
            ..Default::default()
        };
        let explicit = tiled(vec![2, 1, 2], vec![0, 2, 1, 3], true);
        let s = Sharding::from_op_sharding(&explicit, 2, 4).unwrap();
        assert_eq!(
            s,
            Sharding::named(&mesh_2x2(), &PartitionSpec::new(&[&["y"]]), 2).unwrap()
        );
        assert_eq!(
            s.to_string(),
            "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"
        );
        // `{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}`: the same, as iota.
        let iota = OpSharding {
            iota_reshape_dims: vec![2, 2],
            iota_transpose_perm: vec![1, 0],
            ..tiled(vec![2, 1, 2], vec![], true)
        };
        assert_eq!(Sharding::from_op_sharding(&iota, 2, 4).unwrap(), s);
        let replicated = OpSharding::default();
        assert_eq!(
            Sharding::from_op_sharding(&replicated, 1, 2).unwrap(),
            Sharding::replicated(1, &[0, 1])
        );
        assert!(
            Sharding::from_op_sharding(&tiled(vec![4], vec![0, 1, 2, 3], false), 2, 4).is_err()
        );
        let manual = OpSharding {
            r#type: op_sharding::Type::Manual as i32,
            ..Default::default()
        };
        assert!(Sharding::from_op_sharding(&manual, 1, 4).is_err());
    }

    #[test]
    fn shards_split_and_assemble_to_the_same_array() {
        let s = Sharding::named(&mesh_2x2(), &PartitionSpec::new(&[&["x"], &["y"]]), 2).unwrap();
        let dims = [4i64, 6];
        assert_eq!(s.shard_dims(&dims).unwrap(), vec![2, 3]);
        let ranges = s.shard_ranges(&dims).unwrap();
        assert_eq!(
            ranges[1],
            vec![0..2, 3..6],
            "device 1: first row of tiles, second column"
        );
        let global: Vec<u8> = (0..24u8).collect();
        let mut back = vec![0u8; 24];
        for r in &ranges {
            let block = copy_block(&global, &dims, 1, r);
            assert_eq!(block.len(), 6);
            place_block(&mut back, &dims, 1, r, &block);
        }
        assert_eq!(back, global);
        assert_eq!(
            copy_block(&global, &dims, 1, &ranges[3]),
            vec![15, 16, 17, 21, 22, 23]
        );
        let e = s.shard_dims(&[5, 6]).unwrap_err().to_string();
        assert!(
            e.contains("dimension 0 of size 5 does not split into 2"),
            "{e}"
        );
        // Scalars and empty arrays.
        assert_eq!(copy_block(&[7, 0, 0, 0], &[], 4, &[]), vec![7, 0, 0, 0]);
        let empty = Sharding::replicated(1, &[0, 1]);
        assert_eq!(
            copy_block(&[], &[0], 4, &empty.shard_ranges(&[0]).unwrap()[0]),
            vec![]
        );
    }
}
