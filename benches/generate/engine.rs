//! The generation engine's workloads on tests/data/exported/generate_bench (width 128, four
//! blocks, 8 slots, a 1024-position cache; prefill buckets 64 and 1024, extend chunks 32 and 64):
//! continuous against static batching under long-tailed outputs arriving at random; the longest
//! stall of running sequences while a long prompt is admitted, chunked against whole; and time
//! to first token of a prompt whose first 90% is a cached prefix, against the cache off.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pjrt_actors::Client;
use pjrt_actors::generate::{
    GenerateRequest, GenerationModel, Generator, GeneratorConfig, TokenEvent, TokenRng,
};
use serde_json::{Value, json};

use crate::support::{percentile_us, round3};

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exported/generate_bench")
}

const VOCAB: i32 = 256;
const POSITIONS: usize = 1024;

fn start(client: &Client, config: GeneratorConfig) -> Generator {
    let read = |n: &str| std::fs::read(folder().join(n)).unwrap();
    let weights = read("weights.safetensors");
    let (p64, p1024) = (read("prefill_64.exported"), read("prefill_1024.exported"));
    let (e32, e64) = (read("extend_32.exported"), read("extend_64.exported"));
    let model = GenerationModel::load(
        client,
        &[&p64, &p1024],
        &read("insert.exported"),
        &read("decode.exported"),
        Some(&weights),
    )
    .and_then(|m| m.with_extends(client, &[&e32, &e64], Some(&weights)))
    .unwrap();
    assert_eq!((model.slots(), model.cache_length()), (8, Ok(POSITIONS)));
    Generator::start(model, config).unwrap()
}

fn random_prompt(rng: &mut TokenRng, len: usize) -> Vec<i32> {
    (0..len)
        .map(|_| 1 + (rng.next_f64() * (VOCAB - 1) as f64) as i32)
        .collect()
}

/// Every token's arrival, and the first token's, for one request.
fn arrivals(stream: pjrt_actors::generate::TokenStream) -> Vec<Instant> {
    let mut stream = stream;
    let mut at = Vec::new();
    while let Some(event) = stream.next_blocking() {
        match event.unwrap() {
            TokenEvent::Token(_) => at.push(Instant::now()),
            TokenEvent::Done(_) => break,
            TokenEvent::Logprobs(_) => {}
        }
    }
    at
}

/// 64 requests with prompts of 8 to 64 tokens and long-tailed outputs (four in five of 4 to
/// 32 tokens, one in five of 200 to 440), arriving every `gap` on average (exponential), on
/// `g`: (tokens/s, p99 request latency in ms).
fn long_tailed(g: &Generator, gap: Duration, seed: u64) -> (f64, f64) {
    let mut rng = TokenRng::new(seed);
    let plan: Vec<(Vec<i32>, usize, Duration)> = (0..64)
        .map(|_| {
            let len = 8 + (rng.next_f64() * 56.0) as usize;
            let tokens = match rng.next_f64() < 0.8 {
                true => 4 + (rng.next_f64() * 28.0) as usize,
                false => 200 + (rng.next_f64() * 240.0) as usize,
            };
            let wait = gap.mul_f64(-(1.0 - rng.next_f64()).ln());
            (random_prompt(&mut rng, len), tokens, wait)
        })
        .collect();
    let start = Instant::now();
    let (latencies, tokens): (Vec<f64>, Vec<usize>) = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (prompt, tokens, wait) in &plan {
            std::thread::sleep(*wait);
            let stream = g
                .submit(GenerateRequest::greedy(prompt.clone(), *tokens))
                .unwrap();
            let submitted = Instant::now();
            handles.push(scope.spawn(move || {
                let (got, _) = stream.collect_blocking().unwrap();
                (submitted.elapsed().as_secs_f64() * 1e3, got.len())
            }));
        }
        handles.into_iter().map(|h| h.join().unwrap()).unzip()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut latencies = latencies;
    let p99 = percentile_us(&mut latencies, 99.0);
    (tokens.iter().sum::<usize>() as f64 / seconds, p99)
}

/// Four sequences running, then a prompt of 960 tokens (30 chunks of 32) admitted: the longest gap (ms) between
/// a running sequence's tokens from its submit to its first token, and its time to first token.
fn stall(g: &Generator, seed: u64) -> (f64, f64) {
    let mut rng = TokenRng::new(seed);
    let running: Vec<_> = (0..4)
        .map(|_| {
            let prompt = random_prompt(&mut rng, 16);
            g.submit(GenerateRequest::greedy(prompt, 300)).unwrap()
        })
        .collect();
    std::thread::scope(|scope| {
        let readers: Vec<_> = (running.into_iter())
            .map(|s| scope.spawn(move || arrivals(s)))
            .collect();
        // Let them reach their steady steps.
        std::thread::sleep(Duration::from_millis(100));
        let long = random_prompt(&mut rng, 960);
        let submitted = Instant::now();
        let first = arrivals(g.submit(GenerateRequest::greedy(long, 1)).unwrap())[0];
        let mut worst = Duration::ZERO;
        for r in readers {
            let at = r.join().unwrap();
            for w in at.windows(2) {
                if w[1] > submitted && w[0] < first {
                    worst = worst.max(w[1] - w[0]);
                }
            }
        }
        (
            worst.as_secs_f64() * 1e3,
            (first - submitted).as_secs_f64() * 1e3,
        )
    })
}

/// Time to first token (ms) of an 896-token system prompt and a 60-token question, on an idle
/// engine; the first token, to check against the cache off.
fn ttft(g: &Generator, system: &[i32], rng: &mut TokenRng) -> (f64, i32, usize) {
    let mut prompt = system.to_vec();
    prompt.extend(random_prompt(rng, 60));
    let submitted = Instant::now();
    let mut stream = g.submit(GenerateRequest::greedy(prompt, 1)).unwrap();
    let Some(Ok(TokenEvent::Token(t))) = stream.next_blocking() else {
        panic!("a token")
    };
    let ms = submitted.elapsed().as_secs_f64() * 1e3;
    (ms, t, stream.cached_tokens())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the three workloads; prints their tables and returns their JSON fields.
pub fn run(client: &Client, settle: impl Fn()) -> Value {
    let off = GeneratorConfig {
        prefix_cache_bytes: 0,
        ..Default::default()
    };
    // Continuous against static, the same arrivals; three interleaved runs, the median each.
    let continuous = start(client, off.clone());
    let fixed = start(
        client,
        GeneratorConfig {
            continuous: false,
            ..off.clone()
        },
    );
    let gap = Duration::from_millis(2);
    long_tailed(&continuous, gap, 1);
    long_tailed(&fixed, gap, 1);
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for seed in 0..3 {
        settle();
        c.push(long_tailed(&continuous, gap, 10 + seed));
        settle();
        s.push(long_tailed(&fixed, gap, 10 + seed));
    }
    let mid = |mut runs: Vec<(f64, f64)>| {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        runs[runs.len() / 2]
    };
    let ((c_rate, c_p99), (s_rate, s_p99)) = (mid(c), mid(s));
    drop(fixed);

    // The stall: chunks of 32 against the prompt prefilled whole (a chunk as long as the cache).
    let chunked = start(
        client,
        GeneratorConfig {
            prefill_chunk: Some(32),
            ..off.clone()
        },
    );
    let whole = start(
        client,
        GeneratorConfig {
            prefill_chunk: Some(POSITIONS),
            ..off.clone()
        },
    );
    stall(&chunked, 1);
    stall(&whole, 1);
    let (mut sc, mut sw, mut tc, mut tw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for seed in 0..5 {
        settle();
        let (gap, first) = stall(&chunked, 20 + seed);
        sc.push(gap);
        tc.push(first);
        settle();
        let (gap, first) = stall(&whole, 20 + seed);
        sw.push(gap);
        tw.push(first);
    }
    let (stall_chunked, stall_whole) = (median(sc), median(sw));
    let (first_chunked, first_whole) = (median(tc), median(tw));
    drop((chunked, whole));

    // A cached system prompt: the cache on (64 MiB) against off; prompts prefilled whole when
    // they fit the 1024 bucket, their rest past a cached prefix in one chunk of 64.
    let cached = start(client, GeneratorConfig::default());
    let mut rng = TokenRng::new(7);
    let system = random_prompt(&mut rng, 896);
    ttft(&cached, &system, &mut rng);
    ttft(&continuous, &system, &mut rng);
    let (mut hit, mut miss) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        settle();
        let seed = rng.next_f64().to_bits();
        let (ms, token, saved) = ttft(&cached, &system, &mut TokenRng::new(seed));
        assert_eq!(saved, 896, "the system prompt is cached");
        hit.push(ms);
        settle();
        let (ms_off, token_off, _) = ttft(&continuous, &system, &mut TokenRng::new(seed));
        assert_eq!(
            token, token_off,
            "the same first token from a cached prefix"
        );
        miss.push(ms_off);
    }
    let (hit, miss) = (median(hit), median(miss));

    println!("{}", "-".repeat(72));
    println!(
        "generate_bench (8 slots, 1024 positions): 64 requests, outputs long-tailed, arriving every {gap:?} on average"
    );
    println!("{:>34} {:>12} {:>12}", "", "tokens/s", "p99 ms");
    println!("{:>34} {c_rate:>12.0} {c_p99:>12.1}", "continuous");
    println!("{:>34} {s_rate:>12.0} {s_p99:>12.1}", "static");
    println!("a 960-token prompt admitted beside 4 running sequences (median of 5):");
    println!("{:>34} {:>12} {:>12}", "", "max stall ms", "its TTFT ms");
    println!(
        "{:>34} {stall_chunked:>12.2} {first_chunked:>12.2}",
        "chunks of 32"
    );
    println!("{:>34} {stall_whole:>12.2} {first_whole:>12.2}", "whole");
    println!("an 896-token cached system prompt and a 60-token question, idle (median of 9):");
    println!("{:>34} {hit:>12.2}", "TTFT ms, prefix cached");
    println!("{:>34} {miss:>12.2}", "TTFT ms, cache off");
    json!({
        "continuous_tokens_per_s": c_rate.round(),
        "static_tokens_per_s": s_rate.round(),
        "continuous_vs_static_tokens_per_s": round3(c_rate / s_rate),
        "continuous_vs_static_p99": round3(c_p99 / s_p99),
        "chunked_max_stall_ms": round3(stall_chunked),
        "whole_max_stall_ms": round3(stall_whole),
        "chunked_max_stall_ratio": round3(stall_chunked / stall_whole),
        "chunked_ttft_vs_whole": round3(first_chunked / first_whole),
        "prefix_hit_ttft_ms": round3(hit),
        "prefix_off_ttft_ms": round3(miss),
        "prefix_hit_ttft_ratio": round3(hit / miss),
    })
}
