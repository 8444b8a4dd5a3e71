//! An HTTP inference request's JSON part read into owned parts without a tree of JSON values:
//! names, shapes and parameters typed as the protocol types them (what was sent is quoted
//! where it is wrong), each input's data left where it lies in the body, as a span.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{InputHead, RequestParams, shown};

/// Where an input's data lies in the body.
pub enum DataSpan {
    /// A JSON `data` value.
    Json(Range<usize>),
    /// Binary tensor data after the JSON part.
    Binary(Range<usize>),
}

/// A parsed request, its data still in the body.
pub struct HttpRequest {
    pub id: Option<String>,
    pub params: RequestParams,
    /// `binary_data_output`: every output in binary.
    pub binary_all: bool,
    pub inputs: Vec<(InputHead, DataSpan)>,
    /// The outputs asked for, and whether each is asked in binary.
    pub outputs: Vec<(String, bool)>,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    parameters: Option<BTreeMap<String, &'a RawValue>>,
    #[serde(borrow)]
    inputs: Vec<WireInput<'a>>,
    #[serde(default, borrow)]
    outputs: Option<Vec<WireOutput<'a>>>,
}

#[derive(Deserialize)]
struct WireInput<'a> {
    name: String,
    datatype: String,
    #[serde(borrow)]
    shape: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    parameters: Option<BTreeMap<String, &'a RawValue>>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireOutput<'a> {
    name: String,
    #[serde(default, borrow)]
    parameters: Option<BTreeMap<String, &'a RawValue>>,
}

fn bad(why: String) -> String {
    format!("inference request: {why}")
}

/// `raw` as a whole number from 0; `what` names it in the message.
fn whole(raw: &RawValue, what: &str) -> Result<u64, String> {
    let text = raw.get().trim();
    match text.bytes().all(|b| b.is_ascii_digit()) {
        true => text.parse().map_err(|_| {
            bad(format!(
                "{what} is `{}`, past the largest whole number taken",
                shown(text)
            ))
        }),
        false => Err(bad(format!(
            "{what} is `{}`; it takes a whole number from 0",
            shown(text)
        ))),
    }
}

fn boolean(raw: &RawValue, what: &str) -> Result<bool, String> {
    match raw.get().trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(bad(format!(
            "{what} is `{}`; it takes true or false",
            shown(other)
        ))),
    }
}

/// Reads the JSON part, `body[..json_len]`; the rest is the binary data its inputs claim, in
/// order, each exactly once.
pub fn parse(body: &[u8], json_len: usize) -> Result<HttpRequest, String> {
    let text = std::str::from_utf8(&body[..json_len])
        .map_err(|e| bad(format!("the JSON part is not UTF-8: {e}")))?;
    let wire: Wire = serde_json::from_str(text)
        .map_err(|e| bad(format!("not a KServe v2 inference request: {e}")))?;
    // A span of `text` as offsets into the body (the JSON part starts the body).
    let span = |raw: &RawValue| {
        let start = raw.get().as_ptr() as usize - text.as_ptr() as usize;
        start..start + raw.get().len()
    };
    let id = match wire.id {
        None => None,
        Some(raw) => Some(
            serde_json::from_str::<String>(raw.get())
                .map_err(|_| bad(format!("`id` is `{}`; it takes a string", shown(raw.get()))))?,
        ),
    };
    let mut params = RequestParams::default();
    let mut binary_all = false;
    for (k, v) in wire.parameters.iter().flatten() {
        match k.as_str() {
            "priority" => params.priority = Some(whole(v, "parameter `priority`")?),
            "timeout" => params.timeout_us = Some(whole(v, "parameter `timeout`")?),
            "binary_data_output" => binary_all = boolean(v, "parameter `binary_data_output`")?,
            _ => {}
        }
    }
    let mut binary_at = json_len;
    let mut inputs = Vec::with_capacity(wire.inputs.len());
    for i in wire.inputs {
        let name = shown(&i.name);
        let shape = (i.shape.iter())
            .map(|d| {
                let n = whole(d, &format!("a dim of input `{name}`'s shape"))?;
                i64::try_from(n).map_err(|_| {
                    bad(format!(
                        "input `{name}` has a dim of {n}, past the largest taken"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let size = match i
            .parameters
            .as_ref()
            .and_then(|p| p.get("binary_data_size"))
        {
            Some(raw) => Some(whole(raw, &format!("input `{name}`'s binary_data_size"))?),
            None => None,
        };
        let data = match (i.data, size) {
            (Some(_), Some(_)) => {
                return Err(bad(format!(
                    "input `{name}` has both `data` and binary_data_size; it takes one"
                )));
            }
            (None, None) => {
                return Err(bad(format!(
                    "input `{name}` has neither `data` nor binary_data_size"
                )));
            }
            (Some(raw), None) => DataSpan::Json(span(raw)),
            (None, Some(n)) => {
                let left = body.len() - binary_at;
                let n = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= left)
                    .ok_or_else(|| {
                        bad(format!(
                            "input `{name}` says {n} bytes of binary data; {left} remain"
                        ))
                    })?;
                binary_at += n;
                DataSpan::Binary(binary_at - n..binary_at)
            }
        };
        let head = InputHead {
            name: i.name,
            datatype: i.datatype,
            shape,
        };
        inputs.push((head, data));
    }
    if binary_at != body.len() {
        return Err(bad(format!(
            "{} bytes of binary data no input claims",
            body.len() - binary_at
        )));
    }
    let mut outputs = Vec::new();
    for o in wire.outputs.into_iter().flatten() {
        let mut binary = false;
        for (k, v) in o.parameters.iter().flatten() {
            match k.as_str() {
                "binary_data" => {
                    binary = boolean(v, &format!("output `{}`'s binary_data", shown(&o.name)))?
                }
                "classification" => {
                    return Err(bad(format!(
                        "output `{}` asks for classification, which this server does not serve",
                        shown(&o.name)
                    )));
                }
                _ => {}
            }
        }
        outputs.push((o.name, binary));
    }
    Ok(HttpRequest {
        id,
        params,
        binary_all,
        inputs,
        outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> String {
        match parse(body.as_bytes(), body.len()) {
            Ok(_) => panic!("accepted: {body}"),
            Err(e) => e,
        }
    }

    #[test]
    fn what_was_sent_is_quoted_where_it_is_wrong() {
        let input = |shape: &str, extra: &str| {
            format!(
                r#"{{"inputs":[{{"name":"x","datatype":"INT32","shape":{shape},"data":[1]{extra}}}]}}"#
            )
        };
        // (body, what the message says)
        let cases = [
            (
                input("[18446744073709551615]", ""),
                "a dim of 18446744073709551615",
            ),
            (input("[1.0]", ""), "shape is `1.0`"),
            (input("[-1]", ""), "shape is `-1`"),
            (
                input("[1]", r#","parameters":{"binary_data_size":-12}"#),
                "binary_data_size is `-12`",
            ),
            (
                input("[1]", r#","parameters":{"binary_data_size":4}"#),
                "both `data` and binary_data_size",
            ),
            (
                r#"{"inputs":[{"name":"x","datatype":"INT32","shape":[1]}]}"#.into(),
                "neither `data`",
            ),
            (
                r#"{"inputs":[],"parameters":{"priority":"high"}}"#.into(),
                "`priority` is `\"high\"`",
            ),
            (
                r#"{"inputs":[],"parameters":{"priority":1.5}}"#.into(),
                "`priority` is `1.5`",
            ),
            (
                r#"{"inputs":[],"parameters":{"timeout":-3}}"#.into(),
                "`timeout` is `-3`",
            ),
            (
                r#"{"inputs":[],"parameters":{"binary_data_output":1}}"#.into(),
                "takes true or false",
            ),
            (r#"{"inputs":[],"id":7}"#.into(), "`id` is `7`"),
            (
                r#"{"inputs":[],"outputs":[{"name":"y","parameters":{"classification":2}}]}"#
                    .into(),
                "classification",
            ),
            (r#"{"input":[]}"#.into(), "missing field `inputs`"),
            ("[1,2]".into(), "not a KServe v2 inference request"),
        ];
        for (body, says) in cases {
            let err = refused(&body);
            assert!(err.contains(says), "{body}: `{err}` lacks `{says}`");
        }
    }

    #[test]
    fn binary_data_is_claimed_in_order_and_all_of_it() {
        let json = r#"{"inputs":[{"name":"a","datatype":"INT8","shape":[2],"parameters":{"binary_data_size":2}},{"name":"b","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":1}}],"id":"r7","outputs":[{"name":"y","parameters":{"binary_data":true}}]}"#;
        let mut body = json.as_bytes().to_vec();
        body.extend([1, 2, 3]);
        let r = parse(&body, json.len()).unwrap();
        let spans: Vec<Range<usize>> = (r.inputs.iter())
            .map(|(_, d)| match d {
                DataSpan::Binary(r) => r.clone(),
                DataSpan::Json(_) => panic!("binary"),
            })
            .collect();
        assert_eq!(
            spans,
            [json.len()..json.len() + 2, json.len() + 2..json.len() + 3]
        );
        assert_eq!(
            (r.id.as_deref(), &r.outputs[..]),
            (Some("r7"), &[("y".to_string(), true)][..])
        );
        body.push(4);
        let err = |body: &[u8]| parse(body, json.len()).err().expect("refused");
        assert!(err(&body).contains("1 bytes of binary data no input claims"));
        body.truncate(json.len() + 2);
        assert!(err(&body).contains("says 1 bytes of binary data; 0 remain"));
    }
}
