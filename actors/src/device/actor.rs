//! A device actor: owns the order of the async work sent to one device, and serves it on the
//! device's own thread in arrival order: allocator statistics, async executes and async reads;
//! and owns that work's statistics (no one else writes them). (The blocking API executes on the
//! caller's thread; PJRT orders work per device itself.)

use std::sync::Arc;

use std::future::Future;

use actix::{Actor, Context, Handler, Message};
use tokio::sync::oneshot;
use tracing::Span;

use crate::arrays::buffers::{ArrayCore, ArrayOwner};
use crate::arrays::donation::PendingUse;
use crate::arrays::site::Site;
use crate::callbacks::CallbackSet;
use crate::client::state::ClientState;
use crate::device::queue::{DeviceQueue, QueueSlot};
use crate::error::{Error, Result};
use crate::execute::Outputs;
use crate::execute::executable::ExecutableCore;
use crate::pjrt::DeviceMemoryStats;
use crate::protocol::LookAgain;
use crate::protocol::supervision::{Mailbox, ask, count_restart, guarded, serve, tell};

pub struct DeviceActor {
    state: Arc<ClientState>,
    index: usize,
    /// The async work this actor served: its own, read by a message.
    stats: DeviceWorkStats,
    /// Its work in flight: senders reserve a slot, this actor's handlers release it.
    queue: Arc<DeviceQueue>,
    /// Deleted arrays of this device whose buffers an operation still held: freed here as
    /// soon as it lets go (its own list; looked at every millisecond while not empty).
    deferred_frees: Vec<std::sync::Weak<ArrayCore>>,
    look_again: LookAgain,
}

/// What a device actor served: the async executes and reads sent to it (blocking executes run
/// on their callers' threads and are not counted here).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceWorkStats {
    /// Async executes run (a replicated one counts once, on its first device's actor).
    pub executes: u64,
    /// Of those, the ones that failed.
    pub failed: u64,
    /// Async reads to the host.
    pub reads: u64,
    /// Time spent running them.
    pub busy: std::time::Duration,
    /// Time executes waited in the mailbox before they ran, in all, and the longest wait.
    pub queue_wait: std::time::Duration,
    pub max_queue_wait: std::time::Duration,
    /// Async executes sent to it and not yet computed, when asked.
    pub in_flight: usize,
    /// Deleted arrays whose buffers an operation held at their delete, handed to this actor
    /// to free; and of those, the ones not freed yet, when asked.
    pub frees_deferred: u64,
    pub pending_frees: usize,
}

impl DeviceActor {
    pub(crate) fn new(state: Arc<ClientState>, index: usize, queue: Arc<DeviceQueue>) -> Self {
        DeviceActor {
            state,
            index,
            stats: DeviceWorkStats::default(),
            queue,
            deferred_frees: Vec::new(),
            look_again: LookAgain::default(),
        }
    }
}

/// Asks for what this device's actor has served.
#[derive(Message)]
#[rtype(result = "Result<DeviceWorkStats>")]
pub(crate) struct GetWorkStats;

impl Handler<GetWorkStats> for DeviceActor {
    type Result = Result<DeviceWorkStats>;

    fn handle(&mut self, _: GetWorkStats, ctx: &mut Context<Self>) -> Self::Result {
        serve::<Self, _>(ctx, "work stats", || {
            Ok(DeviceWorkStats {
                in_flight: self.queue.depth(),
                pending_frees: self.deferred_frees.len(),
                ..self.stats
            })
        })
    }
}

impl Actor for DeviceActor {
    type Context = Context<Self>;
}

crate::protocol::supervision::answers_asked!(DeviceActor);

impl actix::Supervised for DeviceActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        count_restart("device");
    }
}

/// Asks for the device allocator's statistics (`None` where the plugin keeps none).
#[derive(Message)]
#[rtype(result = "Result<Option<DeviceMemoryStats>>")]
pub(crate) struct GetMemoryStats {
    span: Span,
}

impl Handler<GetMemoryStats> for DeviceActor {
    type Result = Result<Option<DeviceMemoryStats>>;

    fn handle(&mut self, msg: GetMemoryStats, ctx: &mut Context<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &msg.span, "device.memory_stats", device = self.index)
                .entered();
        serve::<Self, _>(ctx, "memory_stats", || {
            Ok(self.state.devices[self.index].memory_stats()?)
        })
    }
}

/// An async run, as its caller asks for it: what runs, on what, for whom.
pub struct Run {
    /// Who owns the outputs: the caller's client guard.
    pub owner: Arc<dyn ArrayOwner>,
    pub executable: Arc<ExecutableCore>,
    /// Each held as a use queued on its slot until the run is done (a donation elsewhere
    /// refuses to take it meanwhile).
    pub args: Vec<Vec<PendingUse>>,
    /// The parameters it donates (see [`crate::execute::Donate`]).
    pub donate: Vec<usize>,
    pub portable_device: Option<usize>,
    /// A portable run for the client actor to place on the least-loaded device (its
    /// arguments are copied there first where they live elsewhere).
    pub least_loaded: bool,
    pub callbacks: Option<Arc<CallbackSet>>,
    pub site: Site,
}

/// Runs an executable on this device's actor (the first device of a replicated run, or the
/// chosen device of a portable one). Outputs come back flat, device-major, on `reply`: the
/// client actor routes the request here, and the answer goes straight back to the caller.
/// Built only by [`DeviceHandle::execute_request`], for
/// [`RouterHandle::execute`](crate::client::actor::RouterHandle::execute), which routes it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ExecuteRequest {
    pub(crate) run: Run,
    /// Its slot in the device's queue, reserved by the router; released once its outputs are
    /// computed.
    pub(crate) slot: Option<QueueSlot>,
    pub(crate) span: Span,
    /// When it was sent, for the queue wait.
    pub(crate) sent: std::time::Instant,
    pub(crate) reply: oneshot::Sender<Result<Outputs>>,
}

impl ExecuteRequest {
    /// The device whose actor serves it: the chosen one of a portable run, else the first
    /// device the executable runs on.
    pub(crate) fn device(&self) -> Option<usize> {
        (self.run.portable_device).or_else(|| self.run.executable.meta.devices.first().copied())
    }
}

impl Handler<ExecuteRequest> for DeviceActor {
    type Result = ();

    fn handle(&mut self, msg: ExecuteRequest, ctx: &mut Context<Self>) {
        let run = msg.run;
        let _span = tracing::debug_span!(parent: &msg.span, "device.execute", device = self.index, executable = %run.executable.meta.name)
            .entered();
        let started = std::time::Instant::now();
        let waited = started.saturating_duration_since(msg.sent);
        let result = serve::<Self, _>(ctx, "execute", || {
            let placed;
            let args = match run.least_loaded {
                // A copy is not what the caller gave: it is never donated.
                true if !run.donate.is_empty() => {
                    return Err(Error::InvalidArgument(
                        "a least-loaded run cannot donate its arguments".into(),
                    ));
                }
                true => {
                    placed = self.placed_here(&run.args, run.site.clone())?;
                    &placed
                }
                false => &run.args,
            };
            let refs: Vec<Vec<&ArrayCore>> = args
                .iter()
                .map(|l| l.iter().map(|a| &**a).collect())
                .collect();
            let lists: Vec<&[&ArrayCore]> = refs.iter().map(|l| l.as_slice()).collect();
            self.state.execute(
                &run.owner,
                &run.executable,
                &lists,
                run.site.clone(),
                crate::execute::ExecuteOptions {
                    portable_device: run.portable_device,
                    callbacks: run.callbacks.as_deref(),
                    donate: crate::execute::Donate {
                        params: &run.donate,
                        queued: true,
                    },
                },
            )
        });
        let stats = &mut self.stats;
        stats.executes += 1;
        stats.failed += result.is_err() as u64;
        stats.busy += started.elapsed();
        stats.queue_wait += waited;
        stats.max_queue_wait = stats.max_queue_wait.max(waited);
        if let (Ok(outputs), Some(slot)) = (&result, msg.slot) {
            release_when_computed(outputs, slot);
        }
        // A caller that went away drops the outputs here, which unregisters them.
        let _ = msg.reply.send(result);
    }
}

/// A deleted array of this device whose buffer an operation still holds, to free once it lets
/// go.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DeferFree(pub(crate) std::sync::Weak<ArrayCore>);

impl Handler<DeferFree> for DeviceActor {
    type Result = ();

    fn handle(&mut self, msg: DeferFree, ctx: &mut Context<Self>) {
        self.stats.frees_deferred += 1;
        self.deferred_frees.push(msg.0);
        // Nobody waits for an answer: a panic is logged by `guarded`, the list kept.
        let _ = guarded("deferred free", || {
            self.free_deferred(ctx);
            Ok(())
        });
    }
}

impl DeviceActor {
    /// Frees the deferred buffers no operation holds now (an array whose last handle went
    /// freed its own); looks again in a millisecond while any remain.
    fn free_deferred(&mut self, ctx: &mut Context<Self>) {
        (self.deferred_frees).retain(|array| array.upgrade().is_some_and(|a| !a.free_if_deleted()));
        if !self.deferred_frees.is_empty() {
            LookAgain::schedule(self, ctx, |a| &mut a.look_again, Self::free_deferred);
        }
    }

    /// The arguments of a run placed here by the router, each copied to this device where it
    /// lives on another (the copies are dropped with the request).
    fn placed_here(&self, args: &[Vec<PendingUse>], site: Site) -> Result<Vec<Vec<PendingUse>>> {
        let memory = (self.state.snapshot.devices[self.index].default_memory).ok_or_else(|| {
            Error::InvalidArgument(format!("device {} has no memory space", self.index))
        })?;
        (args.iter())
            .map(|list| {
                (list.iter())
                    .map(|a| match a.slot.device == self.index {
                        true => Ok(PendingUse::new(a.array().clone())),
                        false => (self.state)
                            .copy(a, (self.index, memory), false, site.clone())
                            .map(PendingUse::new),
                    })
                    .collect()
            })
            .collect()
    }
}

/// Holds a request's queue slot until its outputs are computed (a plugin may answer an execute
/// before the device has run it), then lets it go.
fn release_when_computed(outputs: &Outputs, slot: QueueSlot) {
    let Some(last) = outputs.last() else { return };
    let mut slot = Some(slot);
    let _ = last.slot.with_buffer(|b| {
        let release = slot.take();
        Ok(b.ready_event()?.on_ready(Box::new(move || drop(release)))?)
    });
    // Where the event could not be had, the slot goes now (dropped with `slot`).
}

/// Reads an array of this device back to host bytes.
#[derive(Message)]
#[rtype(result = "Result<Vec<u8>>")]
pub(crate) struct ReadRequest {
    array: PendingUse,
    span: Span,
}

impl Handler<ReadRequest> for DeviceActor {
    type Result = Result<Vec<u8>>;

    fn handle(&mut self, msg: ReadRequest, ctx: &mut Context<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &msg.span, "device.read", device = self.index).entered();
        let started = std::time::Instant::now();
        let read = serve::<Self, _>(ctx, "read", || msg.array.read());
        self.stats.reads += 1;
        self.stats.busy += started.elapsed();
        read
    }
}

/// Copies an array of this device to device `to` (its default memory space `memory`) or, with
/// `to_memory`, into memory space `memory`: the async copy, in order with this device's work.
#[derive(Message)]
#[rtype(result = "Result<Arc<ArrayCore>>")]
pub(crate) struct CopyRequest {
    array: PendingUse,
    to: (usize, usize),
    to_memory: bool,
    site: Site,
    span: Span,
}

impl Handler<CopyRequest> for DeviceActor {
    type Result = Result<Arc<ArrayCore>>;

    fn handle(&mut self, msg: CopyRequest, ctx: &mut Context<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &msg.span, "device.copy", device = self.index).entered();
        serve::<Self, _>(ctx, "copy", || {
            (self.state).copy(&msg.array, msg.to, msg.to_memory, msg.site)
        })
    }
}

/// Test support: a request whose handler panics, to exercise supervision.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub(crate) struct Poison;

#[cfg(feature = "test-hooks")]
impl Handler<Poison> for DeviceActor {
    type Result = Result<()>;

    fn handle(&mut self, _: Poison, ctx: &mut Context<Self>) -> Self::Result {
        serve::<Self, ()>(ctx, "poison", || panic!("poisoned on purpose"))
    }
}

/// Test support: a request whose handler keeps the actor busy until its release is sent or
/// dropped (at most 30 s), so that work sent after it provably waits in the mailbox.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub(crate) struct Hold(crossbeam_channel::Receiver<()>);

#[cfg(feature = "test-hooks")]
impl Handler<Hold> for DeviceActor {
    type Result = Result<()>;

    fn handle(&mut self, msg: Hold, ctx: &mut Context<Self>) -> Self::Result {
        serve::<Self, ()>(ctx, "hold", || {
            let _ = msg.0.recv_timeout(std::time::Duration::from_secs(30));
            Ok(())
        })
    }
}

/// The one way to reach a device actor: only this builds its messages, taking the caller's
/// span as it sends. Every request resolves to a `Result`, whoever answers it.
#[derive(Clone, Copy)]
pub struct DeviceHandle<'a> {
    pub(crate) addr: &'a Mailbox<DeviceActor>,
}

impl DeviceHandle<'_> {
    /// A request to run `run` on a device actor, sent now from the current span; its answer
    /// comes on the receiver. The router picks the device and sends it on.
    pub(crate) fn execute_request(
        run: Run,
    ) -> (ExecuteRequest, oneshot::Receiver<Result<Outputs>>) {
        let (reply, answer) = oneshot::channel();
        let request = ExecuteRequest {
            run,
            slot: None,
            span: Span::current(),
            sent: std::time::Instant::now(),
            reply,
        };
        (request, answer)
    }

    /// The device allocator's statistics.
    pub fn memory_stats(self) -> impl Future<Output = Result<Option<DeviceMemoryStats>>> + use<> {
        ask(
            self.addr,
            GetMemoryStats {
                span: Span::current(),
            },
        )
    }

    /// What this device's actor has served.
    pub fn work_stats(self) -> impl Future<Output = Result<DeviceWorkStats>> + use<> {
        ask(self.addr, GetWorkStats)
    }

    /// Reads `array` (of this device) back to host bytes, in order with the device's work.
    pub fn read(self, array: Arc<ArrayCore>) -> impl Future<Output = Result<Vec<u8>>> + use<> {
        ask(
            self.addr,
            ReadRequest {
                array: PendingUse::new(array),
                span: Span::current(),
            },
        )
    }

    /// Copies `array` (of this device) to `to` (device, memory space), in order with the
    /// device's work; `to_memory` says the caller named the memory space.
    pub fn copy(
        self,
        array: Arc<ArrayCore>,
        to: (usize, usize),
        to_memory: bool,
        site: Site,
    ) -> impl Future<Output = Result<Arc<ArrayCore>>> + use<> {
        let span = Span::current();
        ask(
            self.addr,
            CopyRequest {
                array: PendingUse::new(array),
                to,
                to_memory,
                site,
                span,
            },
        )
    }

    /// Test support: a request whose handler panics.
    #[cfg(feature = "test-hooks")]
    pub fn poison(self) -> impl Future<Output = Result<()>> + use<> {
        ask(self.addr, Poison)
    }

    /// Test support: keeps the actor busy until `release` is sent to or dropped; the request
    /// is in the mailbox when this returns.
    #[cfg(feature = "test-hooks")]
    pub fn hold(
        self,
        release: crossbeam_channel::Receiver<()>,
    ) -> impl Future<Output = Result<()>> + use<> {
        ask(self.addr, Hold(release))
    }

    /// Hands the actor a deleted array whose buffer an operation still holds, to free once it
    /// lets go; nobody waits for the answer.
    pub(crate) fn defer_free(self, array: std::sync::Weak<ArrayCore>) {
        tell(self.addr, DeferFree(array));
    }

    /// Sends a routed run on, its slot reserved; the run's caller waits on its own channel.
    pub(crate) fn run(self, request: ExecuteRequest) {
        tell(self.addr, request);
    }
}
