//! The access log (`serve --access-log [text|json]`): one line a request through `tracing`
//! (target `pjrt_actors::access`), written once its answer has gone out in full or the client
//! left: who, what, the outcome, sizes and time. Never a tensor's contents or a key.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body::Frame;

/// How the lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `tracing`'s text lines: time, level, target, then `key=value` fields.
    Text,
    /// One JSON object a line, the fields at its top level.
    Json,
}

/// Installs the subscriber that writes the lines (to stderr), unless `-v` installed one
/// already, which then writes them too.
pub fn install(format: LogFormat) {
    let filter = || tracing_subscriber::EnvFilter::new("pjrt_actors::access=info");
    let writer = std::io::stderr;
    let _ = match format {
        LogFormat::Text => (tracing_subscriber::fmt())
            .with_env_filter(filter())
            .with_writer(writer)
            .with_ansi(false)
            .try_init(),
        LogFormat::Json => (tracing_subscriber::fmt().json())
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_env_filter(filter())
            .with_writer(writer)
            .try_init(),
    };
}

/// What a route knows and the door does not: the model a body named, a generation's tokens
/// and how it ended. Handlers fill it (a stream, as it ends); the line reads it when written.
/// With the log off it holds nothing and costs nothing: no allocation, no extension.
#[derive(Clone, Default)]
pub struct AccessNote(Option<Arc<Mutex<Noted>>>);

#[derive(Default)]
pub struct Noted {
    pub model: Option<String>,
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    pub finish: Option<&'static str>,
}

impl AccessNote {
    /// A note the access log reads when `logging`; else one that keeps nothing.
    pub fn new(logging: bool) -> AccessNote {
        AccessNote(logging.then(Arc::default))
    }

    pub fn set(&self, fill: impl FnOnce(&mut Noted)) {
        if let Some(noted) = &self.0 {
            fill(&mut noted.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// Hands the note to the access log with `response` (nothing, with the log off).
    pub fn attach<B>(self, response: &mut http::Response<B>) {
        if self.0.is_some() {
            response.extensions_mut().insert(self);
        }
    }

    fn take(&self) -> Noted {
        let mut taken = Noted::default();
        self.set(|noted| taken = std::mem::take(noted));
        taken
    }
}

/// One request's line, written when dropped (with its answer's body, or with the request when
/// no answer came).
pub struct AccessLine {
    start: Instant,
    peer: SocketAddr,
    protocol: &'static str,
    method: http::Method,
    route: String,
    request_bytes: Option<u64>,
    status: Option<u16>,
    grpc_status: Option<String>,
    answer_bytes: u64,
    note: Option<AccessNote>,
}

impl AccessLine {
    pub fn begin<B>(peer: SocketAddr, protocol: &'static str, request: &http::Request<B>) -> Self {
        let length = request.headers().get(http::header::CONTENT_LENGTH);
        AccessLine {
            start: Instant::now(),
            peer,
            protocol,
            method: request.method().clone(),
            route: request.uri().path().to_string(),
            request_bytes: length.and_then(|v| v.to_str().ok()?.parse().ok()),
            status: None,
            grpc_status: None,
            answer_bytes: 0,
            note: None,
        }
    }

    /// The answer's head: its status (gRPC's, when a trailers-only answer carries it) and the
    /// route's note.
    pub fn answered<B>(&mut self, response: &mut http::Response<B>) {
        self.status = Some(response.status().as_u16());
        self.grpc_status = grpc_status(response.headers());
        self.note = response.extensions_mut().remove::<AccessNote>();
    }

    /// A frame of the answer's body on its way out: bytes, or gRPC's trailers.
    pub fn sent(&mut self, frame: &Frame<Bytes>) {
        if let Some(data) = frame.data_ref() {
            self.answer_bytes += data.len() as u64;
        } else if let Some(trailers) = frame.trailers_ref() {
            self.grpc_status = grpc_status(trailers).or(self.grpc_status.take());
        }
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get("grpc-status")?;
    Some(String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// `/v2/models/NAME[/versions/V]/…`'s model and version.
fn model_in(route: &str) -> (Option<&str>, Option<&str>) {
    let Some(rest) = route.strip_prefix("/v2/models/") else {
        return (None, None);
    };
    let mut parts = rest.split('/');
    let model = parts.next().filter(|m| !m.is_empty() && *m != "stats");
    let version = match (parts.next(), parts.next()) {
        (Some("versions"), Some(v)) => Some(v),
        _ => None,
    };
    (model, version)
}

impl Drop for AccessLine {
    fn drop(&mut self) {
        let noted = self.note.take().map(|n| n.take()).unwrap_or_default();
        let (path_model, version) = model_in(&self.route);
        let model = noted.model.as_deref().or(path_model);
        // Strings a client chose go as strings: the text format writes them quoted and
        // escaped, JSON as JSON strings, so no line of theirs can forge another.
        tracing::info!(
            target: "pjrt_actors::access",
            peer = %self.peer,
            protocol = self.protocol,
            method = %self.method,
            route = self.route.as_str(),
            model,
            version,
            status = self.status,
            grpc_status = self.grpc_status.as_deref(),
            request_bytes = self.request_bytes,
            answer_bytes = self.answer_bytes,
            latency_us = self.start.elapsed().as_micros() as u64,
            tokens_in = noted.tokens_in,
            tokens_out = noted.tokens_out,
            finish = noted.finish,
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_and_version_come_from_the_route() {
        for (route, want) in [
            ("/v2/models/lm/infer", (Some("lm"), None)),
            ("/v2/models/lm/versions/1/infer", (Some("lm"), Some("1"))),
            ("/v2/models/stats", (None, None)),
            ("/v2/health/ready", (None, None)),
            ("/v1/chat/completions", (None, None)),
        ] {
            assert_eq!(model_in(route), want, "{route}");
        }
    }
}
