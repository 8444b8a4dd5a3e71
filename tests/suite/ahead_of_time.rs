//! Compiling without loading (`PJRT_Compile` against a topology) on whatever plugin the suite
//! runs on: the CPU plugin has no ahead-of-time compiler, so there the fallback is checked; a GPU
//! plugin's is checked where the GPU check runs this binary.

use crate::common::{check_distinct, distinct_module};
use pjrt_actors::{Client, CompileOptions, Error, NamedValue};

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
fn a_topology_the_plugin_cannot_compile_for_is_a_typed_error() {
    let client = Client::open().unwrap();
    let (program, _) = distinct_module(12, 2);
    if client.platform() == "cpu" {
        // Another device count is another topology; with no `PJRT_Compile` it cannot be
        // compiled for without a client of it, and the error says why.
        let two = Client::builder().cpu_device_count(2).open().unwrap();
        let foreign = two.topology().unwrap();
        match client.compile_for_topology(&program, &CompileOptions::default(), &foreign) {
            Err(Error::TopologyMismatch { reason }) => {
                assert!(reason.contains("PJRT_Compile"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // Nor does the CPU plugin make topologies by name: an error, and the client goes on.
        let made = client.create_topology("cpu", &[("cpu_device_count", NamedValue::Int64(2))]);
        assert!(made.is_err(), "{made:?}");
        assert!(client.compile_request(&program).compile().is_ok());
    }
    // Bytes that describe no topology are refused, on any plugin, before anything is compiled.
    let garbage = pjrt_actors::TopologyDescription::from_serialized(b"not a topology".to_vec());
    let refused = client.compile_for_topology(&program, &CompileOptions::default(), &garbage);
    assert!(refused.is_err(), "{refused:?}");
    assert!(client.compile_request(&program).compile().is_ok());
}
