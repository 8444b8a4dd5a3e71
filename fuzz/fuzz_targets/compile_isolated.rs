//! Program text through the isolated compiler: mutations of a real StableHLO module, compiled
//! in worker processes. Whatever the compiler does with them, this process gets a typed error
//! or an executable: a crash must come back as `Error::CompilerCrashed`, never end the fuzzer.
//! Needs the worker: `cargo build --bin pjrt-actors-compile-worker` first, then
//! `PJRT_ACTORS_COMPILE_WORKER=target/debug/pjrt-actors-compile-worker cargo +nightly fuzz run
//! compile_isolated`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pjrt_actors::{Client, CompileOptions};

/// Where mutations start: a module that compiles, so most inputs get past the parser.
const SEED: &str = "module @m {\n  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n    %0 = stablehlo.add %a, %b : tensor<4xf32>\n    %1 = stablehlo.custom_call @TopK(%0) : (tensor<4xf32>) -> tensor<4xf32>\n    return %1 : tensor<4xf32>\n  }\n}\n";

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let builder = Client::builder()
            .memory_cache_entries(0)
            .cpu_device_count(1)
            .compile_threads(1)
            .compile_in_worker_if_found();
        builder.open().expect("run scripts/bootstrap first")
    })
}

fuzz_target!(|bytes: &[u8]| {
    // Splice the fuzzer's bytes into the seed at a point they choose.
    let at = bytes.first().map_or(0, |b| *b as usize * SEED.len() / 256);
    let mut program = SEED.as_bytes()[..at].to_vec();
    program.extend_from_slice(bytes.get(1..).unwrap_or_default());
    program.extend_from_slice(&SEED.as_bytes()[at..]);
    let _ = client().compile_and_load(&program, &CompileOptions::default());
});
