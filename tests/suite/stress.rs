//! 16 threads × 1,000 executes over every device, every result checked, then nothing left
//! alive.

use std::sync::Arc;

use crate::common;

use pjrt_actors::{Client, CompileOptions};

#[test]
fn sixteen_threads_thousand_executes_each() {
    let client = Client::open().unwrap();
    let executables: Arc<Vec<_>> = Arc::new(
        client
            .devices()
            .iter()
            .map(|d| {
                client
                    .compile_and_load(
                        common::add_f32x4(),
                        &CompileOptions {
                            devices: Some(vec![d.id()]),
                            ..Default::default()
                        },
                    )
                    .unwrap()
            })
            .collect(),
    );
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            let executables = executables.clone();
            std::thread::spawn(move || {
                let device = &common::nth_device(&client, t);
                let exe = &executables[t % executables.len()];
                for i in 0..1000 {
                    let x = (t * 1000 + i) as f32;
                    let a = device.put(&[x, x + 1., x + 2., x + 3.], &[4]).unwrap();
                    let b = device.put(&[1f32, 2., 3., 4.], &[4]).unwrap();
                    let out = exe.execute(&[&a, &b]).unwrap();
                    assert_eq!(
                        out[0].to_vec::<f32>().unwrap(),
                        vec![x + 1., x + 3., x + 5., x + 7.]
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(client.live_arrays().unwrap().len(), 0);
    drop(executables);
    assert_eq!(client.clear_compile_cache().unwrap(), client.device_count());
    assert!(client.live_executables().unwrap().is_empty());
}
