//! The foundation on whatever plugin the suite runs on: devices, memory spaces, the snapshot and
//! actor queries, many threads on one handle, and two clients in one process. What only the CPU
//! plugin shows (its device counts and memory kinds) is in `cpu_plugin` at the end.
use std::collections::HashSet;
use std::sync::Arc;

use pjrt_actors::{Client, Error, NamedValue};

#[test]
fn devices_and_what_they_report() {
    let client = Client::open().unwrap();
    assert!(!client.platform().is_empty());
    assert!(!client.raw_platform_name().is_empty());
    assert_eq!(client.runtime_type(), "pjrt_c_api");
    assert_eq!(client.process_index(), 0);
    assert!(client.device_count() >= 1);
    assert_eq!(client.local_device_count(), client.device_count());
    let devices = client.devices();
    assert_eq!(devices.len(), client.device_count());
    assert_eq!(devices, client.local_devices());
    assert_eq!(devices, client.all_devices());
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.id(), i as i32);
        assert!(!d.kind().is_empty());
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
fn every_device_has_its_memory_spaces_and_a_default_of_kind_device() {
    let client = Client::open().unwrap();
    let mut all_ids = HashSet::new();
    let mut count = 0;
    for device in client.devices() {
        let spaces = device.memory_spaces();
        assert!(!spaces.is_empty());
        let default = device.default_memory_space().unwrap();
        assert_eq!(default.kind(), "device");
        assert!(spaces.contains(&default));
        for space in &spaces {
            count += 1;
            assert!(
                all_ids.insert(space.id()),
                "memory space ids are unique client-wide"
            );
            assert!(space.devices().contains(&device));
            assert!(!space.debug_string().is_empty());
            assert!(!space.display_string().is_empty());
            assert_eq!(&device.memory_space_by_kind(space.kind()).unwrap(), space);
            // The actor reads the same facts from the plugin again.
            let (kind, device_ids) = space.describe().unwrap();
            assert_eq!(kind, space.kind());
            assert!(device_ids.contains(&device.id()));
        }
        // Kind ids tell kinds apart.
        let kind_ids: HashSet<i32> = spaces.iter().map(|m| m.kind_id()).collect();
        assert_eq!(kind_ids.len(), spaces.len());
    }
    assert_eq!(all_ids.len(), count);
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
fn the_topology_is_the_plugins_read_once_at_open() {
    let client = Client::open().unwrap();
    let topology = client.topology().unwrap();
    assert_eq!(topology.platform_name, client.raw_platform_name());
    assert_eq!(
        topology
            .device_descriptions
            .iter()
            .map(|d| d.id)
            .collect::<Vec<_>>(),
        client.devices().iter().map(|d| d.id()).collect::<Vec<_>>()
    );
    assert!(!topology.serialized.is_empty());
    // Another client reads it from the plugin anew: the same topology (by meaning: GPU
    // plugins' bytes differ from call to call). One that must not match:
    // `cpu_plugin::a_two_device_topology_serializes_byte_for_byte_alike`.
    let other = Client::open().unwrap().topology().unwrap();
    assert!(other.matches(&topology) && topology.matches(&other));
}

#[test]
fn sixteen_threads_share_one_client() {
    let client = Client::open().unwrap();
    let expected = Arc::new(client.topology().unwrap());
    let (platform, version) = (
        client.platform().to_string(),
        client.platform_version().to_string(),
    );
    let n = client.device_count();
    let spaces = client.devices()[0].memory_spaces().len();
    let stats: Vec<bool> = (client.devices().iter())
        .map(|d| d.memory_stats().unwrap().is_some())
        .collect();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let (client, expected, stats) = (client.clone(), expected.clone(), stats.clone());
            let (platform, version) = (platform.clone(), version.clone());
            std::thread::spawn(move || {
                for i in 0..1000 {
                    assert_eq!(client.platform(), platform);
                    assert_eq!(client.platform_version(), version);
                    assert_eq!(client.process_index(), 0);
                    assert_eq!(client.device_count(), n);
                    assert_eq!(client.local_device_count(), n);
                    let devices = client.devices();
                    let d = &devices[(t + i) % n];
                    assert_eq!(client.device_from_local_hardware_id(d.id()).unwrap(), *d);
                    assert_eq!(d.memory_spaces().len(), spaces);
                    let m = d.default_memory_space().unwrap();
                    assert!(m.devices().contains(d));
                    assert!(client.plugin_attribute("xla_version").is_some());
                    // The actor-served queries, interleaved from every thread.
                    assert_eq!(d.memory_stats().unwrap().is_some(), stats[(t + i) % n]);
                    let (kind, ids) = m.describe().unwrap();
                    assert_eq!(kind, "device");
                    assert!(ids.contains(&d.id()));
                    if i % 50 == 0 {
                        assert!(client.topology().unwrap().matches(&expected));
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
    let a = Client::open().unwrap();
    let b = Client::open().unwrap();
    assert_ne!(a, b);
    assert_eq!(a.device_count(), b.device_count());
    assert_ne!(a.devices()[0], b.devices()[0]);
    let on_b = b.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    drop(a);
    // The other client is unaffected by the first one's shutdown.
    assert_eq!(
        b.topology().unwrap().device_descriptions.len(),
        b.device_count()
    );
    assert!(b.devices()[0].memory_stats().is_ok());
    assert_eq!(on_b.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
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
        .option("preallocate", NamedValue::Bool(true))
        .option("preallocate", NamedValue::Bool(false))
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidOption { ref reason, .. } if reason.contains("more than once")),
        "{err}"
    );
    let err = Client::builder()
        .option("memory_fraction", NamedValue::Float(1.5))
        .open()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { .. }), "{err}");
}

#[test]
fn async_forms_from_a_tokio_service() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::builder().open_async().await.unwrap();
        let topology = client.topology_async().await.unwrap();
        assert_eq!(topology.device_descriptions.len(), client.device_count());
        let tasks: Vec<_> = client
            .devices()
            .into_iter()
            .map(|d| tokio::spawn(async move { (d.memory_stats_async().await, d) }))
            .collect();
        for t in tasks {
            let (stats, d) = t.await.unwrap();
            assert_eq!(
                stats.unwrap().is_some(),
                d.memory_stats().unwrap().is_some()
            );
        }
        let last = client.devices().last().unwrap().clone();
        let space = last.default_memory_space().unwrap();
        assert!(space.describe_async().await.unwrap().1.contains(&last.id()));
    });
}

#[test]
fn an_array_alone_keeps_its_client_open_and_finds_it_again() {
    let (array, count, device) = {
        let client = Client::open().unwrap();
        let last = client.devices().last().unwrap().clone();
        let array = last.put(&[1f32, 2., 3., 4.], &[4]).unwrap();
        (array, client.device_count(), last.id())
    };
    // Every other handle is gone: the array still reaches its client, device and actors.
    let client = array.client();
    assert_eq!(client.device_count(), count);
    assert_eq!(array.device().id(), device);
    assert_eq!(array.memory_space().kind(), "device");
    assert!(client.live_arrays().unwrap().contains(&array));
    let bytes = pjrt_actors_core::client::runtime::block_on(array.to_bytes_async())
        .unwrap()
        .unwrap();
    assert_eq!(bytes.len(), 16);
    // Two clients: each array finds its own.
    let other = Client::open().unwrap();
    let theirs = other.devices()[0].put(&[0f32; 4], &[4]).unwrap();
    assert!(theirs.client() == other && array.client() == client && client != other);
}

/// What only the CPU plugin shows: its device count (4 by default, `cpu_device_count`), its
/// three memory kinds, no allocator statistics, byte-stable topologies, and unknown create
/// options passed through. The GPU check skips every `cpu_plugin` module.
mod cpu_plugin {
    use pjrt_actors::{Client, Error, NamedValue};

    #[test]
    fn four_cpu_devices_by_default() {
        let client = Client::open().unwrap();
        assert_eq!(client.platform(), "cpu");
        assert_eq!(client.raw_platform_name(), "cpu");
        assert_eq!(client.platform_version(), "cpu");
        assert_eq!(client.device_count(), 4);
        for d in client.devices() {
            assert_eq!(d.kind(), "cpu");
        }
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
    fn three_memory_spaces_per_device_with_the_cpu_kinds() {
        let client = Client::open().unwrap();
        for device in client.devices() {
            let spaces = device.memory_spaces();
            let mut kinds: Vec<&str> = spaces.iter().map(|m| m.kind()).collect();
            kinds.sort();
            assert_eq!(kinds, ["device", "pinned_host", "unpinned_host"]);
            for space in &spaces {
                assert_eq!(space.devices(), vec![device.clone()]);
            }
        }
    }

    #[test]
    fn a_two_device_topology_serializes_byte_for_byte_alike() {
        let client = Client::builder().cpu_device_count(2).open().unwrap();
        let topology = client.topology().unwrap();
        assert_eq!(topology.platform_name, "cpu");
        assert_eq!(topology.device_descriptions.len(), 2);
        assert!(topology.serialized.len() > 100);
        // Two clients, each reading its topology from the plugin at open: the same bytes;
        // four devices' differ.
        let again = Client::builder().cpu_device_count(2).open().unwrap();
        assert_eq!(again.topology().unwrap().serialized, topology.serialized);
        let four = Client::builder().cpu_device_count(4).open().unwrap();
        let four = four.topology().unwrap();
        assert_ne!(four.serialized, topology.serialized);
        assert!(
            !four.matches(&topology),
            "a 4-device topology matched a 2-device one"
        );
    }

    #[test]
    fn memory_stats_are_none_on_cpu() {
        let client = Client::open().unwrap();
        for device in client.devices() {
            assert_eq!(device.memory_stats().unwrap(), None);
        }
    }

    #[test]
    fn two_clients_of_different_device_counts() {
        let a = Client::builder().cpu_device_count(4).open().unwrap();
        let b = Client::builder().cpu_device_count(2).open().unwrap();
        assert_eq!((a.device_count(), b.device_count()), (4, 2));
        drop(a);
        assert_eq!(b.topology().unwrap().device_descriptions.len(), 2);
        assert_eq!(b.devices()[1].memory_stats().unwrap(), None);
    }

    #[test]
    fn an_unknown_create_option_is_passed_through_and_the_plugin_decides() {
        // Our table does not know it, so the plugin decides: the 0.81 and 0.106 CPU plugins
        // ignore it, the 0.115 one (like a GPU plugin) refuses it, a typed error naming it.
        let opened = Client::builder()
            .option("some_future_option", NamedValue::Bool(true))
            .open();
        match (opened, crate::common::strict_cpu_client()) {
            (Ok(client), false) => assert_eq!(client.device_count(), 4),
            (Err(e @ Error::Pjrt { .. }), true) => {
                assert!(e.to_string().contains("some_future_option"), "{e}")
            }
            (other, strict) => panic!("strict {strict}: {:?}", other.map(|c| c.device_count())),
        }
    }
}
