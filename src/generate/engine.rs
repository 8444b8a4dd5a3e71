//! The generation engine: one thread that owns the cache and the decode slots (its mailbox, a
//! crossbeam channel, is the only way in). Each turn it takes its mail, ends the sequences that
//! were cancelled or ran out of time, prefills and inserts at most one waiting request into a
//! free slot while others run (so a new request stalls the running ones by one prefill at
//! most; with none running it fills every free slot), and runs one decode step for every busy
//! slot, the prefill sent before the step and read after it. (Static batching, kept for comparison, fills every slot
//! at once and then waits for the batch's longest sequence.)

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use crossbeam_channel::{Receiver, TryRecvError};
use tokio::sync::mpsc;

use super::model::GenerationModel;
use super::sampling::{Sampling, TokenRng, choose};
use super::{Counters, Finish, GeneratorConfig, Submitted, TokenEvent};
use crate::{Array, Error, Result};

/// A prefill sent for a slot, its results not read yet.
struct Prefilling {
    slot: usize,
    submitted: Submitted,
    out: Vec<Array>,
}

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
    counters: Arc<Counters>,
    queued: Arc<AtomicU64>,
    cache: Vec<Array>,
    slots: Vec<Option<Active>>,
    waiting: VecDeque<Submitted>,
}

impl Engine {
    pub(super) fn new(
        model: GenerationModel,
        config: GeneratorConfig,
        counters: Arc<Counters>,
        queued: Arc<AtomicU64>,
    ) -> Result<Engine> {
        let cache = model.empty_cache()?;
        let slots = (0..model.slots).map(|_| None).collect();
        Ok(Engine {
            model,
            config,
            counters,
            queued,
            cache,
            slots,
            waiting: VecDeque::new(),
        })
    }

    pub(super) fn run(mut self, inbox: Receiver<Submitted>) {
        loop {
            let idle = self.waiting.is_empty() && self.slots.iter().all(Option::is_none);
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

    /// One prefill (where a slot is free and a request waits) and one decode step; with no
    /// sequence running, nothing is stalled, so every free slot is filled first. Static
    /// batching admits only when every slot is free, as many as there are slots. The prefill
    /// is sent before the step and read after it, so the plugin may run the two at once; its
    /// sequence joins the next step.
    fn turn(&mut self) -> Result<()> {
        let idle = self.slots.iter().all(Option::is_none);
        let admit = match (self.config.continuous, idle) {
            (_, true) => self.slots.len(),
            (true, false) => 1,
            (false, false) => 0,
        };
        let mut started: Vec<Prefilling> = Vec::new();
        for _ in 0..admit {
            let Some(free) = (0..self.slots.len())
                .find(|&k| self.slots[k].is_none() && started.iter().all(|p| p.slot != k))
            else {
                break;
            };
            let Some(next) = self.waiting.pop_front() else {
                break;
            };
            self.queued.fetch_sub(1, Relaxed);
            if !next.cancel.load(Relaxed) {
                started.push(self.start_prefill(free, next)?);
            }
        }
        if self.slots.iter().any(Option::is_some) {
            self.step()?;
        }
        for p in started {
            self.finish_prefill(p)?;
        }
        Ok(())
    }

    /// Sends `s`'s prompt to prefill for slot `slot`; nothing is read yet.
    fn start_prefill(&mut self, slot: usize, s: Submitted) -> Result<Prefilling> {
        // Its wait for a slot ends here.
        self.counters.queue.observe(s.at.elapsed());
        let m = &self.model;
        let prompt = &s.request.prompt;
        let (bucket, prefill) = (m.prefills.iter())
            .find(|(b, _)| *b >= prompt.len())
            .expect("checked at submit");
        let mut tokens = prompt.clone();
        tokens.resize(*bucket, 0);
        let tokens = m.device.put(&tokens, &[1, *bucket as i64])?;
        let length = m.device.put(&[prompt.len() as i32], &[])?;
        let out = prefill.call_arrays(&[&tokens, &length], &[])?;
        self.counters.prefills.fetch_add(1, Relaxed);
        Ok(Prefilling {
            slot,
            submitted: s,
            out,
        })
    }

    /// Reads a prefill's logits, streams its first token, and inserts its cache entry into
    /// its slot unless the sequence is already done.
    fn finish_prefill(&mut self, p: Prefilling) -> Result<()> {
        let Prefilling {
            slot,
            submitted: s,
            mut out,
        } = p;
        let r = s.request;
        let m = &self.model;
        let logits = out.pop().expect("checked at load").to_vec::<f32>()?;
        let mut rng = TokenRng::new(match r.sampling {
            Sampling::Random { seed, .. } => seed,
            Sampling::Greedy => 0,
        });
        let token = choose(&logits, &r.sampling, &mut rng) as i32;
        self.counters.requests.fetch_add(1, Relaxed);
        self.counters.first_token.observe(s.at.elapsed());
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
        if let Some(finish) = self.emit(&mut active, token, &logits) {
            send_done(&self.counters, &active.events, finish);
            return Ok(());
        }
        let slot_index = m.device.put(&[slot as i32], &[])?;
        let mut args: Vec<&Array> = self.cache.iter().collect();
        args.extend(out.iter());
        args.push(&slot_index);
        let donate: Vec<usize> = match m.donates.0 {
            true => (0..self.cache.len()).collect(),
            false => Vec::new(),
        };
        self.cache = m.insert.call_arrays(&args, &donate)?;
        self.slots[slot] = Some(active);
        self.counters.running.fetch_add(1, Relaxed);
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

    /// Ends the sequences whose stream was dropped or cancelled, or whose deadline passed, and
    /// drops waiting requests that were cancelled.
    fn end_cancelled(&mut self) {
        let now = Instant::now();
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
        let counters = &self.counters;
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
        for s in self.waiting.drain(..) {
            self.queued.fetch_sub(1, Relaxed);
            send_done(&self.counters, &s.events, finish);
        }
    }

    /// A step failed: every running sequence gets the error, and the cache starts again from
    /// zeros (a failed donating step may have consumed it). Waiting requests stay queued.
    fn fail_all(&mut self, e: Error) {
        for a in self.slots.iter_mut().filter_map(Option::take) {
            self.counters.running.fetch_sub(1, Relaxed);
            let _ = a.events.send(Err(e.clone()));
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
