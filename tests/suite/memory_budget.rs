//! Each memory space's actor owns its account and budget: the bytes our arrays hold there are
//! counted as arrays are made, deleted and dropped; past a budget a blocking upload fails at
//! once and allocates nothing, and an async upload waits, in order, until room frees.

use std::future::Future;

use pjrt_actors::{Client, CompileOptions, ElementType, Error, HostBuffer, wait};

/// f32[16]: 64 bytes.
const SIXTEEN: [f32; 16] = [1.0; 16];

#[test]
fn the_account_counts_uploads_outputs_deletes_and_drops() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    let memory = device.default_memory_space().unwrap();
    let before = memory.bytes_held();
    let a = device.put(&SIXTEEN, &[16]).unwrap();
    assert_eq!(memory.bytes_held(), before + 64);
    let exe = (client.compile_and_load(
        crate::common::binary_program("add", &[16], "f32"),
        &CompileOptions::default(),
    ))
    .unwrap();
    let out = exe.execute(&[&a, &a]).unwrap();
    assert_eq!(memory.bytes_held(), before + 128, "an output is counted");
    let copy = a.copy_to_device(&client.devices()[1]).unwrap();
    assert_eq!(
        memory.bytes_held(),
        before + 128,
        "a copy counts where it lands"
    );
    out[0].delete();
    out[0].delete();
    assert_eq!(memory.bytes_held(), before + 64, "a delete credits once");
    drop(out);
    drop(a);
    assert_eq!(memory.bytes_held(), before);
    drop(copy);
}

#[test]
fn a_blocking_upload_past_the_budget_fails_at_once_and_allocates_nothing() {
    let client = Client::open().unwrap();
    let device = &client.devices()[0];
    let memory = device.default_memory_space().unwrap();
    memory.set_budget(Some(100)).unwrap();
    assert_eq!(memory.budget(), Some(100));
    let a = device.put(&SIXTEEN, &[16]).unwrap();
    let live = client.live_array_count();
    let refused = device.put(&SIXTEEN, &[16]).unwrap_err();
    match &refused {
        Error::MemoryBudget {
            asked,
            held,
            budget,
            memory: name,
        } => {
            assert_eq!((*asked, *held, *budget), (64, 64, 100), "{refused}");
            assert!(name.starts_with("memory space "), "{refused}");
        }
        other => panic!("expected MemoryBudget, got {other:?}"),
    }
    assert_eq!(client.live_array_count(), live, "nothing registered");
    assert_eq!(memory.bytes_held(), 64, "nothing charged");
    // Another memory space has no budget.
    let other = &client.devices()[1];
    other.put(&SIXTEEN, &[16]).unwrap();
    drop(a);
    let b = device.put(&SIXTEEN, &[16]).unwrap();
    memory.set_budget(None).unwrap();
    let c = device.put(&SIXTEEN, &[16]).unwrap();
    assert_eq!(memory.bytes_held(), 128);
    drop((b, c));
}

#[test]
fn an_async_upload_past_the_budget_waits_for_room_in_order() {
    let client = Client::open().unwrap();
    let device = client.devices()[0].clone();
    let memory = device.default_memory_space().unwrap();
    memory.set_budget(Some(64)).unwrap();
    let a = device.put(&SIXTEEN, &[16]).unwrap();
    let bytes: Vec<u8> = SIXTEEN.iter().flat_map(|x| x.to_le_bytes()).collect();
    let upload = |dims: &[i64]| {
        let n = dims.iter().product::<i64>() as usize * 4;
        client.buffer_from_host_async(
            HostBuffer::Copy(&bytes[..n]),
            ElementType::F32,
            dims,
            &device,
            None,
        )
    };
    // One that could never fit fails at once.
    let too_big = wait(client.buffer_from_host_async(
        HostBuffer::Copy(&[0u8; 68]),
        ElementType::F32,
        &[17],
        &device,
        None,
    ));
    assert!(
        matches!(too_big, Err(Error::MemoryBudget { asked: 68, .. })),
        "{too_big:?}"
    );
    // A waiter whose caller goes away (its future polled once, then dropped) is never
    // uploaded.
    let mut abandoned = Box::pin(upload(&[16]));
    let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
    assert!(abandoned.as_mut().poll(noop).is_pending());
    drop(abandoned);
    // Each is sent (polled once) here, so they queue in this order.
    let (mut first, mut second) = (Box::pin(upload(&[16])), Box::pin(upload(&[8])));
    assert!(first.as_mut().poll(noop).is_pending() && second.as_mut().poll(noop).is_pending());
    // Both wait for room, as the memory-space actor that holds them says (the abandoned one
    // not among them); their threads cannot have an answer before it admits them.
    assert_eq!(memory.waiting_uploads().unwrap(), 2);
    let first = std::thread::spawn(move || wait(first));
    let second = std::thread::spawn(move || wait(second));
    assert_eq!(memory.bytes_held(), 64);
    drop(a);
    let first = first.join().unwrap().unwrap();
    assert_eq!(first.to_vec::<f32>().unwrap(), SIXTEEN);
    // The later one waits behind the room the first took.
    assert_eq!(memory.waiting_uploads().unwrap(), 1);
    assert!(!second.is_finished());
    assert_eq!(memory.bytes_held(), 64);
    // Raising the budget lets it in.
    memory.set_budget(Some(96)).unwrap();
    let second = second.join().unwrap().unwrap();
    assert_eq!(second.dims(), &[8]);
    assert_eq!(memory.bytes_held(), 96);
    drop((first, second));
    assert_eq!(
        memory.bytes_held(),
        0,
        "the abandoned upload charged nothing"
    );
}
