//! A sequence's answer as OpenAI's routes give it: text pieces (whole characters, stop strings
//! cut, the sequence let go at a match) with the log-probabilities of their tokens, and those
//! log-probabilities in the chat's and the completion's shapes.

use std::sync::Arc;
use std::task::{Context, Poll};

use pjrt_actors::generate::{TokenEvent, TokenLogprobs, TokenStream};
use serde_json::{Value, json};

use super::super::access::AccessNote;
use super::super::error::ServeError;
use super::super::wire::openai_request::Route;
use super::Started;
use crate::text::{StopText, TextModel, TextStream};

/// What a sequence's answer is made of, as it comes: text to give, then how it ended.
pub(super) enum Piece {
    /// Text, and the log-probabilities of the tokens made since the last piece (if asked).
    Text(String, Vec<TokenLogprobs>),
    Done {
        finish: &'static str,
        tokens: usize,
        logprobs: Vec<TokenLogprobs>,
        /// Prompt tokens a cached prefix gave (`usage.prompt_tokens_details.cached_tokens`).
        cached: usize,
    },
    Failed(ServeError),
}

/// A sequence's tokens read into text pieces: each token's text once whole, stop strings cut,
/// the sequence let go (its slot freed) as soon as one matches.
pub(super) struct Pieces {
    tokens: Option<TokenStream>,
    text: Arc<TextModel>,
    decoded: TextStream,
    stop: StopText,
    made: usize,
    queued: std::collections::VecDeque<Piece>,
    /// Log-probabilities of tokens whose text is not given yet.
    pending: Vec<TokenLogprobs>,
    /// The access log's: tokens made and the finish, once known.
    note: AccessNote,
}

impl Pieces {
    pub(super) fn new(s: &mut Started) -> Pieces {
        Pieces {
            tokens: s.tokens.take(),
            text: s.text.clone(),
            decoded: TextStream::default(),
            stop: StopText::new(std::mem::take(&mut s.stops)),
            made: 0,
            queued: Default::default(),
            pending: Vec::new(),
            note: s.note.clone(),
        }
    }

    /// The next piece; `None` after the last.
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
        loop {
            if let Some(p) = self.queued.pop_front() {
                return Poll::Ready(Some(p));
            }
            let Some(tokens) = self.tokens.as_mut() else {
                return Poll::Ready(None);
            };
            let event = std::task::ready!(tokens.poll_event(cx));
            let (given, end) = match event {
                Some(Ok(TokenEvent::Logprobs(l))) => {
                    self.pending.push(l);
                    continue;
                }
                Some(Ok(TokenEvent::Token(t))) => {
                    self.made += 1;
                    let (given, hit) = self.stop.push(&self.decoded.push(&self.text, t));
                    (given, hit.then_some("stop"))
                }
                Some(Ok(TokenEvent::Done(finish))) => {
                    let (mut rest, hit) = self.stop.push(&self.decoded.finish(&self.text));
                    if !hit {
                        rest += &self.stop.finish();
                    }
                    (rest, Some(if hit { "stop" } else { finish.as_str() }))
                }
                Some(Err(e)) => {
                    self.tokens = None;
                    return Poll::Ready(Some(Piece::Failed(e.into())));
                }
                None => {
                    self.tokens = None;
                    let e = ServeError::Unavailable("the generator stopped".into());
                    return Poll::Ready(Some(Piece::Failed(e)));
                }
            };
            if !given.is_empty() {
                let logprobs = std::mem::take(&mut self.pending);
                self.queued.push_back(Piece::Text(given, logprobs));
            }
            if let Some(finish) = end {
                let made = self.made as u64;
                (self.note).set(|n| (n.tokens_out, n.finish) = (Some(made), Some(finish)));
                let cached = self.tokens.as_ref().map_or(0, TokenStream::cached_tokens);
                // Dropping the stream cancels a sequence a stop string ended early.
                self.tokens = None;
                let (tokens, logprobs) = (self.made, std::mem::take(&mut self.pending));
                self.queued.push_back(Piece::Done {
                    finish,
                    tokens,
                    logprobs,
                    cached,
                });
            }
        }
    }
}

/// Log-probabilities as a route writes them: a chat's `{"content": [...]}` (each token's text,
/// log-probability, bytes and top alternatives), or a completion's parallel lists (`tokens`,
/// `token_logprobs`, `top_logprobs`, `text_offset`). `offset` is where the first token's text
/// starts in the answer, moved on past these.
pub(super) fn logprobs_json(
    route: Route,
    text: &TextModel,
    entries: &[TokenLogprobs],
    offset: &mut usize,
) -> Value {
    let token = |id: i32| text.decode(&[id]);
    match route {
        Route::Chat => {
            let one = |id: i32, logprob: f32| {
                let t = token(id);
                json!({"token": t, "logprob": logprob, "bytes": t.as_bytes()})
            };
            let content: Vec<Value> = (entries.iter())
                .map(|e| {
                    let mut v = one(e.token, e.logprob);
                    v["top_logprobs"] = e.top.iter().map(|&(id, lp)| one(id, lp)).collect();
                    v
                })
                .collect();
            json!({"content": content, "refusal": null})
        }
        Route::Completions => {
            let (mut tokens, mut lps, mut tops, mut offsets) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for e in entries {
                let t = token(e.token);
                offsets.push(*offset);
                *offset += t.chars().count();
                tokens.push(t);
                lps.push(e.logprob);
                // A dict by token text, as OpenAI's legacy format has it: tokens whose text
                // is the same keep the likelier's value.
                let mut top = serde_json::Map::new();
                for &(id, lp) in &e.top {
                    top.entry(token(id)).or_insert(json!(lp));
                }
                tops.push(top);
            }
            json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
                "text_offset": offsets})
        }
    }
}
