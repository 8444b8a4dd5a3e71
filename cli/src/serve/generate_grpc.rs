//! gRPC `ModelStreamInfer` for generation models, as Triton's decoupled models answer it: each
//! request on the stream (`input_ids`, INT32; `max_tokens`, `temperature`, `top_k`, `top_p`,
//! `seed` as parameters) gets one response per token (`output_ids`, INT32 [1]) and a last one
//! with no outputs and `triton_final_response` true. A client that closes the stream cancels
//! its sequences, which free their decode slots at the next step. Each stream's answers wait in
//! a bounded queue (no request is read while it is full), an idle stream is closed, and in a
//! drain each running sequence ends with a final response that says so.
// tonic's `Status` (176 bytes) is what every gRPC method returns: the protocol's error type.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use pjrt_actors::generate::{TokenEvent, TokenStream};
use tokio::sync::mpsc;
use tonic::Status;
use tonic::codec::ProstCodec;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::{BoxFuture, http};

use super::error::ServeError;
use super::kserve::{ServerState, VERSION};
use super::listen::{Activity, InFlight, stopped};
use super::wire::generate_request;
use super::wire::messages::*;

type Answers = mpsc::Sender<Result<ModelStreamInferResponse, Status>>;

/// Answers one stream may have waiting for its client: past it, the server reads no further
/// request from the stream and its sequences wait to send (each within its time limit), so a
/// client that does not read holds this many answers, not all it asked for.
pub const STREAM_ANSWERS: usize = 64;

/// Sequences one stream may have running at once: the next request on it is read when one
/// ends. The answers queue alone would not hold a stream back: the server reads requests far
/// faster than sequences answer, so a client that reads nothing could start every request it
/// sends before the first answer waits.
pub const STREAM_SEQUENCES: usize = 16;

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
    type ResponseStream = ReceiverStream<Result<ModelStreamInferResponse, Status>>;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, Status>;

    fn call(
        &mut self,
        request: tonic::Request<tonic::Streaming<ModelInferRequest>>,
    ) -> Self::Future {
        let models = self.models.clone();
        Box::pin(async move {
            let (answers, out) = mpsc::channel(STREAM_ANSWERS);
            tokio::spawn(read_requests(models, request.into_inner(), answers));
            Ok(tonic::Response::new(ReceiverStream::new(out)))
        })
    }
}

/// Reads a stream's requests, each started on a task of its own, until the client closes it,
/// a message cannot be read (answered, then the stream ends with its non-OK status), the
/// stream is idle past the idle time (no sequence running, no request), or the server drains.
async fn read_requests(
    models: Arc<ServerState>,
    mut incoming: tonic::Streaming<ModelInferRequest>,
    answers: Answers,
) {
    let idle = models.limits.idle_time;
    let mut stop = models.stopping.subscribe();
    // Its sequences in flight, as a connection's requests are: idle when none runs.
    let running = Activity::new();
    let sequences = Arc::new(tokio::sync::Semaphore::new(STREAM_SEQUENCES));
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);
    loop {
        // A sequence's place and room for one answer first: while the client reads none, no
        // request is read.
        let place = tokio::select! {
            place = sequences.clone().acquire_owned() => match place {
                Ok(place) => place,
                Err(_) => return,
            },
            _ = stopped(&mut stop) => return,
        };
        let room = tokio::select! {
            room = answers.reserve() => match room {
                Ok(room) => room,
                Err(_) => return,
            },
            _ = stopped(&mut stop) => return,
        };
        let message = tokio::select! {
            message = incoming.message() => message,
            // In a drain the stream reads nothing more; its sequences end themselves.
            _ = stopped(&mut stop) => return,
            _ = timer.as_mut() => {
                match running.next_idle_check(idle) {
                    None => {
                        room.send(Err(Status::deadline_exceeded(format!(
                            "the stream had no request running for {idle:?} (--idle-timeout)"
                        ))));
                        return;
                    }
                    Some(at) => timer.as_mut().reset(at.into()),
                }
                continue;
            }
        };
        let r = match message {
            Ok(Some(r)) => r,
            Ok(None) => return,
            // An oversized or undecodable message: the stream cannot be read past it.
            Err(status) => {
                room.send(Err(Status::new(
                    status.code(),
                    format!(
                        "a request on the stream could not be read: {}",
                        status.message()
                    ),
                )));
                return;
            }
        };
        let (model, id) = (r.model_name.clone(), r.id.clone());
        let started = std::time::Instant::now();
        let outcome = start(&models, r);
        // Counted as HTTP's streams are: when the stream starts, or is refused.
        let counted = outcome.as_ref().map_or_else(|e| e.outcome(), |_| "ok");
        let label = models.generation_label(&model);
        (models.metrics).record(label, "grpc", counted, started.elapsed());
        match outcome {
            Ok(stream) => {
                drop(room);
                let forwarding = forward(stream, model, id, answers.clone(), stop.clone());
                let guard = InFlight::start(&running);
                tokio::spawn(async move {
                    forwarding.await;
                    drop((guard, place));
                });
            }
            Err(e) => room.send(Ok(error_response(&model, &id, e))),
        }
    }
}

fn invalid(why: String) -> ServeError {
    ServeError::Invalid(format!("generate request: {why}"))
}

fn start(models: &ServerState, r: ModelInferRequest) -> Result<TokenStream, ServeError> {
    models.check_ready()?;
    let g = models.generation_at(&r.model_name, &r.model_version)?;
    let asked = generate_request::asked_of(&r.parameters).map_err(invalid)?;
    let prompt = generate_request::prompt_of(&r).map_err(invalid)?;
    let request = g.request(prompt, &asked, models.limits.request_time)?;
    Ok(g.generator.submit(request)?)
}

/// An error for one request of the stream: its message, with the request's model and id so
/// that a client with several requests on the stream knows which one failed.
fn error_response(model: &str, id: &str, e: ServeError) -> ModelStreamInferResponse {
    let mut r = response(model, id, None, None);
    r.error_message = e.message().to_string();
    // The request's last response: nothing follows it.
    if let Some(answer) = r.infer_response.as_mut() {
        answer.parameters.insert(
            "triton_final_response".into(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::BoolParam(true)),
            },
        );
    }
    r
}

fn final_response(model: &str, id: &str, finish: &str) -> ModelStreamInferResponse {
    response(model, id, None, Some(finish))
}

fn response(
    model: &str,
    id: &str,
    token: Option<i32>,
    finish: Option<&str>,
) -> ModelStreamInferResponse {
    let param = |choice| InferParameter {
        parameter_choice: Some(choice),
    };
    let mut parameters = HashMap::new();
    parameters.insert(
        "triton_final_response".into(),
        param(ParameterChoice::BoolParam(finish.is_some())),
    );
    if let Some(f) = finish {
        parameters.insert(
            "finish_reason".into(),
            param(ParameterChoice::StringParam(f.into())),
        );
    }
    let (outputs, raw) = match token {
        Some(t) => (
            vec![InferOutputTensor {
                name: "output_ids".into(),
                datatype: "INT32".into(),
                shape: vec![1],
                ..Default::default()
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
/// stream then cancels the sequence). In a drain it ends at once with a final response whose
/// `finish_reason` is `shutdown`.
async fn forward(
    mut stream: TokenStream,
    model: String,
    id: String,
    answers: Answers,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = stopped(&mut stop) => return drained(&answers, &model, &id).await,
        };
        let Some(event) = event else { return };
        let (answer, last) = match event {
            Ok(TokenEvent::Token(t)) => (response(&model, &id, Some(t), None), false),
            // Not asked for on this route.
            Ok(TokenEvent::Logprobs(_)) => continue,
            Ok(TokenEvent::Done(f)) => (final_response(&model, &id, f.as_str()), true),
            Err(e) => (error_response(&model, &id, ServeError::from(e)), true),
        };
        // A client that reads nothing leaves this waiting; in a drain it is let go. An answer
        // with room goes first (a random pick between the two lost the drain's final answer
        // when the stop and the room came together).
        let sent = tokio::select! {
            biased;
            sent = answers.send(Ok(answer)) => sent.is_ok(),
            _ = stopped(&mut stop) => return drained(&answers, &model, &id).await,
        };
        if !sent || last {
            return;
        }
    }
}

/// How long a drain's final answer waits for room in its stream's queue.
const DRAIN_FINAL_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Sends a sequence's final answer in a drain: a client that reads is given it, one that does
/// not is let go.
async fn drained(answers: &Answers, model: &str, id: &str) {
    let last = Ok(final_response(model, id, SHUTDOWN));
    let _ = tokio::time::timeout(DRAIN_FINAL_WAIT, answers.send(last)).await;
}

/// The `finish_reason` a sequence ended by a drain reports.
pub const SHUTDOWN: &str = "shutdown";
