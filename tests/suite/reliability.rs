//! Reliability against the real CPU plugin: a table of bad inputs (each a typed error that
//! leaves the client working and nothing leaked), supervision of a panicking actor, and
//! dropping the last handle while requests are in flight.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pjrt_actors::{
    ArrayType, CallbackKind, Client, CompileOptions, ElementType, Error, HostBuffer, HostCallback,
    LoadedExecutable, NamedValue, PluginError,
};

pub(crate) struct Fixture {
    pub client: Client,
    pub other: Client,
    pub add: LoadedExecutable,
    pub portable: LoadedExecutable,
    pub good: pjrt_actors::Array,
    pub serialized: Vec<u8>,
}

/// What a case must do: succeed (valid inputs), or fail with an error the matcher accepts.
pub(crate) enum Expect {
    Valid,
    Fails(fn(&Error) -> bool),
}

pub(crate) type Case = (&'static str, fn(&Fixture) -> Result<(), Error>, Expect);

pub(crate) fn compile(f: &Fixture, program: &[u8]) -> Result<(), Error> {
    f.client
        .compile_and_load(program, &CompileOptions::default())
        .map(|_| ())
}

fn run(f: &Fixture, args: &[&pjrt_actors::Array]) -> Result<(), Error> {
    f.add.execute(args).map(|_| ())
}

fn upload(f: &Fixture, bytes: &[u8], dims: &[i64]) -> Result<(), Error> {
    let d = &f.client.devices()[0];
    f.client
        .buffer_from_host(HostBuffer::Copy(bytes), ElementType::F32, dims, d, None)
        .map(|_| ())
}

fn open_plugin(path: &str) -> Result<(), Error> {
    Client::builder().plugin_path(path).open().map(|_| ())
}

pub(crate) fn f32x4() -> ArrayType {
    ArrayType {
        dtype: ElementType::F32,
        dims: vec![4],
    }
}

fn with_callback(f: &Fixture, cb: HostCallback, given: bool) -> Result<(), Error> {
    let program = format!(
        "module @cb {{ func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{ {} \n return %r : tensor<4xf32> }} }}",
        cb.call_text("%r", &["%x"])
    );
    let callbacks = if given { vec![cb] } else { vec![] };
    let exe = f
        .client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&callbacks)
        .load()?;
    exe.execute(&[&f.good]).map(|_| ())
}

fn cases() -> Vec<Case> {
    vec![
        (
            "empty program",
            |f| compile(f, b""),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "blank program",
            |f| compile(f, b" \n\t "),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "truncated MLIR",
            |f| compile(f, &common::add_f32x4().as_bytes()[..40]),
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "binary garbage",
            |f| {
                compile(
                    f,
                    &(0..2000u32)
                        .map(|i| (i * 7919 % 251) as u8)
                        .collect::<Vec<_>>(),
                )
            },
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "MLIR bytecode magic then garbage",
            |f| compile(f, b"ML\xefR\x00\x01garbage"),
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "unknown op",
            |f| {
                compile(f, b"module { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> { %0 = stablehlo.frobnicate %a : tensor<4xf32>\n return %0 : tensor<4xf32> } }")
            },
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "module without main",
            |f| {
                compile(f, b"module { func.func public @helper(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> } }")
            },
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "type error",
            |f| {
                compile(
                    f,
                    common::binary_program("add", &[4], "f32")
                        .replace("return %0 : tensor<4xf32>", "return %0 : tensor<5xf32>")
                        .as_bytes(),
                )
            },
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "too few arguments",
            |f| run(f, &[&f.good]),
            Expect::Fails(|e| matches!(e, Error::BadArgument { .. })),
        ),
        (
            "too many arguments",
            |f| run(f, &[&f.good, &f.good, &f.good]),
            Expect::Fails(|e| matches!(e, Error::BadArgument { .. })),
        ),
        (
            "wrong dtype",
            |f| run(f, &[&f.good, &f.client.devices()[0].put(&[1i32; 4], &[4])?]),
            Expect::Fails(|e| matches!(e, Error::BadArgument { .. })),
        ),
        (
            "wrong shape",
            |f| run(f, &[&f.client.devices()[0].put(&[1f32; 2], &[2])?, &f.good]),
            Expect::Fails(|e| matches!(e, Error::BadArgument { .. })),
        ),
        (
            "argument on another device",
            |f| run(f, &[&f.good, &f.client.devices()[3].put(&[1f32; 4], &[4])?]),
            Expect::Fails(|e| matches!(e, Error::BadArgument { .. })),
        ),
        (
            "array of another client",
            |f| run(f, &[&f.good, &f.other.devices()[0].put(&[1f32; 4], &[4])?]),
            Expect::Fails(|e| matches!(e, Error::BadArgument { .. })),
        ),
        (
            "deleted array executed",
            |f| {
                let a = f.client.devices()[0].put(&[1f32; 4], &[4])?;
                a.delete();
                run(f, &[&a, &a])
            },
            Expect::Fails(|e| matches!(e, Error::Deleted { .. })),
        ),
        (
            "deleted array read",
            |f| {
                let a = f.client.devices()[0].put(&[1f32; 4], &[4])?;
                a.delete();
                a.to_vec::<f32>().map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::Deleted { .. })),
        ),
        (
            "deleted array copied",
            |f| {
                let a = f.client.devices()[0].put(&[1f32; 4], &[4])?;
                a.delete();
                a.copy_to_device(&f.client.devices()[1]).map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::Deleted { .. })),
        ),
        (
            "host data too short",
            |f| upload(f, &[0; 15], &[4]),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "host data too long",
            |f| upload(f, &[0; 17], &[4]),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "shape overflowing usize",
            |f| upload(f, &[0; 16], &[i64::MAX, i64::MAX]),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "negative dimension",
            |f| upload(f, &[0; 16], &[-1, 4]),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "zero-sized array (valid)",
            |f| {
                let a = f.client.devices()[0].put::<f32>(&[], &[0, 4])?;
                assert_eq!(a.to_vec::<f32>()?.len(), 0);
                Ok(())
            },
            Expect::Valid,
        ),
        (
            "rank-0 array (valid)",
            |f| {
                let a = f.client.devices()[0].put(&[2.5f64], &[])?;
                assert_eq!(a.to_vec::<f64>()?, vec![2.5]);
                Ok(())
            },
            Expect::Valid,
        ),
        (
            "upload to another client's device",
            |f| {
                f.client
                    .buffer_from_host(
                        HostBuffer::Copy(&[0u8; 16]),
                        ElementType::F32,
                        &[4],
                        &f.other.devices()[0],
                        None,
                    )
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "memory space of another device",
            |f| {
                let m = f.client.devices()[2].default_memory_space()?;
                f.client
                    .buffer_from_host(
                        HostBuffer::Copy(&[0; 16]),
                        ElementType::F32,
                        &[4],
                        &f.client.devices()[0],
                        Some(&m),
                    )
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "invalid device id",
            |f| f.client.device_by_id(77).map(|_| ()),
            Expect::Fails(|e| matches!(e, Error::NotFound { .. })),
        ),
        (
            "invalid local hardware id",
            |f| f.client.device_from_local_hardware_id(-3).map(|_| ()),
            Expect::Fails(|e| matches!(e, Error::NotFound { .. })),
        ),
        (
            "invalid memory kind",
            |f| {
                f.client.devices()[0]
                    .memory_space_by_kind("hbm")
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::NotFound { .. })),
        ),
        (
            "garbage serialized executable",
            |f| {
                f.client
                    .deserialize_executable(b"\x00\x01garbage bytes here", None, &[])
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::Deserialize { .. })),
        ),
        (
            "truncated serialized executable",
            |f| {
                f.client
                    .deserialize_executable(&f.serialized[..f.serialized.len() - 7], None, &[])
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::Deserialize { .. })),
        ),
        (
            "empty serialized executable",
            |f| f.client.deserialize_executable(&[], None, &[]).map(|_| ()),
            Expect::Fails(|e| matches!(e, Error::Deserialize { .. })),
        ),
        (
            "plugin path that does not exist",
            |_| open_plugin("/nonexistent/plugin.so"),
            Expect::Fails(|e| matches!(e, Error::Plugin(PluginError::NotFound { .. }))),
        ),
        (
            "a shared object that is not a plugin",
            |_| {
                open_plugin(
                    [
                        "/lib/x86_64-linux-gnu/libm.so.6",
                        "/usr/lib/x86_64-linux-gnu/libm.so.6",
                    ]
                    .into_iter()
                    .find(|p| Path::new(p).exists())
                    .unwrap(),
                )
            },
            Expect::Fails(|e| matches!(e, Error::Plugin(PluginError::NotAPlugin { .. }))),
        ),
        (
            "a text file as plugin",
            |_| {
                let p = common::scratch_dir("corpus").join("plugin.so");
                std::fs::write(&p, "text").unwrap();
                open_plugin(p.to_str().unwrap())
            },
            Expect::Fails(|e| matches!(e, Error::Plugin(PluginError::NotAPlugin { .. }))),
        ),
        (
            "create option of the wrong type (aborts the plugin)",
            |_| {
                Client::builder()
                    .option("cpu_device_count", NamedValue::Float(2.0))
                    .open()
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidOption { .. })),
        ),
        (
            "zero devices",
            |_| Client::builder().cpu_device_count(0).open().map(|_| ()),
            Expect::Fails(|e| matches!(e, Error::InvalidOption { .. })),
        ),
        (
            "more replicas than devices",
            |f| {
                f.client
                    .compile_and_load(
                        common::add_f32x4(),
                        &CompileOptions {
                            num_replicas: Some(9),
                            ..Default::default()
                        },
                    )
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "device assignment naming a missing device",
            |f| {
                f.client
                    .compile_and_load(
                        common::add_f32x4(),
                        &CompileOptions {
                            devices: Some(vec![42]),
                            ..Default::default()
                        },
                    )
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "portable with replicas",
            |f| {
                f.client
                    .compile_and_load(
                        common::add_f32x4(),
                        &CompileOptions {
                            portable: true,
                            num_replicas: Some(2),
                            ..Default::default()
                        },
                    )
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "portable run without a device",
            |f| f.portable.execute(&[&f.good, &f.good]).map(|_| ()),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "device-bound run on a chosen device",
            |f| {
                f.add
                    .execute_on(&f.client.devices()[0], &[&f.good, &f.good])
                    .map(|_| ())
            },
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "read back as the wrong type",
            |f| f.good.to_vec::<i64>().map(|_| ()),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "read back into the wrong length",
            |f| f.good.read_into(&mut [0f32; 5]),
            Expect::Fails(|e| matches!(e, Error::InvalidArgument(_))),
        ),
        (
            "callback that panics",
            |f| {
                with_callback(
                    f,
                    HostCallback::new(
                        "boom",
                        CallbackKind::Pure,
                        vec![f32x4()],
                        vec![f32x4()],
                        |_, _| panic!("boom"),
                    )
                    .unwrap(),
                    true,
                )
            },
            Expect::Fails(|e| matches!(e, Error::Callback { name, .. } if name == "boom")),
        ),
        (
            "callback returning the wrong shape",
            |f| {
                with_callback(
                    f,
                    HostCallback::returning(
                        "short",
                        CallbackKind::Pure,
                        vec![f32x4()],
                        vec![f32x4()],
                        |_| Ok(vec![pjrt_actors::HostArray::from_slice(&[1f32; 3], &[3])]),
                    )
                    .unwrap(),
                    true,
                )
            },
            Expect::Fails(|e| matches!(e, Error::Callback { name, .. } if name == "short")),
        ),
        (
            "callback returning an error",
            |f| {
                with_callback(
                    f,
                    HostCallback::new(
                        "refuses",
                        CallbackKind::Pure,
                        vec![f32x4()],
                        vec![f32x4()],
                        |_, _| Err("no".into()),
                    )
                    .unwrap(),
                    true,
                )
            },
            Expect::Fails(|e| matches!(e, Error::Callback { name, .. } if name == "refuses")),
        ),
        // Found by the compile_bytes fuzz target: the plugin's MLIR lexer read past the end of
        // an unterminated program (heap overflow under ASan); the fence now adds a NUL.
        (
            "short unterminated program (fuzz regression)",
            |f| compile(f, b"telenmss"),
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "callback blocking past its timeout",
            |f| {
                let slow = HostCallback::new(
                    "sleepy",
                    CallbackKind::Pure,
                    vec![f32x4()],
                    vec![f32x4()],
                    |_, _| {
                        std::thread::sleep(Duration::from_secs(3));
                        Ok(())
                    },
                )
                .unwrap()
                .with_timeout(Duration::from_millis(100));
                with_callback(f, slow, true)
            },
            Expect::Fails(
                |e| matches!(e, Error::Callback { name, reason } if name == "sleepy" && reason.contains("within")),
            ),
        ),
        (
            "callback with a timeout returning in time (valid)",
            |f| {
                let quick = HostCallback::new(
                    "quick",
                    CallbackKind::Pure,
                    vec![f32x4()],
                    vec![f32x4()],
                    |ins, outs| {
                        outs[0].data.copy_from_slice(ins[0].data);
                        Ok(())
                    },
                )
                .unwrap()
                .with_timeout(Duration::from_secs(10));
                with_callback(f, quick, true)
            },
            Expect::Valid,
        ),
        (
            "every call after the client is shut down",
            |_| {
                let client = Client::open()?;
                let exe =
                    client.compile_and_load(common::add_f32x4(), &CompileOptions::default())?;
                let a = client.devices()[0].put(&[1f32; 4], &[4])?;
                let memory = client.devices()[1].default_memory_space()?;
                let topology = client.topology()?;
                use pjrt_actors::wait;
                client.shutdown();
                assert!(client.is_shut_down());
                let calls: Vec<Result<(), Error>> = vec![
                    exe.execute(&[&a, &a]).map(|_| ()),
                    a.to_vec::<f32>().map(|_| ()),
                    a.block_until_ready(),
                    a.copy_to_device(&client.devices()[1]).map(|_| ()),
                    client.devices()[0].put(&[1f32; 4], &[4]).map(|_| ()),
                    client
                        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
                        .map(|_| ()),
                    client
                        .deserialize_executable(b"whatever", None, &[])
                        .map(|_| ()),
                    client.topology().map(|_| ()),
                    client.live_arrays().map(|_| ()),
                    client.heap_profile().map(|_| ()),
                    client.defragment().map(|_| ()),
                    client.devices()[1].memory_stats().map(|_| ()),
                    client.devices()[0]
                        .default_memory_space()?
                        .describe()
                        .map(|_| ()),
                    exe.serialize().map(|_| ()),
                    exe.cost_analysis().map(|_| ()),
                    exe.compiled_memory_stats().map(|_| ()),
                    exe.optimized_program_text().map(|_| ()),
                    wait(exe.execute_async(&[&a, &a])).map(|_| ()),
                    wait(a.to_bytes_async()).map(|_| ()),
                    wait(a.copy_to_device_async(&client.devices()[1])).map(|_| ()),
                    a.copy_to_memory(&memory).map(|_| ()),
                    wait(a.copy_to_memory_async(&memory)).map(|_| ()),
                    memory.set_budget(Some(1)),
                    client.devices()[0].work_stats().map(|_| ()),
                    (client.compile_request(common::add_f32x4()))
                        .compile()
                        .map(|_| ()),
                    client
                        .compile_for_topology(
                            common::add_f32x4(),
                            &CompileOptions::default(),
                            &topology,
                        )
                        .map(|_| ()),
                    client.create_topology("cpu", &[]).map(|_| ()),
                    client.clear_compile_cache().map(|_| ()),
                    client.live_executables().map(|_| ()),
                ];
                for (i, c) in calls.into_iter().enumerate() {
                    assert!(matches!(c, Err(Error::ShutDown)), "call {i}: {c:?}");
                }
                Err(Error::ShutDown)
            },
            Expect::Fails(|e| matches!(e, Error::ShutDown)),
        ),
        (
            "program calling a callback it was not given",
            |f| {
                with_callback(
                    f,
                    HostCallback::new(
                        "absent",
                        CallbackKind::Pure,
                        vec![f32x4()],
                        vec![f32x4()],
                        |_, _| Ok(()),
                    )
                    .unwrap(),
                    false,
                )
            },
            Expect::Fails(|e| matches!(e, Error::UnknownCallback { .. })),
        ),
    ]
}

#[test]
fn every_bad_input_is_a_typed_error_and_leaves_nothing_behind() {
    let client = Client::open().unwrap();
    let other = Client::open().unwrap();
    let add = client
        .compile_and_load(common::add_f32x4(), &CompileOptions::default())
        .unwrap();
    let portable = client
        .compile_and_load(
            common::add_f32x4(),
            &CompileOptions {
                portable: true,
                ..Default::default()
            },
        )
        .unwrap();
    let good = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    let serialized = add.serialize().unwrap();
    let f = Fixture {
        client,
        other,
        add,
        portable,
        good,
        serialized,
    };
    // The first table, and the red-team pass's (issue 13) in `red_team.rs`.
    let cases: Vec<Case> = cases()
        .into_iter()
        .chain(crate::red_team::cases())
        .collect();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    for (name, case, expected) in cases {
        let arrays = f.client.live_array_count();
        let executables = f.client.live_executables().unwrap().len();
        match (case(&f), expected) {
            (Ok(()), Expect::Valid) => {}
            (Ok(()), Expect::Fails(_)) => panic!("{name}: succeeded, expected an error"),
            (Err(e), Expect::Valid) => panic!("{name}: failed: {e:?}"),
            (Err(e), Expect::Fails(matches)) => {
                assert!(matches(&e), "{name}: unexpected error {e:?}")
            }
        }
        // The client still works, and nothing the failed call touched was leaked. (The compile
        // cache may keep one executable per successful distinct compile.)
        let out = f.add.execute(&[&f.good, &f.good]).unwrap();
        assert_eq!(
            out[0].to_vec::<f32>().unwrap(),
            vec![2., 4., 6., 8.],
            "{name}"
        );
        drop(out);
        assert_eq!(f.client.live_array_count(), arrays, "{name}: arrays leaked");
        let now = f.client.live_executables().unwrap().len();
        assert!(
            now <= executables + 1,
            "{name}: executables leaked ({executables} -> {now})"
        );
        f.client.clear_compile_cache().unwrap();
        assert!(
            f.client.live_executables().unwrap().len() <= executables.max(2),
            "{name}"
        );
    }
}

#[cfg(feature = "test-hooks")]
#[test]
fn a_panicking_actor_fails_one_request_and_is_restarted() {
    let client = Client::open().unwrap();
    let device = common::nth_device(&client, 1);
    let had_stats = device.memory_stats().unwrap().is_some();
    let before = pjrt_actors_core::protocol::supervision::restarts();
    match device.poison_actor() {
        Err(Error::Panicked { what, reason }) => {
            assert_eq!(what, "poison");
            assert!(reason.contains("poisoned on purpose"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(common::eventually(Duration::from_secs(5), || {
        pjrt_actors_core::protocol::supervision::restarts() > before
    }));
    // The next requests to the same actor work.
    assert_eq!(device.memory_stats().unwrap().is_some(), had_stats);
    let exe = client
        .compile_and_load(
            common::add_f32x4(),
            &CompileOptions {
                devices: Some(vec![device.id()]),
                ..Default::default()
            },
        )
        .unwrap();
    let a = device.put(&[1f32; 4], &[4]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(exe.execute_async(&[&a, &a])).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0; 4]);
}

#[test]
fn dropping_the_last_handle_with_requests_in_flight() {
    let before: std::collections::BTreeSet<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    common::within(Duration::from_secs(120), || {
        let client = Client::open().unwrap();
        let exe = client
            .compile_and_load(common::add_f32x4(), &CompileOptions::default())
            .unwrap();
        let a = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
        // Hundreds of async requests in flight through the actors, then everything dropped at
        // once: the runtime, the tasks (and their handles), and ours.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let outcomes = Arc::new(parking_lot::Mutex::new((0usize, 0usize)));
        // A panic inside a tokio task is swallowed with the task: failures are collected here
        // and asserted on this thread instead.
        let failures = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
        for i in 0..400 {
            let (client, exe, a, outcomes, failures) = (
                client.clone(),
                exe.clone(),
                a.clone(),
                outcomes.clone(),
                failures.clone(),
            );
            rt.spawn(async move {
                loop {
                    let r = match i % 3 {
                        0 => exe.execute_async(&[&a, &a]).await.map(|_| ()),
                        1 => a.to_bytes_async().await.map(|_| ()),
                        _ => client.live_arrays_async().await.map(|_| ()),
                    };
                    let mut o = outcomes.lock();
                    match r {
                        Ok(()) => o.0 += 1,
                        Err(Error::ShutDown) => o.1 += 1,
                        Err(e) => {
                            failures.lock().push(format!("request {i}: {e}"));
                            return;
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        drop((client, exe, a));
        rt.shutdown_timeout(Duration::from_secs(10));
        let (ok, shut_down) = *outcomes.lock();
        assert!(
            ok >= 400,
            "every task's requests ran ({ok} ok, {shut_down} shut down)"
        );
        let failures = failures.lock();
        assert!(
            failures.is_empty(),
            "requests failed with neither success nor ShutDown: {:?}",
            &failures[..failures.len().min(5)]
        );
    });
    // Every thread the client or the runtime started is gone.
    assert!(common::eventually(Duration::from_secs(10), || {
        let now: std::collections::BTreeSet<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        now.difference(&before).all(|tid| {
            let name =
                std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
            // Only the plugin's process-wide compile threads may stay (see tests/shutdown.rs).
            name.trim().starts_with("pjrt-actors-com") || name.trim().is_empty()
        })
    }));
}
