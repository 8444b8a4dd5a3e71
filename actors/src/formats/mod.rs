//! Readers of what programs and artifacts say, as plain data: they need neither PJRT nor the
//! actors (`tidy::the_format_readers_need_neither_pjrt_nor_the_actors` holds them to it), so
//! each can be tested and fuzzed alone. JAX's serialized `Exported` (`exported`, over the
//! bounds-checked `flatbuf` reader, checked by `exported_check`) and its pytrees (`pytree`);
//! MLIR bytecode (`mlir_bytecode`) and what a program says of its partitioning (`spmd`);
//! shardings (`sharding`) and shard blocks (`shard_blocks`); HLO text (`hlo_text`).

pub mod exported;
mod exported_check;
pub(crate) mod flatbuf;
pub mod hlo_text;
pub(crate) mod mlir_bytecode;
pub(crate) mod mlir_bytecode_ops;
pub mod mlir_text_ops;
pub(crate) mod pytree;
pub mod shard_blocks;
pub mod sharding;
pub mod spmd;
