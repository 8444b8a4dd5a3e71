//! The batch scheduler: the one owner of a batcher's queue (its mailbox is a channel) and of
//! which devices are free; it decides when a batch goes and to which device. An actor in all
//! but its plumbing: a thread of its own that sleeps until a message, a batch falling due or a
//! deadline (`recv_timeout`), which actix's mailboxes do not offer, and the public crate does
//! not depend on actix. It answers on each request's own oneshot channel, as the core does.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::admission::Admission;
use super::metrics::{Metrics, Outcome};
use super::queue::{BatchQueue, Taken, When};
use super::request::{Msg, Pending, answer_expired, fail_all, stopped};
use super::{BatcherConfig, ShutdownMode};

/// A batcher's scheduler: the one owner of the queue and of which devices are free.
pub(crate) struct BatchScheduler {
    config: BatcherConfig,
    metrics: Arc<Metrics>,
    admission: Arc<Admission>,
    queue: BatchQueue<Pending>,
    /// Each device worker's batch channel and thread.
    workers: Vec<(Sender<Vec<Pending>>, std::thread::JoinHandle<()>)>,
    /// Workers with no batch, most recently freed last (reused first: its caches are warm).
    free: Vec<usize>,
    shutdown: Option<ShutdownMode>,
    /// When `shutdown` was first asked for: running batches get `shutdown_grace` from then.
    shutdown_at: Option<Instant>,
}

impl BatchScheduler {
    pub(crate) fn new(
        config: BatcherConfig,
        metrics: Arc<Metrics>,
        admission: Arc<Admission>,
        workers: Vec<(Sender<Vec<Pending>>, std::thread::JoinHandle<()>)>,
    ) -> BatchScheduler {
        let free = (0..workers.len()).rev().collect();
        BatchScheduler {
            config,
            metrics,
            admission,
            queue: BatchQueue::new(),
            workers,
            free,
            shutdown: None,
            shutdown_at: None,
        }
    }

    pub(crate) fn run(mut self, rx: Receiver<Msg>) {
        loop {
            // Sleep until a message, a batch falls due (while a device is free), or a deadline.
            // crossbeam spins and yields briefly before it parks; a channel that parks at once
            // (std's mpsc) measured 20 µs more server CPU a request (docs/serving.md).
            let due = (!self.free.is_empty())
                .then(|| self.queue.due(self.config.max_delay))
                .flatten();
            let grace_ends =
                (self.shutdown_at).and_then(|at| at.checked_add(self.config.shutdown_grace));
            let wake = [due, self.queue.earliest_deadline(), grace_ends]
                .into_iter()
                .flatten()
                .min();
            let first = match wake {
                Some(at) => rx.recv_deadline(at),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match first {
                Ok(msg) => self.handle(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.shutdown = Some(ShutdownMode::Drain),
            }
            // Everything else already waiting, so a burst forms one batch.
            while let Ok(msg) = rx.try_recv() {
                self.handle(msg);
            }
            self.dispatch();
            if self.shutdown.is_some()
                && self.queue.is_empty()
                && self.free.len() == self.workers.len()
            {
                break;
            }
            if grace_ends.is_some_and(|end| Instant::now() >= end) {
                self.give_up();
                self.refuse_late(&rx);
                return;
            }
        }
        for (batches, thread) in self.workers.drain(..) {
            drop(batches);
            let _ = thread.join();
        }
        self.refuse_late(&rx);
    }

    /// Answers `Stopped` to requests that reached the mailbox after the actor stopped taking
    /// them: a submitter can pass the gate just before `shutdown` closes it and send just after
    /// the actor's last look. Closing here too makes `settle` end even when the last handle's
    /// drop, not `shutdown`, stopped the actor.
    fn refuse_late(&self, rx: &Receiver<Msg>) {
        self.admission.close();
        self.admission.settle();
        let late: Vec<Pending> = (rx.try_iter())
            .filter_map(|msg| match msg {
                Msg::Submit(p, _) => Some(p),
                Msg::DeviceFree(_) | Msg::Shutdown(_) => None,
            })
            .collect();
        self.metrics
            .queued
            .fetch_sub(late.len(), std::sync::atomic::Ordering::AcqRel);
        fail_all(late, stopped(), &self.metrics);
    }

    /// The shutdown grace has passed with batches still running (a program that does not
    /// end): answer what is queued `Stopped`, join the idle workers, and leave the busy ones to
    /// finish on their own (their batch's callers are answered if their execute ever returns).
    fn give_up(&mut self) {
        let queued = self.queue.drain_all();
        self.metrics
            .queued
            .fetch_sub(queued.len(), std::sync::atomic::Ordering::AcqRel);
        fail_all(queued, stopped(), &self.metrics);
        let busy = self.workers.len() - self.free.len();
        tracing::warn!(
            busy,
            grace = ?self.config.shutdown_grace,
            "batcher shutdown: batches still running after the grace; leaving them"
        );
        for (index, (batches, thread)) in self.workers.drain(..).enumerate() {
            drop(batches);
            if self.free.contains(&index) {
                let _ = thread.join();
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Submit(p, priority) => {
                if self.shutdown == Some(ShutdownMode::Fail) {
                    self.metrics
                        .queued
                        .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                    fail_all(vec![p], stopped(), &self.metrics);
                } else {
                    self.queue.push(p, priority);
                }
            }
            Msg::DeviceFree(index) => self.free.push(index),
            Msg::Shutdown(mode) => {
                self.shutdown_at.get_or_insert_with(Instant::now);
                if mode == ShutdownMode::Fail || self.shutdown.is_none() {
                    self.shutdown = Some(mode);
                }
                if mode == ShutdownMode::Fail {
                    let all = self.queue.drain_all();
                    self.metrics
                        .queued
                        .fetch_sub(all.len(), std::sync::atomic::Ordering::AcqRel);
                    fail_all(all, stopped(), &self.metrics);
                }
            }
        }
    }

    /// Sends ready batches to free devices; answers what expired or was cancelled on the way.
    fn dispatch(&mut self) {
        let now = Instant::now();
        if self.queue.earliest_deadline().is_some_and(|d| now >= d) {
            let swept = self.queue.sweep(now);
            self.settle(swept, now);
        }
        let draining = self.shutdown.is_some();
        loop {
            let when = When {
                draining,
                nothing_running: !self.config.wait_when_idle
                    && self.free.len() == self.workers.len(),
            };
            let (rows, delay) = (self.config.max_batch_size, self.config.max_delay);
            if self.free.is_empty() || !self.queue.ready(now, rows, delay, when) {
                break;
            }
            let mut taken = self.queue.take(self.config.max_batch_size, now);
            let batch = std::mem::take(&mut taken.batch);
            self.metrics
                .queued
                .fetch_sub(batch.len(), std::sync::atomic::Ordering::AcqRel);
            self.settle(taken, now);
            if batch.is_empty() {
                continue;
            }
            let device = self.free.pop().expect("a free device");
            if let Err(e) = self.workers[device].0.send(batch) {
                fail_all(e.into_inner(), stopped(), &self.metrics);
            }
        }
    }

    /// Answers expired requests and counts cancelled ones.
    fn settle(&self, taken: Taken<Pending>, now: Instant) {
        let n = taken.expired.len() + taken.cancelled.len();
        self.metrics
            .queued
            .fetch_sub(n, std::sync::atomic::Ordering::AcqRel);
        self.metrics
            .count(Outcome::Cancelled, taken.cancelled.len() as u64);
        for p in taken.expired {
            answer_expired(p, now, &self.metrics);
        }
    }
}
