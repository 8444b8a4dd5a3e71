//! The client actor: the router of async executes and the owner of what routing them needs:
//! the least-loaded choice, the reservation of each run's slot in its device's queue, and the
//! host-callback registrations (which callbacks each live executable was last bound to, so a
//! listed executable runs with them). Everything else goes from the handles straight to the
//! actor that owns it (see `OWNED_HERE`, which a test holds to the handlers).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};

use actix::{Actor, Context, Handler, Message};
use smallvec::SmallVec;

use crate::arrays::registry::BufferRegistryActor;
use crate::callbacks::{CallbackSet, HostCallback};
use crate::client::state::ClientState;
use crate::compile::compiler::CompilerActor;
use crate::compile::service::CompileService;
use crate::device::actor::{DeviceActor, DeviceHandle, ExecuteRequest, Run};
use crate::device::memory_space::MemorySpaceActor;
use crate::device::queue::{DeviceQueue, least_loaded};
use crate::error::{Error, Result};
use crate::execute::Outputs;
use crate::execute::executable::ExecutableCore;
use crate::ids::ExecutableId;
use crate::protocol::supervision::{Mailbox, answer, ask, guarded, tell};

/// Each message the client actor handles, and the state of its own that the handler needs:
/// a message that needs none belongs to another actor, and goes there from its handle.
pub const OWNED_HERE: &[(&str, &str)] = &[
    (
        "ExecuteRequest",
        "the least-loaded choice (`next_device`) and the queue slots it reserves",
    ),
    ("BindCallbacks", "the callback registrations (`callbacks`)"),
    (
        "LiveExecutables",
        "the callback registrations (`callbacks`)",
    ),
];

/// The one route table: where each kind of request goes. The client's guard holds it (an
/// `Arc`) and hands out each actor's handle from it; the client actor reads it to send each
/// routed run to its device.
pub(crate) struct Routes {
    pub compile_service: Mailbox<CompileService>,
    pub compiler: Mailbox<CompilerActor>,
    /// Per device index; `None` for a device this process cannot address.
    pub devices: Vec<Option<Mailbox<DeviceActor>>>,
    /// Per device index, its actor's queue of async work (`None` where `devices` is).
    pub queues: Vec<Option<Arc<DeviceQueue>>>,
    /// Per memory-space index.
    pub memories: Vec<Mailbox<MemorySpaceActor>>,
    pub buffer_registry: Mailbox<BufferRegistryActor>,
}

impl Routes {
    /// Device `index`'s actor and its queue of async work; `Error::InvalidArgument` for a device
    /// this process cannot address.
    pub(crate) fn device(
        &self,
        index: usize,
    ) -> Result<(&Mailbox<DeviceActor>, &Arc<DeviceQueue>)> {
        match (self.devices.get(index), self.queues.get(index)) {
            (Some(Some(addr)), Some(Some(queue))) => Ok((addr, queue)),
            _ => Err(Error::InvalidArgument(format!(
                "device index {index} is not addressable here"
            ))),
        }
    }
}

pub struct ClientActor {
    state: Arc<ClientState>,
    routes: Arc<Routes>,
    /// Per live executable, the callbacks it was last bound to. Weak: the handles own them.
    callbacks: HashMap<ExecutableId, Weak<CallbackSet>>,
    /// Where the next least-loaded choice starts looking, so idle devices take turns.
    next_device: usize,
}

impl ClientActor {
    pub(crate) fn new(state: Arc<ClientState>, routes: Arc<Routes>) -> Self {
        ClientActor {
            state,
            routes,
            callbacks: HashMap::new(),
            next_device: 0,
        }
    }
}

impl Actor for ClientActor {
    type Context = Context<Self>;
}

crate::protocol::supervision::answers_asked!(ClientActor);

impl Handler<ExecuteRequest> for ClientActor {
    type Result = ();

    /// An async execute goes on to its device's actor (the least-loaded one, for a portable run
    /// that names none), which answers the caller directly on the request's reply channel: one
    /// thread wake fewer than answering back through here. Its slot in that device's queue is
    /// reserved here: past the queue's limit the caller gets `Error::Busy` at once.
    fn handle(&mut self, mut msg: ExecuteRequest, _: &mut Context<Self>) {
        let routed = guarded("route execute", || {
            if msg.run.least_loaded {
                let depths: SmallVec<[Option<usize>; 8]> = (self.routes.queues.iter())
                    .map(|q| q.as_ref().map(|q| q.depth()))
                    .collect();
                msg.run.portable_device = least_loaded(&depths, self.next_device);
                self.next_device = msg.run.portable_device.map_or(0, |d| d + 1);
            }
            let Some(device) = msg.device() else {
                let name = &msg.run.executable.meta.name;
                return Err(Error::InvalidArgument(format!(
                    "`{name}` has no device to run on"
                )));
            };
            let (addr, queue) = self.routes.device(device)?;
            Ok((addr, queue.try_reserve()?))
        });
        match routed {
            Ok((addr, slot)) => {
                msg.slot = Some(slot);
                DeviceHandle { addr }.run(msg)
            }
            Err(e) => {
                let _ = msg.reply.send(Err(e));
            }
        }
    }
}

/// Binds host callbacks to a loaded executable (py_client's `host_callbacks` argument): checks
/// that every callback the program calls is given, and registers the set as the executable's,
/// so that `live_executables` hands out handles that run with it.
#[derive(Message)]
#[rtype(result = "Result<Arc<CallbackSet>>")]
pub(crate) struct BindCallbacks {
    executable: Arc<ExecutableCore>,
    callbacks: Vec<HostCallback>,
}

impl Handler<BindCallbacks> for ClientActor {
    type Result = Result<Arc<CallbackSet>>;

    fn handle(&mut self, msg: BindCallbacks, _: &mut Context<Self>) -> Self::Result {
        guarded("bind callbacks", || {
            let needed = &msg.executable.meta.callback_ids;
            let set = Arc::new(CallbackSet::for_program(needed, &msg.callbacks)?);
            self.callbacks.retain(|_, set| set.strong_count() > 0);
            self.callbacks
                .insert(msg.executable.id, Arc::downgrade(&set));
            Ok(set)
        })
    }
}

/// A live loaded executable and the callbacks it was last bound to (if any handle still holds
/// them).
pub type LiveExecutable = (Arc<ExecutableCore>, Option<Arc<CallbackSet>>);

/// Every live loaded executable, with its callbacks.
#[derive(Message)]
#[rtype(result = "Result<Vec<LiveExecutable>>")]
pub(crate) struct LiveExecutables;

impl Handler<LiveExecutables> for ClientActor {
    type Result = Result<Vec<LiveExecutable>>;

    fn handle(&mut self, _: LiveExecutables, _: &mut Context<Self>) -> Self::Result {
        guarded("live executables", || {
            self.state.check_open()?;
            Ok((self.state.live_executables().into_iter())
                .map(|core| {
                    let set = self.callbacks.get(&core.id).and_then(Weak::upgrade);
                    (core, set)
                })
                .collect())
        })
    }
}

/// The one way to reach the client actor: only this builds its messages.
#[derive(Clone, Copy)]
pub struct RouterHandle<'a> {
    pub(crate) addr: &'a Mailbox<ClientActor>,
}

impl RouterHandle<'_> {
    /// Routes an async run to its device's actor (the least-loaded one where the run asks),
    /// which answers on the run's own channel: past the device queue's limit, `Error::Busy`
    /// at once.
    pub fn execute(self, run: Run) -> impl Future<Output = Result<Outputs>> + use<> {
        let (request, answer_on) = DeviceHandle::execute_request(run);
        tell(self.addr, request);
        answer(answer_on)
    }

    /// Binds host callbacks to a loaded executable: checks that every callback the program
    /// calls is given, and registers the set as the executable's.
    pub fn bind_callbacks(
        self,
        executable: Arc<ExecutableCore>,
        callbacks: Vec<HostCallback>,
    ) -> impl Future<Output = Result<Arc<CallbackSet>>> + use<> {
        ask(
            self.addr,
            BindCallbacks {
                executable,
                callbacks,
            },
        )
    }

    /// Every live loaded executable, with the callbacks it was last bound to.
    pub fn live_executables(self) -> impl Future<Output = Result<Vec<LiveExecutable>>> + use<> {
        ask(self.addr, LiveExecutables)
    }
}
