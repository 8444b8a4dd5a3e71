//! The OpenAI routes of `pjrt-actors serve`, driven by OpenAI's own Python client on a model
//! folder laid out as Hugging Face lays one out (tests/data/exported/generate_text): JAX's text
//! for every recorded case, plain and streamed, past the decode slots; refusals in OpenAI's
//! shape; a client's going freeing its slot; and one request read alike by every protocol.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::server::{Server, http, openai_python, python_script, triton_script};
use serde_json::{Value, json};

fn exported() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported")
}

fn serve() -> Server {
    let dir = exported();
    Server::start(&[
        "--generation".into(),
        format!("tm={}", dir.join("generate_text").display()),
        "--generation".into(),
        format!("lm={}", dir.join("generate").display()),
        "--generation".into(),
        format!("long={}", dir.join("generate_text_long").display()),
    ])
    .unwrap()
}

/// A sample of `/metrics` with these labels, 0 when absent.
fn metric(port: u16, name: &str) -> f64 {
    let (status, _, body) = http(port, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    (String::from_utf8(body).unwrap().lines())
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[test]
fn the_openai_client_gets_jaxs_text_for_every_case_plain_and_streamed() {
    let server = serve();
    let cases_path = exported().join("generate_text/text_cases.json");
    let cases: Value = serde_json::from_slice(&std::fs::read(&cases_path).unwrap()).unwrap();
    let cases = cases["cases"].as_array().unwrap();
    let seen = python_script(
        &openai_python(),
        "openai_cases.py",
        &[
            server.http.to_string(),
            "tm".into(),
            cases_path.display().to_string(),
            "lm".into(),
            "long".into(),
        ],
    );
    let (mut split_streams, mut cached_streams) = (0, 0);
    for (k, case) in cases.iter().enumerate() {
        let prompt_tokens = case["prompt_ids"].as_array().unwrap().len();
        // The streamed ones ran after the plain ones: each starts from its own prompt's entry,
        // all of it in chunks of 16 but a token to compute (`usage.prompt_tokens_details`).
        let own = (prompt_tokens - 1) / 16 * 16;
        assert_eq!(
            seen["streamed"][k]["usage"][2], own,
            "{k}: {}",
            seen["streamed"][k]
        );
        assert!(seen["plain"][k]["usage"][2].as_u64().unwrap() as usize <= own);
        cached_streams += usize::from(own > 0);
        let made = case["tokens"].as_array().unwrap().len();
        for how in ["plain", "streamed"] {
            let got = &seen[how][k];
            assert_eq!(got["text"], case["text"], "{how} {k}: {got} {case}");
            assert_eq!(got["finish"], case["finish"], "{how} {k}: {got}");
            assert_eq!(got["usage"][0], prompt_tokens, "{how} {k}: {got}");
            // A stop string ends the sequence where it matched: at most the tokens JAX made.
            let completion = got["usage"][1].as_u64().unwrap() as usize;
            match case.get("stop") {
                None => assert_eq!(completion, made, "{how} {k}: {got}"),
                Some(_) => assert!(completion >= 1 && completion <= made, "{how} {k}: {got}"),
            }
        }
        let streamed = &seen["streamed"][k];
        if case["kind"].as_str().unwrap().starts_with("chat") {
            assert_eq!(streamed["roles"], json!(["assistant"]), "{streamed}");
        }
        split_streams += usize::from(streamed["deltas"].as_u64().unwrap() > 1);
    }
    assert!(split_streams > cases.len() / 2, "{split_streams}");
    assert!(
        cached_streams >= 10,
        "{cached_streams} started from a cached prefix"
    );
    // Log-probabilities: one entry a token, JAX's log-probability of it (within f32 noise) and
    // JAX's three most likely tokens as alternatives, most likely first, the chosen one among
    // them (greedy); plain and streamed alike.
    let plain_cases: Vec<&Value> = cases.iter().filter(|c| c.get("stop").is_none()).collect();
    for how in ["logprobs_plain", "logprobs_streamed"] {
        for (case, got) in plain_cases.iter().zip(seen[how].as_array().unwrap()) {
            let want = case["logprobs"].as_array().unwrap();
            let got = got.as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{how}: {case}");
            for (g, w) in got.iter().zip(want) {
                let (lp, jax) = (
                    g["logprob"].as_f64().unwrap(),
                    w["logprob"].as_f64().unwrap(),
                );
                assert!(
                    (lp - jax).abs() < 1e-3,
                    "{how}: {lp} against JAX's {jax}: {g}"
                );
                // A completion's alternatives are a dict by text: one entry a distinct text.
                let mut top: Vec<&Value> = Vec::new();
                for t in w["top_text"].as_array().unwrap() {
                    if case["kind"] == "chat" || !top.contains(&t) {
                        top.push(t);
                    }
                }
                assert_eq!(g["top"], json!(top), "{how}: {g} {w}");
                assert_eq!(g["top_logprobs"][0], g["logprob"], "{how}: {g}");
                assert_eq!(g["token"], g["top"][0], "{how}: {g}");
            }
        }
    }
    assert_eq!(seen["models"], json!(["lm", "long", "tm"]), "{seen}");
    let r = &seen["refusals"];
    for (key, status, param, says) in [
        (
            "unknown_model",
            404,
            Some("model"),
            "no generation model is named `nope`",
        ),
        ("n", 400, Some("n"), "`n` above 1"),
        ("tools", 400, Some("tools"), "tool calling"),
        ("ids_only", 400, Some("model"), "tokenizer.json"),
        ("temperature", 400, Some("temperature"), "0 to 2"),
    ] {
        assert_eq!(r[key]["status"], status, "{key}: {r}");
        assert_eq!(r[key]["param"], json!(param), "{key}: {r}");
        assert!(
            r[key]["message"].as_str().unwrap().contains(says),
            "{key}: {r}"
        );
    }
    // The stream closed after its first chunk (4,000 tokens asked of a 4,096-position cache)
    // is cancelled, and its slot freed, within a bound.
    assert_eq!(seen["gone_first"], "assistant");
    let deadline = Instant::now() + Duration::from_secs(10);
    let cancelled = "pjrt_actors_generate_cancelled_total{model=\"long\"}";
    while metric(server.http, cancelled) < 1.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(metric(server.http, cancelled), 1.0);
    assert_eq!(
        metric(server.http, "pjrt_actors_generate_running{model=\"long\"}"),
        0.0
    );
    // Every request was counted, and time to first token has a histogram to read p99 from.
    let asked = (2 * cases.len() + 2 * plain_cases.len()) as f64;
    let first = "pjrt_actors_generate_first_token_seconds_count{model=\"tm\"}";
    assert_eq!(metric(server.http, first), asked);
    let ok = "pjrt_actors_server_requests_total{model=\"tm\",protocol=\"http\",outcome=\"ok\"}";
    assert_eq!(metric(server.http, ok), asked);
}

/// A JSON body POSTed to `path`: the answer's bytes, its status checked to be 200.
fn post_ok(server: &Server, path: &str, body: &Value) -> Vec<u8> {
    let (status, _, answer) = http(
        server.http,
        "POST",
        path,
        &[("Content-Type", "application/json".into())],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    answer
}

fn ids(v: &Value) -> Vec<i64> {
    (v.as_array().unwrap().iter())
        .map(|t| t.as_i64().unwrap())
        .collect()
}

/// One request read alike by every protocol: greedy, sampled (temperature, top_k, top_p, seed)
/// and with a stop id, sent as token ids to KServe's generate and generate_stream, gRPC's
/// ModelStreamInfer and OpenAI's completions, gives the same tokens on each (the OpenAI route's
/// text is theirs decoded).
#[test]
fn one_request_gets_one_answer_over_every_protocol() {
    let server = serve();
    let prompt = [17, 45, 200, 9, 131];
    let table = [
        json!({"max_tokens": 10}),
        json!({"max_tokens": 10, "temperature": 0.9, "top_k": 20, "top_p": 0.9, "seed": 5}),
        json!({"max_tokens": 10, "temperature": 1.5, "seed": 11}),
    ];
    let post = |path: &str, body: &Value| post_ok(&server, path, body);
    let grpc_requests: Vec<Value> = (table.iter())
        .map(|p| json!({"prompt": prompt, "params": p}))
        .collect();
    let grpc = triton_script(
        "grpc_generate.py",
        &[
            server.grpc.to_string(),
            "tm".into(),
            Value::from(grpc_requests).to_string(),
        ],
    );
    let mut differ = 0;
    for (k, params) in table.iter().enumerate() {
        let mut body = params.clone();
        body["input_ids"] = json!(prompt);
        let generate: Value =
            serde_json::from_slice(&post("/v2/models/tm/generate", &body)).unwrap();
        let tokens = ids(&generate["output_ids"]);
        assert_eq!(tokens.len(), 10, "{generate}");
        // The stream, its events joined.
        let text = String::from_utf8(post("/v2/models/tm/generate_stream", &body)).unwrap();
        let streamed: Vec<i64> = (text.lines())
            .filter_map(|l| l.strip_prefix("data: "))
            .flat_map(|e| ids(&serde_json::from_str::<Value>(e).unwrap()["output_ids"]))
            .collect();
        assert_eq!(streamed, tokens, "{params}");
        assert_eq!(ids(&grpc[k]["tokens"]), tokens, "{params}: {grpc}");
        // OpenAI's completions with the prompt as ids; its text is the same tokens decoded,
        // which the text_output of KServe's generate gives for a text model.
        let mut openai = params.clone();
        openai["model"] = "tm".into();
        openai["prompt"] = json!(prompt);
        if openai.get("temperature").is_none() {
            openai["temperature"] = 0.into();
        }
        let answer: Value = serde_json::from_slice(&post("/v1/completions", &openai)).unwrap();
        assert_eq!(answer["usage"]["completion_tokens"], 10, "{answer}");
        assert_eq!(
            answer["choices"][0]["text"], generate["text_output"],
            "{params}: {answer} {generate}"
        );
        differ += usize::from(k > 0 && tokens != ids(&json!(grpc[0]["tokens"])));
    }
    // Sampling changes the answer: the table is not three greedy runs.
    assert_eq!(differ, 2);
}

/// Every case JAX recorded for the text model, through Triton's generate routes and gRPC: a
/// completion's prompt as `text_input`, a chat's as the rendered prompt's ids; the tokens, the
/// finish and (over HTTP) the `text_output` are JAX's, the stream's text deltas joining to it.
#[test]
fn every_recorded_case_gets_jaxs_answer_over_kserve_http_and_grpc() {
    let server = serve();
    let cases: Value = serde_json::from_slice(
        &std::fs::read(exported().join("generate_text/text_cases.json")).unwrap(),
    )
    .unwrap();
    let cases: Vec<&Value> = (cases["cases"].as_array().unwrap().iter())
        .filter(|c| c.get("stop").is_none())
        .collect();
    let post = |path: &str, body: &Value| post_ok(&server, path, body);
    for case in &cases {
        let body = match case["kind"].as_str().unwrap() {
            "completion" => json!({"text_input": case["prompt"], "max_tokens": 12}),
            _ => json!({"input_ids": case["prompt_ids"], "max_tokens": 12}),
        };
        let whole: Value = serde_json::from_slice(&post("/v2/models/tm/generate", &body)).unwrap();
        assert_eq!(whole["output_ids"], case["tokens"], "{case}");
        assert_eq!(whole["text_output"], case["text"], "{case}");
        assert_eq!(whole["finish_reason"], case["finish"], "{case}");
        let events = String::from_utf8(post("/v2/models/tm/generate_stream", &body)).unwrap();
        let text: String = (events.lines())
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|e| serde_json::from_str::<Value>(e).unwrap()["text_output"].clone())
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, case["text"].as_str().unwrap(), "{case}");
    }
    let requests: Vec<Value> = (cases.iter())
        .map(|c| json!({"prompt": c["prompt_ids"], "params": {"max_tokens": 12}}))
        .collect();
    let grpc = triton_script(
        "grpc_generate.py",
        &[
            server.grpc.to_string(),
            "tm".into(),
            Value::from(requests).to_string(),
        ],
    );
    for (case, got) in cases.iter().zip(grpc.as_array().unwrap()) {
        assert_eq!(got["tokens"], case["tokens"], "{case}");
        assert_eq!(got["finish"], case["finish"], "{case}");
    }
    // A prompt as text on a model without a tokenizer, and both prompts at once, are refused.
    let (status, _, body) = http(
        server.http,
        "POST",
        "/v2/models/lm/generate",
        &[],
        br#"{"text_input": "hi"}"#,
    );
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("tokenizer.json"));
    let (status, _, _) = http(
        server.http,
        "POST",
        "/v2/models/tm/generate",
        &[],
        br#"{"text_input": "hi", "input_ids": [1]}"#,
    );
    assert_eq!(status, 400);
}
