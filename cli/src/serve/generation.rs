//! Generation models in `serve`: a folder of JetStream's three exports (`prefill*.exported`,
//! `insert.exported`, `decode.exported`; optional `extend*.exported`, weights and
//! `generation.json`) served on a
//! `Generator`, and a request's fields as both protocols give them (Triton's generate extension
//! over HTTP, `ModelStreamInfer` over gRPC) read into one `GenerateRequest`.

use std::path::Path;
use std::time::{Duration, Instant};

use pjrt_actors::generate::{
    GenerateRequest, GenerationModel, Generator, GeneratorConfig, LATENCY_BOUNDS, Latencies,
    Sampling,
};
use pjrt_actors::{Client, Result};
use serde::Deserialize;

use crate::common::usage;

use super::error::ServeError;
use super::wire::generate_request::{Asked, MAX_STOP_TOKENS};

/// A generation model as served.
pub struct ServedGeneration {
    pub generator: Generator,
    /// The config's defaults: stop tokens, and the token limit when a request names none.
    pub stop_tokens: Vec<i32>,
    pub max_tokens: usize,
    /// Its tokenizer and chat template, when its folder has `tokenizer.json`.
    pub text: Option<std::sync::Arc<crate::text::TextModel>>,
}

/// `generation.json`: every key optional, an unknown one refused.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GenerationConfig {
    /// The cache's length in positions.
    max_sequence: Option<usize>,
    /// Tokens that end a sequence unless a request names its own.
    #[serde(default)]
    stop_tokens: Vec<i32>,
    /// The token limit when a request names none (default 64).
    max_tokens: Option<usize>,
    /// Requests waiting for a slot (default 1024).
    max_queued: Option<usize>,
    /// With extend exports: prompts past it are prefilled in chunks of it.
    prefill_chunk: Option<usize>,
    /// With extend exports: the prefix cache's bytes on the device (0: off; default 64 MiB).
    prefix_cache_bytes: Option<usize>,
}

impl GenerationConfig {
    /// Refuses a value that would break every request, naming its key and value: a limit of 0,
    /// a stop token outside the vocabulary (it could never be made).
    fn check(&self, name: &str, vocab: usize) -> Result<()> {
        let refuse = |key: &str, value: String, why: &str| {
            Err(usage(format!(
                "generation model `{name}`: generation.json: `{key}` {value} {why}"
            )))
        };
        for (key, value) in [
            ("max_tokens", self.max_tokens),
            ("max_queued", self.max_queued),
            ("max_sequence", self.max_sequence),
            ("prefill_chunk", self.prefill_chunk),
        ] {
            if value == Some(0) {
                return refuse(key, "0".into(), "would refuse or end every request");
            }
        }
        if self.stop_tokens.len() > MAX_STOP_TOKENS {
            return refuse(
                "stop_tokens",
                format!("has {} ids", self.stop_tokens.len()),
                &format!("past the bound of {MAX_STOP_TOKENS}"),
            );
        }
        if let Some(t) = (self.stop_tokens.iter()).find(|&&t| t < 0 || t as usize >= vocab) {
            return refuse(
                "stop_tokens",
                format!("has {t}"),
                &format!("outside the vocabulary of {vocab} tokens"),
            );
        }
        Ok(())
    }
}

/// Loads the generation model in `dir` as `name`.
pub fn load(client: &Client, name: &str, dir: &Path) -> Result<ServedGeneration> {
    // Each file read as the other models' are: a regular file only, opened without blocking.
    let what = format!("generation model `{name}`:");
    let read = |f: &Path| crate::files::read(f, &what);
    let exports = |prefix: &str| -> Result<Vec<Vec<u8>>> {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| usage(format!("{what} {}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                n.starts_with(prefix) && n.ends_with(".exported")
            })
            .collect();
        paths.sort();
        paths.iter().map(|p| read(p)).collect()
    };
    let (prefills, extends) = (exports("prefill")?, exports("extend")?);
    let prefills: Vec<&[u8]> = prefills.iter().map(|p| p.as_slice()).collect();
    let extends: Vec<&[u8]> = extends.iter().map(|p| p.as_slice()).collect();
    // An optional file is absent or a regular file: one of another kind (a folder, a FIFO) is
    // refused by `read`, never skipped as if absent.
    let present = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let weights = ["weights.safetensors", "weights.npz"]
        .iter()
        .map(|w| dir.join(w))
        .find(|p| present(p));
    let params = weights.as_deref().map(read).transpose()?;
    let config: GenerationConfig = match dir.join("generation.json") {
        p if present(&p) => serde_json::from_slice(&read(&p)?)
            .map_err(|e| usage(format!("generation model `{name}`: generation.json: {e}")))?,
        _ => GenerationConfig::default(),
    };
    let model = GenerationModel::load(
        client,
        &prefills,
        &read(&dir.join("insert.exported"))?,
        &read(&dir.join("decode.exported"))?,
        params.as_deref(),
    )?
    .with_extends(client, &extends, params.as_deref())?;
    config.check(name, model.vocab())?;
    let text = crate::text::TextModel::load(dir, model.vocab())
        .map_err(|e| usage(format!("generation model `{name}`: {e}")))?
        .map(std::sync::Arc::new);
    let generator = Generator::start(
        model,
        GeneratorConfig {
            max_queued: config.max_queued.unwrap_or(1024),
            max_sequence: config.max_sequence,
            prefill_chunk: config.prefill_chunk,
            prefix_cache_bytes: (config.prefix_cache_bytes)
                .unwrap_or(pjrt_actors::generate::DEFAULT_PREFIX_CACHE_BYTES),
            ..Default::default()
        },
    )
    .map_err(|e| match e {
        pjrt_actors::Error::InvalidArgument(why) => usage(why.replacen(
            "generation model:",
            &format!("generation model `{name}`:"),
            1,
        )),
        e => e,
    })?;
    Ok(ServedGeneration {
        generator,
        stop_tokens: config.stop_tokens,
        max_tokens: config.max_tokens.unwrap_or(64),
        text,
    })
}

impl ServedGeneration {
    /// Its text model, or the error every text route answers without one.
    pub fn text(
        &self,
        name: &str,
    ) -> std::result::Result<&std::sync::Arc<crate::text::TextModel>, ServeError> {
        self.text.as_ref().ok_or_else(|| {
            ServeError::Invalid(format!(
                "generation model `{name}` has no tokenizer: its folder has no tokenizer.json, so it takes and answers token ids only"
            ))
        })
    }

    /// The request for `prompt` as asked, ending by `limit` from now.
    pub fn request(
        &self,
        prompt: Vec<i32>,
        asked: &Asked,
        limit: Duration,
    ) -> std::result::Result<GenerateRequest, ServeError> {
        let sampling = match asked.temperature {
            None | Some(0.0) => Sampling::Greedy,
            Some(temperature) => Sampling::Random {
                temperature,
                top_k: asked.top_k.unwrap_or(0),
                top_p: asked.top_p.unwrap_or(1.0),
                seed: asked.seed.unwrap_or(0),
            },
        };
        Ok(GenerateRequest {
            prompt,
            max_tokens: asked.max_tokens.unwrap_or(self.max_tokens),
            sampling,
            stop_tokens: asked
                .stop
                .clone()
                .unwrap_or_else(|| self.stop_tokens.clone()),
            // The stop list is bounded as it is read (`stop_ids`); gRPC's is checked in its
            // reader the same way.
            deadline: Some(Instant::now() + limit),
            logprobs: None,
        })
    }
}

/// The generation models' counters in Prometheus text: one family per counter, a sample per
/// model.
pub fn render_metrics(
    models: &std::collections::BTreeMap<String, ServedGeneration>,
    page: &mut pjrt_actors::prometheus::Exposition,
) {
    use pjrt_actors::prometheus::Kind;
    if models.is_empty() {
        return;
    }
    let stats: Vec<_> = (models.iter())
        .map(|(name, m)| (name.as_str(), m.generator.stats()))
        .collect();
    type Get = fn(&pjrt_actors::generate::GeneratorStats) -> f64;
    let families: [(&str, &str, Get); 9] = [
        (
            "pjrt_actors_generate_requests_total",
            "Requests prefilled.",
            |s| s.requests as f64,
        ),
        (
            "pjrt_actors_generate_tokens_total",
            "Tokens generated.",
            |s| s.tokens as f64,
        ),
        (
            "pjrt_actors_generate_decode_steps_total",
            "Decode steps run.",
            |s| s.decode_steps as f64,
        ),
        (
            "pjrt_actors_generate_busy_slot_steps_total",
            "Busy slots summed over decode steps (over decode steps: mean slots busy).",
            |s| s.busy_slot_steps as f64,
        ),
        (
            "pjrt_actors_generate_cancelled_total",
            "Requests ended because their client went away or cancelled, running (each freeing its slot) or waiting.",
            |s| s.cancelled as f64,
        ),
        (
            "pjrt_actors_generate_prefill_chunks_total",
            "Extend runs: chunks of long prompts, and prompts' rests after a cached prefix.",
            |s| s.chunks as f64,
        ),
        (
            "pjrt_actors_generate_prefix_hits_total",
            "Prompts that started from a cached prefix.",
            |s| s.prefix_hits as f64,
        ),
        (
            "pjrt_actors_generate_prefix_cached_tokens_total",
            "Prompt tokens cached prefixes gave, not computed again.",
            |s| s.prefix_tokens as f64,
        ),
        (
            "pjrt_actors_generate_prefix_evictions_total",
            "Prefix cache entries evicted for others.",
            |s| s.prefix_evictions as f64,
        ),
    ];
    for (family, help, get) in families {
        page.family(family, Kind::Counter, help);
        for (model, s) in &stats {
            page.sample(family, &[("model", model)], get(s));
        }
    }
    type Latency = fn(&pjrt_actors::generate::GeneratorStats) -> Latencies;
    let histograms: [(&str, &str, Latency); 2] = [
        (
            "pjrt_actors_generate_first_token_seconds",
            "Time from a request's arrival at the engine to its first token.",
            |s| s.first_token,
        ),
        (
            "pjrt_actors_generate_inter_token_seconds",
            "Time between a sequence's consecutive tokens.",
            |s| s.inter_token,
        ),
    ];
    for (family, help, get) in histograms {
        page.family(family, Kind::Histogram, help);
        for (model, s) in &stats {
            let h = get(s);
            let (sum, count) = (h.sum.as_secs_f64(), h.count());
            page.histogram(
                family,
                &[("model", model)],
                &LATENCY_BOUNDS,
                h.per_bucket,
                count,
                sum,
            );
        }
    }
    type Now = fn(&pjrt_actors::generate::GeneratorStats) -> u64;
    let gauges: [(&str, &str, Now); 4] = [
        (
            "pjrt_actors_generate_running",
            "Sequences in decode slots now.",
            |s| s.running,
        ),
        (
            "pjrt_actors_generate_waiting",
            "Requests waiting for a decode slot now.",
            |s| s.waiting,
        ),
        (
            "pjrt_actors_generate_prefix_cache_bytes",
            "Bytes the prefix cache holds on the device now.",
            |s| s.prefix_bytes,
        ),
        (
            "pjrt_actors_generate_prefix_cache_entries",
            "Prompts' entries the prefix cache holds now.",
            |s| s.prefix_entries,
        ),
    ];
    for (family, help, get) in gauges {
        page.family(family, Kind::Gauge, help);
        for (model, s) in &stats {
            page.sample(family, &[("model", model)], get(s) as f64);
        }
    }
}
