//! What a compile worker needs beyond the program: the plugin's identity, the topology, the
//! disk and Redis tiers, the counters and the fleet's keys; and serializing an executable into
//! a (signed) cache entry, and checking one's signature.

use std::sync::Arc;

use crate::compile::cache::{CacheStats, CompileKey, bump};
use crate::compile::disk_cache::DiskCache;
use crate::compile::envelope::{self, Envelope};
use crate::compile::signing::{self, CacheKeys};

/// What a compile worker needs to know beyond the program.
#[derive(Clone)]
pub struct CompileEnv {
    pub identity: String,
    /// The client's serialized topology, recorded in serialized executables.
    pub topology: Arc<Vec<u8>>,
    pub disk: Option<Arc<DiskCache>>,
    pub redis: Option<Arc<crate::compile::redis_cache::RedisTier>>,
    pub stats: Arc<CacheStats>,
    /// The fleet's keys: entries are signed with the first and loaded only when one verifies.
    pub keys: Option<Arc<CacheKeys>>,
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
    let envelope = envelope::encode(&Envelope {
        identity: env.identity.clone(),
        portable,
        options: options.to_vec(),
        topology: env.topology.to_vec(),
        payload: payload.to_vec(),
        cache_key: key.0.to_vec(),
    });
    match &env.keys {
        Some(keys) => keys.sign(&envelope),
        None => envelope,
    }
}

/// The envelope of a cache entry read from `tier`, when the fleet's keys vouch for it (any
/// entry, without keys). A refusal is logged with its key and counted; the caller removes the
/// entry and compiles.
pub fn vouched<'a>(
    entry: &'a [u8],
    key: &CompileKey,
    tier: &str,
    env: &CompileEnv,
) -> Option<&'a [u8]> {
    let Some(keys) = &env.keys else {
        return Some(signing::unverified(entry));
    };
    match keys.open(entry) {
        Ok(envelope) => Some(envelope),
        Err(why) => {
            tracing::warn!(key = %key.hex(), tier, %why, "refusing a compile-cache entry the fleet's keys do not vouch for; compiling locally");
            bump(&env.stats.unsigned_entries);
            None
        }
    }
}
