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

pub(crate) fn read(name: &str) -> Vec<u8> {
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

/// The cases of greedy.json's list `key`: prompts and JAX's greedy tokens.
fn cases_of(v: &Value, key: &str) -> Vec<Case> {
    let ints = |v: &Value| -> Vec<i32> {
        (v.as_array().unwrap().iter())
            .map(|t| t.as_i64().unwrap() as i32)
            .collect()
    };
    (v[key].as_array().unwrap().iter())
        .map(|c| (ints(&c["prompt"]), ints(&c["tokens"])))
        .collect()
}

/// JAX's greedy generations, the stop token and the token limit.
pub(crate) fn greedy_cases() -> (Vec<Case>, i32, usize) {
    let v: Value = serde_json::from_slice(&read("greedy.json")).unwrap();
    (
        cases_of(&v, "cases"),
        v["stop"].as_i64().unwrap() as i32,
        v["max_new"].as_u64().unwrap() as usize,
    )
}

/// JAX's greedy generations for the prompts past the largest bucket (`long_cases`), each
/// prefilled whole by JAX.
pub(crate) fn long_cases() -> Vec<Case> {
    cases_of(
        &serde_json::from_slice(&read("greedy.json")).unwrap(),
        "long_cases",
    )
}

pub(crate) fn request(prompt: &[i32], stop: i32, max_new: usize) -> GenerateRequest {
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
    // Four long runs fill the slots; each is dropped after its first token. A prompt of one
    // token runs 31 steps before the cache ends it: the drop, not the cache, must free it.
    for first in 1..5 {
        let mut s = generator
            .submit(GenerateRequest::greedy(vec![first], 10_000))
            .unwrap();
        assert!(matches!(s.next_blocking(), Some(Ok(TokenEvent::Token(_)))));
    }
    // Each drop ended its sequence as cancelled and freed its slot.
    let deadline = Instant::now() + Duration::from_secs(10);
    while generator.stats().cancelled < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = generator.stats();
    assert_eq!((stats.cancelled, stats.running), (4, 0), "{stats:?}");
    assert!(stats.tokens < 4 * 31, "{stats:?}");
    // Each first token was timed: the histogram counts them, and its quantiles can be read.
    assert_eq!(stats.first_token.count(), 4, "{stats:?}");
    let (p50, p99) = (
        stats.first_token.quantile(0.5),
        stats.first_token.quantile(0.99),
    );
    assert!(p50.is_some() && p50 <= p99, "{stats:?}");
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
    // A deadline ends a sequence with what it has, before the cache's 30 positions would.
    let r = GenerateRequest {
        deadline: Some(Instant::now() + Duration::from_millis(3)),
        ..GenerateRequest::greedy(vec![3, 4], 1_000_000)
    };
    let (got, finish) = generator.generate(r).unwrap();
    assert_eq!(finish, Finish::Deadline);
    assert!(got.len() < 30, "{got:?}");
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

/// The cache's length is read from decode's cache shapes (32 positions here): with no
/// `max_sequence` a sequence ends at the cache's end (XLA would clamp the write index past it,
/// and every later token differ from JAX's), and one past the cache, or 0, is refused at start.
#[test]
fn the_cache_length_comes_from_its_shapes_and_no_sequence_runs_past_it() {
    let client = Client::open().unwrap();
    let model = load_model(&client);
    assert_eq!(model.cache_length(), Ok(32));
    for (bad, says) in [
        (Some(33), "past the cache, which holds 32 positions"),
        (Some(0), "max_sequence is 0"),
    ] {
        let config = GeneratorConfig {
            max_sequence: bad,
            ..Default::default()
        };
        match Generator::start(load_model(&client), config) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{bad:?}: {:?}", other.map(|_| ())),
        }
    }
    let no_queue = GeneratorConfig {
        max_queued: 0,
        ..Default::default()
    };
    assert!(matches!(
        Generator::start(load_model(&client), no_queue),
        Err(Error::InvalidArgument(_))
    ));
    let generator = Generator::start(model, GeneratorConfig::default()).unwrap();
    let (got, finish) = generator
        .generate(GenerateRequest::greedy(vec![5, 6, 7], 40))
        .unwrap();
    assert_eq!(finish, Finish::CacheFull);
    assert_eq!(got.len(), 32 - 3 + 1);
}

/// `max_queued` bounds requests waiting for a slot, not those a free slot takes: on an idle
/// model with 4 slots and `max_queued` 1, a burst of 4 is taken whole (it was refused from the
/// second: 28 of 40 such bursts got 503), and a burst far past slots and queue is refused in part.
#[test]
fn max_queued_counts_only_requests_no_free_slot_takes() {
    let client = Client::open().unwrap();
    let config = GeneratorConfig {
        max_queued: 1,
        ..Default::default()
    };
    let generator = Generator::start(load_model(&client), config).unwrap();
    for _ in 0..3 {
        let burst: Vec<_> = (0..4)
            .map(|k| generator.submit(GenerateRequest::greedy(vec![k + 1], 4)))
            .collect();
        for s in burst {
            let (tokens, _) = s.unwrap().collect_blocking().unwrap();
            assert_eq!(tokens.len(), 4);
        }
    }
    let burst: Vec<_> = (0..12)
        .map(|k| generator.submit(GenerateRequest::greedy(vec![k + 1], 4)))
        .collect();
    let busy = (burst.iter())
        .filter(|s| matches!(s, Err(Error::Busy { .. })))
        .count();
    assert!(busy > 0 && busy <= 12 - 5, "{busy} of 12 refused");
}

/// The text model (tests/data/exported/generate_text: the same llama with a trained tokenizer,
/// prompt buckets 32 and 64, a 128-position cache): every prompt JAX recorded, completions and
/// rendered chats alike, gives JAX's tokens, all at once through the 4 slots. (The text itself
/// is checked by the CLI's and the server's tests.)
#[test]
fn the_text_models_recorded_prompts_give_jaxs_tokens() {
    let dir = data().join("../generate_text");
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let client = Client::open().unwrap();
    let (p32, p64) = (read("prefill_32.exported"), read("prefill_64.exported"));
    let model = GenerationModel::load(
        &client,
        &[&p32, &p64],
        &read("insert.exported"),
        &read("decode.exported"),
        Some(&read("weights.safetensors")),
    )
    .unwrap();
    let generator = Generator::start(model, GeneratorConfig::default()).unwrap();
    let v: Value = serde_json::from_slice(&read("text_cases.json")).unwrap();
    let ints = |v: &Value| -> Vec<i32> {
        (v.as_array().unwrap().iter())
            .map(|t| t.as_i64().unwrap() as i32)
            .collect()
    };
    let cases: Vec<Case> = (v["cases"].as_array().unwrap().iter())
        .filter(|c| c.get("stop").is_none())
        .map(|c| (ints(&c["prompt_ids"]), ints(&c["tokens"])))
        .collect();
    assert!(cases.len() >= 20 && cases.iter().any(|(p, _)| p.len() > 32));
    let streams: Vec<_> = (cases.iter())
        .map(|(prompt, _)| generator.submit(request(prompt, 0, 12)).unwrap())
        .collect();
    for (s, (prompt, want)) in streams.into_iter().zip(&cases) {
        let (got, _) = s.collect_blocking().unwrap();
        assert_eq!(&got, want, "{prompt:?}");
    }
}

/// A request whose client leaves while it waits for a slot is counted cancelled, as one that
/// leaves after its first token is (it left the queue uncounted: a client that gave up on a
/// busy server was invisible in `cancelled`). On the 4,096-position model, so that the four
/// running sequences cannot end on their own within the test.
#[test]
fn a_request_dropped_while_waiting_is_counted_cancelled() {
    let dir = data().join("../generate_long");
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let client = Client::open().unwrap();
    let (p8, p16) = (read("prefill_8.exported"), read("prefill_16.exported"));
    let model = GenerationModel::load(
        &client,
        &[&p8, &p16],
        &read("insert.exported"),
        &read("decode.exported"),
        Some(&read("weights.safetensors")),
    )
    .unwrap();
    let generator = Generator::start(model, GeneratorConfig::default()).unwrap();
    let mut running: Vec<_> = (1..5)
        .map(|first| (generator.submit(GenerateRequest::greedy(vec![first], 4000))).unwrap())
        .collect();
    for s in &mut running {
        assert!(matches!(s.next_blocking(), Some(Ok(TokenEvent::Token(_)))));
    }
    let waiting = generator
        .submit(GenerateRequest::greedy(vec![5], 10))
        .unwrap();
    assert_eq!(generator.stats().waiting, 1);
    drop(waiting);
    let deadline = Instant::now() + Duration::from_secs(10);
    while generator.stats().cancelled < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = generator.stats();
    assert_eq!(
        (stats.cancelled, stats.waiting, stats.running),
        (1, 0, 4),
        "{stats:?}"
    );
}
