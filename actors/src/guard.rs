//! `ClientGuard`: what every user handle of one client holds, and the only thing that stops it
//! (mini-redis's `DbDropGuard`). It is also every array's owner, held once per buffer by the
//! array's core (so cloning and listing arrays touch no shared count). Actors hold the shared
//! state alone: the last user handle (or array, or request in flight) going is what shuts the
//! client down, wherever the state still lives.

use std::future::Future;
use std::sync::Arc;

use actix::dev::ToEnvelope;
use actix::{Addr, Handler, Message};

use crate::actors::client::{ClientActor, Routes};
use crate::actors::device::{DeferFree, DeviceActor};
use crate::actors::memory_space::MemorySpaceActor;
use crate::actors::registry::BufferRegistryActor;
use crate::buffers::{ArrayCore, ArrayOwner, BufferRegistry};
use crate::error::{Error, Result};
use crate::memory_account::MemoryAccount;
use crate::runtime::Runtime;
use crate::state::ClientState;
use crate::supervision::mailbox_error;

/// A started client: its runtime, its shared state and the addresses handles send to. Field
/// order is drop order: the runtime stops (and joins) before the rest is released.
pub struct ClientGuard {
    runtime: Runtime,
    state: Arc<ClientState>,
    client: Addr<ClientActor>,
    /// The client actor's own route table, shared.
    routes: Arc<Routes>,
}

impl ClientGuard {
    pub(crate) fn new(
        runtime: Runtime,
        state: Arc<ClientState>,
        client: Addr<ClientActor>,
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

    /// Sends a control-plane request to the client actor, which routes it on; the future
    /// resolves to its answer.
    pub fn route<M, T>(&self, msg: M) -> impl Future<Output = Result<T>> + use<M, T>
    where
        ClientActor: Handler<M>,
        <ClientActor as actix::Actor>::Context: ToEnvelope<ClientActor, M>,
        M: Message<Result = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let request = self.client.send(msg);
        async move { request.await.map_err(mailbox_error)? }
    }

    /// Sends a request whose answer comes back on a channel of its own (a compile), through
    /// the client actor.
    pub fn route_detached<M>(&self, msg: M)
    where
        ClientActor: Handler<M>,
        <ClientActor as actix::Actor>::Context: ToEnvelope<ClientActor, M>,
        M: Message<Result = ()> + Send + 'static,
    {
        self.client.do_send(msg);
    }

    /// Sends a request whose answer is not a `Result` to the client actor.
    pub fn route_plain<M>(&self, msg: M) -> impl Future<Output = Result<M::Result>> + use<M>
    where
        ClientActor: Handler<M>,
        <ClientActor as actix::Actor>::Context: ToEnvelope<ClientActor, M>,
        M: Message + Send + 'static,
        M::Result: Send,
    {
        let request = self.client.send(msg);
        async move { request.await.map_err(mailbox_error) }
    }

    /// The actor of device `index`; `Error::InvalidArgument` for a device this process cannot
    /// address.
    pub fn device_actor(&self, index: usize) -> Result<&Addr<DeviceActor>> {
        (self.routes.devices)
            .get(index)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("device index {index} is not addressable here"))
            })
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
    pub fn registry_actor(&self) -> &Addr<BufferRegistryActor> {
        &self.routes.buffer_registry
    }

    /// The actor of memory space `index`.
    pub fn memory_actor(&self, index: usize) -> &Addr<MemorySpaceActor> {
        &self.routes.memories[index]
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
        if let Some(Some(actor)) = self.routes.devices.get(device) {
            actor.do_send(DeferFree(array));
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
