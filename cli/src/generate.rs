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
    /// A model folder, as `serve --generation` takes one: `prefill*.exported`,
    /// `insert.exported`, `decode.exported`, `extend*.exported` if any, weights,
    /// `generation.json` (its stop tokens, token
    /// limit and cache length are the defaults) and, for `--text` and `--chat`,
    /// `tokenizer.json` with `tokenizer_config.json`. In place of the file flags below.
    #[arg(long, conflicts_with_all = ["prefill", "insert", "decode", "params", "extend"])]
    model: Option<PathBuf>,
    /// A prefill export, `prefill(params, tokens: int32[1, P], true_length) -> (entry, logits)`;
    /// repeat it for several prompt buckets `P`.
    #[arg(long = "prefill", required_unless_present = "model")]
    prefill: Vec<PathBuf>,
    /// The insert export, `insert(cache, entry, slot) -> cache` (cache donated).
    #[arg(long, required_unless_present = "model")]
    insert: Option<PathBuf>,
    /// The decode export, `decode(params, cache, tokens: int32[S], positions: int32[S]) ->
    /// (cache, logits)` (cache donated).
    #[arg(long, required_unless_present = "model")]
    decode: Option<PathBuf>,
    /// An extend export, `extend(params, entry, tokens: int32[1, C], start, true_length) ->
    /// (entry, logits)` (entry donated): prompts past the buckets are prefilled in chunks;
    /// repeat it for several chunk sizes `C`.
    #[arg(long = "extend")]
    extend: Vec<PathBuf>,
    /// With `--extend`: prefill prompts longer than this in chunks of it.
    #[arg(long, conflicts_with = "model")]
    prefill_chunk: Option<usize>,
    /// Weights for prefill and decode (`.safetensors` or `.npz`), named by path.
    #[arg(long)]
    params: Option<PathBuf>,
    /// The prompt's token ids: `5,6,7`.
    #[arg(long, value_delimiter = ',', required_unless_present_any = ["text", "chat"],
        conflicts_with_all = ["text", "chat"])]
    prompt: Vec<i32>,
    /// The prompt as text, encoded by the model folder's tokenizer; the answer is printed as
    /// text as it is made.
    #[arg(long, requires = "model", conflicts_with = "chat")]
    text: Option<String>,
    /// One user message, rendered by the model folder's chat template; the answer is printed
    /// as text as it is made.
    #[arg(long, requires = "model")]
    chat: Option<String>,
    /// Most tokens to generate [default: generation.json's, else 16].
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Token ids that end the sequence: `0` or `0,2` [default: generation.json's].
    #[arg(long, value_delimiter = ',')]
    stop: Option<Vec<i32>>,
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
    /// The cache's length in positions: generation stops before writing past it [default:
    /// generation.json's, else the decode export's cache length].
    #[arg(long, conflicts_with = "model")]
    max_sequence: Option<usize>,
    /// Print `{"tokens": [...], "finish": "..."}` (and `"text"` with a tokenizer) at the end
    /// instead of each token as it comes.
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
    if let Some(dir) = &args.model {
        return from_folder(&client, dir, args);
    }
    let prefills = (args.prefill.iter())
        .map(|p| read(p, "prefill"))
        .collect::<Result<Vec<_>>>()?;
    let prefills: Vec<&[u8]> = prefills.iter().map(|p| p.as_slice()).collect();
    let params = args
        .params
        .as_deref()
        .map(|p| read(p, "params"))
        .transpose()?;
    let (insert, decode) = (args.insert.as_deref(), args.decode.as_deref());
    let model = GenerationModel::load(
        &client,
        &prefills,
        &read(insert.expect("clap requires it"), "insert")?,
        &read(decode.expect("clap requires it"), "decode")?,
        params.as_deref(),
    )?;
    let extends = (args.extend.iter())
        .map(|p| read(p, "extend"))
        .collect::<Result<Vec<_>>>()?;
    let extends: Vec<&[u8]> = extends.iter().map(|e| e.as_slice()).collect();
    let model = model.with_extends(&client, &extends, params.as_deref())?;
    let config = GeneratorConfig {
        max_sequence: args.max_sequence,
        prefill_chunk: args.prefill_chunk,
        ..Default::default()
    };
    let generator = Generator::start(model, config)?;
    let stream = generator.submit(GenerateRequest {
        prompt: args.prompt.clone(),
        max_tokens: args.max_tokens.unwrap_or(16),
        sampling,
        stop_tokens: args.stop.clone().unwrap_or_default(),
        deadline: None,
        logprobs: None,
    })?;
    print_tokens(stream, None, args.json)
}

/// Generates from a model folder, as `serve` loads one.
fn from_folder(client: &pjrt_actors::Client, dir: &Path, args: &GenerateArgs) -> Result<()> {
    use crate::serve::wire::generate_request::Asked;
    let name = dir
        .file_name()
        .map_or("model".into(), |n| n.to_string_lossy());
    let g = crate::serve::generation::load(client, &name, dir)?;
    let needs_text = |what: &str| {
        g.text.as_deref().ok_or_else(|| {
            usage(format!(
                "{what} needs the model folder's tokenizer.json; {} has none",
                dir.display()
            ))
        })
    };
    let prompt = match (&args.text, &args.chat) {
        (Some(text), _) => needs_text("--text")?.encode(text, true)?,
        (_, Some(message)) => {
            let message = crate::text::Message {
                role: "user".into(),
                content: message.clone(),
            };
            (needs_text("--chat")?.chat_prompt(&[message])).map_err(usage)?
        }
        _ => args.prompt.clone(),
    };
    let asked = Asked {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        top_k: Some(args.top_k),
        top_p: Some(args.top_p),
        seed: Some(args.seed),
        stop: args.stop.clone(),
        stream: None,
    };
    let forever = std::time::Duration::from_secs(u32::MAX as u64);
    let request =
        (g.request(prompt, &asked, forever)).map_err(|e| usage(e.message().into_owned()))?;
    let stream = g.generator.submit(request)?;
    let text = g
        .text
        .as_deref()
        .filter(|_| args.text.is_some() || args.chat.is_some());
    print_tokens(stream, text, args.json)
}

/// Prints a sequence's tokens as they come (or its text, given a text model), or one JSON
/// object at the end.
fn print_tokens(
    mut stream: pjrt_actors::generate::TokenStream,
    text: Option<&crate::text::TextModel>,
    json: bool,
) -> Result<()> {
    use std::io::Write;
    let mut decoded = crate::text::TextStream::default();
    let mut tokens = Vec::new();
    let print_text = |t: &str| {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(t.as_bytes()).and_then(|_| out.flush());
    };
    while let Some(event) = stream.next_blocking() {
        match event? {
            TokenEvent::Token(t) => {
                tokens.push(t);
                match (json, text) {
                    (true, _) => {}
                    (false, Some(m)) => print_text(&decoded.push(m, t)),
                    (false, None) => print_line(format_args!("{t}")),
                }
            }
            TokenEvent::Logprobs(_) => {}
            TokenEvent::Done(finish) => {
                if json {
                    let mut line = serde_json::json!({"tokens": tokens, "finish": finish.as_str()});
                    if let Some(m) = text {
                        line["text"] = m.decode(&tokens).into();
                    }
                    print_line(format_args!("{line}"));
                } else if let Some(m) = text {
                    print_text(&(decoded.finish(m) + "\n"));
                }
                break;
            }
        }
    }
    Ok(())
}
