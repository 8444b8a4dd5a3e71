//! A memory space's account: the bytes our arrays hold there, and the optional budget past
//! which uploads are refused (blocking) or wait (async) before the plugin is asked for memory.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes held by this client's arrays in one memory space, and its budget. Arrays charge it as
/// they are registered and credit it when their buffers are freed (`ArrayCore`: at a delete
/// no run holds up, when the device actor frees a deferred one, or at the drop); only the
/// memory-space actor sets the budget (`SetBudget`), and it holds the uploads that wait for
/// room. Atomics, not a message: a blocking upload must be refused on its caller's thread
/// before the plugin allocates, and every array's birth and death touch it.
#[derive(Debug)]
pub struct MemoryAccount {
    held: AtomicU64,
    /// `u64::MAX`: no budget.
    budget: AtomicU64,
}

/// An upload that does not fit the budget: what it asked for and what the account held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    pub asked: u64,
    pub held: u64,
    pub budget: u64,
}

impl Default for MemoryAccount {
    fn default() -> Self {
        MemoryAccount {
            held: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
        }
    }
}

impl MemoryAccount {
    /// Bytes our arrays hold here now (their dense size: dtype × dims).
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The budget, if one is set.
    pub fn budget(&self) -> Option<u64> {
        Some(self.budget.load(Ordering::Relaxed)).filter(|&b| b != u64::MAX)
    }

    /// Sets or clears the budget: the memory-space actor's to call.
    pub(crate) fn set_budget(&self, budget: Option<u64>) {
        // `u64::MAX` means none, so a budget is held just below it.
        let stored = budget.map_or(u64::MAX, |b| b.min(u64::MAX - 1));
        self.budget.store(stored, Ordering::Relaxed);
    }

    /// Charges `bytes` if they fit the budget (an upload, before the plugin allocates); else
    /// charges nothing.
    pub fn try_charge(&self, bytes: u64) -> Result<(), OverBudget> {
        let budget = self.budget.load(Ordering::Relaxed);
        (self.held)
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&after| after <= budget)
            })
            .map(drop)
            .map_err(|held| OverBudget {
                asked: bytes,
                held,
                budget,
            })
    }

    /// Whether `bytes` could ever fit: not when they pass the budget on their own.
    pub fn could_fit(&self, bytes: u64) -> bool {
        bytes <= self.budget.load(Ordering::Relaxed)
    }

    /// Charges `bytes` whatever the budget (an execute's outputs, a copy: the plugin made them
    /// already).
    pub fn charge(&self, bytes: u64) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Credits `bytes` back (an array deleted or dropped, an upload the plugin failed).
    pub fn credit(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fit_the_budget_or_change_nothing() {
        let account = MemoryAccount::default();
        assert_eq!(account.budget(), None);
        account.try_charge(u64::MAX / 2).unwrap();
        account.credit(u64::MAX / 2);
        account.set_budget(Some(100));
        // (charge, fits) in order, from an empty account.
        let table = [(60, true), (50, false), (40, true), (1, false)];
        for (bytes, fits) in table {
            assert_eq!(
                account.try_charge(bytes).is_ok(),
                fits,
                "{bytes} at {}",
                account.held()
            );
        }
        assert_eq!(account.held(), 100);
        assert_eq!(
            account.try_charge(1),
            Err(OverBudget {
                asked: 1,
                held: 100,
                budget: 100
            })
        );
        account.charge(10);
        assert_eq!(account.held(), 110, "outputs are counted past the budget");
        account.credit(110);
        assert!(account.could_fit(100) && !account.could_fit(101));
        account.set_budget(None);
        assert_eq!(account.budget(), None);
    }
}
