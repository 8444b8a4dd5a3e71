//! The integration suite against the real CPU plugin, in one binary so it links once; the GPU
//! check runs it on a GPU plugin too, so tests that need the CPU plugin live in `mod cpu_plugin`
//! blocks (checked by `tidy`). Tests that change or measure the whole process (thread counts,
//! the environment, resident memory) live in binaries of their own: `shutdown.rs`,
//! `plugin_env.rs`, `soak.rs`.

mod ahead_of_time;
mod allocator;
mod cache_matrix;
mod callbacks;
mod common;
mod compile_stress;
mod defragment_load;
mod device_queue;
mod device_work;
mod disk_cache;
mod dma;
mod donation;
mod examples;
mod executables;
mod execute;
mod export_corpus;
mod exported;
mod fleet_acl;
mod fleet_cache;
mod fleet_cluster;
mod fleet_wake;
mod foundation;
mod generate;
mod generate_prefix;
mod invalid_inputs;
mod isolation;
mod jax_lapack;
mod jax_outputs;
mod jax_parity;
mod known_defects;
mod kv_store;
mod lapack_guards;
mod memory;
mod memory_budget;
mod no_deadlock;
mod plugin_loading;
mod red_team;
mod reliability;
mod serving;
mod serving_bounds;
mod serving_export;
mod serving_groups;
mod serving_latency;
mod signed_cache;
mod spmd;
mod spmd_shard_map;
mod stress;
mod tidy;
mod worker_bounds;
