//! The buffer registry actor: the one place whole-registry work runs, one request at a time:
//! heap profiles and defragment (which owns every slot's move while it runs). Single arrays
//! register and unregister themselves in O(1), and listing reads the registry on the caller's
//! thread (see ARCHITECTURE.md's ownership table and its measurements).

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use crate::buffers::MoveHold;
use crate::error::{Error, Result};
use crate::heap_profile::{self, ExecutableSample};
use crate::pjrt::HostData;
use crate::state::ClientState;
use crate::supervision::guarded;

pub struct BufferRegistryActor {
    state: Arc<ClientState>,
}

impl BufferRegistryActor {
    pub(crate) fn new(state: Arc<ClientState>) -> Self {
        BufferRegistryActor { state }
    }
}

impl Actor for BufferRegistryActor {
    type Context = Context<Self>;
}

/// A heap profile of every live array and executable, as pprof bytes.
#[derive(Message)]
#[rtype(result = "Result<Vec<u8>>")]
pub struct HeapProfile {
    pub span: Span,
}

impl Handler<HeapProfile> for BufferRegistryActor {
    type Result = Result<Vec<u8>>;

    fn handle(&mut self, msg: HeapProfile, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("registry.heap_profile").entered();
        guarded("heap profile", || {
            let buffers = &self.state.buffers;
            let mut tally = heap_profile::BufferTally::default();
            buffers.for_each(|id, entry| tally.add(id, entry));
            tally.size_the_rest(buffers);
            let executables = self
                .state
                .live_executables()
                .into_iter()
                .map(|core| {
                    let code_size = core
                        .exe
                        .compiled_memory_stats()
                        .map(|s| s.generated_code_size)
                        .unwrap_or(0);
                    ExecutableSample { core, code_size }
                })
                .collect::<Vec<_>>();
            let device_names: Vec<&str> = (self.state.snapshot.devices.iter())
                .map(|d| d.description.debug_string.as_str())
                .collect();
            Ok(heap_profile::build(tally, &executables, &device_names))
        })
    }
}

/// What a defragment did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DefragmentReport {
    /// Buffers freed and uploaded again.
    pub moved: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Buffers an operation held (an execute, a callback inside it) through the whole pass:
    /// left where they were, for the next defragment.
    pub skipped: usize,
    /// The largest free block over the free bytes (1.0: all free memory in one block) of the
    /// most fragmented device, before and after, where the plugin reports allocator
    /// statistics (GPU plugins); `None` on the CPU plugin, which has none.
    pub free_block_ratio: Option<(f64, f64)>,
}

/// Moves every live buffer: all taken off their devices first, then all uploaded again.
#[derive(Message)]
#[rtype(result = "Result<DefragmentReport>")]
pub struct Defragment {
    pub span: Span,
}

impl Handler<Defragment> for BufferRegistryActor {
    type Result = Result<DefragmentReport>;

    fn handle(&mut self, msg: Defragment, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::info_span!("registry.defragment").entered();
        guarded("defragment", || self.defragment(None))
    }
}

/// Test support: a defragment whose uploads fail once `succeed` of them have succeeded.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "Result<DefragmentReport>")]
pub struct DefragmentFailingAfter {
    pub succeed: usize,
}

#[cfg(feature = "test-hooks")]
impl Handler<DefragmentFailingAfter> for BufferRegistryActor {
    type Result = Result<DefragmentReport>;

    fn handle(&mut self, msg: DefragmentFailingAfter, _: &mut Context<Self>) -> Self::Result {
        guarded("defragment", || self.defragment(Some(msg.succeed)))
    }
}

impl BufferRegistryActor {
    /// Never holds more than one slot's lock, and never waits for one: a buffer an operation
    /// holds (an execute of any length, a callback inside it) is skipped, tried once more at
    /// the end of the pass, and reported; the next defragment moves it. So nothing deadlocks
    /// against an execute, and nothing queued behind this request waits on one.
    fn defragment(&self, fail_after: Option<usize>) -> Result<DefragmentReport> {
        let arrays = self.state.buffers.live_arrays();
        let stats_before = self.free_block_ratios();
        // 1. Hold every buffer no operation uses (operations that want one wait), take them
        // all off their devices, and only then put them back: with everything freed first the
        // allocator can place them compactly, as py_client's defragment does.
        let mut report = DefragmentReport::default();
        let mut first_error = None;
        let mut on_host = Vec::new();
        let mut busy = Vec::new();
        {
            let mut held = Vec::with_capacity(arrays.len());
            for array in &arrays {
                match array.slot.hold() {
                    Some(hold) => held.push((array, hold)),
                    None if array.slot.is_deleted() => {}
                    None => busy.push(array),
                }
            }
            let mut moving = Vec::with_capacity(held.len());
            for (array, mut hold) in held {
                match hold.evict() {
                    Ok(bytes) => moving.push((array, hold, bytes)),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            for (array, mut hold, bytes) in moving {
                let fail = fail_after.is_some_and(|n| report.moved >= n);
                match self.restore(&mut hold, fail) {
                    Ok(true) => {
                        report.moved += 1;
                        report.bytes += bytes;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        on_host.push(array.id.to_string());
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        // 2. What an operation held is tried once more, one at a time, now that it may be free.
        for array in busy {
            let Some(mut hold) = array.slot.hold() else {
                if !array.slot.is_deleted() {
                    report.skipped += 1;
                }
                continue;
            };
            let bytes = hold.evict()?;
            let fail = fail_after.is_some_and(|n| report.moved >= n);
            match self.restore(&mut hold, fail) {
                Ok(_) => {
                    report.moved += 1;
                    report.bytes += bytes;
                }
                Err(e) => {
                    on_host.push(array.id.to_string());
                    first_error.get_or_insert(e);
                }
            }
        }
        report.free_block_ratio = stats_before.zip(self.free_block_ratios());
        match first_error {
            None => Ok(report),
            Some(e) => Err(Error::Defragment {
                moved: report.moved,
                on_host,
                reason: e.to_string(),
            }),
        }
    }

    /// Uploads a held buffer's host bytes back to its device and memory.
    fn restore(&self, hold: &mut MoveHold<'_>, fail: bool) -> Result<bool> {
        let res = &self.state;
        let slot = hold.slot();
        let (dtype, dims, device, memory) =
            (slot.dtype, slot.dims.clone(), slot.device, slot.memory);
        hold.restore(|bytes| {
            if fail {
                return Err(Error::Pjrt {
                    function: "PJRT_Client_BufferFromHostBuffer",
                    code: crate::PjrtCode::ResourceExhausted,
                    message: "injected by a test hook".into(),
                    context: None,
                });
            }
            res.pjrt.upload(
                HostData::Borrowed(bytes),
                dtype,
                &dims,
                &res.devices[device],
                Some(&res.memories[memory]),
            )
        })
    }

    /// Compaction as the allocators see it: the largest free block over the free bytes, the
    /// worst device's, where every device has statistics (GPU plugins; the CPU plugin has none).
    fn free_block_ratios(&self) -> Option<f64> {
        let mut worst: Option<f64> = None;
        for device in &self.state.devices {
            let stats = device.memory_stats().ok()??;
            let (largest, limit) = (stats.largest_free_block_bytes?, stats.bytes_limit?);
            let free = (limit - stats.bytes_in_use).max(1) as f64;
            let ratio = (largest as f64 / free).min(1.0);
            worst = Some(worst.map_or(ratio, |w| w.min(ratio)));
        }
        worst
    }
}
