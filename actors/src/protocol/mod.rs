//! How the actors talk: each actor is reached only through its handle (`DeviceHandle`,
//! `MemoryHandle`, `RouterHandle`, `RegistryHandle`, `CompileServiceHandle`,
//! `CompilerPoolHandle`), which alone builds its messages and stamps them with the caller's
//! `tracing` span; `supervision` holds the send helpers and runs every handler under `guarded`;
//! `LookAgain` is an actor's scheduled second look. `check` holds these rules to the source.

#[cfg(test)]
mod check;
pub mod supervision;

use actix::{Actor, AsyncContext, Context};

/// An actor's "look again soon", for work that waits on what no message announces (bytes freed
/// by an array dropped on any thread, a buffer an operation lets go): at most one look is
/// scheduled at a time, a millisecond on.
#[derive(Default)]
pub(crate) struct LookAgain {
    scheduled: bool,
}

impl LookAgain {
    const AFTER: std::time::Duration = std::time::Duration::from_millis(1);

    /// Runs `again` on `actor` in a millisecond, unless a look is scheduled already; `own`
    /// reaches the actor's `LookAgain`.
    pub(crate) fn schedule<A: Actor<Context = Context<A>>>(
        actor: &mut A,
        ctx: &mut Context<A>,
        own: fn(&mut A) -> &mut LookAgain,
        again: fn(&mut A, &mut Context<A>),
    ) {
        if std::mem::replace(&mut own(actor).scheduled, true) {
            return;
        }
        ctx.run_later(Self::AFTER, move |actor, ctx| {
            own(actor).scheduled = false;
            again(actor, ctx);
        });
    }
}
