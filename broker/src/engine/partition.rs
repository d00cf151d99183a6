//! One queue's partition on one shard: its counters, its ready and age
//! FIFOs, its message groups and its long-poll waiters. Plain
//! single-threaded data; the shard ([`super::Shard`]) holds the logic.
//!
//! - `age` (sent here, in send order, so oldest first) and `moved` (moved in
//!   from another queue, ordered by original send time) together index every
//!   message of the partition: purge and delete-queue walk them, and the
//!   oldest message's age comes from their fronts.
//! - Retention: the `age` FIFO is also the retention order. A message enters
//!   it only when its retention deadline is not before the deadline of the
//!   entry pushed last (`age_tail_until_ns`), so the live entries' deadlines
//!   rise from front to back and one wheel timer per partition
//!   (`retention_timer`, at the front's deadline or earlier) drops them in
//!   order. A message that would break the order (moved in by dead-lettering
//!   or redrive, which keeps its original send time, or sent after the
//!   queue's retention was shortened) goes to `moved` instead and keeps a
//!   retention timer of its own.
//! - Receive order: visible messages are served in the order they became
//!   visible. A message visible from its send and never delivered (a
//!   *fresh* one: no side-table entry, see `stored_message.rs`) is served
//!   straight from `age`, through the cursor `fresh` (the position of the
//!   next age entry to consider), so it costs no second FIFO entry. Every
//!   other visible message (delivered before, delayed, moved in, sent out of
//!   retention order) has an entry in `ready`, stamped with the shard's next
//!   sequence number when it was pushed: it became visible before every
//!   message sent from then on, so the next to serve is the `ready` front
//!   when its stamp is at most the sequence number of the next fresh
//!   message, and that fresh message otherwise.
//! - Both FIFOs are lazy: an entry is skipped when its key no longer matches
//!   (the slot's generation moved on: deleted, moved to another queue) or the
//!   message no longer qualifies. A message has at most one `ready` entry
//!   (its `in_ready` flag), so neither FIFO holds more entries than
//!   messages, stale ones aside, and those are compacted away when they
//!   outnumber the live ones.

use std::collections::{BTreeSet, VecDeque};

use sluice_protocol::{QueueAttributes, QueueKind, QueueName, QueueStats};

use super::block_deque::{BlockDeque, Spare};
use super::groups::{GroupOrder, Groups};
use super::limits::{FIFO_BLOCK_BYTES, FIFO_SLACK};
use super::registry::QueueShared;
use super::slab::SlotKey;
use super::wheel::TimerId;
use crate::sync::Arc;

/// A `ready` entry: the message, and the shard's next sequence number when
/// it was pushed (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadyEntry {
    pub key: SlotKey,
    pub order: u64,
}

/// Bytes of one `ready` entry.
pub const READY_ENTRY_BYTES: usize = core::mem::size_of::<ReadyEntry>();
const READY_BLOCK: usize = FIFO_BLOCK_BYTES / READY_ENTRY_BYTES;
const AGE_BLOCK: usize = FIFO_BLOCK_BYTES / core::mem::size_of::<SlotKey>();

/// A partition's ready FIFO.
pub(crate) type ReadyFifo = BlockDeque<ReadyEntry, READY_BLOCK>;
/// A partition's age FIFO.
pub(crate) type AgeFifo = BlockDeque<SlotKey, AGE_BLOCK>;
/// The shard's spare blocks for ready FIFOs.
pub(crate) type ReadySpare = Spare<ReadyEntry, READY_BLOCK>;
/// The shard's spare blocks for age FIFOs.
pub(crate) type AgeSpare = Spare<SlotKey, AGE_BLOCK>;

#[derive(Debug)]
pub(crate) struct Partition {
    pub incarnation: u32,
    pub name: QueueName,
    pub attrs: QueueAttributes,
    pub shared: Arc<QueueShared>,
    /// Counters and gauges; `oldest_age_ms` is computed on demand.
    pub stats: QueueStats,
    pub ready: ReadyFifo,
    pub age: AgeFifo,
    /// Position in `age` of the next entry to consider as a fresh message
    /// to serve.
    pub fresh: u64,
    pub moved: BTreeSet<(u64, u32)>,
    /// Retention deadline of the entry pushed last on `age`.
    pub age_tail_until_ns: u64,
    /// The timer that drops `age`'s front when its retention ends; `Some`
    /// while `age` holds entries.
    pub retention_timer: Option<TimerId>,
    /// Correlation ids of parked receives, oldest first.
    pub waiters: VecDeque<u64>,
    /// Whether the visible count changed since the hint was published.
    pub touched: bool,
    /// Whether messages became visible since waiters were last served.
    pub gained: bool,
    /// A FIFO queue's groups: `Some` when it delivers through them.
    pub grouping: Option<Box<Grouping>>,
}

/// The groups of a partition that delivers through them. Every message of
/// such a partition is a member of one, from its send (or move in) until it
/// leaves; the shard keeps where each stands
/// ([`super::group_members::GroupMembers`]).
#[derive(Debug)]
pub(crate) struct Grouping {
    pub groups: Groups<SlotKey>,
}

impl Grouping {
    pub fn new(order: GroupOrder) -> Grouping {
        Grouping {
            groups: Groups::new(order),
        }
    }
}

impl Partition {
    pub fn new(name: QueueName, attrs: QueueAttributes, shared: Arc<QueueShared>) -> Partition {
        let attrs_kind = attrs.kind;
        Partition {
            incarnation: shared.incarnation(),
            name,
            attrs,
            shared,
            stats: QueueStats::default(),
            ready: ReadyFifo::new(),
            fresh: AgeFifo::new().head(),
            age: AgeFifo::new(),
            moved: BTreeSet::new(),
            age_tail_until_ns: 0,
            retention_timer: None,
            waiters: VecDeque::new(),
            touched: false,
            gained: false,
            grouping: (attrs_kind == QueueKind::Fifo)
                .then(|| Box::new(Grouping::new(GroupOrder::Fifo))),
        }
    }

    /// Messages held here.
    pub fn live(&self) -> u64 {
        self.stats.visible + self.stats.delayed + self.stats.in_flight
    }

    /// Whether a FIFO of `len` entries should be compacted.
    pub fn needs_compaction(&self, len: usize) -> bool {
        len > 2 * usize::try_from(self.live()).unwrap_or(usize::MAX) + FIFO_SLACK
    }
}
