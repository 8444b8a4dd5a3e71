//! A memory-space actor: owns one PJRT memory space and answers with its live view of it.

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use super::guarded;
use crate::error::Result;
use crate::pjrt::{MemoryDescription, PjrtMemory};

pub struct MemorySpaceActor {
    memory: PjrtMemory,
}

impl MemorySpaceActor {
    pub fn new(memory: PjrtMemory) -> Self {
        MemorySpaceActor { memory }
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
        let _span = tracing::debug_span!("memory_space.describe").entered();
        guarded("describe memory space", || {
            let description = self.memory.description()?;
            let devices = self
                .memory
                .devices()?
                .iter()
                .map(|d| d.description().map(|d| d.id))
                .collect::<Result<Vec<_>>>()?;
            Ok((description, devices))
        })
    }
}
