//! `ClientGuard`: what every user handle of one client holds, and the only thing that stops it
//! (mini-redis's `DbDropGuard`). It is also every array's owner, held once per buffer by the
//! array's core (so cloning and listing arrays touch no shared count). Actors hold the shared
//! state alone: the last user handle (or array, or request in flight) going is what shuts the
//! client down, wherever the state still lives.

use std::sync::Arc;

use crate::arrays::buffers::{ArrayCore, ArrayOwner, BufferRegistry};
use crate::arrays::memory_account::MemoryAccount;
use crate::arrays::registry::RegistryHandle;
use crate::client::actor::{ClientActor, RouterHandle, Routes};
use crate::client::runtime::Runtime;
use crate::client::state::ClientState;
use crate::compile::compiler::CompilerPoolHandle;
use crate::compile::service::CompileServiceHandle;
use crate::device::actor::DeviceHandle;
use crate::device::memory_space::MemoryHandle;
use crate::error::{Error, Result};
use crate::protocol::supervision::Mailbox;

/// A started client: its runtime, its shared state and the addresses handles send to. Field
/// order is drop order: the runtime stops (and joins) before the rest is released.
pub struct ClientGuard {
    runtime: Runtime,
    state: Arc<ClientState>,
    client: Mailbox<ClientActor>,
    /// The client actor's own route table, shared.
    routes: Arc<Routes>,
}

impl ClientGuard {
    pub(crate) fn new(
        runtime: Runtime,
        state: Arc<ClientState>,
        client: Mailbox<ClientActor>,
        routes: Arc<Routes>,
    ) -> Self {
        ClientGuard {
            runtime,
            state,
            client,
            routes,
        }
    }

    /// The state the client's handles and actors share.
    pub fn state(&self) -> &Arc<ClientState> {
        &self.state
    }

    /// Stops the actors and joins their threads now; every later call on any handle fails
    /// with `Error::ShutDown`. Idempotent.
    pub fn shutdown(&self) {
        self.state.mark_shut_down();
        self.runtime.stop();
    }

    /// The client actor, which routes async executes and keeps callback bindings.
    pub fn router(&self) -> RouterHandle<'_> {
        RouterHandle { addr: &self.client }
    }

    /// The compile service, which owns the compile queue and the memory cache.
    pub fn compile_service(&self) -> CompileServiceHandle<'_> {
        CompileServiceHandle {
            addr: &self.routes.compile_service,
        }
    }

    /// The compiler pool: loads, ahead-of-time compiles, topologies.
    pub fn compiler_pool(&self) -> CompilerPoolHandle<'_> {
        CompilerPoolHandle {
            addr: &self.routes.compiler,
            state: &self.state,
        }
    }

    /// The actor of device `index`; `Error::InvalidArgument` for a device this process cannot
    /// address.
    pub fn device(&self, index: usize) -> Result<DeviceHandle<'_>> {
        let (addr, _) = self.routes.device(index)?;
        Ok(DeviceHandle { addr })
    }

    /// Async executes in flight on device `index` (0 for a device this process cannot
    /// address): what its actor's queue holds, as the router sees it.
    pub fn device_queue_depth(&self, index: usize) -> usize {
        (self.routes.queues.get(index))
            .and_then(Option::as_ref)
            .map_or(0, |q| q.depth())
    }

    /// `Error::BlockingOnRuntimeThread` when called on device `index`'s own actor thread (a
    /// host callback inside an async execute there), where a blocking request to that actor
    /// would wait on the thread that has to serve it. Everything else may block there.
    pub fn refuse_blocking_on_device(&self, index: usize) -> Result<()> {
        if self.runtime.tag().serves_device_here(index) {
            return Err(Error::BlockingOnRuntimeThread);
        }
        Ok(())
    }

    /// The buffer-registry actor.
    pub fn registry(&self) -> RegistryHandle<'_> {
        RegistryHandle {
            addr: &self.routes.buffer_registry,
        }
    }

    /// The actor of memory space `index`.
    pub fn memory(&self, index: usize) -> MemoryHandle<'_> {
        MemoryHandle {
            addr: &self.routes.memories[index],
        }
    }
}

impl ArrayOwner for ClientGuard {
    fn buffers(&self) -> &BufferRegistry {
        &self.state.buffers
    }

    fn check_open(&self) -> Result<()> {
        self.state.check_open()
    }

    fn memory_account(&self, memory: usize) -> &MemoryAccount {
        &self.state.memory_accounts[memory]
    }

    fn defer_free(&self, device: usize, array: std::sync::Weak<ArrayCore>) {
        if let Ok(actor) = self.device(device) {
            actor.defer_free(array);
        }
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        // Whatever still holds the state (an array inside a message in flight) sees a closed
        // client from now on; the runtime then stops and joins as the field drops.
        self.state.mark_shut_down();
    }
}
