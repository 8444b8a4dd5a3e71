//! The server's connections: one accept loop for both ports under one connection cap (past
//! it, new connections wait in the listen backlog), each connection closed once it has gone
//! the idle time with no request in flight (a half-sent request head included), and at shutdown closed
//! at once when idle, drained otherwise.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use super::access::AccessLine;
use super::gate::{Gate, Protocol};
use super::infer::HeldMemory;
use super::limits::Limits;

/// Whether a connection (or a `ModelStreamInfer` stream) has a request in flight, and since
/// when it has had none. Requests only write it: the owner's task reads it when its idle timer
/// fires (a wake-up and a new timer per request cost the served path more than the request's
/// own parsing).
pub(super) struct Activity {
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        })
    }

    /// When the idle time runs out, if no request is in flight.
    fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        match self.in_flight.load(Ordering::SeqCst) {
            0 => Some(*self.idle_since.lock().unwrap_or_else(|p| p.into_inner()) + idle),
            _ => None,
        }
    }

    /// When the idle timer is next to fire: at the idle deadline with no request in flight,
    /// else one idle time on (a request in flight may outlast it); `None` once the idle time
    /// has run out.
    pub(super) fn next_idle_check(&self, idle: Duration) -> Option<Instant> {
        let now = Instant::now();
        match self.idle_deadline(idle) {
            Some(at) if at <= now => None,
            Some(at) => Some(at),
            None => Some(now + idle),
        }
    }
}

/// A request in flight on its connection, from its head's arrival until its answer's body has
/// been handed to the connection in full (or dropped); or a stream's sequence, until it ends.
pub(super) struct InFlight(Arc<Activity>);

impl InFlight {
    pub(super) fn start(a: &Arc<Activity>) -> InFlight {
        a.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body, holding its request's place in flight and the memory it reserved until
/// the connection has taken the last of it; and its access-log line, written when it goes.
pub struct TrackedBody<B> {
    inner: B,
    _in_flight: InFlight,
    _memory: Option<HeldMemory>,
    access: Option<AccessLine>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for TrackedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(line)) = (&polled, &mut self.access) {
            line.sent(frame);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's service: lets in only what the gate admits (answering the rest with the
/// port's refusal), and marks each request in flight until its answer is written.
struct Tracked<S, B> {
    inner: S,
    activity: Arc<Activity>,
    gate: Arc<Gate>,
    peer: SocketAddr,
    protocol: Protocol,
    refuse: fn(&str) -> http::Response<B>,
}

impl<S, B> hyper::service::Service<http::Request<Incoming>> for Tracked<S, B>
where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
{
    type Response = http::Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        let mut access = (self.gate.log.is_some())
            .then(|| AccessLine::begin(self.peer, self.protocol.name(), &request));
        let answer = match self.gate.admits(self.protocol, &request) {
            true => Ok(self.inner.call(request)),
            false => Err((self.refuse)(request.uri().path())),
        };
        Box::pin(async move {
            let mut response = match answer {
                Ok(answer) => answer.await?,
                Err(refused) => refused,
            };
            let memory = response.extensions_mut().remove::<HeldMemory>();
            if let Some(line) = &mut access {
                line.answered(&mut response);
            }
            Ok(response.map(|inner| TrackedBody {
                inner,
                _in_flight: in_flight,
                _memory: memory,
                access,
            }))
        })
    }
}

/// What a served connection can do beyond running: stop taking requests.
trait Graceful: Future {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, B> Graceful for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::Connection::graceful_shutdown(self)
    }
}

impl<I, S, B, E> Graceful for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self)
    }
}

/// How long a stopping server's connection with nothing in flight has to close itself before
/// it is dropped: its last answer may still be on its way out (a stream's final response,
/// ended by the drain just before the connection saw it), and a well-behaved client closes
/// within a round trip.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Runs one connection until it ends or goes idle too long. When the server stops, each
/// connection is told to finish what it has and close; from then its idle time is
/// [`CLOSE_GRACE`] (dropping one with nothing in flight at once lost the last answer of a
/// stream the drain had just ended: its trailers were still in the connection's buffers).
async fn drive<C: Graceful>(
    conn: C,
    activity: Arc<Activity>,
    idle: Duration,
    mut stop: watch::Receiver<bool>,
) {
    tokio::pin!(conn);
    let mut stopping = false;
    // One timer for the connection's life, moved on when it fires: to the idle deadline when
    // no request is in flight, else one idle time on (a request in flight may outlast it).
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);
    loop {
        if !stopping && *stop.borrow() {
            stopping = true;
            conn.as_mut().graceful_shutdown();
            timer.as_mut().reset(Instant::now().into());
        }
        tokio::select! {
            _ = conn.as_mut() => return,
            changed = stop.changed(), if !stopping => {
                // The server's stop sender is gone only as the process ends.
                if changed.is_err() {
                    return;
                }
            }
            _ = timer.as_mut() => {
                let idle = if stopping { CLOSE_GRACE.min(idle) } else { idle };
                match activity.next_idle_check(idle) {
                    None => return,
                    Some(at) => timer.as_mut().reset(at.into()),
                }
            }
        }
    }
}

/// Until the server stops (or, its sender gone, ends): connections and streams alike.
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What serves a port's connections: a service hyper can drive on its own tasks.
pub trait PortService<B>:
    tonic::codegen::Service<
        http::Request<Incoming>,
        Response = http::Response<B>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> PortService<B> for S where
    S: tonic::codegen::Service<
            http::Request<Incoming>,
            Response = http::Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Clone
        + Send
        + 'static
{
}

/// An answer's body as a port's connections send it.
pub trait PortBody: Body<Data = Bytes, Error: Into<BoxError>> + Unpin + Send + 'static {}

impl<B> PortBody for B where B: Body<Data = Bytes, Error: Into<BoxError>> + Unpin + Send + 'static {}

/// A listening port: its socket, its protocol, the service its connections get, its answer
/// to a request the gate refuses, and its TLS acceptor when it speaks TLS.
pub struct Port<S, B> {
    pub listener: TcpListener,
    pub protocol: Protocol,
    pub service: S,
    pub refuse: fn(&str) -> http::Response<B>,
    pub tls: Option<TlsAcceptor>,
}

/// Accepts connections on both ports until `stop`, each taking a slot of `slots` for its life.
/// One loop takes a slot and then whichever port has a connection waiting: a loop per port
/// each held a slot while waiting on its own port, so one busy port could keep another's
/// connections in the backlog under the cap (with `--max-connections 1`, for good).
pub async fn accept<H, HB, G, GB>(
    http: Port<H, HB>,
    grpc: Port<G, GB>,
    slots: Arc<Semaphore>,
    limits: Limits,
    gate: Arc<Gate>,
    mut stop: watch::Receiver<bool>,
) where
    H: PortService<HB>,
    HB: PortBody,
    G: PortService<GB>,
    GB: PortBody,
{
    loop {
        let slot: OwnedSemaphorePermit = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            _ = stopped(&mut stop) => return,
        };
        // Both accepts are cancel-safe: the port that loses the race keeps its connection
        // in the backlog for the next turn.
        let accepted = tokio::select! {
            accepted = http.listener.accept() => Some((accepted, true)),
            accepted = grpc.listener.accept() => Some((accepted, false)),
            _ = stopped(&mut stop) => None,
        };
        let (stream, peer, is_http) = match accepted {
            None => return,
            Some((Ok((stream, peer)), is_http)) => (stream, peer, is_http),
            // Out of descriptors, or a connection reset before it was taken: the loop goes on
            // after a pause rather than spinning.
            Some((Err(_), _)) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let accepted = Accepted {
            stream,
            peer,
            slot,
            gate: gate.clone(),
        };
        match is_http {
            true => serve(accepted, &http, limits, &stop),
            false => serve(accepted, &grpc, limits, &stop),
        }
    }
}

/// A connection just accepted: its socket, who it is from, its slot, and the gate.
struct Accepted {
    stream: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    gate: Arc<Gate>,
}

/// Serves one accepted connection on its own task, holding its slot until it ends.
fn serve<S, B>(accepted: Accepted, port: &Port<S, B>, limits: Limits, stop: &watch::Receiver<bool>)
where
    S: PortService<B>,
    B: PortBody,
{
    let Accepted {
        stream,
        peer,
        slot,
        gate,
    } = accepted;
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    let tracked = Tracked {
        inner: TowerToHyperService::new(port.service.clone()),
        activity: activity.clone(),
        gate,
        peer,
        protocol: port.protocol,
        refuse: port.refuse,
    };
    let connection = Connection {
        protocol: port.protocol,
        tracked,
        activity,
        limits,
        stop: stop.clone(),
    };
    let tls = port.tls.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let Some(tls) = tls else {
            return connection.run(TokioIo::new(stream)).await;
        };
        // A handshake gets the idle time a request head gets: one never finished, or a
        // client that connects and says nothing, is dropped with its slot (at once if the
        // server stops meanwhile).
        let mut stopping = connection.stop.clone();
        let handshake = tokio::select! {
            done = tokio::time::timeout(limits.idle_time, tls.accept(stream)) => done,
            _ = stopped(&mut stopping) => return,
        };
        if let Ok(Ok(stream)) = handshake {
            connection.run(TokioIo::new(stream)).await
        }
    });
}

/// A connection's service and what drives it, ready for its transport (a socket, or TLS
/// over one).
struct Connection<S, B> {
    protocol: Protocol,
    tracked: Tracked<TowerToHyperService<S>, B>,
    activity: Arc<Activity>,
    limits: Limits,
    stop: watch::Receiver<bool>,
}

impl<S: PortService<B>, B: PortBody> Connection<S, B> {
    /// Runs the connection's protocol over `io` until it ends.
    async fn run<I>(self, io: I)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let Connection {
            protocol,
            tracked,
            activity,
            limits,
            stop,
        } = self;
        match protocol {
            Protocol::Http1 => {
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(io, tracked);
                drive(conn, activity, limits.idle_time, stop).await
            }
            Protocol::Http2 => {
                let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(limits.streams_per_connection)
                    .max_header_list_size(64 << 10)
                    .serve_connection(io, tracked);
                drive(conn, activity, limits.idle_time, stop).await
            }
        }
    }
}
