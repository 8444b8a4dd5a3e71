//! A prompt being prefilled: the request admitted to a slot, the passes its schedule cut it
//! into (a whole prefill, or chunks of extend from nothing or from a cached prefix), and the
//! cache entry those passes build on the device, one pass a call.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;

use super::model::GenerationModel;
use super::schedule::Pass;
use super::{Counters, Submitted};
use crate::{Array, Result};

/// A request in a slot whose prompt is not all prefilled yet.
pub(super) struct Job {
    pub slot: usize,
    pub submitted: Submitted,
    passes: VecDeque<Pass>,
    /// The entry so far: from the last pass sent, or the cached prefix's.
    entry: Option<Vec<Array>>,
    /// Whether `entry` is this job's to donate (a cached prefix's never is).
    owned: bool,
    /// The last pass's logits: the first token's, once every pass is sent.
    logits: Option<Array>,
    /// Prompt tokens a cached prefix gave.
    pub cached: usize,
}

impl Job {
    /// `passes` over `submitted`'s prompt, starting from `prefix` (a cached entry holding the
    /// prompt's first `cached` tokens) when there is one.
    pub fn new(
        slot: usize,
        submitted: Submitted,
        passes: Vec<Pass>,
        prefix: Option<(Vec<Array>, usize)>,
    ) -> Job {
        let (entry, cached) = match prefix {
            Some((entry, cached)) => (Some(entry), cached),
            None => (None, 0),
        };
        Job {
            slot,
            submitted,
            passes: passes.into(),
            entry,
            owned: false,
            logits: None,
            cached,
        }
    }

    /// Whether every pass has been sent.
    pub fn sent(&self) -> bool {
        self.passes.is_empty()
    }

    /// Sends the next pass; nothing is read back (its entry stays on the device for the next).
    pub fn run_pass(&mut self, m: &GenerationModel, counters: &Counters) -> Result<()> {
        let Some(pass) = self.passes.pop_front() else {
            return Ok(());
        };
        let prompt = &self.submitted.request.prompt;
        let padded = |from: usize, len: usize, size: usize| -> Result<Array> {
            let mut tokens = prompt[from..from + len].to_vec();
            tokens.resize(size, 0);
            m.device.put(&tokens, &[1, size as i64])
        };
        let mut out = match pass {
            Pass::Prefill { bucket, len } => {
                let (_, prefill) = (m.prefills.iter())
                    .find(|(b, _)| *b == bucket)
                    .expect("the schedule picks an exported bucket");
                let tokens = padded(0, len, bucket)?;
                let length = m.device.put(&[len as i32], &[])?;
                prefill.call_arrays(&[&tokens, &length], &[])?
            }
            Pass::Extend { start, len, size } => {
                let (_, extend) = (m.extends.iter())
                    .find(|(c, _)| *c == size)
                    .expect("the schedule picks an exported chunk");
                let entry = match self.entry.take() {
                    Some(e) => e,
                    None => {
                        self.owned = true;
                        m.empty_entry()?
                    }
                };
                let tokens = padded(start, len, size)?;
                let at = m.device.put(&[start as i32], &[])?;
                let length = m.device.put(&[len as i32], &[])?;
                let mut args: Vec<&Array> = entry.iter().collect();
                args.extend([&tokens, &at, &length]);
                // A cached prefix is read, never donated: the cache keeps it for the next.
                let donate: Vec<usize> = match self.owned && m.extend_donates {
                    true => (0..entry.len()).collect(),
                    false => Vec::new(),
                };
                counters.chunks.fetch_add(1, Relaxed);
                extend.call_arrays(&args, &donate)?
            }
        };
        counters.prefills.fetch_add(1, Relaxed);
        self.logits = out.pop();
        self.entry = Some(out);
        self.owned = true;
        Ok(())
    }

    /// Once every pass is sent: the request, the prompt's entry and its last token's logits.
    pub fn into_done(self) -> (Submitted, Vec<Array>, Array, usize) {
        let entry = self.entry.expect("a pass was sent");
        let logits = self.logits.expect("a pass was sent");
        (self.submitted, entry, logits, self.cached)
    }
}
