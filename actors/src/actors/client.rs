//! The client actor: the control plane's router. Compiles, loads, async executes,
//! defragments and compile-cache clears enter here and go on to the actor that owns
//! the work (the compile service, the compiler pool, a device actor, the buffer-registry
//! actor). It owns that route table and the host-callback registrations: which callbacks each
//! live executable was last bound to, so a listed executable runs with them.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use actix::dev::{MessageResponse, ToEnvelope};
use actix::{Actor, Addr, Context, Handler, Message, ResponseFuture};
use smallvec::SmallVec;
use tracing::Span;

use super::compile_service::{ClearMemoryCache, CompileService, ForgetCompiled, Submit};
use super::compiler::{CompileAhead, CompiledAhead, CompilerActor, DeserializeJob};
use super::device::{DeviceActor, ExecuteRequest};
use super::memory_space::MemorySpaceActor;
use super::registry::{BufferRegistryActor, Defragment, DefragmentReport};
use crate::callbacks::{CallbackSet, HostCallback};
use crate::device_queue::{DeviceQueue, least_loaded};
use crate::error::{Error, Result};
use crate::executable::ExecutableCore;
use crate::pjrt::{NamedValue, PjrtTopology};
use crate::registry::ExecutableId;
use crate::site::Site;
use crate::state::ClientState;
use crate::supervision::{guarded, mailbox_error};
use crate::topology::TopologyDescription;

/// The one route table: where each kind of request goes. The client actor routes the control
/// plane by it; the client's guard holds the same table (an `Arc`) for the data plane's reads
/// and uploads, which go straight to the device or memory-space actor that owns them.
pub(crate) struct Routes {
    pub compile_service: Addr<CompileService>,
    pub compiler: Addr<CompilerActor>,
    /// Per device index; `None` for a device this process cannot address.
    pub devices: Vec<Option<Addr<DeviceActor>>>,
    /// Per device index, its actor's queue of async work (`None` where `devices` is).
    pub queues: Vec<Option<Arc<DeviceQueue>>>,
    /// Per memory-space index.
    pub memories: Vec<Addr<MemorySpaceActor>>,
    pub buffer_registry: Addr<BufferRegistryActor>,
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

/// Sends `msg` on to `addr` and answers with its answer, without holding this actor up.
fn forward<A, M, T>(addr: &Addr<A>, msg: M) -> ResponseFuture<Result<T>>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message<Result = Result<T>> + Send + 'static,
    T: Send + 'static,
    Result<T>: MessageResponse<A, M>,
{
    let request = addr.send(msg);
    Box::pin(async move { request.await.map_err(mailbox_error)? })
}

/// Asks for the client's topology description.
#[derive(Message)]
#[rtype(result = "Result<TopologyDescription>")]
pub struct GetTopology {
    pub span: Span,
}

impl Handler<GetTopology> for ClientActor {
    type Result = Result<TopologyDescription>;

    fn handle(&mut self, msg: GetTopology, _: &mut Context<Self>) -> Self::Result {
        let _span = tracing::debug_span!(parent: &msg.span, "client.topology").entered();
        guarded("topology", || TopologyDescription::read(&self.state.pjrt))
    }
}

/// Asks the plugin for a topology by name and options (`PJRT_TopologyDescription_Create`): the
/// devices an ahead-of-time compile may target without this process having them.
#[derive(Message)]
#[rtype(result = "Result<TopologyDescription>")]
pub struct CreateTopology {
    pub name: String,
    pub options: Vec<(String, NamedValue)>,
}

impl Handler<CreateTopology> for ClientActor {
    type Result = Result<TopologyDescription>;

    fn handle(&mut self, msg: CreateTopology, _: &mut Context<Self>) -> Self::Result {
        let _span = tracing::debug_span!("client.create_topology", name = %msg.name).entered();
        guarded("create topology", || {
            let plugin = self.state.pjrt.plugin().clone();
            TopologyDescription::describe(&PjrtTopology::create(plugin, &msg.name, &msg.options)?)
        })
    }
}

impl Handler<Submit> for ClientActor {
    type Result = ();

    /// A compile goes on to the compile service; its answer comes back on the request's own
    /// reply channel, so a caller that drops it is seen there as gone.
    fn handle(&mut self, msg: Submit, _: &mut Context<Self>) {
        self.routes.compile_service.do_send(msg);
    }
}

impl Handler<ForgetCompiled> for ClientActor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: ForgetCompiled, _: &mut Context<Self>) -> Self::Result {
        let request = self.routes.compile_service.send(msg);
        Box::pin(async move { request.await.unwrap_or(false) })
    }
}

impl Handler<ClearMemoryCache> for ClientActor {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, msg: ClearMemoryCache, _: &mut Context<Self>) -> Self::Result {
        let request = self.routes.compile_service.send(msg);
        Box::pin(async move { request.await.unwrap_or(0) })
    }
}

/// Loads envelope-checked executable bytes on the compiler pool and registers the result.
#[derive(Message)]
#[rtype(result = "Result<Arc<ExecutableCore>>")]
pub struct Load {
    pub payload: Vec<u8>,
    pub options: Vec<u8>,
    pub portable: bool,
    pub site: Site,
    pub span: Span,
}

impl Handler<Load> for ClientActor {
    type Result = ResponseFuture<Result<Arc<ExecutableCore>>>;

    fn handle(&mut self, msg: Load, _: &mut Context<Self>) -> Self::Result {
        let request = self.routes.compiler.send(DeserializeJob {
            payload: msg.payload,
            options: msg.options,
            portable: msg.portable,
            span: msg.span,
        });
        let (state, site) = (self.state.clone(), msg.site);
        Box::pin(async move {
            let (exe, meta) = request.await.map_err(mailbox_error)??;
            Ok(state.register_executable(exe, meta, site))
        })
    }
}

impl Handler<CompileAhead> for ClientActor {
    type Result = ResponseFuture<Result<CompiledAhead>>;

    fn handle(&mut self, msg: CompileAhead, _: &mut Context<Self>) -> Self::Result {
        forward(&self.routes.compiler, msg)
    }
}

impl Handler<ExecuteRequest> for ClientActor {
    type Result = ();

    /// An async execute goes on to its device's actor (the least-loaded one, for a portable run
    /// that names none), which answers the caller directly on the request's reply channel: one
    /// thread wake fewer than answering back through here. Its slot in that device's queue is
    /// reserved here: past the queue's limit the caller gets `Error::Busy` at once.
    fn handle(&mut self, mut msg: ExecuteRequest, _: &mut Context<Self>) {
        if msg.least_loaded {
            let depths: SmallVec<[Option<usize>; 8]> = (self.routes.queues.iter())
                .map(|q| q.as_ref().map(|q| q.depth()))
                .collect();
            msg.portable_device = least_loaded(&depths, self.next_device);
            self.next_device = msg.portable_device.map_or(0, |d| d + 1);
        }
        let device = msg.device();
        let route = device.and_then(|d| {
            let actor = self.routes.devices.get(d).cloned().flatten()?;
            Some((actor, self.routes.queues[d].as_ref()?.try_reserve()))
        });
        match route {
            Some((actor, Ok(slot))) => {
                msg.slot = Some(slot);
                actor.do_send(msg)
            }
            Some((_, Err(busy))) => {
                let _ = msg.reply.send(Err(busy));
            }
            None => {
                let name = &msg.executable.meta.name;
                let _ = msg.reply.send(Err(Error::InvalidArgument(match device {
                    None => format!("`{name}` has no device to run on"),
                    Some(d) => format!("device index {d} is not addressable here"),
                })));
            }
        }
    }
}

impl Handler<Defragment> for ClientActor {
    type Result = ResponseFuture<Result<DefragmentReport>>;

    fn handle(&mut self, msg: Defragment, _: &mut Context<Self>) -> Self::Result {
        forward(&self.routes.buffer_registry, msg)
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<super::registry::DefragmentFailingAfter> for ClientActor {
    type Result = ResponseFuture<Result<DefragmentReport>>;

    fn handle(
        &mut self,
        msg: super::registry::DefragmentFailingAfter,
        _: &mut Context<Self>,
    ) -> Self::Result {
        forward(&self.routes.buffer_registry, msg)
    }
}

/// Binds host callbacks to a loaded executable (py_client's `host_callbacks` argument): checks
/// that every callback the program calls is given, and registers the set as the executable's,
/// so that `live_executables` hands out handles that run with it.
#[derive(Message)]
#[rtype(result = "Result<Arc<CallbackSet>>")]
pub struct BindCallbacks {
    pub executable: Arc<ExecutableCore>,
    pub callbacks: Vec<HostCallback>,
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

/// Every live loaded executable, with the callbacks it was last bound to (if any handle still
/// holds them).
#[derive(Message)]
#[rtype(result = "Result<Vec<(Arc<ExecutableCore>, Option<Arc<CallbackSet>>)>>")]
pub struct LiveExecutables;

impl Handler<LiveExecutables> for ClientActor {
    type Result = Result<Vec<(Arc<ExecutableCore>, Option<Arc<CallbackSet>>)>>;

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
