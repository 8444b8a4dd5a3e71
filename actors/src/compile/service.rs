//! The compile service: one actor that owns the compile queue and single flight (a
//! `SingleFlight`) and is the only writer of the memory cache. A request is answered from the
//! memory cache, joins a compile already in flight for the same key, or is queued; the queue
//! is handed to the compiler pool only as workers free up, so a cancelled request leaves the
//! queue without ever compiling.

use std::future::Future;
use std::sync::Arc;

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use pjrt_actors_formats::protos::xla::CompileOptionsProto;
use tokio::sync::oneshot;
use tracing::Span;

use crate::arrays::site::Site;
use crate::client::state::ClientState;
use crate::compile::cache::{CancelToken, CompileKey, bump};
use crate::compile::compiler::{CompilerActor, CompilerPoolHandle};
use crate::compile::env::CompileEnv;
use crate::compile::flight::{SingleFlight, Submitted, Waiter};
use crate::error::{Error, Result};
use crate::execute::executable::{ExecutableCore, ExecutableMeta};
use crate::pjrt::PjrtLoadedExecutable;
use crate::protocol::supervision::{Mailbox, answer, ask, guarded, tell};

/// What a compile is, apart from who waits for it.
pub struct CompileSpec {
    /// Where the first request for this key came from (for heap profiles).
    pub site: Site,
    pub key: CompileKey,
    pub code: Arc<Vec<u8>>,
    pub options: CompileOptionsProto,
    pub span: Span,
}

/// What a compile request is answered with.
pub type CompileReply = Result<Arc<ExecutableCore>>;

/// Submit a compile. The answer comes on `reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Submit {
    spec: CompileSpec,
    reply: oneshot::Sender<CompileReply>,
    cancel: Option<CancelToken>,
}

/// Forget every executable in the memory cache (they stay loaded while handles hold them);
/// answers how many it held.
#[derive(Message)]
#[rtype(result = "Result<Vec<Arc<ExecutableCore>>>")]
pub(crate) struct ClearMemoryCache;

/// Forgets one key's executable in the memory cache (an unloaded compile's: it must not stay
/// loaded and live); answers whether it was there.
#[derive(Message)]
#[rtype(result = "Result<Option<Arc<ExecutableCore>>>")]
pub(crate) struct ForgetCompiled(CompileKey);

pub struct CompileService {
    pool: Mailbox<CompilerActor>,
    flight: SingleFlight<CompileKey, CompileSpec, CompileReply>,
    state: Arc<ClientState>,
    env: CompileEnv,
}

impl CompileService {
    pub(crate) fn new(
        pool: Mailbox<CompilerActor>,
        pool_size: usize,
        state: Arc<ClientState>,
        env: CompileEnv,
    ) -> Self {
        CompileService {
            pool,
            flight: SingleFlight::new(pool_size),
            state,
            env,
        }
    }

    /// Hands queued compiles to the pool while workers are free.
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        let mut dropped = 0;
        while let Some((key, spec)) = self.flight.next_job(&mut dropped) {
            let site = spec.site;
            let pool = CompilerPoolHandle {
                addr: &self.pool,
                state: &self.state,
            };
            let request = pool.compile(key, spec.code, spec.options, self.env.clone(), spec.span);
            ctx.spawn(request.into_actor(self).map(move |result, act, ctx| {
                if let Err(e) = guarded("compile finish", || {
                    act.finish(key, site, result);
                    Ok(())
                }) {
                    tracing::error!(error = %e, key = %key.hex(), "finishing a compile failed");
                }
                act.dispatch(ctx);
            }));
        }
        for _ in 0..dropped {
            // Everyone who asked has gone: the request left the queue uncompiled.
            bump(&self.env.stats.cancelled);
        }
    }

    fn finish(
        &mut self,
        key: CompileKey,
        site: Site,
        result: Result<(PjrtLoadedExecutable, ExecutableMeta)>,
    ) {
        if !self.flight.anyone_waiting(&key) {
            // Abandoned mid-compile: never registered, so never live; destroyed on a compiler
            // thread.
            bump(&self.env.stats.cancelled);
            let compiled = result.ok().map(|(exe, _)| Box::new(exe) as Box<dyn Send>);
            let what = "an abandoned compile";
            (self.flight).finish(key, Err(Error::RequestCancelled { what }));
            self.release(compiled.into_iter().collect());
            return;
        }
        let result = result.map(|(exe, meta)| self.state.register_executable(exe, meta, site));
        let delivered = self.flight.finish(key, result.clone());
        match (result, delivered) {
            (Ok(core), true) => {
                let evicted = self.state.memory_cache.insert(key, core);
                self.release(Self::boxed(evicted));
            }
            (_, true) => {}
            // Its last waiter left as it was answered: let go (unregistered, not leaked).
            (result, false) => {
                bump(&self.env.stats.cancelled);
                self.release(Self::boxed(result.into_iter().collect()));
            }
        }
    }

    /// Executables as what `CompilerPoolHandle::release` drops.
    fn boxed(executables: Vec<Arc<ExecutableCore>>) -> Vec<Box<dyn Send>> {
        (executables.into_iter())
            .map(|e| Box::new(e) as Box<dyn Send>)
            .collect()
    }

    /// Hands executables this service lets go to the compiler pool to be dropped there: a
    /// drop may destroy the executable, a plugin call, which never runs on this actor's thread
    /// (the system thread).
    fn release(&self, executables: Vec<Box<dyn Send>>) {
        if executables.is_empty() {
            return;
        }
        let pool = CompilerPoolHandle {
            addr: &self.pool,
            state: &self.state,
        };
        pool.release(executables);
    }

    fn submit(&mut self, spec: CompileSpec, waiter: Waiter<CompileReply>) {
        let key = spec.key;
        // Handles check the memory cache before sending; check again for a compile that
        // finished in between.
        if let Some(core) = self.state.memory_cache.get(&key) {
            tracing::debug!(key = %key.hex(), hit = true, "compile");
            let _ = waiter.reply.send(Ok(core));
            return;
        }
        match self.flight.submit(key, spec, waiter) {
            Submitted::Joined => bump(&self.env.stats.joined),
            Submitted::Queued => {
                bump(&self.env.stats.misses);
                tracing::debug!(key = %key.hex(), hit = false, "compile");
            }
        }
    }
}

impl Actor for CompileService {
    type Context = Context<Self>;
}

crate::protocol::supervision::answers_asked!(CompileService);

impl Handler<Submit> for CompileService {
    type Result = ();

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        let span = msg.spec.span.clone();
        let _entered = span.enter();
        // The reply stays here until the bookkeeping takes it, so a panic before then still
        // answers the caller (after, the waiter list holds it and drops it, which the caller
        // reads as the service going away).
        let mut reply = Some(msg.reply);
        let (spec, cancel) = (msg.spec, msg.cancel);
        let outcome = guarded("compile submit", || {
            let reply = reply
                .take()
                .ok_or_else(|| Error::Internal("the compile reply went missing".into()))?;
            self.submit(spec, Waiter { reply, cancel });
            Ok(())
        });
        if let (Err(e), Some(reply)) = (outcome, reply) {
            let _ = reply.send(Err(e));
        }
        self.dispatch(ctx);
    }
}

impl Handler<ForgetCompiled> for CompileService {
    type Result = Result<Option<Arc<ExecutableCore>>>;

    fn handle(&mut self, msg: ForgetCompiled, _: &mut Context<Self>) -> Self::Result {
        // The caller's handle drops what is taken, on the caller's thread.
        guarded("forget compiled", || {
            Ok(self.state.memory_cache.take(&msg.0))
        })
    }
}

impl Handler<ClearMemoryCache> for CompileService {
    type Result = Result<Vec<Arc<ExecutableCore>>>;

    fn handle(&mut self, _: ClearMemoryCache, _: &mut Context<Self>) -> Self::Result {
        // The caller's handle drops what is cleared, on the caller's thread, before it answers:
        // once the clear returns, what it held is gone.
        guarded("clear memory cache", || Ok(self.state.memory_cache.clear()))
    }
}

/// The one way to reach the compile service: only this builds its messages.
#[derive(Clone, Copy)]
pub struct CompileServiceHandle<'a> {
    pub(crate) addr: &'a Mailbox<CompileService>,
}

impl CompileServiceHandle<'_> {
    /// Submits a compile: answered from the memory cache, by a compile in flight for the same
    /// key, or by its own compile once a worker is free. A cancelled token ends the wait
    /// where the caller races it against the answer; the future resolves on the request's own
    /// channel, so a caller that drops it is seen as gone.
    pub fn submit(
        self,
        spec: CompileSpec,
        cancel: Option<CancelToken>,
    ) -> impl Future<Output = CompileReply> + use<> {
        let (reply, answer_on) = oneshot::channel();
        tell(
            self.addr,
            Submit {
                spec,
                reply,
                cancel,
            },
        );
        answer(answer_on)
    }

    /// Forgets one key's executable in the memory cache; resolves to whether it was there.
    pub fn forget(self, key: CompileKey) -> impl Future<Output = Result<bool>> + use<> {
        // What was taken is dropped here, where the caller polls: never the system thread.
        let taken = ask(self.addr, ForgetCompiled(key));
        async move { taken.await.map(|executable| executable.is_some()) }
    }

    /// Forgets every executable the memory cache holds; resolves to how many it held.
    pub fn clear_memory_cache(self) -> impl Future<Output = Result<usize>> + use<> {
        // What was cleared is dropped here, where the caller polls: never the system thread.
        let cleared = ask(self.addr, ClearMemoryCache);
        async move { cleared.await.map(|all| all.len()) }
    }
}
