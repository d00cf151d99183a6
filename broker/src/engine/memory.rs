//! The memory budget for messages (`--memory-max`): bodies, attributes,
//! per-message state and dedup entries. A send beyond it gets `Busy`.
//!
//! One atomic counter of bytes is shared by every shard ([`MemoryBudget`]);
//! each shard holds a local credit ([`ShardMemory`]) that it refills from the
//! shared counter in chunks, so the hot path touches the shared cache line
//! about once per chunk, not once per message. When a chunk cannot be had the
//! shard asks for exactly what it needs, so a budget is never refused while
//! the bytes are free (one shard's idle credit aside, at most two chunks).

use super::limits::MEMORY_CHUNK_BYTES;
use crate::sync::{AtomicUsize, Ordering};

/// The shared budget.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    #[must_use]
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// The limit.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved by all shards (their idle credit included).
    #[must_use]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed) as u64
    }

    fn try_take(&self, n: u64) -> bool {
        let Ok(n) = usize::try_from(n) else {
            return false;
        };
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                let next = used.checked_add(n)?;
                (next as u64 <= self.limit).then_some(next)
            })
            .is_ok()
    }

    fn force_take(&self, n: u64) {
        // A shard never holds more than the address space.
        self.used.fetch_add(n as usize, Ordering::Relaxed);
    }

    fn give(&self, n: u64) {
        // Never more than was taken: the shard tracks its credit exactly.
        self.used.fetch_sub(n as usize, Ordering::Relaxed);
    }
}

/// One shard's credit against the shared budget.
#[derive(Debug, Default)]
pub struct ShardMemory {
    credit: u64,
    in_use: u64,
}

impl ShardMemory {
    /// Takes `n` bytes; false when the budget is spent (the send fails with
    /// `Busy`).
    pub fn reserve(&mut self, budget: &MemoryBudget, n: u64) -> bool {
        if self.credit < n {
            let short = n - self.credit;
            let chunk = short.max(MEMORY_CHUNK_BYTES);
            if budget.try_take(chunk) {
                self.credit += chunk;
            } else if budget.try_take(short) {
                self.credit += short;
            } else {
                return false;
            }
        }
        self.credit -= n;
        self.in_use += n;
        true
    }

    /// Takes `n` bytes whatever the budget says: state a message needs for
    /// an operation that must not fail on memory (a delivery's lease entry).
    /// It may take the budget past its limit, and sends then fail until it
    /// is back under.
    pub fn charge(&mut self, budget: &MemoryBudget, n: u64) {
        if self.credit < n {
            let short = n - self.credit;
            // A chunk when the budget has one, exactly what is short when
            // not: an idle credit past the limit would let sends through.
            if !budget.try_take(short.max(MEMORY_CHUNK_BYTES)) {
                budget.force_take(short);
                self.credit += short;
            } else {
                self.credit += short.max(MEMORY_CHUNK_BYTES);
            }
        }
        self.credit -= n;
        self.in_use += n;
    }

    /// Gives back `n` bytes taken earlier.
    pub fn release(&mut self, budget: &MemoryBudget, n: u64) {
        debug_assert!(n <= self.in_use);
        self.in_use -= n;
        self.credit += n;
        if self.credit > 2 * MEMORY_CHUNK_BYTES {
            let back = self.credit - MEMORY_CHUNK_BYTES;
            budget.give(back);
            self.credit -= back;
        }
    }

    /// Returns every idle byte to the shared budget.
    pub fn return_credit(&mut self, budget: &MemoryBudget) {
        budget.give(self.credit);
        self.credit = 0;
    }

    /// Bytes this shard's messages and dedup entries hold.
    #[must_use]
    pub fn in_use(&self) -> u64 {
        self.in_use
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_when_chunks_do_not_fit() {
        let b = MemoryBudget::new(1000);
        let mut m = ShardMemory::default();
        assert!(m.reserve(&b, 600));
        assert!(m.reserve(&b, 400));
        assert!(!m.reserve(&b, 1));
        m.release(&b, 400);
        assert!(m.reserve(&b, 300));
        assert_eq!(m.in_use(), 900);
        m.release(&b, 900);
        m.return_credit(&b);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_charge_may_pass_the_limit_and_then_sends_fail() {
        let b = MemoryBudget::new(1000);
        let mut m = ShardMemory::default();
        assert!(m.reserve(&b, 900));
        m.charge(&b, 200);
        assert_eq!(m.in_use(), 1100);
        assert!(!m.reserve(&b, 1));
        m.release(&b, 200);
        assert!(m.reserve(&b, 100));
        m.release(&b, 1000);
        m.return_credit(&b);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn credit_is_returned_past_two_chunks() {
        let b = MemoryBudget::new(u64::MAX);
        let mut m = ShardMemory::default();
        assert!(m.reserve(&b, 3 * MEMORY_CHUNK_BYTES));
        m.release(&b, 3 * MEMORY_CHUNK_BYTES);
        assert_eq!(b.used(), MEMORY_CHUNK_BYTES);
    }
}
