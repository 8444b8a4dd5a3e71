//! `pjrt-actors cache stats` and `cache clear`: the persistent compile cache's disk directory
//! and Redis tier, named by flags or by the same environment variables clients read; stats
//! count signed entries and, with the fleet's keys, those they verify.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Subcommand;
use pjrt_actors::{
    CACHE_DIR_ENV, CACHE_REDIS_ENV, CacheKeys, DiskCache, RedisCacheConfig, RedisTier, Result,
    SignatureCount,
};

use crate::common::usage;

#[derive(Subcommand)]
pub enum CacheAction {
    /// Entries and bytes in each tier.
    Stats,
    /// Remove every entry (and, in Redis, every lease) from each tier.
    Clear,
}

/// The tiers the flags or the environment name.
fn tiers(
    dir: Option<PathBuf>,
    redis: Option<String>,
    namespace: &str,
) -> Result<(Option<DiskCache>, Option<Arc<RedisTier>>)> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let dir = dir.or_else(|| env(CACHE_DIR_ENV).map(PathBuf::from));
    let redis = redis.or_else(|| env(CACHE_REDIS_ENV));
    if dir.is_none() && redis.is_none() {
        return Err(usage(format!(
            "no cache tier named: give --dir or --redis, or set {CACHE_DIR_ENV} or {CACHE_REDIS_ENV}"
        )));
    }
    let disk = match dir {
        // Stats and clear read what is there; they never create a directory.
        Some(d) => Some(DiskCache::open_existing(&d)?),
        None => None,
    };
    let redis = match redis {
        Some(url) => {
            let mut config = RedisCacheConfig::new(url);
            config.namespace = namespace.to_string();
            Some(RedisTier::new(config, Arc::default())?)
        }
        None => None,
    };
    Ok((disk, redis))
}

pub fn cache(
    action: &CacheAction,
    dir: Option<PathBuf>,
    redis: Option<String>,
    namespace: &str,
) -> Result<()> {
    let (disk, redis) = tiers(dir, redis, namespace)?;
    match action {
        CacheAction::Stats => {
            // With the fleet's keys (PJRT_ACTORS_CACHE_KEY_FILE), how many entries they verify:
            // what a keyed client would load rather than refuse.
            let keys = CacheKeys::from_env()?;
            let signed = |count: SignatureCount| match &keys {
                Some(_) => format!(
                    ", {} signed, {} verified by the fleet's keys",
                    count.signed, count.verified
                ),
                None => format!(", {} signed", count.signed),
            };
            if let Some(disk) = &disk {
                let (entries, bytes) = disk.usage();
                let count = disk.signatures(keys.as_ref());
                out!("disk: {entries} entries, {bytes} bytes{}", signed(count));
            }
            if let Some(redis) = &redis {
                let (entries, bytes) = redis.usage()?;
                let count = redis.signatures(keys.as_ref())?;
                out!(
                    "redis ({}): {entries} entries, {bytes} bytes{}",
                    redis.config().namespace,
                    signed(count)
                );
            }
        }
        CacheAction::Clear => {
            if let Some(disk) = &disk {
                out!("disk: {} entries removed", disk.clear());
            }
            if let Some(redis) = &redis {
                out!(
                    "redis ({}): {} keys removed",
                    redis.config().namespace,
                    redis.clear()?
                );
            }
        }
    }
    Ok(())
}
