//! The KServe v2 protocol's core, shared by HTTP and gRPC: tensor datatypes, a request's
//! inputs checked against the served model and turned into one batcher request, the errors
//! with their HTTP status and gRPC code, and per-model request metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pjrt_actors::host_data::HostData;
use pjrt_actors::serving::{Batcher, InferRequest, Priority};
use pjrt_actors::{ElementType, Error};

/// The protocol's datatype names for our element types.
const DATATYPES: &[(&str, ElementType)] = &[
    ("BOOL", ElementType::Pred),
    ("UINT8", ElementType::U8),
    ("UINT16", ElementType::U16),
    ("UINT32", ElementType::U32),
    ("UINT64", ElementType::U64),
    ("INT8", ElementType::S8),
    ("INT16", ElementType::S16),
    ("INT32", ElementType::S32),
    ("INT64", ElementType::S64),
    ("FP16", ElementType::F16),
    ("BF16", ElementType::BF16),
    ("FP32", ElementType::F32),
    ("FP64", ElementType::F64),
];

pub fn datatype_name(t: ElementType) -> Option<&'static str> {
    DATATYPES.iter().find(|(_, e)| *e == t).map(|(n, _)| *n)
}

pub fn datatype_of(name: &str) -> Option<ElementType> {
    DATATYPES.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
}

/// An error as the protocol reports it.
#[derive(Debug)]
pub enum ServeError {
    /// An unknown model (404, NOT_FOUND).
    NotFound(String),
    /// A request that does not fit the model (400, INVALID_ARGUMENT).
    Invalid(String),
    /// The model's queue is full, or the server is draining (503, UNAVAILABLE).
    Unavailable(String),
    /// The request's deadline passed before it ran (504, DEADLINE_EXCEEDED).
    Expired(String),
    /// The model failed (500, INTERNAL).
    Internal(String),
}

impl ServeError {
    pub fn http_status(&self) -> u16 {
        match self {
            ServeError::NotFound(_) => 404,
            ServeError::Invalid(_) => 400,
            ServeError::Unavailable(_) => 503,
            ServeError::Expired(_) => 504,
            ServeError::Internal(_) => 500,
        }
    }

    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            ServeError::NotFound(_) => tonic::Code::NotFound,
            ServeError::Invalid(_) => tonic::Code::InvalidArgument,
            ServeError::Unavailable(_) => tonic::Code::Unavailable,
            ServeError::Expired(_) => tonic::Code::DeadlineExceeded,
            ServeError::Internal(_) => tonic::Code::Internal,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            ServeError::NotFound(m)
            | ServeError::Invalid(m)
            | ServeError::Unavailable(m)
            | ServeError::Expired(m)
            | ServeError::Internal(m) => m,
        }
    }

    /// The label the request metrics count it under.
    fn outcome(&self) -> &'static str {
        match self {
            ServeError::NotFound(_) => "not_found",
            ServeError::Invalid(_) => "invalid",
            ServeError::Unavailable(_) => "unavailable",
            ServeError::Expired(_) => "expired",
            ServeError::Internal(_) => "failed",
        }
    }
}

impl From<Error> for ServeError {
    fn from(e: Error) -> ServeError {
        let text = e.to_string();
        match e {
            Error::Busy { .. } | Error::Stopped { .. } => ServeError::Unavailable(text),
            Error::Expired { .. } => ServeError::Expired(text),
            Error::InvalidArgument(_) => ServeError::Invalid(text),
            _ => ServeError::Internal(text),
        }
    }
}

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

/// One input as a request gives it: raw little-endian bytes, already decoded from JSON or
/// taken from the binary extension or gRPC's raw contents.
pub struct GivenInput {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
}

/// A request's parameters that the server reads.
#[derive(Default)]
pub struct RequestParams {
    pub priority: Option<u64>,
    pub timeout_us: Option<u64>,
}

/// One output of an answer.
pub struct Answered {
    pub spec: TensorSpec,
    pub data: HostData,
}

/// The models served, the readiness flag, and the request metrics.
pub struct Models {
    pub by_name: BTreeMap<String, ServedModel>,
    /// The client the models run on, for its own metrics.
    pub client: pjrt_actors::Client,
    pub ready: AtomicBool,
    metrics: Mutex<BTreeMap<(String, &'static str, &'static str), Latencies>>,
}

/// Upper bounds (seconds) of the request latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Latencies {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Models {
    pub fn new(client: pjrt_actors::Client, models: Vec<ServedModel>) -> Models {
        Models {
            client,
            by_name: models.into_iter().map(|m| (m.name.clone(), m)).collect(),
            ready: AtomicBool::new(true),
            metrics: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn model(&self, name: &str) -> Result<&ServedModel, ServeError> {
        self.by_name.get(name).ok_or_else(|| {
            ServeError::NotFound(format!(
                "unknown model `{name}`; this server serves {}",
                self.by_name.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Runs one request: checked against the model, batched, answered; counted by model,
    /// protocol and outcome.
    pub async fn infer(
        &self,
        protocol: &'static str,
        model: &str,
        inputs: Vec<GivenInput>,
        params: RequestParams,
        wanted: &[String],
    ) -> Result<Vec<Answered>, ServeError> {
        let start = Instant::now();
        let result = self.infer_unmeasured(model, inputs, params, wanted).await;
        let outcome = result.as_ref().map_or_else(|e| e.outcome(), |_| "ok");
        let key_model = if self.by_name.contains_key(model) {
            model.to_string()
        } else {
            "(unknown)".to_string()
        };
        let mut metrics = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let l = metrics.entry((key_model, protocol, outcome)).or_default();
        let s = start.elapsed().as_secs_f64();
        l.count += 1;
        l.sum += s;
        if let Some(b) = BUCKETS.iter().position(|&b| s <= b) {
            l.buckets[b] += 1;
        }
        result
    }

    async fn infer_unmeasured(
        &self,
        model: &str,
        inputs: Vec<GivenInput>,
        params: RequestParams,
        wanted: &[String],
    ) -> Result<Vec<Answered>, ServeError> {
        if !self.is_ready() {
            return Err(ServeError::Unavailable(
                "the server is shutting down".into(),
            ));
        }
        let m = self.model(model)?;
        let request = m.request(inputs, &params)?;
        let outputs: Vec<usize> = match wanted.is_empty() {
            true => (0..m.outputs.len()).collect(),
            false => (wanted.iter())
                .map(|w| {
                    (m.outputs.iter().position(|o| &o.name == w)).ok_or_else(|| {
                        ServeError::Invalid(format!(
                            "model `{}` has no output `{w}`; its outputs are {}",
                            m.name,
                            names(&m.outputs)
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let response = m.batcher.infer_async(request).await?;
        // Each output moved out at its last request, copied for any earlier one (a request
        // may name an output twice).
        let mut all: Vec<Option<HostData>> = response.outputs.into_iter().map(Some).collect();
        let answered = (outputs.iter().enumerate())
            .map(|(n, &k)| {
                let later = outputs[n + 1..].contains(&k);
                let data = if later { all[k].clone() } else { all[k].take() };
                Answered {
                    spec: m.outputs[k].clone(),
                    data: data.expect("an output is taken only at its last request"),
                }
            })
            .collect();
        Ok(answered)
    }

    /// The Prometheus text: request counts and latencies by model, protocol and outcome, then
    /// each batcher's own metrics.
    pub fn metrics_text(&self) -> String {
        let mut out = String::from(
            "# HELP pjrt_actors_server_requests_total Inference requests by model, protocol and outcome.\n# TYPE pjrt_actors_server_requests_total counter\n",
        );
        let metrics = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        for ((model, protocol, outcome), l) in metrics.iter() {
            out += &format!(
                "pjrt_actors_server_requests_total{{model=\"{model}\",protocol=\"{protocol}\",outcome=\"{outcome}\"}} {}\n",
                l.count
            );
        }
        out += "# HELP pjrt_actors_server_request_seconds Inference request latency, arrival to answer.\n# TYPE pjrt_actors_server_request_seconds histogram\n";
        for ((model, protocol, outcome), l) in metrics.iter() {
            let labels = format!("model=\"{model}\",protocol=\"{protocol}\",outcome=\"{outcome}\"");
            let mut cumulative = 0;
            for (b, n) in BUCKETS.iter().zip(&l.buckets) {
                cumulative += n;
                out += &format!(
                    "pjrt_actors_server_request_seconds_bucket{{{labels},le=\"{b}\"}} {cumulative}\n"
                );
            }
            out += &format!(
                "pjrt_actors_server_request_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n",
                l.count
            );
            out += &format!(
                "pjrt_actors_server_request_seconds_sum{{{labels}}} {}\n",
                l.sum
            );
            out += &format!(
                "pjrt_actors_server_request_seconds_count{{{labels}}} {}\n",
                l.count
            );
        }
        drop(metrics);
        for m in self.by_name.values() {
            out += &m.batcher.metrics();
        }
        out
    }
}

fn names(specs: &[TensorSpec]) -> String {
    specs
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl ServedModel {
    /// The request's inputs checked against the model (names, datatypes, shapes, sizes) and
    /// its parameters against the queue policy, as one batcher request.
    fn request(
        &self,
        inputs: Vec<GivenInput>,
        params: &RequestParams,
    ) -> Result<InferRequest, ServeError> {
        let bad = |why: String| ServeError::Invalid(format!("model `{}`: {why}", self.name));
        if inputs.len() != self.inputs.len() {
            return Err(bad(format!(
                "{} inputs given; it takes {} ({})",
                inputs.len(),
                self.inputs.len(),
                names(&self.inputs)
            )));
        }
        let mut by_name: BTreeMap<String, GivenInput> = BTreeMap::new();
        for i in inputs {
            if by_name.contains_key(&i.name) {
                return Err(bad(format!("input `{}` is given twice", i.name)));
            }
            by_name.insert(i.name.clone(), i);
        }
        let max_rows = self.batcher.max_rows() as i64;
        let mut host = Vec::with_capacity(self.inputs.len());
        for spec in &self.inputs {
            let given = by_name.remove(&spec.name).ok_or_else(|| {
                bad(format!(
                    "no input `{}` given; its inputs are {}",
                    spec.name,
                    names(&self.inputs)
                ))
            })?;
            let want_type = datatype_name(spec.dtype).unwrap_or("?");
            if given.datatype != want_type {
                return Err(bad(format!(
                    "input `{}` has datatype {}; the model takes {want_type}",
                    spec.name, given.datatype
                )));
            }
            let (rows, rest) = given.shape.split_first().unwrap_or((&0, &[]));
            if rest != spec.dims.as_slice() {
                return Err(bad(format!(
                    "input `{}` has shape {:?}; the model takes [rows, {}]",
                    spec.name,
                    given.shape,
                    spec.dims
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if *rows < 1 || *rows > max_rows {
                return Err(bad(format!(
                    "input `{}` has {rows} rows; a request has 1 to {max_rows} (its max_batch_size)",
                    spec.name
                )));
            }
            let expected = pjrt_actors::ArrayType {
                dtype: spec.dtype,
                dims: given.shape.clone(),
            }
            .byte_size()
            .map_err(|e| bad(e.to_string()))?;
            if given.bytes.len() != expected {
                return Err(bad(format!(
                    "input `{}` has {} bytes of data; {want_type}{:?} is {expected}",
                    spec.name,
                    given.bytes.len(),
                    given.shape
                )));
            }
            host.push(HostData {
                dtype: spec.dtype,
                dims: given.shape,
                bytes: given.bytes,
            });
        }
        let mut request = InferRequest::new(host);
        let p = &self.policy;
        match params.timeout_us {
            Some(_) if !p.allow_timeout_override => {
                return Err(bad(
                    "its queue policy does not let a request set its timeout".into(),
                ));
            }
            Some(us) => request = request.timeout(Duration::from_micros(us)),
            None => {
                if let Some(t) = p.default_timeout {
                    request = request.timeout(t);
                }
            }
        }
        let level = params
            .priority
            .filter(|&l| l > 0)
            .unwrap_or(p.default_priority);
        let levels = p.priority_levels.max(1);
        if level > levels {
            return Err(bad(format!(
                "priority {level}; it has {levels} priority levels"
            )));
        }
        if levels > 1 && level <= 1 {
            request = request.priority(Priority::High);
        }
        Ok(request)
    }
}
