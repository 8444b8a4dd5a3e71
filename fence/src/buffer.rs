//! Owned PJRT buffers and events: upload with the three host-buffer semantics, readiness,
//! metadata, copies between devices and memories, and reading back to host memory.

use std::ptr::{null, null_mut};
use std::sync::Arc;

use pjrt_sys as sys;

use super::call::{args, call};
use super::client::{PjrtClient, PjrtDevice, PjrtMemory};
use crate::dtype::ElementType;
use crate::error::{Error, Result};

pub(crate) fn to_raw_type(t: ElementType) -> sys::PJRT_Buffer_Type {
    use ElementType::*;
    match t {
        Pred => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_PRED,
        S8 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_S8,
        S16 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_S16,
        S32 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_S32,
        S64 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_S64,
        U8 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_U8,
        U16 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_U16,
        U32 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_U32,
        U64 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_U64,
        F16 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F16,
        BF16 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_BF16,
        F32 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F32,
        F64 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F64,
        C64 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_C64,
        C128 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_C128,
        F8E5M2 => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F8E5M2,
        F8E4M3FN => sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F8E4M3FN,
    }
}

pub(crate) fn from_raw_type(t: sys::PJRT_Buffer_Type) -> Result<ElementType> {
    ElementType::ALL
        .into_iter()
        .find(|&e| to_raw_type(e) == t)
        .ok_or_else(|| Error::Unsupported {
            what: "this PJRT element type",
            hint: format!(" (PJRT_Buffer_Type {t})"),
        })
}

/// An owned PJRT event; destroyed on drop.
pub struct PjrtEvent {
    client: PjrtClient,
    raw: *mut sys::PJRT_Event,
}

// SAFETY: PJRT events are thread-safe handles; this one is destroyed once, in Drop.
unsafe impl Send for PjrtEvent {}

impl PjrtEvent {
    pub(crate) fn from_raw(client: PjrtClient, raw: *mut sys::PJRT_Event) -> Self {
        PjrtEvent { client, raw }
    }

    /// Blocks until the event fires; its error, if any, becomes ours.
    pub fn wait(self) -> Result<()> {
        let plugin = self.client.plugin();
        let mut a = args!(PJRT_Event_Await_Args { event: self.raw });
        call!(plugin, PJRT_Event_Await, &mut a)
    }

    /// Runs `then` once the event fires (on a plugin thread, or now if it already has), then
    /// destroys the event. Used to release host memory the plugin was reading.
    pub fn on_ready(self, then: Box<dyn FnOnce() + Send>) -> Result<()> {
        struct Pending {
            api: &'static super::abi::Api,
            then: Box<dyn FnOnce() + Send>,
        }
        unsafe extern "C" fn fire(error: *mut sys::PJRT_Error, user_arg: *mut std::ffi::c_void) {
            // SAFETY: `user_arg` is the `Box<Pending>` leaked below, handed back exactly once.
            let pending = unsafe { Box::from_raw(user_arg as *mut Pending) };
            if !error.is_null()
                && let Some(destroy) = pending.api.base.PJRT_Error_Destroy
            {
                let mut d = args!(PJRT_Error_Destroy_Args { error: error });
                // SAFETY: the callback owns `error` and destroys it once.
                unsafe { destroy(&mut d) };
            }
            // A panic must not unwind into the plugin.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(pending.then));
        }
        let plugin = self.client.plugin();
        let pending = Box::into_raw(Box::new(Pending {
            api: plugin.api(),
            then,
        }));
        let mut a = args!(PJRT_Event_OnReady_Args {
            event: self.raw,
            callback: Some(fire),
            user_arg: pending.cast(),
        });
        if let Err(e) = call!(plugin, PJRT_Event_OnReady, &mut a) {
            // The callback was not registered: run it here so nothing leaks.
            // SAFETY: the plugin did not take `pending`; we still own it.
            let pending = unsafe { Box::from_raw(pending) };
            (pending.then)();
            return Err(e);
        }
        Ok(())
    }
}

impl Drop for PjrtEvent {
    fn drop(&mut self) {
        let mut a = args!(PJRT_Event_Destroy_Args { event: self.raw });
        let _ = call!(self.client.plugin(), PJRT_Event_Destroy, &mut a);
    }
}

/// Host memory handed to an upload, and how long the plugin may read it (PJRT's host buffer
/// semantics). The lifetimes make misuse a compile error: a borrow is read during the call only;
/// anything the plugin reads later is owned and kept alive for as long as it is needed.
pub enum HostBuffer<'a> {
    /// Copied before the upload returns (`kImmutableOnlyDuringCall`).
    Copy(&'a [u8]),
    /// Read until the transfer completes; a clone of the `Arc` is kept until then
    /// (`kImmutableUntilTransferCompletes`).
    UntilTransferCompletes(Arc<[u8]>),
    /// Aliased for the buffer's whole life where the plugin can (the CPU plugin: `SharedBytes`
    /// are 64-byte aligned, as it needs); a clone is kept as long as the buffer
    /// (`kImmutableZeroCopy`).
    ZeroCopy(crate::native::SharedBytes),
}

impl HostBuffer<'_> {
    /// The bytes, whatever their owner.
    pub fn bytes(&self) -> &[u8] {
        match self {
            HostBuffer::Copy(b) => b,
            HostBuffer::UntilTransferCompletes(b) => b,
            HostBuffer::ZeroCopy(b) => b,
        }
    }

    /// The same, owning what it holds (for an upload served later, by an actor): a borrow is
    /// copied now.
    pub fn into_owned(self) -> HostBuffer<'static> {
        match self {
            HostBuffer::Copy(b) => HostBuffer::UntilTransferCompletes(Arc::from(b)),
            HostBuffer::UntilTransferCompletes(b) => HostBuffer::UntilTransferCompletes(b),
            HostBuffer::ZeroCopy(b) => HostBuffer::ZeroCopy(b),
        }
    }
}

/// An owned PJRT buffer; destroyed on drop (after which any zero-copy host data is released).
pub struct PjrtBuffer {
    client: PjrtClient,
    raw: *mut sys::PJRT_Buffer,
    /// Host memory the buffer aliases (zero copy); released only after the buffer is destroyed.
    _aliased: Option<crate::native::SharedBytes>,
}

// SAFETY: PJRT buffers are thread-safe for the operations we expose (queries, copies, reads,
// executes); destroy happens once, in Drop, when no other reference exists.
unsafe impl Send for PjrtBuffer {}
// SAFETY: as above.
unsafe impl Sync for PjrtBuffer {}

impl Drop for PjrtBuffer {
    fn drop(&mut self) {
        let mut a = args!(PJRT_Buffer_Destroy_Args { buffer: self.raw });
        let _ = call!(self.client.plugin(), PJRT_Buffer_Destroy, &mut a);
    }
}

impl PjrtClient {
    /// Uploads dense, major-to-minor host data. The caller has checked that `data` holds exactly
    /// the bytes of `dtype` × `dims` and that `memory` (if any) belongs to `device`.
    pub fn upload(
        &self,
        data: HostBuffer<'_>,
        dtype: ElementType,
        dims: &[i64],
        device: &PjrtDevice,
        memory: Option<&PjrtMemory>,
    ) -> Result<PjrtBuffer> {
        let semantics = match data {
            HostBuffer::Copy(_) => {
                sys::PJRT_HostBufferSemantics_PJRT_HostBufferSemantics_kImmutableOnlyDuringCall
            }
            HostBuffer::UntilTransferCompletes(_) => {
                sys::PJRT_HostBufferSemantics_PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes
            }
            HostBuffer::ZeroCopy(_) => sys::PJRT_HostBufferSemantics_PJRT_HostBufferSemantics_kImmutableZeroCopy,
        };
        let bytes = data.bytes();
        // Empty arrays still need a valid, aligned address to hand over.
        static EMPTY: [u64; 2] = [0; 2];
        let ptr: *const u8 = if bytes.is_empty() {
            EMPTY.as_ptr().cast()
        } else {
            bytes.as_ptr()
        };
        let mut a = args!(PJRT_Client_BufferFromHostBuffer_Args {
            client: self.raw(),
            data: ptr.cast(),
            type_: to_raw_type(dtype),
            dims: dims.as_ptr(),
            num_dims: dims.len(),
            byte_strides: null(),
            num_byte_strides: 0,
            host_buffer_semantics: semantics,
            device: if memory.is_some() {
                null_mut()
            } else {
                device.raw()
            },
            memory: memory.map_or(null_mut(), |m| m.raw()),
            device_layout: null_mut(),
        });
        call!(self.plugin(), PJRT_Client_BufferFromHostBuffer, &mut a)?;
        let done = (!a.done_with_host_buffer.is_null()).then(|| PjrtEvent {
            client: self.clone(),
            raw: a.done_with_host_buffer,
        });
        let mut buffer = PjrtBuffer {
            client: self.clone(),
            raw: a.buffer,
            _aliased: None,
        };
        match data {
            HostBuffer::Copy(_) => {
                // Only-during-call: the plugin is done with the memory when the call returns.
                drop(done);
            }
            HostBuffer::UntilTransferCompletes(keep) => {
                if let Some(done) = done {
                    done.on_ready(Box::new(move || drop(keep)))?;
                }
            }
            HostBuffer::ZeroCopy(keep) => {
                drop(done);
                buffer._aliased = Some(keep);
            }
        }
        Ok(buffer)
    }
}

/// A read-only view of a buffer's layout, enough to know whether it is dense major-to-minor.
fn is_default_layout(
    plugin: &super::plugin::Plugin,
    raw: *mut sys::PJRT_Buffer,
    rank: usize,
) -> bool {
    let mut a = args!(PJRT_Buffer_GetMemoryLayout_Args { buffer: raw });
    if call!(plugin, PJRT_Buffer_GetMemoryLayout, &mut a).is_err() {
        return false;
    }
    if a.layout.type_ != sys::PJRT_Buffer_MemoryLayout_Type_PJRT_Buffer_MemoryLayout_Type_Tiled {
        return false;
    }
    // SAFETY: the layout is tiled (checked above), so `tiled` is the active union member; its
    // arrays are owned by the buffer and valid for the sizes given.
    unsafe {
        let tiled = a.layout.__bindgen_anon_1.tiled;
        if tiled.num_tiles != 0 || tiled.minor_to_major_size != rank {
            return false;
        }
        let m2m = if rank == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(tiled.minor_to_major, rank)
        };
        m2m.iter()
            .enumerate()
            .all(|(i, &d)| d == (rank - 1 - i) as i64)
    }
}

impl PjrtBuffer {
    pub fn client(&self) -> &PjrtClient {
        &self.client
    }

    pub fn element_type(&self) -> Result<ElementType> {
        let mut a = args!(PJRT_Buffer_ElementType_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_ElementType, &mut a)?;
        from_raw_type(a.type_)
    }

    pub fn dims(&self) -> Result<Vec<i64>> {
        let mut a = args!(PJRT_Buffer_Dimensions_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_Dimensions, &mut a)?;
        if a.num_dims == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: `num_dims` buffer-owned dims.
        Ok(unsafe { std::slice::from_raw_parts(a.dims, a.num_dims) }.to_vec())
    }

    pub fn on_device_size(&self) -> Result<usize> {
        let mut a = args!(PJRT_Buffer_OnDeviceSizeInBytes_Args { buffer: self.raw });
        call!(
            self.client.plugin(),
            PJRT_Buffer_OnDeviceSizeInBytes,
            &mut a
        )?;
        Ok(a.on_device_size_in_bytes)
    }

    /// Whether the plugin deleted the buffer: a donating execute consumed it.
    pub fn is_deleted(&self) -> Result<bool> {
        let mut a = args!(PJRT_Buffer_IsDeleted_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_IsDeleted, &mut a)?;
        Ok(a.is_deleted)
    }

    /// Whether two wrappers own the same device memory object.
    pub fn device_is(&self, device: &PjrtDevice) -> Result<bool> {
        let mut a = args!(PJRT_Buffer_Device_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_Device, &mut a)?;
        Ok(a.device == device.raw())
    }

    /// The index in `memories` of the buffer's memory space.
    pub fn memory_index(&self, memories: &[PjrtMemory]) -> Result<Option<usize>> {
        let mut a = args!(PJRT_Buffer_Memory_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_Memory, &mut a)?;
        Ok(memories.iter().position(|m| m.raw() == a.memory))
    }

    /// The index in `devices` of the buffer's device.
    pub fn device_index(&self, devices: &[PjrtDevice]) -> Result<Option<usize>> {
        let mut a = args!(PJRT_Buffer_Device_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_Device, &mut a)?;
        Ok(devices.iter().position(|d| d.raw() == a.device))
    }

    pub fn ready_event(&self) -> Result<PjrtEvent> {
        let mut a = args!(PJRT_Buffer_ReadyEvent_Args { buffer: self.raw });
        call!(self.client.plugin(), PJRT_Buffer_ReadyEvent, &mut a)?;
        Ok(PjrtEvent {
            client: self.client.clone(),
            raw: a.event,
        })
    }

    /// Blocks until the buffer's contents are computed; a failed computation's error comes back.
    /// (No `PjrtEvent` wrapper: that would touch the client's shared refcount on a hot path.)
    pub fn wait_ready(&self) -> Result<()> {
        let plugin = self.client.plugin();
        let mut r = args!(PJRT_Buffer_ReadyEvent_Args { buffer: self.raw });
        call!(plugin, PJRT_Buffer_ReadyEvent, &mut r)?;
        let mut w = args!(PJRT_Event_Await_Args { event: r.event });
        let waited = call!(plugin, PJRT_Event_Await, &mut w);
        let mut d = args!(PJRT_Event_Destroy_Args { event: r.event });
        let _ = call!(plugin, PJRT_Event_Destroy, &mut d);
        waited
    }

    pub fn copy_to_device(&self, device: &PjrtDevice) -> Result<PjrtBuffer> {
        let mut a = args!(PJRT_Buffer_CopyToDevice_Args {
            buffer: self.raw,
            dst_device: device.raw(),
        });
        call!(self.client.plugin(), PJRT_Buffer_CopyToDevice, &mut a)?;
        Ok(PjrtBuffer {
            client: self.client.clone(),
            raw: a.dst_buffer,
            _aliased: None,
        })
    }

    pub fn copy_to_memory(&self, memory: &PjrtMemory) -> Result<PjrtBuffer> {
        let mut a = args!(PJRT_Buffer_CopyToMemory_Args {
            buffer: self.raw,
            dst_memory: memory.raw(),
        });
        call!(self.client.plugin(), PJRT_Buffer_CopyToMemory, &mut a)?;
        Ok(PjrtBuffer {
            client: self.client.clone(),
            raw: a.dst_buffer,
            _aliased: None,
        })
    }

    /// Copies the buffer's dense bytes into `dst`, whose length the caller has checked equals
    /// the array's byte size. Where the buffer lives in host-addressable memory in the default
    /// layout (the CPU plugin), this is a wait for readiness and one `memcpy`; otherwise it is
    /// `PJRT_Buffer_ToHostBuffer`.
    pub fn read_into(&self, dst: &mut [u8], rank: usize) -> Result<()> {
        let plugin = self.client.plugin();
        let mut on_cpu = args!(PJRT_Buffer_IsOnCpu_Args { buffer: self.raw });
        call!(plugin, PJRT_Buffer_IsOnCpu, &mut on_cpu)?;
        if on_cpu.is_on_cpu && is_default_layout(plugin, self.raw, rank) {
            self.wait_ready()?;
            let mut p = args!(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args { buffer: self.raw });
            call!(plugin, PJRT_Buffer_OpaqueDeviceMemoryDataPointer, &mut p)?;
            if !p.device_memory_ptr.is_null() && !dst.is_empty() {
                // SAFETY: the buffer is ready, lives in host memory in dense major-to-minor order
                // (checked above) and holds exactly `dst.len()` bytes (checked by the caller); we
                // hold `&self`, so it is not destroyed during the copy, and arrays are immutable.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        p.device_memory_ptr as *const u8,
                        dst.as_mut_ptr(),
                        dst.len(),
                    )
                };
                return Ok(());
            }
            if dst.is_empty() {
                return Ok(());
            }
        }
        let mut a = args!(PJRT_Buffer_ToHostBuffer_Args {
            src: self.raw,
            host_layout: null_mut(),
            dst: dst.as_mut_ptr().cast(),
            dst_size: dst.len(),
        });
        call!(plugin, PJRT_Buffer_ToHostBuffer, &mut a)?;
        PjrtEvent {
            client: self.client.clone(),
            raw: a.event,
        }
        .wait()
    }

    /// The address of the buffer's device memory (py_client's `unsafe_buffer_pointer`), as a
    /// number: for identity checks and interop, never dereferenced here.
    pub fn device_address(&self) -> Result<usize> {
        let plugin = self.client.plugin();
        let mut p = args!(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args { buffer: self.raw });
        call!(plugin, PJRT_Buffer_OpaqueDeviceMemoryDataPointer, &mut p)?;
        Ok(p.device_memory_ptr as usize)
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Buffer {
        self.raw
    }

    pub(crate) fn from_raw(client: PjrtClient, raw: *mut sys::PJRT_Buffer) -> Self {
        PjrtBuffer {
            client,
            raw,
            _aliased: None,
        }
    }
}
