//! A device actor: owns one PJRT device and serves the requests that must see its live state,
//! in the order they arrive, on its own thread.

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use super::guarded;
use crate::error::Result;
use crate::pjrt::{DeviceMemoryStats, PjrtDevice};

pub struct DeviceActor {
    device: PjrtDevice,
    id: i32,
}

impl DeviceActor {
    pub fn new(device: PjrtDevice, id: i32) -> Self {
        DeviceActor { device, id }
    }
}

impl Actor for DeviceActor {
    type Context = Context<Self>;
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

    fn handle(&mut self, msg: GetMemoryStats, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.memory_stats", device = self.id).entered();
        guarded("memory_stats", || self.device.memory_stats())
    }
}
