//! Dynamic batching for serving: a [`Batcher`] per model takes single requests from any number
//! of threads or tasks, batches their rows up to `max_batch_size` or for at most `max_delay`,
//! pads to an allowed size, executes once per batch and hands each caller its own rows.

mod admission;
mod batch_model;
mod device;
mod inputs;
mod metrics;
mod model;
mod queue;
mod request;
mod scheduler;
mod statistics;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use tokio::sync::oneshot;

use crate::host_data::HostArray;
use crate::{ArrayType, Client, ElementType, Error, Result};
use admission::Admission;
pub use batch_model::BatchModel;
pub use inputs::{CheckedInputs, InputMismatch};
use metrics::{Metrics, Outcome};
pub use queue::Priority;
use request::{Msg, Pending};
pub use statistics::{BatchSizeStatistics, BatcherStatistics, Timed};

/// The old place of [`crate::wait`], which waits for any of this crate's futures.
#[deprecated(note = "use `pjrt_actors::wait`: it waits for any of the crate's futures")]
pub fn wait<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    crate::handles::wait(future)
}

/// How a [`Batcher`] forms batches and where it runs them.
#[derive(Clone, Debug)]
pub struct BatcherConfig {
    /// Most rows in one batch (TF Serving's `max_batch_size`).
    pub max_batch_size: usize,
    /// Longest a request waits for more to join its batch while other batches run
    /// (`batch_timeout_micros`, Triton's `max_queue_delay_microseconds`). When no batch is
    /// running, a request goes at once: waiting would only add latency.
    pub max_delay: Duration,
    /// Batch sizes compiled; a batch is padded to the smallest that holds it. Empty: powers of
    /// two up to `max_batch_size`, and `max_batch_size` itself.
    pub allowed_batch_sizes: Vec<usize>,
    /// Most requests queued; past it, a request is answered `Error::Busy` at once.
    pub max_queued: usize,
    /// Device ids to serve on, one batch per device at a time. `None`: every device.
    pub devices: Option<Vec<i32>>,
    /// Groups of device ids to serve on instead, one batch per group at a time: the model's
    /// program is an SPMD program over a group's devices (its partition count the group's
    /// size), each batch one execute over the group, split by its parameter shardings (rows
    /// over the devices, or weights split across them); fixed inputs are uploaded once per
    /// group as sharded arrays.
    pub device_groups: Option<Vec<Vec<i32>>>,
    /// Wait `max_delay` for more rows even when no batch is running (Triton's dynamic
    /// batcher does): fuller batches at low load, for up to `max_delay` more latency. Off by
    /// default: an idle batcher runs a request at once.
    pub wait_when_idle: bool,
    /// Execute each compiled size once before serving, so the first requests pay no warm-up.
    pub warm: bool,
    /// How long `shutdown` waits for batches already running: past it, whatever is still
    /// queued is answered `Error::Stopped` and a device worker stuck in its execute (a program
    /// that never ends) is left to finish alone, so `shutdown` returns within this bound.
    pub shutdown_grace: Duration,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        BatcherConfig {
            max_batch_size: 64,
            max_delay: Duration::from_micros(500),
            allowed_batch_sizes: Vec::new(),
            max_queued: 4096,
            devices: None,
            device_groups: None,
            wait_when_idle: false,
            warm: true,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// One request: its batched inputs (each with the request's rows leading), a deadline and a
/// priority.
pub struct InferRequest {
    inputs: Vec<HostArray>,
    deadline: Option<Instant>,
    priority: Priority,
    /// Its rows, where its inputs were checked already (`CheckedInputs::into_request`).
    checked_rows: Option<usize>,
}

impl InferRequest {
    /// A request of these inputs (in the model's batched-parameter order).
    pub fn new(inputs: Vec<HostArray>) -> Self {
        InferRequest {
            inputs,
            deadline: None,
            priority: Priority::Low,
            checked_rows: None,
        }
    }

    /// A request whose inputs were checked by shape already, with `rows` rows.
    fn checked(inputs: Vec<HostArray>, rows: usize) -> Self {
        InferRequest {
            checked_rows: Some(rows),
            ..InferRequest::new(inputs)
        }
    }

    /// Answer `Error::Expired`, never executed, if the request has not started by `deadline`.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// [`deadline`](Self::deadline) `timeout` from now; one past what an `Instant` can hold
    /// is no deadline.
    pub fn timeout(self, timeout: Duration) -> Self {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.deadline(deadline),
            None => self,
        }
    }

    /// The request's priority (default `Low`).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }
}

/// A request's answer: its rows of every output, and how it was served.
#[derive(Debug)]
pub struct Response {
    /// The model's outputs, this request's rows only.
    pub outputs: Vec<HostArray>,
    /// Rows in the batch that served this request, before padding.
    pub batch_rows: usize,
    /// The size the batch was padded to and executed at.
    pub padded_rows: usize,
    /// Time from submission to the start of the batch.
    pub queued: Duration,
    /// When the batch started executing (after the last deadline check).
    pub started: Instant,
}

/// Requests by how they ended, and batches run (the counters behind [`Batcher::metrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatcherCounts {
    /// Answered with their rows.
    pub done: u64,
    /// Their batch failed (a bad program, a failing host callback).
    pub failed: u64,
    /// Their deadline passed before they ran: answered `Error::Expired`, never executed.
    pub expired: u64,
    /// Their caller dropped the future before they ran.
    pub cancelled: u64,
    /// Refused at once: the queue was full.
    pub busy: u64,
    /// Refused before queueing: wrong inputs, or the batcher had stopped.
    pub rejected: u64,
    /// Batches executed.
    pub batches: u64,
}

/// What [`Batcher::shutdown`] does with queued requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Run everything queued, then stop.
    Drain,
    /// Answer everything queued with `Error::Stopped`; batches already running finish.
    Fail,
}

/// The batched parameters' and results' types without the batch dimension.
#[derive(Clone, Debug)]
pub(crate) struct Signature {
    pub(crate) inputs: Vec<ArrayType>,
    pub(crate) outputs: Vec<ArrayType>,
}

/// A running batcher for one model: cheap to clone, `Send + Sync`. Dropping the last handle
/// drains the queue and stops its threads.
#[derive(Clone)]
pub struct Batcher {
    inner: Arc<Inner>,
}

/// The shutdown trigger, separate from the handles' data: its drop drains and joins.
struct Inner {
    name: String,
    tx: Sender<Msg>,
    metrics: Arc<Metrics>,
    signature: Signature,
    max_rows: usize,
    max_queued: usize,
    /// Whether requests are taken: submitters pass it, `stop` closes it, the scheduler settles it.
    admission: Arc<Admission>,
    config: BatcherConfig,
    device_groups: Vec<Vec<i32>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Batcher {
    /// The batched inputs' types, without the rows (each request's leading dimension).
    pub fn input_types(&self) -> &[ArrayType] {
        &self.inner.signature.inputs
    }

    /// The outputs' types, without the rows.
    pub fn output_types(&self) -> &[ArrayType] {
        &self.inner.signature.outputs
    }

    /// The most rows one request may have (the batcher's `max_batch_size`).
    pub fn max_rows(&self) -> usize {
        self.inner.max_rows
    }

    /// Checks a request's inputs by element type and dims alone, in the model's order (a server
    /// checks before it reads any data): the rule `infer` applies, answering the checked
    /// shapes (whose `into_request` makes the request, not checked again) or how the inputs
    /// miss it.
    pub fn check_inputs<'a>(
        &self,
        inputs: impl ExactSizeIterator<Item = (ElementType, &'a [i64])>,
    ) -> std::result::Result<CheckedInputs, InputMismatch> {
        let shapes: Vec<(ElementType, &[i64])> = inputs.collect();
        let rows = inputs::check_shapes(
            &self.inner.signature,
            self.inner.max_rows,
            shapes.iter().copied(),
        )?;
        let shapes = (shapes.into_iter()).map(|(t, d)| (t, d.to_vec())).collect();
        Ok(CheckedInputs::new(rows, shapes))
    }

    /// Compiles the model at every allowed size on every serving device (through the compile
    /// service: cached, single flight), uploads its fixed inputs, warms it, and starts serving.
    pub fn start(client: &Client, model: BatchModel, config: BatcherConfig) -> Result<Batcher> {
        let plan = model::Plan::new(client, model, config)?;
        let (name, signature, max_rows, max_queued) = (
            plan.name.clone(),
            plan.signature.clone(),
            plan.config.max_batch_size,
            plan.config.max_queued,
        );
        let metrics = Arc::new(Metrics::new(&name, &plan.config.allowed_batch_sizes));
        let (config, device_groups) = (plan.config.clone(), plan.device_groups());
        let admission = Arc::new(Admission::new());
        let (tx, thread) = plan.spawn(metrics.clone(), admission.clone())?;
        Ok(Batcher {
            inner: Arc::new(Inner {
                name,
                tx,
                metrics,
                signature,
                max_rows,
                max_queued,
                admission,
                config,
                device_groups,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The async form of [`start`](Self::start): compiling, uploading and warming run on a
    /// thread of their own (`batcher-start`), so no executor thread waits for them.
    pub fn start_async(
        client: &Client,
        model: BatchModel,
        config: BatcherConfig,
    ) -> impl Future<Output = Result<Batcher>> + use<> {
        let client = client.clone();
        crate::handles::on_thread("batcher-start", "batcher start", move || {
            Batcher::start(&client, model, config)
        })
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Requests waiting in the queue now.
    pub fn queue_depth(&self) -> usize {
        self.inner.metrics.queued.load(Ordering::Relaxed)
    }

    /// Serves one request, waiting on the calling thread.
    pub fn infer(&self, request: InferRequest) -> Result<Response> {
        crate::wait(self.infer_async(request))
    }

    /// Serves one request. The request is checked and queued now, so a bad request or a full
    /// queue is an error at once; the future waits for the answer. Dropping the future cancels
    /// the request: it is not run (unless its batch has already started).
    pub fn infer_async(
        &self,
        request: InferRequest,
    ) -> impl Future<Output = Result<Response>> + use<> {
        let queued = self.submit(request);
        async move {
            match queued?.await {
                Ok(answer) => answer,
                Err(_) => Err(Error::Internal(
                    "the batcher dropped a request unanswered".into(),
                )),
            }
        }
    }

    fn submit(&self, request: InferRequest) -> Result<oneshot::Receiver<Result<Response>>> {
        let inner = &self.inner;
        let metrics = &inner.metrics;
        let refuse = |e: Error| {
            metrics.count(Outcome::Rejected, 1);
            Err(e)
        };
        // Held until the request is sent, so the scheduler answers it even if it stops meanwhile.
        let Some(_admitted) = inner.admission.enter() else {
            return refuse(Error::Stopped {
                what: format!("the batcher for `{}`", inner.name),
            });
        };
        // A request made from checked inputs is not checked by the rule again.
        let checked = request.checked_rows.map(Ok);
        let rows = match checked.unwrap_or_else(|| {
            inputs::check_request(&inner.signature, inner.max_rows, &request.inputs)
        }) {
            Ok(rows) => rows,
            Err(e) => return refuse(e),
        };
        let arrived = Instant::now();
        if request.deadline.is_some_and(|d| arrived >= d) {
            metrics.count(Outcome::Expired, 1);
            return Err(Error::Expired {
                what: "the inference request",
                waited: Duration::ZERO,
            });
        }
        if metrics.queued.fetch_add(1, Ordering::AcqRel) >= inner.max_queued {
            metrics.queued.fetch_sub(1, Ordering::AcqRel);
            metrics.count(Outcome::Busy, 1);
            return Err(Error::Busy {
                what: "the batcher",
            });
        }
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            inputs: request.inputs,
            rows,
            arrived,
            deadline: request.deadline,
            reply,
        };
        if inner
            .tx
            .send(Msg::Submit(pending, request.priority))
            .is_err()
        {
            metrics.queued.fetch_sub(1, Ordering::AcqRel);
            return refuse(Error::Stopped {
                what: format!("the batcher for `{}`", inner.name),
            });
        }
        Ok(answer)
    }

    /// How many requests ended each way so far, and how many batches ran.
    pub fn counts(&self) -> BatcherCounts {
        let m = &self.inner.metrics;
        BatcherCounts {
            done: m.outcome(Outcome::Done),
            failed: m.outcome(Outcome::Failed),
            expired: m.outcome(Outcome::Expired),
            cancelled: m.outcome(Outcome::Cancelled),
            busy: m.outcome(Outcome::Busy),
            rejected: m.outcome(Outcome::Rejected),
            batches: m.batches.load(Ordering::Relaxed),
        }
    }

    /// The batcher's metrics in the Prometheus text exposition format.
    pub fn metrics(&self) -> String {
        metrics_text(&[self])
    }

    /// Where its time went since it started, as Triton's model statistics count it.
    pub fn statistics(&self) -> BatcherStatistics {
        self.inner.metrics.statistics.read()
    }

    /// The config it runs under, as resolved at start: its allowed batch sizes filled in.
    pub fn config(&self) -> &BatcherConfig {
        &self.inner.config
    }

    /// The device ids of each of its workers: one device each, or a group.
    pub fn device_groups(&self) -> &[Vec<i32>] {
        &self.inner.device_groups
    }

    /// Stops taking requests and stops, draining or failing what is queued; returns when the
    /// batcher's threads have ended. Later requests get `Error::Stopped`.
    pub fn shutdown(&self, mode: ShutdownMode) {
        self.inner.stop(mode);
    }
}

impl Inner {
    fn stop(&self, mode: ShutdownMode) {
        self.admission.close();
        let _ = self.tx.send(Msg::Shutdown(mode));
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            // Never waits on itself: no batcher thread holds a `Batcher` handle.
            let _ = thread.join();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop(ShutdownMode::Drain);
    }
}

/// Several batchers, one per model, addressed by name.
#[derive(Clone, Default)]
pub struct ModelServer {
    models: Arc<Vec<Batcher>>,
}

impl ModelServer {
    /// A server of these batchers.
    pub fn new(batchers: Vec<Batcher>) -> Self {
        ModelServer {
            models: Arc::new(batchers),
        }
    }

    /// The batcher serving `model`, or a typed error naming the models there are.
    pub fn model(&self, model: &str) -> Result<&Batcher> {
        self.models
            .iter()
            .find(|b| b.name() == model)
            .ok_or_else(|| Error::NotFound {
                what: "model",
                key: format!(
                    "name `{model}` (served: {})",
                    self.models
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    /// Serves one request for `model`, waiting on the calling thread.
    pub fn infer(&self, model: &str, request: InferRequest) -> Result<Response> {
        self.model(model)?.infer(request)
    }

    /// The async form of [`infer`](Self::infer): an unknown model is an error at once, and the
    /// request is checked and queued now, as [`Batcher::infer_async`] does.
    pub fn infer_async(
        &self,
        model: &str,
        request: InferRequest,
    ) -> impl Future<Output = Result<Response>> + use<> {
        let queued = self.model(model).map(|b| b.infer_async(request));
        async move { queued?.await }
    }

    /// Every model's metrics in one Prometheus exposition.
    pub fn metrics(&self) -> String {
        metrics_text(&self.models.iter().collect::<Vec<_>>())
    }
}

/// The metrics of several batchers in one Prometheus exposition: each family's HELP and TYPE
/// once, then every batcher's samples, labelled by model. Pages of `Batcher::metrics` joined
/// would name each family once per batcher, which a Prometheus scrape refuses.
pub fn metrics_text(batchers: &[&Batcher]) -> String {
    let all: Vec<&Metrics> = batchers.iter().map(|b| &*b.inner.metrics).collect();
    metrics::render(&all)
}
