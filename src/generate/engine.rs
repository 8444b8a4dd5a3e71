//! The generation engine: one thread that owns the cache, the decode slots and the prefix
//! cache (its mailbox, a crossbeam channel, is the only way in). Each turn it takes its mail,
//! ends the sequences that were cancelled or ran out of time, and does what the schedule
//! (`schedule::turn`) says: admits waiting requests to free slots, runs prefill passes (one
//! while others run, so a running sequence waits one pass at most; a long prompt is cut into
//! chunks), and runs one decode step for every busy slot, a prompt's last pass sent before the
//! step and read after it. (Static batching, kept for comparison, fills every slot at once and
//! then waits for the batch's longest sequence.)

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use crossbeam_channel::{Receiver, TryRecvError};
use tokio::sync::mpsc;

use super::model::GenerationModel;
use super::prefill::Job;
use super::prefix_cache::PrefixCache;
use super::sampling::{Sampling, TokenRng, choose};
use super::schedule::{self, Occupancy, Passes, Shapes};
use super::{Counters, Finish, GeneratorConfig, Submitted, TokenEvent};
use crate::{Array, Error, Result};

/// A sequence in a decode slot.
struct Active {
    events: mpsc::UnboundedSender<Result<TokenEvent>>,
    cancel: Arc<std::sync::atomic::AtomicBool>,
    sampling: Sampling,
    rng: TokenRng,
    stop_tokens: Vec<i32>,
    deadline: Option<Instant>,
    max_tokens: usize,
    made: usize,
    /// The last token made: the next step's input, at `position`.
    last: i32,
    position: usize,
    last_at: Instant,
    /// How many alternatives each token's log-probabilities name, if asked.
    logprobs: Option<usize>,
}

/// Ends a sequence's stream with why it ended, counted.
fn send_done(
    counters: &Counters,
    events: &mpsc::UnboundedSender<Result<TokenEvent>>,
    finish: Finish,
) {
    if finish == Finish::Cancelled {
        counters.cancelled.fetch_add(1, Relaxed);
    }
    let _ = events.send(Ok(TokenEvent::Done(finish)));
}

pub(super) struct Engine {
    model: GenerationModel,
    config: GeneratorConfig,
    shapes: Shapes,
    counters: Arc<Counters>,
    queued: Arc<AtomicU64>,
    cache: Vec<Array>,
    slots: Vec<Option<Active>>,
    /// Requests admitted to a slot, their prompts still prefilling, first admitted first.
    jobs: VecDeque<Job>,
    waiting: VecDeque<Submitted>,
    /// Prompts' entries by prefix (`None`: no extend export, or a budget of 0).
    prefixes: Option<PrefixCache<Vec<Array>>>,
    /// Where a prompt with no prefix starts when its first pass is an extend (with extend
    /// exports): one zero entry, resident.
    zeros: Option<Vec<Array>>,
}

impl Engine {
    pub(super) fn new(
        model: GenerationModel,
        config: GeneratorConfig,
        shapes: Shapes,
        counters: Arc<Counters>,
        queued: Arc<AtomicU64>,
    ) -> Result<Engine> {
        let cache = model.empty_cache()?;
        let slots = (0..model.slots).map(|_| None).collect();
        let prefixes = (!model.extends.is_empty() && config.prefix_cache_bytes > 0)
            .then(|| PrefixCache::new(shapes.chunk, config.prefix_cache_bytes));
        // Made at start, so an idle engine holds all it holds between requests.
        let zeros = match model.extends.is_empty() {
            true => None,
            false => Some(model.empty_entry()?),
        };
        Ok(Engine {
            model,
            config,
            shapes,
            counters,
            queued,
            cache,
            slots,
            jobs: VecDeque::new(),
            waiting: VecDeque::new(),
            prefixes,
            zeros,
        })
    }

    pub(super) fn run(mut self, inbox: Receiver<Submitted>) {
        loop {
            let idle = self.waiting.is_empty()
                && self.jobs.is_empty()
                && self.slots.iter().all(Option::is_none);
            let first = match idle {
                true => inbox.recv().ok(),
                false => None,
            };
            if idle && first.is_none() {
                return;
            }
            self.waiting.extend(first);
            let mut closed = false;
            loop {
                match inbox.try_recv() {
                    Ok(s) => self.waiting.push_back(s),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            if closed {
                self.end_all(Finish::Cancelled);
                return;
            }
            self.end_cancelled();
            if let Err(e) = self.turn() {
                self.fail_all(e);
            }
        }
    }

    /// One turn as the schedule has it: admissions, prefill passes, a decode step, then the
    /// prompts whose passes are all sent are read and join the next step.
    fn turn(&mut self) -> Result<()> {
        let running = self.slots.iter().filter(|s| s.is_some()).count();
        let plan = schedule::turn(Occupancy {
            continuous: self.config.continuous,
            running,
            prefilling: self.jobs.len(),
            free: self.slots.len() - running - self.jobs.len(),
            waiting: self.waiting.len(),
        });
        for _ in 0..plan.admit {
            let Some(free) = (0..self.slots.len())
                .find(|&k| self.slots[k].is_none() && self.jobs.iter().all(|j| j.slot != k))
            else {
                break;
            };
            let Some(next) = self.waiting.pop_front() else {
                break;
            };
            self.queued.fetch_sub(1, Relaxed);
            if !next.cancel.load(Relaxed) {
                let job = self.admit(free, next);
                self.jobs.push_back(job);
            }
        }
        match plan.passes {
            Passes::One => {
                if let Some(job) = self.jobs.front_mut() {
                    job.run_pass(&self.model, &self.counters)?;
                }
            }
            Passes::All => {
                for job in self.jobs.iter_mut() {
                    while !job.sent() {
                        job.run_pass(&self.model, &self.counters)?;
                    }
                }
            }
        }
        if plan.decode {
            self.step()?;
        }
        while self.jobs.front().is_some_and(Job::sent) {
            let job = self.jobs.pop_front().expect("just seen");
            self.finish_prefill(job)?;
        }
        Ok(())
    }

    /// `s` takes slot `slot`: its passes, from the longest cached prefix of its prompt.
    fn admit(&mut self, slot: usize, s: Submitted) -> Job {
        // Its wait for a slot ends here.
        self.counters.queue.observe(s.at.elapsed());
        let prompt = &s.request.prompt;
        let hit = (self.prefixes.as_mut())
            .and_then(|c| c.longest(prompt).map(|h| (h.value.clone(), h.tokens)))
            .and_then(|(entry, n)| {
                Some((schedule::passes(prompt.len(), n, &self.shapes)?, entry, n))
            });
        if let Some((passes, entry, n)) = hit {
            self.counters.prefix_hits.fetch_add(1, Relaxed);
            self.counters.prefix_tokens.fetch_add(n as u64, Relaxed);
            return Job::new(slot, s, passes, Some((entry, n)));
        }
        let passes = schedule::passes(prompt.len(), 0, &self.shapes).expect("checked at submit");
        // A prompt whose first chunk is an extend starts from the resident zero entry, read and
        // not donated (no upload of zeros a prompt).
        let zeros = match passes.first() {
            Some(schedule::Pass::Extend { .. }) => self.zeros.clone().map(|z| (z, 0)),
            _ => None,
        };
        Job::new(slot, s, passes, zeros)
    }

    /// Reads a prompt's logits, streams its first token, inserts its cache entry into its slot
    /// unless the sequence is already done, and keeps the entry in the prefix cache.
    fn finish_prefill(&mut self, job: Job) -> Result<()> {
        let slot = job.slot;
        let (s, entry, logits, cached) = job.into_done();
        let r = s.request;
        let m = &self.model;
        let logits = logits.to_vec::<f32>()?;
        let mut rng = TokenRng::new(match r.sampling {
            Sampling::Random { seed, .. } => seed,
            Sampling::Greedy => 0,
        });
        let token = choose(&logits, &r.sampling, &mut rng) as i32;
        self.counters.requests.fetch_add(1, Relaxed);
        self.counters.first_token.observe(s.at.elapsed());
        s.cached.store(cached, Relaxed);
        let mut active = Active {
            events: s.events,
            cancel: s.cancel,
            sampling: r.sampling,
            rng,
            stop_tokens: r.stop_tokens,
            deadline: r.deadline,
            max_tokens: r.max_tokens,
            made: 0,
            last: token,
            position: r.prompt.len(),
            last_at: Instant::now(),
            logprobs: r.logprobs,
        };
        let ended = self.emit(&mut active, token, &logits);
        if ended.is_none() {
            let slot_index = m.device.put(&[slot as i32], &[])?;
            let mut args: Vec<&Array> = self.cache.iter().collect();
            args.extend(entry.iter());
            args.push(&slot_index);
            let donate: Vec<usize> = match m.donates.0 {
                true => (0..self.cache.len()).collect(),
                false => Vec::new(),
            };
            // Insert reads the entry (only the cache is donated): the prefix cache may keep it.
            self.cache = m.insert.call_arrays(&args, &donate)?;
        }
        if let Some(prefixes) = self.prefixes.as_mut() {
            // What leaves is dropped here, on the engine's thread, as every array it runs.
            if let Ok(evicted) = prefixes.insert(&r.prompt, entry, m.entry_bytes()) {
                (self.counters.prefix_evictions).fetch_add(evicted.len() as u64, Relaxed);
            }
            self.counters
                .note_prefixes(prefixes.bytes(), prefixes.len());
        }
        match ended {
            Some(finish) => send_done(&self.counters, &active.events, finish),
            None => {
                self.slots[slot] = Some(active);
                self.counters.running.fetch_add(1, Relaxed);
            }
        }
        Ok(())
    }

    /// Streams `token`; the reason the sequence ends with it, if it does.
    /// `logits`: the step's row that `token` was chosen from.
    fn emit(&self, a: &mut Active, token: i32, logits: &[f32]) -> Option<Finish> {
        a.made += 1;
        self.counters.tokens.fetch_add(1, Relaxed);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let ms = now.map_or(0, |d| d.as_millis() as u64);
        self.counters.last_token_ms.store(ms, Relaxed);
        if let Some(k) = a.logprobs {
            let l = super::logprobs::logprobs(logits, token as usize, k);
            let _ = a.events.send(Ok(TokenEvent::Logprobs(l)));
        }
        if a.events.send(Ok(TokenEvent::Token(token))).is_err() {
            return Some(Finish::Cancelled);
        }
        if a.stop_tokens.contains(&token) {
            return Some(Finish::Stop);
        }
        if a.made >= a.max_tokens {
            return Some(Finish::Length);
        }
        if (self.config.max_sequence).is_some_and(|max| a.position >= max) {
            return Some(Finish::CacheFull);
        }
        None
    }

    /// One decode step for every busy slot (free slots run on token 0 at position 0, which
    /// their next insert overwrites).
    fn step(&mut self) -> Result<()> {
        let m = &self.model;
        let mut tokens = vec![0i32; m.slots];
        let mut positions = vec![0i32; m.slots];
        let mut busy = 0;
        for (k, a) in self.slots.iter().enumerate() {
            if let Some(a) = a {
                tokens[k] = a.last;
                positions[k] = a.position as i32;
                busy += 1;
            }
        }
        let n = m.slots as i64;
        let (tokens, positions) = (
            m.device.put(&tokens, &[n])?,
            m.device.put(&positions, &[n])?,
        );
        let mut args: Vec<&Array> = self.cache.iter().collect();
        args.push(&tokens);
        args.push(&positions);
        let donate: Vec<usize> = match m.donates.1 {
            true => (0..self.cache.len()).collect(),
            false => Vec::new(),
        };
        let mut out = m.decode.call_arrays(&args, &donate)?;
        let logits = out.pop().expect("checked at load").to_vec::<f32>()?;
        self.cache = out;
        self.counters.decode_steps.fetch_add(1, Relaxed);
        self.counters.busy_slot_steps.fetch_add(busy, Relaxed);
        let vocab = m.vocab;
        for k in 0..self.slots.len() {
            let Some(mut a) = self.slots[k].take() else {
                continue;
            };
            let row = &logits[k * vocab..(k + 1) * vocab];
            let token = choose(row, &a.sampling, &mut a.rng) as i32;
            let now = Instant::now();
            self.counters.inter_token.observe(now - a.last_at);
            a.last_at = now;
            a.last = token;
            a.position += 1;
            match self.emit(&mut a, token, row) {
                Some(finish) => {
                    // The slot counts free before the client hears its sequence ended.
                    self.counters.running.fetch_sub(1, Relaxed);
                    send_done(&self.counters, &a.events, finish);
                }
                None => self.slots[k] = Some(a),
            }
        }
        Ok(())
    }

    /// Ends the sequences whose stream was dropped or cancelled, or whose deadline passed
    /// (running or prefilling, each freeing its slot), and drops waiting requests that were.
    fn end_cancelled(&mut self) {
        let now = Instant::now();
        let counters = &self.counters;
        self.jobs.retain(|j| {
            let s = &j.submitted;
            let finish = match () {
                _ if s.cancel.load(Relaxed) || s.events.is_closed() => Finish::Cancelled,
                _ if s.request.deadline.is_some_and(|d| d <= now) => Finish::Deadline,
                _ => return true,
            };
            send_done(counters, &s.events, finish);
            false
        });
        for slot in self.slots.iter_mut() {
            let finish = match slot {
                Some(a) if a.cancel.load(Relaxed) || a.events.is_closed() => Finish::Cancelled,
                Some(a) if a.deadline.is_some_and(|d| d <= now) => Finish::Deadline,
                _ => continue,
            };
            if let Some(a) = slot.take() {
                self.counters.running.fetch_sub(1, Relaxed);
                send_done(&self.counters, &a.events, finish);
            }
        }
        let before = self.waiting.len();
        self.waiting.retain(|s| {
            let expired = s.request.deadline.is_some_and(|d| d <= now);
            if expired {
                let _ = s.events.send(Ok(TokenEvent::Done(Finish::Deadline)));
            }
            let gone = !expired && (s.cancel.load(Relaxed) || s.events.is_closed());
            // A client that leaves before its slot is counted as one that leaves after.
            if gone {
                send_done(counters, &s.events, Finish::Cancelled);
            }
            !(expired || gone)
        });
        self.queued
            .fetch_sub((before - self.waiting.len()) as u64, Relaxed);
    }

    fn end_all(&mut self, finish: Finish) {
        for a in self.slots.iter_mut().filter_map(Option::take) {
            self.counters.running.fetch_sub(1, Relaxed);
            send_done(&self.counters, &a.events, finish);
        }
        for j in self.jobs.drain(..) {
            send_done(&self.counters, &j.submitted.events, finish);
        }
        for s in self.waiting.drain(..) {
            self.queued.fetch_sub(1, Relaxed);
            send_done(&self.counters, &s.events, finish);
        }
    }

    /// A step or pass failed: every running or prefilling sequence gets the error, and the
    /// cache starts again from zeros (a failed donating step may have consumed it). Waiting
    /// requests stay queued; the prefix cache's entries, never donated, stay.
    fn fail_all(&mut self, e: Error) {
        for a in self.slots.iter_mut().filter_map(Option::take) {
            self.counters.running.fetch_sub(1, Relaxed);
            let _ = a.events.send(Err(e.clone()));
        }
        for j in self.jobs.drain(..) {
            let _ = j.submitted.events.send(Err(e.clone()));
        }
        match self.model.empty_cache() {
            Ok(cache) => self.cache = cache,
            Err(e) => {
                for s in self.waiting.drain(..) {
                    self.queued.fetch_sub(1, Relaxed);
                    let _ = s.events.send(Err(e.clone()));
                }
            }
        }
    }
}
