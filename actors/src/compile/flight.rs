//! Single flight and the compile queue as plain data, free of actors and of PJRT: who waits
//! for which key, what is queued, and how many workers are busy. The compile service actor
//! owns one; the unit tests below drive one as a fake worker pool would.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use tokio::sync::oneshot;

use crate::compile::cache::CancelToken;

/// Someone waiting for a result.
pub(crate) struct Waiter<R> {
    pub reply: oneshot::Sender<R>,
    pub cancel: Option<CancelToken>,
}

impl<R> Waiter<R> {
    fn abandoned(&self) -> bool {
        self.reply.is_closed() || self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }
}

/// What [`SingleFlight::submit`] did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Submitted {
    /// The first request for its key: queued.
    Queued,
    /// Joined a request for the same key, queued or running.
    Joined,
}

/// The queue of distinct keys and the waiters of each, bounded by `pool_size` running jobs.
pub(crate) struct SingleFlight<K, J, R> {
    pool_size: usize,
    running: usize,
    queue: VecDeque<(K, J)>,
    waiting: HashMap<K, Vec<Waiter<R>>>,
}

impl<K: Hash + Eq + Copy, J, R: Clone> SingleFlight<K, J, R> {
    pub fn new(pool_size: usize) -> Self {
        SingleFlight {
            pool_size: pool_size.max(1),
            running: 0,
            queue: VecDeque::new(),
            waiting: HashMap::new(),
        }
    }

    /// Queues `job` for `key`, or adds `waiter` to a request for `key` already queued or running.
    pub fn submit(&mut self, key: K, job: J, waiter: Waiter<R>) -> Submitted {
        if let Some(waiters) = self.waiting.get_mut(&key) {
            waiters.push(waiter);
            return Submitted::Joined;
        }
        self.waiting.insert(key, vec![waiter]);
        self.queue.push_back((key, job));
        Submitted::Queued
    }

    /// The next job to hand a free worker, counted as running; `None` when every worker is busy
    /// or nothing is queued. Requests everyone has abandoned leave the queue here, never run;
    /// `dropped` counts them.
    pub fn next_job(&mut self, dropped: &mut usize) -> Option<(K, J)> {
        while self.running < self.pool_size {
            let (key, job) = self.queue.pop_front()?;
            let waiters = self.waiting.entry(key).or_default();
            waiters.retain(|w| !w.abandoned());
            if waiters.is_empty() {
                self.waiting.remove(&key);
                *dropped += 1;
                continue;
            }
            self.running += 1;
            return Some((key, job));
        }
        None
    }

    /// Whether anyone still waits for `key`'s result (a waiter not cancelled, not gone).
    pub fn anyone_waiting(&self, key: &K) -> bool {
        (self.waiting.get(key)).is_some_and(|ws| ws.iter().any(|w| !w.abandoned()))
    }

    /// A worker finished `key`: its result goes to every waiter still there. Returns whether
    /// anyone took it (a result no one waits for is the caller's to drop).
    pub fn finish(&mut self, key: K, result: R) -> bool {
        self.running = self.running.saturating_sub(1);
        let mut delivered = false;
        for w in self.waiting.remove(&key).unwrap_or_default() {
            if !w.abandoned() {
                delivered |= w.reply.send(result.clone()).is_ok();
            }
        }
        delivered
    }

    /// Jobs running on workers now.
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Flight = SingleFlight<u32, &'static str, u32>;

    fn waiter(cancel: Option<&CancelToken>) -> (Waiter<u32>, oneshot::Receiver<u32>) {
        let (reply, rx) = oneshot::channel();
        let cancel = cancel.cloned();
        (Waiter { reply, cancel }, rx)
    }

    /// Hands out jobs as a pool of workers would: everything it can, now.
    fn drain(flight: &mut Flight) -> (Vec<(u32, &'static str)>, usize) {
        let mut dropped = 0;
        let mut jobs = Vec::new();
        while let Some(job) = flight.next_job(&mut dropped) {
            jobs.push(job);
        }
        (jobs, dropped)
    }

    #[test]
    fn thirty_two_identical_requests_run_one_job_and_all_get_its_result() {
        let mut flight = Flight::new(4);
        let mut receivers = Vec::new();
        for i in 0..32 {
            let (w, rx) = waiter(None);
            let expected = if i == 0 {
                Submitted::Queued
            } else {
                Submitted::Joined
            };
            assert_eq!(flight.submit(7, "compile", w), expected);
            receivers.push(rx);
        }
        let (jobs, dropped) = drain(&mut flight);
        assert_eq!((jobs, dropped), (vec![(7, "compile")], 0));
        assert!(flight.finish(7, 99));
        for mut rx in receivers {
            assert_eq!(rx.try_recv().unwrap(), 99);
        }
        assert_eq!(flight.running(), 0);
    }

    #[test]
    fn no_more_jobs_run_than_workers_and_each_freed_worker_takes_the_next() {
        let mut flight = Flight::new(2);
        let _receivers: Vec<_> = (0..5)
            .map(|key| {
                let (w, rx) = waiter(None);
                flight.submit(key, "job", w);
                rx
            })
            .collect();
        let (jobs, _) = drain(&mut flight);
        assert_eq!(jobs.iter().map(|j| j.0).collect::<Vec<_>>(), [0, 1]);
        flight.finish(0, 0);
        let (jobs, _) = drain(&mut flight);
        assert_eq!(jobs.iter().map(|j| j.0).collect::<Vec<_>>(), [2]);
        assert_eq!(flight.running(), 2);
    }

    #[test]
    fn a_request_everyone_abandoned_leaves_the_queue_without_running() {
        let mut flight = Flight::new(1);
        let token = CancelToken::new();
        let (cancelled, _rx1) = waiter(Some(&token));
        let (dropped_rx, rx2) = waiter(None);
        let (kept, mut rx3) = waiter(None);
        flight.submit(1, "cancelled", cancelled);
        flight.submit(2, "receiver dropped", dropped_rx);
        flight.submit(3, "kept", kept);
        token.cancel();
        drop(rx2);
        let (jobs, dropped) = drain(&mut flight);
        assert_eq!((jobs, dropped), (vec![(3, "kept")], 2));
        assert!(flight.finish(3, 5));
        assert_eq!(rx3.try_recv().unwrap(), 5);
    }

    #[test]
    fn a_result_abandoned_mid_run_is_not_delivered_and_a_late_joiner_still_is() {
        let mut flight = Flight::new(1);
        let (first, rx1) = waiter(None);
        flight.submit(9, "job", first);
        let (jobs, _) = drain(&mut flight);
        assert_eq!(jobs.len(), 1);
        drop(rx1);
        assert!(
            !flight.finish(9, 1),
            "nobody waits: the caller drops the result"
        );
        let (first, rx1) = waiter(None);
        flight.submit(9, "job", first);
        drain(&mut flight);
        let (late, mut rx2) = waiter(None);
        assert_eq!(flight.submit(9, "job", late), Submitted::Joined);
        drop(rx1);
        assert!(flight.finish(9, 2));
        assert_eq!(rx2.try_recv().unwrap(), 2);
    }
}
