//! Waiters on another process's compile are woken when the entry lands or the lease is
//! released (a pattern subscription on `{namespace}:wake:*`), not at their next poll: against a
//! real `redis-server` and a cluster, with the tier driven directly so the holder's timing is
//! the test's; an ACL user woken through its channels, and one without them polling.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pjrt_actors::{RedisCacheConfig, RedisTier};
use pjrt_actors_core::compile::cache::{CacheStats, CompileKey};
use pjrt_actors_core::compile::redis_cache::Lookup;

use crate::common::redis_cluster::{FleetRedis, Kind};

crate::on_one_and_cluster!(
    waiters_are_woken_when_the_entry_lands,
    a_released_lease_wakes_its_waiters_to_take_it,
    an_acl_user_with_the_channels_is_woken_and_one_without_polls,
);

/// How long the holder holds: off the waiters' poll times (while woken they poll 50, 100, 200,
/// 250, 250 ms apart: at 600 ms, then 850), so a polled waiter finds the store 150 ms late.
const HOLD: Duration = Duration::from_millis(700);
/// A waiter this soon after the store was woken, not polled (the margin is for a loaded
/// machine: under a parallel build, 40 ms was once too little).
const WOKEN_WITHIN: Duration = Duration::from_millis(100);

fn tier(url: &str, stats: Arc<CacheStats>) -> Arc<RedisTier> {
    let mut config = RedisCacheConfig::new(url);
    config.namespace = "wake".into();
    RedisTier::new(config, stats).unwrap()
}

/// Four waiters, a holder that stores after `hold`: each waiter's time from the store to its
/// hit, and the waiters' wake-up count.
fn waiters_after(
    url: &str,
    key: &CompileKey,
    hold: Duration,
    release_only: bool,
) -> (Vec<Duration>, u64) {
    let holder = tier(url, Arc::default());
    let Lookup::Lease(lease) = holder.lookup(key) else {
        panic!("the first lookup takes the lease")
    };
    let stats = Arc::new(CacheStats::default());
    let waiters: Vec<Arc<RedisTier>> = (0..4).map(|_| tier(url, stats.clone())).collect();
    let stored_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let delays = std::thread::scope(|s| {
        let handles: Vec<_> = (waiters.iter())
            .map(|w| {
                s.spawn(|| {
                    // The outcome is dropped here: a lease taken is released at once, waking
                    // the next waiter, as a holder that compiled and stored would.
                    let outcome = match w.lookup(key) {
                        Lookup::Hit(bytes) => Ok(bytes),
                        Lookup::Lease(_) => Err("lease"),
                        Lookup::Compile => Err("compile"),
                    };
                    (outcome, Instant::now())
                })
            })
            .collect();
        std::thread::sleep(hold);
        *stored_at.lock().unwrap() = Some(Instant::now());
        match release_only {
            true => drop(lease),
            false => holder.publish(key, b"an entry", Some(lease)),
        }
        (handles.into_iter())
            .map(|h| {
                let (outcome, at) = h.join().unwrap();
                match (&outcome, release_only) {
                    (Ok(bytes), false) => assert_eq!(bytes, b"an entry"),
                    (Err("lease"), true) => {}
                    other => panic!("release_only {release_only}: {other:?}"),
                }
                at.saturating_duration_since(stored_at.lock().unwrap().unwrap())
            })
            .collect::<Vec<_>>()
    });
    let woken = stats
        .redis_wakeups
        .load(std::sync::atomic::Ordering::Relaxed);
    (delays, woken)
}

fn waiters_are_woken_when_the_entry_lands(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let key = CompileKey::new("wake-test", b"entry", b"");
    let (delays, woken) = waiters_after(&server.url(), &key, HOLD, false);
    // Each waiter was asleep in a fallback poll when the entry landed: woken instead.
    assert!(woken >= 4, "{woken} wake-ups");
    for d in &delays {
        assert!(*d < WOKEN_WITHIN, "a hit {d:?} after the store: {delays:?}");
    }
}

fn a_released_lease_wakes_its_waiters_to_take_it(kind: Kind) {
    let server = FleetRedis::start(kind, &[]);
    let key = CompileKey::new("wake-test", b"release", b"");
    let (delays, woken) = waiters_after(&server.url(), &key, HOLD, true);
    assert!(woken >= 1, "{woken} wake-ups");
    // One waiter takes the lease at once; the others wait on it (and time out their lookups
    // only by max_wait, which is not reached here: the test's lease holder drops at the end).
    assert!(delays.iter().any(|d| *d < WOKEN_WITHIN), "{delays:?}");
}

fn an_acl_user_with_the_channels_is_woken_and_one_without_polls(kind: Kind) {
    // Two users of the namespace's keys: `woken` may also use its wake-up channels, `polls` may
    // not (Redis 7 gives a new user no channels). A PSUBSCRIBE passes only a channel pattern
    // that is the very pattern subscribed (`&wake:*` does not let `wake:wake:*` through).
    let with_channels = [
        "--user",
        "woken",
        "on",
        ">pw",
        "~wake:*",
        "&wake:wake:*",
        "+@all",
    ];
    let without = ["--user", "polls", "on", ">pw", "~wake:*", "+@all"];
    let server = FleetRedis::start(kind, &[&with_channels[..], &without[..]].concat());
    let key = CompileKey::new("wake-test", b"acl", b"");
    let (delays, woken) = waiters_after(&server.url_as("woken:pw"), &key, HOLD, false);
    assert!(woken >= 4, "{woken} wake-ups");
    assert!(delays.iter().all(|d| *d < WOKEN_WITHIN), "{delays:?}");
    // Without the channels the subscription is refused: every waiter still finds the entry,
    // by its poll, and none is woken.
    let key = CompileKey::new("wake-test", b"acl-polled", b"");
    let (delays, woken) = waiters_after(&server.url_as("polls:pw"), &key, HOLD, false);
    assert_eq!((woken, delays.len()), (0, 4), "{delays:?}");
}
