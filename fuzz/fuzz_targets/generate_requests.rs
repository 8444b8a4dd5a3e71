//! The generation requests' decoding (cli/src/serve/wire/generate_request.rs and
//! openai_request.rs, included by path with the rest of the wire formats): any bytes as Triton's
//! generate extension's JSON body, as a `ModelStreamInfer` request's prompt and parameters, and
//! as OpenAI's completions and chat bodies. Nothing panics or loops; a body
//! read whole keeps every list within its bound, and a prompt read whole has exactly the
//! values its shape says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;

#[allow(dead_code)]
#[path = "../../cli/src/serve/wire/mod.rs"]
mod wire;

// The values' text reader the wire formats use (`crate::literal::parse_value`).
#[allow(dead_code)]
#[path = "../../cli/src/literal/mod.rs"]
mod literal;

use wire::generate_request::{
    GenerateBody, MAX_PROMPT_IDS, MAX_STOP_TOKENS, asked_of, prompt_of,
};
use wire::messages::ModelInferRequest;
use wire::openai_request::{self, Input, MAX_MESSAGES, MAX_STOP_STRINGS, Prompt, Route};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(body) = serde_json::from_slice::<GenerateBody>(bytes) {
        assert!(body.input_ids.len() <= MAX_PROMPT_IDS);
        let asked = body.asked();
        assert!(asked.stop.as_ref().is_none_or(|s| s.len() <= MAX_STOP_TOKENS));
    }
    for route in [Route::Completions, Route::Chat] {
        if let Ok(r) = openai_request::read(bytes, route) {
            assert!(r.stop_strings.len() <= MAX_STOP_STRINGS);
            assert!(r.asked.max_tokens != Some(0));
            match r.input {
                Input::Prompt(Prompt::Ids(ids)) => assert!(ids.len() <= MAX_PROMPT_IDS),
                Input::Prompt(Prompt::Texts(t)) => assert_eq!(t.len(), 1),
                Input::Prompt(Prompt::Text(_)) => {}
                Input::Chat(m) => assert!(!m.is_empty() && m.len() <= MAX_MESSAGES),
            }
        }
    }
    if let Ok(request) = ModelInferRequest::decode(bytes) {
        let _ = asked_of(&request.parameters);
        if let Ok(ids) = prompt_of(&request) {
            let n: i64 = request.inputs[0].shape.iter().product();
            assert_eq!(ids.len() as i64, n);
        }
    }
});
