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
    /// The tracing span stack the caller was in: the current span and its parents, each a
    /// frame with its name, file and line. Parents are found where the subscriber keeps a
    /// span registry (tracing-subscriber's `Registry`, under `fmt()` and layered setups);
    /// under other subscribers the stack is the current span alone.
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
    /// The tracing spans it was made in, innermost first.
    Span(Arc<SpanStack>),
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
            SiteCapture::Span => SpanStack::current().map_or_else(
                || Site::Caller(Location::caller()),
                |s| Site::Span(Arc::new(s)),
            ),
            SiteCapture::Backtrace => Site::Backtrace(Arc::new(Backtrace::force_capture())),
        }
    }

    /// A key that is equal for the same site (for grouping samples).
    pub fn key(&self) -> usize {
        match self {
            Site::Unknown => 0,
            Site::Caller(l) => *l as *const Location<'static> as usize,
            Site::Span(stack) => stack.key,
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
            Site::Span(stack) => stack
                .spans
                .iter()
                .map(|m| Frame {
                    function: m.name().to_string(),
                    file: m.file().unwrap_or_default().to_string(),
                    line: m.line().unwrap_or_default() as i64,
                })
                .collect(),
            Site::Backtrace(b) => backtrace_frames(b),
        }
    }
}

/// A span stack: the spans' static metadata, innermost first, and a key equal for equal
/// stacks (so arrays made under the same spans group into one sample).
#[derive(Debug)]
pub struct SpanStack {
    key: usize,
    spans: Vec<&'static tracing::Metadata<'static>>,
}

impl SpanStack {
    /// The current span and its parents; `None` outside any span.
    fn current() -> Option<SpanStack> {
        use tracing_subscriber::registry::LookupSpan;
        let current = tracing::Span::current();
        let innermost = current.metadata()?;
        let spans = current
            .id()
            .and_then(|id| {
                tracing::dispatcher::get_default(|dispatch| {
                    let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
                    let span = registry.span(&id)?;
                    Some(span.scope().map(|s| s.metadata()).collect::<Vec<_>>())
                })
            })
            .unwrap_or_else(|| vec![innermost]);
        // FNV-1a over the metadata addresses: static, so equal stacks hash equal.
        let key = spans.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, m| {
            (h ^ (*m as *const tracing::Metadata<'static> as u64)).wrapping_mul(0x100_0000_01b3)
        }) as usize;
        Some(SpanStack { key, spans })
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
        } else if let Some((_, function)) = t.split_once(": ")
            && t.split(':')
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
    // Drop the frames of the capture itself and the runtime, keep the caller's.
    let first_user = frames
        .iter()
        .position(|f| {
            !f.function.contains("backtrace")
                && !f.function.contains("pjrt_actors_core::arrays::site")
        })
        .unwrap_or(0);
    frames.drain(..first_user);
    if frames.is_empty() {
        return Site::Unknown.frames();
    }
    frames
}
