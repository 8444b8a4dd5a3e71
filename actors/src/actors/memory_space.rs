//! A memory-space actor: owns the order of the async uploads into one memory space and serves
//! them in arrival order, and answers with its live view of the memory space.

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use crate::buffers::{ArrayCore, ArrayOwner};
use crate::dtype::ElementType;
use crate::error::Result;
use crate::pjrt::{HostData, MemoryDescription};
use crate::site::Site;
use crate::state::ClientState;
use crate::supervision::guarded;

pub struct MemorySpaceActor {
    state: Arc<ClientState>,
    index: usize,
}

impl MemorySpaceActor {
    pub(crate) fn new(state: Arc<ClientState>, index: usize) -> Self {
        MemorySpaceActor { state, index }
    }
}

impl Actor for MemorySpaceActor {
    type Context = Context<Self>;
}

/// Asks the plugin again for the memory space's description and the ids of its devices.
#[derive(Message)]
#[rtype(result = "Result<(MemoryDescription, Vec<i32>)>")]
pub struct DescribeMemory {
    pub span: Span,
}

impl Handler<DescribeMemory> for MemorySpaceActor {
    type Result = Result<(MemoryDescription, Vec<i32>)>;

    fn handle(&mut self, msg: DescribeMemory, _: &mut Context<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &msg.span, "memory_space.describe", memory = self.index)
                .entered();
        guarded("describe memory space", || {
            let memory = &self.state.memories[self.index];
            let description = memory.description()?;
            let devices = memory
                .devices()?
                .iter()
                .map(|d| d.description().map(|d| d.id))
                .collect::<Result<Vec<_>>>()?;
            Ok((description, devices))
        })
    }
}

/// Uploads host data (already checked against dtype and dims) into this memory space, on
/// `device`. The data is owned (no borrowed form), so the plugin may read it for as long as its
/// semantics allow.
#[derive(Message)]
#[rtype(result = "Result<Arc<ArrayCore>>")]
pub struct UploadRequest {
    /// Who owns the new array: the caller's client guard.
    pub owner: Arc<dyn ArrayOwner>,
    pub site: Site,
    pub data: HostData<'static>,
    pub dtype: ElementType,
    pub dims: Vec<i64>,
    pub device: usize,
    /// Whether the caller named this memory space (else it is the device's default).
    pub explicit_memory: bool,
    pub span: Span,
}

impl Handler<UploadRequest> for MemorySpaceActor {
    type Result = Result<Arc<ArrayCore>>;

    fn handle(&mut self, msg: UploadRequest, _: &mut Context<Self>) -> Self::Result {
        let _span = tracing::debug_span!(parent: &msg.span,
            "memory_space.upload",
            memory = self.index,
            bytes = msg.data.bytes().len()
        )
        .entered();
        guarded("upload", || {
            self.state.upload(
                msg.owner,
                msg.data,
                msg.dtype,
                &msg.dims,
                (msg.device, self.index),
                msg.explicit_memory,
                msg.site,
            )
        })
    }
}
