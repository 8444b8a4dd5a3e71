//! Compiling without loading: `Executable` (a compiled program, not loaded), compile for a
//! topology, topologies made by name, and the one ahead-of-time path behind them (the plugin's
//! `PJRT_Compile`, with the load-and-release fallback for plugins without it).

use std::fmt;
use std::sync::Arc;

use pjrt_actors_core::compile::program_check::{explain_parse_failure, plugin_stablehlo};
use pjrt_actors_core::compile::{CompileOptions, encode_options, envelope, flow};
use pjrt_actors_core::execute::executable::ExecutableMeta;
use pjrt_actors_core::pjrt::{ArrayType, NamedValue};
use pjrt_actors_core::{Error, Result, TopologyDescription};

use crate::compile::CompileRequest;
use crate::handles::{Client, LoadedExecutable, wait};

impl CompileRequest {
    /// Compiles without loading: the result can be inspected, serialized, and loaded later on
    /// any client whose topology matches this one's. Where the plugin has `PJRT_Compile` (GPU
    /// plugins do), nothing is loaded at all. The CPU plugin has none: there this compiles on
    /// this client, serializes, and lets the load go, so it is not live, cached or in heap
    /// profiles afterwards (unless it was loaded here already).
    pub fn compile(self) -> Result<Executable> {
        wait(self.compile_async())
    }

    /// The async form of [`compile`](Self::compile): the compile is served by the compiler
    /// pool (or, without `PJRT_Compile`, the compile service), and nothing blocks here.
    pub async fn compile_async(self) -> Result<Executable> {
        let client = Client {
            shared: self.shared.clone(),
        };
        let own = client.topology_async().await?;
        let ahead = compile_ahead(&client, &self.program, &self.options, &own, true)?;
        if let Some(compiled) = ahead.await? {
            return Ok(compiled);
        }
        self.compile_by_loading().await
    }

    /// `compile` where the plugin has no ahead-of-time compiler: load, serialize, let go.
    pub(crate) async fn compile_by_loading(self) -> Result<Executable> {
        let state = self.shared.state();
        let key = flow::prepare(state, &self.program, &self.options)?.key;
        // A program already loaded here stays so; one loaded only for this compile is let go.
        let loaded_before = state.cached_executable(&key).is_some();
        let shared = self.shared.clone();
        let loaded = self.load_async().await?;
        let executable = Executable::from_loaded(&loaded)?;
        drop(loaded);
        if !loaded_before {
            shared.compile_service().forget(key).await?;
        }
        Ok(executable)
    }
}

impl Client {
    /// Compiles for a topology (py_client's `compile(..., topology)`, JAX's ahead-of-time
    /// compile): the client's own (see [`topology`](Self::topology)), one rebuilt from its
    /// bytes, or one the plugin made ([`create_topology`](Self::create_topology)). Where the
    /// plugin has `PJRT_Compile`, the target's devices need not be in this process. Where it
    /// has not (CPU), only a topology that [matches](TopologyDescription::matches) this
    /// client's compiles, through this client; another is `Error::TopologyMismatch`.
    #[track_caller]
    pub fn compile_for_topology(
        &self,
        program: impl AsRef<[u8]>,
        options: &CompileOptions,
        topology: &TopologyDescription,
    ) -> Result<Executable> {
        wait(self.compile_for_topology_async(program, options, topology))
    }

    /// The async form of [`compile_for_topology`](Self::compile_for_topology): the program is
    /// checked and copied now; the future borrows nothing.
    #[track_caller]
    pub fn compile_for_topology_async<P: AsRef<[u8]>>(
        &self,
        program: P,
        options: &CompileOptions,
        topology: &TopologyDescription,
    ) -> impl Future<Output = Result<Executable>> + use<P> {
        // The request's copy of the program serves the ahead-of-time path too: one copy.
        let request = self.compile_request(program).options(options);
        let own = (self.topology()).map(|t| t.matches(topology));
        let ahead = (own.as_ref().map_err(Error::clone))
            .and_then(|&own| compile_ahead(self, &request.program, options, topology, own));
        let platform = self.platform().to_string();
        async move {
            let own = own?;
            if let Some(compiled) = ahead?.await? {
                return Ok(compiled);
            }
            if !own {
                return Err(Error::TopologyMismatch {
                    reason: format!(
                        "this {platform} client's topology differs, and the plugin cannot compile without a client of that topology (it has no `PJRT_Compile`)",
                    ),
                });
            }
            request.compile_by_loading().await
        }
    }

    /// A topology the plugin builds from a name and plugin-specific options
    /// (`PJRT_TopologyDescription_Create`), to compile for devices this process need not have.
    /// What a plugin accepts is its own; the CPU plugin accepts nothing and answers an error.
    pub fn create_topology(
        &self,
        name: &str,
        options: &[(&str, NamedValue)],
    ) -> Result<TopologyDescription> {
        wait(self.create_topology_async(name, options))
    }

    /// The async form of [`create_topology`](Self::create_topology): the client actor asks
    /// the plugin.
    pub fn create_topology_async(
        &self,
        name: &str,
        options: &[(&str, NamedValue)],
    ) -> impl Future<Output = Result<TopologyDescription>> + use<> {
        let options = (options.iter())
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        (self.shared.compiler_pool()).create_topology(name.to_string(), options)
    }
}

/// A compiled program that is not loaded: inspect it, serialize it, load it later on a client
/// whose topology matches the one it was compiled for.
#[derive(Clone)]
pub struct Executable {
    bytes: Arc<Vec<u8>>,
    meta: Arc<ExecutableMeta>,
    cost_analysis: Arc<Result<Vec<(String, NamedValue)>>>,
    topology: Arc<TopologyDescription>,
}

impl Executable {
    fn from_loaded(loaded: &LoadedExecutable) -> Result<Self> {
        Ok(Executable {
            bytes: Arc::new(loaded.serialize()?),
            meta: Arc::new(loaded.core.meta.clone()),
            cost_analysis: Arc::new(loaded.cost_analysis()),
            topology: Arc::new(loaded.client().topology()?),
        })
    }

    /// The program's name (its module name).
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The plugin's fingerprint of the compiled program.
    pub fn fingerprint(&self) -> &str {
        &self.meta.fingerprint
    }

    /// How many outputs the program returns.
    pub fn num_outputs(&self) -> usize {
        self.meta.num_outputs
    }

    /// Output element types and dimensions.
    pub fn output_types(&self) -> &[ArrayType] {
        &self.meta.output_types
    }

    /// Parameter element types and dimensions.
    pub fn parameter_types(&self) -> &[ArrayType] {
        &self.meta.parameter_types
    }

    /// XLA's cost analysis, taken when it was compiled; the plugin's error where it has none
    /// (the 0.115 CPU plugin: a typed `UNIMPLEMENTED`), as `LoadedExecutable::cost_analysis`.
    pub fn cost_analysis(&self) -> Result<&[(String, NamedValue)]> {
        match self.cost_analysis.as_ref() {
            Ok(costs) => Ok(costs),
            Err(e) => Err(e.clone()),
        }
    }

    /// The serialized topology it was compiled for.
    pub fn topology(&self) -> &[u8] {
        &self.topology.serialized
    }

    /// The topology it was compiled for: platform, version, devices, attributes.
    pub fn topology_description(&self) -> &TopologyDescription {
        &self.topology
    }

    /// The serialized executable (what [`Client::deserialize_executable`] loads).
    pub fn serialize(&self) -> Vec<u8> {
        self.bytes.to_vec()
    }

    /// Loads it on `client`, whose topology must be the one it was compiled for.
    pub fn load(&self, client: &Client) -> Result<LoadedExecutable> {
        if !client.topology()?.matches(&self.topology) {
            return Err(Error::TopologyMismatch {
                reason: format!(
                    "`{}` was compiled for another topology than this client's ({} devices)",
                    self.name(),
                    client.device_count()
                ),
            });
        }
        client.deserialize_executable(&self.bytes, None, &[])
    }
}

/// Compiles with the plugin's ahead-of-time compiler (`PJRT_Compile`) for `topology`, nothing
/// loaded: `None` where the plugin has none (the CPU plugin answers `NotFound`), so the caller
/// can fall back. `own` says `topology` is this client's, which is then given as a hint. The
/// program is checked now; the future waits for the compiler pool.
fn compile_ahead(
    client: &Client,
    program: &Arc<Vec<u8>>,
    options: &CompileOptions,
    topology: &TopologyDescription,
    own: bool,
) -> Result<impl Future<Output = Result<Option<Executable>>> + use<>> {
    let state = client.state();
    flow::check(state, program, options.allow_known_defects)?;
    let snap = state.snapshot();
    let prepared = flow::prepare(state, program, options)?;
    let options = &prepared.options;
    let proto = encode_options(&prepared.proto);
    let compiled = client.shared.compiler_pool().compile_ahead(
        program.clone(),
        proto.clone(),
        options.portable,
        (!own).then(|| topology.serialized.clone()),
    );
    let (program, version) = (program.clone(), plugin_stablehlo(&snap.plugin_attributes));
    let (identity, portable) = (state.identity().to_string(), options.portable);
    let serialized = topology.serialized.clone();
    Ok(async move {
        let compiled = match compiled.await {
            Ok(compiled) => compiled,
            Err(e) if no_ahead_of_time_compiler(&e) => return Ok(None),
            Err(e) => return Err(explain_parse_failure(e, &program, &version)),
        };
        let bytes = envelope::encode(&envelope::Envelope {
            identity,
            portable,
            options: proto,
            topology: serialized,
            payload: compiled.payload,
            cache_key: Vec::new(),
        });
        Ok(Some(Executable {
            bytes: Arc::new(bytes),
            meta: Arc::new(compiled.meta),
            cost_analysis: Arc::new(compiled.cost_analysis),
            topology: Arc::new(compiled.topology),
        }))
    })
}

/// Whether a `PJRT_Compile` failure means the plugin has no compiler for it at all (CPU:
/// `NOT_FOUND: No compiler registered for platform cpu`), rather than a bad program.
fn no_ahead_of_time_compiler(e: &Error) -> bool {
    use pjrt_actors_core::PjrtCode::{NotFound, Unimplemented};
    matches!(e.pjrt_code(), Some(NotFound | Unimplemented))
        || matches!(e, Error::Unsupported { .. })
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Executable({}, {} bytes)", self.name(), self.bytes.len())
    }
}
