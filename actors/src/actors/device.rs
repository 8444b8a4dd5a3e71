//! A device actor: owns the order of the async work sent to one device, and serves it on the
//! device's own thread in arrival order: allocator statistics, async executes and async reads;
//! and owns that work's statistics (no one else writes them). (The blocking API executes on the
//! caller's thread; PJRT orders work per device itself.)

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tokio::sync::oneshot;
use tracing::Span;

use crate::buffers::{ArrayCore, ArrayOwner};
use crate::callbacks::CallbackSet;
use crate::error::Result;
use crate::executable::ExecutableCore;
use crate::execute::Outputs;
use crate::pjrt::DeviceMemoryStats;
use crate::site::Site;
use crate::state::ClientState;
use crate::supervision::{count_restart, serve};

pub struct DeviceActor {
    state: Arc<ClientState>,
    index: usize,
    /// The async work this actor served: its own, read by a message.
    stats: DeviceWorkStats,
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
}

impl DeviceActor {
    pub(crate) fn new(state: Arc<ClientState>, index: usize) -> Self {
        DeviceActor {
            state,
            index,
            stats: DeviceWorkStats::default(),
        }
    }
}

/// Asks for what this device's actor has served.
#[derive(Message)]
#[rtype(result = "Result<DeviceWorkStats>")]
pub struct GetWorkStats;

impl Handler<GetWorkStats> for DeviceActor {
    type Result = Result<DeviceWorkStats>;

    fn handle(&mut self, _: GetWorkStats, _: &mut Context<Self>) -> Self::Result {
        Ok(self.stats)
    }
}

impl Actor for DeviceActor {
    type Context = Context<Self>;
}

impl actix::Supervised for DeviceActor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        count_restart("device");
    }
}

/// Asks for the device allocator's statistics (`None` where the plugin keeps none).
#[derive(Message)]
#[rtype(result = "Result<Option<DeviceMemoryStats>>")]
pub struct GetMemoryStats {
    pub span: Span,
}

impl Handler<GetMemoryStats> for DeviceActor {
    type Result = Result<Option<DeviceMemoryStats>>;

    fn handle(&mut self, msg: GetMemoryStats, ctx: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.memory_stats", device = self.index).entered();
        serve::<Self, _>(ctx, "memory_stats", || {
            self.state.devices[self.index].memory_stats()
        })
    }
}

/// Runs an executable on this device's actor (the first device of a replicated run, or the
/// chosen device of a portable one). Outputs come back flat, device-major, on `reply`: the
/// client actor routes the request here, and the answer goes straight back to the caller.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ExecuteRequest {
    /// Who owns the outputs: the caller's client guard.
    pub owner: Arc<dyn ArrayOwner>,
    pub executable: Arc<ExecutableCore>,
    pub args: Vec<Vec<Arc<ArrayCore>>>,
    pub portable_device: Option<usize>,
    pub callbacks: Option<Arc<CallbackSet>>,
    pub site: Site,
    pub span: Span,
    /// When it was sent, for the queue wait.
    pub sent: std::time::Instant,
    pub reply: oneshot::Sender<Result<Outputs>>,
}

impl ExecuteRequest {
    /// The device whose actor serves it: the chosen one of a portable run, else the first
    /// device the executable runs on.
    pub(crate) fn device(&self) -> Option<usize> {
        self.portable_device
            .or_else(|| self.executable.meta.devices.first().copied())
    }
}

impl Handler<ExecuteRequest> for DeviceActor {
    type Result = ();

    fn handle(&mut self, msg: ExecuteRequest, ctx: &mut Context<Self>) {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.execute", device = self.index, executable = %msg.executable.meta.name)
            .entered();
        let started = std::time::Instant::now();
        let waited = started.saturating_duration_since(msg.sent);
        let result = serve::<Self, _>(ctx, "execute", || {
            let refs: Vec<Vec<&ArrayCore>> = msg
                .args
                .iter()
                .map(|l| l.iter().map(|a| &**a).collect())
                .collect();
            let lists: Vec<&[&ArrayCore]> = refs.iter().map(|l| l.as_slice()).collect();
            self.state.execute(
                &msg.owner,
                &msg.executable,
                &lists,
                msg.portable_device,
                msg.callbacks.as_deref(),
                msg.site.clone(),
            )
        });
        let stats = &mut self.stats;
        stats.executes += 1;
        stats.failed += result.is_err() as u64;
        stats.busy += started.elapsed();
        stats.queue_wait += waited;
        stats.max_queue_wait = stats.max_queue_wait.max(waited);
        // A caller that went away drops the outputs here, which unregisters them.
        let _ = msg.reply.send(result);
    }
}

/// Reads an array of this device back to host bytes.
#[derive(Message)]
#[rtype(result = "Result<Vec<u8>>")]
pub struct ReadRequest {
    pub array: Arc<ArrayCore>,
    pub span: Span,
}

impl Handler<ReadRequest> for DeviceActor {
    type Result = Result<Vec<u8>>;

    fn handle(&mut self, msg: ReadRequest, ctx: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("device.read", device = self.index).entered();
        let started = std::time::Instant::now();
        let read = serve::<Self, _>(ctx, "read", || msg.array.read());
        self.stats.reads += 1;
        self.stats.busy += started.elapsed();
        read
    }
}

/// Test support: a request whose handler panics, to exercise supervision.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct Poison;

#[cfg(feature = "test-hooks")]
impl Handler<Poison> for DeviceActor {
    type Result = Result<()>;

    fn handle(&mut self, _: Poison, ctx: &mut Context<Self>) -> Self::Result {
        serve::<Self, ()>(ctx, "poison", || panic!("poisoned on purpose"))
    }
}
