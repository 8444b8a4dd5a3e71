//! The actors. The client actor routes the control plane (compile, load, async execute,
//! heap profile, defragment) to the actor that owns the work; each device and memory-space
//! actor orders the async work on its device or memory space; the buffer-registry actor runs
//! whole-registry work one request at a time; the compile service owns the compile queue and
//! the compiler actors compile. Each message carries the caller's `tracing` span.

pub mod client;
pub mod compile_service;
pub mod compiler;
pub mod device;
pub mod memory_space;
pub mod registry;
