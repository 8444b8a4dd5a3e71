//! Who may reach what, on both ports: API keys (`--api-key-file`) checked before any route
//! runs, with the health and readiness probes (and `/metrics`, with `--public-metrics`) left
//! open; refusals counted. The access log's lines are `access.rs`'s.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use pjrt_actors::Result;
use pjrt_actors::prometheus::{Exposition, Kind};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::access::{AccessNote, LogFormat};
use crate::common::usage;

/// Which protocol a port speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    /// As metrics and the access log name it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http",
            Protocol::Http2 => "grpc",
        }
    }
}

/// The gRPC service's path prefix.
const GRPC: &str = "/inference.GRPCInferenceService/";

/// Whether a request to `path` may be answered without a key: the probes a load balancer or
/// an orchestrator sends stay open, and `/metrics` when the operator makes it public.
pub fn open_route(protocol: Protocol, path: &str, public_metrics: bool) -> bool {
    match protocol {
        Protocol::Http1 => {
            matches!(path, "/v2/health/live" | "/v2/health/ready")
                || (public_metrics && path == "/metrics")
                || is_model_ready(path)
        }
        Protocol::Http2 => path
            .strip_prefix(GRPC)
            .is_some_and(|method| matches!(method, "ServerLive" | "ServerReady" | "ModelReady")),
    }
}

/// `/v2/models/NAME/ready` or `/v2/models/NAME/versions/V/ready`, one segment a name.
fn is_model_ready(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/v2/models/") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(parts.as_slice(), [name, "ready"] if !name.is_empty())
        || matches!(parts.as_slice(), [name, "versions", v, "ready"] if !name.is_empty() && !v.is_empty())
}

/// The keys clients present, kept as SHA-256 digests: each check hashes what came and compares
/// digests in constant time, so neither a key's bytes nor its length leak through timing.
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl ApiKeys {
    /// One key a line, read as the compile cache's key file is (`read_key_file`, `key_lines`):
    /// a file others may read is refused.
    pub fn from_file(path: &Path) -> Result<ApiKeys> {
        let at = |why: String| usage(format!("--api-key-file {}: {why}", path.display()));
        let text = pjrt_actors::read_key_file(path).map_err(at)?;
        let digests: Vec<[u8; 32]> = pjrt_actors::key_lines(&text)
            .map(|(_, k)| Sha256::digest(k.as_bytes()).into())
            .collect();
        if digests.is_empty() {
            return Err(at("it holds no key".into()));
        }
        Ok(ApiKeys { digests })
    }

    /// Whether `authorization` (the header's or the metadata's value) is `Bearer KEY` for one
    /// of the keys. Every key is compared, whichever matches.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(token) = authorization.and_then(bearer) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(token).into();
        (self.digests.iter())
            .fold(subtle::Choice::from(0), |any, d| any | d.ct_eq(&digest))
            .into()
    }
}

/// The token of `Bearer TOKEN` (the scheme's name in any case, as RFC 9110 has it).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = (value.get(..7)?, value.get(7..)?);
    (scheme.eq_ignore_ascii_case(b"bearer ") && !token.is_empty()).then_some(token)
}

/// The door of both ports: the keys, what stays open, the access log's format, and how many
/// requests each protocol refused.
pub struct Gate {
    keys: Option<ApiKeys>,
    public_metrics: bool,
    pub log: Option<LogFormat>,
    refused: [AtomicU64; 2],
}

impl Gate {
    pub fn new(keys: Option<ApiKeys>, public_metrics: bool, log: Option<LogFormat>) -> Gate {
        Gate {
            keys,
            public_metrics,
            log,
            refused: Default::default(),
        }
    }

    /// A note for the access log to read, holding nothing unless the log is on.
    pub fn access_note(&self) -> AccessNote {
        AccessNote::new(self.log.is_some())
    }

    /// Whether the request may go on to its route; a refusal is counted.
    pub fn admits<B>(&self, protocol: Protocol, request: &http::Request<B>) -> bool {
        let Some(keys) = &self.keys else {
            return true;
        };
        if open_route(protocol, request.uri().path(), self.public_metrics) {
            return true;
        }
        let given = (request.headers().get(http::header::AUTHORIZATION)).map(|v| v.as_bytes());
        let admitted = keys.admits(given);
        if !admitted {
            self.refused[protocol as usize].fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    pub fn render(&self, page: &mut Exposition) {
        let name = "pjrt_actors_server_unauthenticated_total";
        page.family(
            name,
            Kind::Counter,
            "Requests refused for want of a valid API key (--api-key-file), by protocol.",
        );
        for (protocol, at) in [("http", Protocol::Http1), ("grpc", Protocol::Http2)] {
            let n = self.refused[at as usize].load(Ordering::Relaxed);
            page.sample(name, &[("protocol", protocol)], n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_probes_and_public_metrics_are_open() {
        use Protocol::{Http1, Http2};
        let table = [
            (Http1, "/v2/health/live", false, true),
            (Http1, "/v2/health/ready", false, true),
            (Http1, "/v2/models/lm/ready", false, true),
            (Http1, "/v2/models/lm/versions/1/ready", false, true),
            (Http1, "/metrics", false, false),
            (Http1, "/metrics", true, true),
            (Http1, "/v2", false, false),
            (Http1, "/v2/models/lm", false, false),
            (Http1, "/v2/models/lm/infer", false, false),
            (Http1, "/v2/models/lm/config", false, false),
            (Http1, "/v2/models/lm/stats", false, false),
            (Http1, "/v2/models/ready/infer", false, false),
            (Http1, "/v2/models//ready", false, false),
            (Http1, "/v2/models/lm/generate", false, false),
            (Http1, "/v2/repository/index", false, false),
            (Http1, "/v1/models", false, false),
            (Http1, "/v1/chat/completions", false, false),
            (
                Http2,
                "/inference.GRPCInferenceService/ServerLive",
                false,
                true,
            ),
            (
                Http2,
                "/inference.GRPCInferenceService/ServerReady",
                false,
                true,
            ),
            (
                Http2,
                "/inference.GRPCInferenceService/ModelReady",
                false,
                true,
            ),
            (
                Http2,
                "/inference.GRPCInferenceService/ModelInfer",
                false,
                false,
            ),
            (
                Http2,
                "/inference.GRPCInferenceService/ModelStreamInfer",
                false,
                false,
            ),
            (
                Http2,
                "/inference.GRPCInferenceService/ModelMetadata",
                true,
                false,
            ),
            (Http2, "/other.Service/ServerLive", false, false),
        ];
        for (protocol, path, public, open) in table {
            assert_eq!(
                open_route(protocol, path, public),
                open,
                "{path} public={public}"
            );
        }
    }

    #[test]
    fn a_key_is_admitted_only_as_a_bearer_token_of_a_listed_key() {
        let keys = ApiKeys {
            digests: ["k-one", "k-two"]
                .map(|k| Sha256::digest(k).into())
                .to_vec(),
        };
        for (given, admitted) in [
            (Some("Bearer k-one"), true),
            (Some("bearer k-two"), true),
            (Some("BEARER k-one"), true),
            (Some("Bearer k-on"), false),
            (Some("Bearer k-one "), false),
            (Some("Bearer "), false),
            (Some("Basic k-one"), false),
            (Some("k-one"), false),
            (None, false),
        ] {
            assert_eq!(keys.admits(given.map(str::as_bytes)), admitted, "{given:?}");
        }
    }
}
