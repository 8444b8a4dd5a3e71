//! `pjrt-actors serve`: the models on the command line or in a model repository, each on its
//! own batcher, served over the KServe v2 protocol on HTTP (axum) and gRPC (tonic) from one
//! tokio runtime; SIGTERM or SIGINT drains what is in flight, then stops, within a bound.

mod grpc;
mod http;
mod kserve;
mod messages;
mod models;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pjrt_actors::Result;
use pjrt_actors::serving::ShutdownMode;

use crate::bench::seconds_flag;
use crate::{Cli, open, usage};
use kserve::Models;
use models::ModelSource;

/// What `serve` is asked to serve, and how.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A model: NAME=PATH of an `.exported` artifact or an MLIR program (text); repeatable.
    #[arg(long = "model")]
    pub models: Vec<String>,
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
    /// The address to bind (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The HTTP port (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// The gRPC port (0 picks a free one).
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// Seconds a request may take, its body included (a client that sends slowly is cut
    /// off).
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout: f64,
    /// Seconds the in-flight requests have to finish after SIGTERM or SIGINT.
    #[arg(long, default_value_t = 30.0)]
    pub drain_timeout: f64,
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
    if sources.is_empty() {
        return Err(usage(
            "serve needs --model NAME=PATH or --model-repository DIR".into(),
        ));
    }
    Ok(sources)
}

pub fn serve(cli: &Cli, spec: &ServeArgs) -> Result<()> {
    let sources = sources(spec)?;
    let (request_time, drain) = (
        seconds_flag("--request-timeout", spec.request_timeout)?,
        seconds_flag("--drain-timeout", spec.drain_timeout)?,
    );
    let client = open(cli)?;
    let served = (sources.iter())
        .map(|s| models::load(&client, s))
        .collect::<Result<Vec<_>>>()?;
    let models = Arc::new(Models::new(client.clone(), served));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("serve")
        .build()
        .map_err(|e| usage(format!("the server's runtime: {e}")))?;
    let limits = http::Limits {
        body_bytes: spec.max_body_bytes,
        request_time,
    };
    let bind = |port: u16| -> Result<std::net::TcpListener> {
        let addr: SocketAddr = format!("{}:{port}", spec.host)
            .parse()
            .map_err(|e| usage(format!("--host {}: {e}", spec.host)))?;
        let l =
            std::net::TcpListener::bind(addr).map_err(|e| usage(format!("binding {addr}: {e}")))?;
        l.set_nonblocking(true).map_err(|e| usage(e.to_string()))?;
        Ok(l)
    };
    let (http_listener, grpc_listener) = (bind(spec.http_port)?, bind(spec.grpc_port)?);
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
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let app = http::router(models.clone(), limits);
        let http_server =
            axum::serve(http_listener, app).with_graceful_shutdown(stopped(stop_rx.clone()));
        let grpc_server = tonic::transport::Server::builder()
            .timeout(request_time)
            .serve_with_incoming_shutdown(
                grpc::InferenceService {
                    models: models.clone(),
                },
                tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
                stopped(stop_rx),
            );
        let http_task = tokio::spawn(async move { http_server.await.map_err(|e| e.to_string()) });
        let grpc_task = tokio::spawn(async move { grpc_server.await.map_err(|e| e.to_string()) });
        out!("{line}");
        let signal = wait_for_signal().await;
        eprintln!("pjrt-actors: {signal}: draining in-flight requests");
        models.ready.store(false, Ordering::Release);
        let _ = stop_tx.send(true);
        // In-flight requests finish (the servers wait for them), within the bound.
        let drained = tokio::time::timeout(drain, async {
            let _ = http_task.await;
            let _ = grpc_task.await;
        })
        .await;
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
