//! The compile cache's Redis tier, behind memory and disk: entries shared by every process and
//! machine on one Redis (a server or a cluster), and single flight across them by a lease
//! (`SET NX PX`, renewed while the holder compiles). Redis failing in any way means compiling
//! locally, never an error.

use std::time::Duration;

/// The environment variable naming the Redis URL (`redis://` or `rediss://`, user and
/// password in the URL; `redis+cluster://HOST:PORT,HOST:PORT` for a cluster's seed nodes).
pub const CACHE_REDIS_ENV: &str = "PJRT_ACTORS_CACHE_REDIS";
/// Set to `1` for a read-only tier: fetch entries, never write them or take leases.
pub const CACHE_REDIS_READ_ONLY_ENV: &str = "PJRT_ACTORS_CACHE_REDIS_READ_ONLY";
/// The compile lease in milliseconds (default 3000; at least 30).
pub const CACHE_REDIS_LEASE_MS_ENV: &str = "PJRT_ACTORS_CACHE_REDIS_LEASE_MS";

/// How the Redis tier behaves.
#[derive(Debug, Clone)]
pub struct RedisCacheConfig {
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS; a cluster as
    /// `redis+cluster://[user:password@]host:port[,host:port…]` (seed nodes; `rediss+cluster://`
    /// with TLS).
    pub url: String,
    /// Prefix of every key (`NS:exe:{sha256}`, `NS:lease:{sha256}`, channels `NS:wake:{sha256}`:
    /// the hash a hash tag, so one compile's keys share a cluster slot); no braces in it.
    pub namespace: String,
    /// How long a compile lease lasts without renewal (renewed every third of it).
    pub lease: Duration,
    /// Longest a process waits for another's compile before compiling itself.
    pub max_wait: Duration,
    /// Entries larger than this are neither stored nor loaded.
    pub max_value_bytes: usize,
    /// Expiry of stored entries; `None`: only the server's eviction policy removes them.
    pub ttl: Option<Duration>,
    /// Fetch only: never store, never lease (for workers that must not write the cache).
    pub read_only: bool,
    /// Limit on any one Redis round trip (and on connecting).
    pub op_timeout: Duration,
    /// Wake waiters by pub/sub (`{namespace}:wake:*`) when an entry lands or a lease is
    /// released; without, they only poll (2 ms doubling to 50 ms).
    pub wake_ups: bool,
}

impl RedisCacheConfig {
    /// The defaults for `url`: namespace `pjrt-actors`, a 3 s lease, 60 s longest wait, 256 MiB
    /// entries, a 7-day TTL, 1 s per round trip, wake-ups on.
    pub fn new(url: impl Into<String>) -> Self {
        RedisCacheConfig {
            url: url.into(),
            namespace: "pjrt-actors".into(),
            lease: Duration::from_secs(3),
            max_wait: Duration::from_secs(60),
            max_value_bytes: 256 << 20,
            ttl: Some(Duration::from_secs(7 * 24 * 3600)),
            read_only: false,
            op_timeout: Duration::from_secs(1),
            wake_ups: true,
        }
    }
}

/// What a lookup decided.
pub enum Lookup {
    /// An entry to check and load.
    Hit(Vec<u8>),
    /// This process holds the lease: compile, then `publish`.
    Lease(Lease),
    /// Compile here without a lease (Redis unavailable, read-only, or waited out).
    Compile,
}

/// The longest lease any process grants (`RedisCacheConfig::lease` is held to it): a lease
/// key without an expiry, or with more left than this, was never ours and is taken over.
pub const MAX_LEASE: Duration = Duration::from_secs(600);

#[cfg(feature = "redis")]
mod keys;
#[cfg(feature = "redis")]
mod skip;
#[cfg(feature = "redis")]
mod tier;
#[cfg(feature = "redis")]
mod wake;
#[cfg(feature = "redis")]
pub use tier::{Lease, RedisTier};
#[cfg(not(feature = "redis"))]
mod absent;
#[cfg(not(feature = "redis"))]
pub use absent::{Lease, RedisTier};

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scripts/test` runs this one in a build without the feature.
    #[cfg(not(feature = "redis"))]
    #[test]
    fn without_the_redis_feature_a_tier_is_refused() {
        let config = RedisCacheConfig::new("redis://127.0.0.1:1");
        match RedisTier::new(config, std::sync::Arc::default()) {
            Err(crate::error::Error::Unsupported { what, hint }) => {
                assert!(what.contains("Redis") && hint.contains("`redis` feature"));
            }
            Err(other) => panic!("expected Unsupported, got {other}"),
            Ok(_) => panic!("a tier exists without the feature"),
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        let cases = [
            ("redis://localhost:6379", "redis://localhost:6379"),
            ("redis://user:secret@cache:6379/2", "redis://…@cache:6379/2"),
            ("rediss://:secret@cache", "rediss://…@cache"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown);
        }
    }
}
