//! A device actor: serves the requests for one device that arrive through its mailbox, in
//! arrival order, on its own thread: allocator statistics, and executes sent by the async API.
//! (The blocking API executes on the caller's thread; PJRT orders work per device itself.)

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use crate::compile::ExecutableCore;
use crate::error::Result;
use crate::execute::execute;
use crate::open::ClientResources;
use crate::pjrt::DeviceMemoryStats;
use crate::registry::{ArrayCore, ArrayOwner};

pub struct DeviceActor {
    resources: Arc<ClientResources>,
    index: usize,
}

impl DeviceActor {
    pub fn new(resources: Arc<ClientResources>, index: usize) -> Self {
        DeviceActor { resources, index }
    }
}

impl Actor for DeviceActor {
    type Context = Context<Self>;
}

impl actix::Supervised for DeviceActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        super::count_restart("device");
    }
}

impl Handler<super::Poison> for DeviceActor {
    type Result = Result<()>;

    fn handle(&mut self, _: super::Poison, ctx: &mut Context<Self>) -> Self::Result {
        super::serve::<Self, ()>(ctx, "poison", || panic!("poisoned on purpose"))
    }
}

/// Asks for the device allocator's statistics (`None` where the plugin keeps none).
pub struct GetMemoryStats {
    pub span: Span,
}

impl Message for GetMemoryStats {
    type Result = Result<Option<DeviceMemoryStats>>;
}

impl Handler<GetMemoryStats> for DeviceActor {
    type Result = Result<Option<DeviceMemoryStats>>;

    fn handle(&mut self, msg: GetMemoryStats, ctx: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.memory_stats", device = self.index).entered();
        super::serve::<Self, _>(ctx, "memory_stats", || {
            self.resources.devices[self.index].memory_stats()
        })
    }
}

/// Runs an executable with this device's actor (the first device of a replicated run, or the
/// chosen device of a portable one).
/// Outputs come back flat, device-major.
pub struct ExecuteRequest {
    pub owner: Arc<dyn ArrayOwner>,
    pub executable: Arc<ExecutableCore>,
    pub args: Vec<Vec<Arc<ArrayCore>>>,
    pub portable_device: Option<usize>,
    pub callbacks: Option<Arc<crate::callbacks::CallbackSet>>,
    pub site: crate::site::Site,
    pub span: Span,
}

impl Message for ExecuteRequest {
    type Result = Result<crate::execute::Outputs>;
}

impl Handler<ExecuteRequest> for DeviceActor {
    type Result = Result<crate::execute::Outputs>;

    fn handle(&mut self, msg: ExecuteRequest, ctx: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.execute", device = self.index, executable = %msg.executable.meta.name)
            .entered();
        super::serve::<Self, _>(ctx, "execute", || {
            let refs: Vec<Vec<&ArrayCore>> = msg
                .args
                .iter()
                .map(|l| l.iter().map(|a| &**a).collect())
                .collect();
            let lists: Vec<&[&ArrayCore]> = refs.iter().map(|l| l.as_slice()).collect();
            execute(
                &self.resources.execute_context(&msg.owner, msg.site.clone()),
                &msg.executable,
                &lists,
                msg.portable_device,
                msg.callbacks.as_deref(),
            )
        })
    }
}

/// Reads an array of this device back to host bytes.
pub struct ReadRequest {
    pub array: Arc<ArrayCore>,
    pub span: Span,
}

impl Message for ReadRequest {
    type Result = Result<Vec<u8>>;
}

impl Handler<ReadRequest> for DeviceActor {
    type Result = Result<Vec<u8>>;

    fn handle(&mut self, msg: ReadRequest, ctx: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.read", device = self.index).entered();
        super::serve::<Self, _>(ctx, "read", || {
            let slot = &msg.array.slot;
            let mut out = vec![0u8; crate::dtype::byte_size(slot.dtype, &slot.dims)?];
            slot.with_buffer(|b| b.read_into(&mut out, slot.dims.len()))?;
            Ok(out)
        })
    }
}
