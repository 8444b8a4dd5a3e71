//! A served model of either kind, as the endpoints every model has see it: readiness, metadata,
//! configuration and statistics, over HTTP and gRPC alike. A batched model answers `infer`; a
//! generation model answers `generate`, `generate_stream` and `ModelStreamInfer` (decoupled).

use pjrt_actors::ElementType;

use super::error::ServeError;
use super::generation::ServedGeneration;
use super::kserve::{ServedModel, ServerState, TensorSpec, check_version};

/// The platform a generation model reports: JetStream's three exports on a `Generator`.
pub const GENERATION_PLATFORM: &str = "pjrt_generate";

/// A model the server serves, of either kind.
#[derive(Clone, Copy)]
pub enum Served<'a> {
    Batched(&'a ServedModel),
    Generation {
        name: &'a str,
        model: &'a ServedGeneration,
    },
}

impl Served<'_> {
    pub fn name(&self) -> &str {
        match self {
            Served::Batched(m) => &m.name,
            Served::Generation { name, .. } => name,
        }
    }

    pub fn platform(&self) -> &'static str {
        match self {
            Served::Batched(m) => m.platform,
            Served::Generation { .. } => GENERATION_PLATFORM,
        }
    }

    /// Its inputs and outputs as the metadata gives them. A generation model takes the prompt's
    /// ids and answers ids, one response a token on a stream, as Triton's decoupled models do.
    pub fn specs(&self) -> (Vec<TensorSpec>, Vec<TensorSpec>) {
        match self {
            Served::Batched(m) => (m.inputs.clone(), m.outputs.clone()),
            Served::Generation { .. } => {
                let ids = |name: &str| TensorSpec {
                    name: name.into(),
                    dtype: ElementType::S32,
                    dims: Vec::new(),
                };
                (vec![ids("input_ids")], vec![ids("output_ids")])
            }
        }
    }
}

impl ServerState {
    /// The model named, of either kind, at `version` when one is named.
    pub fn served(&self, name: &str, version: &str) -> Result<Served<'_>, ServeError> {
        let served = match self.generations.get_key_value(name) {
            Some((name, model)) => Served::Generation { name, model },
            None => Served::Batched(self.model(name, "")?),
        };
        check_version(name, version)?;
        Ok(served)
    }

    /// Every model served, batched ones first, each kind by name.
    pub fn every_model(&self) -> impl Iterator<Item = Served<'_>> {
        (self.by_name.values().map(Served::Batched)).chain(
            (self.generations.iter()).map(|(name, model)| Served::Generation { name, model }),
        )
    }

    /// Triton's repository index: every model served, each at its one version, `READY` (or
    /// `UNAVAILABLE` while the server drains; none when only ready ones are asked for then).
    pub fn repository_index(&self, only_ready: bool) -> Vec<super::wire::messages::ModelIndex> {
        let ready = self.is_ready();
        (self.every_model())
            .filter(|_| ready || !only_ready)
            .map(|m| super::wire::messages::ModelIndex {
                name: m.name().into(),
                version: super::kserve::VERSION.into(),
                state: if ready { "READY" } else { "UNAVAILABLE" }.into(),
                reason: String::new(),
            })
            .collect()
    }

    /// The generation model named, at `version` when one is named.
    pub fn generation_at(
        &self,
        name: &str,
        version: &str,
    ) -> Result<&ServedGeneration, ServeError> {
        let g = self.generation(name)?;
        check_version(name, version)?;
        Ok(g)
    }
}
