//! The memory surface with 10,000 small live arrays on any plugin (the CPU one here, a GPU's in
//! the GPU check), in one run: a heap profile against the raw C API's floor (each buffer's size
//! and device asked of the plugin), `live_arrays`, and `defragment` against moving every array
//! by hand (read each to host, upload it again). Prints a table, then one JSON object as the
//! last line.
//!
//! `heap_profile` and `live_arrays` are timed as `timeit` times JAX's: calls one after
//! another, median, each including dropping what it returned. The first call after other
//! work (caches cold) is reported beside them, and so is the floor of `live_arrays`: cloning
//! and dropping 10,000 handles already in hand, which no listing can beat.

mod support;

use std::time::Instant;

use pjrt_actors::{Array, Client, ElementType};
use pjrt_actors_core::pjrt::{HostBuffer, PjrtBuffer, PjrtClient, Plugin};
use pjrt_actors_fence::baseline::raw_profile_floor;
use support::*;

const ARRAYS: usize = 10_000;
const ROUNDS: usize = 9;
/// Rounds of fresh arrays, each followed by the profile that sizes them.
const NEW_ROUNDS: usize = 7;
const CALLS: usize = 101;

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
    // The first profile after ARRAYS new arrays were made sizes each of them with the plugin.
    let new_array_profiles: Vec<f64> = (0..NEW_ROUNDS)
        .map(|round| {
            let fresh: Vec<Array> = (0..ARRAYS)
                .map(|i| {
                    let value = (i + round) as f32;
                    devices[i % devices.len()].put(&[value; 4], &[4]).unwrap()
                })
                .collect();
            let t = ms(|| drop(client.heap_profile().unwrap()));
            drop(fresh);
            t
        })
        .collect();
    let heap_profile_new_arrays_ms = median(new_array_profiles);
    let mut profile_bytes = 0;
    let mut profile = || ms(|| profile_bytes = client.heap_profile().unwrap().len());
    let list = || ms(|| assert_eq!(client.live_arrays().unwrap().len(), ARRAYS));
    let floor = || ms(|| drop(std::hint::black_box(arrays.to_vec())));
    let (mut first_profiles, mut first_lists, mut first_floors) = (vec![], vec![], vec![]);
    let (mut defrags, mut by_hand) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        first_profiles.push(profile());
        // The first touch of every handle after other work pays for cold caches, whoever
        // makes it: rounds alternate which of the list and the floor goes first.
        if round > 0 {
            if round % 2 == 0 {
                first_lists.push(list());
                floor();
            } else {
                first_floors.push(floor());
                list();
            }
        }
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
    let profiles = (0..CALLS).map(|_| profile()).collect();
    // The raw floor: the same number of buffers on a raw client of the same plugin, each asked
    // its size and device, as any profile must.
    let raw_client = PjrtClient::create(Plugin::discover().unwrap(), &[]).unwrap();
    let raw_devices = raw_client.addressable_devices().unwrap();
    let raw_buffers: Vec<PjrtBuffer> = (0..ARRAYS)
        .map(|i| {
            let bytes: Vec<u8> = [i as f32; 4].iter().flat_map(|f| f.to_ne_bytes()).collect();
            let device = &raw_devices[i % raw_devices.len()];
            (raw_client.upload(
                HostBuffer::Copy(&bytes),
                ElementType::F32,
                &[4],
                device,
                None,
            ))
            .unwrap()
        })
        .collect();
    let raw_floors = (0..CALLS)
        .map(|_| ms(|| assert!(std::hint::black_box(raw_profile_floor(&raw_buffers)) > 0)))
        .collect();
    let heap_profile_raw_floor_ms = median(raw_floors);
    let lists = (0..CALLS).map(|_| list()).collect();
    let floors = (0..CALLS).map(|_| floor()).collect();
    let (heap_profile_ms, live_arrays_ms) = (median(profiles), median(lists));
    let (heap_profile_first_ms, live_arrays_first_ms) =
        (median(first_profiles), median(first_lists));
    let (live_arrays_floor_ms, live_arrays_floor_first_ms) = (median(floors), median(first_floors));
    let (defragment_ms, copy_out_in_ms) = (median(defrags), median(by_hand));
    assert_eq!(arrays[1234].to_vec::<f32>().unwrap(), vec![1234.0; 4]);
    println!(
        "{:<52} {:>10}",
        format!("with {ARRAYS} live arrays (median)"),
        "ms"
    );
    println!(
        "{:<52} {:>10.3}",
        format!("heap_profile ({profile_bytes} bytes), {CALLS} calls"),
        heap_profile_ms
    );
    println!(
        "{:<52} {:>10.3}",
        "heap_profile, first call after a defragment", heap_profile_first_ms
    );
    println!(
        "{:<52} {:>10.3}",
        format!("live_arrays, {CALLS} calls"),
        live_arrays_ms
    );
    println!(
        "{:<52} {:>10.3}",
        "live_arrays, first call after a heap profile", live_arrays_first_ms
    );
    println!(
        "{:<52} {:>10.3}",
        "floor: clone and drop 10k handles in hand", live_arrays_floor_ms
    );
    println!(
        "{:<52} {:>10.3}",
        "floor, first call after a heap profile", live_arrays_floor_first_ms
    );
    println!(
        "{:<52} {:>10.3}",
        "heap_profile, first call after 10,000 new arrays", heap_profile_new_arrays_ms
    );
    println!(
        "{:<52} {:>10.3}",
        "raw C API floor: each buffer's size and device", heap_profile_raw_floor_ms
    );
    println!("{:<52} {:>10.3}", "defragment", defragment_ms);
    println!(
        "{:<52} {:>10.3}",
        "every array to host and back, by hand", copy_out_in_ms
    );
    println!(
        "{{\"arrays\":{ARRAYS},\"heap_profile_ms\":{},\"heap_profile_raw_floor_ms\":{},\"heap_profile_raw_ratio\":{},\"heap_profile_new_arrays_raw_ratio\":{},\"heap_profile_first_ms\":{},\"heap_profile_new_arrays_ms\":{},\"live_arrays_ms\":{},\"live_arrays_first_ms\":{},\"live_arrays_floor_ms\":{},\"live_arrays_floor_first_ms\":{},\"live_arrays_floor_ratio\":{},\"defragment_ms\":{},\"copy_out_in_ms\":{},\"defragment_ratio\":{}}}",
        round3(heap_profile_ms),
        round3(heap_profile_raw_floor_ms),
        round3(heap_profile_ms / heap_profile_raw_floor_ms),
        round3(heap_profile_new_arrays_ms / heap_profile_raw_floor_ms),
        round3(heap_profile_first_ms),
        round3(heap_profile_new_arrays_ms),
        round3(live_arrays_ms),
        round3(live_arrays_first_ms),
        round3(live_arrays_floor_ms),
        round3(live_arrays_floor_first_ms),
        round3(live_arrays_ms / live_arrays_floor_ms),
        round3(defragment_ms),
        round3(copy_out_in_ms),
        round3(defragment_ms / copy_out_in_ms)
    );
}
