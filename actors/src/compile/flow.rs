//! The one compile flow: a program and its options in, an executable out. Options resolved
//! for the program (its partitioning, the fixes for known defects), the cache key, the memory
//! cache, the checks that guard the plugin, a queue permit, and the compile service. Every
//! compile path (load, ahead of time, serve) goes through `prepare`, `check` and `compile`.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use pjrt_actors_formats::protos::xla::CompileOptionsProto;

use crate::arrays::site::Site;
use crate::client::state::ClientState;
use crate::compile::cache::{CancelToken, CompileKey};
use crate::compile::program_check::{check_program_for, explain_parse_failure, plugin_stablehlo};
use crate::compile::service::{CompileServiceHandle, CompileSpec};
use crate::compile::{CompileOptions, encode_options};
use crate::error::{Error, Result};
use crate::execute::executable::ExecutableCore;

/// A program's options resolved once, for every path: what the program says of its own
/// partitioning filled in, the options that avoid a known defect it runs into added, the proto
/// the plugin reads, and the compile cache's key.
pub struct Prepared {
    pub options: CompileOptions,
    pub proto: CompileOptionsProto,
    pub key: CompileKey,
}

/// Resolves `options` for `program` on this client (see [`Prepared`]).
pub fn prepare(state: &ClientState, program: &[u8], options: &CompileOptions) -> Result<Prepared> {
    let mut resolved = options.for_program(&crate::formats::spmd::read(program))?;
    state.fix_known_defects(program, &mut resolved);
    let proto = resolved.to_proto(&state.device_facts())?;
    let key = state.compile_key_allowing(
        program,
        &encode_options(&proto),
        options.allow_known_defects,
    );
    Ok(Prepared {
        options: resolved,
        proto,
        key,
    })
}

/// The checks a program gets before the plugin sees it: its text for what this plugin would
/// abort on, the known-defect table, and host send/recv where the platform cannot compile it.
pub fn check(state: &ClientState, program: &[u8], allow_known_defects: bool) -> Result<()> {
    state.check_open()?;
    let snap = state.snapshot();
    check_program_for(program, &snap.platform_name, snap.plugin_api_version)?;
    state.check_known_defects(program, allow_known_defects)?;
    // XLA:CPU fails host send/recv at compile; say what to use instead.
    let platform = &snap.platform_name;
    if platform == "cpu" && crate::callbacks::send_recv::uses_host_transfers(program) {
        return Err(crate::callbacks::send_recv::unsupported_here(platform));
    }
    Ok(())
}

/// What a compile asks of the flow, beside its program and options.
pub struct CompileCall {
    /// Where the request was made: the executable's allocation site.
    pub site: Site,
    /// Ends the wait (and withdraws a queued compile) when cancelled.
    pub cancel: Option<CancelToken>,
    /// Wait for a queue slot (else `Error::Busy` at once when the queue is full).
    pub wait_for_slot: bool,
}

/// Compiles `program` with `options` (or finds it in the memory cache, or joins the same
/// compile in flight), loaded and registered: the entry every compile-and-load takes.
pub async fn compile(
    state: &ClientState,
    service: CompileServiceHandle<'_>,
    program: &Arc<Vec<u8>>,
    options: &CompileOptions,
    call: CompileCall,
) -> Result<Arc<ExecutableCore>> {
    state.check_open()?;
    let prepared = prepare(state, program, options)?;
    // A program in the memory cache compiled once already: the checks guard the plugin, which
    // a hit never reaches, so they run on misses only.
    if let Some(hit) = state.cached_executable(&prepared.key) {
        return Ok(hit);
    }
    check(state, program, options.allow_known_defects)?;
    let cancel = call.cancel.as_ref();
    let _permit = if call.wait_for_slot {
        until_cancelled(state.acquire_compile_slot(), cancel).await??
    } else {
        state.try_acquire_compile_slot()?
    };
    let spec = CompileSpec {
        site: call.site,
        key: prepared.key,
        code: program.clone(),
        options: prepared.proto,
        span: tracing::Span::current(),
    };
    let answer = service.submit(spec, call.cancel.clone());
    until_cancelled(answer, cancel).await?.map_err(|e| {
        let version = plugin_stablehlo(&state.snapshot().plugin_attributes);
        explain_parse_failure(e, program, &version)
    })
}

/// Awaits `fut`, or `Error::RequestCancelled` as soon as `cancel` is cancelled.
async fn until_cancelled<F: Future>(fut: F, cancel: Option<&CancelToken>) -> Result<F::Output> {
    let Some(cancel) = cancel else {
        return Ok(fut.await);
    };
    let mut fut = pin!(fut);
    let mut cancelled = pin!(cancel.cancelled());
    std::future::poll_fn(|cx| {
        // The token first: the compile service drops a cancelled request's reply, which `fut`
        // reads as the service gone (`ShutDown`); both wake this task, and the caller asked to
        // cancel.
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(Error::RequestCancelled { what: "compile" }));
        }
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use crate::client::runtime::block_on;

    use super::*;

    #[test]
    fn a_cancelled_token_wins_over_an_answer_that_is_ready_too() {
        let token = CancelToken::new();
        token.cancel();
        // What the compile service's dropped reply reads as.
        let answer = async { Err::<(), _>(Error::ShutDown) };
        let got = block_on(until_cancelled(answer, Some(&token))).unwrap();
        assert!(
            matches!(got, Err(Error::RequestCancelled { .. })),
            "{got:?}"
        );
        let fresh = CancelToken::new();
        let got = block_on(until_cancelled(async { 7 }, Some(&fresh))).unwrap();
        assert!(matches!(got, Ok(7)), "{got:?}");
    }
}
