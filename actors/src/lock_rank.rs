//! Lock ranks, checked in debug builds (wgpu-core's `lock/rank.rs` and `lock/ranked.rs` are
//! the model): each lock that can be held together with another is a [`RankedMutex`] or
//! [`RankedRwLock`] built with its rank, which names the ranks that may be taken while it is
//! held. The rank lives in the lock, so no acquisition goes unchecked, and taking one out of
//! order panics at once with both call sites instead of deadlocking some day under load.
//! Release builds keep nothing and check nothing.

use std::ops::{Deref, DerefMut};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

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

/// The bit the subsystem leaves below share: a compile or an execute may take any of them
/// under a callback's turn or a buffer slot (a callback compiles and runs programs).
const SUBSYSTEM_LEAF: LockRank = LockRank {
    name: "a subsystem's leaf",
    bit: 1 << 6,
    followers: 0,
};

/// A leaf of one subsystem, named: nothing is taken while it is held, and it is never held
/// together with another (each guards one small piece of state for an instant, or a wait).
const fn leaf(name: &'static str) -> LockRank {
    LockRank {
        name,
        ..SUBSYSTEM_LEAF
    }
}

/// The Redis tier's connection, or the key-value store's: held while connecting (one attempt
/// at a time) and, for the store's blocking connection, for one operation.
#[cfg(feature = "redis")]
pub const REDIS_CONNECTION: LockRank = leaf("Redis connection");
/// What a Redis failure keeps the tier from asking (`Skips`).
#[cfg(feature = "redis")]
pub const REDIS_SKIPS: LockRank = leaf("Redis tier's skips");
/// When the tier last asked a cluster for its slot map.
#[cfg(feature = "redis")]
pub const REDIS_MAP_ASKED: LockRank = leaf("Redis tier's slot-map time");
/// Compiles waiting for a wake-up on a Redis channel (with its condition variable).
#[cfg(feature = "redis")]
pub const REDIS_WAKE: LockRank = leaf("Redis tier's wake-up waiters");
/// A compile worker's child process, shared with its watchdog.
pub const WORKER_PROCESS: LockRank = leaf("compile worker process");
/// The sha256 of each plugin file read, once a process (the known-defect table's key).
pub const PLUGIN_DIGESTS: LockRank = leaf("plugin file digests");
/// The runtime's threads to join, and how long to wait for workers.
pub const RUNTIME_THREADS: LockRank = leaf("runtime threads");
/// The count of live compiler worker threads (with its condition variable).
pub const WORKER_COUNT: LockRank = leaf("compiler worker count");
/// Worker tokens handed to compiler threads as they start.
pub const WORKER_TOKENS: LockRank = leaf("compiler worker tokens");

/// Leaves: nothing is taken while one is held.
pub const REGISTRY_SHARD: LockRank = rank("registry shard", 1 << 0, &[]);
pub const CALLBACK_FAILURE: LockRank = rank("callback failure", 1 << 1, &[]);
pub const COMPILE_CACHE: LockRank = rank("memory compile cache", 1 << 2, &[]);
/// A program's send/recv transfer state: a callback's first failure may be kept under it.
pub const SEND_RECV: LockRank = rank("send/recv state", 1 << 3, &[CALLBACK_FAILURE]);
/// An ordered callback's turn. A callback may call back into the runtime: compile (the memory
/// compile cache), run another program (re-entrant), whose execute takes its arguments' slots,
/// its own callbacks' turns and registers its outputs, list live arrays and profile the heap
/// (the registry's shards, then slots); but never the same kind of turn directly inside this
/// one.
pub const CALLBACK_ORDER: LockRank = rank(
    "ordered callback's turn",
    1 << 4,
    &[
        BUFFER_SLOT_LEAF,
        CALLBACK_FAILURE,
        SEND_RECV,
        REGISTRY_SHARD,
        COMPILE_CACHE,
        SUBSYSTEM_LEAF,
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
        SUBSYSTEM_LEAF,
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
    /// Takes the rank, then the lock (`lock` runs only if the order allows it). Private: only
    /// the ranked lock types below take locks.
    #[track_caller]
    fn new(rank: LockRank, lock: impl FnOnce() -> G) -> Self {
        let _rank = acquire(rank);
        Ranked {
            guard: lock(),
            _rank,
        }
    }

    /// As `new`, for a lock that may not be had (`try_write`): `None` keeps no rank.
    #[track_caller]
    fn try_new(rank: LockRank, lock: impl FnOnce() -> Option<G>) -> Option<Self> {
        let _rank = acquire(rank);
        Some(Ranked {
            guard: lock()?,
            _rank,
        })
    }
}

impl<T> Ranked<MutexGuard<'_, T>> {
    /// Waits on `condvar` until notified or `deadline`, the lock let go meanwhile (its rank
    /// stays: nothing is taken while waiting).
    pub fn wait_until(
        &mut self,
        condvar: &parking_lot::Condvar,
        deadline: std::time::Instant,
    ) -> parking_lot::WaitTimeoutResult {
        condvar.wait_until(&mut self.guard, deadline)
    }
}

/// A mutex with its rank: every `lock` is checked against the ranks this thread holds.
pub struct RankedMutex<T> {
    rank: LockRank,
    inner: Mutex<T>,
}

impl<T> RankedMutex<T> {
    pub const fn new(rank: LockRank, value: T) -> Self {
        RankedMutex {
            rank,
            inner: Mutex::new(value),
        }
    }

    #[track_caller]
    pub fn lock(&self) -> Ranked<MutexGuard<'_, T>> {
        Ranked::new(self.rank, || self.inner.lock())
    }
}

/// A reader-writer lock with its rank: every read and write is checked as a `RankedMutex`'s
/// lock is (readers of one rank may nest where the rank allows itself, as buffer slots do).
pub struct RankedRwLock<T> {
    rank: LockRank,
    inner: RwLock<T>,
}

impl<T> RankedRwLock<T> {
    pub const fn new(rank: LockRank, value: T) -> Self {
        RankedRwLock {
            rank,
            inner: RwLock::new(value),
        }
    }

    #[track_caller]
    pub fn read(&self) -> Ranked<RwLockReadGuard<'_, T>> {
        Ranked::new(self.rank, || self.inner.read())
    }

    /// A read lock that does not wait behind a waiting writer, so one thread may hold several.
    #[track_caller]
    pub fn read_recursive(&self) -> Ranked<RwLockReadGuard<'_, T>> {
        Ranked::new(self.rank, || self.inner.read_recursive())
    }

    #[track_caller]
    pub fn write(&self) -> Ranked<RwLockWriteGuard<'_, T>> {
        Ranked::new(self.rank, || self.inner.write())
    }

    /// The write lock if no one holds the lock now; never waits.
    #[track_caller]
    pub fn try_write(&self) -> Option<Ranked<RwLockWriteGuard<'_, T>>> {
        Ranked::try_new(self.rank, || self.inner.try_write())
    }
}

impl<T: Default> RankedRwLock<T> {
    pub fn with_default(rank: LockRank) -> Self {
        RankedRwLock::new(rank, T::default())
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

    /// A caught panic's message (this module imports nothing of the crate, so no cycle).
    fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
        (payload.downcast_ref::<String>().cloned())
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

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
        let message = panic_text(caught.unwrap_err());
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

    #[test]
    fn the_lock_types_check_their_rank_on_every_acquisition() {
        let shard = RankedMutex::new(REGISTRY_SHARD, 0u32);
        let slot = RankedRwLock::new(BUFFER_SLOT, 0u32);
        let cache = RankedRwLock::new(COMPILE_CACHE, 0u32);
        {
            let _slot = slot.read_recursive();
            let _again = slot.read_recursive();
            *shard.lock() += 1;
            *cache.write() += 1;
        }
        let takes: [&dyn Fn(); 3] = [&|| drop(slot.read()), &|| drop(slot.write()), &|| {
            drop(slot.try_write())
        }];
        for take in takes {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _shard = shard.lock();
                take();
            }));
            let message = panic_text(caught.unwrap_err());
            assert!(
                message.contains("while `registry shard` is held"),
                "{message}"
            );
        }
        assert_eq!(*shard.lock(), 1);
        assert_eq!(*cache.read(), 1);
        HELD.with(|h| assert!(h.borrow().is_empty(), "guards unwound"));
    }
}
