//! Generation against the real CPU plugin: a tiny llama exported by JAX as prefill, insert and
//! decode (tests/data/exported/generate, generate_model.py) served by a `Generator`, every
//! greedy generation equal to JAX's token for token with many requests sharing the decode
//! slots, and streams cancelled, refused and sampled.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pjrt_actors::generate::{
    Finish, GenerateRequest, GenerationModel, Generator, GeneratorConfig, Sampling, TokenEvent,
};
use pjrt_actors::{Client, Error};
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exported/generate")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data().join(name)).unwrap()
}

pub(crate) fn load_model(client: &Client) -> GenerationModel {
    let (p8, p16) = (read("prefill_8.exported"), read("prefill_16.exported"));
    GenerationModel::load(
        client,
        &[&p16, &p8],
        &read("insert.exported"),
        &read("decode.exported"),
        Some(&read("weights.safetensors")),
    )
    .unwrap()
}

/// A prompt and JAX's greedy tokens for it.
pub(crate) type Case = (Vec<i32>, Vec<i32>);

/// JAX's greedy generations, the stop token and the token limit.
pub(crate) fn greedy_cases() -> (Vec<Case>, i32, usize) {
    let v: Value = serde_json::from_slice(&read("greedy.json")).unwrap();
    let ints = |v: &Value| -> Vec<i32> {
        (v.as_array().unwrap().iter())
            .map(|t| t.as_i64().unwrap() as i32)
            .collect()
    };
    let cases = (v["cases"].as_array().unwrap().iter())
        .map(|c| (ints(&c["prompt"]), ints(&c["tokens"])))
        .collect();
    (
        cases,
        v["stop"].as_i64().unwrap() as i32,
        v["max_new"].as_u64().unwrap() as usize,
    )
}

fn request(prompt: &[i32], stop: i32, max_new: usize) -> GenerateRequest {
    GenerateRequest {
        stop_tokens: vec![stop],
        ..GenerateRequest::greedy(prompt.to_vec(), max_new)
    }
}

#[test]
fn every_greedy_generation_equals_jaxs_with_requests_sharing_the_slots() {
    let client = Client::open().unwrap();
    let model = load_model(&client);
    assert_eq!((model.slots(), model.vocab()), (4, 64));
    assert_eq!(model.buckets(), vec![8, 16]);
    assert_eq!(model.donates_cache(), (true, true));
    let generator = Generator::start(model, GeneratorConfig::default()).unwrap();
    let (cases, stop, max_new) = greedy_cases();
    assert_eq!(cases.len(), 64);
    // All at once: 64 requests through 4 slots, joining and leaving between steps.
    let streams: Vec<_> = (cases.iter())
        .map(|(prompt, _)| generator.submit(request(prompt, stop, max_new)).unwrap())
        .collect();
    for ((prompt, want), stream) in cases.iter().zip(streams) {
        let (got, finish) = stream.collect_blocking().unwrap();
        assert_eq!(&got, want, "prompt {prompt:?}");
        let expected = match want.last() == Some(&stop) {
            true => Finish::Stop,
            false => Finish::Length,
        };
        assert_eq!(finish, expected, "prompt {prompt:?}");
    }
    let stats = generator.stats();
    let tokens: usize = cases.iter().map(|(_, t)| t.len()).sum();
    assert_eq!(stats.tokens, tokens as u64);
    assert_eq!((stats.requests, stats.prefills), (64, 64));
    // Slots were shared: more than one busy per step on average.
    assert!(stats.busy_slot_steps > 2 * stats.decode_steps, "{stats:?}");
    // One at a time gives the same tokens.
    for (prompt, want) in cases.iter().take(4) {
        let (got, _) = generator.generate(request(prompt, stop, max_new)).unwrap();
        assert_eq!(&got, want);
    }
}

#[test]
fn a_dropped_stream_frees_its_slot_and_bad_requests_are_refused() {
    let client = Client::open().unwrap();
    let generator = Generator::start(load_model(&client), GeneratorConfig::default()).unwrap();
    let (cases, stop, max_new) = greedy_cases();
    // Four long runs fill the slots; each is dropped after its first token.
    for (prompt, _) in cases.iter().take(4) {
        let mut s = generator
            .submit(GenerateRequest::greedy(prompt.clone(), 10_000))
            .unwrap();
        assert!(matches!(s.next_blocking(), Some(Ok(TokenEvent::Token(_)))));
    }
    // A request behind them still runs: the dropped streams' slots were freed.
    let (prompt, want) = &cases[5];
    let (got, _) = generator.generate(request(prompt, stop, max_new)).unwrap();
    assert_eq!(&got, want);
    // A cancelled stream ends `Cancelled`.
    let mut s = generator
        .submit(GenerateRequest::greedy(vec![1, 2, 3], 10_000))
        .unwrap();
    assert!(matches!(s.next_blocking(), Some(Ok(TokenEvent::Token(_)))));
    s.cancel();
    let mut last = None;
    while let Some(e) = s.next_blocking() {
        last = Some(e.unwrap());
    }
    assert_eq!(last, Some(TokenEvent::Done(Finish::Cancelled)));
    // A deadline ends a sequence with what it has.
    let r = GenerateRequest {
        deadline: Some(Instant::now() + Duration::from_millis(30)),
        ..GenerateRequest::greedy(vec![3, 4], 1_000_000)
    };
    let (got, finish) = generator.generate(r).unwrap();
    assert_eq!(finish, Finish::Deadline);
    assert!(!got.is_empty() && got.len() < 1_000_000);
    // Refused at once.
    let refused = |r: GenerateRequest| generator.submit(r).err().unwrap();
    assert!(matches!(
        refused(GenerateRequest::greedy(vec![], 4)),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        refused(GenerateRequest::greedy(vec![1; 17], 4)),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        refused(GenerateRequest::greedy(vec![1], 0)),
        Error::InvalidArgument(_)
    ));
    // Ids outside the vocabulary of 64 (the embedding's gather would clamp them).
    for ids in [vec![64], vec![1, -1]] {
        assert!(matches!(
            refused(GenerateRequest::greedy(ids, 4)),
            Error::InvalidArgument(_)
        ));
    }
    let hot = GenerateRequest {
        sampling: Sampling::Random {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 1,
        },
        ..GenerateRequest::greedy(vec![1], 4)
    };
    assert!(matches!(refused(hot), Error::InvalidArgument(_)));
}

#[test]
fn a_seed_repeats_its_sampled_tokens_and_max_sequence_ends_a_sequence() {
    let client = Client::open().unwrap();
    let config = GeneratorConfig {
        max_sequence: Some(20),
        ..Default::default()
    };
    let generator = Generator::start(load_model(&client), config).unwrap();
    let sampled = |seed| {
        let r = GenerateRequest {
            sampling: Sampling::Random {
                temperature: 1.5,
                top_k: 20,
                top_p: 0.95,
                seed,
            },
            ..GenerateRequest::greedy(vec![5, 6, 7], 12)
        };
        generator.generate(r).unwrap().0
    };
    assert_eq!(sampled(1), sampled(1));
    assert!((2..8).any(|s| sampled(s) != sampled(1)));
    assert!(sampled(1).iter().all(|&t| (0..64).contains(&t)));
    // A prompt of 15 and a cache of 20 positions: the sequence stops at position 20.
    let (got, finish) = generator
        .generate(GenerateRequest::greedy(vec![9; 15], 100))
        .unwrap();
    assert_eq!(finish, Finish::CacheFull);
    assert_eq!(got.len(), 20 - 15 + 1);
}
