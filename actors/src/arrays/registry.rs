//! The buffer registry actor: the one place whole-registry work runs, one request at a time:
//! heap profiles and defragment (which owns every slot's move while it runs). Single arrays
//! register and unregister themselves in O(1), and listing reads the registry on the caller's
//! thread (see ARCHITECTURE.md's ownership table and its measurements).

use std::future::Future;
use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use rayon::prelude::*;

use crate::arrays::buffers::{BufferSlot, MoveHold};
use crate::arrays::heap_profile::{self, ExecutableSample};
use crate::client::state::ClientState;
use crate::error::{Error, Result};
use crate::pjrt::{HostBuffer, PjrtBuffer};
use crate::protocol::supervision::{Mailbox, ask, guarded};

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

crate::protocol::supervision::answers_asked!(BufferRegistryActor);

/// A heap profile of every live array and executable, as pprof bytes.
#[derive(Message)]
#[rtype(result = "Result<Vec<u8>>")]
pub(crate) struct HeapProfile {
    span: Span,
}

impl Handler<HeapProfile> for BufferRegistryActor {
    type Result = Result<Vec<u8>>;

    fn handle(&mut self, msg: HeapProfile, _: &mut Context<Self>) -> Self::Result {
        let _span = tracing::debug_span!(parent: &msg.span, "registry.heap_profile").entered();
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
pub(crate) struct Defragment {
    span: Span,
}

impl Handler<Defragment> for BufferRegistryActor {
    type Result = Result<DefragmentReport>;

    fn handle(&mut self, msg: Defragment, _: &mut Context<Self>) -> Self::Result {
        let _span = tracing::info_span!(parent: &msg.span, "registry.defragment").entered();
        guarded("defragment", || self.defragment(None))
    }
}

/// Test support: a defragment whose uploads fail once `succeed` of them have succeeded.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "Result<DefragmentReport>")]
pub(crate) struct DefragmentFailingAfter {
    succeed: usize,
}

#[cfg(feature = "test-hooks")]
impl Handler<DefragmentFailingAfter> for BufferRegistryActor {
    type Result = Result<DefragmentReport>;

    fn handle(&mut self, msg: DefragmentFailingAfter, _: &mut Context<Self>) -> Self::Result {
        guarded("defragment", || self.defragment(Some(msg.succeed)))
    }
}

/// The one way to reach the buffer-registry actor: only this builds its messages, taking the
/// caller's span as it sends.
#[derive(Clone, Copy)]
pub struct RegistryHandle<'a> {
    pub(crate) addr: &'a Mailbox<BufferRegistryActor>,
}

impl RegistryHandle<'_> {
    /// A heap profile of every live array and executable, as pprof bytes.
    pub fn heap_profile(self) -> impl Future<Output = Result<Vec<u8>>> + use<> {
        ask(
            self.addr,
            HeapProfile {
                span: Span::current(),
            },
        )
    }

    /// Moves every live buffer.
    pub fn defragment(self) -> impl Future<Output = Result<DefragmentReport>> + use<> {
        ask(
            self.addr,
            Defragment {
                span: Span::current(),
            },
        )
    }

    /// Test support: a defragment whose uploads fail once `succeed` of them have succeeded.
    #[cfg(feature = "test-hooks")]
    pub fn defragment_failing_after(
        self,
        succeed: usize,
    ) -> impl Future<Output = Result<DefragmentReport>> + use<> {
        ask(self.addr, DefragmentFailingAfter { succeed })
    }
}

impl BufferRegistryActor {
    /// Never waits for a slot's lock: a buffer an operation holds (an execute of any length, a callback inside it) is skipped, tried once more at
    /// the end of the pass, and reported; the next defragment moves it. So nothing deadlocks
    /// against an execute, and nothing queued behind this request waits on one.
    fn defragment(&self, fail_after: Option<usize>) -> Result<DefragmentReport> {
        // The copy threads exist only for this defragment, so a client's shutdown leaves no
        // thread behind (rayon's global pool would outlive it). Measured with 10,000 small
        // arrays on 2 cores (`cargo bench --bench memory`): 28 ms against 46 ms one by one.
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("pjrt-defragment-{i}"))
            .build_scoped(
                |thread| thread.run(),
                |copy_pool| self.defragment_with(copy_pool, fail_after),
            )
            .map_err(|e| Error::Defragment {
                moved: 0,
                on_host: Vec::new(),
                reason: format!("cannot start its copy threads: {e}"),
            })?
    }

    fn defragment_with(
        &self,
        copy_pool: &rayon::ThreadPool,
        fail_after: Option<usize>,
    ) -> Result<DefragmentReport> {
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
            // Copy out in parallel (each read waits on its own buffer: a device-to-host DMA on a
            // GPU), then free sequentially; then upload in parallel and put back sequentially.
            // The holds stay on this thread; the tasks borrow them.
            let reads: Vec<_> =
                copy_pool.install(|| held.par_iter().map(|(_, hold)| hold.read_out()).collect());
            let mut moving = Vec::with_capacity(held.len());
            for ((array, mut hold), read) in held.into_iter().zip(reads) {
                match read {
                    Ok(Some(bytes)) => {
                        let len = hold.evict_with(bytes);
                        moving.push((array, hold, len));
                    }
                    // On the host already, from a failed defragment: it goes back up below.
                    Ok(None) => moving.push((array, hold, 0)),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            let uploads: Vec<_> = copy_pool.install(|| {
                (moving.par_iter().enumerate())
                    .map(|(i, (_, hold, _))| {
                        let fail = fail_after.is_some_and(|n| i >= n);
                        hold.host_bytes()
                            .map(|bytes| self.upload(hold.slot(), bytes, fail))
                    })
                    .collect()
            });
            for ((array, mut hold, bytes), upload) in moving.into_iter().zip(uploads) {
                match upload {
                    Some(Ok(buffer)) => {
                        hold.put_back(buffer);
                        report.moved += 1;
                        report.bytes += bytes;
                    }
                    None => {}
                    Some(Err(e)) => {
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
        let slot = hold.slot();
        hold.restore(|bytes| self.upload(slot, bytes, fail))
    }

    /// Uploads `bytes` as `slot`'s buffer on its device and memory; `fail` is a test hook's
    /// injected failure.
    fn upload(&self, slot: &BufferSlot, bytes: &[u8], fail: bool) -> Result<PjrtBuffer> {
        if fail {
            return Err(Error::Pjrt {
                function: "PJRT_Client_BufferFromHostBuffer",
                code: crate::PjrtCode::ResourceExhausted,
                message: "injected by a test hook".into(),
                context: None,
            });
        }
        let res = &self.state;
        Ok(res.pjrt.upload(
            HostBuffer::Copy(bytes),
            slot.dtype,
            &slot.dims,
            &res.devices[slot.device],
            Some(&res.memories[slot.memory]),
        )?)
    }

    /// Compaction as the allocators see it: the largest free block over the free bytes in the
    /// allocator's regions (its pool; where it reports none, up to its limit), the worst
    /// device's, where every device has statistics (GPU plugins; the CPU plugin has none).
    fn free_block_ratios(&self) -> Option<f64> {
        let mut worst: Option<f64> = None;
        for device in &self.state.devices {
            let stats = device.memory_stats().ok()??;
            let largest = stats.largest_free_block_bytes?;
            let held = stats.pool_bytes.or(stats.bytes_limit)?;
            let free = (held - stats.bytes_in_use).max(1) as f64;
            let ratio = (largest as f64 / free).min(1.0);
            worst = Some(worst.map_or(ratio, |w| w.min(ratio)));
        }
        worst
    }
}
