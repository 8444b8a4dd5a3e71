//! The actix `System` a client runs on: started on threads the runtime owns, so callers never run
//! an actix system themselves, and stopped and joined when the last handle goes.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread, ThreadId};

use crate::error::{Error, Result};

thread_local! {
    /// Set on every thread a runtime owns: a blocking call there would wait on its own mailbox.
    static ON_RUNTIME_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the current thread belongs to some client's actor runtime.
pub fn on_runtime_thread() -> bool {
    ON_RUNTIME_THREAD.with(|f| f.get())
}

/// Marks the current thread as a runtime thread (done by every thread the runtime starts).
pub(crate) fn mark_runtime_thread() {
    ON_RUNTIME_THREAD.with(|f| f.set(true));
}

/// Counts threads the runtime cannot join (actix's `SyncArbiter` workers hand out no join
/// handle): each holds a `WorkerToken`, dropped as the last thing the thread does.
#[derive(Clone, Default)]
pub struct WorkerCount(Arc<(parking_lot::Mutex<usize>, parking_lot::Condvar)>);

/// Held by one worker thread for as long as it runs.
pub struct WorkerToken(WorkerCount);

impl WorkerCount {
    pub fn token(&self) -> WorkerToken {
        *self.0.0.lock() += 1;
        WorkerToken(self.clone())
    }

    /// Waits until every token is dropped, or `timeout` passes; returns whether all were.
    pub fn wait_zero(&self, timeout: std::time::Duration) -> bool {
        let (count, cond) = &*self.0;
        let mut n = count.lock();
        let deadline = std::time::Instant::now() + timeout;
        while *n > 0 {
            if cond.wait_until(&mut n, deadline).timed_out() {
                return *n == 0;
            }
        }
        true
    }
}

impl Drop for WorkerToken {
    fn drop(&mut self) {
        let (count, cond) = &*self.0.0;
        *count.lock() -= 1;
        cond.notify_all();
    }
}

/// Owns the system thread and the arbiters started on it; `Drop` stops and joins them all.
pub struct Runtime {
    system: actix_rt::System,
    threads: parking_lot::Mutex<Threads>,
    thread_ids: Vec<ThreadId>,
    workers: WorkerCount,
}

/// The joinable threads, taken by the first `stop`.
struct Threads {
    system_thread: Option<JoinHandle<()>>,
    arbiters: Vec<actix_rt::Arbiter>,
}

impl Runtime {
    /// Starts a system on a new thread and runs `build` inside it to start the actors. `build`
    /// may create arbiters (each a thread) and hands them back so they can be joined.
    pub fn start<T, F>(name: &str, workers: WorkerCount, build: F) -> Result<(Runtime, T)>
    where
        T: Send + 'static,
        F: FnOnce() -> (T, Vec<actix_rt::Arbiter>) + Send + 'static,
    {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let system_thread = thread::Builder::new()
            .name(format!("{name}-system"))
            .spawn(move || {
                mark_runtime_thread();
                let runner = actix_rt::System::new();
                let started = runner.block_on(async move {
                    let (value, arbiters) = build();
                    (actix_rt::System::current(), value, arbiters)
                });
                if tx.send(started).is_ok() {
                    let _ = runner.run();
                }
            })
            .map_err(|e| Error::Cancelled(format!("cannot start the actor system thread: {e}")))?;
        let thread_id = system_thread.thread().id();
        let (system, value, arbiters) = rx
            .recv()
            .map_err(|_| Error::Cancelled("the actor system failed to start".into()))?;
        Ok((
            Runtime {
                system,
                threads: parking_lot::Mutex::new(Threads {
                    system_thread: Some(system_thread),
                    arbiters,
                }),
                thread_ids: vec![thread_id],
                workers,
            },
            value,
        ))
    }

    /// Records a thread this runtime owns outside the arbiters (for the join-on-self check).
    pub fn own_thread(&mut self, id: ThreadId) {
        self.thread_ids.push(id);
    }
}

impl Runtime {
    /// Stops every actor and joins the threads; idempotent (the first call does the work).
    pub fn stop(&self) {
        let mut threads = self.threads.lock();
        self.system.stop();
        for arbiter in &threads.arbiters {
            arbiter.stop();
        }
        // The last handle can be dropped on one of our own threads (a handle inside a message);
        // joining ourselves would hang, so those threads are left to finish on their own.
        let me = thread::current().id();
        if on_runtime_thread() && self.thread_ids.contains(&me) {
            return;
        }
        for arbiter in threads.arbiters.drain(..) {
            let _ = arbiter.join();
        }
        if let Some(t) = threads.system_thread.take() {
            let _ = t.join();
        }
        drop(threads);
        // Sync workers end once the system is gone and their current job (a compile) is done.
        if !self.workers.wait_zero(std::time::Duration::from_secs(120)) {
            tracing::warn!("worker threads still running two minutes after shutdown");
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts an arbiter (a thread with its own event loop) whose thread is marked as ours.
pub fn new_arbiter() -> actix_rt::Arbiter {
    let arbiter = actix_rt::Arbiter::new();
    arbiter.spawn_fn(mark_runtime_thread);
    arbiter
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on the calling thread, parking between polls. The blocking façade
/// of every handle uses this; it refuses to run on a runtime thread, where it would deadlock.
pub fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    if on_runtime_thread() {
        return Err(Error::Cancelled(
            "a blocking call was made from an actor thread; use the async form there".into(),
        ));
    }
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return Ok(v),
            Poll::Pending => thread::park(),
        }
    }
}
