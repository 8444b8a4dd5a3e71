//! Text for a generation model, from its folder as Hugging Face lays one out: `tokenizer.json`
//! (read with the `tokenizers` crate) and the chat template of `tokenizer_config.json`
//! (rendered with minijinja as `apply_chat_template` renders it: trim_blocks, lstrip_blocks,
//! `bos_token`, `eos_token`, `add_generation_prompt`). Streams decode as `stream` says.

mod stream;

use std::path::{Path, PathBuf};

use pjrt_actors::{Error, Result};
use serde::Serialize;
use serde_json::Value;
use tokenizers::Tokenizer;

pub use stream::{StopText, TextStream};

/// A model's tokenizer and chat template.
pub struct TextModel {
    tokenizer: Tokenizer,
    chat: Option<ChatTemplate>,
}

/// One message of a conversation, as OpenAI's API and chat templates name its fields.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos_token: String,
    eos_token: String,
}

fn refused(dir: &Path, file: &str, why: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{}: {why}", dir.join(file).display()))
}

/// `bos_token` and `eos_token` are a string or an added token's object (`{"content": ...}`).
fn token_text(config: &Value, key: &str) -> String {
    match &config[key] {
        Value::String(s) => s.clone(),
        Value::Object(o) => (o.get("content").and_then(Value::as_str))
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

impl TextModel {
    /// The text model of `dir`: `None` without `tokenizer.json` (the model serves ids only);
    /// refused, naming the file, when it cannot be read, or when it makes ids past the model's
    /// `vocab` (its logits' width).
    pub fn load(dir: &Path, vocab: usize) -> Result<Option<TextModel>> {
        let path: PathBuf = dir.join("tokenizer.json");
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let bytes = crate::files::read(&path, "tokenizer")?;
        let tokenizer =
            Tokenizer::from_bytes(&bytes).map_err(|e| refused(dir, "tokenizer.json", e))?;
        let size = tokenizer.get_vocab_size(true);
        if size > vocab {
            return Err(refused(
                dir,
                "tokenizer.json",
                format!("it has {size} tokens; the model's vocabulary has {vocab}"),
            ));
        }
        let config_path = dir.join("tokenizer_config.json");
        let chat = match std::fs::symlink_metadata(&config_path) {
            Err(_) => None,
            Ok(_) => {
                let bytes = crate::files::read(&config_path, "tokenizer config")?;
                let config: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| refused(dir, "tokenizer_config.json", e))?;
                ChatTemplate::of(&config).map_err(|e| refused(dir, "tokenizer_config.json", e))?
            }
        };
        Ok(Some(TextModel { tokenizer, chat }))
    }

    /// The ids of `text` (the tokenizer's special tokens added where its post-processor adds
    /// them, as a completion prompt is encoded).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<i32>> {
        let encoding = (self.tokenizer.encode(text, add_special_tokens))
            .map_err(|e| Error::InvalidArgument(format!("the text cannot be tokenized: {e}")))?;
        Ok(encoding.get_ids().iter().map(|&id| id as i32).collect())
    }

    /// The text of `ids`, special tokens skipped, invalid UTF-8 replaced (as the tokenizer
    /// decodes).
    pub fn decode(&self, ids: &[i32]) -> String {
        let ids: Vec<u32> = ids.iter().map(|&id| id as u32).collect();
        self.tokenizer.decode(&ids, true).unwrap_or_default()
    }

    /// The prompt of a conversation: the chat template rendered, then encoded as the template
    /// wrote it (no special tokens added: the template writes its own).
    pub fn chat_prompt(&self, messages: &[Message]) -> std::result::Result<Vec<i32>, String> {
        let chat = self
            .chat
            .as_ref()
            .ok_or("the model has no chat template (tokenizer_config.json's `chat_template`)")?;
        let text = chat.render(messages, true)?;
        self.encode(&text, false).map_err(|e| e.to_string())
    }
}

impl ChatTemplate {
    fn of(config: &Value) -> std::result::Result<Option<ChatTemplate>, String> {
        // A template is a string, or a list of named ones (`default` is the chat one).
        let source = match &config["chat_template"] {
            Value::String(s) => s.clone(),
            Value::Array(named) => match (named.iter())
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str())
            {
                Some(s) => s.to_string(),
                None => return Err("`chat_template` names no `default` template".into()),
            },
            Value::Null => return Ok(None),
            _ => return Err("`chat_template` is not a string".into()),
        };
        let mut env = minijinja::Environment::new();
        // As transformers renders chat templates (its ImmutableSandboxedEnvironment).
        let syntax = (minijinja::syntax::SyntaxConfig::builder())
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| e.to_string())?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    message,
                ))
            },
        );
        env.add_template_owned("chat", source)
            .map_err(|e| format!("`chat_template` is not a template: {e}"))?;
        Ok(Some(ChatTemplate {
            env,
            bos_token: token_text(config, "bos_token"),
            eos_token: token_text(config, "eos_token"),
        }))
    }

    fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> std::result::Result<String, String> {
        let template = self.env.get_template("chat").map_err(|e| e.to_string())?;
        template
            .render(minijinja::context! {
                messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| format!("the chat template could not render the messages: {e}"))
    }
}

#[cfg(test)]
mod tests;
