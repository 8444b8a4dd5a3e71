//! `pjrt-actors generate`: token-by-token generation from JAX's prefill, insert and decode
//! exports, printing each token id as it is made (or, with `--json`, one object at the end).

use std::path::{Path, PathBuf};

use pjrt_actors::Result;
use pjrt_actors::generate::{
    GenerateRequest, GenerationModel, Generator, GeneratorConfig, Sampling, TokenEvent,
};

use crate::common::{GlobalArgs, open, print_line, usage};

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// A prefill export, `prefill(params, tokens: int32[1, P], true_length) -> (entry, logits)`;
    /// repeat it for several prompt buckets `P`.
    #[arg(long = "prefill", required = true)]
    prefill: Vec<PathBuf>,
    /// The insert export, `insert(cache, entry, slot) -> cache` (cache donated).
    #[arg(long)]
    insert: PathBuf,
    /// The decode export, `decode(params, cache, tokens: int32[S], positions: int32[S]) ->
    /// (cache, logits)` (cache donated).
    #[arg(long)]
    decode: PathBuf,
    /// Weights for prefill and decode (`.safetensors` or `.npz`), named by path.
    #[arg(long)]
    params: Option<PathBuf>,
    /// The prompt's token ids: `5,6,7`.
    #[arg(long, value_delimiter = ',', required = true)]
    prompt: Vec<i32>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 16)]
    max_tokens: usize,
    /// Token ids that end the sequence: `0` or `0,2`.
    #[arg(long, value_delimiter = ',')]
    stop: Vec<i32>,
    /// Sample at this temperature (greedy when not given).
    #[arg(long)]
    temperature: Option<f32>,
    /// With `--temperature`: keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// With `--temperature`: keep the fewest most likely tokens whose probability reaches P.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// With `--temperature`: the seed (the same seed, the same tokens).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The cache's length in positions: generation stops before writing past it.
    #[arg(long)]
    max_sequence: Option<usize>,
    /// Print `{"tokens": [...], "finish": "..."}` at the end instead of each token as it comes.
    #[arg(long)]
    json: bool,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| usage(format!("{what} {}: {e}", path.display())))
}

pub fn generate(cli: &GlobalArgs, args: &GenerateArgs) -> Result<()> {
    let sampling = match args.temperature {
        None => Sampling::Greedy,
        Some(temperature) => Sampling::Random {
            temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            seed: args.seed,
        },
    };
    let client = open(cli)?;
    let prefills = (args.prefill.iter())
        .map(|p| read(p, "prefill"))
        .collect::<Result<Vec<_>>>()?;
    let prefills: Vec<&[u8]> = prefills.iter().map(|p| p.as_slice()).collect();
    let params = args
        .params
        .as_deref()
        .map(|p| read(p, "params"))
        .transpose()?;
    let model = GenerationModel::load(
        &client,
        &prefills,
        &read(&args.insert, "insert")?,
        &read(&args.decode, "decode")?,
        params.as_deref(),
    )?;
    let config = GeneratorConfig {
        max_sequence: args.max_sequence,
        ..Default::default()
    };
    let generator = Generator::start(model, config)?;
    let mut stream = generator.submit(GenerateRequest {
        prompt: args.prompt.clone(),
        max_tokens: args.max_tokens,
        sampling,
        stop_tokens: args.stop.clone(),
        deadline: None,
    })?;
    let mut tokens = Vec::new();
    while let Some(event) = stream.next_blocking() {
        match event? {
            TokenEvent::Token(t) => {
                if !args.json {
                    print_line(format_args!("{t}"));
                }
                tokens.push(t);
            }
            TokenEvent::Done(finish) => {
                if args.json {
                    let line = serde_json::json!({"tokens": tokens, "finish": finish.as_str()});
                    print_line(format_args!("{line}"));
                }
                break;
            }
        }
    }
    Ok(())
}
