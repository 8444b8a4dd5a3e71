//! The raw C-API sequences our benchmarks compare against: the fewest PJRT calls that do the
//! same work as our execute and round trip, with no checks, registry or handles. Benchmarks only.

use std::ptr::{null, null_mut};

use pjrt_sys as sys;

use super::abi;
use super::buffer::PjrtBuffer;
use super::call::args;
use super::client::{PjrtClient, PjrtDevice};
use super::executable::PjrtLoadedExecutable;

/// Prepared raw calls for one single-device `f32[4] + f32[4]` executable.
pub struct RawAdd<'a> {
    client: &'a PjrtClient,
    exe: &'a PjrtLoadedExecutable,
    device: &'a PjrtDevice,
    api: &'static abi::Api,
    /// Device memory is host memory (the CPU plugin), so a read-back is a pointer read.
    host_addressable: bool,
}

// SAFETY: only used from the thread that owns it in a benchmark; every pointer it reaches is a
// thread-safe PJRT object kept alive by the references it holds.
unsafe impl Send for RawAdd<'_> {}

impl<'a> RawAdd<'a> {
    pub fn new(
        client: &'a PjrtClient,
        exe: &'a PjrtLoadedExecutable,
        device: &'a PjrtDevice,
    ) -> Self {
        RawAdd {
            client,
            exe,
            device,
            api: client.plugin().api(),
            host_addressable: client.platform_name().is_ok_and(|p| p == "cpu"),
        }
    }

    /// Executes once with ready buffers `a` and `b`, waits for the output, destroys it.
    pub fn execute_until_ready(&self, a: &PjrtBuffer, b: &PjrtBuffer) {
        let out = self.execute(a.raw(), b.raw());
        // SAFETY: `out` is the fresh output buffer; awaited, then destroyed exactly once.
        unsafe {
            self.await_ready(out);
            self.destroy(out);
        }
    }

    /// Uploads `x` and `y`, executes, reads the output into a new `Vec`: the fastest sequence
    /// the plugin allows (on CPU the output is read through its host pointer, elsewhere with
    /// `PJRT_Buffer_ToHostBuffer`).
    pub fn roundtrip(&self, x: &[f32; 4], y: &[f32; 4]) -> Vec<f32> {
        let a = self.upload(x);
        let b = self.upload(y);
        let out = self.execute(a, b);
        let mut result = vec![0f32; 4];
        // SAFETY: all three buffers are fresh and ours; the output is awaited before its host
        // pointer is read (only where device memory is host memory, dense major-to-minor), or
        // copied by the plugin into `result`, whose 16 bytes outlive the awaited event; each
        // buffer is destroyed exactly once after its last use.
        unsafe {
            self.await_ready(out);
            if self.host_addressable {
                let mut p = args!(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args { buffer: out });
                self.api
                    .base
                    .PJRT_Buffer_OpaqueDeviceMemoryDataPointer
                    .unwrap()(&mut p);
                std::ptr::copy_nonoverlapping(
                    p.device_memory_ptr as *const f32,
                    result.as_mut_ptr(),
                    4,
                );
            } else {
                let mut t = args!(PJRT_Buffer_ToHostBuffer_Args {
                    src: out,
                    host_layout: null_mut(),
                    dst: result.as_mut_ptr().cast(),
                    dst_size: 16,
                });
                let err = self.api.base.PJRT_Buffer_ToHostBuffer.unwrap()(&mut t);
                assert!(err.is_null(), "raw read-back failed");
                self.await_event(t.event);
            }
            self.destroy(out);
            self.destroy(a);
            self.destroy(b);
        }
        result
    }

    fn upload(&self, data: &[f32; 4]) -> *mut sys::PJRT_Buffer {
        let dims = [4i64];
        let mut a = args!(PJRT_Client_BufferFromHostBuffer_Args {
            client: self.client.raw(),
            data: data.as_ptr().cast(),
            type_: sys::PJRT_Buffer_Type_PJRT_Buffer_Type_F32,
            dims: dims.as_ptr(),
            num_dims: 1,
            byte_strides: null(),
            num_byte_strides: 0,
            host_buffer_semantics:
                sys::PJRT_HostBufferSemantics_PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
            device: self.device.raw(),
            memory: null_mut(),
            device_layout: null_mut(),
        });
        // SAFETY: a valid args struct; `data` outlives the call (copied during it).
        unsafe {
            let err = self.api.base.PJRT_Client_BufferFromHostBuffer.unwrap()(&mut a);
            assert!(err.is_null(), "raw upload failed");
            if !a.done_with_host_buffer.is_null() {
                let mut d = args!(PJRT_Event_Destroy_Args {
                    event: a.done_with_host_buffer
                });
                self.api.base.PJRT_Event_Destroy.unwrap()(&mut d);
            }
        }
        a.buffer
    }

    fn execute(&self, a: *mut sys::PJRT_Buffer, b: *mut sys::PJRT_Buffer) -> *mut sys::PJRT_Buffer {
        let arg_list = [a, b];
        let arg_lists = [arg_list.as_ptr()];
        let mut out = [null_mut::<sys::PJRT_Buffer>()];
        let out_lists = [out.as_mut_ptr()];
        let mut options = abi::ExecuteOptions::new(&[], null_mut());
        let mut x = args!(PJRT_LoadedExecutable_Execute_Args {
            executable: self.exe.loaded_raw(),
            options: (&mut options as *mut abi::ExecuteOptions).cast(),
            argument_lists: arg_lists.as_ptr(),
            num_devices: 1,
            num_args: 2,
            output_lists: out_lists.as_ptr(),
            device_complete_events: null_mut(),
            execute_device: null_mut(),
        });
        // SAFETY: a valid args struct; the argument and output arrays outlive the call.
        unsafe {
            let err = self.api.base.PJRT_LoadedExecutable_Execute.unwrap()(&mut x);
            assert!(err.is_null(), "raw execute failed");
        }
        out[0]
    }

    /// # Safety
    /// `buffer` must be a live buffer.
    unsafe fn await_ready(&self, buffer: *mut sys::PJRT_Buffer) {
        let mut r = args!(PJRT_Buffer_ReadyEvent_Args { buffer: buffer });
        // SAFETY: guaranteed by the caller.
        unsafe {
            self.api.base.PJRT_Buffer_ReadyEvent.unwrap()(&mut r);
            self.await_event(r.event);
        }
    }

    /// # Safety
    /// `event` must be a live event, not used after this.
    unsafe fn await_event(&self, event: *mut sys::PJRT_Event) {
        // SAFETY: guaranteed by the caller; the event is awaited and destroyed once.
        unsafe {
            let mut w = args!(PJRT_Event_Await_Args { event: event });
            assert!(self.api.base.PJRT_Event_Await.unwrap()(&mut w).is_null());
            let mut d = args!(PJRT_Event_Destroy_Args { event: event });
            self.api.base.PJRT_Event_Destroy.unwrap()(&mut d);
        }
    }

    /// # Safety
    /// `buffer` must be a live buffer not used after this.
    unsafe fn destroy(&self, buffer: *mut sys::PJRT_Buffer) {
        let mut d = args!(PJRT_Buffer_Destroy_Args { buffer: buffer });
        // SAFETY: guaranteed by the caller.
        unsafe { self.api.base.PJRT_Buffer_Destroy.unwrap()(&mut d) };
    }
}

/// What any heap profile must ask the plugin for each of `buffers`: its on-device size and its
/// device. The raw floor the memory benchmark sets our `heap_profile` against.
pub fn raw_profile_floor(buffers: &[PjrtBuffer]) -> usize {
    let mut total = 0;
    for b in buffers {
        total += b.on_device_size().unwrap_or(0);
        let mut d = args!(PJRT_Buffer_Device_Args { buffer: b.raw() });
        // SAFETY: a valid args struct for a live buffer we hold.
        let err = unsafe { b.client().plugin().api().base.PJRT_Buffer_Device.unwrap()(&mut d) };
        assert!(err.is_null(), "raw device query failed");
        total += d.device.is_null() as usize;
    }
    total
}
