//! The prefix cache: cache entries of prompts already prefilled, kept on the device and found
//! again by a new prompt that starts the same way. Entries are indexed at every chunk boundary
//! by a hash chain of the chunks' token ids; a hash only finds a candidate, and the tokens are
//! compared before it is used. Bounded in bytes, least recently used evicted first.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// The hash of a prompt's first `k` chunks for every `k` from 1 to `count`: each chains the one
/// before it with its chunk's ids.
fn chain(tokens: &[i32], chunk: usize, count: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(count);
    let mut previous = 0u64;
    for piece in tokens.chunks_exact(chunk).take(count) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        previous.hash(&mut h);
        piece.hash(&mut h);
        previous = h.finish();
        out.push(previous);
    }
    out
}

struct Entry<V> {
    /// The prompt's full chunks this entry holds (its positions `0..tokens.len()`).
    tokens: Vec<i32>,
    value: V,
    bytes: usize,
    /// Its place in `recency`.
    used: u64,
}

/// What a prompt found: the cached value and how many of its tokens it holds.
pub(super) struct Hit<'a, V> {
    pub value: &'a V,
    pub tokens: usize,
}

/// Prompt prefixes' values (a cache entry's arrays), by chunk-aligned prefix.
pub(super) struct PrefixCache<V> {
    chunk: usize,
    budget: usize,
    bytes: usize,
    entries: HashMap<u64, Entry<V>>,
    /// A chunk boundary's chain hash -> the entry inserted last that holds that prefix.
    index: HashMap<u64, u64>,
    /// Use order -> entry id: the first is the least recently used.
    recency: BTreeMap<u64, u64>,
    next_id: u64,
    clock: u64,
}

impl<V> PrefixCache<V> {
    /// A cache of prefixes cut at multiples of `chunk`, holding at most `budget` bytes.
    pub(super) fn new(chunk: usize, budget: usize) -> Self {
        PrefixCache {
            chunk: chunk.max(1),
            budget,
            bytes: 0,
            entries: HashMap::new(),
            index: HashMap::new(),
            recency: BTreeMap::new(),
            next_id: 0,
            clock: 0,
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    fn touch(&mut self, id: u64) {
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(&id) {
            self.recency.remove(&e.used);
            e.used = self.clock;
            self.recency.insert(self.clock, id);
        }
    }

    /// The longest cached prefix of `prompt` that leaves at least one token to compute (its
    /// logits start the answer), marked used.
    pub(super) fn longest(&mut self, prompt: &[i32]) -> Option<Hit<'_, V>> {
        let most = prompt.len().saturating_sub(1) / self.chunk;
        let hashes = chain(prompt, self.chunk, most);
        let found = (1..=hashes.len()).rev().find_map(|k| {
            let id = *self.index.get(&hashes[k - 1])?;
            let held = &self.entries.get(&id)?.tokens;
            let n = k * self.chunk;
            (held.len() >= n && held[..n] == prompt[..n]).then_some((id, n))
        });
        let (id, tokens) = found?;
        self.touch(id);
        Some(Hit {
            value: &self.entries[&id].value,
            tokens,
        })
    }

    /// Keeps `value`, the entry of `prompt` prefilled (`bytes` on the device), for its full
    /// chunks, unless an entry already holds them or it alone is over the budget. `Ok`: kept,
    /// with the values evicted for it (least recently used first); `Err`: not kept. What
    /// leaves is the caller's to drop where it may.
    pub(super) fn insert(&mut self, prompt: &[i32], value: V, bytes: usize) -> Result<Vec<V>, V> {
        let count = prompt.len() / self.chunk;
        if count == 0 || bytes > self.budget {
            return Err(value);
        }
        let hashes = chain(prompt, self.chunk, count);
        let n = count * self.chunk;
        let held = self.index.get(&hashes[count - 1]).copied().filter(|id| {
            let t = &self.entries[id].tokens;
            t.len() >= n && t[..n] == prompt[..n]
        });
        if let Some(id) = held {
            self.touch(id);
            return Err(value);
        }
        let mut evicted = Vec::new();
        while self.bytes + bytes > self.budget {
            let Some((_, id)) = self.recency.pop_first() else {
                break;
            };
            evicted.push(self.remove(id));
        }
        let id = self.next_id;
        self.next_id += 1;
        for h in hashes {
            self.index.insert(h, id);
        }
        self.clock += 1;
        self.recency.insert(self.clock, id);
        self.bytes += bytes;
        self.entries.insert(
            id,
            Entry {
                tokens: prompt[..n].to_vec(),
                value,
                bytes,
                used: self.clock,
            },
        );
        Ok(evicted)
    }

    /// Takes entry `id` out: its bytes, and the index's boundaries that lead to it.
    fn remove(&mut self, id: u64) -> V {
        let e = self
            .entries
            .remove(&id)
            .expect("an entry in recency is held");
        self.bytes -= e.bytes;
        for h in chain(&e.tokens, self.chunk, e.tokens.len() / self.chunk) {
            if self.index.get(&h) == Some(&id) {
                self.index.remove(&h);
            }
        }
        e.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(first: i32, len: usize) -> Vec<i32> {
        (0..len as i32).map(|k| first + k).collect()
    }

    #[test]
    fn a_prompt_finds_its_longest_cached_chunk_aligned_prefix() {
        let mut c = PrefixCache::new(4, 1000);
        assert_eq!(c.insert(&prompt(1, 10), "a", 100), Ok(vec![]));
        fn hit(c: &mut PrefixCache<&'static str>, p: &[i32]) -> Option<(&'static str, usize)> {
            c.longest(p).map(|h| (*h.value, h.tokens))
        }
        // a holds 8 tokens (two full chunks); a prompt keeps one token to compute.
        assert_eq!(hit(&mut c, &prompt(1, 20)), Some(("a", 8)));
        assert_eq!(hit(&mut c, &prompt(1, 9)), Some(("a", 8)));
        assert_eq!(hit(&mut c, &prompt(1, 8)), Some(("a", 4)));
        assert_eq!(hit(&mut c, &prompt(1, 4)), None);
        // Diverging in the second chunk: the first is still shared.
        let mut diverged = prompt(1, 12);
        diverged[5] = 99;
        assert_eq!(hit(&mut c, &diverged), Some(("a", 4)));
        assert_eq!(hit(&mut c, &prompt(2, 12)), None);
        // A prefix already held is not kept twice; a shorter prompt than a chunk never.
        assert_eq!(c.insert(&prompt(1, 9), "b", 100), Err("b"));
        assert_eq!(c.insert(&prompt(1, 3), "c", 100), Err("c"));
        assert_eq!((c.len(), c.bytes()), (1, 100));
        // A longer one is, and takes the boundaries over.
        assert_eq!(c.insert(&prompt(1, 16), "d", 100), Ok(vec![]));
        assert_eq!(hit(&mut c, &prompt(1, 20)), Some(("d", 16)));
    }

    #[test]
    fn a_hash_is_never_taken_for_the_tokens() {
        let mut c = PrefixCache::new(4, 1000);
        assert!(c.insert(&prompt(1, 8), "a", 100).is_ok());
        // Point the second boundary of another prompt at a's entry, as a colliding hash would.
        let other = prompt(50, 9);
        let h = chain(&other, 4, 2)[1];
        let id = c.index[&chain(&prompt(1, 8), 4, 2)[1]];
        c.index.insert(h, id);
        assert!(c.longest(&other).is_none(), "the tokens differ: no hit");
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used_first() {
        let mut c = PrefixCache::new(4, 300);
        for (k, name) in ["a", "b", "c"].into_iter().enumerate() {
            assert_eq!(c.insert(&prompt(100 * k as i32, 8), name, 100), Ok(vec![]));
        }
        assert_eq!(c.bytes(), 300);
        // a used: b is now the least recent, and goes for d.
        assert!(c.longest(&prompt(0, 9)).is_some());
        assert_eq!(c.insert(&prompt(300, 8), "d", 100), Ok(vec!["b"]));
        assert!(
            c.longest(&prompt(100, 9)).is_none(),
            "b's boundaries left the index"
        );
        assert!(c.longest(&prompt(0, 9)).is_some());
        // One bigger than two entries evicts two, oldest first: c, then d (a was used last).
        assert_eq!(c.insert(&prompt(400, 8), "e", 200), Ok(vec!["c", "d"]));
        assert_eq!((c.len(), c.bytes()), (2, 300));
        // Over the whole budget alone: not kept, nothing evicted.
        assert_eq!(c.insert(&prompt(500, 8), "f", 301), Err("f"));
        assert_eq!(c.len(), 2);
        assert!(c.longest(&prompt(0, 9)).is_some() && c.longest(&prompt(400, 9)).is_some());
    }
}
