//! The handle types users hold, defined in one place so that the modules implementing them
//! (client, device, array, compile, executable) import this one and never each other; and the
//! plumbing every handle shares: the guard they hold and the one way a call reaches an actor.

use std::future::Future;
use std::sync::Arc;

pub(crate) use pjrt_actors_core::ClientGuard;
use pjrt_actors_core::Result;
use pjrt_actors_core::arrays::buffers::{ArrayCore, ArrayOwner};
use pjrt_actors_core::callbacks::CallbackSet;
use pjrt_actors_core::client::runtime::block_on;
use pjrt_actors_core::execute::executable::ExecutableCore;

/// Returns `Pending` once (waking itself at once), then `Ready`.
pub(crate) async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

/// Runs `work` on a thread of its own named `name`, and resolves to its answer: the async form of
/// a call whose work blocks in the plugin or on many requests (opening a client, starting a
/// batcher), so no executor thread is held while it runs.
pub(crate) async fn on_thread<T: Send + 'static>(
    name: &str,
    what: &'static str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| pjrt_actors_core::Error::ThreadSpawn {
            what,
            reason: e.to_string(),
        })?;
    rx.await.map_err(|_| pjrt_actors_core::Error::ThreadSpawn {
        what,
        reason: "it ended without an answer".into(),
    })?
}

/// Waits for one of this crate's futures on the calling thread: the blocking façade every
/// blocking call is built on, for callers holding several `_async` futures at once. Refused on
/// the runtime's own threads, which serve what it would wait for.
pub fn wait<T>(fut: impl Future<Output = Result<T>>) -> Result<T> {
    block_on(fut)?
}

/// A client of one PJRT plugin: cheap to clone, `Send + Sync`, usable from any thread.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<ClientGuard>,
}

/// One device of a client. Keeps its client alive.
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<ClientGuard>,
    pub(crate) index: usize,
}

/// One memory space of a client. Keeps its client alive.
#[derive(Clone)]
pub struct MemorySpace {
    pub(crate) shared: Arc<ClientGuard>,
    pub(crate) index: usize,
}

/// An array on a device. `Clone + Send + Sync`; keeps its client alive (its core holds the
/// client's guard as its owner, once per buffer, so cloning an array touches no shared count).
#[derive(Clone)]
pub struct Array {
    pub(crate) core: Arc<ArrayCore>,
}

/// The guard of the client that owns `core`: the array's own owner, which is that client's
/// guard (an array holds what it needs to find its client; no process-wide list).
pub(crate) fn guard_of(core: &ArrayCore) -> Arc<ClientGuard> {
    core.owner()
        .clone()
        .into_any()
        .downcast::<ClientGuard>()
        .unwrap_or_else(|_| unreachable!("an array's owner is its client's guard"))
}

/// A loaded executable. `Clone + Send + Sync`; dropping the last clone unloads it.
#[derive(Clone)]
pub struct LoadedExecutable {
    pub(crate) shared: Arc<ClientGuard>,
    /// `shared` as the owner of the arrays this executable makes (coerced once, not per call).
    pub(crate) owner: Arc<dyn ArrayOwner>,
    pub(crate) core: Arc<ExecutableCore>,
    /// The host callbacks this handle runs the program with.
    pub(crate) callbacks: Option<Arc<CallbackSet>>,
}

/// Who made a request: the caller's tracing span and call site, taken where the request is
/// made, and attached to the errors the plugin or the compiler gives it (so that a server's log
/// says whose program failed).
#[derive(Clone, Copy)]
pub(crate) struct Caller {
    span: Option<&'static str>,
    at: &'static std::panic::Location<'static>,
}

impl Caller {
    /// The caller of the calling function, in the span current now.
    #[track_caller]
    pub(crate) fn here() -> Self {
        Self::at(std::panic::Location::caller())
    }

    /// A caller at `at`, in the span current now (for error paths, which take the span only
    /// when there is an error to name it in).
    pub(crate) fn at(at: &'static std::panic::Location<'static>) -> Self {
        Caller {
            span: tracing::Span::current().metadata().map(|m| m.name()),
            at,
        }
    }

    /// `span at file:line`, or `file:line` outside any span.
    pub(crate) fn describe(self) -> String {
        let at = format!("{}:{}", self.at.file(), self.at.line());
        match self.span {
            Some(span) => format!("{span} at {at}"),
            None => at,
        }
    }
}
