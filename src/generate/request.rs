//! What a caller hands the generator and gets back: a request, the events of its stream (its
//! tokens as they are made, then why it ended), and the stream itself, which cancels its
//! sequence when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use tokio::sync::mpsc;

use super::{Sampling, TokenLogprobs};
use crate::{Error, Result};

/// One sequence to generate.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The prompt's token ids: at least one, at most the largest prompt bucket, or with extend
    /// exports at most the cache's length ([`Generator::max_prompt`](super::Generator::max_prompt)).
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
    /// log-probability and the `k` most likely tokens' (at most [`MAX_TOP_LOGPROBS`](super::MAX_TOP_LOGPROBS)).
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
    pub(super) events: mpsc::UnboundedReceiver<Result<TokenEvent>>,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) cached: Arc<AtomicUsize>,
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

    /// How many of the prompt's tokens a cached prefix gave (not computed again): set before
    /// the first token comes, 0 until then.
    pub fn cached_tokens(&self) -> usize {
        self.cached.load(Relaxed)
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
