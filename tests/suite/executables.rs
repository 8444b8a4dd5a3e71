//! Executables at scale against the real CPU plugin: serialize and deserialize, compile
//! without loading, the memory and disk compile caches, single flight, the bounded queue and
//! cancellation.

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{add_f32x4, check_distinct, distinct_module, scratch_dir};
use pjrt_actors::{CancelToken, Client, CompileOptions, Error, TopologyDescription};

fn defaults() -> CompileOptions {
    CompileOptions::default()
}

#[test]
fn serialize_and_deserialize_round_trip() {
    let client = Client::open().unwrap();
    let (program, dims) = distinct_module(5, 3);
    let exe = client.compile_and_load(&program, &defaults()).unwrap();
    let bytes = client.serialize_executable(&exe).unwrap();
    let back = client.deserialize_executable(&bytes, None, &[]).unwrap();
    assert_ne!(back, exe);
    assert_eq!(back.fingerprint(), exe.fingerprint());
    assert_eq!(back.output_types(), exe.output_types());
    let d = &client.devices()[0];
    let n = dims.iter().product::<i64>() as usize;
    let a: Vec<f32> = (0..n).map(|k| k as f32 * 0.37 - 1.5).collect();
    let (x, y) = (d.put(&a, &dims).unwrap(), d.put(&a, &dims).unwrap());
    // Bit-identical results, including rounding.
    assert_eq!(
        exe.execute(&[&x, &y]).unwrap()[0].to_bytes().unwrap(),
        back.execute(&[&x, &y]).unwrap()[0].to_bytes().unwrap()
    );
    // Loaded onto other devices when asked.
    let on_two = client
        .deserialize_executable(
            &bytes,
            Some(&CompileOptions {
                devices: Some(vec![2]),
                ..defaults()
            }),
            &[],
        )
        .unwrap();
    assert_eq!(
        on_two.addressable_devices(),
        vec![client.devices()[2].clone()]
    );
    check_distinct(&on_two, &client.devices()[2], &dims, 3);
    // The async form, and a second client of the same plugin.
    let other = Client::open().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let again = rt
        .block_on(other.deserialize_executable_async(&bytes, None, &[]))
        .unwrap();
    check_distinct(&again, &other.devices()[0], &dims, 3);
}

#[test]
fn bad_serialized_bytes_never_reach_the_plugin() {
    let client = Client::open().unwrap();
    let exe = client.compile_and_load(add_f32x4(), &defaults()).unwrap();
    let bytes = exe.serialize().unwrap();
    let load = |b: &[u8]| client.deserialize_executable(b, None, &[]);
    assert!(matches!(load(&[]), Err(Error::Deserialize { .. })));
    assert!(matches!(
        load(b"garbage garbage garbage garbage garbage"),
        Err(Error::Deserialize { .. })
    ));
    for cut in [1, 8, 20, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            matches!(load(&bytes[..cut]), Err(Error::Deserialize { .. })),
            "cut at {cut}"
        );
    }
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 3] ^= 0xff;
    assert!(matches!(load(&flipped), Err(Error::Deserialize { .. })));
    let random: Vec<u8> = (0..bytes.len()).map(|i| (i * 31 % 251) as u8).collect();
    assert!(matches!(load(&random), Err(Error::Deserialize { .. })));
    // The same envelope from another plugin version: a clear error naming both.
    let mut envelope =
        pjrt_actors_core::compile::envelope::decode(&bytes, &identity_of(&bytes)).unwrap();
    envelope.identity = envelope.identity.replace("xla ", "xla 999-");
    let foreign = pjrt_actors_core::compile::envelope::encode(&envelope);
    match load(&foreign) {
        Err(Error::ForeignExecutable {
            serialized_by,
            this_client,
        }) => {
            assert!(serialized_by.contains("999-") && !this_client.contains("999-"));
        }
        other => panic!("{other:?}"),
    }
    // Nothing was loaded by the failures; the client still works.
    assert_eq!(client.live_executables().unwrap().len(), 1);
    assert!(load(&bytes).is_ok());
}

/// The identity recorded in an envelope (tests only: read the field back).
pub(crate) fn identity_of(bytes: &[u8]) -> String {
    match pjrt_actors_core::compile::envelope::decode(bytes, "") {
        Err(Error::ForeignExecutable { serialized_by, .. }) => serialized_by,
        other => panic!("{other:?}"),
    }
}

#[test]
fn compile_without_loading() {
    let client = Client::open().unwrap();
    let (program, dims) = distinct_module(7, 2);
    let unloaded = client
        .compile_request(&program)
        .options(&defaults())
        .compile()
        .unwrap();
    let loaded = client.compile_and_load(&program, &defaults()).unwrap();
    assert_eq!(unloaded.fingerprint(), loaded.fingerprint());
    assert_eq!(unloaded.output_types(), loaded.output_types());
    // Where the plugin has cost analysis (not the 0.115 CPU plugin), it travels with it; where
    // it has none, the unloaded one says so as the loaded one does (it was an empty list).
    match (loaded.cost_analysis(), unloaded.cost_analysis()) {
        (Ok(_), Ok(costs)) => assert!(costs.iter().any(|(k, _)| k == "flops"), "{costs:?}"),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string());
            assert!(matches!(
                b,
                pjrt_actors::Error::Pjrt {
                    code: pjrt_actors::PjrtCode::Unimplemented,
                    ..
                }
            ));
        }
        (a, b) => panic!("loaded {a:?}, unloaded {b:?}"),
    }
    // Loads on any client with the same topology, from its bytes too.
    let same = Client::open().unwrap();
    check_distinct(&unloaded.load(&same).unwrap(), &same.devices()[0], &dims, 2);
    check_distinct(
        &same
            .deserialize_executable(&unloaded.serialize(), None, &[])
            .unwrap(),
        &same.devices()[0],
        &dims,
        2,
    );
    // Against a topology: the client's own, also rebuilt from bytes (another topology:
    // `ahead_of_time::cpu_plugin`).
    let own = client.topology().unwrap();
    let from_bytes = TopologyDescription::from_serialized(own.serialized.clone());
    for topology in [&own, &from_bytes] {
        // What comes back is this program, compiled: it loads and computes.
        let compiled = client
            .compile_for_topology(&program, &defaults(), topology)
            .unwrap();
        assert_eq!(compiled.fingerprint(), unloaded.fingerprint());
        check_distinct(
            &compiled.load(&client).unwrap(),
            &client.devices()[0],
            &dims,
            2,
        );
    }
}

#[test]
fn the_memory_cache_answers_repeats() {
    let client = Client::open().unwrap();
    let a = client.compile_and_load(add_f32x4(), &defaults()).unwrap();
    let b = client.compile_and_load(add_f32x4(), &defaults()).unwrap();
    assert_eq!(a, b, "a hit is the same executable");
    // Different options are a different key.
    let c = client
        .compile_and_load(
            add_f32x4(),
            &CompileOptions {
                devices: Some(vec![1]),
                ..defaults()
            },
        )
        .unwrap();
    assert_ne!(a, c);
    let stats = client.compile_cache_stats();
    assert_eq!((stats.compiles, stats.memory_hits, stats.misses), (2, 1, 2));
}

#[test]
fn single_flight_compiles_once_for_concurrent_requests() {
    let client = Client::open().unwrap();
    let (program, dims) = distinct_module(11, 40);
    let barrier = Arc::new(Barrier::new(32));
    let handles: Vec<_> = (0..32)
        .map(|_| {
            let (client, program, barrier) = (client.clone(), program.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                client
                    .compile_and_load(&program, &CompileOptions::default())
                    .unwrap()
            })
        })
        .collect();
    let exes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(exes.iter().all(|e| *e == exes[0]));
    assert_eq!(client.compile_cache_stats().compiles, 1);
    check_distinct(&exes[0], &client.devices()[0], &dims, 40);
    // A failing compile: every concurrent caller gets the error, and it is not cached.
    let bad =
        "module { func.func @main() -> tensor<4xf32> { %0 = stablehlo.nonsense : tensor<4xf32> } }";
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (client, barrier) = (client.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                client
                    .compile_and_load(bad, &CompileOptions::default())
                    .unwrap_err()
            })
        })
        .collect();
    let errors: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(errors.iter().all(|e| matches!(e, Error::Pjrt { .. })));
    let before = client.compile_cache_stats().compiles;
    assert!(client.compile_and_load(bad, &defaults()).is_err());
    assert_eq!(
        client.compile_cache_stats().compiles,
        before + 1,
        "errors are not cached"
    );
}

#[test]
fn the_disk_cache_survives_clients_and_drops_bad_entries() {
    let dir = scratch_dir("disk-cache");
    let _ = std::fs::remove_dir_all(&dir);
    let (program, dims) = distinct_module(3, 5);
    let open = || Client::builder().compile_cache_dir(&dir).open().unwrap();
    {
        let client = open();
        client.compile_and_load(&program, &defaults()).unwrap();
        assert_eq!(client.compile_cache_stats().compiles, 1);
    }
    let entries = || crate::common::cache_entries(&dir);
    assert_eq!(entries().len(), 1);
    {
        let client = open();
        let exe = client.compile_and_load(&program, &defaults()).unwrap();
        let stats = client.compile_cache_stats();
        assert_eq!((stats.compiles, stats.disk_hits), (0, 1));
        check_distinct(&exe, &client.devices()[0], &dims, 5);
    }
    // A damaged entry is detected, removed and recompiled, never loaded.
    std::fs::write(&entries()[0], b"not an executable at all").unwrap();
    {
        let client = open();
        let exe = client.compile_and_load(&program, &defaults()).unwrap();
        let stats = client.compile_cache_stats();
        assert_eq!(
            (stats.corrupt_entries, stats.compiles, stats.disk_hits),
            (1, 1, 0)
        );
        check_distinct(&exe, &client.devices()[0], &dims, 5);
    }
    assert!(
        std::fs::read(&entries()[0])
            .unwrap()
            .starts_with(b"PJRTACTX")
    );
}

#[test]
fn the_disk_cache_is_bounded_least_recently_used_first() {
    let dir = scratch_dir("disk-bound");
    let _ = std::fs::remove_dir_all(&dir);
    let size = {
        let client = Client::builder().compile_cache_dir(&dir).open().unwrap();
        client
            .compile_and_load(distinct_module(0, 0).0, &defaults())
            .unwrap();
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .max()
            .unwrap()
    };
    let client = Client::builder()
        .compile_cache_dir(&dir)
        .compile_cache_max_bytes(size * 5 / 2)
        .open()
        .unwrap();
    for i in 1..6 {
        client
            .compile_and_load(distinct_module(i, 0).0, &defaults())
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let total: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        total <= size * 5 / 2 + size / 4,
        "{total} bytes over a bound of {}",
        size * 5 / 2
    );
    assert!(client.compile_cache_stats().disk_evictions >= 3);
    // The newest entry is still there: a fresh client hits it on disk.
    let fresh = Client::builder().compile_cache_dir(&dir).open().unwrap();
    fresh
        .compile_and_load(distinct_module(5, 0).0, &defaults())
        .unwrap();
    assert_eq!(fresh.compile_cache_stats().disk_hits, 1);
}

/// The child side of `two_processes_share_a_cache_directory`.
#[test]
#[ignore = "a child process of two_processes_share_a_cache_directory, which runs it"]
fn cache_writer_child() {
    let dir = std::env::var("PJRT_ACTORS_TEST_CACHE_CHILD")
        .expect("run by two_processes_share_a_cache_directory, which names the directory");
    let client = Client::builder().compile_cache_dir(&dir).open().unwrap();
    for i in 0..12 {
        let (program, dims) = distinct_module(20 + i, 1);
        let exe = client.compile_and_load(&program, &defaults()).unwrap();
        check_distinct(&exe, &client.devices()[0], &dims, 1);
    }
}

#[test]
fn two_processes_share_a_cache_directory() {
    let dir = scratch_dir("shared-cache");
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "executables::cache_writer_child",
                    "--ignored",
                    "--nocapture",
                ])
                .env("PJRT_ACTORS_TEST_CACHE_CHILD", &dir)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a child process failed");
    }
    // Every entry is whole and loads; a third process-alike (this one) hits all of them.
    let client = Client::builder()
        .compile_cache_dir(&dir)
        .memory_cache_entries(0)
        .open()
        .unwrap();
    for i in 0..12 {
        let (program, dims) = distinct_module(20 + i, 1);
        check_distinct(
            &client.compile_and_load(&program, &defaults()).unwrap(),
            &client.devices()[0],
            &dims,
            1,
        );
    }
    let stats = client.compile_cache_stats();
    assert_eq!(
        (stats.disk_hits, stats.compiles, stats.corrupt_entries),
        (12, 0, 0)
    );
    assert!(
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(".tmp"))
    );
}

/// A program that takes the plugin a while to compile, so a queue can fill behind it.
fn slow_program(i: usize) -> String {
    distinct_module(100 + i, 1500).0
}

#[test]
fn a_full_queue_waits_or_says_busy() {
    let client = Client::builder()
        .compile_threads(1)
        .compile_queue_bound(1)
        .open()
        .unwrap();
    let slow = {
        let client = client.clone();
        std::thread::spawn(move || {
            client
                .compile_and_load(slow_program(0), &CompileOptions::default())
                .map(|_| ())
        })
    };
    while client.compile_cache_stats().misses == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(matches!(
        client
            .compile_request(add_f32x4())
            .options(&defaults())
            .fail_if_busy()
            .load(),
        Err(Error::Busy { .. })
    ));
    // The blocking form waits for the slot instead.
    client.compile_and_load(add_f32x4(), &defaults()).unwrap();
    slow.join().unwrap().unwrap();
    assert!(
        client
            .compile_request(distinct_module(1, 0).0)
            .options(&defaults())
            .fail_if_busy()
            .load()
            .is_ok()
    );
}

#[test]
fn cancelled_requests_leave_the_queue_without_compiling() {
    let client = Client::builder().compile_threads(1).open().unwrap();
    let slow = {
        let client = client.clone();
        std::thread::spawn(move || {
            client
                .compile_and_load(slow_program(1), &CompileOptions::default())
                .map(|_| ())
        })
    };
    while client.compile_cache_stats().misses == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Queued behind the slow one; cancelled from another thread while it waits.
    let token = CancelToken::new();
    let waiter = {
        let (client, token) = (client.clone(), token.clone());
        std::thread::spawn(move || {
            client
                .compile_request(add_f32x4())
                .options(&CompileOptions::default())
                .cancel_with(&token)
                .load()
        })
    };
    // Queued behind the slow one: two requests queued or running.
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.compile_queue_len() < 2 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        std::thread::yield_now();
    }
    let cancelled_at = Instant::now();
    token.cancel();
    assert!(matches!(
        waiter.join().unwrap(),
        Err(Error::RequestCancelled { .. })
    ));
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(2),
        "cancel must not wait for the queue"
    );
    // Dropping an async request withdraws it too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let options = CompileOptions::default();
        let dropped = client.compile_and_load_async(distinct_module(2, 0).0, &options);
        let _ = tokio::time::timeout(Duration::from_millis(20), dropped).await;
    });
    slow.join().unwrap().unwrap();
    // Give the service a moment to skip the withdrawn requests.
    assert!(common::eventually(Duration::from_secs(10), || client
        .compile_cache_stats()
        .cancelled
        >= 2));
    assert_eq!(
        client.compile_cache_stats().compiles,
        1,
        "only the slow program compiled"
    );
    assert_eq!(client.live_executables().unwrap().len(), 1);
}

#[test]
fn an_unloaded_compile_leaves_nothing_loaded_but_keeps_what_was() {
    let client = Client::open().unwrap();
    let live = |c: &Client| c.live_executables().unwrap().len();
    let before = live(&client);
    let (program, dims) = distinct_module(90, 3);
    let unloaded = client
        .compile_request(&program)
        .options(&defaults())
        .compile()
        .unwrap();
    assert_eq!(
        live(&client),
        before,
        "compile() must not leave the executable loaded"
    );
    // It loads later, and computes.
    check_distinct(
        &unloaded.load(&client).unwrap(),
        &client.devices()[0],
        &dims,
        3,
    );
    // A program loaded before stays loaded (and cached) after compiling it unloaded.
    let (loaded_program, _) = distinct_module(91, 2);
    let held = client
        .compile_and_load(&loaded_program, &defaults())
        .unwrap();
    let with_it = live(&client);
    client
        .compile_request(&loaded_program)
        .options(&defaults())
        .compile()
        .unwrap();
    assert_eq!(live(&client), with_it);
    let again = client
        .compile_and_load(&loaded_program, &defaults())
        .unwrap();
    assert_eq!(held, again, "still the cached executable");
    assert_eq!(
        unloaded.topology_description().device_descriptions.len(),
        client.device_count()
    );
}

#[test]
fn executable_metadata() {
    use pjrt_actors::NamedValue;
    let compile = |client: &Client, program: &str| {
        client
            .compile_and_load(program, &CompileOptions::default())
            .unwrap()
    };
    let client = Client::open().unwrap();
    let exe = compile(&client, &add_f32x4());
    assert_eq!(exe.name(), "add_prog");
    assert!(!exe.fingerprint().is_empty());
    // The fingerprint is a function of the program: a recompile gives the same one. On this
    // client the same program is a memory-cache hit, the same executable; a client with no
    // memory cache compiles it again (counted), and gets the same fingerprint.
    let fresh = Client::builder().memory_cache_entries(0).open().unwrap();
    let before = fresh.compile_cache_stats().compiles;
    let again = compile(&fresh, &add_f32x4());
    assert_eq!(
        fresh.compile_cache_stats().compiles,
        before + 1,
        "compiled anew"
    );
    assert_eq!(again.fingerprint(), exe.fingerprint());
    assert_ne!(
        compile(&client, &common::binary_program("multiply", &[4], "f32")).fingerprint(),
        exe.fingerprint()
    );
    // The 0.115 CPU plugin has no cost analysis: a typed UNIMPLEMENTED, never a guess.
    match exe.cost_analysis() {
        Ok(costs) => assert!(costs.contains(&("flops".into(), NamedValue::Float(4.0)))),
        Err(e) => assert!(crate::common::new_abi() && e.to_string().contains("UNIMPLEMENTED")),
    }
    let text = exe.optimized_program_text().unwrap();
    assert!(text.contains("ENTRY") && text.contains("add("), "{text}");
    let stats = exe.compiled_memory_stats().unwrap();
    assert_eq!((stats.argument_size, stats.output_size), (32, 16));
}
