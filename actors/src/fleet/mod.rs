//! What many processes share through Redis: where a Redis is and how to reach it (`target`:
//! one server or a cluster, its credentials and TLS), and the key-value store that makes
//! several processes one client (`kv_store`).

pub mod kv_store;
pub mod target;
