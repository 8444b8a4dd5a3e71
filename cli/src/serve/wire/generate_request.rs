//! A generation request as the wire carries it, apart from the server: Triton's generate
//! extension's JSON body (the prompt as token ids, the asked fields at the top or in
//! `parameters`) and a `ModelStreamInfer` request's prompt and parameters. Every list a
//! request may carry is bounded as it is read; the fuzz target `generate_requests` builds it.

use std::collections::HashMap;

use serde::Deserialize;

use super::messages::{InferParameter, ModelInferRequest, ParameterChoice};
use super::{shown, shown_dims};

/// Most stop tokens a config or a request may name: each is looked at for every token made.
pub const MAX_STOP_TOKENS: usize = 1024;

/// Most prompt ids a request may carry, past any bucket an export has: the list is refused as
/// it is read, before it is held whole.
pub const MAX_PROMPT_IDS: usize = 1 << 20;

/// A list of token ids of at most `MAX` entries, refused at the first one past it (serde reads
/// the rest of the body no further).
fn bounded_ids<'de, D: serde::Deserializer<'de>, const MAX: usize>(
    d: D,
    what: &'static str,
) -> std::result::Result<Vec<i32>, D::Error> {
    struct Ids<const MAX: usize>(&'static str);
    impl<'de, const MAX: usize> serde::de::Visitor<'de> for Ids<MAX> {
        type Value = Vec<i32>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {MAX} token ids")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Vec<i32>, A::Error> {
            let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX).min(4096));
            while let Some(id) = seq.next_element()? {
                if ids.len() == MAX {
                    return Err(serde::de::Error::custom(format!(
                        "`{}` has more than {MAX} ids",
                        self.0
                    )));
                }
                ids.push(id);
            }
            Ok(ids)
        }
    }
    d.deserialize_seq(Ids::<MAX>(what))
}

fn prompt_ids<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<i32>, D::Error> {
    bounded_ids::<D, MAX_PROMPT_IDS>(d, "input_ids")
}

/// A stop list, bounded; `null` is no list, as before the bound.
fn stop_ids<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Vec<i32>>, D::Error> {
    struct StopList(Vec<i32>);
    impl<'de> Deserialize<'de> for StopList {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            bounded_ids::<D, MAX_STOP_TOKENS>(d, "stop").map(StopList)
        }
    }
    Ok(Option::<StopList>::deserialize(d)?.map(|s| s.0))
}

/// What a request asks besides its prompt; each field optional.
#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Asked {
    pub max_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    #[serde(default, deserialize_with = "stop_ids")]
    pub stop: Option<Vec<i32>>,
    /// Triton's generate extension's streaming flag (the endpoint decides; accepted).
    pub stream: Option<bool>,
}

/// The HTTP generate body: Triton's generate extension, with the prompt as token ids; the
/// fields of [`Asked`] at the top or inside `parameters` (the top wins).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    #[serde(deserialize_with = "prompt_ids")]
    pub input_ids: Vec<i32>,
    #[serde(default)]
    pub id: Option<String>,
    pub max_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    #[serde(default, deserialize_with = "stop_ids")]
    pub stop: Option<Vec<i32>>,
    pub stream: Option<bool>,
    #[serde(default)]
    pub parameters: Option<Asked>,
}

impl GenerateBody {
    /// The fields asked, from the top and from `parameters`.
    pub fn asked(&self) -> Asked {
        let top = Asked {
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
            stop: self.stop.clone(),
            stream: self.stream,
        };
        merged(&top, self.parameters.as_ref())
    }
}

/// Both places a body may give [`Asked`]'s fields, the top winning.
pub fn merged(top: &Asked, nested: Option<&Asked>) -> Asked {
    let Some(n) = nested else {
        return top.clone();
    };
    Asked {
        max_tokens: top.max_tokens.or(n.max_tokens),
        temperature: top.temperature.or(n.temperature),
        top_k: top.top_k.or(n.top_k),
        top_p: top.top_p.or(n.top_p),
        seed: top.seed.or(n.seed),
        stop: top.stop.clone().or_else(|| n.stop.clone()),
        stream: top.stream.or(n.stream),
    }
}

/// What a `ModelStreamInfer` request asks, from its parameters (`max_tokens`, `temperature`,
/// `top_k`, `top_p`, `seed`).
pub fn asked_of(p: &HashMap<String, InferParameter>) -> Result<Asked, String> {
    Ok(Asked {
        max_tokens: whole(p, "max_tokens")?.map(|n| n as usize),
        temperature: number(p, "temperature")?,
        top_k: whole(p, "top_k")?.map(|n| n as usize),
        top_p: number(p, "top_p")?,
        seed: whole(p, "seed")?,
        stop: None,
        stream: None,
    })
}

/// A parameter as a whole number from 0, or a number, if given.
pub fn whole(params: &HashMap<String, InferParameter>, name: &str) -> Result<Option<u64>, String> {
    match params.get(name).and_then(|p| p.choice.as_ref()) {
        None => Ok(None),
        Some(ParameterChoice::Int64(n)) if *n >= 0 => Ok(Some(*n as u64)),
        Some(ParameterChoice::Uint64(n)) => Ok(Some(*n)),
        Some(_) => Err(format!("parameter `{name}` takes a whole number from 0")),
    }
}

pub fn number(params: &HashMap<String, InferParameter>, name: &str) -> Result<Option<f32>, String> {
    match params.get(name).and_then(|p| p.choice.as_ref()) {
        None => Ok(None),
        Some(ParameterChoice::Double(d)) => Ok(Some(*d as f32)),
        Some(ParameterChoice::Int64(n)) => Ok(Some(*n as f32)),
        Some(ParameterChoice::Uint64(n)) => Ok(Some(*n as f32)),
        Some(_) => Err(format!("parameter `{name}` takes a number")),
    }
}

/// The prompt of a request: its one input, `input_ids`, INT32 of shape [n] or [1, n].
pub fn prompt_of(r: &ModelInferRequest) -> Result<Vec<i32>, String> {
    let [input] = r.inputs.as_slice() else {
        return Err(format!(
            "a generation model takes one input, input_ids; {} given",
            r.inputs.len()
        ));
    };
    if input.name != "input_ids" || input.datatype != "INT32" {
        return Err(format!(
            "the input is `{}` {}; the model takes input_ids, INT32",
            shown(&input.name),
            shown(&input.datatype)
        ));
    }
    // The shape first: a product of many large dims would overflow.
    let n = match input.shape.as_slice() {
        [n] | [1, n] if *n >= 0 => *n,
        _ => {
            return Err(format!(
                "input_ids has shape {}; it takes [n] or [1, n]",
                shown_dims(&input.shape)
            ));
        }
    };
    let ids: Vec<i32> = match (r.raw_input_contents.first(), &input.contents) {
        (Some(raw), None) if raw.len() % 4 == 0 => (raw.chunks_exact(4))
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        (None, Some(c)) => c.int_contents.clone(),
        _ => {
            return Err("input_ids needs its raw contents or int_contents".into());
        }
    };
    match ids.len() as i64 == n {
        true => Ok(ids),
        false => Err(format!(
            "input_ids has {} values for shape {}",
            ids.len(),
            shown_dims(&input.shape)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_bounded_as_they_are_read_and_null_is_no_list() {
        let ids = |n: usize| vec!["1"; n].join(",");
        let body = |text: String| serde_json::from_str::<GenerateBody>(&text);
        let ok = body(format!(r#"{{"input_ids": [1], "stop": [{}]}}"#, ids(1024))).unwrap();
        assert_eq!(ok.asked().stop.map(|s| s.len()), Some(1024));
        let err = body(format!(r#"{{"input_ids": [1], "stop": [{}]}}"#, ids(1025))).unwrap_err();
        assert!(err.to_string().contains("more than 1024"), "{err}");
        let nested = format!(
            r#"{{"input_ids": [1], "parameters": {{"stop": [{}]}}}}"#,
            ids(1025)
        );
        assert!(body(nested).is_err());
        let none = body(r#"{"input_ids": [1], "stop": null}"#.into()).unwrap();
        assert_eq!(none.asked().stop, None);
        let long = format!(r#"{{"input_ids": [{}]}}"#, ids(MAX_PROMPT_IDS + 1));
        assert!(
            body(long)
                .unwrap_err()
                .to_string()
                .contains("more than 1048576")
        );
    }
}
