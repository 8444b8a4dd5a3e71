//! A generation model: the three exports JetStream splits generation into (prefill per prompt
//! bucket, insert, decode), and optionally a fourth that continues a sequence (extend per chunk
//! size), loaded on one device with their weights, and their signatures read and checked
//! against each other once, so the engine's loop only runs them.

use crate::exported_model::ExportedModel;
use crate::host_data::HostArray;
use crate::{Array, ArrayType, Client, Device, ElementType, Error, Result};

fn refused(why: String) -> Error {
    Error::InvalidArgument(format!("generation model: {why}"))
}

/// The three exports of one model, checked to fit together:
/// - `prefill(params, tokens: int32[1, P], true_length: int32[]) -> (entry, logits: f32[1, V])`,
///   one per prompt bucket `P`;
/// - `insert(cache, entry, slot: int32[]) -> cache`;
/// - `decode(params, cache, tokens: int32[S], positions: int32[S]) -> (cache, logits: f32[S, V])`.
///
/// `entry` and `cache` may be any pytrees of arrays; `params` come from a weights file. With
/// [`with_extends`](Self::with_extends), also
/// `extend(params, entry, tokens: int32[1, C], start: int32[], true_length: int32[]) -> (entry,
/// logits: f32[1, V])`, one per chunk size `C`: chunked prefill and the prefix cache.
pub struct GenerationModel {
    /// By prompt bucket, smallest first.
    pub(super) prefills: Vec<(usize, ExportedModel)>,
    pub(super) insert: ExportedModel,
    pub(super) decode: ExportedModel,
    /// Decode slots (`S`) and vocabulary (`V`).
    pub(super) slots: usize,
    pub(super) vocab: usize,
    /// The cache's leaves, as decode takes them.
    pub(super) cache_types: Vec<ArrayType>,
    /// One sequence's cache entry's leaves, as prefill returns them.
    pub(super) entry_types: Vec<ArrayType>,
    /// Whether insert and decode donate the cache (exported with `donate_argnums`).
    pub(super) donates: (bool, bool),
    /// By chunk size, smallest first; empty without extend.
    pub(super) extends: Vec<(usize, ExportedModel)>,
    /// Whether extend donates the entry (else each chunk copies it).
    pub(super) extend_donates: bool,
    pub(super) device: Device,
}

fn types(model: &ExportedModel, what: &str, outputs: bool) -> Result<Vec<ArrayType>> {
    let list = match outputs {
        true => model.output_types(),
        false => model.free_input_types(),
    };
    list.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| {
        refused(format!(
            "{what} has an argument or result of a dtype not known"
        ))
    })
}

fn expect(what: &str, t: &ArrayType, dtype: ElementType, dims: &[i64]) -> Result<()> {
    match t.dtype == dtype && t.dims == dims {
        true => Ok(()),
        false => Err(refused(format!(
            "{what} is {}{:?}; the engine needs {dtype}{dims:?}",
            t.dtype, t.dims
        ))),
    }
}

impl GenerationModel {
    /// Loads the exports (`.exported` bytes: one prefill per prompt bucket, insert, decode) on
    /// `client`'s first device, prefill and decode with `params` (a weights file's bytes, as
    /// [`ExportedModel::load_params`] reads them) when given, and checks that they fit.
    pub fn load(
        client: &Client,
        prefills: &[&[u8]],
        insert: &[u8],
        decode: &[u8],
        params: Option<&[u8]>,
    ) -> Result<GenerationModel> {
        // Without weights, decode's and prefill's first argument is left to each call, and
        // every signature check below fails on it: say so, not only which check failed.
        Self::load_checked(client, prefills, insert, decode, params).map_err(|e| match e {
            Error::InvalidArgument(why) if params.is_none() && why.starts_with("generation model:") => {
                Error::InvalidArgument(format!(
                    "{why} (no weights were given, so prefill's and decode's weights are left as arguments: give the weights file, `--params` or a served folder's weights.safetensors)"
                ))
            }
            e => e,
        })
    }

    fn load_checked(
        client: &Client,
        prefills: &[&[u8]],
        insert: &[u8],
        decode: &[u8],
        params: Option<&[u8]>,
    ) -> Result<GenerationModel> {
        let with_params = |bytes: &[u8]| -> Result<ExportedModel> {
            let mut m = client.load_exported(bytes)?;
            if let Some(p) = params {
                m.load_params(p)?;
            }
            Ok(m)
        };
        if prefills.is_empty() {
            return Err(refused("no prefill export given".into()));
        }
        let decode = with_params(decode)?;
        let insert = client.load_exported(insert)?;
        let device = (decode.device().cloned())
            .ok_or_else(|| refused("decode is an SPMD export; one device is served".into()))?;
        let d_in = types(&decode, "decode", false)?;
        let d_out = types(&decode, "decode", true)?;
        if d_in.len() < 3 {
            return Err(refused(format!(
                "decode takes {} arguments besides its weights ({}); it takes (cache, tokens, positions)",
                d_in.len(),
                decode.free_inputs().join(", ")
            )));
        }
        let cache_types = d_in[..d_in.len() - 2].to_vec();
        let slots = (d_in[d_in.len() - 2].dims.first().copied()).unwrap_or(0) as usize;
        expect(
            "decode's tokens",
            &d_in[d_in.len() - 2],
            ElementType::S32,
            &[slots as i64],
        )?;
        expect(
            "decode's positions",
            &d_in[d_in.len() - 1],
            ElementType::S32,
            &[slots as i64],
        )?;
        let vocab = (d_out.last().and_then(|l| l.dims.get(1)).copied()).unwrap_or(0) as usize;
        if d_out.len() != cache_types.len() + 1 || d_out[..cache_types.len()] != cache_types[..] {
            return Err(refused(
                "decode returns (cache, logits), the cache as it takes it".into(),
            ));
        }
        expect(
            "decode's logits",
            &d_out[cache_types.len()],
            ElementType::F32,
            &[slots as i64, vocab as i64],
        )?;
        let mut loaded = Vec::new();
        let mut entry_types: Option<Vec<ArrayType>> = None;
        for bytes in prefills {
            let p = with_params(bytes)?;
            let (i, o) = (types(&p, "prefill", false)?, types(&p, "prefill", true)?);
            let bucket = match i.as_slice() {
                [tokens, length] if tokens.dims.len() == 2 => {
                    let bucket = tokens.dims[1];
                    expect("prefill's tokens", tokens, ElementType::S32, &[1, bucket])?;
                    expect("prefill's true_length", length, ElementType::S32, &[])?;
                    bucket as usize
                }
                _ => {
                    return Err(refused(format!(
                        "prefill takes (tokens, true_length) besides its weights; it takes {}",
                        p.free_inputs().join(", ")
                    )));
                }
            };
            let Some((logits, entry)) = o.split_last() else {
                return Err(refused("prefill returns (entry, logits)".into()));
            };
            expect(
                "prefill's logits",
                logits,
                ElementType::F32,
                &[1, vocab as i64],
            )?;
            if entry_types.get_or_insert_with(|| entry.to_vec()) != entry {
                return Err(refused("the prefill buckets' entries differ".into()));
            }
            if p.device() != Some(&device) {
                return Err(refused(
                    "prefill and decode run on different devices".into(),
                ));
            }
            loaded.push((bucket, p));
        }
        loaded.sort_by_key(|(b, _)| *b);
        let entry = entry_types.expect("one prefill at least");
        let i_in = types(&insert, "insert", false)?;
        let mut want = cache_types.clone();
        want.extend(entry.iter().cloned());
        want.push(ArrayType {
            dtype: ElementType::S32,
            dims: Vec::new(),
        });
        if i_in != want || types(&insert, "insert", true)? != cache_types {
            return Err(refused(
                "insert takes (cache, entry, slot) and returns the cache, as decode and prefill shape them"
                    .into(),
            ));
        }
        let all_cache = |m: &ExportedModel| {
            let d = m.donatable_inputs();
            (0..cache_types.len()).all(|k| d.contains(&k))
        };
        Ok(GenerationModel {
            donates: (all_cache(&insert), all_cache(&decode)),
            extends: Vec::new(),
            extend_donates: false,
            prefills: loaded,
            insert,
            decode,
            slots,
            vocab,
            cache_types,
            entry_types: entry,
            device,
        })
    }

    /// Adds the `extend` exports (`.exported` bytes, one per chunk size), with `params` as
    /// [`load`](Self::load) takes them, checked against the entry prefill makes and the
    /// vocabulary: `extend(params, entry, tokens: int32[1, C], start: int32[], true_length:
    /// int32[]) -> (entry, logits: f32[1, V])`, best exported with `donate_argnums=1`. A model
    /// with them prefills long prompts in chunks and keeps a prefix cache
    /// ([`GeneratorConfig`](super::GeneratorConfig)); without them, prompts fit a bucket.
    pub fn with_extends(
        mut self,
        client: &Client,
        extends: &[&[u8]],
        params: Option<&[u8]>,
    ) -> Result<GenerationModel> {
        let mut donates = true;
        for bytes in extends {
            let mut x = client.load_exported(bytes)?;
            if let Some(p) = params {
                x.load_params(p)?;
            }
            let (i, o) = (types(&x, "extend", false)?, types(&x, "extend", true)?);
            let n = self.entry_types.len();
            let shape = || {
                refused(format!(
                    "extend takes (entry, tokens, start, true_length) besides its weights, the entry as prefill returns it; it takes {}",
                    x.free_inputs().join(", ")
                ))
            };
            if i.len() != n + 3 || i[..n] != self.entry_types[..] {
                return Err(shape());
            }
            let chunk = (i[n].dims.get(1).copied()).ok_or_else(shape)?;
            expect("extend's tokens", &i[n], ElementType::S32, &[1, chunk])?;
            expect("extend's start", &i[n + 1], ElementType::S32, &[])?;
            expect("extend's true_length", &i[n + 2], ElementType::S32, &[])?;
            if o.len() != n + 1 || o[..n] != self.entry_types[..] {
                return Err(refused(
                    "extend returns (entry, logits), the entry as prefill returns it".into(),
                ));
            }
            expect(
                "extend's logits",
                &o[n],
                ElementType::F32,
                &[1, self.vocab as i64],
            )?;
            if x.device() != Some(&self.device) {
                return Err(refused("extend and decode run on different devices".into()));
            }
            if chunk < 1 || self.extends.iter().any(|(c, _)| *c == chunk as usize) {
                return Err(refused(format!(
                    "two extend exports have chunk size {chunk}"
                )));
            }
            let d = x.donatable_inputs();
            donates &= (0..n).all(|k| d.contains(&k));
            self.extends.push((chunk as usize, x));
        }
        self.extends.sort_by_key(|(c, _)| *c);
        self.extend_donates = donates && !self.extends.is_empty();
        Ok(self)
    }

    /// The extend chunk sizes, smallest first (empty without extend).
    pub fn extend_sizes(&self) -> Vec<usize> {
        self.extends.iter().map(|(c, _)| *c).collect()
    }

    /// One sequence's cache entry in bytes: what the prefix cache holds per prompt.
    pub fn entry_bytes(&self) -> usize {
        (self.entry_types.iter())
            .map(|t| pjrt_actors_core::dtype::byte_size(t.dtype, &t.dims).unwrap_or(0))
            .sum()
    }

    /// The cache's length in positions, as its shapes say it: the first axis after the slot
    /// axis (the one insert adds to an entry) that holds the largest prompt, as JetStream's
    /// exports (`[.., slots, positions, ..]`) and ours (head-major, `[.., slots, heads,
    /// positions, ..]`) lay a cache out; else the one length of an entry's axes that holds it. `Err` lists the candidates where the shapes leave it open.
    pub fn cache_length(&self) -> std::result::Result<usize, Vec<usize>> {
        let largest = self.buckets().last().copied().unwrap_or(0);
        let mut candidates: Vec<usize> = (self.entry_types.iter())
            .flat_map(|t| t.dims.iter().map(|d| *d as usize))
            .filter(|d| *d >= largest)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        // The first axis after the slot axis that holds the largest prompt: positions right
        // after slots (`[.., slots, positions, ..]`), or after the heads (head-major,
        // `[.., slots, heads, positions, ..]`).
        let after_slot_axis = |(cache, entry): (&ArrayType, &ArrayType)| {
            let c = &cache.dims;
            (0..c.len()).find_map(|axis| {
                let mut without = c.clone();
                let slots = without.remove(axis);
                (slots as usize == self.slots && without == entry.dims)
                    .then(|| (c[axis + 1..].iter()).find(|d| **d as usize >= largest))
                    .flatten()
                    .map(|d| *d as usize)
            })
        };
        let by_layout: Option<Vec<usize>> = (self.cache_types.iter())
            .zip(&self.entry_types)
            .map(after_slot_axis)
            .collect();
        match by_layout {
            Some(lengths)
                if !lengths.is_empty()
                    && lengths.iter().all(|l| *l == lengths[0])
                    && candidates.contains(&lengths[0]) =>
            {
                Ok(lengths[0])
            }
            _ if candidates.len() == 1 => Ok(candidates[0]),
            _ => Err(candidates),
        }
    }

    /// The positions a sequence may use: `asked` (a config's `max_sequence`) where it is within
    /// the cache, else the cache's length; refused past the cache (XLA would clamp the write
    /// index, and every later token be wrong), at 0, or where the shapes leave the length open
    /// and none is asked.
    pub fn max_sequence(&self, asked: Option<usize>) -> Result<usize> {
        match (asked, self.cache_length()) {
            (Some(0), _) => Err(refused("max_sequence is 0".into())),
            (Some(m), Ok(t)) if m > t => Err(refused(format!(
                "max_sequence {m} is past the cache, which holds {t} positions (decode's cache shapes {})",
                self.cache_shapes()
            ))),
            (Some(m), Err(c)) if c.last().is_none_or(|t| m > *t) => Err(refused(format!(
                "max_sequence {m} is past every axis of the cache entry that could hold positions ({c:?})"
            ))),
            (Some(m), _) => Ok(m),
            (None, Ok(t)) => Ok(t),
            (None, Err(c)) => Err(refused(format!(
                "the cache's length cannot be read from its shapes ({}; an entry axis of {c:?} could hold the positions): give max_sequence",
                self.cache_shapes()
            ))),
        }
    }

    fn cache_shapes(&self) -> String {
        let shapes: Vec<String> = (self.cache_types.iter())
            .map(|t| format!("{}{:?}", t.dtype, t.dims))
            .collect();
        shapes.join(", ")
    }

    /// Decode slots: how many sequences one step runs.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The vocabulary: logits per token.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The prompt buckets, smallest first: a prompt runs in the smallest that holds it.
    pub fn buckets(&self) -> Vec<usize> {
        self.prefills.iter().map(|(b, _)| *b).collect()
    }

    /// Whether insert and decode donate the cache (else each step copies it).
    pub fn donates_cache(&self) -> (bool, bool) {
        self.donates
    }

    /// A zero cache on the device.
    pub(super) fn empty_cache(&self) -> Result<Vec<Array>> {
        self.zeros(&self.cache_types)
    }

    /// A zero cache entry on the device: where extend starts a prompt no prefill holds.
    pub(super) fn empty_entry(&self) -> Result<Vec<Array>> {
        self.zeros(&self.entry_types)
    }

    fn zeros(&self, types: &[ArrayType]) -> Result<Vec<Array>> {
        (types.iter())
            .map(|t| {
                let bytes = pjrt_actors_core::dtype::byte_size(t.dtype, &t.dims)?;
                self.device.put_array(&HostArray {
                    dtype: t.dtype,
                    dims: t.dims.clone(),
                    bytes: vec![0; bytes],
                })
            })
            .collect()
    }
}
