//! What the device allocator's statistics drive, on whatever plugin the suite runs on: the
//! memory a compile plans for, and how compact a defragment leaves memory. The CPU plugin has
//! no statistics, so there the absence is checked; the GPU check runs this binary on a GPU.

use pjrt_actors::{Array, Client, CompileOptions};
use pjrt_actors_core::formats::protos::xla::CompileOptionsProto;
use prost::Message;

#[test]
fn a_compile_plans_for_the_memory_its_device_allocator_reports() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    let options = CompileOptions {
        devices: Some(vec![device.id()]),
        ..Default::default()
    };
    let exe = client
        .compile_and_load(crate::common::add_f32x4(), &options)
        .unwrap();
    let proto = CompileOptionsProto::decode(exe.compile_options()).unwrap();
    let planned = proto.executable_build_options.unwrap().device_memory_size;
    match device.memory_stats().unwrap().and_then(|s| s.bytes_limit) {
        Some(limit) => assert_eq!(planned, limit, "py_client sets the allocator's limit"),
        None => assert_eq!(planned, 0, "no statistics (CPU): XLA's own default stays"),
    }
}

#[test]
fn defragment_compacts_where_the_allocator_can_show_it() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    // 2,000 arrays of 16 KiB, every other one freed: holes between the survivors.
    let arrays: Vec<Array> = (0..2000)
        .map(|i| device.put(&vec![i as f32; 4096], &[4096]).unwrap())
        .collect();
    let kept: Vec<Array> = arrays.into_iter().step_by(2).collect();
    let report = client.defragment().unwrap();
    assert_eq!(report.moved, kept.len());
    for (i, a) in kept.iter().enumerate() {
        assert_eq!(a.to_vec::<f32>().unwrap()[4095], (2 * i) as f32);
    }
    match report.free_block_ratio {
        None => assert_eq!(device.memory_stats().unwrap(), None, "stats, yet no ratio"),
        Some((before, after)) => {
            assert!(
                after >= before && after > 0.5,
                "largest free block over free pool bytes: {before:.3} before, {after:.3} after"
            );
        }
    }
}
