//! The protocol's errors: each kind with its HTTP status, its gRPC code and the outcome the
//! request metrics count it under, and the library's errors mapped onto them.

use std::time::Duration;

use pjrt_actors::Error;

/// Characters of an error message the protocol carries; the rest is cut.
pub const MESSAGE_CHARS: usize = 1024;

/// An error as the protocol reports it.
#[derive(Debug)]
pub enum ServeError {
    /// An unknown model or version (404, NOT_FOUND).
    NotFound(String),
    /// A request that does not fit the model, or is not well formed (400, INVALID_ARGUMENT).
    Invalid(String),
    /// A request, or the answer it asks for, past the server's size bounds (413, OUT_OF_RANGE:
    /// what tonic answers for a message past its limit).
    TooLarge(String),
    /// A request in a form the server does not take: a body encoding other than gzip or
    /// deflate (415, UNIMPLEMENTED).
    Unsupported(String),
    /// The model's queue is full, or the server is draining (503, UNAVAILABLE).
    Unavailable(String),
    /// The request's deadline passed before it ran, or the server's time limit (504,
    /// DEADLINE_EXCEEDED).
    Expired(String),
    /// The model failed (500, INTERNAL).
    Internal(String),
}

impl ServeError {
    pub fn http_status(&self) -> u16 {
        match self {
            ServeError::NotFound(_) => 404,
            ServeError::Invalid(_) => 400,
            ServeError::TooLarge(_) => 413,
            ServeError::Unsupported(_) => 415,
            ServeError::Unavailable(_) => 503,
            ServeError::Expired(_) => 504,
            ServeError::Internal(_) => 500,
        }
    }

    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            ServeError::NotFound(_) => tonic::Code::NotFound,
            ServeError::Invalid(_) => tonic::Code::InvalidArgument,
            ServeError::TooLarge(_) => tonic::Code::OutOfRange,
            ServeError::Unsupported(_) => tonic::Code::Unimplemented,
            ServeError::Unavailable(_) => tonic::Code::Unavailable,
            ServeError::Expired(_) => tonic::Code::DeadlineExceeded,
            ServeError::Internal(_) => tonic::Code::Internal,
        }
    }

    /// The message as the protocol carries it: cut past [`MESSAGE_CHARS`] (a quoted value
    /// can be any size: a 100,000-dim shape made a 300 KB HTTP error and overflowed gRPC's
    /// metadata limit, turning INVALID_ARGUMENT into RESOURCE_EXHAUSTED).
    pub fn message(&self) -> std::borrow::Cow<'_, str> {
        let m = match self {
            ServeError::NotFound(m)
            | ServeError::Invalid(m)
            | ServeError::TooLarge(m)
            | ServeError::Unsupported(m)
            | ServeError::Unavailable(m)
            | ServeError::Expired(m)
            | ServeError::Internal(m) => m,
        };
        match m.char_indices().nth(MESSAGE_CHARS) {
            None => std::borrow::Cow::Borrowed(m),
            Some((cut, _)) => format!("{}… (cut: {} bytes in all)", &m[..cut], m.len()).into(),
        }
    }

    /// The label the request metrics count it under.
    pub fn outcome(&self) -> &'static str {
        match self {
            ServeError::NotFound(_) => "not_found",
            ServeError::Invalid(_) => "invalid",
            ServeError::TooLarge(_) => "too_large",
            ServeError::Unsupported(_) => "unsupported",
            ServeError::Unavailable(_) => "unavailable",
            ServeError::Expired(_) => "expired",
            ServeError::Internal(_) => "failed",
        }
    }

    /// The server's own time limit passed.
    pub fn past_time_limit(limit: Duration) -> ServeError {
        ServeError::Expired(format!(
            "the request took longer than the server's {limit:?} limit (--request-timeout)"
        ))
    }
}

impl From<Error> for ServeError {
    fn from(e: Error) -> ServeError {
        let text = e.to_string();
        match e {
            Error::Busy { .. } | Error::Stopped { .. } => ServeError::Unavailable(text),
            Error::Expired { .. } => ServeError::Expired(text),
            Error::InvalidArgument(_) => ServeError::Invalid(text),
            _ => ServeError::Internal(text),
        }
    }
}

/// The metrics label of an answer with gRPC status `code`: the same names `outcome` gives.
pub fn outcome_of_grpc(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "ok",
        NotFound => "not_found",
        InvalidArgument => "invalid",
        OutOfRange | ResourceExhausted => "too_large",
        Unavailable => "unavailable",
        DeadlineExceeded | Cancelled => "expired",
        _ => "failed",
    }
}
