//! The buffer registry actor: the one place whole-registry work runs, one request at a time:
//! listing live arrays, heap profiles and defragment. Single arrays register and unregister
//! themselves in O(1) (see ARCHITECTURE.md).

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use super::guarded;
use crate::error::{Error, Result};
use crate::heap_profile::{self, ExecutableSample};
use crate::open::ClientResources;
use crate::pjrt::HostData;

pub struct BufferRegistryActor {
    resources: Arc<ClientResources>,
    device_names: Vec<String>,
}

impl BufferRegistryActor {
    pub fn new(resources: Arc<ClientResources>, device_names: Vec<String>) -> Self {
        BufferRegistryActor {
            resources,
            device_names,
        }
    }
}

impl Actor for BufferRegistryActor {
    type Context = Context<Self>;
}

/// A heap profile of every live array and executable, as pprof bytes.
pub struct HeapProfile {
    pub span: Span,
}

impl Message for HeapProfile {
    type Result = Result<Vec<u8>>;
}

impl Handler<HeapProfile> for BufferRegistryActor {
    type Result = Result<Vec<u8>>;

    fn handle(&mut self, msg: HeapProfile, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("registry.heap_profile").entered();
        guarded("heap profile", || {
            let buffers = &self.resources.buffers;
            let mut tally = heap_profile::BufferTally::default();
            buffers.for_each(|id, entry| tally.add(id, entry));
            tally.size_the_rest(buffers);
            let executables = self
                .resources
                .executables
                .collect(|weak| weak.upgrade())
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
            Ok(heap_profile::build(tally, &executables, &self.device_names))
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
}

/// Moves every live buffer: all copied to host first, then each freed and uploaded again.
pub struct Defragment {
    /// Fault injection for tests: uploads after this many succeed fail.
    pub fail_after: Option<usize>,
    pub span: Span,
}

impl Message for Defragment {
    type Result = Result<DefragmentReport>;
}

impl Handler<Defragment> for BufferRegistryActor {
    type Result = Result<DefragmentReport>;

    fn handle(&mut self, msg: Defragment, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::info_span!("registry.defragment").entered();
        guarded("defragment", || self.defragment(msg.fail_after))
    }
}

impl BufferRegistryActor {
    /// Never holds more than one slot's lock: requests using other buffers go on, requests
    /// using the buffer being moved wait for it, and nothing can deadlock against an execute
    /// (which may hold several read locks) or a callback calling back into the runtime.
    fn defragment(&self, fail_after: Option<usize>) -> Result<DefragmentReport> {
        let arrays = self.resources.buffers.live_arrays();
        // 1. Copy every buffer to host (an array deleted meanwhile is skipped).
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
        let res = &self.resources;
        let mut report = DefragmentReport::default();
        let mut on_host = Vec::new();
        let mut first_error = None;
        for (array, bytes) in copies {
            let slot = &array.slot;
            let len = bytes.len();
            let fail = fail_after.is_some_and(|n| report.moved >= n);
            let moved = slot.relocate(bytes, |bytes| {
                if fail {
                    return Err(Error::Cancelled("injected upload failure".into()));
                }
                res.pjrt.upload(
                    HostData::Borrowed(bytes),
                    slot.dtype,
                    &slot.dims,
                    &res.devices[slot.device],
                    Some(&res.memories[slot.memory]),
                )
            });
            match moved {
                Ok(true) => {
                    report.moved += 1;
                    report.bytes += len;
                }
                Ok(false) => {}
                Err(e) => {
                    on_host.push(array.id.to_string());
                    first_error.get_or_insert(e);
                }
            }
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
}
