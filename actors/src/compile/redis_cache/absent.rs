//! The Redis tier in a build without the `redis` feature: types with no values, so a client
//! asked for a Redis tier refuses at open (`Error::Unsupported`) and no code path can reach one.

use std::sync::Arc;

use super::{Lookup, RedisCacheConfig};
use crate::compile::cache::{CacheStats, CompileKey};
use crate::compile::signing::{CacheKeys, SignatureCount};
use crate::error::{Error, Result};

/// The Redis tier: none exists in this build.
pub enum RedisTier {}

/// A held lease: none exists in this build.
pub enum Lease {}

impl RedisTier {
    /// `Error::Unsupported`: this build has no Redis client (the `redis` feature is off).
    pub fn new(_config: RedisCacheConfig, _stats: Arc<CacheStats>) -> Result<Arc<RedisTier>> {
        Err(Error::Unsupported {
            what: "a Redis compile cache tier",
            hint: "this build of pjrt-actors leaves out the `redis` feature".into(),
        })
    }

    pub fn config(&self) -> &RedisCacheConfig {
        match *self {}
    }

    pub fn lookup(self: &Arc<Self>, _key: &CompileKey) -> Lookup {
        match **self {}
    }

    pub fn publish(&self, _key: &CompileKey, _bytes: &[u8], _lease: Option<Lease>) {
        match *self {}
    }

    pub fn remove(&self, _key: &CompileKey) {
        match *self {}
    }

    pub fn usage(&self) -> Result<(u64, u64)> {
        match *self {}
    }

    pub fn clear(&self) -> Result<u64> {
        match *self {}
    }

    pub fn signatures(&self, _keys: Option<&CacheKeys>) -> Result<SignatureCount> {
        match *self {}
    }
}
