//! `pjrt-actors generate` end to end on JAX's prefill, insert and decode exports of a tiny
//! llama (tests/data/exported/generate): greedy tokens equal JAX's, printed as they come or as
//! one JSON object; sampling repeats with its seed; a bad prompt is one error line.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::error_line;
use serde_json::Value;

fn data(name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate");
    dir.join(name).display().to_string()
}

/// The compile cache every `generate` of this test process shares: each run compiles the same
/// three exports, and the disk cache makes all but the first a load.
fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("pjrt-actors-generate-cli-{}", std::process::id()))
}

fn generate(extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .env("PJRT_ACTORS_CACHE_DIR", cache_dir())
        .arg("generate")
        .args(["--prefill", &data("prefill_8.exported")])
        .args(["--prefill", &data("prefill_16.exported")])
        .args(["--insert", &data("insert.exported")])
        .args(["--decode", &data("decode.exported")])
        .args(["--params", &data("weights.safetensors")])
        .args(extra)
        .output()
        .unwrap()
}

fn joined(tokens: &[i64]) -> String {
    tokens
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn greedy_tokens_equal_jaxs_as_lines_and_as_json() {
    let greedy: Value =
        serde_json::from_slice(&std::fs::read(data("greedy.json")).unwrap()).unwrap();
    let (stop, max_new) = (greedy["stop"].to_string(), greedy["max_new"].to_string());
    let ints = |v: &Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap())
            .collect()
    };
    // Every recorded case as JSON; the first six as lines too.
    for (k, case) in greedy["cases"].as_array().unwrap().iter().enumerate() {
        let (prompt, want) = (ints(&case["prompt"]), ints(&case["tokens"]));
        let base = [
            "--prompt",
            &joined(&prompt),
            "--max-tokens",
            &max_new,
            "--stop",
            &stop,
        ];
        if k < 6 {
            let o = generate(&base);
            assert!(o.status.success(), "{}", error_line(&o));
            let lines: Vec<i64> = (String::from_utf8_lossy(&o.stdout).lines())
                .map(|l| l.parse().unwrap())
                .collect();
            assert_eq!(lines, want, "prompt {prompt:?}");
        }
        let o = generate(&[&base[..], &["--json"]].concat());
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(ints(&v["tokens"]), want);
        let finish = if want.last() == Some(&0) {
            "stop"
        } else {
            "length"
        };
        assert_eq!(v["finish"], finish);
    }
}

/// A prompt past the largest bucket (greedy.json's first long case), prefilled in chunks of 4
/// with the extend exports, gives JAX's whole-prefill tokens.
#[test]
fn extend_exports_and_a_chunk_prefill_a_long_prompt_as_jax_does() {
    let greedy: Value =
        serde_json::from_slice(&std::fs::read(data("greedy.json")).unwrap()).unwrap();
    let case = &greedy["long_cases"][0];
    let ints = |v: &Value| -> Vec<i64> {
        (v.as_array().unwrap().iter())
            .map(|t| t.as_i64().unwrap())
            .collect()
    };
    let (prompt, want) = (ints(&case["prompt"]), ints(&case["tokens"]));
    assert!(prompt.len() > 16, "past the largest bucket");
    let (e4, e8) = (data("extend_4.exported"), data("extend_8.exported"));
    let o = generate(&[
        "--extend",
        &e4,
        "--extend",
        &e8,
        "--prefill-chunk",
        "4",
        "--stop",
        "0",
        "--max-tokens",
        "12",
        "--json",
        "--prompt",
        &joined(&prompt),
    ]);
    assert!(o.status.success(), "{}", error_line(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ints(&v["tokens"]), want, "{prompt:?}");
}

#[test]
fn sampling_repeats_with_its_seed_and_bad_prompts_are_one_error_line() {
    let sampled = |seed: &str| {
        let o = generate(&[
            "--prompt",
            "5,6,7",
            "--max-tokens",
            "8",
            "--temperature",
            "1.2",
            "--top-k",
            "16",
            "--seed",
            seed,
            "--json",
        ]);
        assert!(o.status.success(), "{}", error_line(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["tokens"].clone()
    };
    assert_eq!(sampled("9"), sampled("9"));
    assert_eq!(sampled("9").as_array().unwrap().len(), 8);
    let o = generate(&["--prompt", &vec!["1"; 17].join(",")]);
    assert!(!o.status.success());
    assert!(
        error_line(&o).contains("1 to 16 tokens"),
        "{}",
        error_line(&o)
    );
    let o = generate(&["--prompt", "1", "--temperature", "0"]);
    assert!(!o.status.success());
    assert!(error_line(&o).contains("temperature"), "{}", error_line(&o));
}

/// Without `--max-sequence` the cache's own length (32, from decode's shapes) ends the
/// sequence: prompt [5, 6, 7] and 40 tokens asked give 30, ending `length`; one past the cache
/// is refused, and so is a model started without its weights, saying so.
#[test]
fn the_cache_length_bounds_generation_without_max_sequence() {
    let o = generate(&["--prompt", "5,6,7", "--max-tokens", "40", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 30, "{v}");
    assert_eq!(v["finish"], "length");
    let past = generate(&["--prompt", "5,6,7", "--max-sequence", "40"]);
    assert!(!past.status.success());
    assert!(
        error_line(&past).contains("past the cache"),
        "{}",
        error_line(&past)
    );
    let no_weights = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
        .arg("generate")
        .args(["--prefill", &data("prefill_8.exported")])
        .args(["--insert", &data("insert.exported")])
        .args(["--decode", &data("decode.exported")])
        .args(["--prompt", "5,6,7"])
        .output()
        .unwrap();
    assert!(!no_weights.status.success());
    assert!(
        error_line(&no_weights).contains("no weights were given"),
        "{}",
        error_line(&no_weights)
    );
}

/// `--model DIR` takes a folder as `serve` does (generation.json's stop tokens and limit are
/// the defaults); with its tokenizer, `--text` and `--chat` take a prompt as text and print
/// JAX's answer as text; a folder without one refuses them, naming the file.
#[test]
fn a_model_folder_with_a_tokenizer_answers_text_as_jax_does() {
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
            .env("PJRT_ACTORS_CACHE_DIR", cache_dir())
            .arg("generate")
            .args(args)
            .output()
            .unwrap()
    };
    let text_model = folder.join("generate_text").display().to_string();
    let cases: Value = serde_json::from_slice(
        &std::fs::read(folder.join("generate_text/text_cases.json")).unwrap(),
    )
    .unwrap();
    let mut seen = 0;
    for case in cases["cases"].as_array().unwrap() {
        let (flag, prompt) = match case["kind"].as_str().unwrap() {
            "completion" => ("--text", case["prompt"].as_str().unwrap()),
            // A chat of one user message: the CLI's --chat.
            "chat" if case["messages"].as_array().unwrap().len() == 1 => {
                ("--chat", case["messages"][0]["content"].as_str().unwrap())
            }
            _ => continue,
        };
        let o = run(&["--model", &text_model, flag, prompt]);
        assert!(o.status.success(), "{}", error_line(&o));
        let printed = String::from_utf8(o.stdout).unwrap();
        assert_eq!(
            printed,
            format!("{}\n", case["text"].as_str().unwrap()),
            "{case}"
        );
        let o = run(&["--model", &text_model, flag, prompt, "--json"]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["tokens"], case["tokens"], "{case}");
        assert_eq!(v["text"], case["text"], "{case}");
        assert_eq!(v["finish"], case["finish"], "{case}");
        seen += 1;
    }
    assert!(seen >= 16, "{seen}");
    // generation.json's cache length (32) and stop token bound a folder's run as the
    // exports' own: [5, 6, 7] asking 40 tokens gives 30, ending `length`.
    let ids_only = folder.join("generate").display().to_string();
    let o = run(&[
        "--model",
        &ids_only,
        "--prompt",
        "5,6,7",
        "--max-tokens",
        "40",
        "--json",
    ]);
    assert!(o.status.success(), "{}", error_line(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 30, "{v}");
    assert_eq!(v["finish"], "length");
    let o = run(&["--model", &ids_only, "--text", "hi"]);
    assert!(!o.status.success());
    assert!(
        error_line(&o).contains("tokenizer.json"),
        "{}",
        error_line(&o)
    );
}

mod served {
    //! The same model served: Triton's generate extension over HTTP (one answer, and server-sent
    //! events read by a plain HTTP client) and tritonclient's gRPC streaming client.

    use super::*;
    use crate::common::server::{Server, http, triton_script};
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;

    /// `lm`, the tiny llama whose 32-position cache JAX's generations were made with, and
    /// `long`, the same model with a 4096-position cache: a sequence there cannot end on its own
    /// within a test, so only a client's going frees its slot.
    fn serve() -> Server {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported");
        Server::start(&[
            "--generation".into(),
            format!("lm={}", dir.join("generate").display()),
            "--generation".into(),
            format!("long={}", dir.join("generate_long").display()),
        ])
        .unwrap()
    }

    /// A generation folder's exports and weights (generation.json aside).
    const EXPORTS: [&str; 5] = [
        "prefill_8.exported",
        "prefill_16.exported",
        "insert.exported",
        "decode.exported",
        "weights.safetensors",
    ];

    fn post(port: u16, path: &str, body: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        s
    }

    /// `POST /v2/models/{model}/generate` with `prompt` (and `extra` JSON fields): status, body.
    fn generated(port: u16, model: &str, body: &str) -> (u16, Value) {
        let (status, _, body) = http(
            port,
            "POST",
            &format!("/v2/models/{model}/generate"),
            &[],
            body.as_bytes(),
        );
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// A generation metric of model `long` (`pjrt_actors_generate_{name}`), from `/metrics`.
    pub fn generate_metric(port: u16, name: &str) -> u64 {
        let (status, _, body) = http(port, "GET", "/metrics", &[], b"");
        assert_eq!(status, 200);
        let prefix = format!("pjrt_actors_generate_{name}{{model=\"long\"}} ");
        let text = String::from_utf8(body).unwrap();
        (text.lines())
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
            .trim()
            .parse::<f64>()
            .unwrap() as u64
    }

    /// The cancelled count once it reaches `want`, or what it is after 10 s.
    fn cancelled_within(port: u16, want: u64) -> u64 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let n = generate_metric(port, "cancelled_total");
            if n >= want || std::time::Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn cases() -> Vec<(Vec<i64>, Vec<i64>)> {
        let greedy: Value =
            serde_json::from_slice(&std::fs::read(data("greedy.json")).unwrap()).unwrap();
        let ints = |v: &Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_i64().unwrap())
                .collect()
        };
        (greedy["cases"].as_array().unwrap().iter())
            .map(|c| (ints(&c["prompt"]), ints(&c["tokens"])))
            .collect()
    }

    #[test]
    fn http_generate_and_its_event_stream_give_jaxs_tokens() {
        let server = serve();
        for (prompt, want) in cases().iter() {
            let body = format!("{{\"input_ids\": {prompt:?}}}");
            let (status, json) = generated(server.http, "lm", &body);
            assert_eq!(status, 200, "{json}");
            assert_eq!(json["output_ids"], serde_json::json!(want), "{prompt:?}");
            // The event stream: one `data:` line per token, then the finish.
            let s = post(server.http, "/v2/models/lm/generate_stream", &body);
            let mut streamed = Vec::new();
            let mut finish = Value::Null;
            for line in BufReader::new(s).lines() {
                let line = line.unwrap();
                let Some(event) = line.strip_prefix("data: ") else {
                    continue;
                };
                let v: Value = serde_json::from_str(event).unwrap();
                streamed.extend(
                    v["output_ids"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t.as_i64().unwrap()),
                );
                if !v["finish_reason"].is_null() {
                    finish = v["finish_reason"].clone();
                }
            }
            assert_eq!(&streamed, want);
            assert_eq!(
                finish,
                if want.last() == Some(&0) {
                    "stop"
                } else {
                    "length"
                }
            );
        }
        // The generator's counters are on /metrics.
        let (_, _, page) = http(server.http, "GET", "/metrics", &[], b"");
        let page = String::from_utf8_lossy(&page);
        let tokens: f64 = (page.lines())
            .find_map(|l| l.strip_prefix("pjrt_actors_generate_tokens_total{model=\"lm\"} "))
            .unwrap_or_else(|| panic!("{page}"))
            .parse()
            .unwrap();
        let want: usize = cases().iter().map(|(_, t)| 2 * t.len()).sum();
        assert_eq!(tokens as usize, want);
        // Refused with the protocol's errors.
        let status = |model: &str, body: &str| generated(server.http, model, body).0;
        assert_eq!(status("lm", "{\"input_ids\": [1], \"bogus\": 2}"), 400);
        assert_eq!(status("lm", "{\"input_ids\": []}"), 400);
        assert_eq!(status("lm", "not json"), 400);
        assert_eq!(status("lm", "{\"input_ids\": [64]}"), 400);
        assert_eq!(status("other", "{\"input_ids\": [1]}"), 404);
        // A client that leaves mid-stream frees its slot: four long streams dropped (on `long`,
        // where each could run 4093 steps), each counted cancelled and its slot free, then a
        // request still finishes.
        let before = generate_metric(server.http, "cancelled_total");
        for _ in 0..4 {
            let s = post(
                server.http,
                "/v2/models/long/generate_stream",
                "{\"input_ids\": [5, 6, 7], \"max_tokens\": 100000, \"stop\": []}",
            );
            let mut line = String::new();
            let mut r = BufReader::new(s);
            while !line.starts_with("data: ") {
                line.clear();
                r.read_line(&mut line).unwrap();
            }
        }
        assert_eq!(cancelled_within(server.http, before + 4), before + 4);
        assert_eq!(generate_metric(server.http, "running"), 0);
        let (prompt, want) = &cases()[1];
        let body = format!("{{\"input_ids\": {prompt:?}}}");
        let (status, json) = generated(server.http, "lm", &body);
        assert_eq!(status, 200, "{json}");
        assert_eq!(json["output_ids"], serde_json::json!(want));
    }

    #[test]
    fn a_model_repository_serves_a_folder_of_generation_exports() {
        // A repository with the generation model's folder (copied: a link out is refused).
        let repo =
            std::env::temp_dir().join(format!("pjrt-actors-gen-repo-{}", std::process::id()));
        let folder = repo.join("chat");
        std::fs::create_dir_all(&folder).unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate");
        for f in EXPORTS.iter().chain(&["generation.json"]) {
            std::fs::copy(src.join(f), folder.join(f)).unwrap();
        }
        let server =
            Server::start(&["--model-repository".into(), repo.display().to_string()]).unwrap();
        let (prompt, want) = &cases()[2];
        let body = format!("{{\"input_ids\": {prompt:?}}}");
        let (status, json) = generated(server.http, "chat", &body);
        assert_eq!(status, 200, "{json}");
        assert_eq!(json["output_ids"], serde_json::json!(want));
        drop(server);
        // A FIFO in place of an export is refused at start, not waited on for ever.
        std::fs::remove_file(folder.join("decode.exported")).unwrap();
        let made = Command::new("mkfifo")
            .arg(folder.join("decode.exported"))
            .status()
            .unwrap();
        assert!(made.success());
        let err = Server::start(&["--model-repository".into(), repo.display().to_string()])
            .err()
            .expect("a FIFO is refused");
        assert!(err.contains("not a regular file (a FIFO)"), "{err}");
        let _ = std::fs::remove_dir_all(&repo);
    }

    /// A folder's optional files are absent or regular files: `generation.json` or the weights
    /// as a FIFO or a folder are refused at start, not skipped; and a config value that would
    /// break every request is refused naming its key and value.
    #[test]
    fn a_generation_folder_with_bad_files_or_values_is_refused_at_start() {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate");
        let folder =
            std::env::temp_dir().join(format!("pjrt-actors-gen-bad-{}", std::process::id()));
        let fresh = || {
            let _ = std::fs::remove_dir_all(&folder);
            std::fs::create_dir_all(&folder).unwrap();
            for f in EXPORTS {
                std::fs::copy(src.join(f), folder.join(f)).unwrap();
            }
        };
        let start = || {
            Server::start(&["--generation".into(), format!("lm={}", folder.display())])
                .err()
                .unwrap_or_else(|| "started".into())
        };
        for (file, kind) in [
            ("generation.json", "FIFO"),
            ("generation.json", "directory"),
            ("weights.safetensors", "FIFO"),
            ("weights.safetensors", "directory"),
        ] {
            fresh();
            let _ = std::fs::remove_file(folder.join(file));
            match kind {
                "FIFO" => assert!(
                    Command::new("mkfifo")
                        .arg(folder.join(file))
                        .status()
                        .unwrap()
                        .success()
                ),
                _ => std::fs::create_dir(folder.join(file)).unwrap(),
            }
            let err = start();
            assert!(
                err.contains(&format!("not a regular file (a {kind})")),
                "{file} as a {kind}: {err}"
            );
        }
        for (config, says) in [
            (r#"{"max_tokens": 0}"#, "`max_tokens` 0"),
            (r#"{"max_queued": 0}"#, "`max_queued` 0"),
            (r#"{"max_sequence": 0}"#, "`max_sequence` 0"),
            (
                r#"{"max_sequence": 40}"#,
                "max_sequence 40 is past the cache",
            ),
            (r#"{"stop_tokens": [-1]}"#, "`stop_tokens` has -1"),
            (r#"{"stop_tokens": [999]}"#, "`stop_tokens` has 999"),
        ] {
            fresh();
            std::fs::write(folder.join("generation.json"), config).unwrap();
            let err = start();
            assert!(err.contains(says), "{config}: {err}");
        }
        // No max_sequence at all: the cache's 32 positions bound a sequence (40 asked, 30 made).
        fresh();
        std::fs::write(folder.join("generation.json"), "{}").unwrap();
        let server =
            Server::start(&["--generation".into(), format!("lm={}", folder.display())]).unwrap();
        let (status, json) = generated(
            server.http,
            "lm",
            r#"{"input_ids": [5, 6, 7], "max_tokens": 40}"#,
        );
        assert_eq!(status, 200, "{json}");
        assert_eq!(json["output_ids"].as_array().unwrap().len(), 30, "{json}");
        assert_eq!(json["finish_reason"], "length");
        drop(server);
        let _ = std::fs::remove_dir_all(&folder);
    }

    #[test]
    fn tritonclients_grpc_stream_gets_a_response_per_token_and_a_closed_stream_frees_its_slot() {
        let server = serve();
        let summary = triton_script(
            "triton_generate.py",
            &[
                server.grpc.to_string(),
                data("greedy.json"),
                "64".into(),
                "long".into(),
            ],
        );
        assert_eq!(summary["ok"], true, "{summary}");
        assert_eq!(summary["streams"], 64, "{summary}");
        // The four streams the script's client left on `long` were cancelled by its going (each
        // could run 4093 steps), and no slot is held.
        assert_eq!(cancelled_within(server.http, 4), 4);
        assert_eq!(generate_metric(server.http, "running"), 0);
    }
}
