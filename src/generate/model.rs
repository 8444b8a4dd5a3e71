//! A generation model: the three exports JetStream splits generation into (prefill per prompt
//! bucket, insert, decode), loaded on one device with their weights, and their signatures read
//! and checked against each other once, so the engine's loop only runs them.

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
/// `entry` and `cache` may be any pytrees of arrays; `params` come from a weights file.
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
    /// Whether insert and decode donate the cache (exported with `donate_argnums`).
    pub(super) donates: (bool, bool),
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
            prefills: loaded,
            insert,
            decode,
            slots,
            vocab,
            cache_types,
            device,
        })
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
        (self.cache_types.iter())
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
