//! Arrays, compile-and-load and execute against the real CPU plugin: real computations with
//! checked results, every dtype, scalars and empty arrays, replicated and portable runs, the
//! host-buffer semantics, copies, metadata, async forms, and the live lists at the end.

use crate::common;

use std::sync::Arc;

use common::{add_f32x4, binary_program, replicated_add, tensor};
use pjrt_actors::{Array, Client, CompileOptions, ElementType, Error, HostBuffer};

fn compile(client: &Client, program: &str) -> pjrt_actors::LoadedExecutable {
    client
        .compile_and_load(program, &CompileOptions::default())
        .unwrap()
}

#[test]
fn add_on_each_device() {
    let client = Client::open().unwrap();
    for device in client.devices() {
        let exe = client
            .compile_and_load(
                add_f32x4(),
                &CompileOptions {
                    devices: Some(vec![device.id()]),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(exe.addressable_devices(), vec![device.clone()]);
        let a = device.put(&[1f32, 2., 3., 4.], &[4]).unwrap();
        let b = device.put(&[0.5f32, -2., 30., 1e6], &[4]).unwrap();
        let out = exe.execute(&[&a, &b]).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].device(), device);
        assert_eq!(out[0].dims(), &[4]);
        assert_eq!(
            out[0].to_vec::<f32>().unwrap(),
            vec![1.5, 0., 33., 1e6 + 4.]
        );
    }
}

#[test]
fn dot_reduce_and_several_outputs() {
    let client = Client::open().unwrap();
    let d = &client.devices()[0];
    let program = r#"
module @several {
  func.func public @main(%x: tensor<2x3xf32>, %y: tensor<3x2xf32>) -> (tensor<2x2xf32>, tensor<2xf32>, tensor<2x3xf32>) {
    %dot = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %sum = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %sq = stablehlo.multiply %x, %x : tensor<2x3xf32>
    return %dot, %sum, %sq : tensor<2x2xf32>, tensor<2xf32>, tensor<2x3xf32>
  }
}"#;
    let exe = compile(&client, program);
    assert_eq!(exe.num_outputs(), 3);
    assert_eq!(exe.num_parameters(), 2);
    let x = [1f32, 2., 3., 4., 5., 6.];
    let y = [7f32, 8., 9., 10., 11., 12.];
    let ax = d.put(&x, &[2, 3]).unwrap();
    let ay = d.put(&y, &[3, 2]).unwrap();
    let out = exe.execute(&[&ax, &ay]).unwrap();
    let mut dot = vec![0f32; 4];
    for i in 0..2 {
        for j in 0..2 {
            dot[i * 2 + j] = (0..3).map(|k| x[i * 3 + k] * y[k * 2 + j]).sum();
        }
    }
    assert_eq!(out[0].to_vec::<f32>().unwrap(), dot);
    assert_eq!(out[0].dims(), &[2, 2]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![6., 15.]);
    assert_eq!(
        out[2].to_vec::<f32>().unwrap(),
        x.iter().map(|v| v * v).collect::<Vec<_>>()
    );
    let types: Vec<(ElementType, Vec<i64>)> = exe
        .output_types()
        .iter()
        .map(|t| (t.dtype, t.dims.clone()))
        .collect();
    assert_eq!(
        types,
        vec![
            (ElementType::F32, vec![2, 2]),
            (ElementType::F32, vec![2]),
            (ElementType::F32, vec![2, 3])
        ]
    );
}

/// A value of every byte width, so a reversal moves whole elements.
fn sample_bytes(dtype: ElementType, n: usize) -> Vec<u8> {
    let w = dtype.byte_size();
    (0..n * w)
        .map(|i| match dtype {
            ElementType::Pred => (i % 2) as u8,
            // Keep float exponents away from NaN patterns so bytes round-trip exactly.
            _ => ((i * 7 + i / w) % 61) as u8 + 1,
        })
        .collect()
}

#[test]
fn every_dtype_round_trips_through_a_computation() {
    let client = Client::open().unwrap();
    let d = &common::nth_device(&client, 1);
    for dtype in ElementType::ALL {
        let dims = [3i64, 2];
        let t = tensor(&dims, dtype.mlir_name());
        let program = format!(
            "module @rev {{\n  func.func public @main(%a: {t}) -> {t} {{\n    %0 = stablehlo.reverse %a, dims = [0] : {t}\n    return %0 : {t}\n  }}\n}}\n"
        );
        let exe = client
            .compile_and_load(&program, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
        assert_eq!(exe.parameter_types()[0].dtype, dtype);
        let input = sample_bytes(dtype, 6);
        let a = client
            .buffer_from_host(
                HostBuffer::Copy(&input),
                dtype,
                &dims,
                &client.devices()[0],
                None,
            )
            .unwrap();
        assert_eq!(a.to_bytes().unwrap(), input, "{dtype} upload/readback");
        let a = a.copy_to_device(d).unwrap();
        let exe = client
            .compile_and_load(
                &program,
                &CompileOptions {
                    devices: Some(vec![d.id()]),
                    ..Default::default()
                },
            )
            .unwrap();
        let out = exe.execute(&[&a]).unwrap();
        assert_eq!(out[0].dtype(), dtype);
        // Reversing rows of a 3x2 array: row 2, row 1, row 0.
        let row = 2 * dtype.byte_size();
        let expected: Vec<u8> = input.chunks(row).rev().flatten().copied().collect();
        assert_eq!(out[0].to_bytes().unwrap(), expected, "{dtype}");
    }
}

#[test]
fn typed_arithmetic_in_several_dtypes() {
    let client = Client::open().unwrap();
    let d = &client.devices()[0];
    let exe = compile(&client, &binary_program("multiply", &[3], "i32"));
    let out = exe
        .execute(&[
            &d.put(&[2i32, -3, 4], &[3]).unwrap(),
            &d.put(&[5i32, 6, -7], &[3]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![10, -18, -28]);
    let exe = compile(&client, &binary_program("add", &[2], "ui64"));
    let out = exe
        .execute(&[
            &d.put(&[u64::MAX - 1, 7], &[2]).unwrap(),
            &d.put(&[1u64, 8], &[2]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_vec::<u64>().unwrap(), vec![u64::MAX, 15]);
    let exe = compile(&client, &binary_program("subtract", &[2], "f64"));
    let out = exe
        .execute(&[
            &d.put(&[1.5f64, 1e300], &[2]).unwrap(),
            &d.put(&[0.25f64, 1e299], &[2]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![1.25, 9e299]);
    let exe = compile(&client, &binary_program("and", &[4], "i1"));
    let out = exe
        .execute(&[
            &d.put(&[true, true, false, false], &[4]).unwrap(),
            &d.put(&[true, false, true, false], &[4]).unwrap(),
        ])
        .unwrap();
    assert_eq!(
        out[0].to_vec::<bool>().unwrap(),
        vec![true, false, false, false]
    );
}

#[test]
fn scalars_and_zero_sized_arrays() {
    let client = Client::open().unwrap();
    let d = &client.devices()[0];
    let exe = compile(&client, &binary_program("add", &[], "f32"));
    let out = exe
        .execute(&[
            &d.put(&[1.25f32], &[]).unwrap(),
            &d.put(&[2.0f32], &[]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].dims(), &[] as &[i64]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.25]);

    let exe = compile(&client, &binary_program("add", &[0, 3], "f32"));
    let empty = d.put::<f32>(&[], &[0, 3]).unwrap();
    assert_eq!(empty.element_count(), 0);
    let out = exe.execute(&[&empty, &empty]).unwrap();
    assert_eq!(out[0].dims(), &[0, 3]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), Vec::<f32>::new());
    assert_eq!(out[0].to_bytes().unwrap(), Vec::<u8>::new());
}

#[test]
fn replicated_execution_on_four_devices() {
    let client = Client::open().unwrap();
    let exe = client
        .compile_and_load(
            replicated_add(4),
            &CompileOptions {
                num_replicas: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
    let devices = exe.addressable_devices();
    assert_eq!(devices.len(), 4);
    let inputs: Vec<(Array, Array)> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let base = i as f32 * 10.;
            (
                d.put(&[base, base + 1., base + 2., base + 3.], &[4])
                    .unwrap(),
                d.put(&[1f32; 4], &[4]).unwrap(),
            )
        })
        .collect();
    let lists: Vec<Vec<&Array>> = inputs.iter().map(|(a, b)| vec![a, b]).collect();
    let out = exe.execute_replicated(&lists).unwrap();
    assert_eq!(out.len(), 4);
    for (i, outputs) in out.iter().enumerate() {
        let base = i as f32 * 10.;
        assert_eq!(outputs[0].device(), devices[i]);
        assert_eq!(
            outputs[0].to_vec::<f32>().unwrap(),
            vec![base + 1., base + 2., base + 3., base + 4.]
        );
    }
    // Arguments on the wrong devices are refused.
    let swapped: Vec<Vec<&Array>> = inputs.iter().rev().map(|(a, b)| vec![a, b]).collect();
    assert!(matches!(
        exe.execute_replicated(&swapped),
        Err(Error::BadArgument { .. })
    ));
}

#[test]
fn portable_execution_on_device_three() {
    let client = Client::open().unwrap();
    let exe = client
        .compile_and_load(
            add_f32x4(),
            &CompileOptions {
                portable: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(exe.is_portable());
    let d3 = &client.devices()[3];
    let a = d3.put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    let out = exe.execute_on(d3, &[&a, &a]).unwrap();
    assert_eq!(out[0].device(), *d3);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2., 4., 6., 8.]);
    // A portable executable needs a device; a device-bound one refuses one.
    assert!(matches!(
        exe.execute(&[&a, &a]),
        Err(Error::InvalidArgument(_))
    ));
    let bound = compile(&client, &add_f32x4());
    assert!(matches!(
        bound.execute_on(d3, &[&a, &a]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn host_buffer_semantics() {
    let client = Client::open().unwrap();
    let d = &common::nth_device(&client, 2);
    let values: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let copied = client
        .buffer_from_host(HostBuffer::Copy(&bytes), ElementType::F32, &[1024], d, None)
        .unwrap();
    let shared: Arc<[u8]> = bytes.clone().into();
    let until = client
        .buffer_from_host(
            HostBuffer::UntilTransferCompletes(shared.clone()),
            ElementType::F32,
            &[1024],
            d,
            None,
        )
        .unwrap();
    let aligned = pjrt_actors::SharedBytes::copy_from(&bytes);
    let zero_copy = client
        .buffer_from_host(
            HostBuffer::ZeroCopy(aligned.clone()),
            ElementType::F32,
            &[32, 32],
            d,
            None,
        )
        .unwrap();
    for a in [&copied, &until, &zero_copy] {
        a.block_until_ready().unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), values);
    }
    // Zero copy means the array's memory is our bytes; a copy's is not.
    let address = |a: &pjrt_actors::Array| a.unsafe_buffer_pointer().unwrap();
    assert_eq!(
        address(&zero_copy),
        aligned.as_ptr() as usize,
        "ZeroCopy copied"
    );
    assert_ne!(address(&copied), bytes.as_ptr() as usize);
    // The runtime keeps the shared data alive as long as the arrays.
    drop(until);
    assert!(aligned.holders() > 1);
    drop(zero_copy);
    assert!(common::eventually(
        std::time::Duration::from_secs(5),
        || aligned.holders() == 1
    ));
    let mut shared = shared;
    assert!(common::eventually(
        std::time::Duration::from_secs(5),
        || Arc::get_mut(&mut shared).is_some()
    ));
}

#[test]
fn copies_between_devices_and_memories() {
    let client = Client::open().unwrap();
    let devices = client.devices();
    let a = devices[0].put(&[1i64, 2, 3], &[3]).unwrap();
    let b = a.copy_to_device(&devices[3]).unwrap();
    assert_eq!(b.device(), devices[3]);
    assert_eq!(b.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    let pinned = devices[3].memory_space_by_kind("pinned_host").unwrap();
    let c = b.copy_to_memory(&pinned).unwrap();
    assert_eq!(c.memory_space(), pinned);
    assert_eq!(c.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    let unpinned = devices[1].memory_space_by_kind("unpinned_host").unwrap();
    let e = client
        .buffer_from_host(
            HostBuffer::Copy(&[9u8, 8, 7]),
            ElementType::U8,
            &[3],
            &devices[1],
            Some(&unpinned),
        )
        .unwrap();
    assert_eq!(e.memory_space().kind(), "unpinned_host");
    assert_eq!(e.to_vec::<u8>().unwrap(), vec![9, 8, 7]);
    assert!(a.on_device_size().unwrap() >= 24);
    let mut into = [0i64; 3];
    c.read_into(&mut into).unwrap();
    assert_eq!(into, [1, 2, 3]);
}

#[test]
fn async_forms() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::open().unwrap();
        let d = common::nth_device(&client, 1);
        let exe = client
            .compile_and_load_async(
                add_f32x4(),
                &CompileOptions {
                    devices: Some(vec![d.id()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let data = pjrt_actors::SharedBytes::copy_from(
            &[1f32, 2., 3., 4.]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>(),
        );
        let a = client
            .buffer_from_host_async(HostBuffer::ZeroCopy(data), ElementType::F32, &[4], &d, None)
            .await
            .unwrap();
        let out = exe.execute_async(&[&a, &a]).await.unwrap();
        let bytes = out[0].to_bytes_async().await.unwrap();
        let sums: Vec<f32> = bytes
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(sums, vec![2., 4., 6., 8.]);
        assert_eq!(client.live_arrays_async().await.unwrap().len(), 2);
        // A borrowed buffer is copied before the call returns: the future outlives the borrow.
        let upload = {
            let scratch = vec![7u8; 16];
            client.buffer_from_host_async(
                HostBuffer::Copy(&scratch),
                ElementType::U8,
                &[16],
                &d,
                None,
            )
        };
        assert_eq!(upload.await.unwrap().to_vec::<u8>().unwrap(), vec![7u8; 16]);
    });
}

#[test]
fn live_lists_return_to_zero() {
    let client = Client::open().unwrap();
    let d = &client.devices()[0];
    let exe = compile(&client, &add_f32x4());
    let a = d.put(&[1f32; 4], &[4]).unwrap();
    let outs: Vec<Array> = (0..10)
        .flat_map(|_| exe.execute(&[&a, &a]).unwrap())
        .collect();
    assert_eq!(client.live_arrays().unwrap().len(), 11);
    assert_eq!(client.live_executables().unwrap(), vec![exe.clone()]);
    let listed = client.live_arrays().unwrap();
    assert!(listed.contains(&a) && outs.iter().all(|o| listed.contains(o)));
    drop(listed);
    drop(outs);
    drop(a);
    assert_eq!(client.live_arrays().unwrap().len(), 0);
    drop(exe);
    // The memory compile cache still holds it, as a live executable; clearing releases it.
    assert_eq!(client.live_executables().unwrap().len(), 1);
    // Through the async form, as through the blocking one.
    let cleared = client.clear_compile_cache_async();
    assert_eq!(pjrt_actors::wait(cleared).unwrap(), 1);
    assert!(client.live_executables().unwrap().is_empty());
}

#[test]
fn a_program_that_donates_its_input_never_consumes_our_buffer() {
    let client = Client::open().unwrap();
    // The parameter is declared donatable to the output; the runtime must still keep it.
    let program = r#"
module @donates {
  func.func public @main(%x: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4xf32> {
    %0 = stablehlo.add %x, %x : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"#;
    let exe = client
        .compile_and_load(program, &CompileOptions::default())
        .unwrap();
    let x = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    for _ in 0..3 {
        let out = exe.execute(&[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2., 4., 6., 8.]);
        assert!(!x.is_deleted());
        assert_eq!(x.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4.]);
    }
}
