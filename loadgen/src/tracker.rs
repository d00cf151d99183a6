//! Per-message correctness accounting: which messages were sent, received,
//! left undeleted, received again, deleted; from that, what was lost and what
//! was duplicated.
//!
//! Ground rules: one byte of flags per sequence number, updated with atomic
//! read-modify-write operations by any producer or consumer thread; the
//! first-receive time of a message left undeleted sits in a second array
//! and is written (Relaxed) before the `LEFT` flag is set (Release), and
//! read only after `LEFT` is seen (Acquire), so the reader sees the time.
//! Storage comes in chunks allocated on first touch, so a `--duration` run
//! pays only for the messages it sends.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Sequence numbers per storage chunk.
const CHUNK_LEN: u64 = 1 << 16;

const SENT: u8 = 1;
const RECEIVED: u8 = 1 << 1;
const LEFT: u8 = 1 << 2;
const REDELIVERED: u8 = 1 << 3;
const DELETED: u8 = 1 << 4;

/// A fixed-capacity array of atomics allocated a chunk at a time.
struct Chunked<T> {
    chunks: Box<[OnceLock<Box<[T]>>]>,
}

impl<T: Default> Chunked<T> {
    fn new(capacity: u64) -> Self {
        let chunk_count = capacity.div_ceil(CHUNK_LEN);
        let chunk_count =
            usize::try_from(chunk_count).expect("capacity is bounded by MESSAGES_MAX");
        Self {
            chunks: (0..chunk_count).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The slot of `index`, allocating its chunk on first touch.
    fn get(&self, index: u64) -> &T {
        // Indices are checked against the capacity by the tracker's callers,
        // so both conversions fit.
        let chunk = usize::try_from(index / CHUNK_LEN).expect("index within capacity");
        let offset = usize::try_from(index % CHUNK_LEN).expect("offset below CHUNK_LEN");
        let slots =
            self.chunks[chunk].get_or_init(|| (0..CHUNK_LEN).map(|_| T::default()).collect());
        &slots[offset]
    }

    /// The slot of `index` if its chunk exists.
    fn peek(&self, index: u64) -> Option<&T> {
        let chunk = usize::try_from(index / CHUNK_LEN).ok()?;
        let offset = usize::try_from(index % CHUNK_LEN).ok()?;
        self.chunks.get(chunk)?.get().map(|slots| &slots[offset])
    }
}

/// What a delivery is, given what came before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The message's first delivery.
    First,
    /// The first delivery after the message was left undeleted; carries the
    /// time of its first receive (ns since the epoch).
    Redelivery {
        /// First receive time, ns since the pass's epoch.
        first_receive_ns: u64,
    },
    /// A delivery that should not have happened: after the message was
    /// deleted, or a second one of a message that was not left undeleted.
    Duplicate,
}

/// The end-of-pass tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Messages whose send the broker acknowledged.
    pub sent: u64,
    /// Messages received at least once.
    pub received: u64,
    /// Messages deleted (each counted once).
    pub deleted: u64,
    /// Messages left undeleted at their first delivery.
    pub left: u64,
    /// Of those, messages that came back.
    pub redelivered: u64,
    /// Sent and never received, or left undeleted and never received again.
    pub lost: u64,
}

/// Per-message state for one pass.
pub struct Tracker {
    capacity: u64,
    flags: Chunked<AtomicU8>,
    first_receive_ns: Option<Chunked<AtomicU64>>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("capacity", &self.capacity)
            .field("tracks_first_receive", &self.first_receive_ns.is_some())
            .finish()
    }
}

impl Tracker {
    /// Room for sequence numbers `0..capacity`; `leaves` when some messages
    /// will be left undeleted (their first receive times are then kept).
    pub fn new(capacity: u64, leaves: bool) -> Self {
        Self {
            capacity,
            flags: Chunked::new(capacity),
            first_receive_ns: leaves.then(|| Chunked::new(capacity)),
        }
    }

    /// One past the largest sequence number tracked.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether `seq` is within the tracked range.
    pub fn contains(&self, seq: u64) -> bool {
        seq < self.capacity
    }

    /// The broker acknowledged the send of `seq`.
    pub fn mark_sent(&self, seq: u64) {
        self.flags.get(seq).fetch_or(SENT, Ordering::Relaxed);
    }

    /// A delivery of `seq` arrived; classifies it and records it.
    pub fn on_receive(&self, seq: u64) -> Arrival {
        let slot = self.flags.get(seq);
        let mut current = slot.load(Ordering::Acquire);
        loop {
            let (next, arrival) = if current & DELETED != 0 {
                (current, Arrival::Duplicate)
            } else if current & RECEIVED == 0 {
                (current | RECEIVED, Arrival::First)
            } else if current & LEFT != 0 && current & REDELIVERED == 0 {
                let first = self
                    .first_receive_ns
                    .as_ref()
                    .map_or(0, |t| t.get(seq).load(Ordering::Relaxed));
                (
                    current | REDELIVERED,
                    Arrival::Redelivery {
                        first_receive_ns: first,
                    },
                )
            } else {
                (current, Arrival::Duplicate)
            };
            if next == current {
                return arrival;
            }
            match slot.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return arrival,
                Err(actual) => current = actual,
            }
        }
    }

    /// `seq` was left undeleted at its first delivery, received at
    /// `first_receive_ns`.
    pub fn mark_left(&self, seq: u64, first_receive_ns: u64) {
        if let Some(times) = &self.first_receive_ns {
            times.get(seq).store(first_receive_ns, Ordering::Relaxed);
        }
        self.flags.get(seq).fetch_or(LEFT, Ordering::Release);
    }

    /// The broker acknowledged the delete of `seq`; true the first time.
    pub fn mark_deleted(&self, seq: u64) -> bool {
        self.flags.get(seq).fetch_or(DELETED, Ordering::AcqRel) & DELETED == 0
    }

    /// Counts the state of sequence numbers `0..issued`.
    pub fn tally(&self, issued: u64) -> Tally {
        let mut t = Tally::default();
        for seq in 0..issued.min(self.capacity) {
            let f = self
                .flags
                .peek(seq)
                .map_or(0, |a| a.load(Ordering::Acquire));
            if f & SENT == 0 {
                continue;
            }
            t.sent += 1;
            if f & RECEIVED != 0 {
                t.received += 1;
            } else {
                t.lost += 1;
            }
            if f & DELETED != 0 {
                t.deleted += 1;
            }
            if f & LEFT != 0 {
                t.left += 1;
                if f & REDELIVERED != 0 {
                    t.redelivered += 1;
                } else {
                    t.lost += 1;
                }
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_deliveries() {
        let t = Tracker::new(10, true);
        for seq in 0..4 {
            t.mark_sent(seq);
        }
        // 0: received, deleted, then delivered again: a duplicate.
        assert_eq!(t.on_receive(0), Arrival::First);
        assert!(t.mark_deleted(0));
        assert!(!t.mark_deleted(0));
        assert_eq!(t.on_receive(0), Arrival::Duplicate);
        // 1: delivered twice without being left: a duplicate.
        assert_eq!(t.on_receive(1), Arrival::First);
        assert_eq!(t.on_receive(1), Arrival::Duplicate);
        // 2: left, comes back once (a redelivery), then again (a duplicate).
        assert_eq!(t.on_receive(2), Arrival::First);
        t.mark_left(2, 77);
        assert_eq!(
            t.on_receive(2),
            Arrival::Redelivery {
                first_receive_ns: 77
            }
        );
        assert_eq!(t.on_receive(2), Arrival::Duplicate);
        assert!(t.mark_deleted(2));
        // 3: never received: lost.
        let tally = t.tally(4);
        assert_eq!(
            tally,
            Tally {
                sent: 4,
                received: 3,
                deleted: 2,
                left: 1,
                redelivered: 1,
                lost: 1,
            }
        );
    }

    #[test]
    fn a_left_message_that_never_returns_is_lost() {
        let t = Tracker::new(3, true);
        t.mark_sent(0);
        assert_eq!(t.on_receive(0), Arrival::First);
        t.mark_left(0, 5);
        let tally = t.tally(3);
        assert_eq!((tally.left, tally.redelivered, tally.lost), (1, 0, 1));
    }

    #[test]
    fn chunks_are_allocated_on_touch_and_tally_skips_untouched_ones() {
        let t = Tracker::new(CHUNK_LEN * 3, false);
        t.mark_sent(CHUNK_LEN * 2 + 5);
        assert!(t.flags.peek(0).is_none());
        assert!(t.flags.peek(CHUNK_LEN * 2 + 5).is_some());
        let tally = t.tally(CHUNK_LEN * 3);
        assert_eq!((tally.sent, tally.lost), (1, 1));
        assert!(t.contains(CHUNK_LEN * 3 - 1));
        assert!(!t.contains(CHUNK_LEN * 3));
    }

    #[test]
    fn concurrent_receives_agree_on_one_first_delivery() {
        let t = Tracker::new(1_000, false);
        for seq in 0..1_000 {
            t.mark_sent(seq);
        }
        let firsts = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for seq in 0..1_000 {
                        if t.on_receive(seq) == Arrival::First {
                            firsts.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(firsts.load(Ordering::Relaxed), 1_000);
    }
}
