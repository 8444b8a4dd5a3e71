//! Sharded arrays: one global value held as shards (ordinary `Array`s) on several devices, split
//! from host data by a `Sharding` and assembled back; and SPMD executes over them. Shards are
//! registry arrays like any other, so live arrays, heap profiles and defragment see them.

use std::sync::Arc;

use pjrt_actors_core::execute::executable::SpmdLayout;
use pjrt_actors_core::formats::shard_blocks::{copy_block, place_block};
use pjrt_actors_core::formats::sharding::Sharding;
use pjrt_actors_core::{Error, Result};
use smallvec::SmallVec;

use crate::host_data::HostArray;
use crate::{Array, Client, Device, ElementType, HostBuffer, LoadedExecutable};

/// One global array held as shards on several devices.
#[derive(Clone, Debug)]
pub struct ShardedArray {
    dims: Vec<i64>,
    dtype: ElementType,
    sharding: Sharding,
    /// One per entry of `sharding.devices()`, in that order.
    shards: Arc<[Array]>,
}

/// Runs `f` on every item from a few scoped threads: uploads and read-backs of shards go in
/// parallel, not one after another.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let threads = std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (items.chunks(chunk))
            .map(|part| s.spawn(|| part.iter().map(&f).collect::<Result<Vec<R>>>()))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            out.extend(
                h.join()
                    .map_err(|_| Error::Internal("a shard thread panicked".into()))??,
            );
        }
        Ok(out)
    })
}

impl ShardedArray {
    /// The global dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        self.dtype
    }

    /// How the global array is laid out over devices.
    pub fn sharding(&self) -> &Sharding {
        &self.sharding
    }

    /// The shards, one per entry of `sharding().devices()`, in that order.
    pub fn shards(&self) -> &[Array] {
        &self.shards
    }

    /// The shard on `device`, if one is there.
    pub fn shard_on(&self, device: &Device) -> Option<&Array> {
        let at = self
            .sharding
            .devices()
            .iter()
            .position(|&d| d == device.id())?;
        self.shards.get(at)
    }

    /// Builds a sharded array from shards already on their devices, checking each one's
    /// device, type and shape against the sharding.
    pub fn from_shards(dims: &[i64], sharding: Sharding, shards: Vec<Array>) -> Result<Self> {
        let shard_dims = sharding.shard_dims(dims)?;
        if shards.len() != sharding.devices().len() {
            return Err(Error::InvalidArgument(format!(
                "sharded array: {} shards for a sharding over {} devices",
                shards.len(),
                sharding.devices().len()
            )));
        }
        let dtype = shards.first().map(Array::dtype).unwrap_or(ElementType::F32);
        for (k, (shard, &device)) in shards.iter().zip(sharding.devices()).enumerate() {
            if shard.device().id() != device || shard.dims() != shard_dims || shard.dtype() != dtype
            {
                return Err(Error::InvalidArgument(format!(
                    "sharded array: shard {k} is {}{:?} on device {}, the sharding asks for {dtype}{shard_dims:?} on device {device}",
                    shard.dtype(),
                    shard.dims(),
                    shard.device().id()
                )));
            }
        }
        Ok(ShardedArray {
            dims: dims.to_vec(),
            dtype,
            sharding,
            shards: shards.into(),
        })
    }

    /// Reads the global value back: one replica of each tile, read in parallel, placed.
    pub fn to_host(&self) -> Result<HostArray> {
        let width = self.dtype.byte_size();
        let ranges = self.sharding.shard_ranges(&self.dims)?;
        let firsts: Vec<usize> = (0..self.shards.len())
            .step_by(self.sharding.replicas())
            .collect();
        let blocks = in_parallel(&firsts, |&k| self.shards[k].to_bytes())?;
        let total = self.dims.iter().product::<i64>() as usize * width;
        let mut bytes = vec![0u8; total];
        for (&k, block) in firsts.iter().zip(&blocks) {
            place_block(&mut bytes, &self.dims, width, &ranges[k], block);
        }
        Ok(HostArray {
            dtype: self.dtype,
            dims: self.dims.clone(),
            bytes,
        })
    }

    /// Waits until every shard is ready.
    pub fn block_until_ready(&self) -> Result<()> {
        self.shards.iter().try_for_each(Array::block_until_ready)
    }
}

impl Client {
    /// Splits `data` by `sharding` (an uneven split is an error, as in JAX) and uploads each
    /// shard to its device, in parallel.
    pub fn put_sharded(&self, data: &HostArray, sharding: &Sharding) -> Result<ShardedArray> {
        let width = data.dtype.byte_size();
        let ranges = sharding.shard_ranges(&data.dims)?;
        let shard_dims = sharding.shard_dims(&data.dims)?;
        let devices = self.devices();
        let targets: Vec<(usize, &Device)> = (sharding.devices().iter().enumerate())
            .map(|(k, &id)| {
                let device = devices.iter().find(|d| d.id() == id).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "sharding names device {id}, which this client does not have"
                    ))
                })?;
                Ok((k, device))
            })
            .collect::<Result<_>>()?;
        let shards = in_parallel(&targets, |&(k, device)| {
            let block = copy_block(&data.bytes, &data.dims, width, &ranges[k]);
            self.buffer_from_host(
                HostBuffer::Copy(&block),
                data.dtype,
                &shard_dims,
                device,
                None,
            )
        })?;
        ShardedArray::from_shards(&data.dims, sharding.clone(), shards)
    }
}

/// Shard types times their shardings' tiles.
fn globalize(
    types: &[crate::ArrayType],
    shardings: Option<&Vec<Sharding>>,
) -> Vec<crate::ArrayType> {
    match shardings {
        None => types.to_vec(),
        Some(shardings) => (types.iter().zip(shardings))
            .map(|(t, s)| crate::ArrayType {
                dtype: t.dtype,
                dims: (t.dims.iter().zip(s.tiles()))
                    .map(|(&d, &n)| d * n as i64)
                    .collect(),
            })
            .collect(),
    }
}

impl LoadedExecutable {
    fn spmd(&self) -> Result<&SpmdLayout> {
        self.core.meta.spmd.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} was compiled for one partition, not as an SPMD program",
                self.name()
            ))
        })
    }

    /// Logical partition ids to `devices`, this executable's (read once by each caller: the
    /// list is built anew on every `addressable_devices`).
    fn physical(&self, devices: &[Device], logical: &Sharding) -> Result<Sharding> {
        logical.map_devices(|p| {
            (devices.get(p as usize).map(Device::id)).ok_or_else(|| {
                Error::Internal(format!("partition {p} has no device in {}", self.name()))
            })
        })
    }

    /// The parameters' global types: for an SPMD executable each shard's type times its
    /// sharding's tiles, else the parameter types.
    pub fn global_parameter_types(&self) -> Vec<crate::ArrayType> {
        let layout = self.core.meta.spmd.as_ref().map(|s| &s.parameters);
        globalize(self.parameter_types(), layout)
    }

    /// The outputs' global types, as [`global_parameter_types`](Self::global_parameter_types).
    pub fn global_output_types(&self) -> Vec<crate::ArrayType> {
        let layout = self.core.meta.spmd.as_ref().map(|s| &s.outputs);
        globalize(self.output_types(), layout)
    }

    /// An SPMD executable's parameter shardings, over its devices (`None` for one partition).
    pub fn parameter_shardings(&self) -> Option<Vec<Sharding>> {
        let spmd = self.core.meta.spmd.as_ref()?;
        let devices = self.addressable_devices();
        spmd.parameters
            .iter()
            .map(|s| self.physical(&devices, s).ok())
            .collect()
    }

    /// An SPMD executable's output shardings, over its devices (`None` for one partition).
    pub fn output_shardings(&self) -> Option<Vec<Sharding>> {
        let spmd = self.core.meta.spmd.as_ref()?;
        let devices = self.addressable_devices();
        spmd.outputs
            .iter()
            .map(|s| self.physical(&devices, s).ok())
            .collect()
    }

    /// Runs an SPMD executable on sharded arguments, each with the sharding the executable
    /// expects (a typed error naming the argument otherwise); outputs come back sharded with
    /// its output shardings.
    #[track_caller]
    pub fn execute_sharded(&self, args: &[&ShardedArray]) -> Result<Vec<ShardedArray>> {
        let lists = self.partition_lists(args)?;
        let refs: Vec<Vec<&Array>> = lists.iter().map(|l| l.to_vec()).collect();
        let outputs = self.execute_replicated(&refs)?;
        self.assemble_outputs(outputs)
    }

    /// [`execute_sharded`](Self::execute_sharded), donating the arguments at the parameter
    /// indices `donate`: every shard of each is donated and deleted, as
    /// [`execute_donating`](Self::execute_donating) says for one device.
    #[track_caller]
    pub fn execute_sharded_donating(
        &self,
        args: &[&ShardedArray],
        donate: &[usize],
    ) -> Result<Vec<ShardedArray>> {
        let lists = self.partition_lists(args)?;
        let refs: Vec<Vec<&Array>> = lists.iter().map(|l| l.to_vec()).collect();
        let outputs = self.execute_replicated_donating(&refs, donate)?;
        self.assemble_outputs(outputs)
    }

    /// The async form of [`execute_sharded`](Self::execute_sharded).
    #[track_caller]
    pub fn execute_sharded_async(
        &self,
        args: &[&ShardedArray],
    ) -> impl Future<Output = Result<Vec<ShardedArray>>> + use<> {
        let ready = self.partition_lists(args).map(|lists| {
            let refs: Vec<Vec<&Array>> = lists.iter().map(|l| l.to_vec()).collect();
            self.execute_replicated_async(&refs)
        });
        let this = self.clone();
        async move { this.assemble_outputs(ready?.await?) }
    }

    /// Splits host arguments by the parameter shardings, uploads them, and runs
    /// [`execute_sharded`](Self::execute_sharded).
    #[track_caller]
    pub fn execute_sharded_host(&self, args: &[HostArray]) -> Result<Vec<ShardedArray>> {
        let shardings = self
            .parameter_shardings()
            .ok_or_else(|| self.spmd().unwrap_err())?;
        self.check_count(args.len(), shardings.len())?;
        let client = self.client();
        let arrays = (args.iter().zip(&shardings))
            .map(|(a, s)| client.put_sharded(a, s))
            .collect::<Result<Vec<_>>>()?;
        self.execute_sharded(&arrays.iter().collect::<Vec<_>>())
    }

    /// As many arguments as the program takes.
    fn check_count(&self, given: usize, takes: usize) -> Result<()> {
        match given == takes {
            true => Ok(()),
            false => Err(self.bad_argument(
                given,
                format!("{given} arguments given, the program takes {takes}"),
            )),
        }
    }

    fn bad_argument(&self, index: usize, reason: String) -> Error {
        Error::BadArgument {
            executable: self.name().to_string(),
            index,
            reason,
            context: None,
        }
    }

    /// Per partition (in device order), the shards of each argument that live there.
    fn partition_lists<'a>(
        &self,
        args: &[&'a ShardedArray],
    ) -> Result<Vec<SmallVec<[&'a Array; 8]>>> {
        let spmd = self.spmd()?;
        self.check_count(args.len(), spmd.parameters.len())?;
        let devices = self.addressable_devices();
        let mut lists = vec![SmallVec::new(); devices.len()];
        for (i, (arg, logical)) in args.iter().zip(&spmd.parameters).enumerate() {
            let want = self.physical(&devices, logical)?;
            if arg.sharding != want {
                return Err(self.bad_argument(
                    i,
                    format!(
                        "its sharding is {}, the program expects {want}",
                        arg.sharding
                    ),
                ));
            }
            for (p, device) in devices.iter().enumerate() {
                lists[p].push(arg.shard_on(device).expect("the shardings are equal"));
            }
        }
        Ok(lists)
    }

    /// Per-partition outputs gathered into sharded arrays by the output shardings.
    fn assemble_outputs(&self, per_partition: Vec<Vec<Array>>) -> Result<Vec<ShardedArray>> {
        let spmd = self.spmd()?;
        let devices = self.addressable_devices();
        (spmd.outputs.iter().enumerate())
            .map(|(j, logical)| {
                let sharding = self.physical(&devices, logical)?;
                let shards: Vec<Array> = (sharding.devices().iter())
                    .map(|&id| {
                        let p = devices
                            .iter()
                            .position(|d| d.id() == id)
                            .expect("mapped above");
                        per_partition[p][j].clone()
                    })
                    .collect();
                let local = shards[0].dims().to_vec();
                let dims: Vec<i64> = (local.iter().zip(sharding.tiles()))
                    .map(|(&n, &t)| n * t as i64)
                    .collect();
                ShardedArray::from_shards(&dims, sharding, shards)
            })
            .collect()
    }
}
