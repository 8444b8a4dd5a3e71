//! Arrays: the buffer-registry actor, which runs whole-registry work (heap profiles,
//! defragment, deletes) one request at a time (`registry`), the buffer slots and array cores it
//! holds (`buffers`), the host array (`host_array`), what each memory space holds against its
//! budget (`memory_account`), where each array was made (`site`), heap profiles of them all
//! (`heap_profile`), and a donated buffer's way out of its slot (`donation`).

pub mod buffers;
pub mod donation;
pub mod heap_profile;
pub mod host_array;
pub(crate) mod memory_account;
pub mod registry;
pub mod site;
