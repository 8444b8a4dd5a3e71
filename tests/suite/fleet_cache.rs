//! The compile cache's Redis tier against a real `redis-server`: sharing between clients,
//! single flight, a dead lease holder taken over, and every fault the tier must survive
//! without failing a compile: the server down, killed and restarted, full, slow or dropping
//! connections behind a proxy, corrupt or foreign entries, entries over the size limit. Each
//! test that does not stand a single server's own faults (killed, behind a proxy) runs on one
//! server and on a cluster of six (`on_one_and_cluster!`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pjrt_actors::{Client, CompileCacheStats, RedisCacheConfig};
use redis::Commands;

use crate::common::fleet::{self, client, compile_and_check};
use crate::common::redis_cluster::{FleetRedis, Kind};
use crate::common::redis_server::RedisServer;
use crate::common::tcp_proxy::{Mode, TcpProxy};

crate::on_one_and_cluster!(
    a_second_client_loads_what_the_first_compiled,
    concurrent_clients_compile_a_module_once,
    a_lease_whose_holder_died_is_taken_over_when_it_expires,
    a_full_server_still_compiles_and_counts_the_refusal,
    corrupt_truncated_and_foreign_entries_are_refused_deleted_and_recompiled,
    oversized_entries_are_not_stored_and_read_only_clients_never_write,
    a_stale_holder_never_overwrites_a_newer_entry,
    the_tier_can_be_dropped_inside_another_runtime,
    a_lease_without_an_expiry_or_past_any_we_grant_is_taken_over_at_once,
);

/// The tier these tests use: namespace `test`, 300 ms a round trip.
fn config(url: &str) -> RedisCacheConfig {
    fleet::config(url, "test", Duration::from_millis(300))
}

fn stats(c: &Client) -> CompileCacheStats {
    c.compile_cache_stats()
}

fn entry_keys(server: &FleetRedis) -> Vec<String> {
    let mut c = server.connection().unwrap();
    let mut keys: Vec<String> = c.keys("test:exe:*").unwrap();
    keys.sort();
    keys
}

fn a_second_client_loads_what_the_first_compiled(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let a = client(config(&server.url()));
    compile_and_check(&a, 3);
    let s = stats(&a);
    assert_eq!(
        (s.compiles, s.redis_misses, s.redis_stores, s.redis_hits),
        (1, 1, 1, 0),
        "{s:?}"
    );
    let keys = entry_keys(&server);
    assert_eq!(keys.len(), 1);
    let ttl: i64 = server.connection().unwrap().pttl(&keys[0]).unwrap();
    assert!(ttl > 0, "entries expire (TTL {ttl})");
    let b = client(config(&server.url()));
    compile_and_check(&b, 3);
    let s = stats(&b);
    assert_eq!((s.compiles, s.redis_hits), (0, 1), "{s:?}");
    assert_eq!(
        server
            .connection()
            .unwrap()
            .keys::<_, Vec<String>>("test:lease:*")
            .unwrap()
            .len(),
        0,
        "leases are released"
    );
}

fn concurrent_clients_compile_a_module_once(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let clients: Vec<Client> = (0..4).map(|_| client(config(&server.url()))).collect();
    std::thread::scope(|s| {
        for c in &clients {
            s.spawn(move || compile_and_check(c, 7));
        }
    });
    let all: Vec<CompileCacheStats> = clients.iter().map(stats).collect();
    let compiles: u64 = all.iter().map(|s| s.compiles).sum();
    let hits: u64 = all.iter().map(|s| s.redis_hits).sum();
    assert_eq!((compiles, hits), (1, 3), "{all:?}");
}

fn a_lease_whose_holder_died_is_taken_over_when_it_expires(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let mut cfg = config(&server.url());
    cfg.lease = Duration::from_millis(1500);
    let c = client(cfg);
    // A holder that took the lease and was killed: no renewal, no entry.
    let key = {
        // The first compile tells us the key's name; then forget the entry.
        compile_and_check(&c, 11);
        let keys = entry_keys(&server);
        let _: () = server.connection().unwrap().del(&keys[0]).unwrap();
        keys[0].replace(":exe:", ":lease:")
    };
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("dead-holder")
        .arg("PX")
        .arg(1500)
        .query(&mut server.connection().unwrap())
        .unwrap();
    let fresh = client({
        let mut cfg = config(&server.url());
        cfg.lease = Duration::from_millis(1500);
        cfg
    });
    let start = Instant::now();
    compile_and_check(&fresh, 11);
    let took = start.elapsed();
    let s = stats(&fresh);
    assert_eq!(
        (s.redis_lease_waits, s.redis_takeovers, s.compiles),
        (1, 1, 1),
        "{s:?}"
    );
    assert!(
        took >= Duration::from_millis(1300) && took < Duration::from_millis(1500 + 1000 + 2000),
        "took {took:?}"
    );
}

#[test]
fn redis_down_or_killed_and_restarted_never_fails_a_compile() {
    // Nothing listens: every compile is local, the first failure costs at most a timeout.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = client(config(&format!("redis://127.0.0.1:{port}")));
    let start = Instant::now();
    for n in 0..5 {
        compile_and_check(&down, 100 + n);
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let s = stats(&down);
    assert_eq!(s.compiles, 5);
    assert!(s.redis_errors >= 1, "{s:?}");

    let mut server = FleetRedis::start(Kind::One, &[]);
    let c = client(config(&server.url()));
    compile_and_check(&c, 200);
    server.server().kill();
    compile_and_check(&c, 201);
    assert!(stats(&c).redis_errors >= 1);
    server.server().restart();
    // The connection manager reconnects once the skip window (1 s) has passed; the first
    // round trip on the dead connection may still fail (and open another window), so the
    // next compiles get a few windows to find the server again.
    let mut n = 202;
    while stats(&c).redis_stores < 2 && n < 207 {
        std::thread::sleep(Duration::from_millis(1100));
        compile_and_check(&c, n);
        n += 1;
    }
    let s = stats(&c);
    assert_eq!(s.compiles, 3 + (n - 203) as u64, "{s:?}");
    assert!(
        entry_keys(&server).len() == 1 && s.redis_stores == 2,
        "stored again after the restart: {s:?}"
    );
}

fn a_full_server_still_compiles_and_counts_the_refusal(kind: Kind) {
    // A tiny maxmemory with no eviction: the server is over it already and refuses writes.
    let server = FleetRedis::start(
        kind,
        &["--maxmemory", "1", "--maxmemory-policy", "noeviction"],
    );
    let refused = server
        .connection()
        .unwrap()
        .set::<_, _, ()>("probe", 1)
        .unwrap_err();
    assert!(refused.to_string().contains("OOM"), "{refused}");
    let c = client(config(&server.url()));
    compile_and_check(&c, 21);
    let s = stats(&c);
    assert_eq!((s.compiles, s.redis_stores), (1, 0), "{s:?}");
    assert!(s.redis_errors >= 1, "the refused write is counted: {s:?}");
}

fn corrupt_truncated_and_foreign_entries_are_refused_deleted_and_recompiled(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    compile_and_check(&client(config(&server.url())), 31);
    compile_and_check(&client(config(&server.url())), 32);
    let keys = entry_keys(&server);
    let mut conn = server.connection().unwrap();
    let (a, b): (Vec<u8>, Vec<u8>) = (conn.get(&keys[0]).unwrap(), conn.get(&keys[1]).unwrap());
    let mut flipped = a.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let damaged: [(&str, Vec<u8>); 4] = [
        ("a flipped byte", flipped),
        ("a truncated entry", a[..a.len() / 3].to_vec()),
        ("another module's entry", b.clone()),
        ("not an entry at all", b"hello".to_vec()),
    ];
    for (what, bytes) in damaged {
        let _: () = conn.set(&keys[0], bytes).unwrap();
        // Whichever module keys[0] is, compiling both makes one client meet the bad entry.
        let c = client(config(&server.url()));
        compile_and_check(&c, 31);
        compile_and_check(&c, 32);
        let s = stats(&c);
        assert_eq!(
            (s.corrupt_entries, s.compiles, s.redis_hits),
            (1, 1, 2),
            "{what}: {s:?}"
        );
        let now: Vec<u8> = conn.get(&keys[0]).unwrap();
        assert!(
            now.len() > 100 && now != b,
            "{what}: a good entry replaced the bad one"
        );
    }
}

#[test]
fn a_slow_or_dropping_proxy_never_fails_a_compile() {
    let server = RedisServer::start(&[]);
    let proxy = TcpProxy::start(server.port);
    let c = client(config(&proxy.url()));
    compile_and_check(&c, 41);
    assert_eq!(stats(&c).redis_stores, 1);
    proxy.set(Mode::Delay);
    let start = Instant::now();
    compile_and_check(&c, 42);
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "a slow Redis costs at most its timeouts: {:?}",
        start.elapsed()
    );
    proxy.set(Mode::Drop);
    std::thread::sleep(Duration::from_millis(1100));
    compile_and_check(&c, 43);
    let s = stats(&c);
    assert_eq!(s.compiles, 3, "{s:?}");
    assert!(s.redis_errors >= 2, "{s:?}");
    proxy.set(Mode::Pass);
    // As after a restart: a few skip windows to find the server again.
    for n in 44..49 {
        if stats(&c).redis_stores >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1100));
        compile_and_check(&c, n);
    }
    assert!(
        stats(&c).redis_stores >= 2,
        "back to storing once the proxy passes bytes: {:?}",
        stats(&c)
    );
}

fn oversized_entries_are_not_stored_and_read_only_clients_never_write(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let mut small = config(&server.url());
    small.max_value_bytes = 64;
    let c = client(small);
    compile_and_check(&c, 51);
    let s = stats(&c);
    assert_eq!((s.redis_stores, s.redis_too_large), (0, 1), "{s:?}");
    assert!(entry_keys(&server).is_empty());

    let mut ro = config(&server.url());
    ro.read_only = true;
    let reader = client(ro.clone());
    compile_and_check(&reader, 52);
    let mut conn = server.connection().unwrap();
    assert!(
        entry_keys(&server).is_empty()
            && conn
                .keys::<_, Vec<String>>("test:lease:*")
                .unwrap()
                .is_empty(),
        "a read-only client wrote"
    );
    compile_and_check(&client(config(&server.url())), 52);
    let reader = client(ro);
    compile_and_check(&reader, 52);
    let s = stats(&reader);
    assert_eq!(
        (s.redis_hits, s.compiles),
        (1, 0),
        "a read-only client reads: {s:?}"
    );
}

fn a_stale_holder_never_overwrites_a_newer_entry(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    compile_and_check(&client(config(&server.url())), 61);
    let key = entry_keys(&server).remove(0);
    let good: Vec<u8> = server.connection().unwrap().get(&key).unwrap();
    let tier = pjrt_actors::RedisTier::new(config(&server.url()), Arc::default()).unwrap();
    let hex = key.rsplit(':').next().unwrap().trim_matches(['{', '}']);
    let cache_key = pjrt_actors_core::compile::cache::CompileKey(hex_bytes(hex));
    tier.publish(&cache_key, b"a stale holder's late entry", None);
    let now: Vec<u8> = server.connection().unwrap().get(&key).unwrap();
    assert_eq!(now, good);
    assert_eq!(tier.usage().unwrap().0, 1);
    assert_eq!(tier.clear().unwrap(), 1);
    assert!(entry_keys(&server).is_empty());
}

fn hex_bytes(hex: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn the_tier_can_be_dropped_inside_another_runtime(kind: Kind) {
    // The last handle may go on an actor's thread, inside its runtime: dropping the tier's own
    // runtime there must not panic (a blocking runtime drop would).
    let server = FleetRedis::start(kind, &[]);
    let tier = pjrt_actors::RedisTier::new(config(&server.url()), Arc::default()).unwrap();
    assert_eq!(tier.usage().unwrap(), (0, 0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move { drop(tier) });
}

fn a_lease_without_an_expiry_or_past_any_we_grant_is_taken_over_at_once(kind: Kind) {
    // A foreign value with no TTL held every compile of the module, in every process, for the
    // whole max_wait (60 s), for good (issue 22, C10).
    let server = FleetRedis::start(kind, &[]);
    let c = client(config(&server.url()));
    compile_and_check(&c, 13);
    let lease = entry_keys(&server)[0].replace(":exe:", ":lease:");
    for (what, expiry) in [("no expiry", None), ("a day", Some(86_400_000u64))] {
        let mut conn = server.connection().unwrap();
        let _: () = conn.del(entry_keys(&server)).unwrap();
        let mut set = redis::cmd("SET");
        set.arg(&lease).arg("not-a-lease-of-ours");
        if let Some(ms) = expiry {
            set.arg("PX").arg(ms);
        }
        let _: () = set.query(&mut conn).unwrap();
        let fresh = client(config(&server.url()));
        let start = Instant::now();
        compile_and_check(&fresh, 13);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "{what}: waited {took:?}");
        let s = stats(&fresh);
        assert_eq!(
            (s.redis_takeovers, s.compiles, s.redis_stores),
            (1, 1, 1),
            "{what}: {s:?}"
        );
        // Ours now, and released once stored.
        let left: Option<String> = conn.get(&lease).unwrap();
        assert_eq!(left, None, "{what}");
    }
    // A live holder's lease, within what we grant, is still waited for (not stolen).
    let _: () = server
        .connection()
        .unwrap()
        .del(entry_keys(&server))
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&lease)
        .arg("live-holder")
        .arg("PX")
        .arg(60_000)
        .query(&mut server.connection().unwrap())
        .unwrap();
    let mut cfg = config(&server.url());
    cfg.max_wait = Duration::from_millis(800);
    let waiting = client(cfg);
    compile_and_check(&waiting, 13);
    let s = stats(&waiting);
    assert_eq!((s.redis_lease_waits, s.redis_takeovers), (1, 0), "{s:?}");
}

#[test]
fn a_lease_longer_than_any_we_grant_or_a_namespace_with_braces_is_refused_in_the_config() {
    let mut cfg = config("redis://127.0.0.1:1");
    cfg.lease = Duration::from_secs(3600);
    let err = Client::builder()
        .compile_cache_redis_config(cfg)
        .open()
        .map(|_| ())
        .unwrap_err();
    assert!(
        err.to_string().contains("a lease lasts from 30 ms"),
        "{err}"
    );
    // A brace in the namespace would move the keys' hash tag (an entry and its lease could
    // land on different cluster slots).
    let mut cfg = config("redis://127.0.0.1:1");
    cfg.namespace = "fleet{a}".into();
    let err = Client::builder()
        .compile_cache_redis_config(cfg)
        .open()
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("no braces"), "{err}");
}
