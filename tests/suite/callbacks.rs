//! Host callbacks through XLA FFI on the plugin the suite runs on: the three kinds, programs
//! calling callbacks they were not given, serialization, type mismatches, re-entrant calls into
//! the runtime (on a one-device CPU client too), panics, and 8 threads × 4 callbacks × 1,000 runs.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use pjrt_actors::{
    ArrayType, CallbackKind, Client, CompileOptions, ElementType, Error, HostArray, HostCallback,
    LoadedExecutable,
};

fn f32s(n: i64) -> ArrayType {
    ArrayType {
        dtype: ElementType::F32,
        dims: vec![n],
    }
}

/// `y = f(x)` for a pure f32[n] -> f32[n] callback `f` (`HostCallback::map`).
pub(crate) fn pure_map(
    name: &str,
    n: i64,
    f: impl Fn(f32) -> f32 + Send + Sync + 'static,
) -> HostCallback {
    HostCallback::map::<f32, f32>(name, &[n], f).unwrap()
}

/// `main(x) = cb(x) + x` over f32[n].
pub(crate) fn program_around(cb: &HostCallback, n: i64) -> String {
    let t = format!("tensor<{n}xf32>");
    format!(
        "module @around {{\n  func.func public @main(%x: {t}) -> {t} {{\n    {}\n    %o = stablehlo.add %r, %x : {t}\n    return %o : {t}\n  }}\n}}\n",
        cb.call_text("%r", &["%x"])
    )
}

/// `program_around(cb, 4)`, compiled and loaded with `cb`.
pub(crate) fn load_around(client: &Client, cb: HostCallback) -> LoadedExecutable {
    client
        .compile_request(program_around(&cb, 4))
        .options(&CompileOptions::default())
        .callbacks(&[cb])
        .load()
        .unwrap()
}

/// Asserts `outcome` failed in callback `name` for a reason that mentions every `needle`.
fn assert_callback_error<T: std::fmt::Debug>(
    outcome: pjrt_actors::Result<T>,
    name: &str,
    needles: &[&str],
) {
    match outcome {
        Err(Error::Callback { name: got, reason }) => {
            assert_eq!(got, name);
            for needle in needles {
                assert!(reason.contains(needle), "{needle:?} not in {reason:?}");
            }
        }
        other => panic!("expected a failure in callback `{name}`: {other:?}"),
    }
}

fn run(exe: &LoadedExecutable, x: &[f32]) -> pjrt_actors::Result<Vec<f32>> {
    let device = &exe.addressable_devices()[0];
    let a = device.put(x, &[x.len() as i64])?;
    exe.execute(&[&a])?[0].to_vec::<f32>()
}

#[test]
fn a_pure_callback_computes_inside_the_program() {
    let client = Client::open().unwrap();
    let square = pure_map("square", 4, |v| v * v);
    let exe = client
        .compile_request(program_around(&square, 4))
        .options(&CompileOptions::default())
        .callbacks(std::slice::from_ref(&square))
        .load()
        .unwrap();
    assert_eq!(exe.callback_ids(), &[square.id()]);
    assert_eq!(
        run(&exe, &[1., 2., 3., -4.]).unwrap(),
        vec![2., 6., 12., 12.]
    );
}

#[test]
fn ordered_and_observer_callbacks_see_program_order() {
    let client = Client::open().unwrap();
    let log = Arc::new(Mutex::new(Vec::<(String, f32)>::new()));
    let io_log = log.clone();
    let io = HostCallback::new(
        "io_step",
        CallbackKind::Ordered,
        vec![f32s(1)],
        vec![f32s(1)],
        move |ins, outs| {
            let x = ins[0].as_slice::<f32>().unwrap()[0];
            io_log.lock().push(("io".into(), x));
            outs[0].as_mut_slice::<f32>().unwrap()[0] = x + 1.0;
            Ok(())
        },
    )
    .unwrap();
    let obs_log = log.clone();
    let observer = HostCallback::new(
        "watch",
        CallbackKind::Observer,
        vec![f32s(1)],
        vec![],
        move |ins, _| {
            obs_log
                .lock()
                .push(("watch".into(), ins[0].as_slice::<f32>().unwrap()[0]));
            Ok(())
        },
    )
    .unwrap();
    let t = "tensor<1xf32>";
    let program = format!(
        "module @ordered {{\n  func.func public @main(%x: {t}) -> {t} {{\n    {}\n    {}\n    {}\n    {}\n    return %c : {t}\n  }}\n}}\n",
        io.call_text("%a", &["%x"]),
        observer.call_text("", &["%a"]),
        io.call_text("%b", &["%a"]),
        io.call_text("%c", &["%b"]),
    );
    let exe = client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[io.clone(), observer.clone()])
        .load()
        .unwrap();
    for round in 0..3 {
        let x = 10.0 * round as f32;
        assert_eq!(run(&exe, &[x]).unwrap(), vec![x + 3.0]);
    }
    let expected: Vec<(String, f32)> = (0..3)
        .flat_map(|round| {
            let x = 10.0 * round as f32;
            [
                ("io", x),
                ("watch", x + 1.0),
                ("io", x + 1.0),
                ("io", x + 2.0),
            ]
        })
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(*log.lock(), expected);
    // An observer cannot declare results.
    assert!(
        HostCallback::new(
            "bad",
            CallbackKind::Observer,
            vec![],
            vec![f32s(1)],
            |_, _| Ok(())
        )
        .is_err()
    );
}

#[test]
fn a_program_naming_a_callback_it_was_not_given_is_refused() {
    let client = Client::open().unwrap();
    let double = pure_map("double", 4, |v| 2.0 * v);
    let program = program_around(&double, 4);
    let err = client
        .compile_and_load(&program, &CompileOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownCallback { id } if id == double.id()),
        "{err}"
    );
    let other = pure_map("other", 4, |v| v);
    let err = client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[other])
        .load()
        .unwrap_err();
    assert!(matches!(err, Error::UnknownCallback { .. }), "{err}");
    // An executable found through live_executables runs with the callbacks it was bound to,
    // for as long as a handle holds them.
    let exe = client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[double])
        .load()
        .unwrap();
    let listed = |client: &Client| {
        let found = client.live_executables().unwrap();
        found.into_iter().find(|e| e.id() == exe.id()).unwrap()
    };
    let a = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
    assert_eq!(
        listed(&client).execute(&[&a]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![3.; 4]
    );
    // Once no handle holds them, a listed executable (the compile cache keeps it loaded) has
    // none: running it is refused, not a crash (the plugin would segfault looking for the
    // missing context).
    let id = exe.id();
    drop(exe);
    let bare = (client.live_executables().unwrap().into_iter())
        .find(|e| e.id() == id)
        .unwrap();
    assert!(matches!(
        bare.execute(&[&a]),
        Err(Error::UnknownCallback { .. })
    ));
}

#[test]
fn callbacks_survive_serialization_and_are_reattached_by_id() {
    let client = Client::open().unwrap();
    let double = pure_map("scale", 4, |v| 2.0 * v);
    let exe = client
        .compile_request(program_around(&double, 4))
        .options(&CompileOptions::default())
        .callbacks(std::slice::from_ref(&double))
        .load()
        .unwrap();
    let bytes = exe.serialize().unwrap();
    let again = client
        .deserialize_executable(&bytes, None, &[double])
        .unwrap();
    assert_eq!(
        run(&again, &[1., 2., 3., 4.]).unwrap(),
        vec![3., 6., 9., 12.]
    );
    // Re-attached by id: a new closure under the same name runs instead.
    let tenfold = pure_map("scale", 4, |v| 10.0 * v);
    let swapped = client
        .deserialize_executable(&bytes, None, &[tenfold])
        .unwrap();
    assert_eq!(
        run(&swapped, &[1., 2., 3., 4.]).unwrap(),
        vec![11., 22., 33., 44.]
    );
    assert!(matches!(
        client.deserialize_executable(&bytes, None, &[]),
        Err(Error::UnknownCallback { .. })
    ));
}

#[test]
fn type_mismatches_fail_the_execution_naming_the_callback() {
    let client = Client::open().unwrap();
    // Declared f32[3], called with f32[4].
    let narrow = pure_map("narrow", 3, |v| v);
    let program = program_around(&pure_map("narrow", 4, |v| v), 4);
    let exe = client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[narrow])
        .load()
        .unwrap();
    assert_callback_error(run(&exe, &[1.; 4]), "narrow", &["f32[4]", "f32[3]"]);
    // A callback returning the wrong shape or dtype.
    for (label, value) in [
        ("shape", HostArray::from_slice(&[1f32; 2], &[2])),
        ("dtype", HostArray::from_slice(&[1i32; 4], &[4])),
    ] {
        let cb = HostCallback::returning(
            "returns_wrong",
            CallbackKind::Pure,
            vec![f32s(4)],
            vec![f32s(4)],
            move |_| Ok(vec![value.clone()]),
        )
        .unwrap();
        let exe = load_around(&client, cb);
        let wrong = run(&exe, &[1.; 4]);
        assert!(wrong.is_err(), "wrong {label} accepted");
        assert_callback_error(wrong, "returns_wrong", &["result 0"]);
    }
    // The right values through the returning form work.
    let ok = HostCallback::returning(
        "returns_right",
        CallbackKind::Pure,
        vec![f32s(4)],
        vec![f32s(4)],
        |ins| {
            let x = ins[0].as_slice::<f32>().unwrap();
            Ok(vec![HostArray::from_slice(
                &x.iter().map(|v| v - 1.0).collect::<Vec<_>>(),
                &[4],
            )])
        },
    )
    .unwrap();
    let exe = load_around(&client, ok);
    assert_eq!(run(&exe, &[1., 2., 3., 4.]).unwrap(), vec![1., 3., 5., 7.]);
}

#[test]
fn a_panicking_callback_fails_one_execution_and_nothing_else() {
    let client = Client::open().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let flaky = pure_map("flaky", 4, move |v| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("first call explodes");
        }
        v
    });
    let exe = load_around(&client, flaky);
    assert_callback_error(
        run(&exe, &[1.; 4]),
        "flaky",
        &["panicked", "first call explodes"],
    );
    // The same executable works afterwards, and so does the rest of the runtime.
    assert_eq!(run(&exe, &[1., 2., 3., 4.]).unwrap(), vec![2., 4., 6., 8.]);
    let plain = client
        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
        .unwrap();
    let a = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
    assert_eq!(
        plain.execute(&[&a, &a]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![2.; 4]
    );
}

thread_local! {
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A callback that calls back into the runtime: creates arrays and executes `inner`, and,
/// one level deep, the very executable it runs inside.
fn reentrant(
    client: &Client,
    inner: LoadedExecutable,
    slot: Arc<Mutex<Option<LoadedExecutable>>>,
) -> HostCallback {
    let client = client.clone();
    let types = vec![f32s(4)];
    HostCallback::new(
        "reenter",
        CallbackKind::Pure,
        types.clone(),
        types,
        move |ins, outs| {
            let x = ins[0].as_slice::<f32>().unwrap().to_vec();
            let device = &client.devices()[0];
            let a = device.put(&x, &[4]).map_err(|e| e.to_string())?;
            let added = inner.execute(&[&a, &a]).map_err(|e| e.to_string())?;
            let mut y = added[0].to_vec::<f32>().map_err(|e| e.to_string())?;
            if DEPTH.with(|d| d.get()) == 0 {
                DEPTH.with(|d| d.set(1));
                let outer = slot.lock().clone().expect("set before running");
                let nested = outer.execute(&[&a]).map_err(|e| e.to_string());
                DEPTH.with(|d| d.set(0));
                // outer(x) = reenter(x) + x = (2x + 0) + x at depth 1 (no further nesting adds).
                let nested = nested?[0].to_vec::<f32>().map_err(|e| e.to_string())?;
                for (o, n) in y.iter_mut().zip(nested) {
                    *o += n;
                }
            }
            outs[0].as_mut_slice::<f32>().unwrap().copy_from_slice(&y);
            Ok(())
        },
    )
    .unwrap()
}

fn reentrancy_on(client: Client) {
    let inner = client
        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
        .unwrap();
    let slot = Arc::new(Mutex::new(None));
    let cb = reentrant(&client, inner, slot.clone());
    let outer = load_around(&client, cb);
    *slot.lock() = Some(outer.clone());
    for _ in 0..1000 {
        let x = [1f32, 2., 3., 4.];
        // depth 0: reenter(x) = 2x + outer_nested(x); outer_nested(x) = 2x + x = 3x; so
        // reenter(x) = 5x and outer(x) = 5x + x = 6x.
        let out = common::within(std::time::Duration::from_secs(30), {
            let outer = outer.clone();
            move || run(&outer, &x)
        })
        .unwrap();
        assert_eq!(out, vec![6., 12., 18., 24.]);
    }
    *slot.lock() = None;
}

#[test]
fn callbacks_may_call_back_into_the_runtime() {
    reentrancy_on(Client::open().unwrap());
}

#[test]
fn eight_threads_four_callbacks_a_thousand_runs() {
    let client = Client::open().unwrap();
    let callbacks = [
        pure_map("add_one", 4, |v| v + 1.0),
        pure_map("times_two", 4, |v| v * 2.0),
        pure_map("minus_three", 4, |v| v - 3.0),
        pure_map("negate", 4, |v| -v),
    ];
    let t = "tensor<4xf32>";
    let program = format!(
        "module @chain {{\n  func.func public @main(%x: {t}) -> {t} {{\n    {}\n    {}\n    {}\n    {}\n    return %d : {t}\n  }}\n}}\n",
        callbacks[0].call_text("%a", &["%x"]),
        callbacks[1].call_text("%b", &["%a"]),
        callbacks[2].call_text("%c", &["%b"]),
        callbacks[3].call_text("%d", &["%c"]),
    );
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let client = client.clone();
            let (program, callbacks) = (program.clone(), callbacks.clone());
            std::thread::spawn(move || {
                let options = CompileOptions {
                    devices: Some(vec![common::nth_device(&client, t as usize).id()]),
                    ..Default::default()
                };
                let exe = client
                    .compile_request(&program)
                    .options(&options)
                    .callbacks(&callbacks)
                    .load()
                    .unwrap();
                for i in 0..1000 {
                    let x = [i as f32, t as f32, -1.0, 0.5];
                    let expected: Vec<f32> = x.iter().map(|v| -(((v + 1.0) * 2.0) - 3.0)).collect();
                    assert_eq!(run(&exe, &x).unwrap(), expected);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn two_handles_of_one_executable_keep_their_own_callbacks() {
    let client = Client::open().unwrap();
    let plus = pure_map("offset", 4, |v| v + 100.0);
    let minus = pure_map("offset", 4, |v| v - 100.0);
    let program = program_around(&plus, 4);
    let a = client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[plus])
        .load()
        .unwrap();
    let b = client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[minus])
        .load()
        .unwrap();
    assert_eq!(a, b, "one cached executable");
    std::thread::scope(|s| {
        for (exe, sign) in [(&a, 1.0f32), (&b, -1.0)] {
            s.spawn(move || {
                for i in 0..500 {
                    let x = i as f32;
                    assert_eq!(run(exe, &[x; 4]).unwrap(), vec![2.0 * x + sign * 100.0; 4]);
                }
            });
        }
    });
}

#[test]
fn async_execute_runs_callbacks_too() {
    let client = Client::open().unwrap();
    let cube = pure_map("cube", 4, |v| v * v * v);
    let exe = load_around(&client, cube);
    let a = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(exe.execute_async(&[&a])).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2., 10., 30., 68.]);
}

/// What only the CPU plugin shows: a one-device client (`cpu_device_count`), and send/recv
/// callbacks refused there (a GPU plugin runs them). The GPU check skips `cpu_plugin` modules.
mod cpu_plugin {
    use super::*;

    #[test]
    fn reentrancy_does_not_deadlock_on_a_one_device_client() {
        reentrancy_on(Client::builder().cpu_device_count(1).open().unwrap());
    }

    /// The GPU transport, host send/recv, is refused on CPU before the plugin sees it, with a
    /// pointer to the FFI path; the same callback through FFI then works.
    #[test]
    fn send_recv_callbacks_on_cpu_say_to_use_ffi_callbacks() {
        let client = Client::open().unwrap();
        let double = pure_map("double_sr", 4, |x| 2.0 * x);
        let t = "tensor<4xf32>";
        let program = format!(
            "module @sr {{\n  func.func public @main(%x: {t}) -> {t} {{\n{}\n    return %r : {t}\n  }}\n}}\n",
            double.send_recv_text("%r", &["%x"], 1)
        );
        let err = client
            .compile_request(&program)
            .options(&CompileOptions::default())
            .callbacks(std::slice::from_ref(&double))
            .load()
            .unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("send/recv") && message.contains("FFI callbacks"),
            "{message}"
        );

        let exe = load_around(&client, double);
        assert_eq!(
            run(&exe, &[1.0, 2.0, 3.0, 4.0]).unwrap(),
            vec![3.0, 6.0, 9.0, 12.0]
        );
    }
}
