//! No call from inside a host callback deadlocks, and nothing waits on a running execute
//! (issue 13, B): each call either works or returns a typed error, under `execute` and under
//! `execute_async` alike. Every test runs under a watchdog.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pjrt_actors::{Array, Client, Error, LoadedExecutable};
use pjrt_actors_core::client::runtime::block_on;

use crate::callbacks::{load_around, pure_map};
use crate::common::within;

/// Whatever a callback's call returned, kept for the test to look at.
type Seen<T> = Arc<Mutex<Vec<Result<T, Error>>>>;

/// A client, an executable whose callback runs `call` once per execution and records what it
/// returned, and an argument on device 0.
fn around<T: Send + 'static>(
    call: impl Fn(&Client) -> Result<T, Error> + Send + Sync + 'static,
) -> (Client, LoadedExecutable, Array, Seen<T>) {
    let client = Client::open().unwrap();
    let seen: Seen<T> = Arc::default();
    let (inner, record) = (client.clone(), seen.clone());
    let cb = pure_map("calls_back", 4, move |x| {
        // Once per execution: the first element's call.
        if x == 1.0 {
            record.lock().push(call(&inner));
        }
        x
    });
    let exe = load_around(&client, cb);
    let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    (client, exe, a, seen)
}

/// Runs `exe` on `a` blocking, then async, and checks both computed `x + x`.
fn run_both_ways(exe: &LoadedExecutable, a: &Array) {
    for out in [
        exe.execute(&[a]).unwrap(),
        block_on(exe.execute_async(&[a])).unwrap().unwrap(),
    ] {
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2., 4., 6., 8.]);
    }
}

#[test]
fn blocking_calls_inside_a_callback_work_under_execute_and_execute_async() {
    within(Duration::from_secs(60), || {
        let (_client, exe, a, seen) = around(|c| {
            let profile = c.heap_profile()?;
            let topology = c.topology()?;
            let listed = c.live_executables()?;
            Ok((
                profile.len(),
                topology.device_descriptions.len(),
                listed.len(),
            ))
        });
        run_both_ways(&exe, &a);
        let seen = seen.lock();
        assert_eq!(seen.len(), 2);
        for outcome in seen.iter() {
            let (profile, devices, executables) = outcome.as_ref().unwrap();
            assert!(*profile > 0 && *devices == 4 && *executables >= 1);
        }
    });
}

#[test]
fn only_a_blocking_request_to_the_callbacks_own_device_actor_is_refused() {
    within(Duration::from_secs(60), || {
        let (_client, exe, a, seen) = around(|c| {
            let own = c.devices()[0].memory_stats().map(|_| ());
            let other = c.devices()[1].memory_stats().map(|_| ());
            Ok((own, other))
        });
        run_both_ways(&exe, &a);
        let seen = seen.lock();
        let (blocking, under_async) = (seen[0].as_ref().unwrap(), seen[1].as_ref().unwrap());
        // On the caller's thread every device actor is free to answer.
        assert!(blocking.0.is_ok() && blocking.1.is_ok(), "{blocking:?}");
        // On device 0's actor thread, device 0's actor cannot answer: refused, not hung.
        assert!(
            matches!(under_async.0, Err(Error::BlockingOnRuntimeThread)),
            "{under_async:?}"
        );
        assert!(under_async.1.is_ok(), "{under_async:?}");
    });
}

#[test]
fn execute_within_inside_a_callback_on_its_own_devices_actor_is_refused_not_timed_out() {
    within(Duration::from_secs(60), || {
        let client = Client::open().unwrap();
        // A program on device 0, run with a deadline from inside the callback.
        let inner = client
            .compile_and_load(crate::common::add_f32x4(), &Default::default())
            .unwrap();
        let arg = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
        let seen: Seen<Duration> = Arc::default();
        let record = seen.clone();
        let cb = pure_map("calls_back", 4, move |x| {
            if x == 1.0 {
                let t0 = Instant::now();
                let ran = inner.execute_within(&[&arg, &arg], Duration::from_secs(5));
                record.lock().push(ran.map(|_| t0.elapsed()));
            }
            x
        });
        let exe = load_around(&client, cb);
        let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
        run_both_ways(&exe, &a);
        let seen = seen.lock();
        assert_eq!(seen.len(), 2);
        // On the caller's thread (the blocking execute) device 0's actor serves it.
        assert!(seen[0].is_ok(), "{:?}", seen[0]);
        // On device 0's actor thread (the async execute) that actor cannot: refused at once,
        // as the other blocking calls are (it waited out its 5 s and was DeadlineExceeded).
        assert!(
            matches!(seen[1], Err(Error::BlockingOnRuntimeThread)),
            "{:?}",
            seen[1]
        );
    });
}

#[test]
fn a_callback_that_defragments_moves_what_it_can_and_skips_its_own_arguments() {
    within(Duration::from_secs(60), || {
        let (client, exe, a, seen) = around(|c| c.defragment());
        let bystander = client.devices()[1].put(&[9f32; 4], &[4]).unwrap();
        run_both_ways(&exe, &a);
        // One report from each run; none would pass the loop below unchecked.
        assert_eq!(seen.lock().len(), 2);
        for report in seen.lock().iter() {
            let report = report.as_ref().unwrap();
            // The running execution holds `a`: skipped, never waited for.
            assert!(report.skipped >= 1, "{report:?}");
            assert!(report.moved >= 1, "{report:?}");
        }
        assert_eq!(bystander.to_vec::<f32>().unwrap(), vec![9.; 4]);
        // Once nothing holds it, the next defragment moves it.
        let after = client.defragment().unwrap();
        assert_eq!(after.skipped, 0);
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4.]);
    });
}

#[test]
fn a_callback_that_deletes_its_own_argument_does_not_wait_for_itself() {
    within(Duration::from_secs(60), || {
        let client = Client::open().unwrap();
        let target: Arc<Mutex<Option<Array>>> = Arc::default();
        let slot = target.clone();
        let cb = pure_map("deletes", 4, move |x| {
            if let Some(a) = slot.lock().as_ref() {
                a.delete();
            }
            x
        });
        let exe = load_around(&client, cb);
        let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
        *target.lock() = Some(a.clone());
        // The execution already holds the buffer: it finishes on it.
        let out = exe.execute(&[&a]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2., 4., 6., 8.]);
        assert!(a.is_deleted());
        assert!(matches!(a.to_vec::<f32>(), Err(Error::Deleted { .. })));
        assert!(matches!(exe.execute(&[&a]), Err(Error::Deleted { .. })));
    });
}

#[test]
fn heap_profiles_and_defragments_never_wait_on_a_long_execute() {
    within(Duration::from_secs(60), || {
        let started = Arc::new(AtomicBool::new(false));
        let flag = started.clone();
        let client = Client::open().unwrap();
        let cb = pure_map("slow", 4, move |x| {
            if x == 1.0 {
                flag.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1500));
            }
            x
        });
        let exe = load_around(&client, cb);
        let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
        let runner = {
            let (exe, a) = (exe.clone(), a.clone());
            std::thread::spawn(move || exe.execute(&[&a]).map(|o| o.len()))
        };
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // The execution holds `a` for a second and a half; meanwhile, from another thread:
        let t0 = Instant::now();
        let report = client.defragment().unwrap();
        let profile = client.heap_profile().unwrap();
        let listed = client.live_arrays().unwrap();
        let waited = t0.elapsed();
        assert!(
            waited < Duration::from_millis(1000),
            "waited {waited:?} on an execute"
        );
        assert_eq!(report.skipped, 1, "{report:?}");
        assert!(!profile.is_empty() && listed.contains(&a));
        assert_eq!(runner.join().unwrap().unwrap(), 1);
    });
}

#[test]
fn profiles_from_callbacks_while_another_thread_defragments_in_a_loop() {
    within(Duration::from_secs(60), || {
        let (client, exe, a, seen) = around(|c| c.heap_profile().map(|p| p.len()));
        let stop = Arc::new(AtomicBool::new(false));
        let looper = {
            let (client, stop) = (client.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) {
                    client.defragment().unwrap();
                    rounds += 1;
                }
                rounds
            })
        };
        for _ in 0..20 {
            run_both_ways(&exe, &a);
        }
        stop.store(true, Ordering::Relaxed);
        assert!(looper.join().unwrap() > 0);
        // Two calls a round, 20 rounds: every one profiled.
        assert_eq!(seen.lock().len(), 40);
        assert!(seen.lock().iter().all(|p| p.is_ok()));
        // The registry actor still answers.
        assert!(client.heap_profile().is_ok() && client.defragment().is_ok());
    });
}

#[test]
fn an_execute_with_a_deadline_gives_up_waiting_and_the_client_goes_on() {
    within(Duration::from_secs(60), || {
        let client = Client::open().unwrap();
        let cb = pure_map("sleeps", 4, move |x| {
            if x == 1.0 {
                std::thread::sleep(Duration::from_millis(1500));
            }
            x
        });
        let exe = load_around(&client, cb);
        let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
        let t0 = Instant::now();
        match exe.execute_within(&[&a], Duration::from_millis(200)) {
            Err(Error::DeadlineExceeded { what, after, .. }) => {
                assert_eq!(
                    (what.as_str(), after),
                    ("around", Duration::from_millis(200))
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_millis(1000),
            "{:?}",
            t0.elapsed()
        );
        // The client goes on, and a deadline long enough is met.
        assert!(client.heap_profile().is_ok());
        let out = exe.execute_within(&[&a], Duration::from_secs(20)).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2., 4., 6., 8.]);
    });
}

/// An ordered callback's turn is a ranked lock; what a callback may do inside it (compile,
/// which takes the memory compile cache's lock, run, list live arrays, profile the heap) must
/// be in that rank's order, or the suite's debug build panics at the first such call.
#[test]
fn an_ordered_callback_may_compile_run_list_arrays_and_profile_the_heap() {
    use pjrt_actors::{ArrayType, CallbackKind, CompileOptions, ElementType, HostCallback};
    let client = Client::open().unwrap();
    let inner = client.clone();
    let f32x4 = vec![ArrayType {
        dtype: ElementType::F32,
        dims: vec![4],
    }];
    let cb = HostCallback::new(
        "ordered_calls_back",
        CallbackKind::Ordered,
        f32x4.clone(),
        f32x4,
        move |ins, outs| {
            let x = ins[0].as_slice::<f32>().unwrap().to_vec();
            let add = inner
                .compile_and_load(crate::common::add_f32x4(), &CompileOptions::default())
                .map_err(|e| e.to_string())?;
            let a = inner.devices()[0]
                .put(&x, &[4])
                .map_err(|e| e.to_string())?;
            let sum = add.execute(&[&a, &a]).map_err(|e| e.to_string())?;
            let live = inner.live_arrays().map_err(|e| e.to_string())?;
            if !live.iter().any(|l| l.dims() == [4]) {
                return Err(format!("{} live arrays, none f32[4]", live.len()));
            }
            let profile = inner.heap_profile().map_err(|e| e.to_string())?;
            if profile.is_empty() {
                return Err("an empty heap profile".into());
            }
            let y = sum[0].to_vec::<f32>().map_err(|e| e.to_string())?;
            outs[0].as_mut_slice::<f32>().unwrap().copy_from_slice(&y);
            Ok(())
        },
    )
    .unwrap();
    let exe = load_around(&client, cb);
    let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    for _ in 0..3 {
        let out = within(Duration::from_secs(30), {
            let (exe, a) = (exe.clone(), a.clone());
            move || exe.execute(&[&a]).and_then(|o| o[0].to_vec::<f32>())
        })
        .unwrap();
        // main(x) = cb(x) + x, and cb(x) = x + x.
        assert_eq!(out, [3., 6., 9., 12.]);
    }
}

/// No plugin call runs on the actor system's thread (where the client actor and the compile
/// service route and queue): executables evicted from the memory cache, cleared from it, or
/// compiled for a caller who left are destroyed elsewhere, async runs routed there (one refused
/// with its arguments' last handles) too, and so is the client itself at shutdown.
#[test]
fn no_plugin_call_runs_on_the_actor_systems_thread() {
    use pjrt_actors::{CancelToken, CompileOptions};
    let options = CompileOptions::default();
    let client = Client::builder()
        .compile_threads(1)
        .memory_cache_entries(1)
        .open()
        .unwrap();
    // Evicted: each compile pushes the one before out of a one-entry cache, with no handle left.
    for k in 0..3 {
        let (program, _) = crate::common::distinct_module(200 + k, 2);
        drop(client.compile_and_load(&program, &options).unwrap());
    }
    // Cleared.
    assert_eq!(client.clear_compile_cache().unwrap(), 1);
    // Abandoned mid-compile: its caller cancels while the compiler runs it.
    let token = CancelToken::new();
    let abandoned = {
        let (client, token) = (client.clone(), token.clone());
        std::thread::spawn(move || {
            let (slow, _) = crate::common::distinct_module(300, 1500);
            client.compile_request(&slow).cancel_with(&token).load()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.compile_queue_len() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    token.cancel();
    assert!(matches!(
        abandoned.join().unwrap(),
        Err(Error::RequestCancelled { .. })
    ));
    // Let the abandoned compile finish and its result be dropped.
    while client.compile_queue_len() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Routed through the client actor: async runs, their arguments' last handles in the run.
    let (program, dims) = crate::common::distinct_module(400, 2);
    let exe = client.compile_and_load(&program, &options).unwrap();
    let n = dims.iter().product::<i64>() as usize;
    let device = &client.devices()[0];
    for _ in 0..20 {
        let x = device.put(&vec![1.0f32; n], &dims).unwrap();
        let run = exe.execute_async(&[&x, &x]);
        drop(x);
        drop(block_on(run));
    }
    drop((exe, client));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(pjrt_actors_core::pjrt::plugin_calls_where_forbidden(), 0);
}
