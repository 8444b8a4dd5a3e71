//! Token-by-token generation on three JAX exports (prefill, insert, decode; see
//! [`GenerationModel`]): a [`Generator`] keeps the KV cache resident on the device, donated at
//! every step, and runs a fixed number of decode slots that requests join and leave between
//! steps (continuous batching), each request streaming its tokens as they are made.

mod engine;
mod latency;
mod logprobs;
mod model;
mod sampling;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use tokio::sync::mpsc;

use crate::{Error, Result};
pub use latency::{LATENCY_BOUNDS, Latencies};
pub use logprobs::{MAX_TOP_LOGPROBS, TokenLogprobs};
pub use model::GenerationModel;
pub use sampling::{Sampling, TokenRng};

/// One sequence to generate.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The prompt's token ids (at least one, at most the largest prompt bucket).
    pub prompt: Vec<i32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Greedy, or sampled with a seed.
    pub sampling: Sampling,
    /// Tokens that end the sequence (the stop token is the last one streamed).
    pub stop_tokens: Vec<i32>,
    /// When to give up: the sequence ends with what it has.
    pub deadline: Option<Instant>,
    /// With `Some(k)`: each token comes after a [`TokenEvent::Logprobs`] with its
    /// log-probability and the `k` most likely tokens' (at most [`MAX_TOP_LOGPROBS`]).
    pub logprobs: Option<usize>,
}

impl GenerateRequest {
    /// A greedy request for up to `max_tokens` tokens.
    pub fn greedy(prompt: Vec<i32>, max_tokens: usize) -> Self {
        GenerateRequest {
            prompt,
            max_tokens,
            sampling: Sampling::Greedy,
            stop_tokens: Vec::new(),
            deadline: None,
            logprobs: None,
        }
    }
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// It made a stop token.
    Stop,
    /// It made `max_tokens` tokens.
    Length,
    /// Its next position would be past the cache (`GeneratorConfig::max_sequence`).
    CacheFull,
    /// Its stream was dropped or cancelled.
    Cancelled,
    /// Its deadline passed.
    Deadline,
}

impl Finish {
    /// The name Triton's and OpenAI's APIs give it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length | Finish::CacheFull => "length",
            Finish::Cancelled => "cancelled",
            Finish::Deadline => "deadline",
        }
    }
}

/// What a request's stream carries.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenEvent {
    /// A token, as it is made.
    Token(i32),
    /// The next token's log-probabilities, for a request that asked for them.
    Logprobs(TokenLogprobs),
    /// The sequence ended: the last event.
    Done(Finish),
}

/// A request's tokens as they are made. Dropping it (or [`cancel`](Self::cancel)) frees its
/// slot at the next step.
pub struct TokenStream {
    events: mpsc::UnboundedReceiver<Result<TokenEvent>>,
    cancel: Arc<AtomicBool>,
}

impl TokenStream {
    /// The next event, waiting for it on this thread; `None` after the last.
    pub fn next_blocking(&mut self) -> Option<Result<TokenEvent>> {
        self.events.blocking_recv()
    }

    /// The next event; `None` after the last.
    pub async fn next(&mut self) -> Option<Result<TokenEvent>> {
        self.events.recv().await
    }

    /// Polls for the next event (for a `Stream` or a response body); `None` after the last.
    pub fn poll_event(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<TokenEvent>>> {
        self.events.poll_recv(cx)
    }

    /// Ends the sequence at the next step.
    pub fn cancel(&self) {
        self.cancel.store(true, Relaxed);
    }

    /// Every token to the end, and why it ended.
    pub fn collect_blocking(mut self) -> Result<(Vec<i32>, Finish)> {
        let mut tokens = Vec::new();
        while let Some(event) = self.next_blocking() {
            match event? {
                TokenEvent::Token(t) => tokens.push(t),
                TokenEvent::Logprobs(_) => {}
                TokenEvent::Done(f) => return Ok((tokens, f)),
            }
        }
        Err(Error::Stopped {
            what: "the generator".into(),
        })
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// How a [`Generator`] runs.
#[derive(Clone, Debug)]
pub struct GeneratorConfig {
    /// Most requests waiting for a slot; past it, `Error::Busy` at once.
    pub max_queued: usize,
    /// The cache's length in positions: a sequence ends (`Finish::CacheFull`) before a step
    /// would write past it. `None`: read from decode's cache shapes
    /// ([`GenerationModel::cache_length`]); one past the cache is refused at start.
    pub max_sequence: Option<usize>,
    /// Continuous batching (requests join free slots between steps, the default) or static
    /// (a batch of up to `slots` requests runs until its longest member ends; for comparison).
    pub continuous: bool,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            max_queued: 1024,
            max_sequence: None,
            continuous: true,
        }
    }
}

/// Counters since the generator started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GeneratorStats {
    /// Requests prefilled.
    pub requests: u64,
    /// Tokens made.
    pub tokens: u64,
    /// Prefill runs.
    pub prefills: u64,
    /// Decode steps run.
    pub decode_steps: u64,
    /// Slots busy, summed over decode steps (÷ `decode_steps`: mean slots busy).
    pub busy_slot_steps: u64,
    /// Time to first token (from submit), per bucket, over requests that made one.
    pub first_token: Latencies,
    /// Time between a sequence's tokens, per bucket, over every such gap.
    pub inter_token: Latencies,
    /// Time from submit to a slot (its prefill sent), per bucket, over requests admitted.
    pub queue: Latencies,
    /// When the last token was made, if one was.
    pub last_token: Option<std::time::SystemTime>,
    /// Sequences running in decode slots now.
    pub running: u64,
    /// Requests waiting for a slot now.
    pub waiting: u64,
    /// Requests ended because their stream was dropped or cancelled (a client gone): running
    /// ones, each freeing its slot, and waiting ones, each leaving the queue.
    pub cancelled: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    tokens: AtomicU64,
    prefills: AtomicU64,
    decode_steps: AtomicU64,
    busy_slot_steps: AtomicU64,
    first_token: latency::LatencyHistogram,
    inter_token: latency::LatencyHistogram,
    queue: latency::LatencyHistogram,
    /// Milliseconds since the Unix epoch at the last token made (0: none yet).
    last_token_ms: AtomicU64,
    running: AtomicU64,
    cancelled: AtomicU64,
}

/// A request on its way to the engine.
struct Submitted {
    request: GenerateRequest,
    events: mpsc::UnboundedSender<Result<TokenEvent>>,
    cancel: Arc<AtomicBool>,
    at: Instant,
}

/// The shutdown trigger: the last [`Generator`] handle's drop closes the mailbox, and the
/// engine ends its sequences (`Cancelled`) and exits.
struct Inner {
    mail: Sender<Submitted>,
    counters: Arc<Counters>,
    queued: Arc<AtomicU64>,
    config: GeneratorConfig,
    buckets: Vec<usize>,
    /// The vocabulary: token ids are `0..vocab`.
    vocab: usize,
    slots: usize,
    engine: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let (dead, _) = crossbeam_channel::bounded(0);
        self.mail = dead;
        if let Some(engine) = self.engine.lock().ok().and_then(|mut e| e.take()) {
            let _ = engine.join();
        }
    }
}

/// Serves a [`GenerationModel`]: cheap to clone, `Send + Sync`; requests from any thread.
#[derive(Clone)]
pub struct Generator {
    inner: Arc<Inner>,
}

impl Generator {
    /// Starts the engine on a thread of its own (`generate-engine`), with a zero cache on the
    /// model's device.
    pub fn start(model: GenerationModel, config: GeneratorConfig) -> Result<Generator> {
        let config = GeneratorConfig {
            max_sequence: Some(model.max_sequence(config.max_sequence)?),
            ..config
        };
        if config.max_queued == 0 {
            return Err(Error::InvalidArgument(
                "generation model: max_queued is 0, which refuses every request".into(),
            ));
        }
        let (mail, inbox) = crossbeam_channel::unbounded();
        let counters = Arc::new(Counters::default());
        let queued = Arc::new(AtomicU64::new(0));
        let (buckets, slots, vocab) = (model.buckets(), model.slots(), model.vocab());
        let engine = engine::Engine::new(model, config.clone(), counters.clone(), queued.clone())?;
        let thread = std::thread::Builder::new()
            .name("generate-engine".into())
            .spawn(move || engine.run(inbox))
            .map_err(|e| Error::ThreadSpawn {
                what: "generate-engine",
                reason: e.to_string(),
            })?;
        Ok(Generator {
            inner: Arc::new(Inner {
                mail,
                counters,
                queued,
                config,
                buckets,
                vocab,
                slots,
                engine: std::sync::Mutex::new(Some(thread)),
            }),
        })
    }

    /// Queues a request; its tokens come on the stream. Refused at once: an empty prompt, one
    /// longer than the largest bucket, a token id outside the vocabulary, `max_tokens` 0, bad
    /// sampling parameters, a full queue.
    pub fn submit(&self, request: GenerateRequest) -> Result<TokenStream> {
        let largest = self.inner.buckets.last().copied().unwrap_or(0);
        let bad = |why: String| Err(Error::InvalidArgument(format!("generate: {why}")));
        if request.prompt.is_empty() || request.prompt.len() > largest {
            return bad(format!(
                "a prompt has 1 to {largest} tokens (the exported buckets {:?}); this one has {}",
                self.inner.buckets,
                request.prompt.len()
            ));
        }
        // An id past the vocabulary would be clamped by the embedding's gather: a wrong answer.
        if let Some(t) = (request.prompt.iter()).find(|&&t| t < 0 || t as usize >= self.inner.vocab)
        {
            return bad(format!(
                "token {t} is not in the vocabulary of {} tokens",
                self.inner.vocab
            ));
        }
        if request.max_tokens == 0 {
            return bad("max_tokens is 0".into());
        }
        if let Err(why) = request.sampling.check() {
            return bad(why);
        }
        if request.logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
            return bad(format!(
                "at most {MAX_TOP_LOGPROBS} top log-probabilities a token"
            ));
        }
        // A request a free slot will take is not waiting: the bound is past the free slots.
        let free =
            (self.inner.slots as u64).saturating_sub(self.inner.counters.running.load(Relaxed));
        let bound = self.inner.config.max_queued as u64 + free;
        if self.inner.queued.fetch_add(1, Relaxed) >= bound {
            self.inner.queued.fetch_sub(1, Relaxed);
            return Err(Error::Busy { what: "generator" });
        }
        let (events, receiver) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let submitted = Submitted {
            request,
            events,
            cancel: cancel.clone(),
            at: Instant::now(),
        };
        if self.inner.mail.send(submitted).is_err() {
            self.inner.queued.fetch_sub(1, Relaxed);
            return Err(Error::Stopped {
                what: "the generator".into(),
            });
        }
        Ok(TokenStream {
            events: receiver,
            cancel,
        })
    }

    /// Generates on this thread until the sequence ends: its tokens and why it ended.
    pub fn generate(&self, request: GenerateRequest) -> Result<(Vec<i32>, Finish)> {
        self.submit(request)?.collect_blocking()
    }

    /// Decode slots.
    pub fn slots(&self) -> usize {
        self.inner.slots
    }

    /// What the engine has done since it started.
    pub fn stats(&self) -> GeneratorStats {
        let c = &self.inner.counters;
        GeneratorStats {
            requests: c.requests.load(Relaxed),
            tokens: c.tokens.load(Relaxed),
            prefills: c.prefills.load(Relaxed),
            decode_steps: c.decode_steps.load(Relaxed),
            busy_slot_steps: c.busy_slot_steps.load(Relaxed),
            first_token: c.first_token.snapshot(),
            inter_token: c.inter_token.snapshot(),
            queue: c.queue.snapshot(),
            last_token: match c.last_token_ms.load(Relaxed) {
                0 => None,
                ms => Some(std::time::UNIX_EPOCH + Duration::from_millis(ms)),
            },
            running: c.running.load(Relaxed),
            waiting: self.inner.queued.load(Relaxed),
            cancelled: c.cancelled.load(Relaxed),
        }
    }
}
