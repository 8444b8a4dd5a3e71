//! DMA-mapped staging (`Client::dma_map`) on whatever plugin the suite runs on: memory that
//! uploads read without a copy and read-backs write into. The CPU plugin has no DMA mapping, so
//! there the refusals are checked; the GPU check runs the mapped path on a GPU.

use pjrt_actors::{Client, ElementType, Error, HostBuffer, SharedBytes};

const N: usize = 1 << 16;

#[test]
fn mapped_staging_is_an_upload_source_and_a_read_back_target() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    let values: Vec<f32> = (0..N).map(|i| i as f32 * 0.25 - 7.0).collect();
    let mut staging = SharedBytes::zeroed(N * 4);
    staging.get_mut().unwrap().copy_from_slice(
        &values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    // Memory another handle holds, or none at all, is refused before the plugin sees it.
    let other = staging.clone();
    assert!(matches!(
        client.dma_map(other.clone()),
        Err(Error::InvalidArgument(_))
    ));
    drop(other);
    assert!(matches!(
        client.dma_map(SharedBytes::zeroed(0)),
        Err(Error::InvalidArgument(_))
    ));
    let mut mapping = match client.dma_map(staging) {
        Err(Error::Unsupported { what, .. }) => {
            assert_eq!(
                client.platform(),
                "cpu",
                "only the CPU plugin lacks DMA here"
            );
            assert_eq!(what, "DMA mapping");
            return;
        }
        other => other.unwrap(),
    };
    // An upload straight from the mapped memory.
    let x = client
        .buffer_from_host(
            HostBuffer::ZeroCopy(mapping.bytes()),
            ElementType::F32,
            &[N as i64],
            device,
            None,
        )
        .unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), values);
    let twice = client
        .compile_and_load(
            crate::common::binary_program("add", &[N as i64], "f32"),
            &Default::default(),
        )
        .unwrap();
    let y = twice.execute(&[&x, &x]).unwrap().remove(0);
    // While an array aliases the staging memory it may not be written, nor unmapped.
    assert!(matches!(
        mapping.memory_mut().map_err(Error::from),
        Err(Error::InvalidArgument(_))
    ));
    drop(x);
    // A read-back straight into the mapped memory.
    y.read_bytes_into(mapping.memory_mut().unwrap()).unwrap();
    let back: Vec<f32> = mapping
        .memory()
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(back, values.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    let memory = mapping.unmap().unwrap();
    assert_eq!(memory.holders(), 1);
}
