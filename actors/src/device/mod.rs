//! A device and its memory spaces: the device actor, which orders async work on its device
//! (`actor`, with its queue policy in `queue`), and the memory-space actor, which orders
//! uploads and copies into one memory space (`memory_space`).

pub mod actor;
pub mod memory_space;
pub(crate) mod queue;
