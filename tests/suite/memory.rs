//! Heap profiles and defragment against the real CPU plugin.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pjrt_actors::{Array, Client, CompileOptions, ElementType, Error, HostBuffer, SiteCapture};
use pjrt_actors_core::arrays::heap_profile::pprof::Profile;
use prost::Message;

/// A decoded sample: labels, values, the innermost frame's (function, file, line), and every
/// frame's function, innermost first.
#[derive(Debug)]
struct Sample {
    labels: HashMap<String, String>,
    count: i64,
    bytes: i64,
    function: String,
    file: String,
    line: i64,
    stack: Vec<String>,
}

fn samples(bytes: &[u8]) -> Vec<Sample> {
    let p = Profile::decode(bytes).unwrap();
    let s = |i: i64| p.string_table[i as usize].clone();
    assert_eq!(s(0), "");
    let types: Vec<(String, String)> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        vec![
            ("allocations".into(), "count".into()),
            ("space".into(), "bytes".into())
        ]
    );
    // A location's line and its function.
    let frame = |id: u64| {
        let loc = p.location.iter().find(|l| l.id == id).unwrap();
        let f = p.function.iter().find(|f| f.id == loc.line[0].function_id);
        (&loc.line[0], f.unwrap())
    };
    p.sample
        .iter()
        .map(|sample| {
            let (line, f) = frame(sample.location_id[0]);
            let stack = sample
                .location_id
                .iter()
                .map(|&id| s(frame(id).1.name))
                .collect();
            Sample {
                stack,
                labels: sample.label.iter().map(|l| (s(l.key), s(l.str))).collect(),
                count: sample.value[0],
                bytes: sample.value[1],
                function: s(f.name),
                file: s(f.filename),
                line: line.line,
            }
        })
        .collect()
}

#[test]
fn the_heap_profile_counts_what_was_allocated_where() {
    let client = Client::open().unwrap();
    let (d0, d1) = (client.devices()[0].clone(), client.devices()[1].clone());
    // `at_line!` runs a call and returns its line, both taken at the invocation site (where
    // the allocation site is recorded, by `#[track_caller]`).
    macro_rules! at_line {
        ($e:expr) => {
            ($e, line!())
        };
    }
    let mut small = Vec::new();
    let mut small_line = 0;
    for _ in 0..3 {
        let (a, line) = at_line!(d0.put(&[1f32; 4], &[4]).unwrap());
        small.push(a);
        small_line = line;
    }
    let mut big = Vec::new();
    let mut big_line = 0;
    for _ in 0..2 {
        let (a, line) = at_line!(d1.put(&[0f64; 256], &[256]).unwrap());
        big.push(a);
        big_line = line;
    }
    // Clones share their buffer (counted once); a deleted array holds nothing.
    let shared = big[0].clone();
    let gone = d0.put(&[1f32; 4], &[4]).unwrap();
    gone.delete();
    let (program, options) = (common::add_f32x4(), CompileOptions::default());
    let (exe, exe_line) = at_line!(client.compile_and_load(&program, &options).unwrap());

    let samples = samples(&client.heap_profile().unwrap());
    let buffers: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.labels["kind"] == "buffer")
        .collect();
    let at = |line: u32| buffers.iter().find(|s| s.line == line as i64).copied();
    let small_sample = at(small_line).expect("a sample at the small arrays' line");
    assert_eq!(small_sample.count, 3);
    assert_eq!(
        small_sample.bytes,
        3 * small[0].on_device_size().unwrap() as i64
    );
    assert_eq!(small_sample.labels["device"], d0.debug_string());
    assert!(
        small_sample.file.ends_with("tests/suite/memory.rs"),
        "{}",
        small_sample.file
    );
    let big_sample = at(big_line).expect("a sample at the big arrays' line");
    assert_eq!((big_sample.count, big_sample.bytes), (2, 2 * 256 * 8));
    assert_eq!(big_sample.labels["device"], d1.debug_string());
    assert_eq!(
        buffers.iter().map(|s| s.count).sum::<i64>(),
        5,
        "{buffers:?}"
    );
    let programs: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.labels["kind"] == "executable")
        .collect();
    assert_eq!(programs.len(), 1);
    assert_eq!((programs[0].count, programs[0].line), (1, exe_line as i64));
    drop((shared, exe));
}

#[test]
fn each_heap_profile_sees_the_arrays_made_and_deleted_since_the_last() {
    let client = Client::open().unwrap();
    let d0 = client.devices()[0].clone();
    // (count, bytes) over the buffer samples.
    let buffers = |client: &Client| {
        samples(&client.heap_profile().unwrap())
            .iter()
            .filter(|s| s.labels["kind"] == "buffer")
            .fold((0, 0), |(n, b), s| (n + s.count, b + s.bytes))
    };
    let first: Vec<_> = (0..4)
        .map(|i| d0.put(&[i as f32; 4], &[4]).unwrap())
        .collect();
    let small = first[0].on_device_size().unwrap() as i64;
    assert_eq!(buffers(&client), (4, 4 * small));
    // The first profile learned these sizes; a delete must still take one out.
    first[0].delete();
    let later: Vec<_> = (0..3).map(|_| d0.put(&[0f64; 8], &[8]).unwrap()).collect();
    let big = later[0].on_device_size().unwrap() as i64;
    assert_eq!(buffers(&client), (6, 3 * small + 3 * big));
    drop(later);
    assert_eq!(buffers(&client), (3, 3 * small));
    drop(first);
    assert_eq!(buffers(&client), (0, 0));
}

#[test]
fn sites_from_spans_and_backtraces() {
    let by_span = Client::builder()
        .site_capture(SiteCapture::Span)
        .open()
        .unwrap();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .finish();
    let (_weights, _cache) = tracing::subscriber::with_default(subscriber, || {
        let _request = tracing::info_span!("serve_request").entered();
        let weights = {
            let _load = tracing::info_span!("load_weights").entered();
            by_span.devices()[0].put(&[1i32; 8], &[8]).unwrap()
        };
        let cache: Vec<Array> = (0..2)
            .map(|_| by_span.devices()[0].put(&[0f32; 2], &[2]).unwrap())
            .collect();
        (weights, cache)
    });
    let s = samples(&by_span.heap_profile().unwrap());
    let under = |stack: &[&str]| s.iter().find(|s| s.stack == stack).map(|s| s.count);
    assert_eq!(under(&["load_weights", "serve_request"]), Some(1), "{s:?}");
    assert_eq!(under(&["serve_request"]), Some(2), "{s:?}");

    let by_backtrace = Client::builder()
        .site_capture(SiteCapture::Backtrace)
        .open()
        .unwrap();
    let _a = by_backtrace.devices()[0].put(&[1u8; 3], &[3]).unwrap();
    let s = samples(&by_backtrace.heap_profile().unwrap());
    let p = Profile::decode(by_backtrace.heap_profile().unwrap().as_slice()).unwrap();
    let names: Vec<&String> = p
        .function
        .iter()
        .map(|f| &p.string_table[f.name as usize])
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.contains("sites_from_spans_and_backtraces")),
        "{names:?}"
    );
    assert_eq!(s.iter().map(|s| s.count).sum::<i64>(), 1);

    let off = Client::builder()
        .site_capture(SiteCapture::Off)
        .open()
        .unwrap();
    let _b = off.devices()[0].put(&[1u8; 3], &[3]).unwrap();
    assert_eq!(
        samples(&off.heap_profile().unwrap())[0].function,
        "<unknown>"
    );
}

#[test]
fn defragment_keeps_every_handle_and_every_byte() {
    let client = Client::open().unwrap();
    let arrays: Vec<(Array, Vec<f32>)> = (0..40)
        .map(|i| {
            let values: Vec<f32> = (0..(i + 1) * 3).map(|k| (i * 1000 + k) as f32).collect();
            let device = &common::nth_device(&client, i);
            (device.put(&values, &[values.len() as i64]).unwrap(), values)
        })
        .collect();
    let clones: Vec<Array> = arrays.iter().map(|(a, _)| a.clone()).collect();
    let report = client.defragment().unwrap();
    assert_eq!(report.moved, 40, "each buffer moved once, clones included");
    assert_eq!(
        report.free_block_ratio.is_some(),
        client.devices()[0].memory_stats().unwrap().is_some(),
        "a free-block ratio exactly where the allocator has statistics (none on CPU)"
    );
    assert_eq!(
        report.bytes,
        arrays.iter().map(|(_, v)| v.len() * 4).sum::<usize>()
    );
    for ((a, values), clone) in arrays.iter().zip(&clones) {
        assert_eq!(&a.to_vec::<f32>().unwrap(), values);
        assert_eq!(&clone.to_vec::<f32>().unwrap(), values);
    }
    let exe = client
        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
        .unwrap();
    let x = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    client.defragment().unwrap();
    assert_eq!(
        exe.execute(&[&x, &x]).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![2., 4., 6., 8.]
    );
}

#[test]
fn defragment_under_load_loses_nothing() {
    let client = Client::open().unwrap();
    let exes: Arc<Vec<_>> = Arc::new(
        (0..4)
            .map(|k| {
                client
                    .compile_and_load(
                        common::add_f32x4(),
                        &CompileOptions {
                            devices: Some(vec![common::nth_device(&client, k).id()]),
                            ..Default::default()
                        },
                    )
                    .unwrap()
            })
            .collect(),
    );
    let resident: Vec<(Array, f32)> = (0..64)
        .map(|i| {
            (
                common::nth_device(&client, i)
                    .put(&[i as f32; 4], &[4])
                    .unwrap(),
                i as f32,
            )
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (client, exes, stop) = (client.clone(), exes.clone(), stop.clone());
            let mine: Vec<(Array, f32)> = resident
                .iter()
                .filter(|(a, _)| a.device() == common::nth_device(&client, t))
                .cloned()
                .collect();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for (a, v) in &mine {
                        let fresh = common::nth_device(&client, t)
                            .put(&[1f32; 4], &[4])
                            .unwrap();
                        let out = exes[t].execute(&[a, &fresh]).unwrap();
                        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![v + 1.0; 4]);
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let (mut moved, mut skipped) = (0, 0);
    for _ in 0..20 {
        let report = client.defragment().unwrap();
        moved += report.moved;
        // Arrays a running execute holds are skipped (never waited for) and counted.
        skipped += report.skipped;
    }
    stop.store(true, Ordering::Relaxed);
    let runs: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(
        runs > 0 && moved + skipped >= 20 * 64 && skipped <= moved,
        "{runs} runs, {moved} moves, {skipped} skipped"
    );
    for (a, v) in &resident {
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![*v; 4]);
    }
}

#[cfg(feature = "test-hooks")]
#[test]
fn a_failed_defragment_keeps_the_data_and_recovers() {
    let client = Client::open().unwrap();
    let arrays: Vec<Array> = (0..5)
        .map(|i| client.devices()[0].put(&[i as f32; 4], &[4]).unwrap())
        .collect();
    match client.defragment_failing_after(2) {
        Err(Error::Defragment { moved, on_host, .. }) => {
            assert_eq!(moved, 2);
            assert_eq!(on_host.len(), 3);
        }
        other => panic!("{other:?}"),
    }
    // No data is lost: every array reads back; the ones on host cannot run until restored.
    for (i, a) in arrays.iter().enumerate() {
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![i as f32; 4]);
    }
    let exe = client
        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
        .unwrap();
    let on_host = arrays.iter().find(|a| a.is_on_host()).unwrap();
    assert!(matches!(
        exe.execute(&[on_host, on_host]),
        Err(Error::OnHost { .. })
    ));
    assert_eq!(client.defragment().unwrap().moved, 5);
    assert!(arrays.iter().all(|a| !a.is_on_host()));
    assert_eq!(
        exe.execute(&[&arrays[4], &arrays[4]]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![8.0; 4]
    );
}

#[test]
fn layouts_and_memory_statistics() {
    let client = Client::open().unwrap();
    let device = client.devices().last().unwrap().clone();
    let device = &device;
    let layout = client
        .default_layout(pjrt_actors::ElementType::F32, &[2, 3], device)
        .unwrap();
    assert_eq!(layout.minor_to_major, vec![1, 0]);
    let scalar = client
        .default_layout(pjrt_actors::ElementType::S8, &[], device)
        .unwrap();
    assert!(scalar.minor_to_major.is_empty());
    let a = device.put(&[1f32; 6], &[2, 3]).unwrap();
    assert_eq!(a.layout().unwrap(), layout);
    let other = Client::open().unwrap();
    assert!(matches!(
        client.default_layout(pjrt_actors::ElementType::F32, &[2], &other.devices()[0]),
        Err(Error::InvalidArgument(_))
    ));
    // Allocator statistics: `allocator.rs`; DMA mapping: `dma.rs`.
    // The memory kinds a device has, from the memory descriptions extension, agree with its
    // memory spaces (the CPU plugin's three: `foundation::cpu_plugin`).
    let (kinds, default) = device.memory_kinds().unwrap();
    let mut names: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
    names.sort();
    let spaces = device.memory_spaces();
    let mut space_kinds: Vec<&str> = spaces.iter().map(|m| m.kind()).collect();
    space_kinds.sort();
    assert_eq!(names, space_kinds);
    // The CPU plugins have no memory descriptions extension, so their kinds are read from the
    // memory spaces: what those are is fixed, and the comparison above alone would hold for
    // any list. (A GPU plugin's come from the extension: `scripts/gpu-check`.)
    if client.platform() == "cpu" {
        assert_eq!(names, ["device", "pinned_host", "unpinned_host"]);
    }
    assert_eq!(kinds[default.unwrap()].kind, "device");
    for k in &kinds {
        assert_eq!(
            device.memory_space_by_kind(&k.kind).unwrap().kind_id(),
            k.kind_id
        );
    }
}

#[test]
fn arrays_made_by_async_calls_are_sited_at_the_callers_line() {
    let client = Client::open().unwrap();
    let device = common::nth_device(&client, 1);
    let exe = client
        .compile_and_load(
            common::add_f32x4(),
            &CompileOptions {
                devices: Some(vec![device.id()]),
                ..Default::default()
            },
        )
        .unwrap();
    let data: Arc<[u8]> = [1f32; 4].iter().flat_map(|v| v.to_ne_bytes()).collect();
    // Each future is made on the marked line and awaited later, elsewhere: the site must be
    // where the call was made, not somewhere inside the library.
    let (h, ty) = (HostBuffer::UntilTransferCompletes(data), ElementType::F32);
    let upload = client.buffer_from_host_async(h, ty, &[4], &device, None);
    let upload_line = line!() - 1;
    let a = pjrt_actors_core::client::runtime::block_on(upload)
        .unwrap()
        .unwrap();
    let run = exe.execute_async(&[&a, &a]);
    let run_line = line!() - 1;
    let out = pjrt_actors_core::client::runtime::block_on(run)
        .unwrap()
        .unwrap();
    let profile = samples(&client.heap_profile().unwrap());
    let buffers_at = |line: u32| {
        profile
            .iter()
            .filter(|s| s.labels["kind"] == "buffer")
            .filter(|s| s.file.ends_with("tests/suite/memory.rs") && s.line == line as i64)
            .map(|s| s.count)
            .sum::<i64>()
    };
    assert_eq!(buffers_at(upload_line), 1, "{profile:#?}");
    assert_eq!(buffers_at(run_line), 1, "{profile:#?}");
    drop((a, out));
}
