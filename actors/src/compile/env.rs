//! What a compile worker needs beyond the program: the plugin's identity, the topology, the
//! disk and Redis tiers and the counters; and serializing an executable into a cache entry.

use std::sync::Arc;

use crate::compile::cache::{CacheStats, CompileKey};
use crate::compile::disk_cache::DiskCache;
use crate::compile::envelope::{self, Envelope};

/// What a compile worker needs to know beyond the program.
#[derive(Clone)]
pub struct CompileEnv {
    pub identity: String,
    /// The client's serialized topology, recorded in serialized executables.
    pub topology: Arc<Vec<u8>>,
    pub disk: Option<Arc<DiskCache>>,
    pub redis: Option<Arc<crate::compile::redis_cache::RedisTier>>,
    pub stats: Arc<CacheStats>,
}

/// Wraps the plugin's bytes for an executable (`ExecutableMeta::plugin_bytes`: what the
/// compiler produced, never a re-serialization of a loaded copy) in our envelope, under the
/// cache key it is stored as.
pub fn serialize(
    payload: &[u8],
    portable: bool,
    options: &[u8],
    key: &CompileKey,
    env: &CompileEnv,
) -> Vec<u8> {
    envelope::encode(&Envelope {
        identity: env.identity.clone(),
        portable,
        options: options.to_vec(),
        topology: env.topology.to_vec(),
        payload: payload.to_vec(),
        cache_key: key.0.to_vec(),
    })
}
