//! Every invalid input to arrays, compile and execute is refused with its typed error before
//! the plugin sees it (or, for what only the plugin can judge, with its message), and leaves
//! the client working with nothing leaked.

use crate::common;

use common::{add_f32x4, binary_program};
use pjrt_actors::{Client, CompileOptions, ElementType, Error, HostBuffer};

fn setup() -> (Client, pjrt_actors::LoadedExecutable) {
    let client = Client::open().unwrap();
    let exe = client
        .compile_and_load(add_f32x4(), &CompileOptions::default())
        .unwrap();
    (client, exe)
}

#[test]
fn host_data_that_does_not_fit_the_shape() {
    let (client, _) = setup();
    let d = &client.devices()[0];
    let upload = |bytes: &[u8], dims: &[i64]| {
        client.buffer_from_host(HostBuffer::Copy(bytes), ElementType::F32, dims, d, None)
    };
    assert!(matches!(
        upload(&[0u8; 15], &[4]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        upload(&[0u8; 17], &[4]),
        Err(Error::InvalidArgument(_))
    ));
    // Shapes whose byte size overflows: refused, not wrapped around.
    assert!(matches!(
        upload(&[0u8; 16], &[i64::MAX, 4]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        upload(&[0u8; 16], &[1 << 62, 1 << 62]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        upload(&[0u8; 16], &[-4]),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(client.live_array_count(), 0);
}

#[test]
fn devices_and_memories_of_the_wrong_owner() {
    let (client, exe) = setup();
    let other = Client::open().unwrap();
    let mine = &client.devices()[0];
    let theirs = &other.devices()[0];
    let err = client
        .buffer_from_host(
            HostBuffer::Copy(&[0u8; 16]),
            ElementType::F32,
            &[4],
            theirs,
            None,
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("another client")),
        "{err}"
    );
    let wrong_memory = client.devices()[1].default_memory_space().unwrap();
    let err = client
        .buffer_from_host(
            HostBuffer::Copy(&[0u8; 16]),
            ElementType::F32,
            &[4],
            mine,
            Some(&wrong_memory),
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("not a memory space")),
        "{err}"
    );
    // An array of another client, passed to our executable.
    let foreign = theirs.put(&[1f32; 4], &[4]).unwrap();
    let local = mine.put(&[1f32; 4], &[4]).unwrap();
    let err = exe.execute(&[&local, &foreign]).unwrap_err();
    assert!(
        matches!(err, Error::BadArgument { index: 1, ref reason, .. } if reason.contains("another client")),
        "{err}"
    );
    assert!(matches!(
        local.copy_to_device(theirs),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn wrong_arguments_to_execute() {
    let (client, exe) = setup();
    let d0 = &client.devices()[0];
    let good = d0.put(&[1f32; 4], &[4]).unwrap();
    let wrong_dtype = d0.put(&[1i32; 4], &[4]).unwrap();
    let wrong_shape = d0.put(&[1f32; 6], &[2, 3]).unwrap();
    let wrong_device = client.devices()[2].put(&[1f32; 4], &[4]).unwrap();
    let cases: Vec<(Vec<&pjrt_actors::Array>, usize, &str)> = vec![
        (vec![&good], 1, "expected 2 arguments"),
        (vec![&good, &good, &good], 3, "expected 2 arguments"),
        (vec![&good, &wrong_dtype], 1, "expected f32[4], got s32[4]"),
        (
            vec![&wrong_shape, &good],
            0,
            "expected f32[4], got f32[2, 3]",
        ),
        (vec![&good, &wrong_device], 1, "device index 2"),
    ];
    for (args, index, needle) in cases {
        match exe.execute(&args) {
            Err(Error::BadArgument {
                index: i,
                reason,
                executable,
                ..
            }) => {
                assert_eq!(i, index, "{reason}");
                assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
                assert_eq!(executable, "add_prog");
            }
            other => panic!("expected BadArgument for {needle}, got {other:?}"),
        }
    }
    assert_eq!(client.live_array_count(), 4);
    assert_eq!(
        exe.execute(&[&good, &good]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![2.; 4]
    );
}

#[test]
fn deleted_arrays() {
    let (client, exe) = setup();
    let d = &client.devices()[0];
    let a = d.put(&[1f32; 4], &[4]).unwrap();
    let alias = a.clone();
    a.delete();
    assert!(alias.is_deleted());
    assert!(matches!(exe.execute(&[&a, &a]), Err(Error::Deleted { .. })));
    assert!(matches!(alias.to_vec::<f32>(), Err(Error::Deleted { .. })));
    assert!(matches!(
        alias.copy_to_device(&common::nth_device(&client, 1)),
        Err(Error::Deleted { .. })
    ));
    assert!(matches!(
        alias.block_until_ready(),
        Err(Error::Deleted { .. })
    ));
    a.delete(); // deleting twice is harmless
}

#[test]
fn reading_back_with_the_wrong_type_or_size() {
    let (client, _) = setup();
    let a = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
    assert!(matches!(a.to_vec::<f64>(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        a.read_into(&mut [0f32; 3]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.read_bytes_into(&mut [0u8; 15]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn malformed_programs() {
    let (client, _) = setup();
    let compile = |p: &[u8]| client.compile_and_load(p, &CompileOptions::default());
    assert!(matches!(compile(b""), Err(Error::InvalidArgument(_))));
    assert!(matches!(compile(b"  \n "), Err(Error::InvalidArgument(_))));
    // The plugin's diagnostic, with its location, reaches the caller.
    let err = compile(b"module {\n  func.func @main() -> tensor<4xf32> {\n    %0 = stablehlo.bogus_op : tensor<4xf32>\n  }\n}").unwrap_err();
    match &err {
        Error::Pjrt {
            function, message, ..
        } => {
            assert_eq!(*function, "PJRT_Client_Compile");
            assert!(
                message.contains("bogus_op") || message.contains("3:"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    assert!(matches!(compile(&garbage), Err(Error::Pjrt { .. })));
    let truncated = add_f32x4();
    assert!(matches!(
        compile(&truncated.as_bytes()[..truncated.len() / 2]),
        Err(Error::Pjrt { .. })
    ));
    // Type errors inside an otherwise valid module.
    let bad_types = binary_program("add", &[4], "f32")
        .replace("return %0 : tensor<4xf32>", "return %0 : tensor<5xf32>");
    assert!(matches!(
        compile(bad_types.as_bytes()),
        Err(Error::Pjrt { .. })
    ));
    // Only the executable `setup` compiled is alive: no failed compile left one behind.
    assert_eq!(client.live_executables().unwrap().len(), 1);
    assert!(compile(add_f32x4().as_bytes()).is_ok());
}

#[test]
fn compile_options_the_plugin_would_abort_on() {
    let (client, _) = setup();
    let compile = |o: CompileOptions| client.compile_and_load(add_f32x4(), &o);
    // Zero replicas or partitions abort the plugin; unset means one.
    assert!(
        compile(CompileOptions {
            num_replicas: Some(0),
            num_partitions: Some(0),
            ..Default::default()
        })
        .is_ok()
    );
    // A caller-built proto that leaves the counts at 0 (what aborts the plugin) is mended.
    let proto = pjrt_actors::CompileOptionsProto::default();
    assert!(
        compile(CompileOptions {
            proto: Some(proto),
            ..Default::default()
        })
        .is_ok()
    );
    let refused = [
        CompileOptions {
            num_replicas: Some(5),
            ..Default::default()
        },
        CompileOptions {
            devices: Some(vec![0, 7]),
            num_replicas: Some(2),
            ..Default::default()
        },
        CompileOptions {
            devices: Some(vec![1, 1]),
            num_replicas: Some(2),
            ..Default::default()
        },
        CompileOptions {
            devices: Some(vec![1]),
            num_replicas: Some(2),
            ..Default::default()
        },
        CompileOptions {
            portable: true,
            num_replicas: Some(2),
            ..Default::default()
        },
        CompileOptions {
            portable: true,
            devices: Some(vec![0]),
            ..Default::default()
        },
    ];
    for options in refused {
        let desc = format!("{options:?}");
        assert!(
            matches!(compile(options), Err(Error::InvalidArgument(_))),
            "{desc}"
        );
    }
}

#[test]
fn errors_name_the_callers_span() {
    let (client, exe) = setup();
    let good = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("serve_request", id = 7);
        let _entered = span.enter();
        match exe.execute(&[&good]) {
            Err(e @ Error::BadArgument { .. }) => {
                assert!(e.to_string().contains("(in serve_request)"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    });
}

/// Reads its program from the source tree, which the GPU check does not carry.
mod cpu_plugin {
    use pjrt_actors::{Client, CompileOptions, Error};

    #[test]
    fn a_program_newer_than_the_plugins_stablehlo_says_so_and_what_to_do() {
        // jnp.sinh as jax 0.10.2 exports it: `stablehlo.composite`, which the 0.81 CPU plugin's
        // StableHLO 1.13.3 cannot parse and the 0.115 one (1.20.0) runs.
        let program = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/stablehlo/sinh.mlirbc"),
        )
        .unwrap();
        let client = Client::open().unwrap();
        match client.compile_and_load(&program, &CompileOptions::default()) {
            Err(e @ Error::StableHloTooNew { .. }) => {
                assert!(!crate::common::new_abi(), "{e}");
                let text = e.to_string();
                assert!(
                    text.contains("the plugin's is 1.13.3") && text.contains("StableHLO_v1.15.0"),
                    "{text}"
                );
            }
            Ok(exe) => {
                assert!(crate::common::new_abi());
                let x = client.devices()[0].put(&[0f32, 1., 2., 3.], &[4]).unwrap();
                let y = exe.execute(&[&x]).unwrap()[0].to_vec::<f32>().unwrap();
                for (got, v) in y.iter().zip([0f32, 1., 2., 3.]) {
                    assert!(
                        (got - v.sinh()).abs() <= 1e-6 * v.sinh().abs().max(1.0),
                        "{y:?}"
                    );
                }
            }
            Err(other) => panic!("{other:?}"),
        }
    }
}
