//! Triton's generate extension over HTTP: `POST /v2/models/{m}/generate` answers one JSON
//! object with every token, `/generate_stream` one server-sent event per token as it is made
//! and a last one with the finish reason. A client that goes away mid-stream drops the body,
//! which cancels the sequence and frees its decode slot at the next step; in a drain a stream
//! ends at once with a last event whose finish reason is `shutdown`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::access::AccessNote;
use pjrt_actors::generate::{Finish, TokenEvent, TokenStream};
use serde_json::json;

use super::body::read_held_body;
use super::error::ServeError;
use super::http::{error, json_body};
use super::kserve::{ServerState, VERSION};
use super::limits::{OFF_THREAD_BYTES, off_thread};
use super::wire::generate_request::GenerateBody;
use crate::text::{TextModel, TextStream};

type App = Arc<ServerState>;

/// The generate extension's routes, merged into the server's router.
pub fn router(models: App) -> axum::Router {
    axum::Router::new()
        .route("/v2/models/{model}/generate", axum::routing::post(generate))
        .route(
            "/v2/models/{model}/generate_stream",
            axum::routing::post(generate_stream),
        )
        .route(
            "/v2/models/{model}/versions/{version}/generate",
            axum::routing::post(generate),
        )
        .route(
            "/v2/models/{model}/versions/{version}/generate_stream",
            axum::routing::post(generate_stream),
        )
        .with_state(models)
}

/// The model a route names and its version (empty where the route names none).
#[derive(serde::Deserialize)]
pub struct ModelPath {
    model: String,
    #[serde(default)]
    version: String,
}

/// Reads and checks a generate request, and submits it.
async fn start(
    app: &ServerState,
    at: &ModelPath,
    headers: &HeaderMap,
    body: Body,
    note: &AccessNote,
) -> Result<(TokenStream, Option<String>), ServeError> {
    app.check_ready()?;
    let g = app.generation_at(&at.model, &at.version)?;
    let (bytes, body_held) = read_held_body(app, headers, body).await?;
    // A large body is parsed on a blocking thread, as /infer's is: never on the two runtime
    // threads that answer every connection. Its lists are bounded as they are read.
    let big = bytes.len() >= OFF_THREAD_BYTES;
    let parsed = off_thread(big, move || serde_json::from_slice::<GenerateBody>(&bytes)).await?;
    let mut body = parsed.map_err(|e| ServeError::Invalid(format!("generate request: {e}")))?;
    drop(body_held);
    let prompt = match (body.text_input.take(), body.input_ids.is_empty()) {
        // Tokenizing costs as much as the text is long: a large one on a blocking thread too.
        (Some(text), true) => {
            let encoder = g.text(&at.model)?.clone();
            off_thread(big, move || encoder.encode(&text, true)).await??
        }
        (None, false) => std::mem::take(&mut body.input_ids),
        (Some(_), false) => {
            return Err(ServeError::Invalid(
                "generate request: it gives both `input_ids` and `text_input`; give one".into(),
            ));
        }
        (None, true) => {
            return Err(ServeError::Invalid(
                "generate request: it gives no prompt: `input_ids` (or, for a model with a tokenizer, `text_input`)".into(),
            ));
        }
    };
    let tokens_in = prompt.len() as u64;
    note.set(|n| n.tokens_in = Some(tokens_in));
    let request = g.request(prompt, &body.asked(), app.limits.request_time)?;
    Ok((g.generator.submit(request)?, body.id))
}

fn counted(
    app: &ServerState,
    model: &str,
    started: Instant,
    answer: Result<Response, ServeError>,
) -> Response {
    let outcome = answer.as_ref().map_or_else(|e| e.outcome(), |_| "ok");
    (app.metrics).record(
        app.generation_label(model),
        "http",
        outcome,
        started.elapsed(),
    );
    answer.unwrap_or_else(error)
}

/// `POST /v2/models/{m}/generate`: every token in one answer.
pub async fn generate(
    State(app): State<App>,
    Path(at): Path<ModelPath>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let model = &at.model;
    let note = app.gate.access_note();
    let answer = async {
        let (mut stream, id) = start(&app, &at, &headers, body, &note).await?;
        let mut tokens = Vec::new();
        while let Some(event) = stream.next().await {
            match event? {
                TokenEvent::Token(t) => tokens.push(t),
                TokenEvent::Logprobs(_) => {}
                // Past its deadline before its first token, a request has nothing to give: 504,
                // as /infer answers. One that made tokens answers them, finish_reason deadline.
                TokenEvent::Done(Finish::Deadline) if tokens.is_empty() => {
                    return Err(ServeError::Expired(
                        "the request's deadline passed before its first token".into(),
                    ));
                }
                TokenEvent::Done(finish) => {
                    let made = tokens.len() as u64;
                    note.set(|n| (n.tokens_out, n.finish) = (Some(made), Some(finish.as_str())));
                    let mut v = json!({ "output_ids": tokens, "finish_reason": finish.as_str() });
                    // A model with a tokenizer answers the text too (Triton's `text_output`).
                    if let Some(text) = app.generations.get(model).and_then(|g| g.text.as_ref()) {
                        v["text_output"] = text.decode(&tokens).into();
                    }
                    return Ok(json_body(&stamped(v, model, id.as_deref())).into_response());
                }
            }
        }
        Err(ServeError::Unavailable("the generator stopped".into()))
    };
    let mut response = counted(&app, model, started, answer.await);
    note.attach(&mut response);
    response
}

/// `POST /v2/models/{m}/generate_stream`: server-sent events, one per token.
pub async fn generate_stream(
    State(app): State<App>,
    Path(at): Path<ModelPath>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let model = &at.model;
    let note = app.gate.access_note();
    let answer = start(&app, &at, &headers, body, &note)
        .await
        .map(|(stream, id)| {
            let mut stop = app.stopping.subscribe();
            let text = app.generations.get(model).and_then(|g| g.text.clone());
            let events = Events {
                stream,
                model: model.clone(),
                id,
                done: false,
                text: text.map(|t| (t, TextStream::default())),
                stop: Box::pin(async move { super::listen::stopped(&mut stop).await }),
                note: note.clone(),
                made: 0,
            };
            event_stream(Body::new(events))
        });
    let mut response = counted(&app, model, started, answer);
    note.attach(&mut response);
    response
}

/// An answer of server-sent events: 200, its content type, not to be cached.
pub(super) fn event_stream(body: Body) -> Response {
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (StatusCode::OK, headers, body).into_response()
}

/// A token stream as server-sent events (`data: {...}\n\n`).
struct Events {
    stream: TokenStream,
    model: String,
    id: Option<String>,
    done: bool,
    /// A model with a tokenizer: each event's text too, whole characters only.
    text: Option<(Arc<TextModel>, TextStream)>,
    /// Ready once the server drains.
    stop: Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// The access log's: tokens made and how the sequence ended.
    note: AccessNote,
    made: u64,
}

impl Events {
    fn ended(&mut self, finish: &'static str) {
        self.done = true;
        let made = self.made;
        (self.note).set(|n| (n.tokens_out, n.finish) = (Some(made), Some(finish)));
    }
}

/// An answer's fields with the model, its version and the request's id (if it gave one).
fn stamped(mut v: serde_json::Value, model: &str, id: Option<&str>) -> serde_json::Value {
    v["model_name"] = model.into();
    v["model_version"] = VERSION.into();
    if let Some(id) = id {
        v["id"] = id.into();
    }
    v
}

impl Events {
    fn event(&self, v: serde_json::Value) -> Bytes {
        let v = stamped(v, &self.model, self.id.as_deref());
        Bytes::from(format!("data: {v}\n\n"))
    }
}

impl http_body::Body for Events {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.stop.as_mut().poll(cx).is_ready() {
            self.ended(super::generate_grpc::SHUTDOWN);
            let last = json!({ "output_ids": [], "finish_reason": super::generate_grpc::SHUTDOWN });
            return Poll::Ready(Some(Ok(http_body::Frame::data(self.event(last)))));
        }
        let data = loop {
            break match std::task::ready!(self.stream.poll_event(cx)) {
                // Not asked for on this route.
                Some(Ok(TokenEvent::Logprobs(_))) => continue,
                Some(Ok(TokenEvent::Token(t))) => {
                    self.made += 1;
                    let mut v = json!({ "output_ids": [t] });
                    if let Some((text, decoded)) = self.text.as_mut() {
                        v["text_output"] = decoded.push(text, t).into();
                    }
                    self.event(v)
                }
                Some(Ok(TokenEvent::Done(finish))) => {
                    self.ended(finish.as_str());
                    let mut v = json!({ "output_ids": [], "finish_reason": finish.as_str() });
                    if let Some((text, decoded)) = self.text.as_mut() {
                        v["text_output"] = decoded.finish(text).into();
                    }
                    self.event(v)
                }
                Some(Err(e)) => {
                    self.done = true;
                    self.event(json!({ "error": e.to_string() }))
                }
                None => return Poll::Ready(None),
            };
        };
        Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }
}
