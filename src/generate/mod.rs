//! Token-by-token generation on three JAX exports (prefill, insert, decode; see
//! [`GenerationModel`]), and a fourth (extend) for chunked prefill and a prefix cache: a
//! [`Generator`] keeps the KV cache resident on the device, donated at every step, and runs a
//! fixed number of decode slots that requests join and leave between steps (continuous
//! batching), each request streaming its tokens as they are made.

mod engine;
mod latency;
mod logprobs;
mod model;
mod prefill;
mod prefix_cache;
mod request;
mod sampling;
mod schedule;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use tokio::sync::mpsc;

use crate::{Error, Result};
pub use latency::{LATENCY_BOUNDS, Latencies};
pub use logprobs::{MAX_TOP_LOGPROBS, TokenLogprobs};
pub use model::GenerationModel;
pub use request::{Finish, GenerateRequest, TokenEvent, TokenStream};
pub use sampling::{Sampling, TokenRng};

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
    /// With extend exports: a prompt longer than this is prefilled in chunks of this many
    /// tokens (at most the largest extend chunk), one chunk per engine turn between decode
    /// steps. `None`: prompts that fit a prefill bucket run whole, longer ones are cut into the
    /// largest extend chunk. Refused without extend exports, and at 0.
    pub prefill_chunk: Option<usize>,
    /// With extend exports: the bytes of device memory the prefix cache may hold (prompts'
    /// entries, found again by prompts that start the same way). 0 turns it off.
    pub prefix_cache_bytes: usize,
}

/// The prefix cache's budget unless configured: 64 MiB.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 64 << 20;

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            max_queued: 1024,
            max_sequence: None,
            continuous: true,
            prefill_chunk: None,
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
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
    /// Prefill runs: whole prompts, and chunks.
    pub prefills: u64,
    /// Of those, extend runs (a chunk, or a prompt's rest after a cached prefix).
    pub chunks: u64,
    /// Prompts that started from a cached prefix.
    pub prefix_hits: u64,
    /// Prompt tokens those prefixes gave (not computed again).
    pub prefix_tokens: u64,
    /// Entries the prefix cache evicted for others.
    pub prefix_evictions: u64,
    /// The prefix cache's entries now.
    pub prefix_entries: u64,
    /// Their bytes on the device now (in the memory space's `bytes_held`).
    pub prefix_bytes: u64,
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
    chunks: AtomicU64,
    prefix_hits: AtomicU64,
    prefix_tokens: AtomicU64,
    prefix_evictions: AtomicU64,
    prefix_entries: AtomicU64,
    prefix_bytes: AtomicU64,
}

impl Counters {
    /// The prefix cache's size now.
    fn note_prefixes(&self, bytes: usize, entries: usize) {
        self.prefix_bytes.store(bytes as u64, Relaxed);
        self.prefix_entries.store(entries as u64, Relaxed);
    }
}

/// A request on its way to the engine.
struct Submitted {
    request: GenerateRequest,
    events: mpsc::UnboundedSender<Result<TokenEvent>>,
    cancel: Arc<AtomicBool>,
    /// Prompt tokens a cached prefix gave: the engine sets it before the first token.
    cached: Arc<AtomicUsize>,
    at: Instant,
}

/// The shutdown trigger: the last [`Generator`] handle's drop closes the mailbox, and the
/// engine ends its sequences (`Cancelled`) and exits.
struct Inner {
    mail: Sender<Submitted>,
    counters: Arc<Counters>,
    queued: Arc<AtomicU64>,
    config: GeneratorConfig,
    /// How the engine cuts a prompt into passes; what `submit` checks a prompt against.
    shapes: schedule::Shapes,
    /// The longest prompt served.
    max_prompt: usize,
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
        let shapes = Self::shapes(&model, &config)?;
        let max_sequence = config.max_sequence.unwrap_or(0);
        let largest = shapes.buckets.last().copied().unwrap_or(0);
        // The longest prompt the passes fit: past the buckets, within the sequence's positions.
        let max_prompt = (1..=largest.max(max_sequence))
            .rev()
            .find(|&n| {
                (n <= largest || n <= max_sequence) && schedule::passes(n, 0, &shapes).is_some()
            })
            .unwrap_or(0);
        let (mail, inbox) = crossbeam_channel::unbounded();
        let counters = Arc::new(Counters::default());
        let queued = Arc::new(AtomicU64::new(0));
        let (slots, vocab) = (model.slots(), model.vocab());
        let engine = engine::Engine::new(
            model,
            config.clone(),
            shapes.clone(),
            counters.clone(),
            queued.clone(),
        )?;
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
                shapes,
                max_prompt,
                vocab,
                slots,
                engine: std::sync::Mutex::new(Some(thread)),
            }),
        })
    }

    /// How a prompt is cut into passes: the buckets, the extend chunks, the configured chunk.
    fn shapes(model: &GenerationModel, config: &GeneratorConfig) -> Result<schedule::Shapes> {
        let (buckets, extends) = (model.buckets(), model.extend_sizes());
        let refuse = |why: String| Err(Error::InvalidArgument(format!("generation model: {why}")));
        let largest_extend = extends.last().copied();
        match (config.prefill_chunk, largest_extend) {
            (Some(0), _) => return refuse("prefill_chunk is 0".into()),
            (Some(c), None) => {
                return refuse(format!(
                    "prefill_chunk {c} needs an extend export (extend_C.exported), which continues a sequence from a chunk"
                ));
            }
            _ => {}
        }
        let largest_bucket = buckets.last().copied().unwrap_or(0);
        let chunk = (config.prefill_chunk)
            .unwrap_or(usize::MAX)
            .min(largest_extend.unwrap_or(0));
        Ok(schedule::Shapes {
            whole: config.prefill_chunk.unwrap_or(largest_bucket),
            chunk,
            positions: match model.cache_length() {
                Ok(t) => t,
                Err(_) => config.max_sequence.unwrap_or(0),
            },
            buckets,
            extends,
        })
    }

    /// The longest prompt served: the largest prefill bucket, or with extend exports the
    /// sequence's positions (as far as the chunks fit the cache).
    pub fn max_prompt(&self) -> usize {
        self.inner.max_prompt
    }

    /// Queues a request; its tokens come on the stream. Refused at once: an empty prompt, one
    /// longer than [`max_prompt`](Self::max_prompt), a token id outside the vocabulary,
    /// `max_tokens` 0, bad sampling parameters, a full queue.
    pub fn submit(&self, request: GenerateRequest) -> Result<TokenStream> {
        let most = self.inner.max_prompt;
        let bad = |why: String| Err(Error::InvalidArgument(format!("generate: {why}")));
        let len = request.prompt.len();
        if len == 0 || len > most || schedule::passes(len, 0, &self.inner.shapes).is_none() {
            let extends = match self.inner.shapes.extends.as_slice() {
                [] => String::new(),
                e => format!(" and extend chunks {e:?}"),
            };
            return bad(format!(
                "a prompt has 1 to {most} tokens (the exported buckets {:?}{extends}); this one has {len}",
                self.inner.shapes.buckets,
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
        let cached = Arc::new(AtomicUsize::new(0));
        let submitted = Submitted {
            request,
            events,
            cancel: cancel.clone(),
            cached: cached.clone(),
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
            cached,
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
            chunks: c.chunks.load(Relaxed),
            prefix_hits: c.prefix_hits.load(Relaxed),
            prefix_tokens: c.prefix_tokens.load(Relaxed),
            prefix_evictions: c.prefix_evictions.load(Relaxed),
            prefix_entries: c.prefix_entries.load(Relaxed),
            prefix_bytes: c.prefix_bytes.load(Relaxed),
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
