//! The engine's schedule as pure functions, so a table can test it without a device: what one
//! turn does (requests admitted, prefill passes run, whether a decode step runs), and the passes
//! that prefill one prompt (whole, or in chunks from a cached prefix or from nothing).

/// What the engine holds when a turn begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Occupancy {
    /// Continuous batching (else static: a batch runs until its longest member ends).
    pub continuous: bool,
    /// Sequences in decode slots.
    pub running: usize,
    /// Requests admitted to a slot whose prompt is still being prefilled.
    pub prefilling: usize,
    /// Slots neither running nor held by a prefilling request.
    pub free: usize,
    /// Requests waiting for a slot.
    pub waiting: usize,
}

/// How many prefill passes a turn runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Passes {
    /// The first prefilling request's next pass: a running sequence waits one pass at most.
    One,
    /// Every pass of every prefilling request: nothing runs that a prefill could stall.
    All,
}

/// What one turn does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Turn {
    /// Waiting requests that take a free slot and start prefilling.
    pub admit: usize,
    pub passes: Passes,
    /// One decode step for the running sequences.
    pub decode: bool,
}

/// One turn's work. Continuous: with nothing running every free slot is filled and prefilled
/// at once (no one waits on it); else one request at a time is admitted, and one prefill pass
/// (a whole short prompt, or one chunk) runs before each decode step, so a running sequence
/// waits one pass at most between its tokens. Static: a batch is admitted only when every slot
/// and prefill is done, and prefilled whole before its first step.
pub(super) fn turn(o: Occupancy) -> Turn {
    let fill = o.free.min(o.waiting);
    let admit = match (o.continuous, o.running, o.prefilling) {
        (_, 0, 0) => fill,
        (true, 0, _) => fill,
        (true, _, 0) => fill.min(1),
        _ => 0,
    };
    let passes = match (o.continuous, o.running) {
        (true, r) if r > 0 => Passes::One,
        _ => Passes::All,
    };
    Turn {
        admit,
        passes,
        decode: o.running > 0,
    }
}

/// One prefill run over part of a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// `prefill` in bucket `bucket` over the prompt's first `len` tokens: a fresh entry.
    Prefill { bucket: usize, len: usize },
    /// `extend` of chunk size `size` over the `len` tokens from `start`, continuing the entry.
    Extend {
        start: usize,
        len: usize,
        size: usize,
    },
}

/// The exported shapes and the configuration a prompt's passes are cut by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Shapes {
    /// Prefill buckets and extend chunk sizes, smallest first.
    pub buckets: Vec<usize>,
    pub extends: Vec<usize>,
    /// A prompt of at most this many tokens, with no cached prefix, is prefilled whole.
    pub whole: usize,
    /// The chunk a longer prompt is cut into (and a cached prefix's granularity).
    pub chunk: usize,
    /// Positions in the cache: no pass writes past it (XLA would clamp the write: wrong tokens).
    pub positions: usize,
}

/// The passes that prefill a prompt of `len` tokens whose first `cached` come from a cached
/// prefix (a multiple of the chunk, below `len`); `None` where the exports cannot (a prompt
/// past every bucket without extend, or a chunk that would run past the cache).
pub(super) fn passes(len: usize, cached: usize, s: &Shapes) -> Option<Vec<Pass>> {
    let bucket_for = |n: usize| s.buckets.iter().copied().find(|&b| b >= n);
    if let (0, true, Some(bucket)) = (cached, len <= s.whole, bucket_for(len)) {
        return Some(vec![Pass::Prefill { bucket, len }]);
    }
    if s.extends.is_empty() || s.chunk == 0 || len == 0 || cached >= len {
        return None;
    }
    let mut out = Vec::new();
    let mut start = cached;
    while start < len {
        let n = s.chunk.min(len - start);
        let extend = (s.extends.iter().copied()).find(|&e| e >= n && start + e <= s.positions);
        let pass = match (start, bucket_for(n), extend) {
            // The first chunk of a fresh prompt: prefill makes its entry, as a whole one would,
            // unless its bucket is longer than the chunk's extend (more tokens computed).
            (0, Some(bucket), e) if e.is_none_or(|e| bucket <= e) => {
                Pass::Prefill { bucket, len: n }
            }
            (_, _, Some(size)) => Pass::Extend {
                start,
                len: n,
                size,
            },
            _ => return None,
        };
        out.push(pass);
        start += n;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_admits_and_prefills_by_what_runs() {
        let o = |continuous, running, prefilling, free, waiting| Occupancy {
            continuous,
            running,
            prefilling,
            free,
            waiting,
        };
        let t = |admit, passes, decode| Turn {
            admit,
            passes,
            decode,
        };
        use Passes::*;
        #[rustfmt::skip]
        let table = [
            // continuous, running, prefilling, free, waiting  ->  admit, passes, decode
            (o(true, 0, 0, 4, 0), t(0, All, false)),  // idle
            (o(true, 0, 0, 4, 9), t(4, All, false)),  // nothing to stall: every free slot
            (o(true, 0, 0, 4, 2), t(2, All, false)),
            (o(true, 0, 1, 3, 5), t(3, All, false)),  // a chunked prompt alone: fill beside it
            (o(true, 2, 0, 2, 5), t(1, One, true)),   // one admitted at a time while others run
            (o(true, 2, 1, 1, 5), t(0, One, true)),   // its chunks first, one a step
            (o(true, 4, 0, 0, 5), t(0, One, true)),   // full
            (o(true, 3, 0, 1, 0), t(0, One, true)),
            (o(false, 0, 0, 4, 9), t(4, All, false)), // static: a batch when all are free
            (o(false, 1, 0, 3, 9), t(0, All, true)),  // and none until its longest ends
            (o(false, 0, 0, 4, 1), t(1, All, false)),
        ];
        for (occupancy, want) in table {
            assert_eq!(turn(occupancy), want, "{occupancy:?}");
        }
    }

    #[test]
    fn a_prompt_is_prefilled_whole_or_in_chunks_within_the_cache() {
        let shapes = |whole, chunk, positions| Shapes {
            buckets: vec![8, 16],
            extends: vec![4, 8],
            whole,
            chunk,
            positions,
        };
        let p = |bucket, len| Pass::Prefill { bucket, len };
        let e = |start, len, size| Pass::Extend { start, len, size };
        let none: Option<Vec<Pass>> = None;
        #[rustfmt::skip]
        let table = [
            // len, cached, shapes  ->  passes
            (5, 0, shapes(16, 8, 32), Some(vec![p(8, 5)])),           // whole, smallest bucket
            (16, 0, shapes(16, 8, 32), Some(vec![p(16, 16)])),
            (20, 0, shapes(16, 8, 32), Some(vec![p(8, 8), e(8, 8, 8), e(16, 4, 4)])), // past the buckets
            (6, 0, shapes(4, 4, 32), Some(vec![e(0, 4, 4), e(4, 2, 4)])),  // past a configured chunk: extend
            (12, 0, shapes(8, 8, 32), Some(vec![p(8, 8), e(8, 4, 4)])),    // from zeros unless a bucket fits
            (3, 0, shapes(4, 4, 32), Some(vec![p(8, 3)])),
            (10, 8, shapes(16, 8, 32), Some(vec![e(8, 2, 4)])),        // from a cached prefix
            (24, 16, shapes(16, 8, 32), Some(vec![e(16, 8, 8)])),
            (30, 24, shapes(16, 8, 32), Some(vec![e(24, 6, 8)])),      // 24 + 8 fits 32
            (30, 24, shapes(16, 8, 30), none.clone()),                 // 24 + 8 would not fit 30
            (28, 24, shapes(16, 8, 28), Some(vec![e(24, 4, 4)])),
            (8, 8, shapes(16, 8, 32), none.clone()),                   // nothing left to compute
        ];
        for (len, cached, s, want) in table {
            assert_eq!(
                passes(len, cached, &s),
                want,
                "len {len}, cached {cached}, {s:?}"
            );
        }
        // Without extend: whole within the buckets, nothing past them.
        let bare = Shapes {
            extends: vec![],
            ..shapes(16, 16, 32)
        };
        assert_eq!(passes(16, 0, &bare), Some(vec![p(16, 16)]));
        assert_eq!(passes(17, 0, &bare), None);
        // The first chunk of a fresh prompt with no bucket that holds it: extend from zeros.
        let no_small_bucket = Shapes {
            buckets: vec![],
            ..shapes(0, 8, 32)
        };
        assert_eq!(
            passes(12, 0, &no_small_bucket),
            Some(vec![e(0, 8, 8), e(8, 4, 4)])
        );
    }
}
