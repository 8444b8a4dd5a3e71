//! OpenAI's API on the HTTP port, for generation models with a tokenizer: `GET /v1/models`,
//! `POST /v1/completions` and `POST /v1/chat/completions`, plain or streamed as server-sent
//! events in OpenAI's chunk shape ending in `data: [DONE]`. Errors come in OpenAI's shape. A
//! client that goes away drops the stream, which cancels its sequence and frees its slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use pjrt_actors::generate::{Finish, TokenLogprobs, TokenStream};

use super::access::AccessNote;
use serde_json::{Value, json};

use super::body::read_held_body;
use super::error::ServeError;
use super::http::json_body;
use super::kserve::ServerState;
use super::limits::{OFF_THREAD_BYTES, off_thread};
use super::wire::openai_request::{self, Input, Prompt, Route};
use crate::text::{Message, TextModel};
use pieces::{Piece, Pieces, logprobs_json};

mod pieces;

type App = Arc<ServerState>;

pub fn router(models: App) -> axum::Router {
    axum::Router::new()
        .route("/v1/models", axum::routing::get(list_models))
        .route("/v1/models/{model}", axum::routing::get(one_model))
        .route("/v1/completions", axum::routing::post(completions))
        .route("/v1/chat/completions", axum::routing::post(chat))
        .with_state(models)
}

/// An error as OpenAI's API writes one, with the protocol's status.
fn error(e: &ServeError, param: Option<&str>) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = match e.http_status() {
        400 | 413 | 415 => "invalid_request_error",
        404 => "not_found_error",
        _ => "server_error",
    };
    let body =
        json!({"error": {"message": e.message(), "type": kind, "param": param, "code": null}});
    (status, json_body(&body)).into_response()
}

fn model_entry(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "pjrt-actors"})
}

async fn list_models(State(app): State<App>) -> Response {
    let data: Vec<Value> = app.generations.keys().map(|n| model_entry(n)).collect();
    json_body(&json!({"object": "list", "data": data})).into_response()
}

async fn one_model(State(app): State<App>, Path(model): Path<String>) -> Response {
    match app.generation(&model) {
        Ok(_) => json_body(&model_entry(&model)).into_response(),
        Err(e) => error(&e, Some("model")),
    }
}

async fn completions(State(app): State<App>, headers: HeaderMap, body: Body) -> Response {
    answer(app, headers, body, Route::Completions).await
}

async fn chat(State(app): State<App>, headers: HeaderMap, body: Body) -> Response {
    answer(app, headers, body, Route::Chat).await
}

/// A request started: its sequence, and what its answer is written with.
struct Started {
    /// The access log's: the prompt's tokens, and (`Pieces`) those made and the finish.
    note: AccessNote,
    /// Each token's log-probabilities were asked for.
    logprobs: bool,
    tokens: Option<TokenStream>,
    text: Arc<TextModel>,
    shape: Shape,
    prompt_tokens: usize,
    stops: Vec<String>,
    stream: bool,
}

/// What every chunk and answer of one request carries.
#[derive(Clone)]
struct Shape {
    route: Route,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
}

/// Ids of answers: unique within the process, as a client only needs to tell them apart.
static ANSWERS: AtomicU64 = AtomicU64::new(0);

async fn answer(app: App, headers: HeaderMap, body: Body, route: Route) -> Response {
    let started = Instant::now();
    let mut model = String::new();
    let outcome = start(&app, &headers, body, route, &mut model).await;
    let counted = outcome.as_ref().map_or_else(|(e, _)| e.outcome(), |_| "ok");
    let label = app.generation_label(&model);
    let note = (outcome.as_ref()).map_or_else(|_| app.gate.access_note(), |s| s.note.clone());
    note.set(|n| n.model = Some(model).filter(|m| !m.is_empty()));
    let mut response = match outcome {
        Err((e, param)) => error(&e, param),
        Ok(s) if s.stream => stream(&app, s),
        Ok(s) => whole(s).await.unwrap_or_else(|e| error(&e, None)),
    };
    app.metrics
        .record(label, "http", counted, started.elapsed());
    note.attach(&mut response);
    response
}

type Refusal = (ServeError, Option<&'static str>);

async fn start(
    app: &ServerState,
    headers: &HeaderMap,
    body: Body,
    route: Route,
    model: &mut String,
) -> Result<Started, Refusal> {
    let plain = |e: ServeError| (e, None);
    app.check_ready().map_err(plain)?;
    let (bytes, body_held) = read_held_body(app, headers, body).await.map_err(plain)?;
    let big = bytes.len() >= OFF_THREAD_BYTES;
    let read = off_thread(big, move || openai_request::read(&bytes, route))
        .await
        .map_err(plain)?;
    let r = read.map_err(|r| (ServeError::Invalid(r.message), r.param))?;
    drop(body_held);
    model.clone_from(&r.model);
    let g = app.generation(&r.model).map_err(|e| (e, Some("model")))?;
    let text = g.text(&r.model).map_err(|e| (e, Some("model")))?.clone();
    let param = match route {
        Route::Chat => "messages",
        Route::Completions => "prompt",
    };
    // The template and the tokenizer cost as much as the body is long: a large one runs on a
    // blocking thread, as its parse did.
    let encoder = text.clone();
    let encoded = off_thread(big, move || match r.input {
        Input::Prompt(Prompt::Text(t)) => encoder.encode(&t, true),
        Input::Prompt(Prompt::Texts(t)) => encoder.encode(&t[0], true),
        Input::Prompt(Prompt::Ids(ids)) => Ok(ids.iter().map(|&t| t as i32).collect()),
        Input::Chat(messages) => {
            let messages: Vec<Message> = (messages.into_iter())
                .map(|(role, content)| Message { role, content })
                .collect();
            (encoder.chat_prompt(&messages)).map_err(pjrt_actors::Error::InvalidArgument)
        }
    });
    let prompt = (encoded.await.map_err(plain)?)
        .map_err(|e| (ServeError::Invalid(e.to_string()), Some(param)))?;
    let mut asked = r.asked;
    if asked.seed.is_none() && asked.temperature.is_some_and(|t| t > 0.0) {
        // No seed: each request samples its own way, as OpenAI's do.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        asked.seed = Some(now.as_nanos() as u64 ^ ANSWERS.load(Ordering::Relaxed));
    }
    let prompt_tokens = prompt.len();
    let mut request = g
        .request(prompt, &asked, app.limits.request_time)
        .map_err(plain)?;
    request.logprobs = r.logprobs;
    let tokens = g.generator.submit(request).map_err(|e| plain(e.into()))?;
    let n = ANSWERS.fetch_add(1, Ordering::Relaxed);
    let prefix = match route {
        Route::Chat => "chatcmpl",
        Route::Completions => "cmpl",
    };
    let note = app.gate.access_note();
    note.set(|n| n.tokens_in = Some(prompt_tokens as u64));
    Ok(Started {
        note,
        logprobs: r.logprobs.is_some(),
        tokens: Some(tokens),
        text,
        prompt_tokens,
        stops: r.stop_strings,
        stream: r.stream,
        shape: Shape {
            route,
            id: format!("{prefix}-{n}"),
            model: r.model,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            include_usage: r.include_usage,
        },
    })
}

/// A request's token counts; `cached`: the prompt's tokens a cached prefix gave.
fn usage(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}})
}

/// The whole answer in one body.
async fn whole(mut s: Started) -> Result<Response, ServeError> {
    let mut pieces = Pieces::new(&mut s);
    let (mut out, mut end, mut entries) = (String::new(), ("stop", 0, 0), Vec::new());
    while let Some(p) = std::future::poll_fn(|cx| pieces.poll_next(cx)).await {
        match p {
            Piece::Text(t, l) => {
                out += &t;
                entries.extend(l);
            }
            Piece::Done {
                finish,
                tokens,
                logprobs,
                cached,
            } => {
                end = (finish, tokens, cached);
                entries.extend(logprobs);
            }
            Piece::Failed(e) => return Err(e),
        }
    }
    let (finish, made, cached) = end;
    if finish == Finish::Deadline.as_str() && made == 0 {
        return Err(ServeError::Expired(
            "the request's deadline passed before its first token".into(),
        ));
    }
    let sh = &s.shape;
    let logprobs = match s.logprobs {
        true => logprobs_json(sh.route, &s.text, &entries, &mut 0),
        false => Value::Null,
    };
    let choice = match sh.route {
        Route::Chat => json!({"index": 0, "message": {"role": "assistant", "content": out},
            "logprobs": logprobs, "finish_reason": finish}),
        Route::Completions => {
            json!({"index": 0, "text": out, "logprobs": logprobs, "finish_reason": finish})
        }
    };
    let object = match sh.route {
        Route::Chat => "chat.completion",
        Route::Completions => "text_completion",
    };
    let v = json!({"id": sh.id, "object": object, "created": sh.created, "model": sh.model,
        "choices": [choice], "usage": usage(s.prompt_tokens, made, cached)});
    Ok(json_body(&v).into_response())
}

impl Shape {
    /// One chunk: a text delta, or the last one with its finish reason.
    fn chunk(&self, delta: Option<&str>, finish: Option<&str>, first: bool) -> Bytes {
        self.chunk_with(delta, finish, first, Value::Null)
    }

    /// One chunk, with its tokens' log-probabilities.
    fn chunk_with(
        &self,
        delta: Option<&str>,
        finish: Option<&str>,
        first: bool,
        logprobs: Value,
    ) -> Bytes {
        let choice = match self.route {
            Route::Chat => {
                let mut d = json!({});
                if first {
                    d["role"] = "assistant".into();
                }
                if let Some(t) = delta {
                    d["content"] = t.into();
                }
                json!({"index": 0, "delta": d, "logprobs": logprobs, "finish_reason": finish})
            }
            Route::Completions => json!({"index": 0, "text": delta.unwrap_or(""),
                "logprobs": logprobs, "finish_reason": finish}),
        };
        self.event(json!({"choices": [choice]}))
    }

    fn event(&self, mut v: Value) -> Bytes {
        v["id"] = self.id.as_str().into();
        v["object"] = match self.route {
            Route::Chat => "chat.completion.chunk",
            Route::Completions => "text_completion",
        }
        .into();
        v["created"] = self.created.into();
        v["model"] = self.model.as_str().into();
        if self.include_usage && v.get("usage").is_none() {
            v["usage"] = Value::Null;
        }
        Bytes::from(format!("data: {v}\n\n"))
    }
}

const DONE: &[u8] = b"data: [DONE]\n\n";

/// The answer as server-sent events, made as the connection asks for them: no task or queue
/// between the sequence and the socket (one wake-up less per token), so a client that reads
/// slowly is not sent more than it reads. A client that goes away drops the body, which drops
/// the sequence. In a drain the stream ends at once with finish reason `shutdown`.
fn stream(app: &ServerState, mut s: Started) -> Response {
    let mut stop = app.stopping.subscribe();
    let mut ready = std::collections::VecDeque::new();
    // A chat's first chunk names the role, as OpenAI's do.
    if s.shape.route == Route::Chat {
        ready.push_back(s.shape.chunk(Some(""), None, true));
    }
    let body = Chunks {
        logprobs: s.logprobs.then(|| (s.text.clone(), 0)),
        pieces: Pieces::new(&mut s),
        shape: s.shape,
        prompt_tokens: s.prompt_tokens,
        ready,
        ended: false,
        stop: Box::pin(async move { super::listen::stopped(&mut stop).await }),
    };
    super::generate_http::event_stream(Body::new(body))
}

/// A stream's chunks as the answer's body.
struct Chunks {
    /// With log-probabilities asked: the text model that names tokens, and where the next
    /// token's text starts.
    logprobs: Option<(Arc<TextModel>, usize)>,
    pieces: Pieces,
    shape: Shape,
    prompt_tokens: usize,
    /// Chunks made and not yet given.
    ready: std::collections::VecDeque<Bytes>,
    /// The last chunk is made.
    ended: bool,
    /// Ready once the server drains.
    stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Chunks {
    /// The log-probabilities of a chunk's tokens, if asked.
    fn logprobs(&mut self, entries: &[TokenLogprobs]) -> Value {
        match self.logprobs.as_mut() {
            Some((text, offset)) => logprobs_json(self.shape.route, text, entries, offset),
            None => Value::Null,
        }
    }

    /// The chunks of one piece.
    fn made(&mut self, p: Piece) {
        match p {
            Piece::Text(t, entries) => {
                let l = self.logprobs(&entries);
                let chunk = self.shape.chunk_with(Some(&t), None, false, l);
                self.ready.push_back(chunk);
            }
            Piece::Done {
                finish,
                tokens,
                logprobs,
                cached,
            } => {
                let l = self.logprobs(&logprobs);
                let sh = &self.shape;
                self.ready
                    .push_back(sh.chunk_with(None, Some(finish), false, l));
                if sh.include_usage {
                    let u =
                        json!({"choices": [], "usage": usage(self.prompt_tokens, tokens, cached)});
                    self.ready.push_back(sh.event(u));
                }
                self.end();
            }
            Piece::Failed(e) => {
                let v = json!({"error": {"message": e.message(), "type": "server_error"}});
                self.ready.push_back(Bytes::from(format!("data: {v}\n\n")));
                self.end();
            }
        }
    }

    fn end(&mut self) {
        self.ready.push_back(Bytes::from_static(DONE));
        self.ended = true;
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        loop {
            // Every chunk made so far in one frame: one write, not one a chunk.
            if let Some(first) = self.ready.pop_front() {
                let frame = match self.ready.is_empty() {
                    true => first,
                    false => {
                        let mut all = Vec::from(first);
                        self.ready.drain(..).for_each(|b| all.extend_from_slice(&b));
                        Bytes::from(all)
                    }
                };
                return Poll::Ready(Some(Ok(http_body::Frame::data(frame))));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            if self.stop.as_mut().poll(cx).is_ready() {
                let last = self
                    .shape
                    .chunk(None, Some(super::generate_grpc::SHUTDOWN), false);
                self.ready.push_back(last);
                self.end();
                continue;
            }
            match std::task::ready!(self.pieces.poll_next(cx)) {
                Some(p) => self.made(p),
                None => self.end(),
            }
        }
    }
}
