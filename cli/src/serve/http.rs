//! KServe v2 over HTTP (axum): health, server and model metadata, readiness, inference with
//! JSON tensors or Triton's binary tensor data extension, and `/metrics`. Errors are
//! `{"error": "..."}` with the protocol's status.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::literal::json_values;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::error::ServeError;
use super::infer::{Asked, HeldMemory, infer};
use super::kserve::{Answered, ServerState, VERSION};
use super::limits::OFF_THREAD_BYTES;
use super::triton;
use super::wire::EXTENSIONS;
use super::wire::json_request::{DataSpan, HttpRequest};
use super::wire::tensor_data::read_json_data;
use super::wire::{datatype_name, shown};

/// The binary extension's header: the length of the JSON part of the body.
const HEADER_LENGTH: &str = "inference-header-content-length";

type App = Arc<ServerState>;

pub fn router(models: Arc<ServerState>) -> Router {
    Router::new()
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/{model}", get(model_metadata))
        .route(
            "/v2/models/{model}/versions/{version}",
            get(model_metadata_v),
        )
        .route("/v2/models/{model}/ready", get(model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(model_ready_v),
        )
        .route("/v2/models/{model}/config", get(model_config))
        .route(
            "/v2/models/{model}/versions/{version}/config",
            get(model_config_v),
        )
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/models/{model}/stats", get(model_stats))
        .route(
            "/v2/models/{model}/versions/{version}/stats",
            get(model_stats_v),
        )
        .route("/v2/models/{model}/infer", post(infer_latest))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_v))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(ServeError::NotFound("no such endpoint".into())) })
        .with_state(models)
}

pub(super) fn error(e: ServeError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, json_body(&json!({ "error": e.message() }))).into_response()
}

/// The answer to a request without a valid API key: 401 with a Bearer challenge, in OpenAI's
/// error shape on its routes (its clients read `error.code`), KServe's elsewhere.
pub(super) fn unauthenticated(path: &str) -> Response {
    let message = "a valid API key is required: send `Authorization: Bearer KEY`";
    let body = match path.starts_with("/v1/") {
        true => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
        }
        false => json!({ "error": message }),
    };
    let mut answer = (StatusCode::UNAUTHORIZED, json_body(&body)).into_response();
    (answer.headers_mut()).insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    answer
}

pub(super) fn json_body(v: &Value) -> ([(header::HeaderName, HeaderValue); 1], String) {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        v.to_string(),
    )
}

async fn ready(State(app): State<App>) -> StatusCode {
    match app.is_ready() {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn server_metadata() -> Response {
    json_body(&json!({
        "name": "pjrt-actors",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
    .into_response()
}

async fn model_metadata_v(
    app: State<App>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    metadata_at(&app, &model, &version)
}

async fn model_metadata(app: State<App>, Path(model): Path<String>) -> Response {
    metadata_at(&app, &model, "")
}

fn metadata_at(app: &ServerState, model: &str, version: &str) -> Response {
    match app.served(model, version) {
        Ok(m) => {
            let (inputs, outputs) = m.specs();
            let specs = |specs: &[super::kserve::TensorSpec]| -> Vec<Value> {
                (specs.iter())
                    .map(|s| {
                        let (datatype, shape) = (datatype_name(s.dtype), s.metadata_shape());
                        json!({"name": s.name, "datatype": datatype, "shape": shape})
                    })
                    .collect()
            };
            json_body(&json!({
                "name": m.name(),
                "versions": [VERSION],
                "platform": m.platform(),
                "inputs": specs(&inputs),
                "outputs": specs(&outputs),
            }))
            .into_response()
        }
        Err(e) => error(e),
    }
}

async fn model_config_v(
    app: State<App>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    config_at(&app, &model, &version)
}

async fn model_config(app: State<App>, Path(model): Path<String>) -> Response {
    config_at(&app, &model, "")
}

/// Triton's model configuration extension.
fn config_at(app: &ServerState, model: &str, version: &str) -> Response {
    match app.served(model, version) {
        Ok(m) => json_body(&triton::config_json(&triton::model_config(app, m))).into_response(),
        Err(e) => error(e),
    }
}

/// Triton's repository index: `{"ready": true}` in the body (optional) lists ready models only.
async fn repository_index(State(app): State<App>, body: Bytes) -> Response {
    #[derive(serde::Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        #[serde(default)]
        ready: bool,
    }
    let asked = match body.is_empty() {
        true => Ok(Asked::default()),
        false => serde_json::from_slice::<Asked>(&body),
    };
    match asked {
        Ok(asked) => {
            let index: Vec<Value> = (app.repository_index(asked.ready).into_iter())
                .map(|m| json!({"name": m.name, "version": m.version, "state": m.state}))
                .collect();
            json_body(&Value::from(index)).into_response()
        }
        Err(e) => error(ServeError::Invalid(format!(
            "repository index request: {e}"
        ))),
    }
}

async fn all_stats(app: State<App>) -> Response {
    stats_at(&app, "", "")
}

async fn model_stats(app: State<App>, Path(model): Path<String>) -> Response {
    stats_at(&app, &model, "")
}

async fn model_stats_v(
    app: State<App>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    stats_at(&app, &model, &version)
}

/// Triton's statistics extension: one model's, or every model's (no name).
fn stats_at(app: &ServerState, model: &str, version: &str) -> Response {
    match triton::statistics(app, model, version) {
        Ok(s) => json_body(&triton::statistics_json(&s)).into_response(),
        Err(e) => error(e),
    }
}

async fn model_ready_v(
    app: State<App>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    ready_at(&app, &model, &version)
}

async fn model_ready(app: State<App>, Path(model): Path<String>) -> Response {
    ready_at(&app, &model, "")
}

fn ready_at(app: &ServerState, model: &str, version: &str) -> Response {
    match app.served(model, version) {
        Ok(_) if app.is_ready() => StatusCode::OK.into_response(),
        Ok(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Err(e) => error(e),
    }
}

/// The server's and batchers' metrics, then the client's own (its device and memory-space
/// actors'; a client that cannot answer leaves them out, and the scrape still succeeds).
async fn metrics(State(app): State<App>) -> Response {
    let mut text = app.metrics_text();
    if let Ok(client) = app.client.metrics_async().await {
        text += &client;
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        text,
    )
        .into_response()
}

async fn infer_v(
    State(app): State<App>,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    infer_at(app, model, version, headers, body).await
}

async fn infer_latest(
    State(app): State<App>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    infer_at(app, model, String::new(), headers, body).await
}

/// The whole request, body included, within the request time limit (a client that sends
/// slowly is cut off), counted under its outcome whatever it is.
async fn infer_at(
    app: App,
    model: String,
    version: String,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let start = Instant::now();
    let limit = app.limits.request_time;
    let answer =
        match tokio::time::timeout(limit, answer(&app, &model, &version, &headers, body)).await {
            Ok(answer) => answer,
            Err(_) => Err(ServeError::past_time_limit(limit)),
        };
    let outcome = answer.as_ref().map_or_else(|e| e.outcome(), |_| "ok");
    app.metrics
        .record(app.label(&model), "http", outcome, start.elapsed());
    answer.unwrap_or_else(error)
}

async fn answer(
    app: &App,
    model: &str,
    version: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ServeError> {
    app.check_ready()?;
    let m = app.model(model, version)?;
    let (bytes, body_held) = super::body::read_held_body(app, headers, body).await?;
    let json_len = match headers.get(HEADER_LENGTH) {
        Some(v) => (v.to_str().ok().and_then(|s| s.trim().parse::<usize>().ok()))
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| {
                ServeError::Invalid(format!(
                    "inference request: {HEADER_LENGTH} is `{}`, not a length within the {}-byte body",
                    shown(v.to_str().unwrap_or("?")),
                    bytes.len()
                ))
            })?,
        None => bytes.len(),
    };
    let big = bytes.len() >= OFF_THREAD_BYTES;
    let body = bytes.clone();
    let mut request = (super::limits::off_thread(big, move || {
        super::wire::json_request::parse(&body, json_len)
    })
    .await?)
        .map_err(ServeError::Invalid)?;
    let (binary_all, id) = (request.binary_all, request.id.take());
    let binary_named: Vec<String> = (request.outputs.iter())
        .filter(|(_, binary)| *binary)
        .map(|(n, _)| n.clone())
        .collect();
    let as_binary = move |name: &str| binary_all || binary_named.iter().any(|n| n == name);
    let HttpRequest {
        params,
        inputs,
        outputs,
        ..
    } = request;
    let (heads, spans): (Vec<_>, Vec<_>) = inputs.into_iter().unzip();
    let shapes: Vec<Vec<i64>> = heads.iter().map(|h| h.shape.clone()).collect();
    let asked = Asked {
        heads,
        wanted: outputs.into_iter().map(|(n, _)| n).collect(),
        params,
    };
    let read = move |plan: &super::kserve::Plan| read_inputs(&bytes, &spans, &shapes, plan);
    let binary = as_binary.clone();
    let (answered, held) = infer(app, m, asked, big, |n| !binary(n), read).await?;
    drop(body_held);
    let name = m.name.clone();
    let answer_big = answered.iter().map(|a| a.data.bytes.len()).sum::<usize>() >= OFF_THREAD_BYTES;
    let mut response = (super::limits::off_thread(answer_big, move || {
        respond(&name, id.as_deref(), answered, &as_binary)
    })
    .await?)
        .into_response();
    response.extensions_mut().insert::<HeldMemory>(held);
    Ok(response)
}

/// Each input's data, read from the body as the plan places it.
fn read_inputs(
    body: &[u8],
    spans: &[DataSpan],
    shapes: &[Vec<i64>],
    plan: &super::kserve::Plan,
) -> Result<Vec<Vec<u8>>, String> {
    (spans.iter().zip(shapes).zip(&plan.slots))
        .map(|((span, shape), &(_, dtype, count))| match span {
            DataSpan::Json(at) => {
                let text = std::str::from_utf8(&body[at.clone()])
                    .map_err(|e| format!("an input's data is not UTF-8: {e}"))?;
                let mut out = Vec::new();
                read_json_data(text, dtype, shape, &mut out)?;
                Ok(out)
            }
            DataSpan::Binary(at) => {
                let want = count * dtype.byte_size();
                match at.len() == want {
                    true => Ok(body[at.clone()].to_vec()),
                    false => Err(format!(
                        "an input has {} bytes of binary data; {}{} is {want}",
                        at.len(),
                        datatype_name(dtype).unwrap_or("?"),
                        super::wire::shown_dims(shape)
                    )),
                }
            }
        })
        .collect()
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The answer: JSON text written straight from the outputs' bytes (no JSON values are built
/// and parsed back, so every value is the one computed), binary outputs after it, each its own
/// chunk of the body (moved, not copied: hyper writes the chunks with one vectored write).
fn respond(
    model: &str,
    id: Option<&str>,
    answered: Vec<Answered>,
    as_binary: &impl Fn(&str) -> bool,
) -> Response {
    let mut text = format!(
        "{{\"model_name\":{},\"model_version\":\"{VERSION}\"",
        json_string(model)
    );
    if let Some(id) = id {
        text += &format!(",\"id\":{}", json_string(id));
    }
    text += ",\"outputs\":[";
    let mut tail: Vec<Bytes> = Vec::new();
    for (k, a) in answered.into_iter().enumerate() {
        let datatype = datatype_name(a.data.dtype);
        text += &format!(
            "{}{{\"name\":{},\"datatype\":\"{}\",\"shape\":{:?}",
            if k > 0 { "," } else { "" },
            json_string(&a.spec.name),
            datatype.unwrap_or(""),
            a.data.dims
        );
        // Binary where asked, and for a type the protocol has no JSON form of.
        if as_binary(&a.spec.name) || datatype.is_none() {
            text += &format!(
                ",\"parameters\":{{\"binary_data_size\":{}}}}}",
                a.data.bytes.len()
            );
            tail.push(Bytes::from(a.data.bytes));
        } else {
            text += ",\"data\":";
            text += &json_values(&a.data);
            text += "}";
        }
    }
    text += "]}";
    if tail.is_empty() {
        let json = HeaderValue::from_static("application/json");
        return ([(header::CONTENT_TYPE, json)], text).into_response();
    }
    let length = text.len().to_string();
    let chunks: VecDeque<Bytes> = std::iter::once(Bytes::from(text)).chain(tail).collect();
    let mut response = Response::new(Body::new(Chunks(chunks)));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&length) {
        h.insert(HEADER_LENGTH, v);
    }
    response
}

/// A body of whole chunks, each one frame, its length known.
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(http_body::Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.iter().map(|b| b.len() as u64).sum())
    }
}
