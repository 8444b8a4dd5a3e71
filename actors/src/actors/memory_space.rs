//! A memory-space actor: answers with its live view of one memory space and serves uploads
//! into it that come through the async API.

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use super::guarded;
use crate::dtype::ElementType;
use crate::error::Result;
use crate::open::ClientResources;
use crate::pjrt::{HostData, MemoryDescription};
use crate::registry::{ArrayCore, ArrayOwner, BufferSlot};

pub struct MemorySpaceActor {
    resources: Arc<ClientResources>,
    index: usize,
}

impl MemorySpaceActor {
    pub fn new(resources: Arc<ClientResources>, index: usize) -> Self {
        MemorySpaceActor { resources, index }
    }
}

impl Actor for MemorySpaceActor {
    type Context = Context<Self>;
}

/// Asks the plugin again for the memory space's description and the ids of its devices.
pub struct DescribeMemory {
    pub span: Span,
}

impl Message for DescribeMemory {
    type Result = Result<(MemoryDescription, Vec<i32>)>;
}

impl Handler<DescribeMemory> for MemorySpaceActor {
    type Result = Result<(MemoryDescription, Vec<i32>)>;

    fn handle(&mut self, msg: DescribeMemory, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("memory_space.describe", memory = self.index).entered();
        guarded("describe memory space", || {
            let memory = &self.resources.memories[self.index];
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
/// `device`. The data is owned, so the plugin may read it until the transfer completes.
pub struct UploadRequest {
    pub owner: Arc<dyn ArrayOwner>,
    pub site: crate::site::Site,
    pub data: Arc<[u8]>,
    pub dtype: ElementType,
    pub dims: Vec<i64>,
    pub device: usize,
    pub span: Span,
}

impl Message for UploadRequest {
    type Result = Result<Arc<ArrayCore>>;
}

impl Handler<UploadRequest> for MemorySpaceActor {
    type Result = Result<Arc<ArrayCore>>;

    fn handle(&mut self, msg: UploadRequest, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!(
            "memory_space.upload",
            memory = self.index,
            bytes = msg.data.len()
        )
        .entered();
        guarded("upload", || {
            let res = &self.resources;
            let buffer = res.pjrt.upload(
                HostData::UntilTransfer(msg.data),
                msg.dtype,
                &msg.dims,
                &res.devices[msg.device],
                Some(&res.memories[self.index]),
            )?;
            let slot = BufferSlot::new(buffer, msg.dtype, msg.dims.into(), msg.device, self.index);
            Ok(ArrayCore::register(msg.owner, slot, msg.site))
        })
    }
}
