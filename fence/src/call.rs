//! How the fence calls the plugin: the `args!` and `call!` macros, `Plugin::call` (an
//! `unsafe fn`: nothing calls the plugin safely with an arbitrary function pointer) and
//! and `Plugin::check`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use pjrt_sys as sys;

use crate::abi;
use crate::error::{Error, PjrtCode, Result};
use crate::plugin::Plugin;

/// Builds an args struct of pjrt-sys's layout with its `struct_size` set.
macro_rules! args {
    ($ty:ident { $($field:ident : $val:expr),* $(,)? }) => {
        sys::$ty { struct_size: size_of::<sys::$ty>(), $($field: $val,)* ..Default::default() }
    };
}
/// Calls the named slot of the 0.54 table with an args struct of that slot's own type.
///
/// The one place the fence calls the plugin without an `unsafe` block at the call site, and
/// why that is sound: the macro names a slot, never a pointer, so the function and its args
/// type always match (the compiler checks `$args` against the slot's signature); every args
/// struct it is given is built by `args!`, which sets `struct_size` to pjrt-sys's layout of
/// that very struct (0.54, which every 0.54+ plugin accepts); and the raw handles inside it
/// are the ones fence owners hold, live for as long as their owner is.
macro_rules! call {
    ($plugin:expr, $func:ident, $args:expr) => {{
        let plugin: &$crate::Plugin = &$plugin;
        // SAFETY: see the macro's documentation: a slot of its own type, `struct_size` set by
        // `args!`, handles kept live by their owners.
        unsafe { plugin.call(stringify!($func), plugin.api().base.$func, $args) }
    }};
}
pub(crate) use {args, call};

thread_local! {
    /// Whether this thread must never call the plugin (the actor system's thread, whose every
    /// message would wait behind a slow call).
    static NO_PLUGIN_CALLS: Cell<bool> = const { Cell::new(false) };
}

/// Plugin calls made, in this process, on a thread that forbids them.
static CALLS_WHERE_FORBIDDEN: AtomicU64 = AtomicU64::new(0);

/// Marks the current thread as one that must make no plugin call: one made there anyway is
/// counted (`plugin_calls_where_forbidden`) and logged as an error, naming the function.
pub fn forbid_plugin_calls_on_this_thread() {
    NO_PLUGIN_CALLS.with(|c| c.set(true));
}

/// How many plugin calls ran, in this process, on a thread that forbids them: 0 unless a path
/// breaks the rule (tests read it).
pub fn plugin_calls_where_forbidden() -> u64 {
    CALLS_WHERE_FORBIDDEN.load(Ordering::Relaxed)
}

impl Plugin {
    /// Calls one PJRT function with its args struct, turning a returned error into `Error::Pjrt`.
    ///
    /// # Safety
    /// `f` must be a function of this plugin taking `A`, and `args` a properly sized,
    /// initialised args struct for it (`struct_size` from pjrt-sys's layout or our 0.81 one in
    /// `abi.rs`) whose pointers are live for the call.
    pub(crate) unsafe fn call<A>(
        &self,
        function: &'static str,
        f: Option<unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error>,
        args: &mut A,
    ) -> Result<()> {
        let Some(f) = f else {
            return Err(Error::Unsupported {
                what: function,
                hint: String::new(),
            });
        };
        if NO_PLUGIN_CALLS.with(Cell::get) {
            CALLS_WHERE_FORBIDDEN.fetch_add(1, Ordering::Relaxed);
            let thread = std::thread::current();
            tracing::error!(
                function,
                thread = thread.name(),
                "a plugin call on a thread that must make none"
            );
        }
        // SAFETY: guaranteed by the caller.
        let err = unsafe { f(args) };
        self.check(function, err, size_of::<A>(), std::any::type_name::<A>())
    }

    /// Reads and destroys a `PJRT_Error`. Also names the args struct when a plugin newer than our
    /// layouts rejects its size, so the user learns why rather than just that.
    pub(crate) fn check(
        &self,
        function: &'static str,
        err: *mut sys::PJRT_Error,
        args_size: usize,
        args_type: &str,
    ) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let base = &self.api().base;
        let mut msg = sys::PJRT_Error_Message_Args {
            struct_size: size_of::<sys::PJRT_Error_Message_Args>(),
            error: err,
            ..Default::default()
        };
        let mut code = sys::PJRT_Error_GetCode_Args {
            struct_size: size_of::<sys::PJRT_Error_GetCode_Args>(),
            error: err,
            ..Default::default()
        };
        // SAFETY: `err` is a live error the plugin just returned; these three functions are
        // always present (slots of every version) and we destroy `err` exactly once, last.
        let (mut message, code) = unsafe {
            if let Some(f) = base.PJRT_Error_Message {
                f(&mut msg);
            }
            let message = if msg.message.is_null() {
                String::new()
            } else {
                let bytes = std::slice::from_raw_parts(msg.message as *const u8, msg.message_size);
                String::from_utf8_lossy(bytes).into_owned()
            };
            let code = match base.PJRT_Error_GetCode {
                Some(f) if f(&mut code).is_null() => PjrtCode::from_raw(code.code),
                _ => PjrtCode::Unknown,
            };
            if let Some(f) = base.PJRT_Error_Destroy {
                let mut destroy = sys::PJRT_Error_Destroy_Args {
                    struct_size: size_of::<sys::PJRT_Error_Destroy_Args>(),
                    error: err,
                    ..Default::default()
                };
                f(&mut destroy);
            }
            (message, code)
        };
        let minor = self.api_version().1;
        if minor > abi::LAYOUT_MINOR && message.contains("struct_size") {
            let short = args_type.rsplit("::").next().unwrap_or(args_type);
            message.push_str(&format!(
                " [the plugin speaks PJRT 0.{}, newer than this build's 0.{} layouts; we sent {short} of {args_size} bytes]",
                minor,
                abi::LAYOUT_MINOR
            ));
        }
        Err(Error::Pjrt {
            function,
            code,
            message: crate::error::cut_message(message),
            context: None,
        })
    }
}
