//! The PJRT fence against the real CPU plugin: load, create, describe, topology round trip.

use pjrt_actors_core::pjrt::{NamedValue, PjrtClient, PjrtTopology, Plugin};

#[test]
fn fence_describes_the_cpu_plugin() {
    let plugin = Plugin::discover().expect("bootstrap installs the CPU plugin");
    assert_eq!(plugin.api_version().0, 0);
    assert!(plugin.api_version().1 >= 54);
    assert!(plugin.attributes().iter().any(|(k, _)| k == "xla_version"));

    let client = PjrtClient::create(plugin.clone(), &[]).unwrap();
    assert_eq!(client.platform_name().unwrap(), "cpu");
    let devices = client.devices().unwrap();
    assert_eq!(devices.len(), 4);
    for (i, d) in devices.iter().enumerate() {
        let desc = d.description().unwrap();
        assert_eq!(desc.id, i as i32);
        assert_eq!(desc.kind, "cpu");
        assert_eq!(d.local_hardware_id().unwrap(), i as i32);
        let mems = d.memories().unwrap();
        assert_eq!(mems.len(), 3);
        let default = d.default_memory().unwrap();
        assert_eq!(default.description().unwrap().kind, "device");
        assert!(mems.contains(&default));
        assert!(default.devices().unwrap().contains(d));
    }
    assert_eq!(client.addressable_memories().unwrap().len(), 12);

    let eight = PjrtClient::create(
        plugin.clone(),
        &[("cpu_device_count".into(), NamedValue::Int64(8))],
    )
    .unwrap();
    assert_eq!(eight.devices().unwrap().len(), 8);

    let topo = client.topology().unwrap();
    let bytes = topo.serialize().unwrap();
    assert!(!bytes.is_empty());
    assert_eq!(topo.device_descriptions().unwrap().len(), 4);
    assert_eq!(topo.platform_name().unwrap(), "cpu");
    // The CPU plugin has no topology deserializer; it must come back as a typed error.
    let err = PjrtTopology::deserialize(plugin, &bytes)
        .err()
        .expect("unsupported on CPU");
    assert_eq!(
        err.pjrt_code(),
        Some(pjrt_actors_core::PjrtCode::NotFound),
        "{err}"
    );
}

#[test]
fn the_cpu_plugins_memory_descriptions_extension_answers_empty() {
    // The extension is there and answers, but lists no kinds for CPU devices or topologies;
    // `Device::memory_kinds` falls back to the device's memory spaces because of this.
    let plugin = Plugin::discover().unwrap();
    let client = PjrtClient::create(plugin, &[]).unwrap();
    assert_eq!(
        client.devices().unwrap()[0].memory_kinds().unwrap(),
        (vec![], None)
    );
    let per_device = client.topology().unwrap().memory_kinds().unwrap();
    assert_eq!(per_device.len(), 4);
    assert!(per_device.iter().all(|(kinds, _)| kinds.is_empty()));
}
