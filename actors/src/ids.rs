//! `Registry<T>`: a sharded `slab` behind typed ids of index + epoch, so a stale id is caught
//! rather than aliased (wgpu-core's id/storage idea). The buffer registry (`buffers.rs`) and
//! the executable registry are both one.

use std::fmt;
use std::marker::PhantomData;

use parking_lot::MutexGuard;
use slab::Slab;

use crate::error::{Error, Result};
use crate::lock_rank::{REGISTRY_SHARD, Ranked, RankedMutex};

/// The kinds of thing a registry holds, as id markers (wgpu-core's `id::markers`): an
/// `Id<kind::Array>` cannot be passed where an executable's id is wanted.
pub mod kind {
    /// Arrays (the buffer registry).
    #[derive(Debug)]
    pub enum Array {}
    /// Loaded executables.
    #[derive(Debug)]
    pub enum Executable {}
}

/// A live array's id.
pub type ArrayId = Id<kind::Array>;
/// A loaded executable's id.
pub type ExecutableId = Id<kind::Executable>;

/// A registry id: shard, slab index, and the epoch it was issued in, typed by the kind of
/// registry that issued it (`K`; `()` for an untyped registry).
pub struct Id<K = ()> {
    shard: u16,
    index: u32,
    epoch: u32,
    kind: PhantomData<fn() -> K>,
}

// By hand, not derived: a derive would ask the marker `K` for each trait.
impl<K> Clone for Id<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Id<K> {}
impl<K> PartialEq for Id<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<K> Eq for Id<K> {}
impl<K> std::hash::Hash for Id<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}
impl<K> PartialOrd for Id<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Id<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}
impl<K> fmt::Debug for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({self})")
    }
}

impl<K> Id<K> {
    fn new(shard: u16, index: u32, epoch: u32) -> Self {
        Id {
            shard,
            index,
            epoch,
            kind: PhantomData,
        }
    }

    fn key(self) -> (u16, u32, u32) {
        (self.shard, self.index, self.epoch)
    }

    pub fn shard(self) -> u16 {
        self.shard
    }
    pub fn index(self) -> u32 {
        self.index
    }
    pub fn epoch(self) -> u32 {
        self.epoch
    }
}

impl<K> fmt::Display for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}v{}", self.shard, self.index, self.epoch)
    }
}

struct Entry<T> {
    epoch: u32,
    value: T,
}

struct Entries<T> {
    slab: Slab<Entry<T>>,
    next_epoch: u32,
}

/// One shard on its own cache lines, so threads working on different shards never share one.
/// Its lock's rank is a leaf: nothing is taken while it is held.
#[repr(align(128))]
struct Shard<T>(RankedMutex<Entries<T>>);

impl<T> Shard<T> {
    #[track_caller]
    fn lock(&self) -> Ranked<MutexGuard<'_, Entries<T>>> {
        self.0.lock()
    }
}

/// A slab of `T` addressed by epoch-checked ids, in shards (one per device for buffers) so
/// threads on different devices do not contend. Insert and remove are O(1) under a short lock.
pub struct Registry<T, K = ()> {
    shards: Box<[Shard<T>]>,
    what: &'static str,
    kind: PhantomData<fn() -> K>,
}

impl<T: Clone, K> Registry<T, K> {
    pub fn new(what: &'static str, shards: usize) -> Self {
        Registry {
            shards: (0..shards.clamp(1, u16::MAX as usize))
                .map(|_| {
                    Shard(RankedMutex::new(
                        REGISTRY_SHARD,
                        Entries {
                            slab: Slab::new(),
                            next_epoch: 1,
                        },
                    ))
                })
                .collect(),
            what,
            kind: PhantomData,
        }
    }

    /// Inserts into the shard `shard_hint` maps to.
    pub fn insert(&self, shard_hint: usize, value: T) -> Id<K> {
        let shard = shard_hint % self.shards.len();
        let mut entries = self.shards[shard].lock();
        let epoch = entries.next_epoch;
        entries.next_epoch = epoch.wrapping_add(1).max(1);
        let index = entries.slab.insert(Entry { epoch, value });
        Id::new(shard as u16, index as u32, epoch)
    }

    fn shard(&self, id: Id<K>) -> Option<&Shard<T>> {
        self.shards.get(id.shard as usize)
    }

    /// Removes the entry if `id` is still current; a stale id removes nothing.
    pub fn remove(&self, id: Id<K>) -> Option<T> {
        let mut entries = self.shard(id)?.lock();
        match entries.slab.get(id.index as usize) {
            Some(e) if e.epoch == id.epoch => Some(entries.slab.remove(id.index as usize).value),
            _ => None,
        }
    }

    /// The entry behind `id`, or `Error::StaleId` if it was removed (even if the index is reused).
    pub fn get(&self, id: Id<K>) -> Result<T> {
        self.get_with(id, T::clone)
    }

    /// `f` of the entry behind `id`, read under the shard lock, or `Error::StaleId`.
    pub fn get_with<R>(&self, id: Id<K>, f: impl FnOnce(&T) -> R) -> Result<R> {
        let stale = || Error::StaleId {
            what: self.what,
            id: id.to_string(),
        };
        let entries = self.shard(id).ok_or_else(stale)?.lock();
        match entries.slab.get(id.index as usize) {
            Some(e) if e.epoch == id.epoch => Ok(f(&e.value)),
            _ => Err(stale()),
        }
    }

    /// Changes the entry behind `id` if it is still current; false for a stale id.
    pub fn update(&self, id: Id<K>, f: impl FnOnce(&mut T)) -> bool {
        let Some(shard) = self.shard(id) else {
            return false;
        };
        match shard.lock().slab.get_mut(id.index as usize) {
            Some(e) if e.epoch == id.epoch => {
                f(&mut e.value);
                true
            }
            _ => false,
        }
    }

    /// Visits every entry, shard by shard in index order, under the shard's lock (the same
    /// rule as [`collect`](Self::collect) for `f`).
    pub fn for_each(&self, mut f: impl FnMut(Id<K>, &T)) {
        for (shard, s) in self.shards.iter().enumerate() {
            let entries = s.lock();
            // `take` stops at the last entry instead of reading the vacant tail a burst of
            // short-lived arrays leaves behind.
            for (index, e) in entries.slab.iter().take(entries.slab.len()) {
                let id = Id::new(shard as u16, index as u32, e.epoch);
                f(id, &e.value);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().slab.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, shard by shard in index order, mapped under the shard's lock. `f` must not
    /// drop the last reference to anything that unregisters itself (that takes the lock).
    pub fn collect<U>(&self, mut f: impl FnMut(&T) -> Option<U>) -> Vec<U> {
        // Sized up front: `live_arrays` runs this over every array. Entries added meanwhile
        // only make it grow.
        let mut out = Vec::with_capacity(self.len());
        self.for_each(|_, value| out.extend(f(value)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_id_is_stale_even_when_its_index_is_reused() {
        let registry: Registry<&str> = Registry::new("thing", 1);
        let first = registry.insert(0, "first");
        assert_eq!(registry.get(first).unwrap(), "first");
        assert_eq!(registry.remove(first), Some("first"));
        let second = registry.insert(0, "second");
        assert_eq!(second.index(), first.index(), "the slab reuses the index");
        assert_ne!(second.epoch(), first.epoch());
        match registry.get(first) {
            Err(Error::StaleId { what: "thing", id }) => assert_eq!(id, first.to_string()),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            registry.remove(first),
            None,
            "a stale remove removes nothing"
        );
        assert!(!registry.update(first, |v| *v = "overwritten"));
        assert_eq!(registry.get(second).unwrap(), "second");
    }

    #[test]
    fn ids_go_to_the_shard_their_hint_maps_to_and_listing_is_shard_then_index_order() {
        let registry: Registry<u32> = Registry::new("thing", 3);
        let ids: Vec<Id> = (0..7).map(|n| registry.insert(n as usize, n)).collect();
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(id.shard() as usize, n % 3);
        }
        assert_eq!(registry.len(), 7);
        assert_eq!(registry.collect(|v| Some(*v)), vec![0, 3, 6, 1, 4, 2, 5]);
        registry.remove(ids[3]);
        assert_eq!(
            registry.collect(|v| (v % 2 == 0).then_some(*v)),
            vec![0, 6, 4, 2]
        );
        let mut listed = Vec::new();
        registry.for_each(|id, _| listed.push(id));
        assert!(!listed.contains(&ids[3]));
        assert_eq!(listed.len(), 6);
    }

    #[test]
    fn epochs_never_repeat_across_many_reuses_of_one_index() {
        let registry: Registry<()> = Registry::new("thing", 1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let id = registry.insert(0, ());
            assert!(seen.insert(id), "{id} issued twice");
            registry.remove(id);
        }
        assert!(registry.is_empty());
    }
}
