//! Compiling arbitrary bytes on the real CPU plugin: a typed error or an executable, never a
//! crash of the process.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pjrt_actors::{Client, CompileOptions};

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::builder()
            .memory_cache_entries(0)
            .cpu_device_count(1)
            .open()
            .expect("run scripts/bootstrap first")
    })
}

fuzz_target!(|bytes: &[u8]| {
    let _ = client().compile_and_load(bytes, &CompileOptions::default());
});
