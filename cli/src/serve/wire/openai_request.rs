//! OpenAI's `/v1/completions` and `/v1/chat/completions` request bodies, read into what every
//! generation route asks ([`Asked`], the one reader's) plus the text-only parts (the prompt or
//! the messages, stop strings, streaming, log probabilities). Fields the server cannot honour
//! (`n` above 1, tools, a `response_format` other than text, penalties, `echo`) are refused
//! with a message naming them; an unknown field is refused as any malformed body is.

use serde::Deserialize;

use super::generate_request::{Asked, MAX_PROMPT_IDS};

/// Most alternatives a chat's `top_logprobs` may ask for (OpenAI's bound, and the engine's).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Most stop strings a request may give, as OpenAI's API bounds them.
pub const MAX_STOP_STRINGS: usize = 4;

/// Most messages a chat may hold: each is rendered by the template, whose cost grows with them.
pub const MAX_MESSAGES: usize = 4096;

/// `stop`: one string or a list of them.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Stops {
    One(String),
    Many(Vec<String>),
}

/// `prompt`: text, a one-element list of text, or token ids.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<i64>),
}

/// A message's `content`: text, or a list of parts of which only text parts are taken.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize, Debug)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
    // `name` is taken and not used: templates mostly ignore it.
    #[serde(default)]
    #[allow(dead_code)]
    name: Option<String>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
    #[serde(default)]
    #[allow(dead_code)]
    continuous_usage_stats: bool,
}

/// The fields both bodies share.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct Common {
    model: String,
    max_tokens: Option<usize>,
    max_completion_tokens: Option<usize>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    /// vLLM's extension, which its clients send.
    top_k: Option<i64>,
    seed: Option<i64>,
    stop: Option<Stops>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    n: Option<u32>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    logprobs: Option<serde_json::Value>,
    top_logprobs: Option<u32>,
    tools: Option<Vec<serde_json::Value>>,
    tool_choice: Option<serde_json::Value>,
    parallel_tool_calls: Option<bool>,
    response_format: Option<serde_json::Value>,
    // Taken and not used: who asked, and the client's bookkeeping.
    #[allow(dead_code)]
    user: Option<String>,
    #[allow(dead_code)]
    metadata: Option<serde_json::Value>,
    #[allow(dead_code)]
    store: Option<bool>,
    #[allow(dead_code)]
    service_tier: Option<String>,
    // Completions only.
    prompt: Option<Prompt>,
    echo: Option<bool>,
    suffix: Option<String>,
    best_of: Option<u32>,
    // Chat only.
    messages: Option<Vec<ChatMessage>>,
}

/// A request read: the model, what it asks, and its text-only parts.
#[derive(Debug)]
pub struct OpenAiRequest {
    pub model: String,
    pub asked: Asked,
    pub stop_strings: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub input: Input,
    /// Each token's log-probability and this many alternatives', if asked.
    pub logprobs: Option<usize>,
}

/// What the answer continues.
#[derive(Debug)]
pub enum Input {
    /// A completion's prompt: text, or ids.
    Prompt(Prompt),
    /// A chat's messages: (role, text).
    Chat(Vec<(String, String)>),
}

/// Which route the body came to.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Route {
    Completions,
    Chat,
}

/// A field refused: its name (OpenAI's error `param`) and why.
#[derive(Debug)]
pub struct Refused {
    pub param: Option<&'static str>,
    pub message: String,
}

fn refuse(param: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        param: Some(param),
        message: message.into(),
    }
}

/// Reads a body of `route`.
pub fn read(body: &[u8], route: Route) -> Result<OpenAiRequest, Refused> {
    let c: Common = serde_json::from_slice(body).map_err(|e| Refused {
        param: None,
        message: format!("the request body is not a valid request: {e}"),
    })?;
    unsupported(&c)?;
    let logprobs = logprobs(&c, route)?;
    // Each route's fields that belong to the other.
    let wrong: &[(&'static str, bool)] = match route {
        Route::Completions => &[("messages", c.messages.is_some())],
        Route::Chat => &[
            ("prompt", c.prompt.is_some()),
            ("echo", c.echo.is_some()),
            ("suffix", c.suffix.is_some()),
            ("best_of", c.best_of.is_some()),
        ],
    };
    if let Some((field, _)) = wrong.iter().find(|(_, given)| *given) {
        return Err(refuse(
            field,
            format!("`{field}` is not a field of this route"),
        ));
    }
    let input = match route {
        Route::Completions => Input::Prompt(prompt(c.prompt)?),
        Route::Chat => Input::Chat(messages(c.messages)?),
    };
    let stop_strings = match c.stop {
        None => Vec::new(),
        Some(Stops::One(s)) => vec![s],
        Some(Stops::Many(v)) if v.len() <= MAX_STOP_STRINGS => v,
        Some(Stops::Many(v)) => {
            return Err(refuse(
                "stop",
                format!("`stop` has {} strings; at most {MAX_STOP_STRINGS}", v.len()),
            ));
        }
    };
    if let Some(t) = c.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        return Err(refuse(
            "temperature",
            format!("`temperature` is {t}; it is 0 to 2"),
        ));
    }
    if let Some(p) = c.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(refuse(
            "top_p",
            format!("`top_p` is {p}; it is above 0, at most 1"),
        ));
    }
    let max_tokens = c.max_completion_tokens.or(c.max_tokens);
    if max_tokens == Some(0) {
        return Err(refuse("max_tokens", "`max_tokens` is 0; it is at least 1"));
    }
    let top_k = match c.top_k {
        None | Some(-1) => None,
        Some(k) if k >= 0 => Some(k as usize),
        Some(k) => return Err(refuse("top_k", format!("`top_k` is {k}"))),
    };
    // Without a seed, each request samples differently, as OpenAI's do.
    let seed = c.seed.map(|s| s as u64);
    let asked = Asked {
        // A completion with no limit gets OpenAI's 16; a chat, the model's own default.
        max_tokens: max_tokens.or((route == Route::Completions).then_some(16)),
        temperature: c.temperature,
        top_k,
        top_p: c.top_p,
        seed,
        stop: None,
        stream: Some(c.stream),
    };
    let options = c.stream_options.unwrap_or_default();
    Ok(OpenAiRequest {
        model: c.model,
        asked,
        stop_strings,
        stream: c.stream,
        include_usage: options.include_usage,
        input,
        logprobs,
    })
}

/// Most alternatives a completion's `logprobs` may ask for, as OpenAI's API bounds them (a
/// chat's `top_logprobs` may ask for 20).
pub const MAX_COMPLETION_LOGPROBS: usize = 5;

/// A chat's `logprobs` (true or false) with `top_logprobs` (0 to 20), or a completion's
/// `logprobs` (a count of alternatives, 0 to 5): how many alternatives each token names.
fn logprobs(c: &Common, route: Route) -> Result<Option<usize>, Refused> {
    use serde_json::Value;
    let top = c.top_logprobs.map(|n| n as usize);
    match (route, &c.logprobs) {
        (_, None | Some(Value::Null)) | (Route::Chat, Some(Value::Bool(false))) => {
            match top.is_some_and(|n| n > 0) {
                true => Err(refuse(
                    "top_logprobs",
                    "`top_logprobs` needs `logprobs` true",
                )),
                false => Ok(None),
            }
        }
        (Route::Chat, Some(Value::Bool(true))) => match top.unwrap_or(0) {
            n if n <= MAX_TOP_LOGPROBS => Ok(Some(n)),
            n => Err(refuse(
                "top_logprobs",
                format!("`top_logprobs` is {n}; at most {MAX_TOP_LOGPROBS}"),
            )),
        },
        (Route::Completions, Some(Value::Number(n))) => match n.as_u64() {
            Some(k) if k as usize <= MAX_COMPLETION_LOGPROBS => Ok(Some(k as usize)),
            _ => Err(refuse(
                "logprobs",
                format!("`logprobs` is {n}; 0 to {MAX_COMPLETION_LOGPROBS}"),
            )),
        },
        (Route::Chat, _) => Err(refuse("logprobs", "`logprobs` is true or false")),
        (Route::Completions, _) => Err(refuse("logprobs", "`logprobs` is a count of alternatives")),
    }
}

/// Refuses what would change the answer and is not built, rather than ignoring it.
fn unsupported(c: &Common) -> Result<(), Refused> {
    let not = |param, what: &str| Err(refuse(param, format!("{what} is not supported")));
    if c.n.is_some_and(|n| n != 1) {
        return not("n", "`n` above 1 (several choices)");
    }
    if c.best_of.is_some_and(|n| n != 1) {
        return not("best_of", "`best_of` above 1");
    }
    if c.tools.as_ref().is_some_and(|t| !t.is_empty()) || c.parallel_tool_calls == Some(true) {
        return not("tools", "tool calling");
    }
    if c.tool_choice.as_ref().is_some_and(|t| t != "none") {
        return not("tool_choice", "tool calling");
    }
    if let Some(f) = &c.response_format
        && f.get("type").and_then(|t| t.as_str()) != Some("text")
    {
        return not("response_format", "a response_format other than text");
    }
    for (param, p) in [
        ("frequency_penalty", c.frequency_penalty),
        ("presence_penalty", c.presence_penalty),
    ] {
        if p.is_some_and(|p| p != 0.0) {
            return not(param, &format!("`{param}`"));
        }
    }
    if c.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
        return not("logit_bias", "`logit_bias`");
    }
    if c.echo == Some(true) {
        return not("echo", "`echo`");
    }
    if c.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return not("suffix", "`suffix`");
    }
    Ok(())
}

fn prompt(p: Option<Prompt>) -> Result<Prompt, Refused> {
    match p {
        None => Err(refuse("prompt", "`prompt` is required")),
        Some(Prompt::Texts(t)) if t.len() != 1 => Err(refuse(
            "prompt",
            format!("`prompt` is a list of {} texts; one is supported", t.len()),
        )),
        Some(Prompt::Ids(ids)) if ids.len() > MAX_PROMPT_IDS => Err(refuse(
            "prompt",
            format!("`prompt` has more than {MAX_PROMPT_IDS} ids"),
        )),
        Some(Prompt::Ids(ids)) if ids.iter().any(|&t| i32::try_from(t).is_err() || t < 0) => Err(
            refuse("prompt", "`prompt` has an id that is not a token id"),
        ),
        Some(p) => Ok(p),
    }
}

fn messages(m: Option<Vec<ChatMessage>>) -> Result<Vec<(String, String)>, Refused> {
    let m = m.ok_or_else(|| refuse("messages", "`messages` is required"))?;
    if m.is_empty() || m.len() > MAX_MESSAGES {
        return Err(refuse(
            "messages",
            format!("`messages` has {}; 1 to {MAX_MESSAGES}", m.len()),
        ));
    }
    (m.into_iter())
        .map(|message| {
            if !["system", "developer", "user", "assistant", "tool"]
                .contains(&message.role.as_str())
            {
                return Err(refuse(
                    "messages",
                    format!("a message's role is {:?}", message.role),
                ));
            }
            let text = match message.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for part in parts {
                        match (part.kind.as_str(), part.text) {
                            ("text", Some(t)) => text += &t,
                            (kind, _) => {
                                return Err(refuse(
                                    "messages",
                                    format!(
                                        "a content part of type {kind:?} is not supported; text is"
                                    ),
                                ));
                            }
                        }
                    }
                    text
                }
            };
            Ok((message.role, text))
        })
        .collect()
}

#[cfg(test)]
#[path = "openai_request_tests.rs"]
mod tests;
