//! The KServe v2 protocol's core, shared by HTTP and gRPC: tensor datatypes, the errors with
//! their HTTP status and gRPC code, and a served model's checks: which version, which inputs
//! (names, datatypes, shapes, rows) and outputs a request may name, and its queue parameters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pjrt_actors::ElementType;
use pjrt_actors::host_data::HostArray;
use pjrt_actors::prometheus::Exposition;
use pjrt_actors::serving::{Batcher, CheckedInputs, InferRequest, InputMismatch, Priority};

use super::error::ServeError;
use super::limits::{Limits, MemoryBudget};
use super::metrics::RequestMetrics;
use super::wire::{InputHead, RequestParams, datatype_name, shown};

/// The one version each model has.
pub const VERSION: &str = "1";

/// A tensor's name, type and shape without the rows.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: ElementType,
    pub dims: Vec<i64>,
}

impl TensorSpec {
    /// Its shape as the protocol's metadata gives it: `-1` for the rows, then its dims.
    pub fn metadata_shape(&self) -> Vec<i64> {
        std::iter::once(-1)
            .chain(self.dims.iter().copied())
            .collect()
    }

    /// Elements in one row.
    fn row_elements(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }
}

/// Triton's queue policy and priorities for one model.
#[derive(Clone, Debug, Default)]
pub struct QueuePolicy {
    pub default_timeout: Option<Duration>,
    pub allow_timeout_override: bool,
    /// 0 or 1: one level; 2: level 1 runs before level 2.
    pub priority_levels: u64,
    pub default_priority: u64,
}

/// A model as the server serves it.
pub struct ServedModel {
    pub name: String,
    pub platform: &'static str,
    pub batcher: Batcher,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub policy: QueuePolicy,
}

/// One output of an answer.
pub struct Answered {
    pub spec: TensorSpec,
    pub data: HostArray,
}

/// A checked request's inputs: for each one given, in the order given, the model input it is
/// and how many elements its data holds.
#[derive(Clone)]
pub struct Plan {
    pub slots: Vec<(usize, ElementType, usize)>,
    pub rows: usize,
    /// The shapes as the batcher's rule checked them: the request is made from these, and not
    /// checked by that rule again.
    pub checked: CheckedInputs,
}

/// What the server's requests share: the models served, the readiness flag, the request
/// metrics and the bounds. (The library's `ModelServer` is a plain router of batchers by name;
/// this is the server's own state around them.)
pub struct ServerState {
    pub by_name: BTreeMap<String, ServedModel>,
    /// The client the models run on, for its own metrics.
    pub client: pjrt_actors::Client,
    pub ready: AtomicBool,
    pub metrics: RequestMetrics,
    pub limits: Limits,
    /// What the requests in flight hold, together.
    pub memory: MemoryBudget,
    /// The generation models, by name (set once at start, before serving).
    pub generations: BTreeMap<String, super::generation::ServedGeneration>,
    /// Set once the server drains: streams subscribe, to end themselves cleanly.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// One permit a connection (both ports), held for the connection's life: the cap, and
    /// what `/metrics` reports open.
    pub connection_slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// Who may reach what (API keys), and the access log's format: for its refusals' count.
    pub gate: std::sync::Arc<super::gate::Gate>,
}

impl ServerState {
    pub fn new(
        client: pjrt_actors::Client,
        models: Vec<ServedModel>,
        limits: Limits,
        memory: MemoryBudget,
        gate: std::sync::Arc<super::gate::Gate>,
    ) -> ServerState {
        ServerState {
            client,
            by_name: models.into_iter().map(|m| (m.name.clone(), m)).collect(),
            ready: AtomicBool::new(true),
            metrics: RequestMetrics::default(),
            limits,
            memory,
            generations: BTreeMap::new(),
            stopping: tokio::sync::watch::Sender::new(false),
            connection_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(limits.connections)),
            gate,
        }
    }

    /// The generation model named.
    pub fn generation(
        &self,
        name: &str,
    ) -> Result<&super::generation::ServedGeneration, ServeError> {
        self.generations.get(name).ok_or_else(|| {
            ServeError::NotFound(format!(
                "no generation model is named `{}`",
                super::wire::shown(name)
            ))
        })
    }

    /// The model named, at `version` when one is named (empty: the latest, the only one).
    pub fn model(&self, name: &str, version: &str) -> Result<&ServedModel, ServeError> {
        let m = self.by_name.get(name).ok_or_else(|| {
            let served: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            let generation: Vec<&str> = self.generations.keys().map(String::as_str).collect();
            let mut says = format!("unknown model `{}`", shown(name));
            if self.generations.contains_key(name) {
                says = format!(
                    "`{}` is a generation model: use /generate, /generate_stream or ModelStreamInfer",
                    shown(name)
                );
            } else if !served.is_empty() {
                says += &format!("; this server serves {}", served.join(", "));
            } else {
                says += &format!(
                    "; this server serves only generation models ({})",
                    generation.join(", ")
                );
            }
            ServeError::NotFound(says)
        })?;
        check_version(name, version)?;
        Ok(m)
    }

    /// The metrics label for a model a request named: its name when served, else one label
    /// for all unknown names (a client cannot grow the metrics without bound).
    /// The label for a generation request: the name only where it is a generation model (a
    /// batched model's statistics never count a /generate it cannot answer).
    pub fn generation_label(&self, name: &str) -> String {
        match self.generations.contains_key(name) {
            true => name.to_string(),
            false => "(unknown)".into(),
        }
    }

    pub fn label(&self, name: &str) -> String {
        match self.by_name.contains_key(name) || self.generations.contains_key(name) {
            true => name.to_string(),
            false => "(unknown)".into(),
        }
    }

    /// The Prometheus text: the request metrics, then each batcher's own.
    pub fn metrics_text(&self) -> String {
        let mut page = Exposition::new();
        self.metrics.render(&mut page);
        let open = "pjrt_actors_server_connections";
        page.family(
            open,
            pjrt_actors::prometheus::Kind::Gauge,
            "Connections open now, both ports (at most --max-connections).",
        );
        let free = self.connection_slots.available_permits();
        page.sample(
            open,
            &[],
            self.limits.connections.saturating_sub(free) as f64,
        );
        self.gate.render(&mut page);
        let batchers: Vec<&Batcher> = self.by_name.values().map(|m| &m.batcher).collect();
        let mut generation = Exposition::new();
        super::generation::render_metrics(&self.generations, &mut generation);
        page.finish() + &pjrt_actors::serving::metrics_text(&batchers) + &generation.finish()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn check_ready(&self) -> Result<(), ServeError> {
        match self.is_ready() {
            true => Ok(()),
            false => Err(ServeError::Unavailable(
                "the server is shutting down".into(),
            )),
        }
    }
}

/// Refuses a version the models lack (empty: the latest, the only one).
pub fn check_version(name: &str, version: &str) -> Result<(), ServeError> {
    match version.is_empty() || version == VERSION {
        true => Ok(()),
        false => Err(ServeError::NotFound(format!(
            "model `{}` has no version `{}`; it has version {VERSION}",
            shown(name),
            shown(version)
        ))),
    }
}

fn names(specs: &[TensorSpec]) -> String {
    specs
        .iter()
        .map(|s| format!("`{}`", s.name))
        .collect::<Vec<_>>()
        .join(", ")
}

impl ServedModel {
    fn bad(&self, why: String) -> ServeError {
        ServeError::Invalid(format!("model `{}`: {why}", self.name))
    }

    /// The inputs a request declares, checked against the model: each name once and known,
    /// none missing, datatypes, shapes, and rows within its batch.
    pub fn plan(&self, heads: &[InputHead]) -> Result<Plan, ServeError> {
        let mut slots = Vec::with_capacity(heads.len());
        let mut seen = vec![false; self.inputs.len()];
        for h in heads {
            let Some(k) = self.inputs.iter().position(|s| s.name == h.name) else {
                return Err(self.bad(format!(
                    "`{}` is not one of its inputs; its inputs are {}",
                    shown(&h.name),
                    names(&self.inputs)
                )));
            };
            if std::mem::replace(&mut seen[k], true) {
                return Err(self.bad(format!("input `{}` is given twice", h.name)));
            }
            slots.push(k);
        }
        if let Some(k) = seen.iter().position(|s| !s) {
            return Err(self.bad(format!(
                "input `{}` is not given; its inputs are {}",
                self.inputs[k].name,
                names(&self.inputs)
            )));
        }
        // The datatype is the protocol's name for a type; the rest is the batcher's rule,
        // checked here once, before any data is read.
        for (h, &k) in heads.iter().zip(&slots) {
            let spec = &self.inputs[k];
            let want_type = datatype_name(spec.dtype).unwrap_or("?");
            if h.datatype != want_type {
                return Err(self.bad(format!(
                    "input `{}` has datatype {}; the model takes {want_type}",
                    spec.name,
                    shown(&h.datatype)
                )));
            }
        }
        // Each model input's head, placed by the slot found above (every input is given once).
        let mut placed: Vec<Option<&InputHead>> = vec![None; self.inputs.len()];
        for (h, &k) in heads.iter().zip(&slots) {
            placed[k] = Some(h);
        }
        let in_model_order: Vec<&InputHead> = placed.into_iter().flatten().collect();
        let shapes = (in_model_order.iter().zip(&self.inputs))
            .map(|(h, spec)| (spec.dtype, h.shape.as_slice()));
        let checked = self.batcher.check_inputs(shapes).map_err(|m| {
            self.bad(match m {
                InputMismatch::Scalar { input } | InputMismatch::Dims { input } => {
                    let (h, spec) = (in_model_order[input], &self.inputs[input]);
                    let dims: Vec<String> = spec.dims.iter().map(|d| d.to_string()).collect();
                    format!(
                        "input `{}` has shape {}; the model takes [rows, {}]",
                        spec.name,
                        super::wire::shown_dims(&h.shape),
                        dims.join(", ")
                    )
                }
                InputMismatch::Rows { input, rows, max } => format!(
                    "input `{}` has {rows} rows; a request has 1 to {max} (its max_batch_size)",
                    self.inputs[input].name
                ),
                InputMismatch::UnequalRows { input, rows, first } => format!(
                    "input `{}` has {rows} rows, another input {first}; every input of a request has the same rows",
                    self.inputs[input].name
                ),
                // Names and datatypes were checked above.
                other => format!("{other}"),
            })
        })?;
        let rows = checked.rows();
        let plan = (slots.into_iter())
            .map(|k| {
                let spec = &self.inputs[k];
                (k, spec.dtype, rows * spec.row_elements())
            })
            .collect();
        Ok(Plan {
            slots: plan,
            rows,
            checked,
        })
    }

    /// Bytes the inputs of a request of `rows` rows hold, read.
    pub fn input_bytes(&self, rows: usize) -> usize {
        (self.inputs.iter())
            .map(|s| rows * s.row_elements() * s.dtype.byte_size())
            .sum()
    }

    /// Bytes the outputs `which` of a request of `rows` rows take as binary data, and as
    /// JSON text at most (the longest number a value of its type is written as, and a comma).
    pub fn answer_bytes(&self, which: &[usize], rows: usize) -> (usize, usize) {
        let (mut binary, mut text) = (0, 0);
        for &k in which {
            let s = &self.outputs[k];
            let n = rows * s.row_elements();
            binary += n * s.dtype.byte_size();
            text += n * (longest_json_number(s.dtype) + 1) + 256;
        }
        (binary, text)
    }

    /// The outputs a request names, by index (all when it names none); a name given twice is
    /// refused, as Triton refuses it.
    pub fn outputs_named(&self, wanted: &[String]) -> Result<Vec<usize>, ServeError> {
        if wanted.is_empty() {
            return Ok((0..self.outputs.len()).collect());
        }
        let mut which = Vec::with_capacity(wanted.len());
        for w in wanted {
            let k = (self.outputs.iter().position(|o| &o.name == w)).ok_or_else(|| {
                self.bad(format!(
                    "`{}` is not one of its outputs; its outputs are {}",
                    shown(w),
                    names(&self.outputs)
                ))
            })?;
            if which.contains(&k) {
                return Err(self.bad(format!("output `{w}` is asked for twice")));
            }
            which.push(k);
        }
        Ok(which)
    }

    /// The request's inputs (as `plan` placed them) in the model's order, with its queue
    /// parameters checked against the policy, as one batcher request.
    pub fn request(
        &self,
        plan: Plan,
        data: Vec<Vec<u8>>,
        heads: Vec<InputHead>,
        params: &RequestParams,
    ) -> Result<InferRequest, ServeError> {
        let mut host: Vec<Option<HostArray>> = (0..self.inputs.len()).map(|_| None).collect();
        for ((&(k, dtype, _), bytes), head) in plan.slots.iter().zip(data).zip(heads) {
            host[k] = Some(HostArray {
                dtype,
                dims: head.shape,
                bytes,
            });
        }
        let host = host
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ServeError::Internal("a planned input was not filled".into()))?;
        let mut request = (plan.checked.into_request(host)).map_err(ServeError::from)?;
        if let Some(t) = self.timeout(params) {
            request = request.timeout(t);
        }
        let p = &self.policy;
        let level = params
            .priority
            .filter(|&l| l > 0)
            .unwrap_or(p.default_priority);
        let levels = p.priority_levels.max(1);
        if level > levels {
            return Err(self.bad(format!("priority {level}; it has {levels} priority levels")));
        }
        if levels > 1 && level <= 1 {
            request = request.priority(Priority::High);
        }
        Ok(request)
    }

    /// The queue timeout a request runs under, as Triton decides it: the policy's default; a
    /// request's own only where the policy allows overriding, and then only shorter than the
    /// default (a request without the override's permission has its timeout ignored).
    pub fn timeout(&self, params: &RequestParams) -> Option<Duration> {
        let p = &self.policy;
        let asked = params
            .timeout_us
            .filter(|&us| us > 0)
            .map(Duration::from_micros);
        match (asked, p.allow_timeout_override) {
            (Some(asked), true) => Some(p.default_timeout.map_or(asked, |d| d.min(asked))),
            _ => p.default_timeout,
        }
    }
}

/// The longest JSON text a value of `t` is written as.
fn longest_json_number(t: ElementType) -> usize {
    use ElementType::*;
    match t {
        Pred => 5,
        S8 | U8 => 4,
        S16 | U16 => 6,
        S32 | U32 => 11,
        S64 | U64 => 20,
        // Shortest round-trip forms, exponent and sign included; non-finite ones are quoted.
        F16 | BF16 | F32 => 17,
        _ => 25,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_json_numbers_are_as_long_as_said() {
        use crate::literal::json_values;
        // Each type's widest values, written as the answers write them.
        let f32s = [
            f32::MIN,
            -f32::MIN_POSITIVE,
            -1.1754942e-38,
            -1e-45,
            -9.999999e-6,
            -1.234_568e15,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let f64s = [
            f64::MIN,
            -f64::MIN_POSITIVE,
            -2.2250738585072e-308,
            -5e-324,
            -9.999999999999999e-6,
            -1234567890123456.8,
            f64::NEG_INFINITY,
        ];
        let cases: [(ElementType, Vec<u8>); 5] = [
            (ElementType::S64, i64::MIN.to_le_bytes().to_vec()),
            (ElementType::U64, u64::MAX.to_le_bytes().to_vec()),
            (ElementType::S32, i32::MIN.to_le_bytes().to_vec()),
            (
                ElementType::F32,
                f32s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            (
                ElementType::F64,
                f64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ];
        for (dtype, bytes) in cases {
            let n = bytes.len() / dtype.byte_size();
            let text = json_values(&HostArray {
                dtype,
                dims: vec![n as i64],
                bytes,
            });
            for value in text.trim_matches(['[', ']']).split(',') {
                assert!(
                    value.len() <= longest_json_number(dtype),
                    "{dtype}: {value}"
                );
            }
        }
    }
}
