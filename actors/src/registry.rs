//! The buffer and executable registries: every live device buffer and loaded executable, in a
//! `slab` behind typed ids of index + epoch, so a stale id is caught rather than aliased
//! (wgpu-core's id/storage idea). A buffer sits in a `BufferSlot` whose content can be swapped
//! (defragment) or taken (delete) while every handle keeps pointing at the same slot.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use slab::Slab;

use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::pjrt::PjrtBuffer;

/// A registry id: slab index plus the epoch it was issued in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    index: u32,
    epoch: u32,
}

impl Id {
    pub fn index(self) -> u32 {
        self.index
    }
    pub fn epoch(self) -> u32 {
        self.epoch
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}v{}", self.index, self.epoch)
    }
}

struct Entry<T> {
    epoch: u32,
    value: T,
}

/// A slab of `T` addressed by epoch-checked ids. Insert and remove are O(1) under a short lock.
pub struct Registry<T> {
    slab: Mutex<Slab<Entry<T>>>,
    epoch: AtomicU32,
    what: &'static str,
}

impl<T: Clone> Registry<T> {
    pub fn new(what: &'static str) -> Self {
        Registry {
            slab: Mutex::new(Slab::new()),
            epoch: AtomicU32::new(1),
            what,
        }
    }

    pub fn insert(&self, value: T) -> Id {
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed);
        let index = self.slab.lock().insert(Entry { epoch, value });
        Id {
            index: index as u32,
            epoch,
        }
    }

    /// Removes the entry if `id` is still current; a stale id removes nothing.
    pub fn remove(&self, id: Id) -> Option<T> {
        let mut slab = self.slab.lock();
        match slab.get(id.index as usize) {
            Some(e) if e.epoch == id.epoch => Some(slab.remove(id.index as usize).value),
            _ => None,
        }
    }

    /// The entry behind `id`, or `Error::StaleId` if it was removed (even if the index is reused).
    pub fn get(&self, id: Id) -> Result<T> {
        let slab = self.slab.lock();
        match slab.get(id.index as usize) {
            Some(e) if e.epoch == id.epoch => Ok(e.value.clone()),
            _ => Err(Error::StaleId {
                what: self.what,
                id: id.to_string(),
            }),
        }
    }

    pub fn len(&self) -> usize {
        self.slab.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, in index order.
    pub fn entries(&self) -> Vec<(Id, T)> {
        self.slab
            .lock()
            .iter()
            .map(|(index, e)| {
                (
                    Id {
                        index: index as u32,
                        epoch: e.epoch,
                    },
                    e.value.clone(),
                )
            })
            .collect()
    }
}

/// What a slot holds: a live buffer, or nothing once the array is deleted.
pub enum SlotState {
    Live(PjrtBuffer),
    Deleted,
}

/// One device buffer and its immutable description. The buffer behind it may be replaced
/// (defragment) under the write lock; readers (execute, read back) hold the read lock.
pub struct BufferSlot {
    state: RwLock<SlotState>,
    pub dtype: ElementType,
    pub dims: Vec<i64>,
    /// Index of the device in the client's device list.
    pub device: usize,
    /// Index of the memory space in the client's memory list.
    pub memory: usize,
    on_device_size: OnceLock<usize>,
}

impl BufferSlot {
    pub fn new(
        buffer: PjrtBuffer,
        dtype: ElementType,
        dims: Vec<i64>,
        device: usize,
        memory: usize,
    ) -> Self {
        BufferSlot {
            state: RwLock::new(SlotState::Live(buffer)),
            dtype,
            dims,
            device,
            memory,
            on_device_size: OnceLock::new(),
        }
    }

    /// Read access to the live buffer; `Error::Deleted` once deleted. Recursive, so one thread
    /// may hold several (the same array passed twice) even while a writer waits.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, SlotState>> {
        let guard = self.state.read_recursive();
        match &*guard {
            SlotState::Live(_) => Ok(guard),
            SlotState::Deleted => Err(Error::Deleted {
                what: format!("{}{:?} array", self.dtype, self.dims),
            }),
        }
    }

    /// Runs `f` on the live buffer.
    pub fn with_buffer<R>(&self, f: impl FnOnce(&PjrtBuffer) -> Result<R>) -> Result<R> {
        let guard = self.read()?;
        match &*guard {
            SlotState::Live(b) => f(b),
            SlotState::Deleted => unreachable!("read() checks liveness"),
        }
    }

    /// Frees the device buffer now; later uses of the array fail with `Error::Deleted`.
    pub fn delete(&self) {
        let old = std::mem::replace(&mut *self.state.write(), SlotState::Deleted);
        drop(old);
    }

    pub fn is_deleted(&self) -> bool {
        matches!(*self.state.read_recursive(), SlotState::Deleted)
    }

    /// Replaces the buffer (defragment); the old one is returned to the caller to drop.
    pub fn swap(&self, buffer: PjrtBuffer) -> Option<PjrtBuffer> {
        let mut state = self.state.write();
        match std::mem::replace(&mut *state, SlotState::Live(buffer)) {
            SlotState::Live(old) => Some(old),
            SlotState::Deleted => {
                *state = SlotState::Deleted;
                None
            }
        }
    }

    /// The buffer's size on its device, asked of the plugin once.
    pub fn on_device_size(&self) -> Result<usize> {
        if let Some(n) = self.on_device_size.get() {
            return Ok(*n);
        }
        let n = self.with_buffer(|b| b.on_device_size())?;
        Ok(*self.on_device_size.get_or_init(|| n))
    }
}

/// What the registry keeps per array: the slot (which owns the buffer) and a weak link to the
/// handle core, so `live_arrays` can hand out handles without keeping arrays alive.
#[derive(Clone)]
pub struct BufferEntry {
    pub slot: Arc<BufferSlot>,
    pub array: Weak<ArrayCore>,
}

/// The registry of live device buffers.
pub type BufferRegistry = Registry<BufferEntry>;

/// The core of an array handle: its id and slot. Dropping the last reference unregisters it,
/// which drops the registry's reference to the slot and so frees the buffer.
pub struct ArrayCore {
    pub id: Id,
    pub slot: Arc<BufferSlot>,
    registry: Arc<BufferRegistry>,
}

impl ArrayCore {
    /// Registers a new buffer and returns the handle core that owns its registration.
    pub fn register(registry: &Arc<BufferRegistry>, slot: BufferSlot) -> Arc<ArrayCore> {
        let slot = Arc::new(slot);
        Arc::new_cyclic(|weak| {
            let id = registry.insert(BufferEntry {
                slot: slot.clone(),
                array: weak.clone(),
            });
            ArrayCore {
                id,
                slot,
                registry: registry.clone(),
            }
        })
    }
}

impl Drop for ArrayCore {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}
