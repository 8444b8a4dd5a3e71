//! The memory surface with 10,000 small live arrays on the CPU plugin, in one run: a heap
//! profile, `live_arrays`, and `defragment` against moving every array by hand (read each
//! to host, upload it again). Prints a table, then one JSON object as the last line.

mod support;

use std::time::Instant;

use pjrt_actors::{Array, Client};
use support::*;

const ARRAYS: usize = 10_000;
const ROUNDS: usize = 7;

fn ms(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let client = Client::open().expect("run scripts/bootstrap first");
    let devices = client.devices();
    let arrays: Vec<Array> = (0..ARRAYS)
        .map(|i| {
            devices[i % devices.len()]
                .put(&[i as f32; 4], &[4])
                .unwrap()
        })
        .collect();
    let (mut profiles, mut lists, mut defrags, mut by_hand) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut profile_bytes = 0;
    for _ in 0..ROUNDS {
        profiles.push(ms(|| profile_bytes = client.heap_profile().unwrap().len()));
        lists.push(ms(|| {
            assert_eq!(client.live_arrays().unwrap().len(), ARRAYS)
        }));
        defrags.push(ms(|| {
            assert_eq!(client.defragment().unwrap().moved, ARRAYS)
        }));
        // The same work by hand: read every array to host, upload it again.
        by_hand.push(ms(|| {
            let moved: Vec<Array> = arrays
                .iter()
                .map(|a| {
                    let host = a.to_vec::<f32>().unwrap();
                    a.device().put(&host, a.dims()).unwrap()
                })
                .collect();
            assert_eq!(moved.len(), ARRAYS);
        }));
    }
    let (heap_profile_ms, live_arrays_ms) = (median(profiles), median(lists));
    let (defragment_ms, copy_out_in_ms) = (median(defrags), median(by_hand));
    assert_eq!(arrays[1234].to_vec::<f32>().unwrap(), vec![1234.0; 4]);
    println!(
        "{:<44} {:>10}",
        format!("with {ARRAYS} live arrays (median of {ROUNDS})"),
        "ms"
    );
    println!(
        "{:<44} {:>10.3}",
        format!("heap_profile ({profile_bytes} bytes)"),
        heap_profile_ms
    );
    println!("{:<44} {:>10.3}", "live_arrays", live_arrays_ms);
    println!("{:<44} {:>10.3}", "defragment", defragment_ms);
    println!(
        "{:<44} {:>10.3}",
        "every array to host and back, by hand", copy_out_in_ms
    );
    println!(
        "{{\"arrays\":{ARRAYS},\"heap_profile_ms\":{},\"live_arrays_ms\":{},\"defragment_ms\":{},\"copy_out_in_ms\":{},\"defragment_ratio\":{}}}",
        round3(heap_profile_ms),
        round3(live_arrays_ms),
        round3(defragment_ms),
        round3(copy_out_in_ms),
        round3(defragment_ms / copy_out_in_ms)
    );
}
