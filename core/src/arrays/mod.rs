//! Arrays: the buffer slots and array cores the registry holds (`buffers`), the host array
//! (`host_array`), what each memory space holds against its budget (`memory_account`), where
//! each array was made (`site`) and heap profiles of them all (`heap_profile`).

pub mod buffers;
pub mod heap_profile;
pub mod host_array;
pub(crate) mod memory_account;
pub mod site;
