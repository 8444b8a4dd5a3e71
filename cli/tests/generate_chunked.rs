//! Chunked prefill and the prefix cache through the CLI: a model folder with extend exports
//! (tests/data/exported/generate, chunks of 4 and 8) and a `prefill_chunk` in its
//! generation.json, served over HTTP; prompts past the largest bucket, and prompts sharing 90% of
//! one before, give JAX's whole-prefill tokens, and `/metrics` counts what the cache saved.
//! (`pjrt-actors generate --extend` is tested in generate.rs.)

mod common;

use std::path::PathBuf;

use common::server::{Server, http};
use serde_json::{Value, json};

fn source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate")
}

/// The long cases, in pairs: the second shares the first's first 90%.
fn long_cases() -> Vec<(Vec<i64>, Vec<i64>)> {
    let greedy: Value =
        serde_json::from_slice(&std::fs::read(source().join("greedy.json")).unwrap()).unwrap();
    let ints = |v: &Value| -> Vec<i64> {
        (v.as_array().unwrap().iter())
            .map(|t| t.as_i64().unwrap())
            .collect()
    };
    (greedy["long_cases"].as_array().unwrap().iter())
        .map(|c| (ints(&c["prompt"]), ints(&c["tokens"])))
        .collect()
}

/// `POST /v2/models/lm/generate` with `prompt`: the status and the body.
fn generate(port: u16, prompt: &[i64]) -> (u16, String) {
    let body = json!({ "input_ids": prompt }).to_string();
    let path = "/v2/models/lm/generate";
    let (status, _, answer) = http(port, "POST", path, &[], body.as_bytes());
    (status, String::from_utf8_lossy(&answer).into_owned())
}

/// A sample of model `lm`'s generation family `name`, 0 when absent.
fn metric(port: u16, name: &str) -> u64 {
    let (status, _, body) = http(port, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let prefix = format!("pjrt_actors_generate_{name}{{model=\"lm\"}} ");
    (String::from_utf8(body).unwrap().lines())
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse::<f64>().unwrap()) as u64
}

#[test]
fn served_long_prompts_and_shared_prefixes_give_jaxs_tokens() {
    let dir = std::env::temp_dir().join(format!("pjrt-actors-chunked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "prefill_8.exported",
        "prefill_16.exported",
        "insert.exported",
        "decode.exported",
        "extend_4.exported",
        "extend_8.exported",
        "weights.safetensors",
    ] {
        std::fs::copy(source().join(f), dir.join(f)).unwrap();
    }
    let config = json!({"max_sequence": 32, "stop_tokens": [0], "max_tokens": 12,
        "prefill_chunk": 4, "prefix_cache_bytes": 1 << 20});
    std::fs::write(dir.join("generation.json"), config.to_string()).unwrap();
    let server = Server::start(&["--generation".into(), format!("lm={}", dir.display())]).unwrap();
    let generated = |prompt: &[i64]| -> Value {
        let (status, body) = generate(server.http, prompt);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["output_ids"].clone()
    };
    let (mut saved, mut entries) = (0, 0);
    for pair in long_cases().chunks(2) {
        let ((first, want_first), (second, want_second)) = (&pair[0], &pair[1]);
        assert!(first.len() > 16, "past the largest bucket: {first:?}");
        assert_eq!(generated(first), json!(want_first), "{first:?}");
        assert_eq!(generated(second), json!(want_second), "{second:?}");
        let common = first.iter().zip(second).take_while(|(a, b)| a == b).count();
        saved += common.min(second.len() - 1) / 4 * 4;
        // The second's full chunks are kept unless the first's entry already holds them all.
        let full = second.len() / 4 * 4;
        entries += 1 + usize::from(common < full || first.len() < full);
    }
    assert_eq!(metric(server.http, "prefix_hits_total"), 8);
    assert_eq!(
        metric(server.http, "prefix_cached_tokens_total"),
        saved as u64
    );
    assert!(metric(server.http, "prefill_chunks_total") > 16);
    // The prompts' entries, 16 KiB each, held within the 1 MiB budget.
    assert!(entries > 8, "{entries}");
    assert_eq!(metric(server.http, "prefix_cache_entries"), entries as u64);
    assert_eq!(
        metric(server.http, "prefix_cache_bytes"),
        entries as u64 * 16384
    );
    // Past the cache: the protocol's error, not a wrong answer.
    let (status, said) = generate(server.http, &[1; 33]);
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("1 to 32 tokens"), "{said}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
