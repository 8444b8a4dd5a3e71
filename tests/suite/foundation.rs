//! The foundation against the real CPU plugin: devices, memory spaces, the snapshot and actor
//! queries, many threads on one handle, and two clients in one process.
use std::collections::HashSet;
use std::sync::Arc;

use pjrt_actors::{Client, Error, NamedValue};

#[test]
fn four_cpu_devices_by_default() {
    let client = Client::open().unwrap();
    assert_eq!(client.platform(), "cpu");
    assert_eq!(client.raw_platform_name(), "cpu");
    assert_eq!(client.runtime_type(), "pjrt_c_api");
    assert_eq!(client.process_index(), 0);
    assert_eq!(client.device_count(), 4);
    assert_eq!(client.local_device_count(), 4);
    let devices = client.devices();
    assert_eq!(devices, client.local_devices());
    assert_eq!(devices, client.all_devices());
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.id(), i as i32);
        assert_eq!(d.kind(), "cpu");
        assert_eq!(d.process_index(), 0);
        assert_eq!(d.local_hardware_id(), Some(i as i32));
        assert!(d.is_addressable());
        assert!(!d.debug_string().is_empty());
        assert!(!d.display_string().is_empty());
        assert_eq!(&client.device_from_local_hardware_id(i as i32).unwrap(), d);
        assert_eq!(&client.device_by_id(i as i32).unwrap(), d);
        assert_eq!(d.client(), client);
    }
    let (major, minor) = client.plugin_api_version();
    assert_eq!((major, minor >= 54), (0, true));
    for name in [
        "xla_version",
        "stablehlo_current_version",
        "stablehlo_minimum_version",
    ] {
        assert!(
            client.plugin_attribute(name).is_some(),
            "plugin attribute {name} missing"
        );
    }
    assert!(client.attributes().len() >= client.plugin_attributes().len() + 4);
}

#[test]
fn eight_devices_with_cpu_device_count() {
    let client = Client::builder().cpu_device_count(8).open().unwrap();
    assert_eq!(client.device_count(), 8);
    let ids: Vec<i32> = client.devices().iter().map(|d| d.id()).collect();
    assert_eq!(ids, (0..8).collect::<Vec<_>>());
    assert_eq!(
        client
            .devices()
            .iter()
            .flat_map(|d| d.memory_spaces())
            .count(),
        24
    );
}

#[test]
fn three_memory_spaces_per_device_with_the_right_kinds() {
    let client = Client::open().unwrap();
    let mut all_ids = HashSet::new();
    for device in client.devices() {
        let spaces = device.memory_spaces();
        let mut kinds: Vec<&str> = spaces.iter().map(|m| m.kind()).collect();
        kinds.sort();
        assert_eq!(kinds, ["device", "pinned_host", "unpinned_host"]);
        let default = device.default_memory_space().unwrap();
        assert_eq!(default.kind(), "device");
        assert!(spaces.contains(&default));
        for space in &spaces {
            assert!(
                all_ids.insert(space.id()),
                "memory space ids are unique client-wide"
            );
            assert_eq!(space.devices(), vec![device.clone()]);
            assert!(!space.debug_string().is_empty());
            assert!(!space.display_string().is_empty());
            assert_eq!(&device.memory_space_by_kind(space.kind()).unwrap(), space);
            // The actor reads the same facts from the plugin again.
            let (kind, device_ids) = space.describe().unwrap();
            assert_eq!(kind, space.kind());
            assert_eq!(device_ids, vec![device.id()]);
        }
        // Kind ids tell kinds apart.
        let kind_ids: HashSet<i32> = spaces.iter().map(|m| m.kind_id()).collect();
        assert_eq!(kind_ids.len(), 3);
    }
    assert_eq!(all_ids.len(), 12);
}

#[test]
fn lookups_of_missing_things_are_typed_errors() {
    let client = Client::open().unwrap();
    assert!(matches!(
        client.device_from_local_hardware_id(99),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        client.device_by_id(-1),
        Err(Error::NotFound { .. })
    ));
    let device = &client.devices()[0];
    assert!(matches!(
        device.memory_space_by_kind("hbm"),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn topology_is_served_by_the_client_actor() {
    let client = Client::builder().cpu_device_count(2).open().unwrap();
    let topology = client.topology().unwrap();
    assert_eq!(topology.platform_name, "cpu");
    assert_eq!(topology.device_descriptions.len(), 2);
    assert_eq!(
        topology
            .device_descriptions
            .iter()
            .map(|d| d.id)
            .collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert!(topology.serialized.len() > 100);
    // Serialization is deterministic for the same topology.
    assert_eq!(client.topology().unwrap().serialized, topology.serialized);
}

#[test]
fn memory_stats_are_none_on_cpu() {
    let client = Client::open().unwrap();
    for device in client.devices() {
        assert_eq!(device.memory_stats().unwrap(), None);
    }
}

#[test]
fn sixteen_threads_share_one_client() {
    let client = Client::open().unwrap();
    let expected_topology = client.topology().unwrap().serialized;
    let expected = Arc::new(expected_topology);
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            let expected = expected.clone();
            std::thread::spawn(move || {
                for i in 0..1000 {
                    assert_eq!(client.platform(), "cpu");
                    assert_eq!(client.platform_version(), "cpu");
                    assert_eq!(client.process_index(), 0);
                    assert_eq!(client.device_count(), 4);
                    assert_eq!(client.local_device_count(), 4);
                    let devices = client.devices();
                    let d = &devices[(t + i) % 4];
                    assert_eq!(client.device_from_local_hardware_id(d.id()).unwrap(), *d);
                    assert_eq!(d.memory_spaces().len(), 3);
                    let m = d.default_memory_space().unwrap();
                    assert_eq!(m.devices()[0], *d);
                    assert!(client.plugin_attribute("xla_version").is_some());
                    // The actor-served queries, interleaved from every thread.
                    assert_eq!(d.memory_stats().unwrap(), None);
                    let (kind, ids) = m.describe().unwrap();
                    assert_eq!((kind.as_str(), ids), ("device", vec![d.id()]));
                    if i % 50 == 0 {
                        assert_eq!(client.topology().unwrap().serialized, *expected);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn two_clients_in_one_process() {
    let a = Client::builder().cpu_device_count(4).open().unwrap();
    let b = Client::builder().cpu_device_count(2).open().unwrap();
    assert_ne!(a, b);
    assert_eq!(a.device_count(), 4);
    assert_eq!(b.device_count(), 2);
    assert_ne!(a.devices()[0], b.devices()[0]);
    drop(a);
    // The other client is unaffected by the first one's shutdown.
    assert_eq!(b.topology().unwrap().device_descriptions.len(), 2);
    assert_eq!(b.devices()[1].memory_stats().unwrap(), None);
}

#[test]
fn wrongly_typed_create_options_are_refused_before_the_plugin_sees_them() {
    // The CPU plugin aborts the process on a string `cpu_device_count`; we must refuse it.
    let err = Client::builder()
        .option("cpu_device_count", NamedValue::String("4".into()))
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidOption { ref name, .. } if name == "cpu_device_count"),
        "{err}"
    );
    let err = Client::builder().cpu_device_count(0).open().unwrap_err();
    assert!(matches!(err, Error::InvalidOption { .. }), "{err}");
    let err = Client::builder()
        .cpu_device_count(2)
        .cpu_device_count(3)
        .open()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { .. }), "{err}");
    // An unknown option is passed through (the plugin ignores it) and the client opens.
    let client = Client::builder()
        .option("some_future_option", NamedValue::Bool(true))
        .open()
        .unwrap();
    assert_eq!(client.device_count(), 4);
}

#[test]
fn async_forms_from_a_tokio_service() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::builder()
            .cpu_device_count(3)
            .open_async()
            .await
            .unwrap();
        let topology = client.topology_async().await.unwrap();
        assert_eq!(topology.device_descriptions.len(), 3);
        let tasks: Vec<_> = client
            .devices()
            .into_iter()
            .map(|d| tokio::spawn(async move { d.memory_stats_async().await }))
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), None);
        }
        let space = client.devices()[2].default_memory_space().unwrap();
        assert_eq!(space.describe_async().await.unwrap().1, vec![2]);
    });
}

#[test]
fn an_array_alone_keeps_its_client_open_and_finds_it_again() {
    let array = {
        let client = Client::open().unwrap();
        client.devices()[2].put(&[1f32, 2., 3., 4.], &[4]).unwrap()
    };
    // Every other handle is gone: the array still reaches its client, device and actors.
    let client = array.client();
    assert_eq!(client.device_count(), 4);
    assert_eq!(array.device().id(), 2);
    assert_eq!(array.memory_space().kind(), "device");
    assert!(client.live_arrays().unwrap().contains(&array));
    let bytes = pjrt_actors_core::runtime::block_on(array.to_bytes_async())
        .unwrap()
        .unwrap();
    assert_eq!(bytes.len(), 16);
    // Two clients: each array finds its own.
    let other = Client::open().unwrap();
    let theirs = other.devices()[0].put(&[0f32; 4], &[4]).unwrap();
    assert!(theirs.client() == other && array.client() == client && client != other);
}
