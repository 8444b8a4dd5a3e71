//! The buffer registry actor: the one place whole-registry work runs, one request at a time.
//! Single arrays register and unregister themselves in O(1) (see ARCHITECTURE.md); listing,
//! and later defragment and heap profiles, are messages here.

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use super::guarded;
use crate::error::Result;
use crate::registry::{ArrayCore, BufferRegistry};

pub struct BufferRegistryActor {
    registry: Arc<BufferRegistry>,
}

impl BufferRegistryActor {
    pub fn new(registry: Arc<BufferRegistry>) -> Self {
        BufferRegistryActor { registry }
    }
}

impl Actor for BufferRegistryActor {
    type Context = Context<Self>;
}

/// Lists every live buffer.
pub struct ListBuffers {
    pub span: Span,
}

impl Message for ListBuffers {
    type Result = Result<Vec<Arc<ArrayCore>>>;
}

impl Handler<ListBuffers> for BufferRegistryActor {
    type Result = Result<Vec<Arc<ArrayCore>>>;

    fn handle(&mut self, msg: ListBuffers, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("registry.list").entered();
        guarded("list buffers", || {
            Ok(self
                .registry
                .entries()
                .into_iter()
                .filter_map(|(_, weak)| weak.upgrade())
                .collect())
        })
    }
}
