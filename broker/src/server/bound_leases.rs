//! The leases a connection bound to itself (RECEIVE with the bind flag),
//! kept by its session so that they can be released when it closes.
//!
//! A session records the receipt of every message a bound RECEIVE
//! delivered, and forgets it when the client ends that lease itself: a
//! DELETE naming it, or a CHANGE_VISIBILITY to 0. It forgets on the request,
//! not on its result: if that request fails for the receipt, the receipt
//! was not current anyway (stale, gone, invalid), and an abandon would
//! change nothing either. Leases that end otherwise (they run out, another
//! connection deletes them) stay recorded until the close, when the engine
//! finds them no longer current and leaves them alone; so the set is
//! capped ([`BOUND_LEASES_MAX`]): once full, the older half loses its
//! binding (those leases simply run their course), oldest first.
//!
//! Costs: a hash insert per delivered message of a bound receive, a hash
//! removal per receipt of a DELETE or release on a connection that has
//! bound leases, nothing otherwise. Queue names are copied once per queue
//! and connection (the names in requests are slices of the input buffer,
//! which must not be held for the connection's life).

use std::collections::HashMap;

use sluice_protocol::limits::BATCH_ENTRIES_MAX;
use sluice_protocol::{QueueName, Receipt};

use super::limits::BOUND_LEASES_MAX;

/// One connection's bound leases. See the module docs.
#[derive(Debug, Default)]
pub struct BoundLeases {
    /// The queues named so far, owned; a lease names its queue by index.
    queues: Vec<QueueName>,
    queue_index: HashMap<QueueName, u32>,
    /// Lease -> when it was bound (a sequence number, for eviction order).
    leases: HashMap<(u32, Receipt), u64>,
    next_seq: u64,
    /// Leases that lost their binding to the cap, since the start.
    evicted: u64,
}

impl BoundLeases {
    /// An empty set.
    #[must_use]
    pub fn new() -> BoundLeases {
        BoundLeases::default()
    }

    /// Whether no lease is bound.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Leases bound now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Leases that lost their binding to the cap so far.
    #[must_use]
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    fn index(&mut self, queue: &QueueName) -> u32 {
        if let Some(&i) = self.queue_index.get(queue) {
            return i;
        }
        // A copy that does not share the request's buffer. A queue name is
        // valid, so `new` accepts it.
        let owned = QueueName::new(queue.as_str()).unwrap_or_else(|_| queue.clone());
        // At most one index per queue name a connection used: far below
        // u32::MAX in any real life; saturate rather than wrap.
        let i = u32::try_from(self.queues.len()).unwrap_or(u32::MAX);
        self.queues.push(owned.clone());
        self.queue_index.insert(owned, i);
        i
    }

    /// Binds the leases of `receipts`, delivered from `queue`.
    pub fn bind(&mut self, queue: &QueueName, receipts: impl IntoIterator<Item = Receipt>) {
        let q = self.index(queue);
        for receipt in receipts {
            if self.leases.len() >= BOUND_LEASES_MAX {
                self.evict_older_half();
            }
            self.leases.insert((q, receipt), self.next_seq);
            self.next_seq += 1;
        }
    }

    /// Forgets the lease of `receipt` of `queue`: the client ended it.
    pub fn forget(&mut self, queue: &QueueName, receipt: &Receipt) {
        if let Some(&q) = self.queue_index.get(queue) {
            self.leases.remove(&(q, *receipt));
        }
    }

    /// Takes every bound lease out, by queue, in batches of at most
    /// [`BATCH_ENTRIES_MAX`] receipts (as the engine takes them).
    pub fn take(&mut self) -> Vec<(QueueName, Vec<Receipt>)> {
        let mut by_queue: Vec<Vec<Receipt>> = vec![Vec::new(); self.queues.len()];
        for ((q, receipt), _) in self.leases.drain() {
            if let Some(v) = by_queue.get_mut(q as usize) {
                v.push(receipt);
            }
        }
        let mut out = Vec::new();
        for (queue, receipts) in self.queues.iter().zip(by_queue) {
            for chunk in receipts.chunks(BATCH_ENTRIES_MAX) {
                out.push((queue.clone(), chunk.to_vec()));
            }
        }
        out
    }

    /// Drops the older half of the leases (by bind order): amortized over
    /// the half that can be bound before the next time, a sort costs
    /// O(log n) per lease.
    fn evict_older_half(&mut self) {
        let mut seqs: Vec<u64> = self.leases.values().copied().collect();
        let mid = seqs.len() / 2;
        let (_, &mut cut, _) = seqs.select_nth_unstable(mid);
        let before = self.leases.len();
        self.leases.retain(|_, seq| *seq >= cut);
        let evicted = before - self.leases.len();
        self.evicted += evicted as u64;
        tracing::debug!(
            evicted,
            "a connection holds {BOUND_LEASES_MAX} bound leases: the oldest lose their binding"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(n: u32) -> Receipt {
        Receipt {
            slot: n,
            delivery: 1,
            ..Receipt::default()
        }
    }

    #[test]
    fn bound_leases_are_forgotten_by_queue_and_receipt_and_taken_by_queue() {
        let (a, b) = (QueueName::from_static("a"), QueueName::from_static("b"));
        let mut set = BoundLeases::new();
        assert!(set.is_empty());
        set.bind(&a, (0..3).map(receipt));
        set.bind(&b, [receipt(0)]);
        assert_eq!(set.len(), 4);
        // The same receipt under another queue is another lease.
        set.forget(&b, &receipt(1));
        set.forget(&QueueName::from_static("c"), &receipt(0));
        assert_eq!(set.len(), 4);
        set.forget(&a, &receipt(1));
        assert_eq!(set.len(), 3);
        let mut taken = set.take();
        taken.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        for (_, receipts) in &mut taken {
            receipts.sort_by_key(|r| r.slot);
        }
        assert_eq!(
            taken,
            [
                (a.clone(), vec![receipt(0), receipt(2)]),
                (b, vec![receipt(0)])
            ]
        );
        assert!(set.is_empty());
        assert!(set.take().is_empty());
    }

    #[test]
    fn a_queue_name_is_kept_as_a_copy_of_its_own() {
        // A name decoded from a frame is a slice of the frame's buffer.
        let frame = bytes::Bytes::from(b"\x06orders and the rest of a frame".to_vec());
        let mut reader = sluice_protocol::Reader::new(frame.clone());
        let name = QueueName::decode(&mut reader, "queue").unwrap();
        assert!(frame.as_ptr_range().contains(&name.as_str().as_ptr()));
        let mut set = BoundLeases::new();
        set.bind(&name, [receipt(1)]);
        assert_eq!(set.queues[0], name);
        let kept = set.queues[0].as_str().as_ptr();
        assert!(
            !frame.as_ptr_range().contains(&kept),
            "not a slice of the frame"
        );
    }

    #[test]
    fn leases_are_taken_in_batches_the_engine_accepts() {
        let q = QueueName::from_static("q");
        let mut set = BoundLeases::new();
        set.bind(&q, (0..2500).map(receipt));
        let taken = set.take();
        let sizes: Vec<usize> = taken.iter().map(|(_, r)| r.len()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 2500);
        assert!(sizes.iter().all(|&n| (1..=BATCH_ENTRIES_MAX).contains(&n)));
    }

    #[test]
    fn past_the_cap_the_older_half_loses_its_binding() {
        let q = QueueName::from_static("q");
        let mut set = BoundLeases::new();
        let n = u32::try_from(BOUND_LEASES_MAX).unwrap();
        set.bind(&q, (0..n).map(receipt));
        assert_eq!((set.len(), set.evicted()), (BOUND_LEASES_MAX, 0));
        set.bind(&q, [receipt(n)]);
        assert_eq!(set.len(), BOUND_LEASES_MAX / 2 + 1);
        assert_eq!(set.evicted() as usize, BOUND_LEASES_MAX / 2);
        let kept: Vec<u32> = set
            .take()
            .into_iter()
            .flat_map(|(_, r)| r)
            .map(|r| r.slot)
            .collect();
        assert!(kept.contains(&n), "the newest stays bound");
        assert!(kept.iter().all(|&s| s >= n / 2), "the oldest went first");
    }
}
