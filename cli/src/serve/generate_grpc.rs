//! gRPC `ModelStreamInfer` for generation models, as Triton's decoupled models answer it: each
//! request on the stream (`input_ids`, INT32; `max_tokens`, `temperature`, `top_k`, `top_p`,
//! `seed` as parameters) gets one response per token (`output_ids`, INT32 [1]) and a last one
//! with no outputs and `triton_final_response` true. A client that closes the stream cancels
//! its sequences, which free their decode slots at the next step.
// tonic's `Status` (176 bytes) is what every gRPC method returns: the protocol's error type.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use pjrt_actors::generate::{Finish, TokenEvent, TokenStream};
use tokio::sync::mpsc;
use tonic::Status;
use tonic::codec::ProstCodec;
use tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::{BoxFuture, http};

use super::error::ServeError;
use super::generation::Asked;
use super::kserve::{ServerState, VERSION};
use super::wire::messages::*;
use super::wire::shown;

type Answers = mpsc::UnboundedSender<Result<ModelStreamInferResponse, Status>>;

/// Serves one `ModelStreamInfer` call.
pub fn stream_infer<B>(
    models: Arc<ServerState>,
    req: http::Request<B>,
) -> BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    let limit = models.limits.body_bytes;
    let mut grpc = tonic::server::Grpc::new(ProstCodec::<
        ModelStreamInferResponse,
        ModelInferRequest,
    >::default())
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    Box::pin(async move { Ok(grpc.streaming(StreamInfer { models }, req).await) })
}

struct StreamInfer {
    models: Arc<ServerState>,
}

impl tonic::server::StreamingService<ModelInferRequest> for StreamInfer {
    type Response = ModelStreamInferResponse;
    type ResponseStream = UnboundedReceiverStream<Result<ModelStreamInferResponse, Status>>;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, Status>;

    fn call(
        &mut self,
        request: tonic::Request<tonic::Streaming<ModelInferRequest>>,
    ) -> Self::Future {
        let models = self.models.clone();
        Box::pin(async move {
            let (answers, out) = mpsc::unbounded_channel();
            let mut incoming = request.into_inner();
            tokio::spawn(async move {
                // Each request runs on its own task; the stream ends when the client closes it.
                while let Ok(Some(r)) = incoming.message().await {
                    let (model, id) = (r.model_name.clone(), r.id.clone());
                    match start(&models, r) {
                        Ok(stream) => {
                            tokio::spawn(forward(stream, model, id, answers.clone()));
                        }
                        Err(e) => {
                            let failed = ModelStreamInferResponse {
                                error_message: e.message().to_string(),
                                infer_response: None,
                            };
                            if answers.send(Ok(failed)).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
            Ok(tonic::Response::new(UnboundedReceiverStream::new(out)))
        })
    }
}

fn invalid(why: String) -> ServeError {
    ServeError::Invalid(format!("generate request: {why}"))
}

/// A parameter as a whole number from 0, or a number, if given.
fn whole(params: &HashMap<String, InferParameter>, name: &str) -> Result<Option<u64>, ServeError> {
    match params.get(name).and_then(|p| p.choice.as_ref()) {
        None => Ok(None),
        Some(ParameterChoice::Int64(n)) if *n >= 0 => Ok(Some(*n as u64)),
        Some(ParameterChoice::Uint64(n)) => Ok(Some(*n)),
        Some(_) => Err(invalid(format!(
            "parameter `{name}` takes a whole number from 0"
        ))),
    }
}

fn number(params: &HashMap<String, InferParameter>, name: &str) -> Result<Option<f32>, ServeError> {
    match params.get(name).and_then(|p| p.choice.as_ref()) {
        None => Ok(None),
        Some(ParameterChoice::Double(d)) => Ok(Some(*d as f32)),
        Some(ParameterChoice::Int64(n)) => Ok(Some(*n as f32)),
        Some(ParameterChoice::Uint64(n)) => Ok(Some(*n as f32)),
        Some(_) => Err(invalid(format!("parameter `{name}` takes a number"))),
    }
}

/// The prompt of a request: its one input, `input_ids`, INT32 of shape [n] or [1, n].
fn prompt(r: &ModelInferRequest) -> Result<Vec<i32>, ServeError> {
    let [input] = r.inputs.as_slice() else {
        return Err(invalid(format!(
            "a generation model takes one input, input_ids; {} given",
            r.inputs.len()
        )));
    };
    if input.name != "input_ids" || input.datatype != "INT32" {
        return Err(invalid(format!(
            "the input is `{}` {}; the model takes input_ids, INT32",
            shown(&input.name),
            shown(&input.datatype)
        )));
    }
    let n: i64 = input.shape.iter().product();
    if !matches!(input.shape.as_slice(), [_] | [1, _]) || n < 0 {
        return Err(invalid(format!(
            "input_ids has shape {:?}; it takes [n] or [1, n]",
            input.shape
        )));
    }
    let ids: Vec<i32> = match (r.raw_input_contents.first(), &input.contents) {
        (Some(raw), None) if raw.len() % 4 == 0 => (raw.chunks_exact(4))
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        (None, Some(c)) => c.int_contents.clone(),
        _ => {
            return Err(invalid(
                "input_ids needs its raw contents or int_contents".into(),
            ));
        }
    };
    match ids.len() as i64 == n {
        true => Ok(ids),
        false => Err(invalid(format!(
            "input_ids has {} values for shape {:?}",
            ids.len(),
            input.shape
        ))),
    }
}

fn start(models: &ServerState, r: ModelInferRequest) -> Result<TokenStream, ServeError> {
    models.check_ready()?;
    let g = models.generation(&r.model_name)?;
    let p = &r.parameters;
    let asked = Asked {
        max_tokens: whole(p, "max_tokens")?.map(|n| n as usize),
        temperature: number(p, "temperature")?,
        top_k: whole(p, "top_k")?.map(|n| n as usize),
        top_p: number(p, "top_p")?,
        seed: whole(p, "seed")?,
        stop: None,
        stream: None,
    };
    let request = g.request(prompt(&r)?, &asked, models.limits.request_time)?;
    Ok(g.generator.submit(request)?)
}

fn response(
    model: &str,
    id: &str,
    token: Option<i32>,
    finish: Option<Finish>,
) -> ModelStreamInferResponse {
    let param = |choice| InferParameter {
        choice: Some(choice),
    };
    let mut parameters = HashMap::new();
    parameters.insert(
        "triton_final_response".into(),
        param(ParameterChoice::Bool(finish.is_some())),
    );
    if let Some(f) = finish {
        parameters.insert(
            "finish_reason".into(),
            param(ParameterChoice::String(f.as_str().into())),
        );
    }
    let (outputs, raw) = match token {
        Some(t) => (
            vec![InferOutputTensor {
                name: "output_ids".into(),
                datatype: "INT32".into(),
                shape: vec![1],
            }],
            vec![t.to_le_bytes().to_vec()],
        ),
        None => (Vec::new(), Vec::new()),
    };
    ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(ModelInferResponse {
            model_name: model.into(),
            model_version: VERSION.into(),
            id: id.into(),
            parameters,
            outputs,
            raw_output_contents: raw,
        }),
    }
}

/// Sends a sequence's tokens as responses until it ends or the client goes away (dropping the
/// stream then cancels the sequence).
async fn forward(mut stream: TokenStream, model: String, id: String, answers: Answers) {
    while let Some(event) = stream.next().await {
        let (answer, last) = match event {
            Ok(TokenEvent::Token(t)) => (response(&model, &id, Some(t), None), false),
            Ok(TokenEvent::Done(f)) => (response(&model, &id, None, Some(f)), true),
            Err(e) => (
                ModelStreamInferResponse {
                    error_message: ServeError::from(e).message().to_string(),
                    infer_response: None,
                },
                true,
            ),
        };
        if answers.send(Ok(answer)).is_err() || last {
            return;
        }
    }
}
