//! KServe v2 over HTTP (axum): health, server and model metadata, readiness, inference with
//! JSON tensors or Triton's binary tensor data extension, and `/metrics`. Errors are
//! `{"error": "..."}` with the protocol's status.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use pjrt_actors::ElementType;
use pjrt_actors::host_data::{HostData, json_values, parse_value};
use serde_json::{Value, json};

use super::kserve::{
    Answered, GivenInput, Models, RequestParams, ServeError, datatype_name, datatype_of,
};

/// The binary extension's header: the length of the JSON part of the body.
const HEADER_LENGTH: &str = "inference-header-content-length";

/// Limits on each HTTP request.
#[derive(Clone, Copy)]
pub struct Limits {
    pub body_bytes: usize,
    pub request_time: Duration,
}

#[derive(Clone)]
struct App {
    models: Arc<Models>,
    limits: Limits,
}

pub fn router(models: Arc<Models>, limits: Limits) -> Router {
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
        .route("/v2/models/{model}/infer", post(infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_v))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(ServeError::NotFound("no such endpoint".into())) })
        .with_state(App { models, limits })
}

fn error(e: ServeError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, json_body(&json!({ "error": e.message() }))).into_response()
}

fn json_body(v: &Value) -> ([(header::HeaderName, HeaderValue); 1], String) {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        v.to_string(),
    )
}

async fn ready(State(app): State<App>) -> StatusCode {
    match app.models.is_ready() {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn server_metadata() -> Response {
    json_body(&json!({
        "name": "pjrt-actors",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": ["binary_tensor_data"],
    }))
    .into_response()
}

async fn model_metadata_v(app: State<App>, Path((model, _)): Path<(String, String)>) -> Response {
    model_metadata(app, Path(model)).await
}

async fn model_metadata(State(app): State<App>, Path(model): Path<String>) -> Response {
    match app.models.model(&model) {
        Ok(m) => {
            let specs = |specs: &[super::kserve::TensorSpec]| -> Vec<Value> {
                (specs.iter())
                    .map(|s| {
                        let (datatype, shape) = (datatype_name(s.dtype), s.metadata_shape());
                        json!({"name": s.name, "datatype": datatype, "shape": shape})
                    })
                    .collect()
            };
            json_body(&json!({
                "name": m.name,
                "versions": ["1"],
                "platform": m.platform,
                "inputs": specs(&m.inputs),
                "outputs": specs(&m.outputs),
            }))
            .into_response()
        }
        Err(e) => error(e),
    }
}

async fn model_ready_v(app: State<App>, Path((model, _)): Path<(String, String)>) -> Response {
    model_ready(app, Path(model)).await
}

async fn model_ready(State(app): State<App>, Path(model): Path<String>) -> Response {
    match app.models.model(&model) {
        Ok(_) if app.models.is_ready() => StatusCode::OK.into_response(),
        Ok(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Err(e) => error(e),
    }
}

/// The server's and batchers' metrics, then the client's own (its device and memory-space
/// actors'; a client that cannot answer leaves them out, and the scrape still succeeds).
async fn metrics(State(app): State<App>) -> Response {
    let mut text = app.models.metrics_text();
    if let Ok(client) = app.models.client.metrics_async().await {
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
    app: State<App>,
    Path((model, _)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    infer(app, Path(model), headers, body).await
}

/// The whole request, body included, within the request time limit: a client that sends
/// slowly is cut off.
async fn infer(
    State(app): State<App>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limits = app.limits;
    let run = async {
        let bytes = axum::body::to_bytes(body, limits.body_bytes)
            .await
            .map_err(|e| {
                ServeError::Invalid(format!(
                    "the request body could not be read within {} bytes: {e}",
                    limits.body_bytes
                ))
            })?;
        let (inputs, params, wanted, binary_out) = parse_request(&headers, &bytes)?;
        let answered = app
            .models
            .infer("http", &model, inputs, params, &wanted)
            .await?;
        Ok::<Response, ServeError>(respond(&model, answered, &binary_out))
    };
    match tokio::time::timeout(limits.request_time, run).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => error(e),
        Err(_) => error(ServeError::Expired(format!(
            "the request took longer than the server's {:?} limit",
            limits.request_time
        ))),
    }
}

/// Which outputs to return in binary: by name, or all (`binary_data_output`).
struct BinaryOut {
    all: bool,
    named: Vec<String>,
}

type Parsed = (Vec<GivenInput>, RequestParams, Vec<String>, BinaryOut);

fn parse_request(headers: &HeaderMap, body: &[u8]) -> Result<Parsed, ServeError> {
    let bad = |why: String| ServeError::Invalid(format!("inference request: {why}"));
    let json_len = match headers.get(HEADER_LENGTH) {
        Some(v) => (v.to_str().ok().and_then(|s| s.parse::<usize>().ok()))
            .filter(|&n| n <= body.len())
            .ok_or_else(|| bad(format!("{HEADER_LENGTH} is not a length within the body")))?,
        None => body.len(),
    };
    let request: Value = serde_json::from_slice(&body[..json_len])
        .map_err(|e| bad(format!("the request is not JSON: {e}")))?;
    let mut binary = &body[json_len..];
    let params = &request["parameters"];
    let mut inputs = Vec::new();
    for input in request["inputs"]
        .as_array()
        .ok_or_else(|| bad("no `inputs` list".into()))?
    {
        let name = input["name"]
            .as_str()
            .ok_or_else(|| bad("an input without a name".into()))?;
        let datatype = input["datatype"].as_str().unwrap_or("").to_string();
        let shape: Vec<i64> = (input["shape"].as_array())
            .map(|s| s.iter().map(|d| d.as_i64().unwrap_or(-1)).collect())
            .ok_or_else(|| bad(format!("input `{name}` has no shape")))?;
        let bytes = match input["parameters"]["binary_data_size"].as_u64() {
            Some(n) => {
                let n = n as usize;
                if n > binary.len() {
                    return Err(bad(format!(
                        "input `{name}` says {n} bytes of binary data; {} remain",
                        binary.len()
                    )));
                }
                let (mine, rest) = binary.split_at(n);
                binary = rest;
                mine.to_vec()
            }
            None => {
                let t = datatype_of(&datatype).ok_or_else(|| {
                    bad(format!(
                        "input `{name}` has datatype `{datatype}`, which is not served"
                    ))
                })?;
                encode_json(&input["data"], t)
                    .map_err(|why| bad(format!("input `{name}`: {why}")))?
            }
        };
        inputs.push(GivenInput {
            name: name.to_string(),
            datatype,
            shape,
            bytes,
        });
    }
    if !binary.is_empty() {
        return Err(bad(format!(
            "{} bytes of binary data no input claims",
            binary.len()
        )));
    }
    let mut wanted = Vec::new();
    let mut named = Vec::new();
    for o in request["outputs"].as_array().into_iter().flatten() {
        let name = o["name"].as_str().unwrap_or("").to_string();
        if o["parameters"]["binary_data"].as_bool() == Some(true) {
            named.push(name.clone());
        }
        wanted.push(name);
    }
    let request_params = RequestParams {
        priority: params["priority"].as_u64(),
        timeout_us: params["timeout"].as_u64(),
    };
    let all = params["binary_data_output"].as_bool() == Some(true);
    Ok((inputs, request_params, wanted, BinaryOut { all, named }))
}

/// A JSON `data` array (flat, or nested as the shape) as little-endian bytes of `t`, each
/// value read as the input literals read theirs.
fn encode_json(data: &Value, t: ElementType) -> Result<Vec<u8>, String> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            other => out.push(other),
        }
    }
    let mut flat = Vec::new();
    walk(data, &mut flat);
    let mut bytes = Vec::with_capacity(flat.len() * t.byte_size());
    for v in flat {
        parse_value(t, &v.to_string(), &mut bytes)?;
    }
    Ok(bytes)
}

/// Host data as JSON values (numbers; booleans for BOOL), as `run --json` writes them.
fn decode_json(h: &HostData) -> Value {
    serde_json::from_str(&json_values(h)).unwrap_or(Value::Null)
}

fn respond(model: &str, answered: Vec<Answered>, binary: &BinaryOut) -> Response {
    let mut outputs = Vec::new();
    let mut tail: Vec<u8> = Vec::new();
    for a in answered {
        let mut o = json!({
            "name": a.spec.name,
            "datatype": datatype_name(a.data.dtype),
            "shape": a.data.dims,
        });
        // Binary where asked, and for a type the protocol has no JSON form of.
        let as_binary = binary.all
            || binary.named.contains(&a.spec.name)
            || datatype_name(a.data.dtype).is_none();
        if as_binary {
            o["parameters"] = json!({"binary_data_size": a.data.bytes.len()});
            tail.extend(&a.data.bytes);
        } else {
            o["data"] = decode_json(&a.data);
        }
        outputs.push(o);
    }
    let text = json!({"model_name": model, "model_version": "1", "outputs": outputs}).to_string();
    if tail.is_empty() {
        let json = HeaderValue::from_static("application/json");
        return ([(header::CONTENT_TYPE, json)], text).into_response();
    }
    let length = text.len().to_string();
    let mut body = text.into_bytes();
    body.extend(tail);
    let mut response = Response::new(Body::from(body));
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
