//! Compiling: `CompileOptions` turned into a `CompileOptionsProto` the plugin cannot abort on,
//! the compiler actors (a `SyncArbiter` pool, since a compile blocks its thread for tens of
//! milliseconds), and the executable registry behind `live_executables`.

use std::sync::{Arc, Weak};

use actix::{Actor, Handler, SyncContext};
use pjrt_sys::protos::xla::{
    CompileOptionsProto, DeviceAssignmentProto, ExecutableBuildOptionsProto,
    device_assignment_proto,
};

use crate::actors::guarded;
use crate::error::{Error, Result};
use crate::pjrt::{ArrayType, PjrtClient, PjrtDevice, PjrtLoadedExecutable};
use crate::registry::{Id, Registry};

/// How to compile a program.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Replicas (default 1). With `devices`, replica `i` runs on `devices[i]`.
    pub num_replicas: Option<usize>,
    /// Partitions (default 1).
    pub num_partitions: Option<usize>,
    /// Device ids to run on, replica-major (`num_replicas × num_partitions` of them).
    pub devices: Option<Vec<i32>>,
    /// Compile once, run on any device chosen at execute time.
    pub portable: bool,
    /// A caller-built proto to start from; the fields above, when set, override it, and the
    /// result is still checked for what would abort the plugin.
    pub proto: Option<CompileOptionsProto>,
}

/// The device ids and memory limits the options are checked against.
pub struct DeviceFacts {
    /// (id, addressable) of every device.
    pub devices: Vec<(i32, bool)>,
    /// The smallest `bytes_limit` the addressable devices' allocators report, if any do.
    pub device_memory_limit: Option<i64>,
}

impl CompileOptions {
    /// Builds the proto, filling in and checking what the plugin would otherwise abort on
    /// (replica and partition counts of at least 1, a consistent device assignment).
    pub fn to_proto(&self, facts: &DeviceFacts) -> Result<CompileOptionsProto> {
        let bad = |m: String| Error::InvalidArgument(format!("compile options: {m}"));
        let mut proto = self.proto.clone().unwrap_or_default();
        let mut build = proto.executable_build_options.take().unwrap_or_default();
        if let Some(n) = self.num_replicas {
            build.num_replicas = n as i64;
        }
        if let Some(n) = self.num_partitions {
            build.num_partitions = n as i64;
        }
        // The plugin CHECK-fails (aborts the process) on 0; an unset field is 0.
        if build.num_replicas == 0 {
            build.num_replicas = 1;
        }
        if build.num_partitions == 0 {
            build.num_partitions = 1;
        }
        if build.num_replicas < 0 || build.num_partitions < 0 {
            return Err(bad(format!(
                "num_replicas ({}) and num_partitions ({}) must be at least 1",
                build.num_replicas, build.num_partitions
            )));
        }
        let total = (build.num_replicas as u128) * (build.num_partitions as u128);
        if total > facts.devices.len() as u128 && !self.portable {
            return Err(bad(format!(
                "{} replicas × {} partitions need {total} devices; the client has {}",
                build.num_replicas,
                build.num_partitions,
                facts.devices.len()
            )));
        }
        if self.portable {
            proto.compile_portable_executable = true;
        }
        if proto.compile_portable_executable {
            if build.num_replicas != 1 || build.num_partitions != 1 {
                return Err(bad(
                    "a portable executable has one replica and one partition".into(),
                ));
            }
            if self.devices.is_some() || build.device_assignment.is_some() {
                return Err(bad("a portable executable takes its device at execute time, not a device assignment".into()));
            }
        }
        if let Some(ids) = &self.devices {
            if ids.len() as u128 != total {
                return Err(bad(format!(
                    "{} devices given for {} replicas × {} partitions",
                    ids.len(),
                    build.num_replicas,
                    build.num_partitions
                )));
            }
            let partitions = build.num_partitions as usize;
            build.device_assignment = Some(DeviceAssignmentProto {
                replica_count: build.num_replicas as i32,
                computation_count: build.num_partitions as i32,
                computation_devices: (0..partitions)
                    .map(|p| device_assignment_proto::ComputationDevice {
                        replica_device_ids: ids
                            .iter()
                            .skip(p)
                            .step_by(partitions)
                            .map(|&d| d as i64)
                            .collect(),
                    })
                    .collect(),
            });
        }
        if let Some(assignment) = &build.device_assignment {
            check_assignment(assignment, &build, facts).map_err(bad)?;
        }
        // -1: no fixed ordinal; the assignment (or the default one) decides. Proto3 cannot tell
        // an unset 0 from an explicit 0, so 0 means unset here.
        if build.device_ordinal == 0 {
            build.device_ordinal = -1;
        }
        if build.device_memory_size == 0 {
            if let Some(limit) = facts.device_memory_limit {
                build.device_memory_size = limit;
            }
        }
        proto.executable_build_options = Some(build);
        Ok(proto)
    }
}

fn check_assignment(
    a: &DeviceAssignmentProto,
    build: &ExecutableBuildOptionsProto,
    facts: &DeviceFacts,
) -> std::result::Result<(), String> {
    if a.replica_count as i64 != build.num_replicas
        || a.computation_count as i64 != build.num_partitions
    {
        return Err(format!(
            "device assignment is {}×{} but the build asks for {}×{}",
            a.replica_count, a.computation_count, build.num_replicas, build.num_partitions
        ));
    }
    if a.computation_devices.len() != a.computation_count as usize {
        return Err("device assignment has the wrong number of computations".into());
    }
    let mut seen = std::collections::HashSet::new();
    for c in &a.computation_devices {
        if c.replica_device_ids.len() != a.replica_count as usize {
            return Err("device assignment has the wrong number of replicas".into());
        }
        for &id in &c.replica_device_ids {
            match facts.devices.iter().find(|(d, _)| *d as i64 == id) {
                None => {
                    return Err(format!(
                        "device assignment names device {id}, which does not exist"
                    ));
                }
                Some((_, false)) => {
                    return Err(format!("device {id} is not addressable from this process"));
                }
                Some(_) => {}
            }
            if !seen.insert(id) {
                return Err(format!("device assignment uses device {id} twice"));
            }
        }
    }
    Ok(())
}

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
    /// The host callbacks the program calls (it must be given them to run).
    pub callback_ids: Vec<i64>,
    /// The program's host send/recv channels and the callback calls they carry.
    pub transfers: crate::send_recv::TransferPlan,
    /// Every parameter index where the program could donate (it declares aliases or donors):
    /// the plugin must never consume a buffer our registry owns. Empty when it cannot donate.
    pub non_donatable: Vec<i64>,
}

impl ExecutableMeta {
    pub fn read(
        exe: &PjrtLoadedExecutable,
        devices: &[PjrtDevice],
        portable: bool,
        compile_options: &[u8],
    ) -> Result<Self> {
        let module = exe.optimized_module()?;
        let parameter_types = crate::pjrt::parameter_types(&module)?;
        let output_types = exe.output_types()?;
        let may_donate = module
            .input_output_alias
            .as_ref()
            .is_some_and(|a| !a.entries.is_empty())
            || module
                .buffer_donor
                .as_ref()
                .is_some_and(|d| !d.entries.is_empty());
        let mut callback_ids = crate::callbacks::callback_ids(&module);
        let transfers = crate::send_recv::TransferPlan::read(&module)?;
        for id in transfers.callback_ids() {
            if !callback_ids.contains(&id) {
                callback_ids.push(id);
            }
        }
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
            parameter_types,
            devices: exe.addressable_device_indices(devices)?,
            portable,
            compile_options: compile_options.to_vec(),
            callback_ids,
            transfers,
        })
    }
}

/// A live loaded executable; dropping the last reference unregisters and destroys it.
pub struct ExecutableCore {
    pub id: Id,
    pub exe: PjrtLoadedExecutable,
    pub meta: ExecutableMeta,
    /// Per device index: the memory-space index of each output. Fixed when the program is
    /// compiled, so it is learned from the first run on each device instead of asked each time.
    pub output_memories: Vec<std::sync::OnceLock<Vec<usize>>>,
    /// Where it was compiled or loaded (for heap profiles).
    pub site: crate::site::Site,
    registry: Arc<ExecutableRegistry>,
}

impl Drop for ExecutableCore {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

/// The registry of live executables, holding weak links (it lists, it does not keep alive).
pub type ExecutableRegistry = Registry<Weak<ExecutableCore>>;

impl ExecutableCore {
    pub fn register(
        registry: &Arc<ExecutableRegistry>,
        exe: PjrtLoadedExecutable,
        meta: ExecutableMeta,
        device_count: usize,
        site: crate::site::Site,
    ) -> Arc<ExecutableCore> {
        Arc::new_cyclic(|weak| ExecutableCore {
            id: registry.insert(0, weak.clone()),
            exe,
            meta,
            output_memories: (0..device_count)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            site,
            registry: registry.clone(),
        })
    }
}

/// A compiler actor: one of a pool, each on its own thread, all sharing the PJRT client.
pub struct CompilerActor {
    client: PjrtClient,
    devices: Vec<PjrtDevice>,
    _token: crate::runtime::WorkerToken,
}

impl CompilerActor {
    pub fn new(
        client: PjrtClient,
        devices: Vec<PjrtDevice>,
        token: crate::runtime::WorkerToken,
    ) -> Self {
        CompilerActor {
            client,
            devices,
            _token: token,
        }
    }
}

impl Actor for CompilerActor {
    type Context = SyncContext<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        crate::runtime::mark_runtime_thread();
    }
}

impl CompilerActor {
    pub(crate) fn client(&self) -> &PjrtClient {
        &self.client
    }

    pub(crate) fn devices(&self) -> &[PjrtDevice] {
        &self.devices
    }
}

impl Handler<crate::compile_service::CompileJob> for CompilerActor {
    type Result = Result<(PjrtLoadedExecutable, ExecutableMeta)>;

    fn handle(
        &mut self,
        job: crate::compile_service::CompileJob,
        _: &mut SyncContext<Self>,
    ) -> Self::Result {
        let _entered = job.span.enter();
        let _span =
            tracing::debug_span!("compiler.compile", bytes = job.code.len(), key = %job.key.hex())
                .entered();
        guarded("compile", || self.run_job(&job))
    }
}

impl Handler<crate::compile_service::DeserializeJob> for CompilerActor {
    type Result = Result<(PjrtLoadedExecutable, ExecutableMeta)>;

    fn handle(
        &mut self,
        job: crate::compile_service::DeserializeJob,
        _: &mut SyncContext<Self>,
    ) -> Self::Result {
        let _entered = job.span.enter();
        let _span =
            tracing::debug_span!("compiler.deserialize", bytes = job.payload.len()).entered();
        guarded("deserialize", || {
            let exe = self
                .client
                .deserialize_and_load(&job.payload, Some(&job.options))?;
            let meta = ExecutableMeta::read(&exe, &self.devices, job.portable, &job.options)?;
            Ok((exe, meta))
        })
    }
}

/// Checks a program before the plugin parses it: empty input is refused here.
pub fn check_program(code: &[u8]) -> Result<()> {
    if code.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(Error::InvalidArgument("the program is empty".into()));
    }
    Ok(())
}
