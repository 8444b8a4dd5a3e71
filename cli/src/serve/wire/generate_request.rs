//! A generation request as the wire carries it, apart from the server: Triton's generate
//! extension's JSON body (the prompt as token ids, the asked fields at the top or in
//! `parameters`) and a `ModelStreamInfer` request's prompt and parameters. Every list a
//! request may carry is bounded as it is read; the fuzz target `generate_requests` builds it.

use std::collections::HashMap;

use serde::Deserialize;

use pjrt_actors::ElementType;

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

/// The HTTP generate body: Triton's generate extension, with the prompt as token ids (or, for a
/// model with a tokenizer, as `text_input`); the fields of [`Asked`] at the top or inside
/// `parameters` (the top wins).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    #[serde(default, deserialize_with = "prompt_ids")]
    pub input_ids: Vec<i32>,
    #[serde(default)]
    pub text_input: Option<String>,
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

/// Parameters a Triton client sets on a stream's requests that ask nothing of the sequence:
/// the empty final response is always sent here.
const CLIENT_FLAGS: [&str; 1] = ["triton_enable_empty_final_response"];

/// What a `ModelStreamInfer` request asks, from its parameters: the same fields, read by the
/// same reader ([`Asked`]'s, which refuses an unknown one), as the HTTP body's. gRPC parameters
/// are scalars, so `stop` is one id (int64) or a list of ids as a string (`"0,2"` or `"[0, 2]"`).
pub fn asked_of(p: &HashMap<String, InferParameter>) -> Result<Asked, String> {
    use serde_json::Value;
    let mut fields = serde_json::Map::new();
    for (name, value) in p {
        if CLIENT_FLAGS.contains(&name.as_str()) {
            continue;
        }
        let value = match (name.as_str(), value.parameter_choice.as_ref()) {
            (_, None) => continue,
            ("stop", Some(ParameterChoice::StringParam(ids))) => stop_list(ids)?,
            (_, Some(ParameterChoice::BoolParam(b))) => Value::from(*b),
            (_, Some(ParameterChoice::Int64Param(n))) if name == "stop" => Value::from(vec![*n]),
            (_, Some(ParameterChoice::Int64Param(n))) => Value::from(*n),
            (_, Some(ParameterChoice::Uint64Param(n))) => Value::from(*n),
            (_, Some(ParameterChoice::DoubleParam(d))) => Value::from(*d),
            (_, Some(ParameterChoice::StringParam(s))) => Value::from(shown(s)),
        };
        // Each read alone first, so that an error names its parameter (serde's names none).
        let alone = serde_json::Map::from_iter([(name.clone(), value)]);
        Asked::deserialize(Value::Object(alone.clone()))
            .map_err(|e| format!("parameter `{}`: {e}", shown(name)))?;
        fields.extend(alone);
    }
    Asked::deserialize(Value::Object(fields)).map_err(|e| format!("parameters: {e}"))
}

/// A stop list given as a string: ids split by commas, in brackets or not; bounded before it
/// is held.
fn stop_list(text: &str) -> Result<serde_json::Value, String> {
    let inner = text
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim();
    if inner.is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    if inner.split(',').count() > MAX_STOP_TOKENS {
        return Err(format!("`stop` has more than {MAX_STOP_TOKENS} ids"));
    }
    (inner.split(','))
        .map(|id| id.trim().parse::<i32>().map(serde_json::Value::from))
        .collect::<Result<Vec<_>, _>>()
        .map(serde_json::Value::Array)
        .map_err(|_| format!("`stop` is {}; it takes token ids, as \"0,2\"", shown(text)))
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
    let ids: Vec<i32> = match (r.raw_input_contents.as_slice(), &input.contents) {
        ([raw], None) if raw.len() % 4 == 0 => (raw.chunks_exact(4))
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        // INT32 values are int_contents, read as ModelInfer reads typed contents (another
        // typed field filled too is refused, naming it).
        ([], Some(c)) => super::grpc_contents::read_contents(c, ElementType::S32, n as usize)
            .map_err(|e| format!("input_ids: {e}"))?
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        _ => {
            return Err(
                "input_ids needs its raw contents (one, a multiple of 4 bytes) or int_contents, not both"
                    .into(),
            );
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

    fn params(pairs: &[(&str, ParameterChoice)]) -> HashMap<String, InferParameter> {
        (pairs.iter())
            .map(|(n, c)| {
                (
                    n.to_string(),
                    InferParameter {
                        parameter_choice: Some(c.clone()),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn stream_parameters_are_read_as_the_http_body_is() {
        use ParameterChoice::*;
        let asked = asked_of(&params(&[
            ("max_tokens", Int64Param(5)),
            ("temperature", DoubleParam(0.5)),
            ("top_k", Uint64Param(3)),
            ("top_p", DoubleParam(0.9)),
            ("seed", Int64Param(7)),
            ("stop", StringParam("[0, 2]".into())),
            ("triton_enable_empty_final_response", BoolParam(true)),
        ]))
        .unwrap();
        let body: GenerateBody = serde_json::from_str(
            r#"{"input_ids": [1], "max_tokens": 5, "temperature": 0.5, "top_k": 3, "top_p": 0.9, "seed": 7, "stop": [0, 2]}"#,
        )
        .unwrap();
        assert_eq!(format!("{asked:?}"), format!("{:?}", body.asked()));
        let one = asked_of(&params(&[("stop", Int64Param(4))])).unwrap();
        assert_eq!(one.stop, Some(vec![4]));
        let none = asked_of(&params(&[("stop", StringParam("".into()))])).unwrap();
        assert_eq!(none.stop, Some(vec![]));
        // Refused as the HTTP body refuses them: an unknown name, a wrong type, a bad list.
        for (bad, says) in [
            (
                params(&[("max_token", Int64Param(5))]),
                "unknown field `max_token`",
            ),
            (params(&[("max_tokens", Int64Param(-1))]), "invalid value"),
            (params(&[("max_tokens", DoubleParam(2.5))]), "invalid type"),
            (
                params(&[("temperature", StringParam("hot".into()))]),
                "invalid type",
            ),
            (
                params(&[("stop", StringParam("0,x".into()))]),
                "takes token ids",
            ),
            (
                params(&[("sequence_id", Int64Param(1))]),
                "unknown field `sequence_id`",
            ),
        ] {
            let err = asked_of(&bad).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
        let long = vec!["1"; MAX_STOP_TOKENS + 1].join(",");
        let err = asked_of(&params(&[("stop", StringParam(long))])).unwrap_err();
        assert!(err.contains("more than 1024"), "{err}");
    }

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
