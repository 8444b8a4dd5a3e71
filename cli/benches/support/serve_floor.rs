//! The floor under the served path: a bare HTTP/1.1 server on hyper and a bare gRPC server on
//! tonic, the stacks `serve` uses with its settings (two runtime threads, no delay, keep-alive,
//! tonic's unary handling), answering every request with bytes recorded once from the real
//! server: the first request on each path is passed to it, and its answer replayed from then on.
//! No model, no batcher, no parsing of the payload: what is left is what the stacks cost, and
//! what a request costs over the protocol can be set against it. It runs in a process of its
//! own (the bench re-runs itself with `SERVE_FLOOR_OF`), so its CPU is counted alone.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Service};

/// The KServe v2 messages, as the server generates them (this package's build script).
#[allow(dead_code, clippy::all)]
mod messages {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}

/// The environment variable that makes the bench binary the floor server: the real server's
/// `HTTP_PORT,GRPC_PORT`.
pub const FLOOR_OF: &str = "SERVE_FLOOR_OF";

/// A recorded answer: status, the headers that describe the body, the body.
#[derive(Clone)]
struct Recorded {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
}

/// Answers recorded by method and path, and the requests answered (for `/stats`).
#[derive(Default)]
struct Replies {
    http: Mutex<HashMap<(String, String), Recorded>>,
    grpc: Mutex<HashMap<String, Bytes>>,
    answered: AtomicU64,
}

/// Sends one HTTP/1.1 request to the real server and reads its whole answer (the recording),
/// on a blocking thread: the tests' own exchange (`server::http`), rarely taken.
async fn pass_http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Recorded {
    // `http` writes its own Host, Connection and Content-Length.
    let headers: Vec<(String, String)> = (headers.iter())
        .filter(|(k, _)| !matches!(k.as_str(), "host" | "connection" | "content-length"))
        .cloned()
        .collect();
    let (method, path, body) = (method.to_string(), path.to_string(), body.to_vec());
    let (status, headers, body) = tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, String)> = (headers.iter())
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        super::server::http(port, &method, &path, &headers, &body)
    })
    .await
    .unwrap();
    // What describes the body; the floor's own connection writes the rest.
    let headers = (headers.into_iter())
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "content-length" | "connection" | "date" | "transfer-encoding"
            )
        })
        .collect();
    Recorded {
        status,
        headers,
        body: body.into(),
    }
}

async fn http_answer(
    replies: Arc<Replies>,
    real: u16,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let key = (parts.method.to_string(), path.clone());
    let answer = if path.ends_with("/stats") {
        // perf_analyzer reads the server's statistics around each window: the real server's,
        // with the requests this floor answered as its counts.
        let mut r = pass_http(real, &key.0, &path, &[], b"").await;
        let mut stats: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let n = replies.answered.load(Relaxed);
        for m in stats["model_stats"].as_array_mut().into_iter().flatten() {
            m["inference_count"] = n.into();
            m["execution_count"] = n.into();
            // Every phase's count: perf_analyzer takes the version whose queue count grew.
            for phase in m["inference_stats"]
                .as_object_mut()
                .into_iter()
                .flat_map(|o| o.values_mut())
            {
                phase["count"] = n.into();
            }
        }
        r.body = serde_json::to_vec(&stats).unwrap().into();
        r
    } else {
        let known = replies.http.lock().unwrap().get(&key).cloned();
        match known {
            Some(r) => r,
            None => {
                let headers: Vec<(String, String)> = (parts.headers.iter())
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect();
                let r = pass_http(real, &key.0, &path, &headers, &body).await;
                replies.http.lock().unwrap().insert(key, r.clone());
                r
            }
        }
    };
    if path.ends_with("/infer") {
        replies.answered.fetch_add(1, Relaxed);
    }
    let mut response = hyper::Response::builder().status(answer.status);
    for (k, v) in &answer.headers {
        response = response.header(k, v);
    }
    Ok(response.body(Full::new(answer.body)).unwrap())
}

/// A message's bytes as they are, both ways: the floor decodes and encodes nothing.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Self::Error> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

/// The gRPC floor: every path a tonic unary method answering its recorded message.
#[derive(Clone)]
struct GrpcFloor {
    replies: Arc<Replies>,
    real: tonic::transport::Channel,
}

struct Reply(Bytes);

impl tonic::server::UnaryService<Bytes> for Reply {
    type Response = Bytes;
    type Future = std::future::Ready<Result<tonic::Response<Bytes>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(self.0.clone())))
    }
}

impl Service<http::Request<Incoming>> for GrpcFloor {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Incoming>) -> Self::Future {
        let floor = self.clone();
        Box::pin(async move {
            let path = req.uri().path().to_string();
            let known = floor.replies.grpc.lock().unwrap().get(&path).cloned();
            let message = match known {
                Some(m) => m,
                None => {
                    // The first call on a path: its message passed to the real server, whose
                    // answer is recorded, then given as every later one is.
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    let mut client = tonic::client::Grpc::new(floor.real.clone());
                    client.ready().await.unwrap();
                    let request = tonic::Request::new(body.slice(5..));
                    let answer = (client.unary(request, path.parse().unwrap(), Raw).await)
                        .unwrap()
                        .into_inner();
                    floor
                        .replies
                        .grpc
                        .lock()
                        .unwrap()
                        .insert(path, answer.clone());
                    let again = http::Request::from_parts(parts, Full::new(body));
                    return Ok(tonic::server::Grpc::new(Raw)
                        .unary(Reply(answer), again)
                        .await);
                }
            };
            if path.ends_with("ModelInfer") {
                floor.replies.answered.fetch_add(1, Relaxed);
            }
            let message = match path.ends_with("ModelStatistics") {
                true => with_counts(&message, floor.replies.answered.load(Relaxed)),
                false => message,
            };
            Ok(tonic::server::Grpc::new(Raw)
                .unary(Reply(message), req)
                .await)
        })
    }
}

/// A recorded `ModelStatisticsResponse` with every count set to the requests answered here
/// (perf_analyzer takes the model version whose queue count grew).
fn with_counts(message: &Bytes, n: u64) -> Bytes {
    use prost::Message;
    let mut stats = messages::ModelStatisticsResponse::decode(message.clone()).unwrap();
    for m in &mut stats.model_stats {
        (m.inference_count, m.execution_count) = (n, n);
        if let Some(s) = m.inference_stats.as_mut() {
            for phase in [
                &mut s.success,
                &mut s.queue,
                &mut s.compute_input,
                &mut s.compute_infer,
                &mut s.compute_output,
            ] {
                if let Some(p) = phase.as_mut() {
                    p.count = n;
                }
            }
        }
    }
    stats.encode_to_vec().into()
}

/// Runs the floor server for the real server at `of` (`HTTP_PORT,GRPC_PORT`): prints
/// `listening http=… grpc=…` as `serve` does and serves until killed.
pub fn run(of: &str) {
    let (http_real, grpc_real) = of.split_once(',').unwrap();
    let (http_real, grpc_real): (u16, u16) =
        (http_real.parse().unwrap(), grpc_real.parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let replies = Arc::new(Replies::default());
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!(
            "listening http={} grpc={}",
            http.local_addr().unwrap(),
            grpc.local_addr().unwrap()
        );
        let real = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{grpc_real}"))
            .unwrap()
            .connect_lazy();
        let grpc_floor = GrpcFloor {
            replies: replies.clone(),
            real,
        };
        loop {
            let (stream, is_http) = tokio::select! {
                a = http.accept() => (a.unwrap().0, true),
                a = grpc.accept() => (a.unwrap().0, false),
            };
            let _ = stream.set_nodelay(true);
            let io = TokioIo::new(stream);
            match is_http {
                true => {
                    let replies = replies.clone();
                    let service = hyper::service::service_fn(move |req| {
                        http_answer(replies.clone(), http_real, req)
                    });
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(io, service)
                            .await;
                    });
                }
                false => {
                    let service = hyper_util::service::TowerToHyperService::new(grpc_floor.clone());
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, service)
                            .await;
                    });
                }
            }
        }
    });
}
