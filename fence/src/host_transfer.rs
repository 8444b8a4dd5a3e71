//! Host send/recv callbacks (`ExecuteOptions.send_callbacks` / `recv_callbacks`): the path GPU
//! plugins use for host callbacks, as py_client's `make_python_callback_from_host_send_and_recv`.
//! The CPU plugin cannot compile host send/recv; callers there use the FFI path (`ffi.rs`).

use std::ffi::c_void;
use std::ptr::null_mut;

use pjrt_sys as sys;

use std::sync::Arc;

use super::abi;
use super::call::args;
use super::plugin::Plugin;

/// What an execution does with host transfers: a device sent bytes to the host on a channel,
/// or a device waits for bytes from the host on a channel.
pub trait HostTransferDispatch: Sync {
    /// One chunk of a send; `done` marks the last chunk of this send.
    fn sent(
        &self,
        device: usize,
        channel: i64,
        chunk: &[u8],
        done: bool,
    ) -> std::result::Result<(), String>;
    /// A recv is waiting: fill `stream` (now, or later from any thread once the bytes are
    /// ready) with exactly the size the program receives; on a failure, zeros of that size
    /// after recording the failure. Must not block.
    fn receive(&self, device: usize, channel: i64, stream: RecvStream);
}

/// Channel ids from here down are padding: no program of ours uses a negative channel.
const UNUSED_CHANNEL: i64 = -1_000_000;

struct Slot {
    plugin: Arc<Plugin>,
    dispatch: *const (dyn HostTransferDispatch + 'static),
    device: usize,
    channel: i64,
}

/// The C arrays behind `ExecuteOptions`' send/recv callbacks for one execution. The
/// dispatch it points to must outlive the execution: `execute` waits for completion before
/// this goes.
pub(crate) struct HostTransferOptions {
    // Boxed: the plugin holds pointers to the slots, which must stay put as the Vec grows.
    #[allow(clippy::vec_box)]
    _slots: Vec<Box<Slot>>,
    _sends: Vec<Vec<sys::PJRT_SendCallbackInfo>>,
    _recvs: Vec<Vec<sys::PJRT_RecvCallbackInfo>>,
    send_lists: Vec<*mut sys::PJRT_SendCallbackInfo>,
    recv_lists: Vec<*mut sys::PJRT_RecvCallbackInfo>,
    num_send_ops: usize,
    num_recv_ops: usize,
}

impl HostTransferOptions {
    /// Callbacks for `num_devices` devices on the program's send and recv channels.
    pub(crate) fn new(
        plugin: &Arc<Plugin>,
        dispatch: &dyn HostTransferDispatch,
        num_devices: usize,
        send_channels: &[i64],
        recv_channels: &[i64],
    ) -> Self {
        // SAFETY: only the lifetime is erased; `execute` keeps `dispatch` alive until every
        // device's completion event has fired, and no callback runs after that.
        let dispatch: *const (dyn HostTransferDispatch + 'static) =
            unsafe { std::mem::transmute(dispatch as *const dyn HostTransferDispatch) };
        let mut slots = Vec::new();
        let mut slot = |device, channel| {
            let mut s = Box::new(Slot {
                plugin: plugin.clone(),
                dispatch,
                device,
                channel,
            });
            let user_arg = (&mut *s as *mut Slot).cast::<c_void>();
            slots.push(s);
            user_arg
        };
        // Plugins before openxla/xla#37129 read the recv lists with the send count (a segfault
        // for a program with sends and no recvs): pad both lists to the larger count with
        // callbacks on channels no program uses, and declare the true counts.
        let padded = send_channels.len().max(recv_channels.len());
        let pad = |channels: &[i64]| -> Vec<i64> {
            let mut all = channels.to_vec();
            all.extend((all.len()..padded).map(|i| UNUSED_CHANNEL - i as i64));
            all
        };
        let (padded_sends, padded_recvs) = (pad(send_channels), pad(recv_channels));
        let mut sends: Vec<Vec<sys::PJRT_SendCallbackInfo>> = (0..num_devices)
            .map(|d| {
                padded_sends
                    .iter()
                    .map(|&channel_id| sys::PJRT_SendCallbackInfo {
                        channel_id,
                        user_arg: slot(d, channel_id),
                        send_callback: Some(on_send),
                    })
                    .collect()
            })
            .collect();
        let mut recvs: Vec<Vec<sys::PJRT_RecvCallbackInfo>> = (0..num_devices)
            .map(|d| {
                padded_recvs
                    .iter()
                    .map(|&channel_id| sys::PJRT_RecvCallbackInfo {
                        channel_id,
                        user_arg: slot(d, channel_id),
                        recv_callback: Some(on_recv),
                    })
                    .collect()
            })
            .collect();
        let send_lists = sends.iter_mut().map(|v| v.as_mut_ptr()).collect();
        let recv_lists = recvs.iter_mut().map(|v| v.as_mut_ptr()).collect();
        HostTransferOptions {
            _slots: slots,
            _sends: sends,
            _recvs: recvs,
            send_lists,
            recv_lists,
            num_send_ops: send_channels.len(),
            num_recv_ops: recv_channels.len(),
        }
    }

    /// Points `options` at these callbacks (valid while `self` lives).
    pub(crate) fn install(&mut self, options: &mut abi::ExecuteOptions) {
        options.send_callbacks = self.send_lists.as_mut_ptr();
        options.recv_callbacks = self.recv_lists.as_mut_ptr();
        options.num_send_ops = self.num_send_ops;
        options.num_recv_ops = self.num_recv_ops;
    }
}

/// Makes a PJRT error through the callback-error factory the plugin passed us.
fn callback_error(factory: *mut sys::PJRT_CallbackError, message: &str) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes a valid factory pointer for the duration of the send callback.
    match unsafe { factory.as_ref() }.and_then(|f| *f) {
        // SAFETY: the factory copies the message; the pointer and length describe our string.
        Some(make) => unsafe {
            make(
                sys::PJRT_Error_Code_PJRT_Error_Code_INTERNAL,
                message.as_ptr().cast(),
                message.len(),
            )
        },
        None => null_mut(),
    }
}

unsafe extern "C" fn on_send(
    chunk: *mut sys::PJRT_Chunk,
    error: *mut sys::PJRT_CallbackError,
    _total_size: usize,
    done: bool,
    user_arg: *mut c_void,
) -> *mut sys::PJRT_Error {
    // SAFETY: `user_arg` is a `Slot` in the `HostTransferOptions` that outlives the execution.
    let slot = unsafe { &*(user_arg as *const Slot) };
    // SAFETY: the plugin hands us a valid chunk we own until we call its deleter.
    let chunk = unsafe { &*chunk };
    let data: &[u8] = if chunk.data.is_null() || chunk.size == 0 {
        &[]
    } else {
        // SAFETY: the chunk holds `size` readable bytes at `data` until its deleter runs.
        unsafe { std::slice::from_raw_parts(chunk.data as *const u8, chunk.size) }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the dispatch outlives the execution (see `HostTransferOptions::new`).
        unsafe { &*slot.dispatch }.sent(slot.device, slot.channel, data, done)
    }));
    if let Some(deleter) = chunk.deleter {
        // SAFETY: we are done with the chunk; the deleter is called once, as the API requires.
        unsafe { deleter(chunk.data, chunk.deleter_arg) };
    }
    match outcome {
        Ok(Ok(())) => null_mut(),
        Ok(Err(message)) => callback_error(error, &message),
        Err(_) => callback_error(error, "host send callback panicked"),
    }
}

unsafe extern "C" fn free_chunk(_data: *mut c_void, arg: *mut c_void) {
    // SAFETY: `arg` is the `Box<Vec<u8>>` leaked in `RecvStream::fill`, freed once here.
    drop(unsafe { Box::from_raw(arg as *mut Vec<u8>) });
}

unsafe extern "C" fn on_recv(stream: *mut sys::PJRT_CopyToDeviceStream, user_arg: *mut c_void) {
    // SAFETY: as in `on_send`.
    let slot = unsafe { &*(user_arg as *const Slot) };
    let stream = RecvStream {
        plugin: slot.plugin.clone(),
        raw: stream,
    };
    // A panic must not unwind into the plugin; the stream is then dropped unfilled.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the dispatch outlives the execution.
        unsafe { &*slot.dispatch }.receive(slot.device, slot.channel, stream)
    }));
}

/// The plugin's stream for one recv: filled once, from any thread, when the bytes are ready
/// (the recv callback must not block: the data may come from a send on the same thread).
/// Destroyed on drop, as the API asks of the recv callback's owner.
pub struct RecvStream {
    plugin: Arc<Plugin>,
    raw: *mut sys::PJRT_CopyToDeviceStream,
}

// SAFETY: a copy-to-device stream may be filled and destroyed from any thread; we own it.
unsafe impl Send for RecvStream {}

impl RecvStream {
    /// Hands `bytes` to the device (one chunk) and lets the stream go.
    pub fn fill(self, bytes: Vec<u8>) {
        let boxed = Box::into_raw(Box::new(bytes));
        // SAFETY: `boxed` is a live Vec whose buffer stays put until `free_chunk` drops it.
        let (data, size) = unsafe { ((*boxed).as_mut_ptr(), (*boxed).len()) };
        let mut chunk = sys::PJRT_Chunk {
            data: data.cast(),
            size,
            deleter: Some(free_chunk),
            deleter_arg: boxed.cast(),
        };
        let mut add = args!(PJRT_CopyToDeviceStream_AddChunk_Args {
            stream: self.raw,
            chunk: &mut chunk,
        });
        let api = self.plugin.api();
        // SAFETY: `PJRT_CopyToDeviceStream_AddChunk` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        let added = unsafe {
            self.plugin.call(
                "PJRT_CopyToDeviceStream_AddChunk",
                api.base.PJRT_CopyToDeviceStream_AddChunk,
                &mut add,
            )
        };
        if added.is_err() {
            // SAFETY: the plugin did not take the chunk: still ours, freed once.
            unsafe { free_chunk(data.cast(), boxed.cast()) };
        }
        // The transfer goes on without its event (as XLA's own host callbacks do).
        if !add.transfer_complete.is_null() {
            let mut d = args!(PJRT_Event_Destroy_Args {
                event: add.transfer_complete
            });
            // SAFETY: `PJRT_Event_Destroy` is called with an args struct of its own layout, filled in
            // above, whose pointers stay live across the call.
            let _ = unsafe {
                self.plugin
                    .call("PJRT_Event_Destroy", api.base.PJRT_Event_Destroy, &mut d)
            };
        }
    }
}

impl Drop for RecvStream {
    fn drop(&mut self) {
        let mut d = args!(PJRT_CopyToDeviceStream_Destroy_Args { stream: self.raw });
        // SAFETY: `PJRT_CopyToDeviceStream_Destroy` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        let _ = unsafe {
            self.plugin.call(
                "PJRT_CopyToDeviceStream_Destroy",
                self.plugin.api().base.PJRT_CopyToDeviceStream_Destroy,
                &mut d,
            )
        };
    }
}
