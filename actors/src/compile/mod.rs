//! Compiling: the one compile flow every path takes (`flow`: options resolved, key, caches,
//! checks, permit, submit), the compile service, which owns the compile queue (`service`), and
//! the compiler actors, which compile, load and describe topologies (`compiler`); options
//! turned into what the plugin reads (`options`, `xla_options`), the checks a program gets
//! before the plugin parses it (`program_check`, `custom_call_layouts`), the
//! compile cache's tiers (`cache` in memory, `disk_cache`, `redis_cache` for fleets) and
//! single flight (`flight`), the fleet keys that sign its entries (`signing`), crash isolation (`worker`), what a job carries (`env`), serialized
//! executables (`envelope`) and topologies (`topology`).

pub mod cache;
pub mod compiler;
pub mod custom_call_layouts;
pub mod disk_cache;
pub(crate) mod env;
pub mod envelope;
pub(crate) mod flight;
pub mod flow;
pub mod known_defects;
mod options;
pub mod program_check;
pub mod redis_cache;
pub mod service;
pub mod signing;
pub(crate) mod topology;
pub mod worker;
pub(crate) mod xla_options;

pub use options::*;
