//! Supervision: every actor handler runs under `guarded`, so a panic fails only its own
//! request (as `Error::Panicked`), and `serve` also stops a supervised actor so that its
//! supervisor restarts it, mailbox kept, before the next request.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A panic's message: its payload when that is a string (as `panic!` makes it), else a note
/// that it was not one. The one place a payload is read, for every `catch_unwind` here.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    (payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// Runs a handler body so that a panic fails only this request, as `Error::Panicked`, and the
/// actor lives on to serve the next one.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let reason = panic_message(payload.as_ref());
            tracing::error!(%what, %reason, "handler panicked");
            Err(Error::Panicked {
                what: what.to_string(),
                reason,
            })
        }
    }
}

static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// How many times a supervisor has restarted an actor, process-wide.
pub fn restarts() -> u64 {
    RESTARTS.load(Ordering::Relaxed)
}

pub(crate) fn count_restart(actor: &str) {
    tracing::warn!(%actor, "actor restarted by its supervisor");
    RESTARTS.fetch_add(1, Ordering::Relaxed);
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
    if let Err(Error::Panicked { .. }) = &result {
        ctx.stop();
    }
    result
}

/// An actor's address and the `Mail` flag of the thread it runs on: the one way a message is
/// sent (`ask`, `tell`), so that thread, looking for work before it parks, serves it at once.
pub(crate) struct Mailbox<A: actix::Actor> {
    pub(crate) addr: actix::Addr<A>,
    pub(crate) mail: std::sync::Arc<crate::client::runtime::Mail>,
}

impl<A: actix::Actor> Clone for Mailbox<A> {
    fn clone(&self) -> Self {
        Mailbox {
            addr: self.addr.clone(),
            mail: self.mail.clone(),
        }
    }
}

/// A message sent with the channel its answer goes back on: how `ask` sends, so that every
/// request travels by `tell` (the one send helper) and every answer comes on the request's own
/// channel, awaited by `answer` (the one reply style). Each actor takes it for every message it
/// handles (`answers_asked!`), answering as its own handler does.
pub(crate) struct Asked<M: actix::Message> {
    pub(crate) msg: M,
    pub(crate) reply: tokio::sync::oneshot::Sender<M::Result>,
}

impl<M: actix::Message> actix::Message for Asked<M> {
    type Result = ();
}

/// Lets `$actor` take `Asked<M>` for every `M` it handles: its own handler runs, and its
/// response (a value, or a future the actor runs) answers on the request's channel, as actix's
/// own `send` would.
macro_rules! answers_asked {
    ($actor:ty) => {
        impl<M> actix::Handler<$crate::protocol::supervision::Asked<M>> for $actor
        where
            Self: actix::Handler<M>,
            M: actix::Message + Send + 'static,
            M::Result: Send,
        {
            type Result = ();

            fn handle(
                &mut self,
                asked: $crate::protocol::supervision::Asked<M>,
                ctx: &mut <Self as actix::Actor>::Context,
            ) {
                let response = <Self as actix::Handler<M>>::handle(self, asked.msg, ctx);
                actix::dev::MessageResponse::handle(response, ctx, Some(asked.reply));
            }
        }
    };
}
pub(crate) use answers_asked;

/// Sends `msg` to `to` and resolves to its answer, on the request's own channel; a mailbox
/// that is gone (the client shut down) is `Error::ShutDown`.
pub(crate) fn ask<A, M, T>(
    to: &Mailbox<A>,
    msg: M,
) -> impl std::future::Future<Output = Result<T>> + use<A, M, T>
where
    A: actix::Actor + actix::Handler<Asked<M>>,
    A::Context: actix::dev::ToEnvelope<A, Asked<M>>,
    M: actix::Message<Result = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let (reply, answer_on) = tokio::sync::oneshot::channel();
    tell(to, Asked { msg, reply });
    answer(answer_on)
}

/// Sends `msg` to `to`: the one send helper (an answer, where one is wanted, comes on the
/// request's own channel).
pub(crate) fn tell<A, M>(to: &Mailbox<A>, msg: M)
where
    A: actix::Actor + actix::Handler<M>,
    A::Context: actix::dev::ToEnvelope<A, M>,
    M: actix::Message + Send + 'static,
    M::Result: Send,
{
    to.addr.do_send(msg);
    to.mail.announce();
}

/// Resolves to the answer on `reply`, a request's own channel (for requests answered by
/// someone other than the actor they were sent to, or after they waited); a channel dropped
/// unanswered means the client shut down.
pub(crate) async fn answer<T>(reply: tokio::sync::oneshot::Receiver<Result<T>>) -> Result<T> {
    reply.await.map_err(|_| Error::ShutDown)?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler's name, its body, and the panic message it should fail with (`None`: none).
    type Case = (
        &'static str,
        Box<dyn FnOnce() -> Result<u8>>,
        Option<&'static str>,
    );

    #[test]
    fn a_panic_becomes_its_own_error_variant_with_the_payload() {
        let cases: [Case; 3] = [
            ("ok", Box::new(|| Ok(7)), None),
            ("str", Box::new(|| panic!("boom")), Some("boom")),
            (
                "string",
                Box::new(|| panic!("{}", "formatted")),
                Some("formatted"),
            ),
        ];
        for (what, body, panicked_with) in cases {
            match (guarded(what, body), panicked_with) {
                (Ok(7), None) => {}
                (Err(Error::Panicked { what: w, reason }), Some(expected)) => {
                    assert_eq!(w, what);
                    assert_eq!(reason, expected);
                }
                (other, _) => panic!("{what}: unexpected {other:?}"),
            }
        }
    }
}
