//! The readers' one error: what was wrong with the bytes or text they were given. The runtime
//! turns it into its own `Error::InvalidArgument`, keeping the message.

/// A malformed or unsupported input, with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input is malformed, or names what the reader does not support.
    #[error("{0}")]
    InvalidArgument(String),
}

/// A reader's result.
pub type Result<T> = std::result::Result<T, Error>;
