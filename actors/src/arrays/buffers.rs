//! The arrays' side of the registry: every live device buffer sits in a `BufferSlot` whose
//! content can be swapped (defragment) or taken (delete) while every handle keeps pointing at
//! the same slot; `ArrayCore` is the core of an array handle, and `BufferEntry` what the
//! buffer registry keeps of it for listing and heap profiles.

use std::sync::{Arc, Weak};

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

use crate::arrays::memory_account::MemoryAccount;
use crate::lock_rank::{BUFFER_SLOT, Ranked, RankedRwLock};

use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::ids::{ArrayId, Registry, kind};
use crate::pjrt::PjrtBuffer;

/// A slot's read lock, with its lock rank.
pub type SlotRead<'a> = Ranked<RwLockReadGuard<'a, SlotState>>;

/// What a slot holds.
pub enum SlotState {
    /// A device buffer.
    Live(PjrtBuffer),
    /// The array's bytes in host memory: a defragment freed the device buffer and could not
    /// upload it again. Nothing is lost; the next defragment puts it back on the device.
    OnHost(Vec<u8>),
    /// Deleted, and the buffer freed.
    Deleted,
    /// The buffer is out with an execute that donates it: deleted to every other use.
    Donating,
}

/// One device buffer and its immutable description. The buffer behind it may be replaced
/// (defragment) under the write lock; readers (execute, read back) hold the read lock. No
/// writer ever waits for a reader: an execute can run for as long as its program does, and a
/// callback inside it may delete or defragment its own arguments.
pub struct BufferSlot {
    pub(super) state: RankedRwLock<SlotState>,
    /// Whether `delete` was called: the one record of it. The state follows (`Deleted`, the
    /// buffer freed) as soon as no operation holds the buffer: at once if none does, else at
    /// the first access after, or with the slot.
    deleted: std::sync::atomic::AtomicBool,
    /// Operations queued on a device actor that will use the buffer
    /// ([`PendingUse`](super::donation::PendingUse)s): a
    /// donation refuses to take a buffer that later work was promised.
    pub(super) pending: std::sync::atomic::AtomicU32,
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
            state: RankedRwLock::new(BUFFER_SLOT, SlotState::Live(buffer)),
            deleted: std::sync::atomic::AtomicBool::new(false),
            pending: std::sync::atomic::AtomicU32::new(0),
            dtype,
            dims,
            device,
            memory,
        }
    }

    /// `f32[4] array`: how errors name the array.
    pub(super) fn what(&self) -> String {
        format!("{}{:?} array", self.dtype, self.dims)
    }

    pub(super) fn deleted_error(&self) -> Error {
        Error::Deleted { what: self.what() }
    }

    /// Frees the buffer of a deleted array if no operation holds it; never waits. True when a
    /// deleted array's buffer is freed now (or was before).
    pub fn settle(&self) -> bool {
        if self.is_deleted()
            && let Some(mut state) = self.state.try_write()
        {
            let old = std::mem::replace(&mut *state, SlotState::Deleted);
            drop(state);
            drop(old);
            return true;
        }
        false
    }

    /// The read lock, refusing a deleted array (whose buffer may still be held by an
    /// operation that started before the delete).
    #[track_caller]
    fn read_live(&self) -> Result<SlotRead<'_>> {
        self.settle();
        let guard = self.state.read_recursive();
        if self.is_deleted() {
            return Err(self.deleted_error());
        }
        Ok(guard)
    }

    /// Read access to the live buffer; `Error::Deleted` once deleted. Recursive, so one thread
    /// may hold several (the same array passed twice).
    #[track_caller]
    pub fn read(&self) -> Result<SlotRead<'_>> {
        let guard = self.read_live()?;
        match &*guard {
            SlotState::Live(_) => Ok(guard),
            SlotState::OnHost(_) => Err(Error::OnHost { what: self.what() }),
            SlotState::Deleted | SlotState::Donating => Err(self.deleted_error()),
        }
    }

    /// Runs `f` on the live buffer.
    pub fn with_buffer<R>(&self, f: impl FnOnce(&PjrtBuffer) -> Result<R>) -> Result<R> {
        let guard = self.read()?;
        match &*guard {
            SlotState::Live(b) => f(b),
            _ => unreachable!("read() checks liveness"),
        }
    }

    /// Reads the array's dense bytes: from the device, or from the host copy a failed
    /// defragment left.
    pub fn read_bytes(&self, dst: &mut [u8]) -> Result<()> {
        let guard = self.read_live()?;
        match &*guard {
            SlotState::Live(b) => Ok(b.read_into(dst, self.dims.len())?),
            SlotState::OnHost(bytes) if bytes.len() == dst.len() => {
                dst.copy_from_slice(bytes);
                Ok(())
            }
            SlotState::OnHost(_) => Err(Error::InvalidArgument("wrong destination size".into())),
            SlotState::Deleted | SlotState::Donating => Err(self.deleted_error()),
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
        let guard = self.read_live()?;
        match &*guard {
            SlotState::Live(b) => Ok(crate::pjrt::read_typed(
                b,
                self.dtype,
                self.dims.len(),
                dst,
            )?),
            SlotState::OnHost(bytes) => Ok(crate::pjrt::copy_typed(bytes, dst)?),
            SlotState::Deleted | SlotState::Donating => Err(self.deleted_error()),
        }
    }

    /// Defragment's hold on this buffer: its write lock, so nothing uses it while it moves
    /// (others wait for it). `None` when an operation holds it or it was deleted: never waits.
    pub fn hold(&self) -> Option<MoveHold<'_>> {
        self.settle();
        let state = self.state.try_write()?;
        if self.is_deleted() || matches!(*state, SlotState::Deleted | SlotState::Donating) {
            return None;
        }
        Some(MoveHold { slot: self, state })
    }

    /// Whether a failed defragment left the array's bytes in host memory.
    pub fn is_on_host(&self) -> bool {
        let state = self.state.read_recursive();
        matches!(*state, SlotState::OnHost(_))
    }

    /// Marks the array deleted: every later use fails with `Error::Deleted`. True the first
    /// time. The buffer is freed by [`settle`](Self::settle), which `ArrayCore::delete` calls
    /// next (and credits the account when it frees).
    pub fn mark_deleted(&self) -> bool {
        !self.deleted.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// The array's dense size in bytes (dtype × dims), what its memory space's account holds
    /// for it (0 where the size does not fit a `u64`, which no buffer has).
    pub fn dense_bytes(&self) -> u64 {
        crate::dtype::byte_size(self.dtype, &self.dims).map_or(0, |n| n as u64)
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A buffer held for a move: taken off its device into host memory (`evict`), then put back
/// (`restore`); if putting it back fails the bytes stay on the host (`OnHost`), readable, and
/// the next defragment tries again.
pub struct MoveHold<'a> {
    slot: &'a BufferSlot,
    state: Ranked<RwLockWriteGuard<'a, SlotState>>,
}

impl<'a> MoveHold<'a> {
    /// Copies the device buffer to host memory and frees it; returns the bytes moved (a buffer
    /// already on the host from a failed defragment is left as it is).
    pub fn evict(&mut self) -> Result<usize> {
        Ok(match self.read_out()? {
            Some(bytes) => self.evict_with(bytes),
            None => 0,
        })
    }

    /// The device buffer's bytes, read without changing anything (`None` when the bytes are on
    /// the host already): the half of `evict` that many holds can run at once.
    pub fn read_out(&self) -> Result<Option<Vec<u8>>> {
        let SlotState::Live(buffer) = &*self.state else {
            return Ok(None);
        };
        let mut bytes = vec![0u8; crate::dtype::byte_size(self.slot.dtype, &self.slot.dims)?];
        buffer.read_into(&mut bytes, self.slot.dims.len())?;
        Ok(Some(bytes))
    }

    /// The other half: keeps `bytes` (from `read_out`) on the host and frees the device buffer.
    pub fn evict_with(&mut self, bytes: Vec<u8>) -> usize {
        let len = bytes.len();
        *self.state = SlotState::OnHost(bytes);
        len
    }

    /// The host bytes a restore would upload (`None` when the buffer is on its device).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &*self.state {
            SlotState::OnHost(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Puts an uploaded buffer (of `host_bytes`) in place of the host bytes.
    pub fn put_back(&mut self, buffer: PjrtBuffer) {
        *self.state = SlotState::Live(buffer);
    }

    /// Uploads the host bytes with `upload` back into the slot; `Ok(false)` if there were none.
    pub fn restore(&mut self, upload: impl FnOnce(&[u8]) -> Result<PjrtBuffer>) -> Result<bool> {
        let Some(bytes) = self.host_bytes() else {
            return Ok(false);
        };
        let buffer = upload(bytes)?;
        self.put_back(buffer);
        Ok(true)
    }

    /// The slot held.
    pub fn slot(&self) -> &'a BufferSlot {
        self.slot
    }
}

/// The registry of live arrays. It holds weak links: it lists every live buffer (and can
/// reach it, e.g. to move it) without keeping any alive; the array handles own them.
pub type BufferRegistry = Registry<BufferEntry, kind::Array>;

/// What the buffer registry keeps of one array: a weak link to it, and what a heap profile
/// counts, so that a profile reads this dense table and touches no array (no upgrade, no
/// cache miss per array) once each array's size is known.
#[derive(Clone)]
pub struct BufferEntry {
    pub array: Weak<ArrayCore>,
    /// Where it was made.
    pub site: crate::arrays::site::Site,
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
        let size = array.slot.with_buffer(|b| Ok(b.on_device_size()?))?;
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
    /// The account of memory space `memory`, which an array charges while it holds bytes there.
    fn memory_account(&self, memory: usize) -> &MemoryAccount;
    /// Hands a deleted array whose buffer an operation still holds to its device's actor,
    /// which frees the buffer as soon as the operation lets go.
    fn defer_free(&self, device: usize, array: Weak<ArrayCore>);
    /// The owner as `Any`, so a handle can get its typed client back from an array it holds
    /// (the client's guard is the only owner outside tests).
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// The core of an array handle: its id and the slot that owns its buffer. Dropping the last
/// reference unregisters it and frees the buffer.
pub struct ArrayCore {
    pub id: ArrayId,
    pub slot: BufferSlot,
    owner: Arc<dyn ArrayOwner>,
    /// What it charged its memory space's account (its dense size), credited back once, when
    /// its buffer is freed: at a delete no operation holds up, when its device actor frees a
    /// deferred one, or at its drop.
    charged: u64,
    /// Whether `charged` was credited back.
    credited: std::sync::atomic::AtomicBool,
}

impl ArrayCore {
    /// Registers a new buffer with its owner and returns the handle core that owns it.
    pub fn register(
        owner: Arc<dyn ArrayOwner>,
        slot: BufferSlot,
        site: crate::arrays::site::Site,
    ) -> Arc<ArrayCore> {
        let charged = slot.dense_bytes();
        owner.memory_account(slot.memory).charge(charged);
        Self::register_charged(owner, slot, site, charged)
    }

    /// `register` for an upload that charged its memory space's account `charged` bytes already
    /// (its dense size, within the budget, before the plugin allocated).
    pub fn register_charged(
        owner: Arc<dyn ArrayOwner>,
        slot: BufferSlot,
        site: crate::arrays::site::Site,
        charged: u64,
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
                charged,
                credited: std::sync::atomic::AtomicBool::new(false),
            }
        })
    }

    /// Credits the array's charge back to its memory space's account, the first time only.
    fn credit_once(&self) {
        if !self
            .credited
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            (self.owner.memory_account(self.slot.memory)).credit(self.charged);
        }
    }

    /// Frees a deleted array's buffer if no operation holds it now, crediting its charge back;
    /// false while one does (its device actor asks again).
    pub fn free_if_deleted(&self) -> bool {
        let freed = self.slot.settle();
        if freed {
            self.credit_once();
        }
        freed
    }

    /// Frees the device buffer now; later uses fail with `Error::Deleted`, and heap profiles
    /// leave the array out.
    pub fn delete(self: &Arc<Self>) {
        let first = self.slot.mark_deleted();
        self.owner.buffers().update(self.id, |e| e.deleted = true);
        // Never waits: the buffer is freed now if no operation holds it (an execute running, a
        // callback inside it); else its device actor frees it once the operation ends, not
        // whenever the array is next touched, and the account holds its bytes until then, as
        // the device does.
        if !self.free_if_deleted() && first {
            self.owner
                .defer_free(self.slot.device, Arc::downgrade(self));
        }
    }

    /// Records a donation its execute made ([`DonationHold::consumed`]): the registry lists it
    /// deleted and its memory space's account is credited (the output that took its buffer was
    /// charged as a new array).
    pub fn donated(&self) {
        self.owner.buffers().update(self.id, |e| e.deleted = true);
        self.credit_once();
    }

    pub fn owner(&self) -> &Arc<dyn ArrayOwner> {
        &self.owner
    }

    /// Whether this array belongs to `owner` (by identity).
    pub fn owned_by<T: ArrayOwner + ?Sized>(&self, owner: &Arc<T>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.owner), Arc::as_ptr(owner))
    }

    /// Reads the array's dense bytes: from its device, or from the host copy a failed
    /// defragment left. The one read: blocking handles call it inline, the device actor for
    /// the async form.
    pub fn read(&self) -> Result<Vec<u8>> {
        self.owner.check_open()?;
        let mut out = vec![0u8; crate::dtype::byte_size(self.slot.dtype, &self.slot.dims)?];
        self.slot.read_bytes(&mut out)?;
        Ok(out)
    }

    /// Waits until the buffer's contents are computed or `deadline` passes (`Ok(false)`); a
    /// failed computation's error comes back. The wait is a ready callback and a channel, so
    /// giving up leaves nothing blocked.
    pub fn wait_ready_until(&self, deadline: std::time::Instant) -> Result<bool> {
        let (ready, fired) = crossbeam_channel::bounded(1);
        self.slot.with_buffer(|b| {
            Ok(b.ready_event()?.on_ready(Box::new(move || {
                let _ = ready.send(());
            }))?)
        })?;
        match fired.recv_deadline(deadline) {
            // Ready: the wait returns at once, with the computation's error if it failed.
            Ok(()) => self
                .slot
                .with_buffer(|b| Ok(b.wait_ready()?))
                .map(|()| true),
            Err(_) => Ok(false),
        }
    }

    /// The plugin's size of the buffer on its device, kept in the registry entry once known.
    pub fn on_device_size(&self) -> Result<usize> {
        self.owner.buffers().on_device_size(self)
    }
}

impl Drop for ArrayCore {
    fn drop(&mut self) {
        self.credit_once();
        self.owner.buffers().remove(self.id);
    }
}
