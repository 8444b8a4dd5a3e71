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

/// Maps a mailbox failure (the actor is gone) to the error a handle reports.
pub fn mailbox_error(_: actix::MailboxError) -> Error {
    Error::ShutDown
}
