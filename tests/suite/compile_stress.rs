//! 200 distinct modules compiled from 16 threads, 10% cancelled at random, through a bounded
//! queue: every completed one executes correctly, nothing deadlocks, the bound holds, and the
//! live executables are exactly the cached ones at the end.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{check_distinct, distinct_module, within};
use pjrt_actors::{CancelToken, Client, CompileOptions, Error};

const MODULES: usize = 200;
const THREADS: usize = 16;
const BOUND: usize = 8;

/// A fixed pseudo-random choice per module (splitmix64), so runs are repeatable.
fn chance(i: usize) -> u64 {
    let mut z = (i as u64).wrapping_add(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

#[test]
fn two_hundred_modules_sixteen_threads_ten_percent_cancelled() {
    let client = Client::builder().compile_queue_bound(BOUND).open().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let deepest = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (client, stop, deepest) = (client.clone(), stop.clone(), deepest.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                deepest.fetch_max(client.compile_queue_len(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let (completed, cancelled) = within(Duration::from_secs(600), {
        let client = client.clone();
        move || {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let client = client.clone();
                    std::thread::spawn(move || {
                        let (mut completed, mut cancelled) = (0, 0);
                        for i in (t..MODULES).step_by(THREADS) {
                            let (program, dims) = distinct_module(i, i % 7);
                            let token = CancelToken::new();
                            if chance(i).is_multiple_of(10) {
                                let token = token.clone();
                                let delay = Duration::from_millis(chance(i + 1000) % 30);
                                std::thread::spawn(move || {
                                    std::thread::sleep(delay);
                                    token.cancel();
                                });
                            }
                            let options = CompileOptions {
                                devices: Some(vec![common::nth_device(&client, i).id()]),
                                ..Default::default()
                            };
                            match client
                                .compile_request(&program)
                                .options(&options)
                                .cancel_with(&token)
                                .load()
                            {
                                Ok(exe) => {
                                    check_distinct(
                                        &exe,
                                        &common::nth_device(&client, i),
                                        &dims,
                                        i % 7,
                                    );
                                    completed += 1;
                                }
                                Err(Error::RequestCancelled { .. }) => {
                                    assert!(token.is_cancelled());
                                    cancelled += 1;
                                }
                                Err(e) => panic!("module {i}: {e}"),
                            }
                        }
                        (completed, cancelled)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap())
                .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
        }
    });
    stop.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    assert_eq!(completed + cancelled, MODULES);
    assert!(
        cancelled > 0 && cancelled <= MODULES / 5,
        "{cancelled} cancelled"
    );
    let deepest = deepest.load(Ordering::Relaxed);
    assert!(deepest <= BOUND, "the queue held {deepest} > {BOUND}");
    assert!(
        deepest >= BOUND / 2,
        "the bound was never approached ({deepest})"
    );
    // The memory cache keeps exactly the executables that were delivered; nothing else lives.
    assert_eq!(client.live_executables().unwrap().len(), completed);
    // Every delivered result was compiled; withdrawn ones may or may not have been.
    assert!(client.compile_cache_stats().compiles as usize >= completed);
    assert_eq!(client.clear_compile_cache().unwrap(), completed);
    assert!(client.live_executables().unwrap().is_empty());
    assert_eq!(client.live_array_count(), 0);
}
