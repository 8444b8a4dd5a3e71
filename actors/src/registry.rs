//! The buffer and executable registries: every live device buffer and loaded executable, in a
//! `slab` behind typed ids of index + epoch, so a stale id is caught rather than aliased
//! (wgpu-core's id/storage idea). A buffer sits in a `BufferSlot` whose content can be swapped
//! (defragment) or taken (delete) while every handle keeps pointing at the same slot.

use std::fmt;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use slab::Slab;

use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::pjrt::PjrtBuffer;

/// A registry id: shard, slab index, and the epoch it was issued in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    shard: u16,
    index: u32,
    epoch: u32,
}

impl Id {
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

impl fmt::Display for Id {
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
#[repr(align(128))]
struct Shard<T>(Mutex<Entries<T>>);

/// A slab of `T` addressed by epoch-checked ids, in shards (one per device for buffers) so
/// threads on different devices do not contend. Insert and remove are O(1) under a short lock.
pub struct Registry<T> {
    shards: Box<[Shard<T>]>,
    what: &'static str,
}

impl<T: Clone> Registry<T> {
    pub fn new(what: &'static str, shards: usize) -> Self {
        Registry {
            shards: (0..shards.clamp(1, u16::MAX as usize))
                .map(|_| {
                    Shard(Mutex::new(Entries {
                        slab: Slab::new(),
                        next_epoch: 1,
                    }))
                })
                .collect(),
            what,
        }
    }

    /// Inserts into the shard `shard_hint` maps to.
    pub fn insert(&self, shard_hint: usize, value: T) -> Id {
        let shard = shard_hint % self.shards.len();
        let mut entries = self.shards[shard].0.lock();
        let epoch = entries.next_epoch;
        entries.next_epoch = epoch.wrapping_add(1).max(1);
        let index = entries.slab.insert(Entry { epoch, value });
        Id {
            shard: shard as u16,
            index: index as u32,
            epoch,
        }
    }

    fn shard(&self, id: Id) -> Option<&Mutex<Entries<T>>> {
        self.shards.get(id.shard as usize).map(|s| &s.0)
    }

    /// Removes the entry if `id` is still current; a stale id removes nothing.
    pub fn remove(&self, id: Id) -> Option<T> {
        let mut entries = self.shard(id)?.lock();
        match entries.slab.get(id.index as usize) {
            Some(e) if e.epoch == id.epoch => Some(entries.slab.remove(id.index as usize).value),
            _ => None,
        }
    }

    /// The entry behind `id`, or `Error::StaleId` if it was removed (even if the index is reused).
    pub fn get(&self, id: Id) -> Result<T> {
        self.get_with(id, T::clone)
    }

    /// `f` of the entry behind `id`, read under the shard lock, or `Error::StaleId`.
    pub fn get_with<R>(&self, id: Id, f: impl FnOnce(&T) -> R) -> Result<R> {
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
    pub fn update(&self, id: Id, f: impl FnOnce(&mut T)) -> bool {
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
    pub fn for_each(&self, mut f: impl FnMut(Id, &T)) {
        for (shard, s) in self.shards.iter().enumerate() {
            let entries = s.0.lock();
            // `take` stops at the last entry instead of reading the vacant tail a burst of
            // short-lived arrays leaves behind.
            for (index, e) in entries.slab.iter().take(entries.slab.len()) {
                let id = Id {
                    shard: shard as u16,
                    index: index as u32,
                    epoch: e.epoch,
                };
                f(id, &e.value);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().slab.len()).sum()
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

    /// Every entry, shard by shard in index order.
    pub fn entries(&self) -> Vec<(Id, T)> {
        let mut out = Vec::new();
        self.for_each(|id, value| out.push((id, value.clone())));
        out
    }
}

/// What a slot holds.
pub enum SlotState {
    /// A device buffer.
    Live(PjrtBuffer),
    /// The array's bytes in host memory: a defragment freed the device buffer and could not
    /// upload it again. Nothing is lost; the next defragment puts it back on the device.
    OnHost(Vec<u8>),
    /// Deleted; nothing is held.
    Deleted,
}

/// One device buffer and its immutable description. The buffer behind it may be replaced
/// (defragment) under the write lock; readers (execute, read back) hold the read lock.
pub struct BufferSlot {
    state: RwLock<SlotState>,
    pub dtype: ElementType,
    pub dims: Arc<[i64]>,
    /// Index of the device in the client's device list.
    pub device: usize,
    /// Index of the memory space in the client's memory list.
    pub memory: usize,
}

impl BufferSlot {
    pub fn new(
        buffer: PjrtBuffer,
        dtype: ElementType,
        dims: Arc<[i64]>,
        device: usize,
        memory: usize,
    ) -> Self {
        BufferSlot {
            state: RwLock::new(SlotState::Live(buffer)),
            dtype,
            dims,
            device,
            memory,
        }
    }

    fn deleted_error(&self) -> Error {
        Error::Deleted {
            what: format!("{}{:?} array", self.dtype, self.dims),
        }
    }

    /// Read access to the live buffer; `Error::Deleted` once deleted. Recursive, so one thread
    /// may hold several (the same array passed twice) even while a writer waits.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, SlotState>> {
        let guard = self.state.read_recursive();
        match &*guard {
            SlotState::Live(_) => Ok(guard),
            SlotState::OnHost(_) => Err(Error::OnHost {
                what: format!("{}{:?} array", self.dtype, self.dims),
            }),
            SlotState::Deleted => Err(self.deleted_error()),
        }
    }

    /// Runs `f` on the live buffer.
    pub fn with_buffer<R>(&self, f: impl FnOnce(&PjrtBuffer) -> Result<R>) -> Result<R> {
        let guard = self.read()?;
        match &*guard {
            SlotState::Live(b) => f(b),
            SlotState::OnHost(_) | SlotState::Deleted => unreachable!("read() checks liveness"),
        }
    }

    /// Reads the array's dense bytes: from the device, or from the host copy a failed
    /// defragment left.
    pub fn read_bytes(&self, dst: &mut [u8]) -> Result<()> {
        let guard = self.state.read_recursive();
        match &*guard {
            SlotState::Live(b) => b.read_into(dst, self.dims.len()),
            SlotState::OnHost(bytes) if bytes.len() == dst.len() => {
                dst.copy_from_slice(bytes);
                Ok(())
            }
            SlotState::OnHost(_) => Err(Error::InvalidArgument("wrong destination size".into())),
            SlotState::Deleted => Err(self.deleted_error()),
        }
    }

    /// Reads into a typed slice of exactly the array's size and element type.
    pub fn read_typed<T: crate::pjrt::NativeType>(&self, dst: &mut [T]) -> Result<()> {
        if T::TYPE != self.dtype {
            return Err(Error::InvalidArgument(format!(
                "cannot read a {} array into a slice of {}",
                self.dtype,
                T::TYPE
            )));
        }
        let guard = self.state.read_recursive();
        match &*guard {
            SlotState::Live(b) => crate::pjrt::read_typed(b, self.dtype, self.dims.len(), dst),
            SlotState::OnHost(bytes) => crate::pjrt::copy_typed(bytes, dst),
            SlotState::Deleted => Err(self.deleted_error()),
        }
    }

    /// Defragment's move of one buffer: under the write lock, frees the device buffer (or the
    /// host copy) and uploads `bytes` in its place with `upload`. If the upload fails the bytes
    /// stay in the slot (`OnHost`). Returns `Ok(false)` for a deleted array (nothing to move).
    pub fn relocate(
        &self,
        bytes: Vec<u8>,
        upload: impl FnOnce(&[u8]) -> Result<PjrtBuffer>,
    ) -> Result<bool> {
        let mut state = self.state.write();
        if matches!(*state, SlotState::Deleted) {
            return Ok(false);
        }
        // Free first, so the new allocation can use the space the old one held.
        *state = SlotState::OnHost(Vec::new());
        match upload(&bytes) {
            Ok(buffer) => {
                *state = SlotState::Live(buffer);
                Ok(true)
            }
            Err(e) => {
                *state = SlotState::OnHost(bytes);
                Err(e)
            }
        }
    }

    /// Whether a failed defragment left the array's bytes in host memory.
    pub fn is_on_host(&self) -> bool {
        matches!(*self.state.read_recursive(), SlotState::OnHost(_))
    }

    /// Frees the device buffer now; later uses of the array fail with `Error::Deleted`.
    pub fn delete(&self) {
        let old = std::mem::replace(&mut *self.state.write(), SlotState::Deleted);
        drop(old);
    }

    pub fn is_deleted(&self) -> bool {
        matches!(*self.state.read_recursive(), SlotState::Deleted)
    }
}

/// The registry of live arrays. It holds weak links: it lists every live buffer (and can
/// reach it, e.g. to move it) without keeping any alive; the array handles own them.
pub type BufferRegistry = Registry<BufferEntry>;

/// What the buffer registry keeps of one array: a weak link to it, and what a heap profile
/// counts, so that a profile reads this dense table and touches no array (no upgrade, no
/// cache miss per array) once each array's size is known.
#[derive(Clone)]
pub struct BufferEntry {
    pub array: Weak<ArrayCore>,
    /// Where it was made.
    pub site: crate::site::Site,
    /// The plugin's on-device size once a heap profile asked for it; `usize::MAX` until then
    /// (not an `Option`: the entry stays small, and listing reads every entry).
    size: usize,
    /// Index of the device in the client's device list.
    pub device: u32,
    /// Set by [`ArrayCore::delete`], the one writer, under the shard lock: the slot's state
    /// says the same, but a heap profile reads this dense table and never the slots.
    pub deleted: bool,
}

impl BufferEntry {
    /// The on-device size, if a heap profile asked for it already.
    pub fn size(&self) -> Option<usize> {
        (self.size != usize::MAX).then_some(self.size)
    }

    pub fn set_size(&mut self, size: usize) {
        self.size = size;
    }
}

impl BufferRegistry {
    /// Every live array (py_client's `live_arrays`). Upgraded under the shard locks: an
    /// array whose last handle is being dropped is not listed, and none is dropped here.
    pub fn live_arrays(&self) -> Vec<Arc<ArrayCore>> {
        self.collect(|e| e.array.upgrade())
    }

    /// The plugin's size of `array`'s buffer, from its entry once known, else asked of the
    /// plugin and written to the entry: the one place the size is kept.
    pub fn on_device_size(&self, array: &ArrayCore) -> Result<usize> {
        if let Ok(Some(size)) = self.get_with(array.id, |e| e.size()) {
            return Ok(size);
        }
        let size = array.slot.with_buffer(|b| b.on_device_size())?;
        self.update(array.id, |e| e.set_size(size));
        Ok(size)
    }
}

/// What owns a client's arrays: the state every handle of the client shares. An array keeps
/// its owner alive (so its buffer never outlives the client) and unregisters from it on drop.
/// One `Arc` serves both, so making or dropping an array touches one shared refcount, not two.
pub trait ArrayOwner: Send + Sync + 'static {
    fn buffers(&self) -> &BufferRegistry;
    /// `Error::ShutDown` once the owning client was shut down.
    fn check_open(&self) -> Result<()>;
}

/// The core of an array handle: its id and the slot that owns its buffer. Dropping the last
/// reference unregisters it and frees the buffer.
pub struct ArrayCore {
    pub id: Id,
    pub slot: BufferSlot,
    owner: Arc<dyn ArrayOwner>,
}

impl ArrayCore {
    /// Registers a new buffer with its owner and returns the handle core that owns it.
    pub fn register(
        owner: Arc<dyn ArrayOwner>,
        slot: BufferSlot,
        site: crate::site::Site,
    ) -> Arc<ArrayCore> {
        Arc::new_cyclic(|weak| {
            let entry = BufferEntry {
                array: weak.clone(),
                site,
                size: usize::MAX,
                device: slot.device as u32,
                deleted: false,
            };
            ArrayCore {
                id: owner.buffers().insert(slot.device, entry),
                slot,
                owner,
            }
        })
    }

    /// Frees the device buffer now; later uses fail with `Error::Deleted`, and heap profiles
    /// leave the array out.
    pub fn delete(&self) {
        self.slot.delete();
        self.owner.buffers().update(self.id, |e| e.deleted = true);
    }

    pub fn owner(&self) -> &Arc<dyn ArrayOwner> {
        &self.owner
    }

    /// Whether this array belongs to `owner` (by identity).
    pub fn owned_by<T: ArrayOwner>(&self, owner: &Arc<T>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.owner), Arc::as_ptr(owner))
    }
}

impl Drop for ArrayCore {
    fn drop(&mut self) {
        self.owner.buffers().remove(self.id);
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
        let listed: Vec<Id> = registry.entries().into_iter().map(|(id, _)| id).collect();
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
