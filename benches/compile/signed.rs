//! A signed Redis hit against an unsigned one (issue 53): one module fetched from a real
//! `redis-server` and loaded, by a client with a fleet key and by one without, interleaved; and
//! the signature's check alone on the entry's bytes, which is all a key adds to a hit.

use pjrt_actors::{CacheKeys, Client, CompileOptions, RedisCacheConfig};
use redis::Commands;

use crate::redis_server::RedisServer;
use crate::support::{interleaved, percentile_us, time_us};

pub struct SignedHit {
    pub signed_us: f64,
    pub unsigned_us: f64,
    pub verify_us: f64,
    pub entry_bytes: usize,
}

/// Hits of each, in blocks of two. In the full bench (other clients alive in the process) a
/// run of 40 in blocks of 4 once showed a 26% gap that runs of this part alone (and A/A runs,
/// both clients unsigned) never did: the gap was the machine, so more, shorter blocks.
const HITS: usize = 80;

pub fn measure(program: &str) -> SignedHit {
    let server = RedisServer::start(&[]);
    let keys = CacheKeys::new(vec![vec![7; 32]]).unwrap();
    let open = |namespace: &str, keys: Option<CacheKeys>| {
        let mut config = RedisCacheConfig::new(server.url());
        config.namespace = namespace.into();
        let builder =
            (Client::builder().memory_cache_entries(0)).compile_cache_redis_config(config);
        match keys {
            Some(k) => builder.compile_cache_keys(k),
            None => builder,
        }
        .open()
        .unwrap()
    };
    let (signed, unsigned) = (open("signed", Some(keys.clone())), open("unsigned", None));
    let options = CompileOptions::default();
    let hit =
        |client: &Client| time_us(|| drop(client.compile_and_load(program, &options).unwrap()));
    hit(&signed); // compiles and stores
    hit(&unsigned);
    let (mut s, mut u) = interleaved(HITS, 2, || hit(&signed), || hit(&unsigned));
    for (client, what) in [(&signed, "signed"), (&unsigned, "unsigned")] {
        let stats = client.compile_cache_stats();
        assert_eq!(
            (stats.compiles, stats.redis_hits, stats.unsigned_entries),
            (1, s.len() as u64, 0),
            "{what}: every request after the first is a Redis hit"
        );
    }
    let mut conn = server.connection().unwrap();
    let names: Vec<String> = conn.keys("signed:exe:*").unwrap();
    let entry: Vec<u8> = conn.get(&names[0]).unwrap();
    let mut verify: Vec<f64> = (0..200)
        .map(|_| time_us(|| assert!(keys.open(&entry).is_ok())))
        .collect();
    SignedHit {
        signed_us: percentile_us(&mut s, 50.0),
        unsigned_us: percentile_us(&mut u, 50.0),
        verify_us: percentile_us(&mut verify, 50.0),
        entry_bytes: entry.len(),
    }
}
