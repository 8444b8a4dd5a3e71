//! The buffer registry actor: the one place whole-registry work runs, one request at a time:
//! heap profiles and defragment (which owns every slot's move while it runs). Single arrays
//! register and unregister themselves in O(1), and listing reads the registry on the caller's
//! thread (see ARCHITECTURE.md's ownership table and its measurements).

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use crate::buffers::{ArrayCore, Relocation};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DefragmentReport {
    /// Buffers freed and uploaded again.
    pub moved: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Buffers an operation held (an execute, a callback inside it) through the whole pass:
    /// left where they were, for the next defragment.
    pub skipped: usize,
}

/// Moves every live buffer: all copied to host first, then each freed and uploaded again.
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
        // 1. Copy every buffer to host (an array deleted meanwhile is skipped). Arrays never
        // change in place (nothing is donated), so a copy stays right until it is moved.
        let mut copies = Vec::with_capacity(arrays.len());
        for array in arrays {
            let slot = &array.slot;
            let mut bytes = vec![0u8; crate::dtype::byte_size(slot.dtype, &slot.dims)?];
            match slot.read_bytes(&mut bytes) {
                Ok(()) => copies.push((array, bytes)),
                Err(Error::Deleted { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // 2. Free each device copy and upload it again; a failure keeps the host copy.
        let mut report = DefragmentReport::default();
        let mut on_host = Vec::new();
        let mut first_error = None;
        for last_try in [false, true] {
            let mut in_use = Vec::new();
            for (array, bytes) in copies {
                let len = bytes.len();
                let fail = fail_after.is_some_and(|n| report.moved >= n);
                match self.relocate(&array, bytes, fail) {
                    Ok(Relocation::Moved) => {
                        report.moved += 1;
                        report.bytes += len;
                    }
                    Ok(Relocation::Deleted) => {}
                    Ok(Relocation::InUse(bytes)) if !last_try => in_use.push((array, bytes)),
                    Ok(Relocation::InUse(_)) => report.skipped += 1,
                    Err(e) => {
                        on_host.push(array.id.to_string());
                        first_error.get_or_insert(e);
                    }
                }
            }
            copies = in_use;
        }
        match first_error {
            None => Ok(report),
            Some(e) => Err(Error::Defragment {
                moved: report.moved,
                on_host,
                reason: e.to_string(),
            }),
        }
    }

    fn relocate(&self, array: &ArrayCore, bytes: Vec<u8>, fail: bool) -> Result<Relocation> {
        let (res, slot) = (&self.state, &array.slot);
        slot.relocate(bytes, |bytes| {
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
                slot.dtype,
                &slot.dims,
                &res.devices[slot.device],
                Some(&res.memories[slot.memory]),
            )
        })
    }
}
