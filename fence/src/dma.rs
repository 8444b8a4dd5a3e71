//! DMA mappings of host memory (`PJRT_Client_DmaMap`, 0.81): pinned staging that uploads read
//! from (zero-copy) and read-backs write into. The mapping lives in the memory's own release
//! hook, so it is unmapped when the last holder (the mapping, or an array aliasing it) goes.

use std::ffi::c_void;
use std::ptr::null_mut;

use super::abi;
use super::client::PjrtClient;
use crate::error::{Error, Result};
use crate::native::SharedBytes;

/// Host memory mapped for DMA. Holds the memory; it stays mapped while this or any array that
/// aliases it (a zero-copy upload from [`bytes`](Self::bytes)) lives.
pub struct DmaMapping {
    memory: SharedBytes,
}

impl std::fmt::Debug for DmaMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DmaMapping({} bytes)", self.memory.len())
    }
}

impl PjrtClient {
    /// Maps `memory` for DMA (`PJRT_Client_DmaMap`, 0.81). It must have no other holder, so
    /// nothing else can free or write it behind the mapping.
    pub fn dma_map(&self, memory: SharedBytes) -> Result<DmaMapping> {
        if memory.is_empty() || memory.holders() != 1 {
            return Err(Error::InvalidArgument(format!(
                "DMA mapping needs memory of at least one byte that nothing else holds (got {} bytes, {} holders)",
                memory.len(),
                memory.holders()
            )));
        }
        let plugin = self.plugin();
        let f = if plugin.has_slot(std::mem::offset_of!(abi::Api, PJRT_Client_DmaMap)) {
            plugin.api().PJRT_Client_DmaMap
        } else {
            None
        };
        let mut a = abi::Client_DmaMap_Args {
            struct_size: size_of::<abi::Client_DmaMap_Args>(),
            extension_start: null_mut(),
            client: self.raw(),
            // The plugin pins the pages; it does not write through the pointer.
            data: memory.as_ptr() as *mut c_void,
            size: memory.len(),
        };
        // SAFETY: `PJRT_Client_DmaMap` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        match unsafe { plugin.call("PJRT_Client_DmaMap", f, &mut a) } {
            Ok(()) => {}
            Err(e) if e.pjrt_code() == Some(crate::PjrtCode::Unimplemented) || f.is_none() => {
                return Err(Error::Unsupported {
                    what: "DMA mapping",
                    hint: format!(" ({e})"),
                });
            }
            Err(e) => return Err(e),
        }
        let client = self.clone();
        let release = Box::new(move |bytes: &[u8]| match unmap(&client, bytes) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "DMA unmap failed; the memory is leaked, not freed while mapped");
                false
            }
        });
        let memory = memory.on_release(release).unwrap_or_else(|_| {
            unreachable!("checked unshared above, and nothing cloned it since")
        });
        Ok(DmaMapping { memory })
    }
}

impl DmaMapping {
    /// The mapped memory, shared: a zero-copy upload source (`HostBuffer::ZeroCopy`). Each
    /// clone keeps the memory mapped.
    pub fn bytes(&self) -> SharedBytes {
        self.memory.clone()
    }

    /// The mapped memory.
    pub fn memory(&self) -> &[u8] {
        &self.memory
    }

    /// The mapped memory to write (fill it before an upload, or read an array back into it),
    /// while nothing else holds it; an error names how many arrays still alias it.
    pub fn memory_mut(&mut self) -> Result<&mut [u8]> {
        let holders = self.memory.holders();
        self.memory.get_mut().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "the DMA-mapped memory is still aliased by {} array(s); drop them to write it",
                holders - 1
            ))
        })
    }

    /// Unmaps now and hands the memory back; refused while arrays alias it (it is then unmapped
    /// when the last of them goes).
    pub fn unmap(self) -> Result<SharedBytes> {
        let mut memory = self.memory;
        match memory.release_now() {
            Some(true) => Ok(memory),
            Some(false) => {
                // Still mapped: never freed.
                std::mem::forget(memory);
                Err(Error::InvalidArgument(
                    "the plugin refused to unmap the memory; it stays mapped and is leaked".into(),
                ))
            }
            None => Err(Error::InvalidArgument(format!(
                "the DMA-mapped memory is still aliased by {} array(s); it is unmapped when the last goes",
                memory.holders() - 1
            ))),
        }
    }
}

fn unmap(client: &PjrtClient, memory: &[u8]) -> Result<()> {
    let plugin = client.plugin();
    let mut a = abi::Client_DmaUnmap_Args {
        struct_size: size_of::<abi::Client_DmaUnmap_Args>(),
        extension_start: null_mut(),
        client: client.raw(),
        data: memory.as_ptr() as *mut c_void,
    };
    // SAFETY: `PJRT_Client_DmaUnmap` is called with an args struct of its own layout, filled in
    // above, whose pointers stay live across the call.
    unsafe {
        plugin.call(
            "PJRT_Client_DmaUnmap",
            plugin.api().PJRT_Client_DmaUnmap,
            &mut a,
        )
    }
}
