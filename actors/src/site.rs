//! Allocation sites: where an array or executable was made, captured cheaply when it is made
//! and turned into pprof locations only when a heap profile is taken.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::panic::Location;
use std::sync::Arc;

/// How a client records allocation sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SiteCapture {
    /// Record nothing.
    Off,
    /// The file and line of the public call that made it (free: `#[track_caller]`).
    #[default]
    Caller,
    /// The tracing span the caller was in (its name, file and line).
    Span,
    /// A full backtrace, captured at creation and symbolized only when a profile is taken.
    /// Costly: for finding leaks, not for production.
    Backtrace,
}

/// Where something was allocated.
#[derive(Debug, Clone, Default)]
pub enum Site {
    /// Not recorded.
    #[default]
    Unknown,
    /// The public call that made it.
    Caller(&'static Location<'static>),
    /// The tracing span it was made in.
    Span(&'static tracing::Metadata<'static>),
    /// A backtrace, symbolized lazily.
    Backtrace(Arc<Backtrace>),
}

/// One frame of a site: function, file, line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: i64,
}

impl Site {
    /// Captures the site of the caller's caller chain, as `mode` says.
    #[track_caller]
    pub fn capture(mode: SiteCapture) -> Site {
        match mode {
            SiteCapture::Off => Site::Unknown,
            SiteCapture::Caller => Site::Caller(Location::caller()),
            SiteCapture::Span => tracing::Span::current()
                .metadata()
                .map_or_else(|| Site::Caller(Location::caller()), Site::Span),
            SiteCapture::Backtrace => Site::Backtrace(Arc::new(Backtrace::force_capture())),
        }
    }

    /// A key that is equal for the same site (for grouping samples).
    pub fn key(&self) -> usize {
        match self {
            Site::Unknown => 0,
            Site::Caller(l) => *l as *const Location<'static> as usize,
            Site::Span(m) => *m as *const tracing::Metadata<'static> as usize,
            Site::Backtrace(b) => Arc::as_ptr(b) as usize,
        }
    }

    /// The frames, innermost first.
    pub fn frames(&self) -> Vec<Frame> {
        match self {
            Site::Unknown => vec![Frame {
                function: "<unknown>".into(),
                file: String::new(),
                line: 0,
            }],
            Site::Caller(l) => vec![Frame {
                function: format!("{}:{}", l.file(), l.line()),
                file: l.file().to_string(),
                line: l.line() as i64,
            }],
            Site::Span(m) => vec![Frame {
                function: m.name().to_string(),
                file: m.file().unwrap_or_default().to_string(),
                line: m.line().unwrap_or_default() as i64,
            }],
            Site::Backtrace(b) => backtrace_frames(b),
        }
    }
}

/// Parses `Backtrace`'s display (the stable way to read its frames): lines `N: function` and
/// `at file:line:col`.
fn backtrace_frames(b: &Backtrace) -> Vec<Frame> {
    if b.status() != BacktraceStatus::Captured {
        return Site::Unknown.frames();
    }
    let text = b.to_string();
    let mut frames: Vec<Frame> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(at) = t.strip_prefix("at ") {
            if let Some(last) = frames.last_mut() {
                let mut parts = at.rsplitn(3, ':');
                let _col = parts.next();
                let line_no = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
                last.file = parts.next().unwrap_or(at).to_string();
                last.line = line_no;
            }
        } else if let Some((_, function)) = t.split_once(": ") {
            if t.split(':')
                .next()
                .is_some_and(|n| n.trim().parse::<u32>().is_ok())
            {
                frames.push(Frame {
                    function: function.to_string(),
                    file: String::new(),
                    line: 0,
                });
            }
        }
    }
    // Drop the frames of the capture itself and the runtime, keep the caller's.
    let first_user = frames
        .iter()
        .position(|f| {
            !f.function.contains("backtrace") && !f.function.contains("pjrt_actors_core::site")
        })
        .unwrap_or(0);
    frames.drain(..first_user);
    if frames.is_empty() {
        return Site::Unknown.frames();
    }
    frames
}
