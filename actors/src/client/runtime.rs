//! The actix `System` a client runs on: started on threads the runtime owns, so callers never run
//! an actix system themselves, and stopped and joined when the last handle goes.

use crate::lock_rank::{RUNTIME_THREADS, RankedMutex, WORKER_COUNT};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};

use crate::error::{Error, Result};

thread_local! {
    /// The tag of the runtime that owns this thread (0: none): a runtime stopped there must not
    /// join its own thread, and a blocking call there may wait on its own mailbox.
    static RUNTIME_TAG: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// On a device actor's thread, the device it serves (its index in the client).
    static SERVED_DEVICE: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    /// On an actor thread, the flag its senders raise (see `Mail`).
    static MAIL: std::cell::RefCell<Option<Arc<Mail>>> = const { std::cell::RefCell::new(None) };
}

/// An actor thread's "mail came" flag. Every send to an actor goes through a `Mailbox`, which
/// raises the flag of the thread that actor runs on; the thread, looking for work before it
/// parks, sees it and serves the message at once instead of after a wake-up. (actix wakes an
/// actor through its arbiter's local task set, which tokio's metrics do not show.)
#[derive(Debug, Default)]
pub struct Mail(std::sync::atomic::AtomicBool);

impl Mail {
    /// Says a message was sent to an actor on this flag's thread.
    pub(crate) fn announce(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether mail came since the last look, clearing the flag.
    fn take(&self) -> bool {
        self.0.swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Makes this the current thread's flag, which its park hook watches.
    fn watch_here(self: Arc<Self>) {
        MAIL.with(|m| *m.borrow_mut() = Some(self));
    }
}

/// The flag of the current thread, an actor thread of some runtime (the system thread, while
/// its actors are started), or a flag no thread watches elsewhere.
pub(crate) fn current_mail() -> Arc<Mail> {
    MAIL.with(|m| m.borrow().clone()).unwrap_or_default()
}

/// Names one runtime; every thread it starts (system, arbiters, sync workers) carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeTag(u64);

impl RuntimeTag {
    fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        RuntimeTag(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// Marks the current thread as one of this runtime's.
    pub(crate) fn mark_current_thread(self) {
        RUNTIME_TAG.with(|t| t.set(self.0));
    }

    /// Whether the current thread is one of this runtime's.
    fn owns_current_thread(self) -> bool {
        RUNTIME_TAG.with(|t| t.get()) == self.0
    }

    /// Starts the arbiter (a thread with its own event loop) of device `device`'s actor,
    /// carrying this tag and the device it serves.
    pub(crate) fn new_device_arbiter(self, device: usize) -> (actix_rt::Arbiter, Arc<Mail>) {
        let (arbiter, mail) = self.new_arbiter();
        arbiter.spawn_fn(move || SERVED_DEVICE.with(|d| d.set(Some(device))));
        (arbiter, mail)
    }

    /// Starts an arbiter (a thread with its own event loop) for an actor whose long handlers
    /// must not stall the system thread's actors, carrying this tag; with the flag its senders
    /// raise.
    pub(crate) fn new_arbiter(self) -> (actix_rt::Arbiter, Arc<Mail>) {
        let mail = Arc::new(Mail::default());
        let arbiter = actix_rt::Arbiter::with_tokio_rt(actor_tokio_runtime);
        let watched = mail.clone();
        arbiter.spawn_fn(move || {
            self.mark_current_thread();
            watched.watch_here();
        });
        (arbiter, mail)
    }

    /// Whether the current thread is this runtime's actor thread for `device`.
    pub fn serves_device_here(self, device: usize) -> bool {
        self.owns_current_thread() && SERVED_DEVICE.with(|d| d.get()) == Some(device)
    }
}

/// Whether the current thread belongs to some client's actor runtime.
pub fn on_runtime_thread() -> bool {
    RUNTIME_TAG.with(|t| t.get()) != 0
}

/// Counts threads the runtime cannot join (actix's `SyncArbiter` workers hand out no join
/// handle): each holds a `WorkerToken`, dropped as the last thing the thread does.
#[derive(Clone)]
pub struct WorkerCount(Arc<(RankedMutex<usize>, parking_lot::Condvar)>);

impl Default for WorkerCount {
    fn default() -> Self {
        let count = RankedMutex::new(WORKER_COUNT, 0);
        WorkerCount(Arc::new((count, parking_lot::Condvar::new())))
    }
}

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
            if n.wait_until(cond, deadline).timed_out() {
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
    threads: RankedMutex<Threads>,
    tag: RuntimeTag,
    workers: WorkerCount,
}

/// How long `stop` waits by default for the worker threads' current jobs (a compile) once the
/// actors are stopped: past it, they finish unjoined.
pub const DEFAULT_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The joinable threads, taken by the first `stop`.
struct Threads {
    system_thread: Option<JoinHandle<()>>,
    arbiters: Vec<actix_rt::Arbiter>,
    /// The wait for the worker threads at the end of `stop`.
    worker_wait: std::time::Duration,
}

impl Runtime {
    /// Starts a system on a new thread and runs `build` inside it to start the actors. `build`
    /// may create arbiters (each a thread, from `RuntimeTag::new_device_arbiter`) and hands them
    /// back so they can be joined.
    pub fn start<T, F>(name: &str, workers: WorkerCount, build: F) -> Result<(Runtime, T)>
    where
        T: Send + 'static,
        F: FnOnce(RuntimeTag) -> (T, Vec<actix_rt::Arbiter>) + Send + 'static,
    {
        let tag = RuntimeTag::next();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let system_thread = thread::Builder::new()
            .name(format!("{name}-system"))
            .spawn(move || {
                tag.mark_current_thread();
                // The system thread routes and queues; a plugin call here would hold every
                // message behind it (counted, and the test suite holds the count at 0).
                crate::pjrt::forbid_plugin_calls_on_this_thread();
                Arc::new(Mail::default()).watch_here();
                let runner = actix_rt::System::with_tokio_rt(actor_tokio_runtime);
                let started = runner.block_on(async move {
                    let (value, arbiters) = build(tag);
                    (actix_rt::System::current(), value, arbiters)
                });
                if tx.send(started).is_ok() {
                    let _ = runner.run();
                }
            })
            .map_err(|e| Error::ThreadSpawn {
                what: "actor system",
                reason: e.to_string(),
            })?;
        let (system, value, arbiters) = rx.recv().map_err(|_| Error::ThreadSpawn {
            what: "actor system",
            reason: "it ended while starting the actors".into(),
        })?;
        Ok((
            Runtime {
                system,
                threads: RankedMutex::new(
                    RUNTIME_THREADS,
                    Threads {
                        system_thread: Some(system_thread),
                        arbiters,
                        worker_wait: DEFAULT_SHUTDOWN_TIMEOUT,
                    },
                ),
                tag,
                workers,
            },
            value,
        ))
    }

    /// How long `stop` waits for the worker threads' current jobs.
    pub fn set_shutdown_timeout(&self, wait: std::time::Duration) {
        self.threads.lock().worker_wait = wait;
    }

    /// The tag its threads carry.
    pub fn tag(&self) -> RuntimeTag {
        self.tag
    }

    /// Stops every actor and joins the threads; idempotent (the first call does the work).
    /// Called on one of this runtime's own threads (the last handle dropped inside a message
    /// or a callback), it cannot join that thread, so a reaper thread joins them all instead.
    pub fn stop(&self) {
        let mut threads = self.threads.lock();
        self.system.stop();
        for arbiter in &threads.arbiters {
            arbiter.stop();
        }
        let taken = Threads {
            system_thread: threads.system_thread.take(),
            arbiters: std::mem::take(&mut threads.arbiters),
            worker_wait: threads.worker_wait,
        };
        drop(threads);
        if taken.system_thread.is_none() && taken.arbiters.is_empty() {
            return;
        }
        let workers = self.workers.clone();
        if self.tag.owns_current_thread() {
            let reaper = thread::Builder::new()
                .name("pjrt-actors-reaper".into())
                .spawn(move || taken.join(&workers));
            if let Err(e) = reaper {
                tracing::warn!(error = %e, "no reaper thread: runtime threads finish unjoined");
            }
        } else {
            taken.join(&workers);
        }
    }
}

impl Threads {
    fn join(self, workers: &WorkerCount) {
        for arbiter in self.arbiters {
            let _ = arbiter.join();
        }
        if let Some(t) = self.system_thread {
            let _ = t.join();
        }
        // Sync workers end once the system is gone and their current job (a compile) is done.
        if !workers.wait_zero(self.worker_wait) {
            tracing::warn!(wait = ?self.worker_wait, "worker threads still running after the shutdown timeout; they finish unjoined");
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

struct ThreadWaker {
    thread: Thread,
    /// Set by a wake, so the waiter can see it while it spins without parking.
    woken: std::sync::atomic::AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::Release);
        self.thread.unpark();
    }
}

/// How long a blocking call spins for its answer before it parks. Parking and being woken on
/// an idle core costs tens of microseconds (the thread must be scheduled again); an actor's
/// answer often comes sooner than that.
const SPIN: std::time::Duration = std::time::Duration::from_micros(SPIN_MICROS);
const SPIN_MICROS: u64 = 30;

impl ThreadWaker {
    /// Waits for a wake: spins up to `SPIN`, then parks (until `deadline`, where one is given).
    fn wait(&self, deadline: Option<std::time::Instant>) {
        use std::sync::atomic::Ordering;
        let start = std::time::Instant::now();
        while start.elapsed() < SPIN {
            if self.woken.swap(false, Ordering::AcqRel) {
                return;
            }
            std::thread::yield_now();
        }
        match deadline {
            None => thread::park(),
            Some(d) => thread::park_timeout(d.saturating_duration_since(std::time::Instant::now())),
        }
        self.woken.store(false, Ordering::Release);
    }
}

/// The tokio runtime of every actor thread (the system's and each arbiter's): actix's default,
/// except that its thread looks for its next message for up to `SPIN` before it parks. A
/// message sent meanwhile is served without the wake-up a parked thread pays (tens of
/// microseconds on an idle machine), which is most of an actor round trip: a caller's next
/// request follows its answer within microseconds. An idle thread spins once, then sleeps.
fn actor_tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .on_thread_park(look_for_work_before_parking)
        // The mail that woke the thread is served next: only mail that comes after it may end
        // the next look.
        .on_thread_unpark(|| {
            MAIL.with(|m| m.borrow().as_ref().map(|mail| mail.take()));
        })
        .build()
        // As actix's own default runtime: a thread that cannot have one cannot serve at all.
        .expect("an actor thread's event loop")
}

/// Yields until mail comes for this thread's actors (its `Mail` flag, raised by every sender)
/// or `actor_spin()` has passed. The park that follows returns at once when mail came: the
/// sender's wake-up is pending for it.
fn look_for_work_before_parking() {
    let window = actor_spin();
    if window.is_zero() {
        return;
    }
    MAIL.with(|m| {
        let watched = m.borrow();
        let Some(mail) = watched.as_ref() else {
            return;
        };
        let start = std::time::Instant::now();
        loop {
            if mail.take() {
                SPIN_HITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return;
            }
            if start.elapsed() >= window {
                return;
            }
            std::thread::yield_now();
        }
    });
}

/// Looks that found mail before their window ended: round trips an actor thread served
/// without parking (and its sender without waking it). One count a hit, none a miss.
static SPIN_HITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times, in this process, an actor thread found its next message while it was still
/// looking before it parked: what the spin window buys (none with `ACTOR_SPIN_ENV` at 0).
pub fn spin_hits() -> u64 {
    SPIN_HITS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Names how long (in microseconds) an actor thread looks for work before it parks; 0 never.
pub const ACTOR_SPIN_ENV: &str = "PJRT_ACTORS_ACTOR_SPIN_US";

/// The actor threads' spin window: `ACTOR_SPIN_ENV` where set to a number, else `SPIN`.
fn actor_spin() -> std::time::Duration {
    static WINDOW: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        (std::env::var(ACTOR_SPIN_ENV).ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(SPIN, std::time::Duration::from_micros)
    })
}

/// Like [`block_on`], but gives up at `deadline`: `Ok(None)` then, and the future is dropped.
pub fn block_on_until<F: Future>(
    fut: F,
    deadline: std::time::Instant,
) -> Result<Option<F::Output>> {
    drive(fut, Some(deadline))
}

/// Runs a future to completion on the calling thread, parking between polls. The blocking façade
/// of every handle uses this. It refuses to run on the system thread or a compile worker, which
/// serve what such a call would wait for. On a device actor's thread (a host callback inside an
/// async execute) it runs: nothing but that device's own requests is served there, and those
/// are refused by their callers (`ClientGuard::refuse_blocking_on_device`).
pub fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    Ok(drive(fut, None)?.expect("without a deadline the future runs to its end"))
}

/// Polls `fut` on this thread until it is ready or `deadline` passes.
fn drive<F: Future>(fut: F, deadline: Option<std::time::Instant>) -> Result<Option<F::Output>> {
    if on_runtime_thread() && SERVED_DEVICE.with(|d| d.get()).is_none() {
        return Err(Error::BlockingOnRuntimeThread);
    }
    let thread_waker = Arc::new(ThreadWaker {
        thread: thread::current(),
        woken: std::sync::atomic::AtomicBool::new(false),
    });
    let waker = Waker::from(thread_waker.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(Some(v));
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(None);
        }
        thread_waker.wait(deadline);
    }
}
