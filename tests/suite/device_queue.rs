//! Each device actor owns its queue of async work: a run holds a slot from the time it is routed
//! until its outputs are computed, past the client's limit a run is refused with `Error::Busy`,
//! and the client actor sends a portable run that names no device to the least-loaded one.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use pjrt_actors::{Client, CompileOptions, Device, Error, LoadedExecutable, wait};

use crate::callbacks::{program_around, pure_map};

/// A portable `x + cb(x)` over f32[4] whose callback waits for a token on the returned sender
/// before it answers each element (a run takes four: `release`), so the runs it is in stay in
/// flight for as long as the test likes.
fn held_program(client: &Client) -> (LoadedExecutable, Sender<()>) {
    let (exe, tokens, _) = held_program_told(client);
    (exe, tokens)
}

/// [`held_program`], also telling on the returned receiver each time its callback is entered
/// (its run then holds its arguments).
fn held_program_told(client: &Client) -> (LoadedExecutable, Sender<()>, Receiver<()>) {
    let (sender, tokens): (Sender<()>, Receiver<()>) = crossbeam_channel::unbounded();
    let (tell, entered) = crossbeam_channel::unbounded();
    let cb = pure_map("held", 4, move |x| {
        let _ = tell.send(());
        let _ = tokens.recv_timeout(Duration::from_secs(10));
        x
    });
    let exe = (client.compile_request(program_around(&cb, 4)))
        .options(&CompileOptions {
            portable: true,
            ..Default::default()
        })
        .callbacks(&[cb])
        .load()
        .unwrap();
    (exe, sender, entered)
}

/// Lets `runs` runs of a [`held_program`] finish.
fn release(tokens: &Sender<()>, runs: usize) {
    for _ in 0..4 * runs {
        tokens.send(()).unwrap();
    }
}

/// Starts `n` async runs of `exe` on `device`, each polled on a thread of its own.
fn start_held(
    exe: &LoadedExecutable,
    device: &Device,
    n: usize,
) -> Vec<std::thread::JoinHandle<pjrt_actors::Result<Vec<f32>>>> {
    let x = device.put(&[1f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    (0..n)
        .map(|_| {
            let run = exe.execute_on_async(device, &[&x]);
            std::thread::spawn(move || wait(run)?[0].to_vec::<f32>())
        })
        .collect()
}

/// Waits until `device` has `depth` runs in flight (the router counts them as it routes).
fn wait_for_depth(device: &Device, depth: usize) {
    let give_up = Instant::now() + Duration::from_secs(20);
    while device.queue_depth() != depth {
        assert!(Instant::now() < give_up, "depth {}", device.queue_depth());
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_device_past_its_queue_limit_refuses_async_runs_until_a_slot_frees() {
    let client = Client::builder().device_queue_limit(2).open().unwrap();
    let device = &client.devices()[0];
    let (exe, tokens) = held_program(&client);
    let held = start_held(&exe, device, 2);
    wait_for_depth(device, 2);
    let x = device.put(&[1f32; 4], &[4]).unwrap();
    let refused = wait(exe.execute_on_async(device, &[&x])).unwrap_err();
    assert!(matches!(refused, Error::Busy { .. }), "{refused}");
    release(&tokens, 2);
    for run in held {
        assert_eq!(run.join().unwrap().unwrap(), [2.0, 4.0, 6.0, 8.0]);
    }
    // Slots go back once the outputs are computed; the device takes work again.
    wait_for_depth(device, 0);
    release(&tokens, 1);
    let again = wait(exe.execute_on_async(device, &[&x])).unwrap();
    assert_eq!(again[0].to_vec::<f32>().unwrap(), [2.0; 4]);
    assert_eq!(device.work_stats().unwrap().in_flight, 0);
}

/// Needs the CPU plugin: several devices in one client (`cpu_device_count`), and runs that hold
/// their arguments while their callbacks run.
mod cpu_plugin {
    use super::*;

    /// On the CPU plugin a run holds its arguments while its callback runs (a GPU plugin's
    /// callback runs after the execute call has returned, when nothing holds them).
    #[test]
    fn a_buffer_deleted_while_a_run_holds_it_is_freed_by_its_device_actor_when_the_run_ends() {
        let client = Client::open().unwrap();
        let device = &client.devices()[0];
        let (exe, tokens, entered) = held_program_told(&client);
        let memory = device.default_memory_space().unwrap();
        let before = memory.bytes_held();
        let x = device.put(&[1f32, 2.0, 3.0, 4.0], &[4]).unwrap();
        let run = exe.execute_on_async(device, &[&x]);
        let run = std::thread::spawn(move || wait(run)?[0].to_vec::<f32>());
        // Inside the callback, so inside the execute that holds `x`.
        entered.recv_timeout(Duration::from_secs(20)).unwrap();
        // The run holds its argument: the delete marks it, and its device actor frees it later.
        x.delete();
        assert!(x.is_deleted());
        assert!(matches!(x.to_vec::<f32>(), Err(Error::Deleted { .. })));
        // Its buffer is still on the device, so its bytes stay in the account.
        assert_eq!(
            memory.bytes_held(),
            before + 16,
            "held while the run holds it"
        );
        release(&tokens, 1);
        assert_eq!(run.join().unwrap().unwrap(), [2.0, 4.0, 6.0, 8.0]);
        let give_up = Instant::now() + Duration::from_secs(20);
        let stats = loop {
            let stats = device.work_stats().unwrap();
            if stats.pending_frees == 0 || Instant::now() > give_up {
                break stats;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        assert_eq!(
            (stats.frees_deferred, stats.pending_frees),
            (1, 0),
            "{stats:?}"
        );
        // Freed, and credited once: the run's output is gone too.
        assert_eq!(memory.bytes_held(), before, "credited when freed");
        // The handle lives on; a later delete of an array no one uses is freed at once.
        let y = device.put(&[1f32; 4], &[4]).unwrap();
        y.delete();
        assert_eq!(device.work_stats().unwrap().frees_deferred, 1);
        assert_eq!(memory.bytes_held(), before, "y is credited at its delete");
        drop(x);
        assert_eq!(
            memory.bytes_held(),
            before,
            "x's drop credits nothing twice"
        );
    }

    #[test]
    fn a_portable_run_that_names_no_device_goes_to_the_least_loaded_one() {
        let client = Client::builder().cpu_device_count(4).open().unwrap();
        let devices = client.devices();
        let (exe, tokens) = held_program(&client);
        let held = start_held(&exe, &devices[0], 3);
        wait_for_depth(&devices[0], 3);
        // The light program's argument lives on device 1; it is copied to each other device
        // chosen.
        let (light, light_tokens) = held_program(&client);
        let x = devices[1].put(&[1f32, 2.0, 3.0, 4.0], &[4]).unwrap();
        let mut chosen = Vec::new();
        for _ in 0..6 {
            release(&light_tokens, 1);
            let out = light.execute_least_loaded(&[&x]).unwrap();
            assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
            chosen.push(devices.iter().position(|d| *d == out[0].device()).unwrap());
        }
        // Device 0 holds three runs; the three idle devices take turns.
        assert_eq!(chosen, [1, 2, 3, 1, 2, 3], "devices chosen");
        release(&tokens, 3);
        for run in held {
            assert_eq!(run.join().unwrap().unwrap(), [2.0, 4.0, 6.0, 8.0]);
        }
        wait_for_depth(&devices[0], 0);
        // With every queue empty again, device 0 takes its turn too.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            release(&light_tokens, 1);
            let out = wait(light.execute_least_loaded_async(&[&x])).unwrap();
            seen.insert(devices.iter().position(|d| *d == out[0].device()).unwrap());
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        let not_portable = client
            .compile_and_load(crate::common::add_f32x4(), &CompileOptions::default())
            .unwrap();
        let refused = not_portable.execute_least_loaded(&[&x, &x]).unwrap_err();
        assert!(matches!(refused, Error::InvalidArgument(ref m) if m.contains("not portable")));
    }
}
