//! Whether a batcher takes requests: a gate that submitters pass on their way to the scheduler's
//! mailbox, and that the scheduler waits to settle after it stops, so no request taken is lost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

/// Whether requests are taken, and how many submitters are between their check and their send.
///
/// A flag alone lost requests: a submitter that had seen it open could send after the scheduler had
/// stopped, and its request was dropped with the mailbox, unanswered. With the count, the
/// scheduler, once stopped, waits until no submitter is inside ([`settle`](Self::settle)); every request
/// sent is then in its mailbox, to be answered `Stopped`. It costs a submit two atomic
/// read-modify-writes, within the run-to-run spread of `cargo bench --bench serve`; unlike a
/// lock held across the send, it leaves `shutdown` nothing to wait for and nothing to rank.
pub(crate) struct Admission {
    open: AtomicBool,
    inside: AtomicUsize,
}

/// A submitter inside the gate: its request may be sent until this drops.
pub(crate) struct Admitted<'a>(&'a Admission);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, SeqCst);
    }
}

impl Admission {
    pub(crate) fn new() -> Admission {
        Admission {
            open: AtomicBool::new(true),
            inside: AtomicUsize::new(0),
        }
    }

    /// Enters if the gate is open. All orderings are `SeqCst`: a submitter that sees the gate
    /// open counted itself inside before `close` in the one order every thread agrees on, so
    /// a `settle` that follows `close` sees it until it has sent.
    pub(crate) fn enter(&self) -> Option<Admitted<'_>> {
        self.inside.fetch_add(1, SeqCst);
        let admitted = Admitted(self);
        self.open.load(SeqCst).then_some(admitted)
    }

    /// Takes no more requests; those inside may still send theirs.
    pub(crate) fn close(&self) {
        self.open.store(false, SeqCst);
    }

    /// Returns once every submitter that passed the gate before `close` has sent or given up.
    /// Submitters are inside for one check and one unbounded send, so this yields, never parks.
    pub(crate) fn settle(&self) {
        while self.inside.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_gate_admits_no_one_and_settles_when_the_last_inside_leaves() {
        let gate = Admission::new();
        let inside = gate.enter().expect("open");
        gate.close();
        assert!(gate.enter().is_none());
        assert_eq!(
            gate.inside.load(SeqCst),
            1,
            "a refused entry does not stay counted"
        );
        let settled = std::thread::scope(|s| {
            let waiter = s.spawn(|| gate.settle());
            std::thread::sleep(std::time::Duration::from_millis(20));
            let early = waiter.is_finished();
            drop(inside);
            waiter.join().unwrap();
            !early
        });
        assert!(settled, "settle returned while a submitter was inside");
    }
}
