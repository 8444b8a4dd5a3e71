//! Dropping the last handle stops every actor and joins every thread the client started; alone
//! in its binary so the thread count is this test's own.

mod common;

use std::time::Duration;

use common::{eventually, thread_count, within};
use pjrt_actors::Client;

#[test]
fn dropping_the_last_handle_joins_every_thread() {
    // Load the plugin once first: the plugin keeps a pool of its own threads for the process.
    drop(Client::open().unwrap());
    let outside = thread_count();
    within(Duration::from_secs(60), move || {
        // Counted here, so the watchdog's own thread is part of it.
        let baseline = thread_count();
        for round in 0..5 {
            let client = Client::builder().cpu_device_count(4).open().unwrap();
            // A system thread plus one arbiter per device, at least.
            assert!(
                thread_count() >= baseline + 5,
                "round {round}: actors not started"
            );
            let device = client.devices()[3].clone();
            let space = device.default_memory_space().unwrap();
            drop(client);
            // Handles other than `Client` keep the actors alive and working.
            assert_eq!(device.memory_stats().unwrap(), None);
            assert_eq!(space.describe().unwrap().1, vec![3]);
            drop(device);
            drop(space);
            assert_eq!(
                thread_count(),
                baseline,
                "round {round}: threads left behind"
            );
        }
    });
    assert!(eventually(Duration::from_secs(5), || thread_count() == outside));
}
