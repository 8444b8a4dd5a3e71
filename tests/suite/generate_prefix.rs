//! Chunked prefill and the prefix cache against the real CPU plugin: the tiny llama of
//! generate.rs with its extend exports (chunks of 4 and 8), every greedy generation equal to
//! JAX's whole-prefill one, for prompts prefilled whole, in chunks, from a cached prefix, and
//! after the cache has evicted; the cache's bytes are on the device and bounded.

use std::time::{Duration, Instant};

use pjrt_actors::generate::{GenerateRequest, GenerationModel, Generator, GeneratorConfig};
use pjrt_actors::{Client, Error};

use super::generate::{Case, greedy_cases, load_model, long_cases, read};

fn with_extends(client: &Client) -> GenerationModel {
    let (e4, e8) = (read("extend_4.exported"), read("extend_8.exported"));
    load_model(client)
        .with_extends(client, &[&e8, &e4], Some(&read("weights.safetensors")))
        .unwrap()
}

/// The pairs of prompts past the largest bucket, the second sharing the first's first 90%.
fn long_pairs() -> Vec<(Case, Case)> {
    let cases = long_cases();
    assert_eq!(cases.len(), 16);
    cases
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

/// A greedy request for `prompt` with greedy.json's stop token and token limit (read once).
fn request(prompt: &[i32]) -> GenerateRequest {
    static LIMITS: std::sync::OnceLock<(i32, usize)> = std::sync::OnceLock::new();
    let &(stop, max_new) = LIMITS.get_or_init(|| {
        let (_, stop, max_new) = greedy_cases();
        (stop, max_new)
    });
    super::generate::request(prompt, stop, max_new)
}

/// Generates `case`'s prompt and checks JAX's tokens; the tokens a cached prefix gave.
fn check(g: &Generator, (prompt, want): &Case) -> usize {
    let mut stream = g.submit(request(prompt)).unwrap();
    let mut got = Vec::new();
    while let Some(event) = stream.next_blocking() {
        match event.unwrap() {
            pjrt_actors::generate::TokenEvent::Token(t) => got.push(t),
            pjrt_actors::generate::TokenEvent::Done(_) => break,
            _ => {}
        }
    }
    assert_eq!(&got, want, "prompt {prompt:?}");
    stream.cached_tokens()
}

#[test]
fn prompts_prefilled_whole_and_in_chunks_give_jaxs_tokens() {
    let client = Client::open().unwrap();
    let model = with_extends(&client);
    assert_eq!(model.extend_sizes(), vec![4, 8]);
    let (short, _, _) = greedy_cases();
    let long: Vec<Case> = (long_pairs().into_iter())
        .flat_map(|(a, b)| [a, b])
        .collect();
    let all: Vec<&Case> = short.iter().chain(&long).collect();
    // Without a configured chunk, prompts past the buckets (16) run in chunks of 8; with a
    // chunk of 4, every prompt past 4. The prefix cache off: every prompt computed.
    for chunk in [None, Some(4)] {
        let config = GeneratorConfig {
            prefill_chunk: chunk,
            prefix_cache_bytes: 0,
            ..Default::default()
        };
        let g = Generator::start(with_extends(&client), config).unwrap();
        assert_eq!(g.max_prompt(), 32);
        // All at once: chunks of one prompt interleaved with other sequences' decode steps.
        let streams: Vec<_> = (all.iter())
            .map(|(p, _)| g.submit(request(p)).unwrap())
            .collect();
        for ((prompt, want), stream) in all.iter().zip(streams) {
            let (got, _) = stream.collect_blocking().unwrap();
            assert_eq!(&got, want, "prompt {prompt:?}, chunk {chunk:?}");
        }
        let s = g.stats();
        // Extend runs: past the buckets, chunks of 8 after a first one prefill takes (its
        // bucket 8 fits the chunk); past a chunk of 4, every chunk (no bucket is that short).
        let extends = |chunk: usize, from: usize, first: u64| -> u64 {
            (all.iter())
                .filter(|(p, _)| p.len() > from)
                .map(|(p, _)| p.len().div_ceil(chunk) as u64 - first)
                .sum()
        };
        let want_chunks = match chunk {
            None => extends(8, 16, 1),
            Some(c) => extends(c, c, 0),
        };
        assert_eq!((s.chunks, s.prefix_hits), (want_chunks, 0), "{s:?}");
        assert!(s.busy_slot_steps > 2 * s.decode_steps, "{s:?}");
    }
    // Past the cache, refused at once, naming the bound.
    let g = Generator::start(with_extends(&client), GeneratorConfig::default()).unwrap();
    let too_long = g.submit(GenerateRequest::greedy(vec![1; 33], 4));
    assert!(
        matches!(&too_long, Err(Error::InvalidArgument(m)) if m.contains("1 to 32 tokens")),
        "{:?}",
        too_long.err()
    );
    // Without extend, a configured chunk is refused, and the buckets bound a prompt.
    let bare = GeneratorConfig {
        prefill_chunk: Some(4),
        ..Default::default()
    };
    let refused = Generator::start(load_model(&client), bare).err();
    assert!(
        matches!(&refused, Some(Error::InvalidArgument(m)) if m.contains("extend")),
        "{refused:?}"
    );
    let g = Generator::start(load_model(&client), GeneratorConfig::default()).unwrap();
    assert_eq!(g.max_prompt(), 16);
    assert!(g.submit(GenerateRequest::greedy(vec![1; 17], 4)).is_err());
}

#[test]
fn a_prompt_sharing_a_cached_prefix_starts_from_it_and_gives_jaxs_tokens() {
    let client = Client::open().unwrap();
    let config = GeneratorConfig {
        prefill_chunk: Some(4),
        ..Default::default()
    };
    let g = Generator::start(with_extends(&client), config).unwrap();
    let mut saved = 0;
    for (first, second) in long_pairs() {
        assert_eq!(check(&g, &first), 0, "nothing cached yet for {:?}", first.0);
        let common = (first.0.iter().zip(&second.0))
            .take_while(|(a, b)| a == b)
            .count();
        // The longest chunk-aligned prefix both share, leaving a token of the second to compute.
        let want = common.min(second.0.len() - 1) / 4 * 4;
        assert!(
            want >= 12,
            "the pair shares 90%: {common} of {}",
            second.0.len()
        );
        assert_eq!(check(&g, &second), want, "prompt {:?}", second.0);
        saved += want as u64;
    }
    let s = g.stats();
    assert_eq!((s.prefix_hits, s.prefix_tokens), (8, saved), "{s:?}");
    // The same prompt again: every chunk but its last token's cached.
    let (first, _) = &long_pairs()[0];
    assert_eq!(check(&g, first), (first.0.len() - 1) / 4 * 4);
}

/// The default memory space's bytes once `want` holds, or after 10 s (the engine drops a
/// request's temporaries just after its last token is sent).
fn settled(client: &Client, want: impl Fn(u64) -> bool) -> u64 {
    let memory = client.devices()[0].default_memory_space().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = memory.bytes_held();
        if want(held) || Instant::now() > deadline {
            return held;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The default memory space's bytes once two reads 50 ms apart agree.
fn steady(client: &Client) -> u64 {
    let memory = client.devices()[0].default_memory_space().unwrap();
    let mut last = memory.bytes_held();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        match memory.bytes_held() {
            now if now == last => return now,
            now => last = now,
        }
    }
}

#[test]
fn the_prefix_cache_evicts_the_least_recent_within_its_bytes_held_on_the_device() {
    let client = Client::open().unwrap();
    let before = steady(&client);
    let model = with_extends(&client);
    let entry = model.entry_bytes() as u64;
    assert_eq!(entry, 2 * 2 * 32 * 2 * 16 * 4, "k and v: f32[2, 32, 2, 16]");
    let config = GeneratorConfig {
        prefill_chunk: Some(4),
        prefix_cache_bytes: 2 * entry as usize,
        ..Default::default()
    };
    let g = Generator::start(model, config).unwrap();
    let idle = steady(&client);
    let pairs = long_pairs();
    // Three prompts into room for two: the first goes.
    for (first, _) in &pairs[..3] {
        check(&g, first);
    }
    let s = g.stats();
    assert_eq!(
        (s.prefix_entries, s.prefix_bytes, s.prefix_evictions),
        (2, 2 * entry, 1),
        "{s:?}"
    );
    // What the cache holds is on the device, counted in the memory space.
    assert_eq!(
        settled(&client, |h| h == idle + 2 * entry),
        idle + 2 * entry
    );
    // The evicted prefix is computed again; the kept ones are found. JAX's tokens either way.
    assert_eq!(check(&g, &pairs[0].1), 0, "evicted: no hit");
    assert!(check(&g, &pairs[2].1) >= 12, "kept: a hit");
    let s = g.stats();
    assert_eq!((s.prefix_hits, s.prefix_entries), (1, 2), "{s:?}");
    // The generator gone, the cache's bytes are given back.
    drop(g);
    assert_eq!(settled(&client, |h| h == before), before);
}
