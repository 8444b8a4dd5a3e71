//! The runtime's one error type: the plugin layer's errors (from the fence, variant for variant)
//! and the errors of the layers above it (arguments, arrays, compiles, caches, callbacks, the
//! actors, serving), each where it arises.

use pjrt_actors_fence::error::in_context;
pub use pjrt_actors_fence::error::{PjrtCode, PluginError};

/// Every error the runtime returns: one type for users, matchable by variant. The plugin
/// layer's own (`Plugin`, `Pjrt`, `Unsupported`, `InvalidArgument`) come from the fence's
/// `pjrt::Error`, variant for variant; the rest arise here, where compiles, caches, the actors
/// and serving run.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The plugin returned an error from a C API function. Its message is cut to
    /// [`MESSAGE_LIMIT`] bytes (a compiler diagnostic can echo a whole program).
    #[error("{function} failed with {code}: {message}{}", in_context(context))]
    Pjrt {
        function: &'static str,
        code: PjrtCode,
        message: String,
        /// Whose request failed: the caller's tracing span and call site, where known.
        context: Option<String>,
    },
    /// The plugin does not offer this function or extension.
    #[error("{what} is not supported by this plugin{hint}")]
    Unsupported { what: &'static str, hint: String },
    /// A create option has a value the plugin would abort on, or is otherwise unusable.
    #[error("invalid client option `{name}`: {reason}")]
    InvalidOption { name: String, reason: String },
    /// An argument was rejected before the plugin saw it.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An id that no longer names a live entry (its entry was removed, maybe its index reused).
    #[error("stale {what} id {id}: it no longer names a live {what}")]
    StaleId { what: &'static str, id: String },
    /// The array was deleted (explicitly, or its buffer was donated).
    #[error("the {what} has been deleted")]
    Deleted { what: String },
    /// The array's bytes are in host memory after a failed defragment; reading it works,
    /// running it needs the next `defragment` to put it back on the device.
    #[error("the {what} is held in host memory after a failed defragment; run defragment again")]
    OnHost { what: String },
    /// A defragment could not put every buffer back on its device. No data was lost: the
    /// arrays listed are held in host memory (readable; the next defragment retries them).
    #[error("defragment moved {moved} buffers; {} are held in host memory: {reason}", on_host.len())]
    Defragment {
        moved: usize,
        /// Ids of the arrays left in host memory.
        on_host: Vec<String>,
        reason: String,
    },
    /// An execute was asked to donate an argument it cannot: the program does not alias or
    /// donate that parameter, the array is passed twice, or another operation uses or is
    /// queued to use it. Nothing was consumed and nothing ran.
    #[error("argument {index} of `{executable}` cannot be donated: {reason}")]
    Donation {
        executable: String,
        index: usize,
        reason: String,
    },
    /// An execute argument failed validation.
    #[error("argument {index} of `{executable}`: {reason}{}", context.as_ref().map(|c| format!(" (in {c})")).unwrap_or_default())]
    BadArgument {
        executable: String,
        index: usize,
        reason: String,
        /// The tracing span the caller was in, as py_client's user-context scope names it.
        context: Option<String>,
    },
    /// Serialized executable bytes that are not ours, are damaged, or are cut short. They never
    /// reach the plugin.
    #[error("cannot load the serialized executable: {reason}")]
    Deserialize { reason: String },
    /// Serialized by a different plugin, plugin version or platform than this client's.
    #[error("the executable was serialized by {serialized_by}; this client is {this_client}")]
    ForeignExecutable {
        serialized_by: String,
        this_client: String,
    },
    /// No client here has the topology an executable was compiled for.
    #[error("no client matches the topology: {reason}")]
    TopologyMismatch { reason: String },
    /// A bounded queue is full and the caller asked not to wait.
    #[error("{what} is busy: its queue is full")]
    Busy { what: &'static str },
    /// An upload would take a memory space past the budget set on it
    /// (`MemorySpace::set_budget`); nothing was allocated.
    #[error("{memory}: {asked} more bytes would pass its budget of {budget} ({held} held)")]
    MemoryBudget {
        memory: String,
        asked: u64,
        held: u64,
        budget: u64,
    },
    /// The caller cancelled the request (its token, or by dropping the future).
    #[error("{what} was cancelled by the caller")]
    RequestCancelled { what: &'static str },
    /// A queued request's deadline passed before it ran: it was answered, never executed.
    #[error("{what} expired after {waited:?} in the queue; it was not executed")]
    Expired {
        what: &'static str,
        waited: std::time::Duration,
    },
    /// The service a request was sent to has stopped (shut down, or shutting down and not
    /// taking work): the request was not run.
    #[error("{what} has stopped; the request was not run")]
    Stopped { what: String },
    /// A compile-cache directory could not be used.
    #[error("compile cache at {path}: {reason}")]
    Cache { path: String, reason: String },
    /// A host callback failed, returned values of the wrong type, or panicked; the execution
    /// that called it failed with it.
    #[error("host callback `{name}` failed: {reason}")]
    Callback { name: String, reason: String },
    /// A program calls a host callback it was not given.
    #[error(
        "the program calls host callback #{id}, which was not given (pass it when compiling or loading)"
    )]
    UnknownCallback { id: i64 },
    /// A lookup by id found nothing.
    #[error("no {what} with {key}")]
    NotFound { what: &'static str, key: String },
    /// The client's actors have shut down; nothing more can be done with this handle.
    #[error("the client has shut down")]
    ShutDown,
    /// The handler serving the request panicked. The request failed; the actor lives on (a
    /// device actor is restarted by its supervisor first, so no state the panic left serves
    /// the next request).
    #[error("{what} panicked: {reason}")]
    Panicked { what: String, reason: String },
    /// A blocking call was made on one of the runtime's own threads (inside a host callback
    /// run by an actor, say), where waiting would deadlock on its own mailbox.
    #[error("a blocking call was made on a runtime thread; use the async form there")]
    BlockingOnRuntimeThread,
    /// The operating system refused a thread the runtime needs.
    #[error("cannot start the {what} thread: {reason}")]
    ThreadSpawn { what: &'static str, reason: String },
    /// The compiler crashed on this program, in an isolated compile worker: the worker died
    /// (killed by `signal`, or exiting with `status`), was restarted, and nothing else was
    /// affected. In-process, the same program would have ended the whole process.
    #[error(
        "the compiler crashed on this program ({how}); its worker process was restarted{}",
        in_context(context)
    )]
    CompilerCrashed {
        /// The signal that killed the worker (6: SIGABRT, a failed CHECK; 11: SIGSEGV), if any.
        signal: Option<i32>,
        /// How the worker ended, in words.
        how: String,
        /// Whose request failed: the caller's tracing span and call site, where known.
        context: Option<String>,
    },
    /// The program uses an op on a dtype that this plugin build is known to compute wrong (the
    /// known-defect table, `known_defects.tsv`): refused before the plugin compiles it.
    /// `CompileOptions::allow_known_defects` (or the client builder's) runs it anyway.
    #[error(
        "this plugin computes `{op}` on {dtype} wrong (its conformance case {case} fails), and no compile option is known to avoid it: {plugin}; it is computed right on {right_on}. Run it there, or allow known defects (CompileOptions::allow_known_defects, PJRT_ACTORS_ALLOW_KNOWN_DEFECTS=1, --allow-known-defects) to run it anyway"
    )]
    KnownDefect {
        op: String,
        dtype: String,
        /// The plugin file and its versions.
        plugin: String,
        /// The conformance case that shows the defect.
        case: String,
        /// A plugin that computes it right.
        right_on: String,
    },
    /// A program written for a newer StableHLO than the plugin parses (ops such as
    /// `stablehlo.composite` around `chlo.sinh`, which current JAX emits).
    #[error(
        "the program needs a newer StableHLO than this plugin parses (the plugin's is {plugin}{}): run it on a newer plugin (the 0.115 CPU plugin parses StableHLO 1.20.0: PJRT_PLUGIN_PATH=.pjrt/xla_cpu_0115/pjrt_c_api_cpu_plugin.so), or export it for an older target; the plugin said: {message}",
        artifact.as_ref().map(|a| format!("; the artifact was written by {a}")).unwrap_or_default()
    )]
    StableHloTooNew {
        /// The newest StableHLO version the plugin parses.
        plugin: String,
        /// The producer a bytecode artifact names (`StableHLO_v1.15.0`), where it names one.
        artifact: Option<String>,
        message: String,
    },
    /// Work did not finish within the time its caller gave it. A program run is not cancelled
    /// (PJRT cannot stop a running program): it runs to its end and its results are dropped. A
    /// compile in a worker process is stopped: the worker is killed (`killed`).
    #[error(
        "`{what}` did not finish within {after:?}; {}",
        if *killed { "it was killed" } else { "it runs on to its end, its results dropped" }
    )]
    DeadlineExceeded {
        what: String,
        after: std::time::Duration,
        /// Whether the work was stopped (a compile worker killed) rather than left to run.
        killed: bool,
    },
    /// A compile worker process could not start: no program was compiled, and none is to
    /// blame (a memory limit below what the plugin maps to load, say).
    #[error("the compile worker could not start: {reason}")]
    CompileWorkerStart { reason: String },
    /// The plugin reported something the runtime cannot place (a fact that broke an
    /// assumption, not bad input); the message says which.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<pjrt_actors_fence::Error> for Error {
    fn from(e: pjrt_actors_fence::Error) -> Self {
        use pjrt_actors_fence::Error as Fence;
        match e {
            Fence::Plugin(e) => Error::Plugin(e),
            Fence::Pjrt {
                function,
                code,
                message,
                context,
            } => Error::Pjrt {
                function,
                code,
                message,
                context,
            },
            Fence::Unsupported { what, hint } => Error::Unsupported { what, hint },
            Fence::InvalidArgument(message) => Error::InvalidArgument(message),
            // The fence's enum is non-exhaustive to its users, not to this crate's match: a
            // variant added there must be given its place here.
            #[allow(unreachable_patterns)]
            other => Error::Internal(other.to_string()),
        }
    }
}

/// A format reader's error is bad input, with the reader's message.
impl From<pjrt_actors_formats::Error> for Error {
    fn from(e: pjrt_actors_formats::Error) -> Self {
        match e {
            pjrt_actors_formats::Error::InvalidArgument(message) => Error::InvalidArgument(message),
        }
    }
}

impl Error {
    /// Attaches whose request failed (the caller's span and call site) to an error from the
    /// plugin or the compiler, where none is attached yet.
    pub fn with_context(mut self, caller: impl FnOnce() -> String) -> Self {
        match &mut self {
            Error::Pjrt { context, .. } | Error::CompilerCrashed { context, .. }
                if context.is_none() =>
            {
                *context = Some(caller());
            }
            _ => {}
        }
        self
    }

    /// The error without whose request it was (a call site such as `cli/src/run.rs:228`):
    /// what a command line shows its user unless asked to be verbose.
    pub fn without_context(mut self) -> Self {
        match &mut self {
            Error::Pjrt { context, .. }
            | Error::CompilerCrashed { context, .. }
            | Error::BadArgument { context, .. } => *context = None,
            _ => {}
        }
        self
    }

    /// The error's own words, without the prefix its kind adds (for an error that another
    /// message wraps: "input `x`: …" rather than "input `x`: invalid argument: …").
    pub fn detail(&self) -> String {
        match self {
            Error::InvalidArgument(message) => message.clone(),
            other => other.to_string(),
        }
    }

    /// The PJRT code, where the error came from the plugin.
    pub fn pjrt_code(&self) -> Option<PjrtCode> {
        match self {
            Error::Pjrt { code, .. } => Some(*code),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_layers_errors_arrive_variant_for_variant_with_the_same_words() {
        use pjrt_actors_fence::Error as Fence;
        let cases = [
            Fence::Pjrt {
                function: "PJRT_Client_Compile",
                code: PjrtCode::InvalidArgument,
                message: "bad".into(),
                context: Some("serve at main.rs:3".into()),
            },
            Fence::Unsupported {
                what: "DMA mapping",
                hint: " (CPU)".into(),
            },
            Fence::InvalidArgument("wrong size".into()),
            Fence::Plugin(PluginError::NoneDiscovered {
                searched: "here".into(),
            }),
        ];
        for fence in cases {
            let words = fence.to_string();
            let code = fence.pjrt_code();
            let ours = Error::from(fence);
            assert_eq!(ours.to_string(), words);
            assert_eq!(ours.pjrt_code(), code);
            assert!(
                matches!(
                    ours,
                    Error::Pjrt { .. }
                        | Error::Unsupported { .. }
                        | Error::InvalidArgument(_)
                        | Error::Plugin(_)
                ),
                "{ours:?}"
            );
        }
    }

    #[test]
    fn context_is_attached_once_and_shown() {
        let e = Error::Pjrt {
            function: "PJRT_Client_Compile",
            code: PjrtCode::InvalidArgument,
            message: "bad".into(),
            context: None,
        };
        let e = e.with_context(|| "serve at main.rs:3".into());
        let e = e.with_context(|| "somewhere else".into());
        assert_eq!(
            e.to_string(),
            "PJRT_Client_Compile failed with INVALID_ARGUMENT: bad (in serve at main.rs:3)"
        );
    }
}
