//! Compiling without loading (`PJRT_Compile` against a topology) on whatever plugin the suite
//! runs on: the CPU plugin has no ahead-of-time compiler, so there the fallback is checked; a GPU
//! plugin's is checked where the GPU check runs this binary.

use crate::common::{check_distinct, distinct_module};
use pjrt_actors::{Client, CompileOptions};

fn live(client: &Client) -> usize {
    client.live_executables().unwrap().len()
}

#[test]
fn compiling_for_a_topology_loads_nothing_and_the_result_runs() {
    let client = Client::open().unwrap();
    let (program, dims) = distinct_module(11, 2);
    let before = live(&client);
    let own = client.topology().unwrap();
    let compiled = client
        .compile_for_topology(&program, &CompileOptions::default(), &own)
        .unwrap();
    let plain = client.compile_request(&program).compile().unwrap();
    assert_eq!(
        live(&client),
        before,
        "a compile without loading left a load"
    );
    assert_eq!(compiled.fingerprint(), plain.fingerprint());
    assert!(compiled.topology_description().matches(&own));
    let loaded = compiled.load(&client).unwrap();
    check_distinct(&loaded, &client.devices()[0], &dims, 2);
}

#[test]
fn bytes_that_describe_no_topology_are_refused_before_anything_compiles() {
    let client = Client::open().unwrap();
    let (program, _) = distinct_module(12, 2);
    let garbage = pjrt_actors::TopologyDescription::from_serialized(b"not a topology".to_vec());
    let refused = client.compile_for_topology(&program, &CompileOptions::default(), &garbage);
    // The plugin's InvalidArgument, as the README says (not any error).
    match refused {
        Err(pjrt_actors::Error::Pjrt {
            code: pjrt_actors::PjrtCode::InvalidArgument,
            ..
        }) => {}
        other => panic!(
            "expected the plugin's InvalidArgument, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(client.compile_request(&program).compile().is_ok());
}

/// Another topology, made the CPU plugin's way (another `cpu_device_count`). The GPU check
/// skips `cpu_plugin` modules; there `gpu_check` asks the plugin to `create_topology`.
mod cpu_plugin {
    use crate::common::distinct_module;
    use pjrt_actors::{Client, CompileOptions, Error, NamedValue};

    #[test]
    fn another_device_count_is_another_topology_compiled_for_with_pjrt_compile_else_refused() {
        let client = Client::open().unwrap();
        let (program, _) = distinct_module(12, 2);
        let two = Client::builder().cpu_device_count(2).open().unwrap();
        // An executable compiled for this client does not load on the other.
        let unloaded = client.compile_request(&program).compile().unwrap();
        assert!(matches!(
            unloaded.load(&two),
            Err(Error::TopologyMismatch { .. })
        ));
        // The 0.81 and 0.106 CPU plugins have no `PJRT_Compile`, so another topology cannot be
        // compiled for without a client of it, and the error says why; the 0.115 one has it: the
        // executable is for the other topology, refused here and run there.
        let foreign = two.topology().unwrap();
        let from_bytes =
            pjrt_actors::TopologyDescription::from_serialized(foreign.serialized.clone());
        for topology in [&foreign, &from_bytes] {
            match client.compile_for_topology(&program, &CompileOptions::default(), topology) {
                Err(Error::TopologyMismatch { reason }) if !crate::common::strict_cpu_client() => {
                    assert!(reason.contains("PJRT_Compile"), "{reason}")
                }
                Ok(exe) if crate::common::strict_cpu_client() => {
                    assert!(matches!(
                        exe.load(&client),
                        Err(Error::TopologyMismatch { .. })
                    ));
                    let (_, dims) = distinct_module(12, 2);
                    crate::common::check_distinct(
                        &exe.load(&two).unwrap(),
                        &two.devices()[0],
                        &dims,
                        2,
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        // Nor does the CPU plugin make topologies by name: an error, and the client goes on.
        let made = client.create_topology("cpu", &[("cpu_device_count", NamedValue::Int64(2))]);
        // The plugin's Unimplemented, as the README says (not any error).
        assert!(
            matches!(
                made,
                Err(Error::Pjrt {
                    code: pjrt_actors::PjrtCode::Unimplemented,
                    ..
                })
            ),
            "{made:?}"
        );
        // Its async form says the same.
        let asked =
            client.create_topology_async("cpu", &[("cpu_device_count", NamedValue::Int64(2))]);
        let made_async = pjrt_actors::wait(asked);
        assert_eq!(
            made_async.unwrap_err().to_string(),
            made.unwrap_err().to_string()
        );
        assert!(client.compile_request(&program).compile().is_ok());
    }
}
