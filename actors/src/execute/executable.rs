//! Loaded executables: what is known about one (`ExecutableMeta`, read once right after it is
//! compiled or loaded), `ExecutableCore` (the loaded program behind every handle) and the
//! executable registry behind `live_executables`.

use std::sync::{Arc, OnceLock, Weak};

use crate::arrays::site::Site;
use crate::error::Result;
use crate::ids::{ExecutableId, Registry, kind};
use crate::pjrt::{ArrayType, PjrtDevice, PjrtExecutable, PjrtLoadedExecutable};

/// What is known about a compiled executable, read once right after compiling.
#[derive(Debug, Clone)]
pub struct ExecutableMeta {
    pub name: String,
    pub fingerprint: String,
    pub num_outputs: usize,
    pub output_types: Vec<ArrayType>,
    /// `output_types[i].dims`, shared with every output array made (no copy per execute).
    pub output_dims: Vec<Arc<[i64]>>,
    pub parameter_types: Vec<ArrayType>,
    /// Indices into the client's device list, in replica order.
    pub devices: Vec<usize>,
    pub portable: bool,
    /// The serialized `CompileOptionsProto` it was compiled (or loaded) with.
    pub compile_options: Vec<u8>,
    /// An SPMD program's partition count and the shardings the partitioner gave its
    /// parameters and outputs, over logical devices (partition `p` runs on `devices[p]`);
    /// `None` for one partition.
    pub spmd: Option<SpmdLayout>,
    /// The host callbacks the program calls (it must be given them to run).
    pub callback_ids: Vec<i64>,
    /// The program's host send/recv channels and the callback calls they carry.
    pub transfers: crate::callbacks::send_recv::TransferPlan,
    /// Every parameter index where the program could donate (it declares aliases or donors):
    /// the plugin must never consume a buffer our registry owns. Empty when it cannot donate.
    pub non_donatable: Vec<i64>,
    /// The parameters the program may donate (it aliases them to an output, or marks them
    /// buffer donors), sorted: what an execute may be asked to donate.
    pub donor_params: Vec<usize>,
    /// The plugin's serialization exactly as the compiler produced it, where this executable
    /// was loaded from bytes (a compile worker's answer, a cache entry, `deserialize`): the CPU
    /// plugin re-serializes such an executable without its kernels (3,540 bytes against 4,606
    /// for a small add, and `Function ... not found` at execute), so those bytes, never a
    /// re-serialization, are what the caches store and `serialize` returns.
    pub compiled_bytes: Option<Arc<Vec<u8>>>,
}

/// How an SPMD executable lays out its arguments and results.
#[derive(Debug, Clone)]
pub struct SpmdLayout {
    pub partitions: usize,
    pub parameters: Vec<crate::formats::sharding::Sharding>,
    pub outputs: Vec<crate::formats::sharding::Sharding>,
}

/// The partition count the options asked for (1 when they cannot be read).
fn partitions_of(compile_options: &[u8]) -> usize {
    use prost::Message as _;
    pjrt_actors_formats::protos::xla::CompileOptionsProto::decode(compile_options)
        .ok()
        .and_then(|o| o.executable_build_options)
        .map_or(1, |b| b.num_partitions.max(1) as usize)
}

impl ExecutableMeta {
    pub fn read(
        exe: &PjrtLoadedExecutable,
        devices: &[PjrtDevice],
        portable: bool,
        compile_options: &[u8],
    ) -> Result<Self> {
        Ok(ExecutableMeta {
            devices: exe.addressable_device_indices(devices)?,
            ..Self::read_unloaded(exe, portable, compile_options)?
        })
    }

    /// What is known about an executable compiled but not loaded: no devices yet.
    pub fn read_unloaded(
        exe: &PjrtExecutable,
        portable: bool,
        compile_options: &[u8],
    ) -> Result<Self> {
        let module = exe.optimized_module()?;
        refuse_feeds(&module)?;
        crate::compile::custom_call_layouts::check(&module)?;
        let parameter_types = crate::pjrt::parameter_types(&module)?;
        let output_types = exe.output_types()?;
        let mut donor_params: Vec<usize> = (module.input_output_alias.iter())
            .flat_map(|a| a.entries.iter().map(|e| e.parameter_number))
            .chain(
                (module.buffer_donor.iter())
                    .flat_map(|d| d.entries.iter().map(|e| e.parameter_number)),
            )
            .filter_map(|p| usize::try_from(p).ok())
            .filter(|&p| p < parameter_types.len())
            .collect();
        donor_params.sort_unstable();
        donor_params.dedup();
        let may_donate = !donor_params.is_empty();
        let mut callback_ids = crate::callbacks::callback_ids(&module);
        let transfers = crate::callbacks::send_recv::TransferPlan::read(&module)?;
        for id in transfers.callback_ids() {
            if !callback_ids.contains(&id) {
                callback_ids.push(id);
            }
        }
        let partitions = partitions_of(compile_options);
        let spmd = match partitions {
            1 => None,
            _ => {
                let ranks = |t: &[ArrayType]| t.iter().map(|t| t.dims.len()).collect::<Vec<_>>();
                crate::formats::sharding::module_shardings(
                    &module,
                    &ranks(&parameter_types),
                    &ranks(&output_types),
                    partitions,
                )?
                .map(|(parameters, outputs)| SpmdLayout {
                    partitions,
                    parameters,
                    outputs,
                })
            }
        };
        let non_donatable = if may_donate {
            (0..parameter_types.len() as i64).collect()
        } else {
            Vec::new()
        };
        Ok(ExecutableMeta {
            name: exe.name()?,
            fingerprint: exe.fingerprint()?,
            num_outputs: exe.num_outputs()?,
            output_dims: output_types
                .iter()
                .map(|t| t.dims.as_slice().into())
                .collect(),
            output_types,
            non_donatable,
            donor_params,
            parameter_types,
            devices: Vec::new(),
            portable,
            // The plugin's own answer where it has one (0.115's `GetCompileOptions`), else
            // what the runtime sent or the envelope recorded (0.81 cannot say).
            compile_options: exe
                .compile_options()
                .unwrap_or_else(|_| compile_options.to_vec()),
            spmd,
            callback_ids,
            transfers,
            compiled_bytes: None,
        })
    }

    /// The plugin's bytes for `exe`: those it was loaded from, else its own serialization (an
    /// executable compiled in this process serializes whole).
    pub fn plugin_bytes(&self, exe: &PjrtLoadedExecutable) -> Result<Arc<Vec<u8>>> {
        match &self.compiled_bytes {
            Some(bytes) => Ok(bytes.clone()),
            None => Ok(Arc::new(exe.serialize()?)),
        }
    }

    /// Records the bytes this executable was loaded from (see `compiled_bytes`).
    pub fn loaded_from(self, bytes: Arc<Vec<u8>>) -> Self {
        ExecutableMeta {
            compiled_bytes: Some(bytes),
            ..self
        }
    }
}

/// Refuses a program that reads infeed or writes outfeed: nothing here feeds or drains those
/// queues, so its execute would wait forever.
fn refuse_feeds(module: &pjrt_actors_formats::protos::xla::HloModuleProto) -> Result<()> {
    let feeds = (module.computations.iter())
        .flat_map(|c| &c.instructions)
        .find(|i| i.opcode == "infeed" || i.opcode == "outfeed");
    match feeds {
        None => Ok(()),
        Some(i) => Err(crate::error::Error::Unsupported {
            what: "infeed and outfeed",
            hint: format!(
                " (the program's `{}` would wait forever: nothing feeds or drains it; pass the data as arguments and results, or through a host callback)",
                i.opcode
            ),
        }),
    }
}

/// A live loaded executable; dropping the last reference unregisters and destroys it.
pub struct ExecutableCore {
    pub id: ExecutableId,
    pub exe: PjrtLoadedExecutable,
    pub meta: ExecutableMeta,
    /// Per device index: the memory-space index of each output. Fixed when the program is
    /// compiled, so it is learned from the first run on each device instead of asked each time.
    pub output_memories: Vec<OnceLock<Vec<usize>>>,
    /// Where it was compiled or loaded (for heap profiles).
    pub site: Site,
    registry: Arc<ExecutableRegistry>,
}

impl Drop for ExecutableCore {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

/// The registry of live executables, holding weak links (it lists, it does not keep alive).
pub type ExecutableRegistry = Registry<Weak<ExecutableCore>, kind::Executable>;

impl ExecutableCore {
    pub fn register(
        registry: &Arc<ExecutableRegistry>,
        exe: PjrtLoadedExecutable,
        meta: ExecutableMeta,
        device_count: usize,
        site: Site,
    ) -> Arc<ExecutableCore> {
        Arc::new_cyclic(|weak| ExecutableCore {
            id: registry.insert(0, weak.clone()),
            exe,
            meta,
            output_memories: (0..device_count).map(|_| OnceLock::new()).collect(),
            site,
            registry: registry.clone(),
        })
    }
}
