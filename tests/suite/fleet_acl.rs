//! The compile cache's Redis tier and the key-value store logging in as an ACL user (name and
//! password in the URL) to a real `redis-server` whose user may touch only the tier's
//! namespace: the fleet shares compiles through it; a namespace outside the user's keys, or a
//! wrong password, is refused by the server, typed (`KvError::Unavailable` naming NoPerm or
//! AuthenticationFailed, counted as `redis_errors` by the tier), and compiles go on locally.

use std::time::Duration;

use pjrt_actors::{Client, KvError, KvStore, RedisKvStore};
use redis::Commands;

use crate::common::fleet::{self, compile_and_check as compile};
use crate::common::redis_cluster::{FleetRedis, Kind};

crate::on_one_and_cluster!(
    an_acl_user_shares_compiles_within_its_namespace,
    keys_outside_the_users_namespace_are_refused_typed_and_compiles_go_on,
    a_wrong_password_is_refused_typed_and_compiles_go_on,
);

/// A server with the user `fleet` (password `s3cret`), allowed every command on keys under
/// `ns:` only; the default user stays open for the test's own inspection.
fn server(kind: Kind) -> FleetRedis {
    FleetRedis::start(
        kind,
        &["--user", "fleet", "on", ">s3cret", "~ns:*", "+@all"],
    )
}

fn url(server: &FleetRedis, password: &str) -> String {
    server.url_as(&format!("fleet:{password}"))
}

fn client(url: &str, namespace: &str) -> Client {
    fleet::client(fleet::config(url, namespace, Duration::from_millis(500)))
}

fn an_acl_user_shares_compiles_within_its_namespace(kind: Kind) {
    let server = server(kind);
    let url = url(&server, "s3cret");
    let a = client(&url, "ns");
    compile(&a, 1);
    let s = a.compile_cache_stats();
    assert_eq!(
        (s.compiles, s.redis_stores, s.redis_errors),
        (1, 1, 0),
        "{s:?}"
    );
    let b = client(&url, "ns");
    compile(&b, 1);
    let s = b.compile_cache_stats();
    assert_eq!(
        (s.compiles, s.redis_hits, s.redis_errors),
        (0, 1, 0),
        "{s:?}"
    );
    let keys: Vec<String> = server.connection().unwrap().keys("ns:exe:*").unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    // The key-value store under the same user and namespace.
    let kv = RedisKvStore::new(&url, "ns").unwrap();
    kv.put("rank0", b"address").unwrap();
    assert_eq!(kv.try_get("rank0").unwrap(), b"address");
}

fn keys_outside_the_users_namespace_are_refused_typed_and_compiles_go_on(kind: Kind) {
    let server = server(kind);
    let url = url(&server, "s3cret");
    let outside = client(&url, "other");
    compile(&outside, 2);
    let s = outside.compile_cache_stats();
    assert_eq!(
        (s.compiles, s.redis_stores, s.redis_hits),
        (1, 0, 0),
        "{s:?}"
    );
    assert!(s.redis_errors >= 1, "{s:?}");
    let keys: Vec<String> = server.connection().unwrap().keys("other:*").unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    let kv = RedisKvStore::new(&url, "other").unwrap();
    match kv.put("rank0", b"address") {
        Err(KvError::Unavailable(why)) => {
            assert!(why.to_lowercase().contains("noperm"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

fn a_wrong_password_is_refused_typed_and_compiles_go_on(kind: Kind) {
    let server = server(kind);
    let url = url(&server, "wrong");
    let c = client(&url, "ns");
    compile(&c, 3);
    let s = c.compile_cache_stats();
    assert_eq!((s.compiles, s.redis_stores), (1, 0), "{s:?}");
    assert!(s.redis_errors >= 1, "{s:?}");
    let kv = RedisKvStore::new(&url, "ns").unwrap();
    match kv.put("rank0", b"address") {
        Err(KvError::Unavailable(why)) => {
            assert!(why.contains("AuthenticationFailed"), "{why}");
            assert!(
                !why.contains("wrong@"),
                "the password is not repeated: {why}"
            );
        }
        other => panic!("{other:?}"),
    }
}
