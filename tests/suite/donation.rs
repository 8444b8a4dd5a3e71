//! Donation against the real CPU plugin: a program exported with `donate_argnums` (its
//! parameter marked `tf.aliasing_output`) given its input's buffer for its output, the donated
//! array deleted and the memory accounts right, and every refusal leaving every array live.

use pjrt_actors::{Array, Client, CompileOptions, Error, LoadedExecutable};

const N: i64 = 1 << 16;

/// `step(cache, x) = cache + x`, with `cache` aliased to the output as `jax.jit(step,
/// donate_argnums=0)` exports it; `aliased: false` is the same program without the alias.
fn step_program(aliased: bool) -> String {
    let t = format!("tensor<{N}xf32>");
    let alias = if aliased {
        " {tf.aliasing_output = 0 : i32}"
    } else {
        ""
    };
    format!(
        "module @jit_step {{\n  func.func public @main(%cache: {t}{alias}, %x: {t}) -> ({t}) {{\n    %0 = stablehlo.add %cache, %x : {t}\n    return %0 : {t}\n  }}\n}}\n"
    )
}

fn load(client: &Client, aliased: bool) -> LoadedExecutable {
    client
        .compile_and_load(step_program(aliased), &CompileOptions::default())
        .unwrap()
}

fn filled(client: &Client, v: f32) -> Array {
    client.devices()[0].put(&vec![v; N as usize], &[N]).unwrap()
}

fn assert_refused<T: std::fmt::Debug>(outcome: pjrt_actors::Result<T>, index: usize, needle: &str) {
    match outcome {
        Err(Error::Donation {
            index: got, reason, ..
        }) => {
            assert_eq!(got, index, "{reason}");
            assert!(reason.contains(needle), "{needle:?} not in {reason:?}");
        }
        other => panic!("expected a refused donation of argument {index}: {other:?}"),
    }
}

#[test]
fn a_donated_cache_backs_the_output_and_is_deleted_with_the_accounts_right() {
    let client = Client::open().unwrap();
    let exe = load(&client, true);
    assert_eq!(exe.donatable_parameters(), &[0]);
    assert_eq!(load(&client, false).donatable_parameters(), &[] as &[usize]);
    let memory = client.devices()[0].default_memory_space().unwrap();
    let (cache, x) = (filled(&client, 1.0), filled(&client, 2.0));
    let held = memory.bytes_held();
    let address = cache.unsafe_buffer_pointer().unwrap();
    let live = client.live_arrays().unwrap().len();

    let out = exe.execute_donating(&[&cache, &x], &[0]).unwrap();
    assert!(cache.is_deleted() && !x.is_deleted());
    assert!(matches!(cache.to_vec::<f32>(), Err(Error::Deleted { .. })));
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0; N as usize]);
    // The output is the donated buffer: same memory, nothing more held. The donated handle is
    // listed until dropped, deleted, as py_client lists a deleted array.
    assert_eq!(out[0].unsafe_buffer_pointer().unwrap(), address);
    assert_eq!(memory.bytes_held(), held);
    assert_eq!(client.live_arrays().unwrap().len(), live + 1);
    let listed = client.live_arrays().unwrap();
    assert!(
        listed
            .iter()
            .any(|a| a.id() == cache.id() && a.is_deleted())
    );
    drop(listed);
    drop(cache);
    assert_eq!(client.live_arrays().unwrap().len(), live);

    // Without donation the same program copies: the cache stays, a second buffer is held.
    let kept = exe.execute(&[&out[0], &x]).unwrap();
    assert!(!out[0].is_deleted());
    assert_ne!(kept[0].unsafe_buffer_pointer().unwrap(), address);
    assert_eq!(memory.bytes_held(), held + 4 * N as u64);

    // A chain of donated steps holds one cache throughout.
    let mut cache = kept.into_iter().next().unwrap();
    drop(out);
    let held = memory.bytes_held();
    for _ in 0..100 {
        cache = exe.execute_donating(&[&cache, &x], &[0]).unwrap().remove(0);
    }
    assert_eq!(memory.bytes_held(), held);
    assert_eq!(cache.to_vec::<f32>().unwrap(), vec![205.0; N as usize]);
    // The steps' donated caches are gone with their handles: the final cache, x and nothing more.
    assert_eq!(client.live_arrays().unwrap().len(), live);
}

#[test]
fn every_refused_donation_consumes_nothing() {
    let client = Client::open().unwrap();
    let exe = load(&client, true);
    let (cache, x) = (filled(&client, 1.0), filled(&client, 2.0));
    // A parameter the program does not donate, one named twice, an index past the parameters.
    assert_refused(
        exe.execute_donating(&[&cache, &x], &[1]),
        1,
        "only parameters [0]",
    );
    assert_refused(
        exe.execute_donating(&[&cache, &x], &[0, 0]),
        0,
        "named twice",
    );
    assert_refused(
        exe.execute_donating(&[&cache, &x], &[7]),
        7,
        "only parameters",
    );
    // The same array donated and passed again (JAX: "donate the same buffer twice").
    assert_refused(
        exe.execute_donating(&[&cache, &cache], &[0]),
        0,
        "argument 1 too",
    );
    // A program that aliases nothing.
    let plain = load(&client, false);
    assert_refused(
        plain.execute_donating(&[&cache, &x], &[0]),
        0,
        "donate_argnums",
    );
    assert!(!cache.is_deleted() && !x.is_deleted());
    assert_eq!(cache.to_vec::<f32>().unwrap()[0], 1.0);
    // A deleted array, as JAX refuses one.
    let gone = filled(&client, 0.0);
    gone.delete();
    assert!(matches!(
        exe.execute_donating(&[&gone, &x], &[0]),
        Err(Error::Deleted { .. })
    ));
    // Wrong shapes are refused before any donation is taken.
    let short = client.devices()[0].put(&[1f32; 4], &[4]).unwrap();
    assert!(matches!(
        exe.execute_donating(&[&short, &x], &[0]),
        Err(Error::BadArgument { .. })
    ));
    assert!(!short.is_deleted());
    // After all that, the donation goes through.
    let out = exe.execute_donating(&[&cache, &x], &[0]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap()[0], 3.0);
}

/// Holds the device's actor busy with a test hook (feature `test-hooks`, which the suite runs
/// with), so that work sent meanwhile is queued for certain.
#[cfg(feature = "test-hooks")]
#[test]
fn an_array_in_use_or_awaited_by_queued_work_is_not_donated() {
    use crate::callbacks::pure_map;
    use std::sync::{Arc, Mutex};
    let client = Client::open().unwrap();
    let exe = load(&client, true);
    let (cache, x) = (filled(&client, 1.0), filled(&client, 2.0));
    let device = &client.devices()[0];
    let small = device.put(&[1f32; 4], &[4]).unwrap();
    // The device's actor is held busy, so work sent to it waits in its mailbox until the hold
    // is dropped. (A slow program did not do it: the plugin runs a program off the actor's
    // thread, so the actor could serve the read before the donation was asked for.)
    // A read alone is queued that will use the cache: donating it now is refused (tested
    // apart from a queued run, which alone refuses too and would hide a read not counted).
    let hold = device.hold_actor().unwrap();
    let read = cache.to_bytes_async();
    assert_refused(
        exe.execute_donating(&[&cache, &x], &[0]),
        0,
        "work queued on its device",
    );
    drop(hold);
    let bytes = pjrt_actors::wait(read).unwrap();
    assert_eq!(bytes.len(), 4 * N as usize);
    assert!(!cache.is_deleted());
    // A run alone is queued that will use the cache: refused too.
    let hold = device.hold_actor().unwrap();
    let queued = exe.execute_async(&[&cache, &x]);
    assert_refused(
        exe.execute_donating(&[&cache, &x], &[0]),
        0,
        "work queued on its device",
    );
    drop(hold);
    assert_eq!(
        pjrt_actors::wait(queued).unwrap()[0]
            .to_vec::<f32>()
            .unwrap()[0],
        3.0
    );
    assert!(!cache.is_deleted());
    // Async donation sent after queued work takes the buffer when its turn comes, in order.
    let hold = device.hold_actor().unwrap();
    let read = cache.to_bytes_async();
    let donated = exe.execute_donating_async(&[&cache, &x], &[0]);
    drop(hold);
    assert_eq!(pjrt_actors::wait(read).unwrap().len(), 4 * N as usize);
    let out = pjrt_actors::wait(donated).unwrap();
    assert!(cache.is_deleted());
    assert_eq!(out[0].to_vec::<f32>().unwrap()[0], 3.0);

    // A callback of a running program that takes the array as an argument tries to donate it.
    let held = filled(&client, 5.0);
    let exe2 = exe.clone();
    let (held2, x2) = (held.clone(), x.clone());
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let holder = client
        .compile_request(format!(
            "module @holder {{\n  func.func public @main(%c: tensor<{N}xf32>, %s: tensor<4xf32>) -> tensor<4xf32> {{\n    {}\n    return %r : tensor<4xf32>\n  }}\n}}\n",
            pure_map("probe", 4, |v| v).call_text("%r", &["%s"])
        ))
        .options(&CompileOptions::default())
        .callbacks(&[pure_map("probe", 4, move |v| {
            let mut s = seen2.lock().unwrap();
            if s.is_none() {
                *s = Some(exe2.execute_donating(&[&held2, &x2], &[0]).map(|_| ()));
            }
            v
        })])
        .load()
        .unwrap();
    holder.execute(&[&held, &small]).unwrap();
    assert_refused(seen.lock().unwrap().take().unwrap(), 0, "another operation");
    assert!(!held.is_deleted());
}

#[test]
fn a_buffer_donor_parameter_may_be_donated_too() {
    let client = Client::open().unwrap();
    let t = format!("tensor<{N}xf32>");
    let program = format!(
        "module @jit_step {{\n  func.func public @main(%cache: {t} {{jax.buffer_donor = true}}, %x: {t}) -> ({t}) {{\n    %0 = stablehlo.add %cache, %x : {t}\n    return %0 : {t}\n  }}\n}}\n"
    );
    let exe = client
        .compile_and_load(program, &CompileOptions::default())
        .unwrap();
    assert_eq!(exe.donatable_parameters(), &[0]);
    let (cache, x) = (filled(&client, 1.0), filled(&client, 2.0));
    let out = exe.execute_donating(&[&cache, &x], &[0]).unwrap();
    assert!(cache.is_deleted());
    assert_eq!(out[0].to_vec::<f32>().unwrap()[0], 3.0);
}

#[test]
fn an_export_made_with_donate_argnums_donates_through_call_arrays_and_call() {
    let client = Client::open().unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exported/generate");
    let insert = client
        .load_exported(&std::fs::read(dir.join("insert.exported")).unwrap())
        .unwrap();
    // insert(cache {k, v}, entry {k, v}, slot), exported with donate_argnums=0: the cache.
    assert_eq!(insert.donatable_inputs(), vec![0, 1]);
    let device = insert.device().unwrap().clone();
    let types = insert.free_input_types();
    let zeros = |k: usize, v: f32| {
        let t = types[k].clone().unwrap();
        let n: i64 = t.dims.iter().product();
        device.put(&vec![v; n as usize], &t.dims).unwrap()
    };
    let (ck, cv, ek, ev) = (zeros(0, 0.0), zeros(1, 0.0), zeros(2, 1.0), zeros(3, 2.0));
    let slot = device.put(&[2i32], &[]).unwrap();
    let address = ck.unsafe_buffer_pointer().unwrap();
    let out = insert
        .call_arrays(&[&ck, &cv, &ek, &ev, &slot], &[0, 1])
        .unwrap();
    assert!(ck.is_deleted() && cv.is_deleted() && !ek.is_deleted());
    assert_eq!(out[0].unsafe_buffer_pointer().unwrap(), address);
    // Slot 2 of the [L, S, T, H, Dh] cache holds the entry, the other slots zeros.
    let k = out[0].to_vec::<f32>().unwrap();
    let per_slot = k.len() / (2 * 4);
    assert!(k[2 * per_slot..3 * per_slot].iter().all(|&v| v == 1.0));
    assert!(k[..2 * per_slot].iter().all(|&v| v == 0.0));
    // The entry is not donatable: refused naming the free input, nothing consumed.
    assert_refused(
        insert.call_arrays(&[&out[0], &out[1], &ek, &ev, &slot], &[2]),
        2,
        "only parameters",
    );
    assert!(!ek.is_deleted() && !out[0].is_deleted());
    // call() with host data donates its own uploads and gives the same answer.
    let host: Vec<_> = [&out[0], &out[1], &ek, &ev, &slot]
        .iter()
        .map(|a| a.to_host_array().unwrap())
        .collect();
    let again = insert.call(&host).unwrap();
    assert_eq!(again[0], out[0].to_host_array().unwrap());
}

#[test]
fn heap_profiles_and_defragment_stay_right_across_donation() {
    use pjrt_actors_core::arrays::heap_profile::pprof::Profile;
    use prost::Message;
    let client = Client::open().unwrap();
    let exe = load(&client, true);
    let (cache, x) = (filled(&client, 1.0), filled(&client, 2.0));
    let bytes_in_profile = |client: &Client| -> i64 {
        let p = Profile::decode(client.heap_profile().unwrap().as_slice()).unwrap();
        p.sample.iter().map(|s| s.value[1]).sum()
    };
    let before = bytes_in_profile(&client);
    let out = exe.execute_donating(&[&cache, &x], &[0]).unwrap();
    // The donated array is out of the profile while its handle lives; its output is in.
    assert_eq!(bytes_in_profile(&client), before);
    let report = client.defragment().unwrap();
    assert!(cache.is_deleted());
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0; N as usize]);
    assert_eq!(x.to_vec::<f32>().unwrap()[0], 2.0);
    // Moved: the output and x, not the donated array.
    assert_eq!(report.moved, 2, "{report:?}");
    // And a donation after the defragment still reuses the (moved) buffer.
    let address = out[0].unsafe_buffer_pointer().unwrap();
    let again = exe.execute_donating(&[&out[0], &x], &[0]).unwrap();
    assert_eq!(again[0].unsafe_buffer_pointer().unwrap(), address);
    assert_eq!(again[0].to_vec::<f32>().unwrap()[0], 5.0);
}
