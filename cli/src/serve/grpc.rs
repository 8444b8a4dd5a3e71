//! KServe v2 over gRPC: the `inference.GRPCInferenceService` methods that match the HTTP
//! endpoints, routed by path as tonic's generated servers do (the messages are in
//! wire/messages.rs, generated from Triton's descriptors). An inference message is decoded by
//! us, off the runtime threads when large.
// tonic's `Status` (176 bytes) is what every gRPC method returns: the protocol's error type.
#![allow(clippy::result_large_err)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, ProstCodec};
use tonic::codegen::{BoxFuture, Service, http};
use tonic::{Request, Response, Status};

use super::error::{ServeError, outcome_of_grpc};
use super::infer::{Asked, infer};
use super::kserve::{ServerState, VERSION};
use super::limits::{OFF_THREAD_BYTES, off_thread};
use super::triton;
use super::wire::grpc_contents::read_contents;
use super::wire::messages::*;
use super::wire::{EXTENSIONS, InputHead, RequestParams, datatype_name, shown};

fn status(e: ServeError) -> Status {
    Status::new(e.grpc_code(), e.message())
}

fn invalid(why: String) -> Status {
    status(ServeError::Invalid(format!("inference request: {why}")))
}

/// A request parameter as a whole number from 0, if given.
fn whole(
    params: &std::collections::HashMap<String, InferParameter>,
    name: &str,
) -> Result<Option<u64>, Status> {
    let Some(p) = params.get(name) else {
        return Ok(None);
    };
    match &p.parameter_choice {
        Some(ParameterChoice::Int64Param(n)) if *n >= 0 => Ok(Some(*n as u64)),
        Some(ParameterChoice::Uint64Param(n)) => Ok(Some(*n)),
        other => Err(invalid(format!(
            "parameter `{name}` is {}; it takes a whole number from 0 (int64_param or uint64_param)",
            match other {
                Some(ParameterChoice::Int64Param(n)) => format!("int64_param {n}"),
                Some(ParameterChoice::BoolParam(b)) => format!("bool_param {b}"),
                Some(ParameterChoice::StringParam(s)) => format!("string_param `{}`", shown(s)),
                Some(ParameterChoice::DoubleParam(d)) => format!("double_param {d}"),
                Some(ParameterChoice::Uint64Param(n)) => format!("uint64_param {n}"),
                None => "empty".into(),
            }
        ))),
    }
}

/// One `ModelInfer`: the message decoded, checked against the model, run, answered. `label`
/// learns the model's metrics label as soon as the message names it.
async fn model_infer(
    models: Arc<ServerState>,
    message: Bytes,
    label: Arc<Mutex<String>>,
) -> Result<Response<ModelInferResponse>, Status> {
    models.check_ready().map_err(status)?;
    let big = message.len() >= OFF_THREAD_BYTES;
    let message_held = (models.memory)
        .reserve(message.len(), "the request message")
        .await
        .map_err(status)?;
    let r = (off_thread(big, move || ModelInferRequest::decode(message)).await)
        .map_err(status)?
        .map_err(|e| invalid(format!("not a ModelInferRequest message: {e}")))?;
    *label.lock().unwrap_or_else(|p| p.into_inner()) = models.label(&r.model_name);
    let m = models
        .model(&r.model_name, &r.model_version)
        .map_err(status)?;
    let params = RequestParams {
        priority: whole(&r.parameters, "priority")?,
        timeout_us: whole(&r.parameters, "timeout")?,
    };
    let raw = r.raw_input_contents;
    let typed = r.inputs.iter().any(|i| i.contents.is_some());
    if !raw.is_empty() && (raw.len() != r.inputs.len() || typed) {
        return Err(invalid(format!(
            "{} raw_input_contents for {} inputs{}: give every input's data there, or each in its contents",
            raw.len(),
            r.inputs.len(),
            if typed {
                ", and typed contents too"
            } else {
                ""
            }
        )));
    }
    let mut heads = Vec::with_capacity(r.inputs.len());
    let mut contents = Vec::with_capacity(r.inputs.len());
    for i in r.inputs {
        if let Some(d) = i.shape.iter().find(|&&d| d < 0) {
            return Err(invalid(format!(
                "input `{}` has a dim of {d}; dims are whole numbers from 0",
                shown(&i.name)
            )));
        }
        contents.push(i.contents);
        heads.push(InputHead {
            name: i.name,
            datatype: i.datatype,
            shape: i.shape,
        });
    }
    for o in &r.outputs {
        if o.parameters.contains_key("classification") {
            return Err(invalid(format!(
                "output `{}` asks for classification, which this server does not serve",
                shown(&o.name)
            )));
        }
    }
    let names: Vec<String> = heads.iter().map(|h| h.name.clone()).collect();
    let asked = Asked {
        heads,
        wanted: r.outputs.into_iter().map(|o| o.name).collect(),
        params,
    };
    let read = move |plan: &super::kserve::Plan| -> Result<Vec<Vec<u8>>, String> {
        let mut raw = raw.into_iter();
        (plan.slots.iter().zip(contents).zip(&names))
            .map(|((&(_, dtype, count), typed), name)| match (raw.next(), typed) {
                (Some(bytes), _) => {
                    let want = count * dtype.byte_size();
                    match bytes.len() == want {
                        true => Ok(bytes),
                        false => Err(format!(
                            "input `{name}` has {} bytes of raw contents; {count} {} values are {want}",
                            bytes.len(),
                            datatype_name(dtype).unwrap_or("?")
                        )),
                    }
                }
                (None, Some(c)) => read_contents(&c, dtype, count)
                    .map_err(|why| format!("input `{name}`: {why}")),
                (None, None) if count == 0 => Ok(Vec::new()),
                (None, None) => Err(format!("input `{name}` has no contents")),
            })
            .collect()
    };
    let (answered, held) =
        (infer(&models, m, asked, big, |_| false, read).await).map_err(status)?;
    drop(message_held);
    let mut response = ModelInferResponse {
        model_name: r.model_name,
        model_version: VERSION.into(),
        id: r.id,
        ..Default::default()
    };
    for a in answered {
        response.outputs.push(InferOutputTensor {
            name: a.spec.name,
            datatype: datatype_name(a.data.dtype).unwrap_or("").into(),
            shape: a.data.dims,
            ..Default::default()
        });
        response.raw_output_contents.push(a.data.bytes);
    }
    let mut response = Response::new(response);
    response.extensions_mut().insert(held);
    Ok(response)
}

fn metadata(
    models: &ServerState,
    r: &ModelMetadataRequest,
) -> Result<ModelMetadataResponse, Status> {
    let m = models.served(&r.name, &r.version).map_err(status)?;
    let (inputs, outputs) = m.specs();
    let specs = |specs: &[super::kserve::TensorSpec]| {
        (specs.iter())
            .map(|s| TensorMetadata {
                name: s.name.clone(),
                datatype: datatype_name(s.dtype).unwrap_or("").into(),
                shape: s.metadata_shape(),
            })
            .collect()
    };
    Ok(ModelMetadataResponse {
        name: m.name().into(),
        versions: vec![VERSION.into()],
        platform: m.platform().into(),
        inputs: specs(&inputs),
        outputs: specs(&outputs),
    })
}

/// The service: one unary method per path.
#[derive(Clone)]
pub struct InferenceService {
    pub models: Arc<ServerState>,
}

impl tonic::server::NamedService for InferenceService {
    const NAME: &'static str = "inference.GRPCInferenceService";
}

/// A unary method as a tower service over its decoded request.
struct Unary<F>(F);

impl<Req, Resp, F, Fut> Service<Request<Req>> for Unary<F>
where
    F: FnMut(Req) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    type Response = Response<Resp>;
    type Error = Status;
    type Future = BoxFuture<Response<Resp>, Status>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        Box::pin((self.0)(request.into_inner()))
    }
}

/// The request message's bytes, undecoded: `ModelInfer` decodes them itself.
#[derive(Default)]
struct RawRequest;

struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining())))
    }
}

impl Codec for RawRequest {
    type Encode = ModelInferResponse;
    type Decode = Bytes;
    type Encoder = <ProstCodec<ModelInferResponse, ModelInferRequest> as Codec>::Encoder;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<ModelInferResponse, ModelInferRequest>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder
    }
}

/// Runs `f` on the request `codec` reads, within the message size limit both ways.
fn unary<B, C, F, Fut>(
    request: http::Request<B>,
    codec: C,
    limit: usize,
    f: F,
) -> BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    C: Codec + Send + 'static,
    F: FnMut(C::Decode) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<C::Encode>, Status>> + Send + 'static,
{
    Box::pin(async move {
        Ok(tonic::server::Grpc::new(codec)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit)
            .unary(Unary(f), request)
            .await)
    })
}

/// A plain method: prost both ways, `f` answering at once.
fn plain<B, Req, Resp>(
    request: http::Request<B>,
    limit: usize,
    f: impl FnOnce(Req) -> Result<Resp, Status> + Send + 'static,
) -> BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    let mut f = Some(f);
    unary(
        request,
        ProstCodec::<Resp, Req>::default(),
        limit,
        move |req: Req| {
            let answer = match f.take() {
                Some(f) => f(req).map(Response::new),
                None => Err(Status::internal("a unary method was called twice")),
            };
            async move { answer }
        },
    )
}

/// The client's `grpc-timeout` header (gRPC's `<digits><unit>`), if any.
fn client_deadline(headers: &http::HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

impl<B> Service<http::Request<B>> for InferenceService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let m = self.models.clone();
        let limit = m.limits.body_bytes;
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        match method.as_str() {
            "ServerLive" => plain(req, limit, |_: ServerLiveRequest| {
                Ok(ServerLiveResponse { live: true })
            }),
            "ServerReady" => plain(req, limit, move |_: ServerReadyRequest| {
                Ok(ServerReadyResponse {
                    ready: m.is_ready(),
                })
            }),
            "ModelReady" => plain(req, limit, move |r: ModelReadyRequest| {
                (m.served(&r.name, &r.version).map_err(status)).map(|_| ModelReadyResponse {
                    ready: m.is_ready(),
                })
            }),
            "ServerMetadata" => plain(req, limit, |_: ServerMetadataRequest| {
                Ok(ServerMetadataResponse {
                    name: "pjrt-actors".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
                })
            }),
            "ModelMetadata" => plain(req, limit, move |r: ModelMetadataRequest| metadata(&m, &r)),
            "ModelConfig" => plain(req, limit, move |r: ModelConfigRequest| {
                let model = m.served(&r.name, &r.version).map_err(status)?;
                Ok(ModelConfigResponse {
                    config: Some(triton::model_config(&m, model)),
                })
            }),
            "ModelStatistics" => plain(req, limit, move |r: ModelStatisticsRequest| {
                triton::statistics(&m, &r.name, &r.version).map_err(status)
            }),
            "RepositoryIndex" => plain(req, limit, move |r: RepositoryIndexRequest| {
                Ok(RepositoryIndexResponse {
                    models: m.repository_index(r.ready),
                })
            }),
            "ModelInfer" => self.infer(req),
            "ModelStreamInfer" => super::generate_grpc::stream_infer(m, req),
            other => {
                let status = Status::unimplemented(format!("{} is not served", shown(other)));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

/// The answer to a call without a valid API key in its `authorization` metadata.
pub(super) fn unauthenticated(_method: &str) -> http::Response<tonic::body::Body> {
    Status::unauthenticated(
        "a valid API key is required: send `authorization: Bearer KEY` metadata",
    )
    .into_http()
}

impl InferenceService {
    /// `ModelInfer` within the server's time limit (or the client's deadline, if sooner),
    /// the message's arrival included, counted under its outcome whatever it is.
    fn infer<B>(
        &self,
        req: http::Request<B>,
    ) -> BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let models = self.models.clone();
        let server_limit = models.limits.request_time;
        let limit = client_deadline(req.headers()).map_or(server_limit, |c| c.min(server_limit));
        let label = Arc::new(Mutex::new(String::from("(unknown)")));
        let (m, l) = (models.clone(), label.clone());
        let call = unary(
            req,
            RawRequest,
            models.limits.body_bytes,
            move |message: Bytes| model_infer(m.clone(), message, l.clone()),
        );
        Box::pin(async move {
            let start = Instant::now();
            let response = match tokio::time::timeout(limit, call).await {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    let past = match limit < server_limit {
                        true => ServeError::Expired(format!(
                            "the request took longer than its own deadline ({limit:?}, grpc-timeout)"
                        )),
                        false => ServeError::past_time_limit(server_limit),
                    };
                    status(past).into_http()
                }
            };
            // An error is the whole answer, its status in the headers; a success says OK in
            // its trailers.
            let code = (response.headers().get("grpc-status"))
                .and_then(|v| v.to_str().ok()?.parse::<i32>().ok())
                .map_or(tonic::Code::Ok, tonic::Code::from);
            let label = label.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let note = models.gate.access_note();
            note.set(|n| n.model = Some(label.clone()));
            models
                .metrics
                .record(label, "grpc", outcome_of_grpc(code), start.elapsed());
            let mut response = response;
            note.attach(&mut response);
            Ok(response)
        })
    }
}
