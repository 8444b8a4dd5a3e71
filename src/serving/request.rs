//! A queued request and how it is answered without running: the messages the batcher actor
//! takes, and the answers for requests that expired, failed or met a stopped batcher.

use std::time::Instant;

use tokio::sync::oneshot;

use super::metrics::{Metrics, Outcome};
use super::queue::{Priority, Queued};
use super::{Response, ShutdownMode};
use crate::host_data::HostArray;
use crate::{Error, Result};

/// A queued request: its inputs, rows, times, and where its answer goes.
pub(crate) struct Pending {
    pub(crate) inputs: Vec<HostArray>,
    pub(crate) rows: usize,
    pub(crate) arrived: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) reply: oneshot::Sender<Result<Response>>,
}

impl Queued for Pending {
    fn rows(&self) -> usize {
        self.rows
    }
    fn arrived(&self) -> Instant {
        self.arrived
    }
    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
    fn cancelled(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The batcher actor's messages.
pub(crate) enum Msg {
    Submit(Pending, Priority),
    /// Device worker `index` finished its batch.
    DeviceFree(usize),
    Shutdown(ShutdownMode),
}

pub(crate) fn answer_expired(p: Pending, now: Instant, metrics: &Metrics) {
    metrics.count(Outcome::Expired, 1);
    let waited = now.saturating_duration_since(p.arrived);
    let _ = p.reply.send(Err(Error::Expired {
        what: "the inference request",
        waited,
    }));
}

pub(crate) fn fail_all(requests: Vec<Pending>, error: Error, metrics: &Metrics) {
    metrics.count(Outcome::Failed, requests.len() as u64);
    for p in requests {
        let _ = p.reply.send(Err(error.clone()));
    }
}

/// The error for a request a stopped batcher will not run.
pub(crate) fn stopped() -> Error {
    Error::Stopped {
        what: "the batcher".into(),
    }
}
