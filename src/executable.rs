//! `LoadedExecutable`: a compiled program loaded on the client's devices, its metadata, and
//! execute (single device, replicated, portable; blocking on the caller's thread, or async
//! through the device actor). Compile lives here too.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use pjrt_actors_core::actors::device::ExecuteRequest;
use pjrt_actors_core::compile::{
    CompileOptions, CompileRequest, DeviceFacts, ExecutableCore, check_program,
};
use pjrt_actors_core::execute::{Outputs as CoreOutputs, caller_context, execute};
use pjrt_actors_core::pjrt::{ArrayType, CompiledMemoryStats, NamedValue};
use pjrt_actors_core::registry::{ArrayCore, ArrayOwner, Id};
use pjrt_actors_core::{Error, Result};

use crate::array::Array;
use crate::client::{Client, Shared, ask, ask_async};
use crate::device::Device;

/// A loaded executable. `Clone + Send + Sync`; dropping the last clone unloads it.
#[derive(Clone)]
pub struct LoadedExecutable {
    pub(crate) shared: Arc<Shared>,
    /// `shared` as the owner of the arrays this executable makes (coerced once, not per call).
    owner: Arc<dyn ArrayOwner>,
    pub(crate) core: Arc<ExecutableCore>,
}

impl Client {
    fn device_facts(&self) -> DeviceFacts {
        let snap = self.shared.snapshot();
        let res = &self.shared.parts.resources;
        let device_memory_limit = res
            .devices
            .iter()
            .zip(&snap.devices)
            .filter(|(_, s)| s.is_addressable)
            .filter_map(|(d, _)| d.memory_stats().ok().flatten())
            .filter_map(|s| s.bytes_limit)
            .min();
        DeviceFacts {
            devices: snap
                .devices
                .iter()
                .map(|d| (d.id, d.is_addressable))
                .collect(),
            device_memory_limit,
        }
    }

    fn compile_request(&self, program: &[u8], options: &CompileOptions) -> Result<CompileRequest> {
        check_program(program)?;
        Ok(CompileRequest {
            code: program.to_vec(),
            options: options.to_proto(&self.device_facts())?,
            span: tracing::Span::current(),
        })
    }

    fn wrap_executable(
        &self,
        (exe, meta): (
            pjrt_actors_core::pjrt::PjrtLoadedExecutable,
            pjrt_actors_core::compile::ExecutableMeta,
        ),
    ) -> LoadedExecutable {
        let res = &self.shared.parts.resources;
        let core = ExecutableCore::register(&res.executables, exe, meta, res.devices.len());
        LoadedExecutable::new(self.shared.clone(), core)
    }

    /// Compiles a StableHLO/MLIR program (text or bytecode) on the compiler pool and loads it.
    /// Options the plugin would abort on are filled in or refused first.
    pub fn compile_and_load(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        let request = self.compile_request(program.as_ref(), options)?;
        let compiled = ask(&self.shared.parts.compiler, request)?;
        Ok(self.wrap_executable(compiled))
    }

    /// The async form of [`compile_and_load`](Self::compile_and_load).
    pub async fn compile_and_load_async(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        let request = self.compile_request(program.as_ref(), options)?;
        let compiled = ask_async(&self.shared.parts.compiler, request).await?;
        Ok(self.wrap_executable(compiled))
    }

    /// Every loaded executable still alive (py_client's `live_executables`).
    pub fn live_executables(&self) -> Vec<LoadedExecutable> {
        self.shared
            .parts
            .resources
            .executables
            .entries()
            .into_iter()
            .filter_map(|(_, weak)| weak.upgrade())
            .map(|core| LoadedExecutable::new(self.shared.clone(), core))
            .collect()
    }
}

/// One output list per device, as handles.
type Outputs = Vec<Vec<Array>>;

impl LoadedExecutable {
    fn new(shared: Arc<Shared>, core: Arc<ExecutableCore>) -> Self {
        LoadedExecutable {
            owner: shared.clone(),
            shared,
            core,
        }
    }

    pub fn id(&self) -> Id {
        self.core.id
    }

    pub fn client(&self) -> Client {
        Client {
            shared: self.shared.clone(),
        }
    }

    pub fn name(&self) -> &str {
        &self.core.meta.name
    }

    /// The plugin's fingerprint of the compiled program.
    pub fn fingerprint(&self) -> &str {
        &self.core.meta.fingerprint
    }

    pub fn num_outputs(&self) -> usize {
        self.core.meta.num_outputs
    }

    /// Output element types and dimensions.
    pub fn output_types(&self) -> &[ArrayType] {
        &self.core.meta.output_types
    }

    /// Parameter element types and dimensions, as the compiled program expects them.
    pub fn parameter_types(&self) -> &[ArrayType] {
        &self.core.meta.parameter_types
    }

    pub fn num_parameters(&self) -> usize {
        self.core.meta.parameter_types.len()
    }

    /// Whether the executable takes its device at execute time.
    pub fn is_portable(&self) -> bool {
        self.core.meta.portable
    }

    /// The devices it runs on, in replica order (for a portable one, where it was compiled).
    pub fn addressable_devices(&self) -> Vec<Device> {
        self.core
            .meta
            .devices
            .iter()
            .map(|&i| Device::new(self.shared.clone(), i))
            .collect()
    }

    /// XLA's cost analysis (`flops`, `bytes accessed`, `transcendentals`, ...).
    pub fn cost_analysis(&self) -> Result<Vec<(String, NamedValue)>> {
        self.core.exe.cost_analysis()
    }

    /// Memory the compiled program needs (arguments, outputs, temporaries, code).
    pub fn compiled_memory_stats(&self) -> Result<CompiledMemoryStats> {
        self.core.exe.compiled_memory_stats()
    }

    /// The optimized program as HLO-like text, printed from the module proto the plugin returns.
    pub fn optimized_program_text(&self) -> Result<String> {
        Ok(pjrt_actors_core::hlo_text::module_text(
            &self.core.exe.optimized_module()?,
        ))
    }

    fn cores<'a>(&self, args: &[&'a Array]) -> Result<SmallVec<[&'a ArrayCore; 8]>> {
        let mut cores = SmallVec::new();
        for (index, a) in args.iter().enumerate() {
            if !a.core.owned_by(&self.shared) {
                return Err(Error::BadArgument {
                    executable: self.name().to_string(),
                    index,
                    reason: "the array belongs to another client".into(),
                    context: caller_context(),
                });
            }
            cores.push(&*a.core);
        }
        Ok(cores)
    }

    fn wrap(&self, core: Arc<ArrayCore>) -> Array {
        Array { core }
    }

    /// Splits flat, device-major outputs into one list per device.
    fn per_device(&self, outputs: CoreOutputs) -> Outputs {
        let n = self.num_outputs().max(1);
        let mut lists: Outputs = Vec::with_capacity(outputs.len() / n);
        for (i, core) in outputs.into_iter().enumerate() {
            if i % n == 0 {
                lists.push(Vec::with_capacity(n));
            }
            lists
                .last_mut()
                .expect("pushed above")
                .push(self.wrap(core));
        }
        lists
    }

    fn run(&self, lists: &[&[&Array]], device: Option<&Device>) -> Result<CoreOutputs> {
        let portable_device = match device {
            Some(d) if !d.belongs_to(&self.shared) => {
                return Err(Error::InvalidArgument(format!(
                    "{d} belongs to another client"
                )));
            }
            Some(d) => Some(d.index()),
            None => None,
        };
        let mut cores: SmallVec<[SmallVec<[&ArrayCore; 8]>; 4]> = SmallVec::new();
        for list in lists {
            cores.push(self.cores(list)?);
        }
        let mut core_lists: SmallVec<[&[&ArrayCore]; 4]> = SmallVec::new();
        for list in &cores {
            core_lists.push(list.as_slice());
        }
        let ctx = self.shared.parts.resources.execute_context(&self.owner);
        execute(&ctx, &self.core, &core_lists, portable_device)
    }

    /// Runs a single-device executable on the calling thread; returns its outputs.
    pub fn execute(&self, args: &[&Array]) -> Result<Vec<Array>> {
        let outputs = self.run(&[args], None)?;
        let mut arrays = Vec::with_capacity(outputs.len());
        for core in outputs {
            arrays.push(self.wrap(core));
        }
        Ok(arrays)
    }

    /// Runs a portable executable on `device`.
    pub fn execute_on(&self, device: &Device, args: &[&Array]) -> Result<Vec<Array>> {
        Ok(self
            .run(&[args], Some(device))?
            .into_iter()
            .map(|c| self.wrap(c))
            .collect())
    }

    /// Runs a replicated executable: one argument list per device, in `addressable_devices`
    /// order; returns one output list per device.
    pub fn execute_replicated(&self, args: &[Vec<&Array>]) -> Result<Outputs> {
        let lists: SmallVec<[&[&Array]; 4]> = args.iter().map(|l| l.as_slice()).collect();
        Ok(self.per_device(self.run(&lists, None)?))
    }

    /// The async form of execute: the run is served by the (first) device's actor, in order
    /// with the other work sent to it. `device` is for portable executables.
    pub async fn execute_async(
        &self,
        args: Vec<Vec<Array>>,
        device: Option<&Device>,
    ) -> Result<Outputs> {
        for list in &args {
            self.cores(&list.iter().collect::<Vec<_>>())?;
        }
        let target = match device {
            Some(d) if !d.belongs_to(&self.shared) => {
                return Err(Error::InvalidArgument(format!(
                    "{d} belongs to another client"
                )));
            }
            Some(d) => d.clone(),
            None => self
                .addressable_devices()
                .into_iter()
                .next()
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("`{}` has no device", self.name()))
                })?,
        };
        let request = ExecuteRequest {
            owner: self.owner.clone(),
            executable: self.core.clone(),
            args: args
                .into_iter()
                .map(|l| l.into_iter().map(|a| a.core).collect())
                .collect(),
            portable_device: device.map(|d| d.index()),
            span: tracing::Span::current(),
        };
        let outputs = ask_async(target.actor()?, request).await?;
        Ok(self.per_device(outputs))
    }
}

impl PartialEq for LoadedExecutable {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}
impl Eq for LoadedExecutable {}

impl fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoadedExecutable({}, id {})", self.name(), self.id())
    }
}
