//! `pjrt-actors serve`: the models on the command line or in a model repository, each on its
//! own batcher, served over the KServe v2 protocol on HTTP (axum) and gRPC (tonic) from one
//! tokio runtime; SIGTERM or SIGINT drains what is in flight, then stops, within a bound.

mod access;
mod body;
mod config;
mod error;
mod gate;
mod generate_grpc;
mod generate_http;
pub(crate) mod generation;
mod grpc;
mod http;
mod infer;
mod kserve;
mod limits;
mod listen;
mod metrics;
mod models;
mod openai;
mod served;
mod tls;
mod triton;
pub(crate) mod wire;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pjrt_actors::Result;
use pjrt_actors::serving::ShutdownMode;

use crate::bench::seconds_flag;
use crate::common::{GlobalArgs, open, usage};
use gate::Protocol;
use kserve::ServerState;
use limits::{Limits, MemoryBudget};
use models::ModelSource;

/// What `serve` is asked to serve, and how.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A model: NAME=PATH of an `.exported` artifact or an MLIR program (text); repeatable.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// A generation model: `NAME=DIR`, a folder of JetStream's exports (`prefill*.exported`,
    /// `insert.exported`, `decode.exported`), optional `weights.safetensors` (or `.npz`) and
    /// `generation.json`; served by Triton's generate extension and gRPC `ModelStreamInfer`.
    /// Repeatable. A model repository's folders holding `decode.exported` are the same.
    #[arg(long = "generation")]
    pub generations: Vec<String>,
    /// NAME=FILE: a model's weights (`.safetensors` or `.npz`); repeatable.
    #[arg(long = "params")]
    pub params: Vec<String>,
    /// NAME=FILE: a model's config (JSON, Triton's terms: max_batch_size,
    /// max_queue_delay_microseconds, priority_levels, default_queue_policy, ...).
    #[arg(long = "config")]
    pub configs: Vec<String>,
    /// A folder with one folder per model: model.exported (or .mlir), weights.safetensors
    /// (or .npz) and config.json, each optional but the model.
    #[arg(long)]
    pub model_repository: Option<PathBuf>,
    /// The address to bind (loopback unless told otherwise): an IPv4 or IPv6 address
    /// (`::1` or `[::1]`), or a host name.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The HTTP port (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// The gRPC port (0 picks a free one).
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// The largest request body (HTTP) or message (gRPC) accepted, and the largest answer,
    /// in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// Bytes the requests in flight may hold together (bodies, decoded inputs, answers);
    /// past it, requests wait for room within their time limit.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_inflight_bytes: usize,
    /// Seconds a request may take, its body included (a client that sends slowly is cut
    /// off).
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout: f64,
    /// Seconds a connection may go with no request in flight (an idle keep-alive connection,
    /// or one that has sent only part of a request head) before it is closed.
    #[arg(long, default_value_t = 30.0)]
    pub idle_timeout: f64,
    /// Connections open at once, both ports together; further ones wait to be accepted.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds the in-flight requests have to finish after SIGTERM or SIGINT.
    #[arg(long, default_value_t = 30.0)]
    pub drain_timeout: f64,
    /// API keys, one a line (a file others may read is refused): every route but the health
    /// and readiness probes then needs `Authorization: Bearer KEY` (HTTP) or `authorization`
    /// metadata (gRPC); a request without one gets 401 or UNAUTHENTICATED.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// With --api-key-file, leave `/metrics` open to scrapers without a key.
    #[arg(long)]
    pub public_metrics: bool,
    /// One line a request on stderr: time, peer, protocol, route, model, version, status,
    /// bytes in and out, latency, and a generation's tokens and finish. `text` or `json`.
    #[arg(long, num_args = 0..=1, default_missing_value = "text")]
    pub access_log: Option<access::LogFormat>,
    /// Serve HTTPS and gRPC over TLS with this certificate chain (PEM; with --tls-key).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by these authorities (PEM): mutual TLS.
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
}

/// Concurrent HTTP/2 streams a gRPC connection may have open.
const STREAMS_PER_CONNECTION: u32 = 64;

/// The address to bind: `host` (an address, bracketed or not, or a name) and `port`.
fn bind_address(host: &str, port: u16) -> Result<SocketAddr> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| usage(format!("--host {host}: {e}")))?
        .next()
        .ok_or_else(|| usage(format!("--host {host}: the name has no address")))
}

fn bind(host: &str, port: u16) -> Result<std::net::TcpListener> {
    let addr = bind_address(host, port)?;
    let l = std::net::TcpListener::bind(addr).map_err(|e| usage(format!("binding {addr}: {e}")))?;
    l.set_nonblocking(true).map_err(|e| usage(e.to_string()))?;
    Ok(l)
}

fn has_generation(spec: &ServeArgs) -> bool {
    !spec.generations.is_empty()
        || (spec.model_repository.as_deref())
            .is_some_and(|d| models::generation_folders(d).is_ok_and(|g| !g.is_empty()))
}

/// The generation models named by `--generation` and found in the repository.
fn generation_sources(spec: &ServeArgs, served: &[String]) -> Result<Vec<(String, PathBuf)>> {
    let mut found = match &spec.model_repository {
        Some(dir) => models::generation_folders(dir)?,
        None => Vec::new(),
    };
    for g in &spec.generations {
        found.push(models::named("--generation", g)?);
    }
    for (k, (name, _)) in found.iter().enumerate() {
        if served.contains(name) || found[..k].iter().any(|(n, _)| n == name) {
            return Err(usage(format!("two models are named `{name}`")));
        }
    }
    Ok(found)
}

fn sources(spec: &ServeArgs) -> Result<Vec<ModelSource>> {
    let mut sources = match &spec.model_repository {
        Some(dir) => models::repository(dir)?,
        None => Vec::new(),
    };
    for m in &spec.models {
        let (name, program) = models::named("--model", m)?;
        if sources.iter().any(|s| s.name == name) {
            return Err(usage(format!("two models are named `{name}`")));
        }
        sources.push(ModelSource {
            name,
            program,
            params: None,
            config: None,
        });
    }
    for (flag, list) in [("--params", &spec.params), ("--config", &spec.configs)] {
        for item in list {
            let (name, path) = models::named(flag, item)?;
            let source = (sources.iter_mut().find(|s| s.name == name))
                .ok_or_else(|| usage(format!("{flag} {item}: no model is named `{name}`")))?;
            match flag {
                "--params" => source.params = Some(path),
                _ => source.config = Some(path),
            }
        }
    }
    if sources.is_empty() && !has_generation(spec) {
        return Err(usage(
            "serve needs --model NAME=PATH, --generation NAME=DIR or --model-repository DIR".into(),
        ));
    }
    Ok(sources)
}

pub fn serve(cli: &GlobalArgs, spec: &ServeArgs) -> Result<()> {
    let sources = sources(spec)?;
    let limits = Limits {
        body_bytes: spec.max_body_bytes,
        request_time: seconds_flag("--request-timeout", spec.request_timeout)?,
        idle_time: seconds_flag("--idle-timeout", spec.idle_timeout)?,
        connections: spec.max_connections,
        streams_per_connection: STREAMS_PER_CONNECTION,
    };
    let drain = seconds_flag("--drain-timeout", spec.drain_timeout)?;
    if !(1..=1 << 20).contains(&limits.connections) {
        return Err(usage(format!(
            "--max-connections must be from 1 to {}, got {}",
            1 << 20,
            limits.connections
        )));
    }
    if spec.max_inflight_bytes < spec.max_body_bytes {
        return Err(usage(format!(
            "--max-inflight-bytes {} is less than --max-body-bytes {}: no request of the largest size could ever run",
            spec.max_inflight_bytes, spec.max_body_bytes
        )));
    }
    // The ports first: a port in use is said at once, not after every model has compiled.
    let (http_listener, grpc_listener) = (
        bind(&spec.host, spec.http_port)?,
        bind(&spec.host, spec.grpc_port)?,
    );
    let keys = (spec.api_key_file.as_deref())
        .map(gate::ApiKeys::from_file)
        .transpose()?;
    if spec.public_metrics && keys.is_none() {
        return Err(usage(
            "--public-metrics needs --api-key-file: without keys every route is public".into(),
        ));
    }
    let gate = Arc::new(gate::Gate::new(keys, spec.public_metrics, spec.access_log));
    let tls = tls::TlsFiles::from_flags(
        spec.tls_cert.as_deref(),
        spec.tls_key.as_deref(),
        spec.tls_client_ca.as_deref(),
    )?;
    let (http_tls, grpc_tls) = match tls.map(|t| t.acceptors()).transpose()? {
        Some((http, grpc)) => (Some(http), Some(grpc)),
        None => (None, None),
    };
    if let Some(format) = spec.access_log {
        access::install(format);
    }
    let client = open(cli)?;
    let served = (sources.iter())
        .map(|s| models::load(&client, s))
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = sources.iter().map(|s| s.name.clone()).collect();
    let generations = (generation_sources(spec, &names)?.iter())
        .map(|(name, dir)| Ok((name.clone(), generation::load(&client, name, dir)?)))
        .collect::<Result<_>>()?;
    let memory = MemoryBudget::new(spec.max_inflight_bytes);
    let mut state = ServerState::new(client.clone(), served, limits, memory, gate.clone());
    state.generations = generations;
    let models = Arc::new(state);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("serve")
        .build()
        .map_err(|e| usage(format!("the server's runtime: {e}")))?;
    let addr =
        |l: &std::net::TcpListener| l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let line = format!(
        "listening http={} grpc={}",
        addr(&http_listener),
        addr(&grpc_listener)
    );
    let done = runtime.block_on(async {
        let http_listener =
            tokio::net::TcpListener::from_std(http_listener).map_err(|e| usage(e.to_string()))?;
        let grpc_listener =
            tokio::net::TcpListener::from_std(grpc_listener).map_err(|e| usage(e.to_string()))?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let slots = models.connection_slots.clone();
        let http_app = http::router(models.clone())
            .merge(generate_http::router(models.clone()))
            .merge(openai::router(models.clone()));
        let grpc_app = grpc::InferenceService {
            models: models.clone(),
        };
        let accepting = tokio::spawn(listen::accept(
            listen::Port {
                listener: http_listener,
                protocol: Protocol::Http1,
                service: http_app,
                refuse: http::unauthenticated,
                tls: http_tls,
            },
            listen::Port {
                listener: grpc_listener,
                protocol: Protocol::Http2,
                service: grpc_app,
                refuse: grpc::unauthenticated,
                tls: grpc_tls,
            },
            slots.clone(),
            limits,
            gate,
            stop_rx,
        ));
        out!("{line}");
        let signal = wait_for_signal().await;
        eprintln!("pjrt-actors: {signal}: draining in-flight requests");
        models.ready.store(false, Ordering::Release);
        // Streams first: each ends with its final answer, so its connection can close.
        models.stopping.send_replace(true);
        let _ = stop_tx.send(true);
        let _ = accepting.await;
        // Idle connections close at once; the rest finish what they have, within the bound.
        // Every connection holds a slot: all slots back means every connection has ended.
        let all = u32::try_from(limits.connections).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(drain, slots.acquire_many(all)).await;
        Ok::<bool, pjrt_actors::Error>(drained.is_ok())
    })?;
    for m in models.by_name.values() {
        m.batcher.shutdown(if done {
            ShutdownMode::Drain
        } else {
            ShutdownMode::Fail
        });
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    match done {
        true => Ok(()),
        false => Err(usage(format!(
            "in-flight requests did not finish within --drain-timeout {drain:?}"
        ))),
    }
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
