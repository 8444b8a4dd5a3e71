//! Readers of what programs and artifacts say, as plain data: they need neither PJRT nor the
//! actors (the crate depends on neither, and
//! `tidy::the_format_readers_need_neither_pjrt_nor_the_actors` holds it to that), so each can
//! be tested and fuzzed alone. XLA's protobuf messages (`protos`) and element types (`dtype`)
//! are here too, the one copy the fence and the runtime use. JAX's serialized `Exported` (`exported`, over the
//! bounds-checked `flatbuf` reader, checked by `exported_check`) and its pytrees (`pytree`);
//! MLIR bytecode (`mlir_bytecode`) and what a program says of its partitioning (`spmd`);
//! shardings (`sharding`) and shard blocks (`shard_blocks`); HLO text (`hlo_text`).

#![forbid(unsafe_code)]

pub mod dtype;
mod error;
pub mod exported;
mod exported_check;
pub mod flatbuf;
pub mod hlo_text;
pub mod mlir_bytecode;
pub mod mlir_bytecode_ops;
pub mod mlir_text_ops;
pub mod program_ops;
pub mod pytree;
pub mod shard_blocks;
pub mod sharding;
pub mod spmd;

pub use error::{Error, Result};

/// XLA's protobuf messages, generated from proto/ by prost-build (as `pjrt_sys::protos`).
#[allow(clippy::all, missing_docs)]
pub mod protos {
    include!(concat!(env!("OUT_DIR"), "/protos.rs"));
}
