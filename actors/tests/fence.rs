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
    // The 0.81 and 0.106 CPU plugins have no topology deserializer (a typed NOT_FOUND: no
    // compiler factory registered); the 0.115 one reads the bytes back as the same topology.
    match PjrtTopology::deserialize(plugin, &bytes) {
        Err(err) => {
            assert!(client.plugin().api_version() < (0, 115), "{err}");
            assert_eq!(
                err.pjrt_code(),
                Some(pjrt_actors_core::PjrtCode::NotFound),
                "{err}"
            );
        }
        Ok(back) => {
            assert!(client.plugin().api_version() >= (0, 115));
            assert_eq!(back.device_descriptions().unwrap().len(), 4);
            assert_eq!(back.platform_name().unwrap(), "cpu");
        }
    }
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

/// The send/recv builder's text parses and lowers: XLA:CPU then refuses the `send` opcode
/// itself (PJRT-NOTES), which is why the client refuses such programs on CPU up front.
#[test]
fn send_recv_callback_text_lowers_to_host_send_and_recv() {
    use pjrt_actors_core::callbacks::{CallbackKind, HostCallback};
    use pjrt_actors_core::compile::{CompileOptions, DeviceFacts};
    use pjrt_actors_core::dtype::ElementType;
    use pjrt_actors_core::pjrt::ArrayType;
    use prost::Message;

    let plugin = Plugin::discover().unwrap();
    let client = PjrtClient::create(plugin, &[]).unwrap();
    let t = ArrayType {
        dtype: ElementType::F32,
        dims: vec![4],
    };
    let cb = HostCallback::new(
        "twice",
        CallbackKind::Pure,
        vec![t.clone()],
        vec![t],
        |_, _| Ok(()),
    )
    .unwrap();
    let program = format!(
        "module @m {{\n  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{\n{}\n    return %r : tensor<4xf32>\n  }}\n}}\n",
        cb.send_recv_text("%r", &["%x"], 1)
    );
    let facts = DeviceFacts {
        devices: (0..4).map(|i| (i, true)).collect(),
        memory_limits: Vec::new(),
    };
    let options = CompileOptions::default().to_proto(&facts).unwrap();
    let err = match client.compile(program.as_bytes(), "mlir", &options.encode_to_vec()) {
        Ok(_) => panic!("XLA:CPU compiled a host send"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("opcode `send` is not supported"),
        "expected the plugin to refuse the send opcode, not the text: {err}"
    );
}

/// Our send/recv callback lists (padded for openxla/xla#37129) are accepted in the plugin's
/// `ExecuteOptions`: XLA:CPU ignores them and the program runs as without them.
#[test]
fn execute_options_carry_send_and_recv_callback_lists() {
    use pjrt_actors_core::compile::{CompileOptions, DeviceFacts};
    use pjrt_actors_core::dtype::ElementType;
    use pjrt_actors_core::pjrt::{HostBuffer, HostTransferDispatch, HostTransfers, RecvStream};
    use prost::Message;

    struct Unused;
    impl HostTransferDispatch for Unused {
        fn sent(&self, _: usize, channel: i64, _: &[u8], _: bool) -> Result<(), String> {
            panic!("XLA:CPU called a send callback on channel {channel}")
        }
        fn receive(&self, _: usize, channel: i64, _: RecvStream) {
            panic!("XLA:CPU called a recv callback on channel {channel}")
        }
    }

    let plugin = Plugin::discover().unwrap();
    let client = PjrtClient::create(plugin, &[]).unwrap();
    let facts = DeviceFacts {
        devices: (0..4).map(|i| (i, true)).collect(),
        memory_limits: Vec::new(),
    };
    let options = CompileOptions::default().to_proto(&facts).unwrap();
    let program = "func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %y = stablehlo.add %x, %x : tensor<3xf32>\n  return %y : tensor<3xf32>\n}\n";
    let exe = client
        .compile(program.as_bytes(), "mlir", &options.encode_to_vec())
        .unwrap();
    let device = &client.devices().unwrap()[0];
    let x: [f32; 3] = [1.0, 2.5, -4.0];
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let input = client
        .upload(
            HostBuffer::Copy(&bytes),
            ElementType::F32,
            &[3],
            device,
            None,
        )
        .unwrap();
    let transfers = HostTransfers {
        dispatch: &Unused,
        send_channels: &[1, 2],
        recv_channels: &[],
    };
    let out = exe
        .execute(&[&[&input]], 1, &[], None, None, Some(transfers))
        .unwrap();
    let mut got = vec![0u8; 12];
    out[0].read_into(&mut got, 1).unwrap();
    let got: Vec<f32> = got
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![2.0, 5.0, -8.0]);
}

#[test]
fn an_executable_reports_its_compile_options_where_the_plugin_can() {
    use pjrt_actors_core::compile::{CompileOptions, DeviceFacts};
    use pjrt_actors_core::formats::protos::xla::CompileOptionsProto;
    use prost::Message;

    let plugin = Plugin::discover().unwrap();
    let client = PjrtClient::create(plugin.clone(), &[]).unwrap();
    let facts = DeviceFacts {
        devices: (0..4).map(|i| (i, true)).collect(),
        memory_limits: Vec::new(),
    };
    let options = CompileOptions {
        devices: Some(vec![2]),
        ..Default::default()
    };
    let sent = options.to_bytes(&facts).unwrap();
    let program = "module @add { func.func public @main(%a: tensor<f32>) -> tensor<f32> { %0 = stablehlo.add %a, %a : tensor<f32>\n return %0 : tensor<f32> } }";
    let exe = client.compile(program.as_bytes(), "mlir", &sent).unwrap();
    // 0.81's table has no `PJRT_Executable_GetCompileOptions`: a typed refusal, and the runtime
    // keeps what it sent. 0.115 answers with the options it compiled with: ours.
    match exe.compile_options() {
        Err(err) => {
            assert!(plugin.api_version() < (0, 100), "{err}");
            assert!(
                matches!(err, pjrt_actors_core::pjrt::Error::Unsupported { .. }),
                "{err}"
            );
        }
        Ok(bytes) => {
            assert!(plugin.api_version() >= (0, 100));
            let got = CompileOptionsProto::decode(&bytes[..]).unwrap();
            let want = CompileOptionsProto::decode(&sent[..]).unwrap();
            let assignment = |o: &CompileOptionsProto| {
                let b = o.executable_build_options.clone().unwrap();
                (b.num_replicas, b.num_partitions, b.device_assignment)
            };
            assert_eq!(assignment(&got), assignment(&want));
            assert_eq!(got.env_option_overrides, want.env_option_overrides);
        }
    }
}
