//! `LoadedExecutable`: a compiled program loaded on the client's devices, the host callbacks
//! it runs with, its metadata, and execute: single device, replicated, portable; blocking on
//! the caller's thread, or async through the client actor to the device actor. Both forms
//! take the same arguments and run the same `ClientState::execute`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use pjrt_actors_core::arrays::buffers::ArrayCore;
use pjrt_actors_core::arrays::donation::PendingUse;
use pjrt_actors_core::callbacks::{CallbackSet, HostCallback};
use pjrt_actors_core::compile::envelope::{self, Envelope};
use pjrt_actors_core::device::actor::Run;
use pjrt_actors_core::execute::executable::ExecutableCore;
use pjrt_actors_core::execute::{Donate, ExecuteOptions, Outputs as CoreOutputs, caller_context};
use pjrt_actors_core::ids::ExecutableId;
use pjrt_actors_core::pjrt::{ArrayType, CompiledMemoryStats, NamedValue};
use pjrt_actors_core::{Error, Result};
use smallvec::SmallVec;

use crate::handles::{Array, Caller, Client, ClientGuard, Device, LoadedExecutable, wait};

/// One output list per device, as handles.
type Outputs = Vec<Vec<Array>>;

impl LoadedExecutable {
    pub(crate) fn new(
        shared: Arc<ClientGuard>,
        core: Arc<ExecutableCore>,
        callbacks: Option<Arc<CallbackSet>>,
    ) -> Self {
        LoadedExecutable {
            owner: shared.clone(),
            shared,
            core,
            callbacks,
        }
    }

    /// A handle that runs `core` with `callbacks`, refusing a program that calls a callback it
    /// was not given (py_client's `host_callbacks` argument). Every compile and load binds
    /// its callbacks here: a program that calls none, given none, needs no registration; any
    /// other binding goes through the client actor, which checks it and keeps it for
    /// `live_executables`.
    pub(crate) async fn bind(
        shared: Arc<ClientGuard>,
        core: Arc<ExecutableCore>,
        callbacks: Vec<HostCallback>,
    ) -> Result<Self> {
        if core.meta.callback_ids.is_empty() && callbacks.is_empty() {
            return Ok(LoadedExecutable::new(shared, core, None));
        }
        let set = (shared.router().bind_callbacks(core.clone(), callbacks)).await?;
        Ok(LoadedExecutable::new(shared, core, Some(set)))
    }

    /// The host callbacks the program calls, by id.
    pub fn callback_ids(&self) -> &[i64] {
        &self.core.meta.callback_ids
    }

    /// The executable's registry id.
    pub fn id(&self) -> ExecutableId {
        self.core.id
    }

    /// The client it is loaded on.
    pub fn client(&self) -> Client {
        Client {
            shared: self.shared.clone(),
        }
    }

    /// The program's name (its module name).
    pub fn name(&self) -> &str {
        &self.core.meta.name
    }

    /// The plugin's fingerprint of the compiled program.
    pub fn fingerprint(&self) -> &str {
        &self.core.meta.fingerprint
    }

    /// How many outputs the program returns.
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

    /// How many parameters the program takes.
    pub fn num_parameters(&self) -> usize {
        self.core.meta.parameter_types.len()
    }

    /// The serialized `CompileOptionsProto` it was compiled (or loaded) with: the plugin's own
    /// answer where it has one (`PJRT_Executable_GetCompileOptions`, the 0.115 plugins), else
    /// what the runtime sent it, with what the runtime filled in, such as `device_memory_size`
    /// from the allocator and JAX's debug options.
    pub fn compile_options(&self) -> &[u8] {
        &self.core.meta.compile_options
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
        self.shared.state().check_open()?;
        Ok(self.core.exe.cost_analysis()?)
    }

    /// Memory the compiled program needs (arguments, outputs, temporaries, code).
    pub fn compiled_memory_stats(&self) -> Result<CompiledMemoryStats> {
        self.shared.state().check_open()?;
        Ok(self.core.exe.compiled_memory_stats()?)
    }

    /// Serializes the executable (see [`Client::deserialize_executable`]).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let state = self.shared.state();
        state.check_open()?;
        Ok(envelope::encode(&Envelope {
            identity: state.identity().to_string(),
            portable: self.core.meta.portable,
            options: self.core.meta.compile_options.clone(),
            topology: state.topology().to_vec(),
            payload: self.core.meta.plugin_bytes(&self.core.exe)?.to_vec(),
            cache_key: Vec::new(),
        }))
    }

    /// The optimized program as HLO-like text, printed from the module proto the plugin returns.
    pub fn optimized_program_text(&self) -> Result<String> {
        self.shared.state().check_open()?;
        Ok(pjrt_actors_core::formats::hlo_text::module_text(
            &self.core.exe.optimized_module()?,
        ))
    }

    /// The arguments' cores, each checked to be an array of this client.
    fn cores<'a>(&self, args: &[&'a Array]) -> Result<SmallVec<[&'a ArrayCore; 8]>> {
        let mut cores = SmallVec::new();
        for (index, a) in args.iter().enumerate() {
            if !a.core.owned_by(&self.owner) {
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
                .push(Array::new(core));
        }
        lists
    }

    fn flat(&self, outputs: CoreOutputs) -> Vec<Array> {
        let mut arrays = Vec::with_capacity(outputs.len());
        for core in outputs {
            arrays.push(Array::new(core));
        }
        arrays
    }

    /// The device index a portable run names, checked to be this client's.
    fn portable_device(&self, device: Option<&Device>) -> Result<Option<usize>> {
        match device {
            Some(d) if !d.belongs_to(&self.shared) => Err(Error::InvalidArgument(format!(
                "{d} belongs to another client"
            ))),
            Some(d) => Ok(Some(d.index())),
            None => Ok(None),
        }
    }

    /// Runs on the calling thread: the blocking forms.
    #[track_caller]
    fn run(
        &self,
        lists: &[&[&Array]],
        device: Option<&Device>,
        donate: &[usize],
    ) -> Result<CoreOutputs> {
        let portable_device = self.portable_device(device)?;
        let mut cores: SmallVec<[SmallVec<[&ArrayCore; 8]>; 4]> = SmallVec::new();
        for list in lists {
            cores.push(self.cores(list)?);
        }
        let mut core_lists: SmallVec<[&[&ArrayCore]; 4]> = SmallVec::new();
        for list in &cores {
            core_lists.push(list.as_slice());
        }
        let state = self.shared.state();
        // Free to take; the span is looked up only if there is an error to name it in.
        let at = std::panic::Location::caller();
        state
            .execute(
                &self.owner,
                &self.core,
                &core_lists,
                state.site(),
                ExecuteOptions {
                    portable_device,
                    callbacks: self.callbacks.as_deref(),
                    donate: Donate {
                        params: donate,
                        queued: false,
                    },
                },
            )
            .map_err(|e| e.with_context(|| Caller::at(at).describe()))
    }

    /// Runs through the client actor, which hands the run to the (first) device's actor, in
    /// order with the other work sent to it: the async forms. The arguments are checked, the
    /// caller's site taken and the run sent now, as JAX dispatches at the call: the future only
    /// waits for the answer, and dropping it does not stop the run.
    #[track_caller]
    fn run_async(
        &self,
        lists: &[&[&Array]],
        device: Option<&Device>,
        least_loaded: bool,
        donate: &[usize],
    ) -> impl Future<Output = Result<CoreOutputs>> + use<> {
        let site = self.shared.state().site();
        let run = self.portable_device(device).and_then(|portable_device| {
            if least_loaded && !self.core.meta.portable {
                return Err(Error::InvalidArgument(format!(
                    "`{}` is not portable: it runs on the devices it was compiled for",
                    self.name()
                )));
            }
            let mut args = Vec::with_capacity(lists.len());
            for list in lists {
                self.cores(list)?;
                args.push(
                    (list.iter())
                        .map(|a| PendingUse::new(a.core.clone()))
                        .collect(),
                );
            }
            Ok(self.shared.router().execute(Run {
                owner: self.owner.clone(),
                executable: self.core.clone(),
                args,
                donate: donate.to_vec(),
                portable_device,
                least_loaded,
                callbacks: self.callbacks.clone(),
                site,
            }))
        });
        async move { run?.await }
    }

    /// Runs a single-device executable on the calling thread; returns its outputs.
    #[track_caller]
    pub fn execute(&self, args: &[&Array]) -> Result<Vec<Array>> {
        Ok(self.flat(self.run(&[args], None, &[])?))
    }

    /// The async form of [`execute`](Self::execute): the run is sent to the device's actor
    /// when this is called (as JAX dispatches at the call); the future waits for its outputs.
    #[track_caller]
    pub fn execute_async(
        &self,
        args: &[&Array],
    ) -> impl Future<Output = Result<Vec<Array>>> + use<> {
        let run = self.run_async(&[args], None, false, &[]);
        let this = self.clone();
        async move { Ok(this.flat(run.await?)) }
    }

    /// Runs like [`execute`](Self::execute), donating the arguments at the parameter indices
    /// `donate`, as `jax.jit(f, donate_argnums=...)` does: each donated array's buffer may back
    /// the output the program aliases it to (no copy, no second buffer), and the array is
    /// deleted by the call (later uses fail with `Error::Deleted`; every clone of the handle
    /// sees it). Only the parameters the program may donate can be named
    /// ([`donatable_parameters`](Self::donatable_parameters): those JAX exported with
    /// `donate_argnums`, or aliased to an output). Refused with `Error::Donation`, nothing
    /// consumed and nothing run: a parameter the program does not donate, one named twice, a
    /// donated array also passed as another argument, and an array another operation uses
    /// (an execute running, a read, a callback's view) or async work queued on its device will
    /// still use. Arguments not named are never consumed. If the run fails, an array the
    /// plugin did not consume stays live.
    #[track_caller]
    pub fn execute_donating(&self, args: &[&Array], donate: &[usize]) -> Result<Vec<Array>> {
        Ok(self.flat(self.run(&[args], None, donate)?))
    }

    /// The async form of [`execute_donating`](Self::execute_donating). The donation is taken
    /// when the run starts on the device's actor, in order with the work sent to that device
    /// before it: async reads and runs of the array sent earlier finish first.
    #[track_caller]
    pub fn execute_donating_async(
        &self,
        args: &[&Array],
        donate: &[usize],
    ) -> impl Future<Output = Result<Vec<Array>>> + use<> {
        let run = self.run_async(&[args], None, false, donate);
        let this = self.clone();
        async move { Ok(this.flat(run.await?)) }
    }

    /// The parameters this program may donate (see
    /// [`execute_donating`](Self::execute_donating)), sorted; empty when it donates none.
    pub fn donatable_parameters(&self) -> &[usize] {
        &self.core.meta.donor_params
    }

    /// Runs like [`execute`](Self::execute), but gives up waiting once `timeout` has passed:
    /// `Error::DeadlineExceeded`. The program is not cancelled (PJRT cannot stop a running
    /// program): it runs to its end on the device's actor, where later async work waits behind
    /// it, and its outputs are dropped. Shutting the client down waits for it too. Refused
    /// (`Error::BlockingOnRuntimeThread`) inside a host callback on the actor of a device it
    /// runs on, which could not serve it while the callback waits.
    #[track_caller]
    pub fn execute_within(
        &self,
        args: &[&Array],
        timeout: std::time::Duration,
    ) -> Result<Vec<Array>> {
        for &device in &self.core.meta.devices {
            self.shared.refuse_blocking_on_device(device)?;
        }
        let deadline = std::time::Instant::now() + timeout;
        let exceeded = || Error::DeadlineExceeded {
            what: self.name().to_string(),
            after: timeout,
            killed: false,
        };
        let run = self.run_async(&[args], None, false, &[]);
        let outputs = pjrt_actors_core::client::runtime::block_on_until(run, deadline)?
            .ok_or_else(exceeded)??;
        for output in &outputs {
            if !output.wait_ready_until(deadline)? {
                return Err(exceeded());
            }
        }
        Ok(self.flat(outputs))
    }

    /// Runs a portable executable on `device`.
    #[track_caller]
    pub fn execute_on(&self, device: &Device, args: &[&Array]) -> Result<Vec<Array>> {
        Ok(self.flat(self.run(&[args], Some(device), &[])?))
    }

    /// The async form of [`execute_on`](Self::execute_on).
    #[track_caller]
    pub fn execute_on_async(
        &self,
        device: &Device,
        args: &[&Array],
    ) -> impl Future<Output = Result<Vec<Array>>> + use<> {
        let run = self.run_async(&[args], Some(device), false, &[]);
        let this = self.clone();
        async move { Ok(this.flat(run.await?)) }
    }

    /// Runs a portable executable on whichever addressable device has the least async work in
    /// flight (ties taking turns), chosen by the client actor from each device actor's queue
    /// depth: load spreads without the caller choosing. Arguments that live on another device
    /// are copied to the chosen one first (cheap next to a run for small inputs; place large
    /// ones yourself with [`execute_on_async`](Self::execute_on_async)). The outputs are on the
    /// chosen device ([`Array::device`]). `Error::Busy` when every device is at its
    /// [queue limit](crate::ClientBuilder::device_queue_limit).
    #[track_caller]
    pub fn execute_least_loaded_async(
        &self,
        args: &[&Array],
    ) -> impl Future<Output = Result<Vec<Array>>> + use<> {
        let run = self.run_async(&[args], None, true, &[]);
        let this = self.clone();
        async move { Ok(this.flat(run.await?)) }
    }

    /// [`execute_least_loaded_async`](Self::execute_least_loaded_async), waiting on the
    /// calling thread (the run itself is served by the chosen device's actor). Refused inside
    /// a host callback on a device actor's thread, which the choice could be.
    #[track_caller]
    pub fn execute_least_loaded(&self, args: &[&Array]) -> Result<Vec<Array>> {
        if pjrt_actors_core::client::runtime::on_runtime_thread() {
            return Err(Error::BlockingOnRuntimeThread);
        }
        wait(self.execute_least_loaded_async(args))
    }

    /// Runs a replicated executable: one argument list per device, in `addressable_devices`
    /// order; returns one output list per device.
    #[track_caller]
    pub fn execute_replicated(&self, args: &[Vec<&Array>]) -> Result<Outputs> {
        let lists: SmallVec<[&[&Array]; 4]> = args.iter().map(|l| l.as_slice()).collect();
        Ok(self.per_device(self.run(&lists, None, &[])?))
    }

    /// [`execute_replicated`](Self::execute_replicated), donating the parameters `donate` on
    /// every device (see [`execute_donating`](Self::execute_donating)).
    pub(crate) fn execute_replicated_donating(
        &self,
        args: &[Vec<&Array>],
        donate: &[usize],
    ) -> Result<Outputs> {
        let lists: SmallVec<[&[&Array]; 4]> = args.iter().map(|l| l.as_slice()).collect();
        Ok(self.per_device(self.run(&lists, None, donate)?))
    }

    /// The async form of [`execute_replicated`](Self::execute_replicated).
    #[track_caller]
    pub fn execute_replicated_async(
        &self,
        args: &[Vec<&Array>],
    ) -> impl Future<Output = Result<Outputs>> + use<> {
        let lists: SmallVec<[&[&Array]; 4]> = args.iter().map(|l| l.as_slice()).collect();
        let run = self.run_async(&lists, None, false, &[]);
        let this = self.clone();
        async move { Ok(this.per_device(run.await?)) }
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
