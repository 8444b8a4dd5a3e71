//! The multi-process key-value store: `RedisKvStore`'s semantics against a real Redis, and a
//! client opened as one node of a distributed client, its callbacks handed to the plugin.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pjrt_actors::{Client, CompileOptions, KvError, KvStore, RedisKvStore};

use crate::common::redis_cluster::{FleetRedis, Kind};

crate::on_one_and_cluster!(the_redis_store_gets_waits_times_out_and_puts,);

fn the_redis_store_gets_waits_times_out_and_puts(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let store = Arc::new(RedisKvStore::new(&server.url(), "kvtest").unwrap());
    assert_eq!(store.try_get("absent"), Err(KvError::NotFound));
    let start = Instant::now();
    assert_eq!(
        store.get("absent", Duration::from_millis(150)),
        Err(KvError::DeadlineExceeded)
    );
    assert!(
        start.elapsed() >= Duration::from_millis(150) && start.elapsed() < Duration::from_secs(2)
    );
    // Binary values, overwritten by a later put.
    let value: Vec<u8> = (0..=255).collect();
    store.put("topology", &value).unwrap();
    assert_eq!(store.try_get("topology").unwrap(), value);
    store.put("topology", b"v2").unwrap();
    assert_eq!(
        store.get("topology", Duration::from_secs(1)).unwrap(),
        b"v2"
    );
    // A get waits for another node's put.
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            store.put("node1/ready", b"yes").unwrap();
        })
    };
    assert_eq!(
        store.get("node1/ready", Duration::from_secs(5)).unwrap(),
        b"yes"
    );
    writer.join().unwrap();
    // Namespaced: another store on the same server does not see these keys.
    let other = RedisKvStore::new(&server.url(), "other").unwrap();
    assert_eq!(other.try_get("topology"), Err(KvError::NotFound));
    // The server gone: a typed error, not a hang.
    drop(server);
    let start = Instant::now();
    assert!(matches!(store.put("k", b"v"), Err(KvError::Unavailable(_))));
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// The CPU plugin as one node: it takes the store and never calls it (a GPU plugin would use it
/// to exchange topologies; `gpu_check`'s two nodes do that). The GPU check skips `cpu_plugin`
/// modules.
mod cpu_plugin {
    use super::*;

    /// Counts what the plugin asks of the store.
    struct Counting(AtomicU64);

    impl KvStore for Counting {
        fn get(&self, _: &str, _: Duration) -> Result<Vec<u8>, KvError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Err(KvError::NotFound)
        }
        fn try_get(&self, _: &str) -> Result<Vec<u8>, KvError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Err(KvError::NotFound)
        }
        fn put(&self, _: &str, _: &[u8]) -> Result<(), KvError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    #[test]
    fn opens_as_a_node_and_never_calls_the_store() {
        let store = Arc::new(Counting(AtomicU64::new(0)));
        let opened = Client::builder().distributed(0, 1, store.clone()).open();
        // Multi-process CPU clients need the 0.81 plugin.
        let Some(client) = crate::common::node_or_refusal(opened) else {
            return;
        };
        let exe = client
            .compile_and_load(crate::common::add_f32x4(), &CompileOptions::default())
            .unwrap();
        let d = &client.devices()[0];
        let x = d.put(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
        assert_eq!(
            exe.execute(&[&x, &x]).unwrap()[0].to_vec::<f32>().unwrap(),
            [2.0, 4.0, 6.0, 8.0]
        );
        drop((exe, x, client));
        assert_eq!(
            store.0.load(Ordering::Relaxed),
            0,
            "the CPU plugin ignores the key-value callbacks"
        );
    }
}
