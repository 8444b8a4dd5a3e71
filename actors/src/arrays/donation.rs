//! Donation's side of an array: an execute takes a donated buffer out of its slot for the call
//! ([`DonatedBuffer`]) and deletes the array when the plugin consumed it; a [`PendingUse`]
//! counts work queued on a device actor that will use a buffer, which a donation must not take.

use std::sync::Arc;

use super::buffers::{ArrayCore, BufferSlot, SlotState};
use crate::error::{Error, Result};
use crate::pjrt::PjrtBuffer;

impl BufferSlot {
    /// Takes the buffer out for an execute that donates it, leaving the slot `Donating` (a use
    /// meanwhile is refused as deleted; nothing waits for the execute). Refused, never waited
    /// for, while another operation holds the buffer (an execute running, a read, a callback's
    /// view of it) or is queued to (more than `queued_here` [`PendingUse`]s: the donating
    /// run's own). `executable` and `index` name the run and argument in the error.
    pub(crate) fn take_for_donation(
        &self,
        queued_here: u32,
        executable: &str,
        index: usize,
    ) -> Result<DonatedBuffer<'_>> {
        use std::sync::atomic::Ordering::Acquire;
        self.settle();
        if self.is_deleted() {
            return Err(self.deleted_error());
        }
        let in_use = |why: &str| Error::Donation {
            executable: executable.to_string(),
            index,
            reason: format!("the {} is in use: {why}", self.what()),
        };
        let mut state = self
            .state
            .try_write()
            .ok_or_else(|| in_use("another operation is using it"))?;
        if self.pending.load(Acquire) > queued_here {
            return Err(in_use("work queued on its device will still use it"));
        }
        match std::mem::replace(&mut *state, SlotState::Donating) {
            SlotState::Live(buffer) => Ok(DonatedBuffer { slot: self, buffer }),
            other => {
                let refused = match &other {
                    SlotState::OnHost(_) => Error::OnHost { what: self.what() },
                    _ => self.deleted_error(),
                };
                *state = other;
                Err(refused)
            }
        }
    }
}

/// A buffer out of its slot with an execute that donates it (its slot `Donating`), until the
/// execute is done: [`finish`](Self::finish) deletes the array if the plugin consumed the buffer
/// and else puts it back (unless the array was deleted meanwhile).
pub struct DonatedBuffer<'a> {
    slot: &'a BufferSlot,
    buffer: PjrtBuffer,
}

impl DonatedBuffer<'_> {
    pub fn buffer(&self) -> &PjrtBuffer {
        &self.buffer
    }

    /// Ends the donation: `ran` says the execute succeeded (the buffer is consumed); after a
    /// failure the plugin says whether it consumed it. True when the array is now deleted by
    /// this donation; its registry entry and account are then the caller's to settle
    /// ([`ArrayCore::donated`]).
    pub fn finish(self, ran: bool) -> bool {
        let consumed = ran || self.buffer.is_deleted().unwrap_or(true);
        let mut state = self.slot.state.write();
        if consumed || self.slot.is_deleted() {
            self.slot.mark_deleted();
            *state = SlotState::Deleted;
            drop(state);
            drop(self.buffer);
            return consumed;
        }
        *state = SlotState::Live(self.buffer);
        false
    }
}

/// One operation queued on a device actor that will use an array's buffer, counted on its slot
/// while it waits (see [`BufferSlot::take_for_donation`]).
pub struct PendingUse(Arc<ArrayCore>);

impl PendingUse {
    pub fn new(array: Arc<ArrayCore>) -> Self {
        (array.slot.pending).fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        PendingUse(array)
    }

    pub fn array(&self) -> &Arc<ArrayCore> {
        &self.0
    }
}

impl std::ops::Deref for PendingUse {
    type Target = ArrayCore;
    fn deref(&self) -> &ArrayCore {
        &self.0
    }
}

impl Drop for PendingUse {
    fn drop(&mut self) {
        (self.0.slot.pending).fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}
