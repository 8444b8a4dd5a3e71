//! The actors: one client actor that routes, one actor per device and per memory space. Each
//! message carries the caller's `tracing` span, and each handler runs inside it.

pub mod client;
pub mod device;
pub mod memory_space;
pub mod registry;

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{Error, Result};

/// Runs a handler body so that a panic fails only this request, as `Error::Cancelled`, and the
/// actor lives on to serve the next one.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let reason = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".into());
            tracing::error!(%what, %reason, "handler panicked");
            Err(Error::Cancelled(format!("{what} panicked: {reason}")))
        }
    }
}

static RESTARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times a supervisor has restarted an actor, process-wide.
pub fn restarts() -> u64 {
    RESTARTS.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn count_restart(actor: &str) {
    tracing::warn!(%actor, "actor restarted by its supervisor");
    RESTARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Runs a handler body under `guarded`; if it panicked, the actor stops so its supervisor
/// restarts it (keeping its mailbox) before the next request, whatever state the panic left.
pub(crate) fn serve<A, T>(
    ctx: &mut A::Context,
    what: &str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T>
where
    A: actix::Actor<Context = actix::Context<A>>,
{
    use actix::ActorContext;
    let result = guarded(what, f);
    if let Err(Error::Cancelled(reason)) = &result {
        if reason.contains("panicked") {
            ctx.stop();
        }
    }
    result
}

/// Test support: a request that panics inside its handler.
#[doc(hidden)]
pub struct Poison;

impl actix::Message for Poison {
    type Result = Result<()>;
}

/// Maps a mailbox failure (the actor is gone) to the error a handle reports.
pub fn mailbox_error(_: actix::MailboxError) -> Error {
    Error::ShutDown
}
