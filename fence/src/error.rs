//! The plugin layer's errors: loading a plugin, and a PJRT failure with the plugin's code, its
//! message and the C function that returned it. The runtime's one error type for users,
//! `pjrt_actors_core::Error`, takes these and adds the errors of the layers above.

use std::fmt;
use std::path::PathBuf;

/// A PJRT status code, as the plugin reported it (`PJRT_Error_Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PjrtCode {
    /// `PJRT_Error_Code_CANCELLED`.
    Cancelled,
    /// `PJRT_Error_Code_UNKNOWN`.
    Unknown,
    /// `PJRT_Error_Code_INVALID_ARGUMENT`.
    InvalidArgument,
    /// `PJRT_Error_Code_DEADLINE_EXCEEDED`.
    DeadlineExceeded,
    /// `PJRT_Error_Code_NOT_FOUND`.
    NotFound,
    /// `PJRT_Error_Code_ALREADY_EXISTS`.
    AlreadyExists,
    /// `PJRT_Error_Code_PERMISSION_DENIED`.
    PermissionDenied,
    /// `PJRT_Error_Code_RESOURCE_EXHAUSTED`.
    ResourceExhausted,
    /// `PJRT_Error_Code_FAILED_PRECONDITION`.
    FailedPrecondition,
    /// `PJRT_Error_Code_ABORTED`.
    Aborted,
    /// `PJRT_Error_Code_OUT_OF_RANGE`.
    OutOfRange,
    /// `PJRT_Error_Code_UNIMPLEMENTED`.
    Unimplemented,
    /// `PJRT_Error_Code_INTERNAL`.
    Internal,
    /// `PJRT_Error_Code_UNAVAILABLE`.
    Unavailable,
    /// `PJRT_Error_Code_DATA_LOSS`.
    DataLoss,
    /// `PJRT_Error_Code_UNAUTHENTICATED`.
    Unauthenticated,
    /// A code this build does not know, kept verbatim.
    Other(u32),
}

/// `PJRT_Error_Code`'s numbers, in one table both directions read.
const CODES: [(u32, PjrtCode); 16] = [
    (1, PjrtCode::Cancelled),
    (2, PjrtCode::Unknown),
    (3, PjrtCode::InvalidArgument),
    (4, PjrtCode::DeadlineExceeded),
    (5, PjrtCode::NotFound),
    (6, PjrtCode::AlreadyExists),
    (7, PjrtCode::PermissionDenied),
    (8, PjrtCode::ResourceExhausted),
    (9, PjrtCode::FailedPrecondition),
    (10, PjrtCode::Aborted),
    (11, PjrtCode::OutOfRange),
    (12, PjrtCode::Unimplemented),
    (13, PjrtCode::Internal),
    (14, PjrtCode::Unavailable),
    (15, PjrtCode::DataLoss),
    (16, PjrtCode::Unauthenticated),
];

impl PjrtCode {
    /// From `PJRT_Error_Code`'s number.
    pub fn from_raw(code: u32) -> Self {
        CODES
            .iter()
            .find(|(n, _)| *n == code)
            .map_or(Self::Other(code), |(_, c)| *c)
    }

    /// `PJRT_Error_Code`'s number.
    pub fn to_raw(self) -> u32 {
        match self {
            Self::Other(code) => code,
            known => CODES
                .iter()
                .find(|(_, c)| *c == known)
                .map_or(0, |(n, _)| *n),
        }
    }
}

impl fmt::Display for PjrtCode {
    /// PJRT's own name for the code: `INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, …
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(code) => write!(f, "code {code}"),
            known => {
                let name = format!("{known:?}");
                for (i, c) in name.chars().enumerate() {
                    if c.is_uppercase() && i > 0 {
                        f.write_str("_")?;
                    }
                    write!(f, "{}", c.to_ascii_uppercase())?;
                }
                Ok(())
            }
        }
    }
}

/// Why a PJRT plugin could not be loaded; each case is its own variant so callers can tell a
/// typo in a path from a broken install.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    #[error("no PJRT plugin file at {path}")]
    NotFound { path: PathBuf },
    #[error(
        "no PJRT plugin was found; looked at: {searched} (run scripts/bootstrap, or set PJRT_PLUGIN_PATH)"
    )]
    NoneDiscovered { searched: String },
    #[error("{path} is not a PJRT plugin: {reason}")]
    NotAPlugin { path: PathBuf, reason: String },
    #[error("PJRT plugin {path} failed to initialise: {reason}")]
    InitFailed { path: PathBuf, reason: String },
    #[error(
        "PJRT plugin {path} speaks PJRT C API {major}.{minor}, but this build supports major 0, minor {min_minor} or newer"
    )]
    AbiMismatch {
        path: PathBuf,
        major: i32,
        minor: i32,
        min_minor: i32,
    },
}

/// What the plugin layer itself returns: loading a plugin, a C API call that failed, a function
/// or extension the plugin lacks, and an argument refused before a C call. Everything above the
/// plugin (compiles, caches, serving, the actors) has its error in `pjrt_actors_core::Error`,
/// which takes each of these as the variant of the same name.
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
    /// An argument was rejected before the plugin saw it.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// The most of a plugin message an error keeps: its head and its tail, with how much was cut.
pub const MESSAGE_LIMIT: usize = 4096;

/// ` (in CONTEXT)` where a context is known.
pub fn in_context(context: &Option<String>) -> String {
    context
        .as_ref()
        .map(|c| format!(" (in {c})"))
        .unwrap_or_default()
}

/// Cuts `message` to at most about [`MESSAGE_LIMIT`] bytes, keeping its head and tail.
pub fn cut_message(message: String) -> String {
    if message.len() <= MESSAGE_LIMIT {
        return message;
    }
    let floor = |i: usize| {
        (0..=i)
            .rev()
            .find(|&i| message.is_char_boundary(i))
            .unwrap_or(0)
    };
    let head_end = floor(MESSAGE_LIMIT * 3 / 4);
    let tail_start = floor(message.len() - MESSAGE_LIMIT / 4);
    format!(
        "{} [… {} bytes cut …] {}",
        &message[..head_end],
        tail_start - head_end,
        &message[tail_start..]
    )
}

impl Error {
    /// The plugin's own message for an error from the plugin; else the whole error's words.
    pub fn detail_of_plugin(&self) -> String {
        match self {
            Error::Pjrt { message, .. } => message.clone(),
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
    fn long_plugin_messages_keep_their_head_and_tail() {
        assert_eq!(cut_message("short".into()), "short");
        let long = format!("head {} tail", "é".repeat(50_000));
        let cut = cut_message(long);
        assert!(cut.len() < MESSAGE_LIMIT + 100, "{}", cut.len());
        assert!(cut.starts_with("head ") && cut.ends_with(" tail"));
        assert!(cut.contains("bytes cut"));
    }
}

#[cfg(test)]
mod code_tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_show_pjrts_names() {
        for raw in 0..20 {
            assert_eq!(PjrtCode::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(PjrtCode::from_raw(3).to_string(), "INVALID_ARGUMENT");
        assert_eq!(PjrtCode::from_raw(8).to_string(), "RESOURCE_EXHAUSTED");
        assert_eq!(PjrtCode::from_raw(99).to_string(), "code 99");
    }
}
