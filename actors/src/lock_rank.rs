//! Lock ranks, checked in debug builds (wgpu-core's `lock/rank.rs` is the model): each lock
//! that can be held together with another has a rank naming the ranks that may be taken while
//! it is held, and taking one out of that order panics at once with both call sites, instead of
//! deadlocking some day under load. Release builds keep nothing and check nothing.

use std::ops::{Deref, DerefMut};

/// A lock's place in the order: its name, its bit, and the ranks that may be taken after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRank {
    pub name: &'static str,
    bit: u32,
    followers: u32,
}

const fn rank(name: &'static str, bit: u32, followers: &[LockRank]) -> LockRank {
    let mut set = 0;
    let mut i = 0;
    while i < followers.len() {
        set |= followers[i].bit;
        i += 1;
    }
    LockRank {
        name,
        bit,
        followers: set,
    }
}

/// Leaves: nothing is taken while one is held.
pub const REGISTRY_SHARD: LockRank = rank("registry shard", 1 << 0, &[]);
pub const CALLBACK_FAILURE: LockRank = rank("callback failure", 1 << 1, &[]);
pub const COMPILE_CACHE: LockRank = rank("memory compile cache", 1 << 2, &[]);
/// A program's send/recv transfer state: a callback's first failure may be kept under it.
pub const SEND_RECV: LockRank = rank("send/recv state", 1 << 3, &[CALLBACK_FAILURE]);
/// An ordered callback's turn. A callback may run another program (re-entrant), whose execute
/// takes its arguments' slots, its own callbacks' turns and registers its outputs; but never
/// the same kind of turn directly inside this one.
pub const CALLBACK_ORDER: LockRank = rank(
    "ordered callback's turn",
    1 << 4,
    &[
        BUFFER_SLOT_LEAF,
        CALLBACK_FAILURE,
        SEND_RECV,
        REGISTRY_SHARD,
    ],
);
/// `BUFFER_SLOT`'s bit with no followers, to name it inside the ranks it follows.
const BUFFER_SLOT_LEAF: LockRank = LockRank {
    name: "buffer slot",
    bit: 1 << 5,
    followers: 0,
};
/// A buffer slot's lock. An execute holds several (its arguments) across the plugin's call, in
/// which its callbacks run; a defragment holds many.
pub const BUFFER_SLOT: LockRank = rank(
    "buffer slot",
    1 << 5,
    &[
        BUFFER_SLOT_LEAF,
        CALLBACK_ORDER,
        CALLBACK_FAILURE,
        SEND_RECV,
        REGISTRY_SHARD,
        COMPILE_CACHE,
    ],
);

#[cfg(debug_assertions)]
thread_local! {
    /// The ranks this thread holds, in the order taken, with where each was taken.
    static HELD: std::cell::RefCell<Vec<(LockRank, &'static std::panic::Location<'static>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Held for as long as the lock it was taken with; dropping it forgets the rank.
#[must_use]
pub struct RankGuard {
    #[cfg(debug_assertions)]
    rank: LockRank,
}

/// Records that the current thread takes a lock of `rank`; in a debug build, panics when the
/// rank it took last does not allow `rank` after it.
#[track_caller]
pub fn acquire(rank: LockRank) -> RankGuard {
    #[cfg(debug_assertions)]
    {
        let here = std::panic::Location::caller();
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&(last, at)) = held.last()
                && last.followers & rank.bit == 0
            {
                drop(held);
                panic!(
                    "lock order: `{}` taken at {here} while `{}` is held (taken at {at}), which does not allow it",
                    rank.name, last.name
                );
            }
            held.push((rank, here));
        });
        RankGuard { rank }
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = rank;
        RankGuard {}
    }
}

#[cfg(debug_assertions)]
impl Drop for RankGuard {
    fn drop(&mut self) {
        // Locks may be let go in any order (an execute's argument slots): forget the latest
        // of this rank.
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|(r, _)| *r == self.rank) {
                held.remove(i);
            }
        });
    }
}

/// A lock guard with its rank: derefs to what the lock protects.
pub struct Ranked<G> {
    guard: G,
    _rank: RankGuard,
}

impl<G> Ranked<G> {
    /// Takes the rank, then the lock (`lock` runs only if the order allows it).
    #[track_caller]
    pub fn new(rank: LockRank, lock: impl FnOnce() -> G) -> Self {
        let _rank = acquire(rank);
        Ranked {
            guard: lock(),
            _rank,
        }
    }

    /// As `new`, for a lock that may not be had (`try_write`): `None` keeps no rank.
    #[track_caller]
    pub fn try_new(rank: LockRank, lock: impl FnOnce() -> Option<G>) -> Option<Self> {
        let _rank = acquire(rank);
        Some(Ranked {
            guard: lock()?,
            _rank,
        })
    }

    /// The guard itself (for a lock API that takes it, like a downgrade).
    pub fn guard_mut(&mut self) -> &mut G {
        &mut self.guard
    }
}

impl<G: Deref> Deref for Ranked<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Ranked<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_their_order_pass_and_may_be_let_go_in_any() {
        let slot_a = acquire(BUFFER_SLOT);
        let slot_b = acquire(BUFFER_SLOT);
        let turn = acquire(CALLBACK_ORDER);
        let nested_slot = acquire(BUFFER_SLOT);
        let shard = acquire(REGISTRY_SHARD);
        drop(slot_a);
        drop(shard);
        drop(nested_slot);
        drop(turn);
        drop(slot_b);
        HELD.with(|h| assert!(h.borrow().is_empty()));
    }

    #[test]
    fn a_lock_taken_out_of_order_is_caught_with_both_sites() {
        let caught = std::panic::catch_unwind(|| {
            let _shard = acquire(REGISTRY_SHARD);
            let _slot = acquire(BUFFER_SLOT);
        });
        let message = crate::supervision::panic_message(&*caught.unwrap_err());
        assert!(
            message.contains("`buffer slot` taken at")
                && message.contains("while `registry shard` is held")
                && message.contains("lock_rank.rs"),
            "{message}"
        );
        // The same ordered callback's turn directly inside another.
        let caught = std::panic::catch_unwind(|| {
            let _turn = acquire(CALLBACK_ORDER);
            let _again = acquire(CALLBACK_ORDER);
        });
        assert!(caught.is_err());
        HELD.with(|h| assert!(h.borrow().is_empty(), "guards unwound"));
    }
}
