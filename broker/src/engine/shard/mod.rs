//! The shard engine: one per core, owning its partition of every queue and
//! the messages it accepted.
//!
//! # Ground rules
//!
//! - Only the owner touches a message: its slot, lease and timer are plain
//!   data of this `Shard`. Other shards reach a message only by sending a
//!   [`ShardMsg`] to its owner (receipts name the owner).
//! - Every entry point ([`Shard::submit`], [`Shard::poll`]) first catches up
//!   with the registry (an epoch compare), then fires every timer due at
//!   `now` — so everything whose time came happens before the operation —
//!   then does its work, then publishes visible hints, serves and wakes
//!   waiters, and pushes what it has to send.
//! - A message has at most one timer at a time: the end of its lease or
//!   delay (in flight or delayed), or the earlier of that and its retention
//!   deadline for a message whose retention is its own (see
//!   `partition.rs`: moved in, or out of send order). A visible message whose
//!   retention is its partition's FIFO has none; one timer per partition
//!   drops the FIFO's front. A lease taken by a receive, for a message whose
//!   retention is its FIFO's, has no timer of its own either: the receive's
//!   lease group has one for all its messages (`lease_groups.rs`). Removing
//!   a message cancels its timer (or counts it out of its group) at once.
//! - A receive that its partition cannot fill asks, one at a time, the other
//!   shards whose visible hint is non-zero ([`ShardMsg::Steal`]); the owner
//!   leases the messages itself and sends them back. A receive that got
//!   nothing and may wait parks in its partition's waiter FIFO, registers in
//!   the queue's per-shard waiter count and re-reads the hints (see
//!   [`super::registry`] for why no wake-up is lost). A parked receive whose
//!   deadline passes while a steal is outstanding waits for the reply, so no
//!   leased message is dropped on the floor.
//! - Retry backoff uses *equal jitter*: with `d = min(base * 2^(n-1), max)`
//!   the wait is `d/2 + uniform(0 ..= d - d/2)` ms, drawn from the shard's
//!   PRNG, counted from the moment the lease ended (or the release).
//! - Message ids: the run's 64-bit random prefix (from the registry seed),
//!   then the shard (16 bits), then a per-shard sequence number (48 bits):
//!   unique within a run by construction and across runs as long as their
//!   seeds differ (the server draws them from the OS).
//! - A receipt's generation is the slot's: bumped when a message leaves the
//!   slot and when it moves to another queue (dead-letter, redrive), so
//!   receipts of the old queue then answer `Gone`.

//!
//! # Where things are
//!
//! | file | concept |
//! |---|---|
//! | `mod.rs` | the `Shard` struct, entry points, request bookkeeping |
//! | `dispatch.rs` | operation dispatch: what each `Op` starts |
//! | `queues.rs` | catching up with the registry: partitions created and dropped |
//! | `lease.rs` | leasing one message: receipt, lease and counters, or its move to the dead-letter queue |
//! | `lease_groups.rs` | one timer for the leases of one receive |
//! | `records.rs` | a message's record and side-table entries: reading them, creating and freeing them, what they cost |
//! | `lifecycle.rs` | a message's life in its shard: state, timer, ready-FIFO and membership, removal, moves; timers firing |
//! | `send.rs` | send, dedup-key forwarding, message ids |
//! | `grouped.rs` | FIFO queues: messages in their groups, receives through the groups |
//! | `receive.rs` | leasing, receive, steals, long-poll waiters, hints and wake-ups |
//! | `receipts.rs` | delete and change visibility by receipt, forwarded or local |
//! | `gather.rs` | fan-out operations: stats, purge, peek, redrive, delete-queue |
//! | `inbound.rs` | messages from other shards |
//! | `snapshot.rs`, `snapshot/load.rs` | the shard's part of a snapshot: writing it, loading it back (over `engine/section.rs`) |
//! | `snapshot/log.rs` | the shard's write-ahead log records: a message put or gone as it arrives or leaves, and their replay |
//! | `view.rs` | `MessageView`, a read-only view of a message for tests |
//! | `invariants.rs` | `check_invariants` for tests (feature `test-util`) |

mod dispatch;
mod gather;
mod grouped;
mod inbound;
// The invariants checker, for tests: the crate's and, with `test-util`,
// the integration tests' and the simulation's.
#[cfg(any(test, feature = "test-util"))]
mod invariants;
mod lease;
mod lease_groups;
mod lifecycle;
mod queues;
mod receipts;
mod receive;
mod records;
mod send;
mod snapshot;
mod view;

use core::mem::size_of;
use std::collections::{HashMap, VecDeque};

use sluice_protocol::{QueueName, QueueStats, ReceivedMessage, SendOutcome};

use self::gather::PendingGather;
use self::lease_groups::LeaseGroups;
use self::receive::PendingReceive;
use super::bodies::Bodies;
use super::dedup::DedupTable;
use super::error::{EngineError, EntryError};
use super::group_members::{GroupSide, MEMBER_BYTES};
use super::limits::{FIFO_SPARE_BLOCKS_MAX, RESULT_POOL_MAX};
use super::memory::ShardMemory;
use super::mesh::doorbell::ShardLinks;
use super::mesh::shard_msg::{ReceiptAction, ShardMsg};
use super::ops::{LeaseObserver, Op, OpResult};
use super::partition::{AgeSpare, Partition, READY_ENTRY_BYTES, ReadySpare};
use super::random::Rng;
use super::registry::Registry;
use super::slab::{Slab, SlotKey};
use super::stored_message::{Ext, Lease, MessageState, StoredMessage, Table};
use super::wheel::{TimerId, TimerWheel, timer_bytes};
use crate::sync::Arc;

use self::snapshot::SyncHold;
pub use self::snapshot::{
    LOG_DEDUP, LOG_GONE, LOG_LEASE, LOG_PUT, LoadClock, LogGone, LogPut, ShardLoad,
    whole_records_within,
};
pub use self::view::MessageView;

const NS_PER_MS: u64 = 1_000_000;

/// Bytes the memory budget (`--memory-max`) charges per message beyond its
/// data (body and attributes): its slab slot and its age-FIFO (or `moved`)
/// entry. A message never delivered, delayed or moved costs this and
/// nothing more.
pub const MESSAGE_BYTES: u64 = (Slab::<StoredMessage>::slot_bytes() + size_of::<SlotKey>()) as u64;
/// Bytes charged on top while a message has been delivered, delayed or
/// moved: its `Ext` entry, and the wheel timer and ready-FIFO entry such a
/// message may hold.
pub const EXT_BYTES: u64 =
    (size_of::<Ext>() + timer_bytes::<TimerEvent>() + READY_ENTRY_BYTES) as u64;
/// Bytes charged on top while a message is in flight or delayed: its
/// `Lease` entry.
pub const LEASE_BYTES: u64 = size_of::<Lease>() as u64;
/// Bytes charged on top for each message of a FIFO queue: its place among
/// its group's waiting messages and its membership entry (`grouped.rs`).
pub const GROUP_MEMBER_BYTES: u64 = (size_of::<(u64, SlotKey)>() + MEMBER_BYTES) as u64;

/// How one shard is set up. The number of shards, the memory budget and the
/// run's keys come from the [`Registry`].
#[derive(Clone, Copy, Debug)]
pub struct ShardConfig {
    /// This shard's index (0 ..< shards).
    pub shard: u16,
    /// Seed of this shard's PRNG (backoff jitter).
    pub seed: u64,
}

#[derive(Clone, Copy, Debug)]
enum TimerEvent {
    Message(SlotKey),
    /// The end of the leases of a lease group (`lease_groups.rs`).
    LeaseGroup(u32),
    /// The retention of a partition's age FIFO front.
    Retention(u32),
    /// The end of the window of a queue's first dedup entry (`dedup.rs`),
    /// by incarnation.
    Dedup(u32),
    Waiter(u64),
}

#[derive(Debug)]
enum PendingKind {
    Receive(PendingReceive),
    Gather(PendingGather),
    Send {
        results: Vec<Option<Result<SendOutcome, EntryError>>>,
        outstanding: u16,
    },
    Receipts {
        action: ReceiptAction,
        results: Vec<Option<Result<(), EntryError>>>,
        outstanding: u16,
    },
}

/// Vectors of batch results, handed back by the caller ([`Shard::recycle`])
/// and filled again, so a result allocates nothing once the pool has them.
#[derive(Debug)]
struct ResultPool {
    sent: Vec<Vec<Result<SendOutcome, EntryError>>>,
    received: Vec<Vec<ReceivedMessage>>,
    acks: Vec<Vec<Result<(), EntryError>>>,
}

impl ResultPool {
    fn new() -> ResultPool {
        ResultPool {
            sent: Vec::with_capacity(RESULT_POOL_MAX),
            received: Vec::with_capacity(RESULT_POOL_MAX),
            acks: Vec::with_capacity(RESULT_POOL_MAX),
        }
    }

    fn keep<T>(pool: &mut Vec<Vec<T>>, mut v: Vec<T>) {
        if pool.len() < RESULT_POOL_MAX && v.capacity() > 0 {
            v.clear();
            pool.push(v);
        }
    }
}

#[derive(Debug)]
struct Pending {
    ticket: u64,
    cancelled: bool,
    kind: PendingKind,
}

/// Why a message leaves its partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    Deleted,
    Dropped,
    Purged,
    /// The queue itself is gone: no counter.
    QueueGone,
}

/// One shard of the engine. See the module docs.
#[derive(Debug)]
pub struct Shard {
    id: u16,
    shards: u16,
    registry: Arc<Registry>,
    links: ShardLinks<ShardMsg>,
    overflow: Vec<VecDeque<ShardMsg>>,
    epoch: u64,
    now_ns: u64,
    wall_ms: u64,
    /// Boxed, so that the table growing past a power of two moves pointers,
    /// not 448-byte partitions (a stall of the shard at 100,000 queues).
    partitions: Vec<Option<Box<Partition>>>,
    free_partitions: Vec<u32>,
    names: HashMap<QueueName, u32>,
    by_incarnation: HashMap<u32, u32>,
    messages: Slab<StoredMessage>,
    exts: Table<Ext>,
    leases: Table<Lease>,
    groups: LeaseGroups,
    bodies: Bodies,
    ready_spare: ReadySpare,
    age_spare: AgeSpare,
    results: ResultPool,
    /// Scratch list of requests (waiters to serve), reused.
    scratch_reqs: Vec<u64>,
    /// Grouped partitions' members, and what their groups hand a receive.
    grouped: GroupSide,
    wheel: TimerWheel<TimerEvent>,
    dedup: DedupTable,
    /// The hashes of a batch's dedup keys, computed ahead (`send.rs`);
    /// reused from batch to batch.
    key_hashes: Vec<Option<u32>>,
    /// Write-ahead log records not yet taken, when on (`snapshot/log.rs`).
    wal: Option<Vec<u8>>,
    /// Messages to other shards that wait for this shard's records' sync.
    sync_hold: Option<Box<SyncHold>>,
    /// Why the server cannot write this shard's log, while it cannot.
    log_failing: Option<Box<str>>,
    rng: Rng,
    memory: ShardMemory,
    next_seq: u64,
    pending: HashMap<u64, Pending>,
    tickets: HashMap<u64, u64>,
    next_req: u64,
    completions: Vec<(u64, OpResult)>,
    touched: Vec<u32>,
    sent_count: usize,
    /// Messages taken from other shards' rings since start.
    received_count: usize,
    shut_down: bool,
    fired: Vec<(TimerId, TimerEvent)>,
    inbox: Vec<(usize, ShardMsg)>,
    observer: Observer,
}

/// The optional [`LeaseObserver`], with a `Debug` that does not need one
/// from the observer.
#[derive(Default)]
struct Observer(Option<Box<dyn LeaseObserver>>);

impl core::fmt::Debug for Observer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// Bytes of the per-message structures a shard keeps beside each message's
/// data (body + attributes, packed in shared chunks), for the memory bench:
/// name, bytes each. A held message never delivered has a slot and an
/// age-FIFO entry, nothing else: no wheel timer (its retention is its
/// partition's age FIFO) and no ready-FIFO entry (it is served from the
/// age FIFO). The rest is what a delivered, delayed or moved message adds.
#[must_use]
pub fn footprint() -> Vec<(&'static str, usize)> {
    vec![
        ("StoredMessage (record)", size_of::<StoredMessage>()),
        (
            "slab slot (record + generation)",
            Slab::<StoredMessage>::slot_bytes(),
        ),
        ("age FIFO entry", size_of::<SlotKey>()),
        ("held message, all in", MESSAGE_BYTES as usize),
        ("+ Ext (delivered, delayed, moved)", size_of::<Ext>()),
        ("+ Lease (in flight, delayed)", size_of::<Lease>()),
        ("+ wheel timer", timer_bytes::<TimerEvent>()),
        ("+ ready FIFO entry", READY_ENTRY_BYTES),
    ]
}

impl Shard {
    /// A shard with no queues yet (it picks them up from the registry).
    ///
    /// # Panics
    /// When the shard index or the mesh does not match the registry's shard
    /// count (a wiring bug).
    #[must_use]
    pub fn new(
        config: ShardConfig,
        links: ShardLinks<ShardMsg>,
        registry: Arc<Registry>,
        now_ns: u64,
        wall_ms: u64,
    ) -> Shard {
        let shards = registry.config().shards;
        assert!(config.shard < shards, "shard index out of range");
        assert_eq!(links.shards(), usize::from(shards), "mesh size");
        assert_eq!(links.shard(), usize::from(config.shard), "mesh position");
        let mut shard = Shard {
            id: config.shard,
            shards,
            registry,
            links,
            overflow: (0..shards).map(|_| VecDeque::new()).collect(),
            epoch: 0,
            now_ns,
            wall_ms,
            partitions: Vec::new(),
            free_partitions: Vec::new(),
            names: HashMap::new(),
            by_incarnation: HashMap::new(),
            messages: Slab::new(),
            exts: Table::default(),
            leases: Table::default(),
            groups: LeaseGroups::default(),
            bodies: Bodies::new(),
            ready_spare: ReadySpare::new(FIFO_SPARE_BLOCKS_MAX),
            age_spare: AgeSpare::new(FIFO_SPARE_BLOCKS_MAX),
            results: ResultPool::new(),
            scratch_reqs: Vec::new(),
            grouped: GroupSide::default(),
            wheel: TimerWheel::new(now_ns),
            dedup: DedupTable::default(),
            key_hashes: Vec::new(),
            wal: None,
            sync_hold: None,
            log_failing: None,
            rng: Rng::new(config.seed),
            memory: ShardMemory::default(),
            next_seq: 0,
            pending: HashMap::new(),
            tickets: HashMap::new(),
            next_req: 1,
            completions: Vec::new(),
            touched: Vec::new(),
            sent_count: 0,
            received_count: 0,
            shut_down: false,
            fired: Vec::new(),
            inbox: Vec::new(),
            observer: Observer::default(),
        };
        shard.refresh();
        shard
    }

    /// This shard's index.
    #[must_use]
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The registry.
    #[must_use]
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// This shard's doorbell (other shards ring it after pushing to its
    /// rings).
    #[must_use]
    pub fn doorbell(&self) -> &Arc<super::mesh::doorbell::Doorbell> {
        self.links.doorbell()
    }

    /// Reports how leases end to `observer` from now on (the server's
    /// metrics). Without one, nothing is reported and nothing is paid.
    pub fn set_lease_observer(&mut self, observer: Box<dyn LeaseObserver>) {
        self.observer = Observer(Some(observer));
    }

    /// Starts an operation. `Some` when it completed at once; otherwise its
    /// result comes out of [`Shard::drain_completions`] later, under the
    /// same ticket. Tickets must be unique among this shard's operations in
    /// progress.
    pub fn submit(&mut self, ticket: u64, op: Op, now_ns: u64, wall_ms: u64) -> Option<OpResult> {
        self.begin(now_ns, wall_ms);
        let start = self.completions.len();
        self.handle(ticket, op);
        self.end();
        let pos = self.completions[start..]
            .iter()
            .position(|(t, _)| *t == ticket)?;
        Some(self.completions.remove(start + pos).1)
    }

    /// Hands a result back once it has been used (its reply written): the
    /// vectors of batch results (sent, received, deleted, visibility
    /// changed) are cleared and filled again by later operations, so in
    /// steady state a request's result allocates nothing. Other results are
    /// dropped. Optional: a result not handed back is simply freed.
    pub fn recycle(&mut self, result: OpResult) {
        let pool = &mut self.results;
        match result {
            OpResult::Sent(v) => ResultPool::keep(&mut pool.sent, v),
            OpResult::Received(v) => ResultPool::keep(&mut pool.received, v),
            OpResult::Deleted(v) | OpResult::VisibilityChanged(v) => {
                ResultPool::keep(&mut pool.acks, v);
            }
            _ => {}
        }
    }

    fn sent_vec(&mut self) -> Vec<Result<SendOutcome, EntryError>> {
        self.results.sent.pop().unwrap_or_default()
    }

    fn received_vec(&mut self) -> Vec<ReceivedMessage> {
        self.results.received.pop().unwrap_or_default()
    }

    fn acks_vec(&mut self) -> Vec<Result<(), EntryError>> {
        self.results.acks.pop().unwrap_or_default()
    }

    /// Drains the inbound rings, fires due timers, expires waiters and
    /// pushes pending outbound messages. Returns how much work it did
    /// (messages handled and sent, timers fired): 0 means nothing happened.
    pub fn poll(&mut self, now_ns: u64, wall_ms: u64) -> usize {
        let sent_before = self.sent_count;
        let fired = self.begin(now_ns, wall_ms);
        let mut inbox = core::mem::take(&mut self.inbox);
        self.links.drain(|from, msg| inbox.push((from, msg)));
        let handled = inbox.len();
        self.received_count += handled;
        for (from, msg) in inbox.drain(..) {
            // The mesh never has more than SHARDS_MAX (1024) shards.
            self.handle_msg(from as u16, msg);
        }
        self.inbox = inbox;
        let flushed = self.end();
        // Messages moved from the overflow into a ring count too: the
        // other shard has work now, though nothing new was sent.
        handled + fired + (self.sent_count - sent_before) + flushed
    }

    /// Moves the completed operations' results into `out`.
    pub fn drain_completions(&mut self, out: &mut Vec<(u64, OpResult)>) {
        out.append(&mut self.completions);
    }

    /// The earliest timer deadline, for the server's wait.
    #[must_use]
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.wheel.next_deadline_ns()
    }

    /// Messages this shard has taken from other shards' rings and sent to
    /// them since it started, for the metrics.
    #[must_use]
    pub fn ring_messages(&self) -> (u64, u64) {
        (self.received_count as u64, self.sent_count as u64)
    }

    /// Whether messages wait for room in a ring (call [`Shard::poll`] again
    /// soon).
    #[must_use]
    pub fn has_outbound(&self) -> bool {
        self.overflow.iter().any(|q| !q.is_empty())
    }

    /// The connection that submitted `ticket` is gone: its result will not
    /// be reported. A parked receive leaves its queue at once; work already
    /// sent to other shards finishes (a message stolen for it stays leased
    /// and is redelivered when the lease ends).
    pub fn cancel(&mut self, ticket: u64) {
        let Some(req) = self.tickets.remove(&ticket) else {
            return;
        };
        let Some(p) = self.pending.get_mut(&req) else {
            return;
        };
        p.cancelled = true;
        if let PendingKind::Receive(r) = &p.kind {
            if r.steal_from.is_none() {
                self.drop_receive(req);
            }
        }
    }

    /// Shutting down: every parked receive is answered with an empty batch
    /// at once (a message already stolen for it comes back later and is left
    /// to its lease), and receives from now on do not wait.
    pub fn shutdown(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        self.shut_down = true;
        let parked: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(&p.kind, PendingKind::Receive(r) if r.waiting))
            .map(|(req, _)| *req)
            .collect();
        for req in parked {
            let Some(p) = self.pending.get_mut(&req) else {
                continue;
            };
            let ticket = p.ticket;
            let cancelled = p.cancelled;
            let mut steal_outstanding = false;
            if let PendingKind::Receive(r) = &mut p.kind {
                steal_outstanding = r.steal_from.is_some();
            }
            if !cancelled {
                let empty = self.received_vec();
                self.completions.push((ticket, OpResult::Received(empty)));
                self.tickets.remove(&ticket);
            }
            if steal_outstanding {
                if let Some(p) = self.pending.get_mut(&req) {
                    p.cancelled = true;
                }
                self.unpark(req);
            } else {
                self.drop_receive(req);
            }
        }
        self.memory.return_credit(self.registry.memory());
    }

    fn begin(&mut self, now_ns: u64, wall_ms: u64) -> usize {
        // The monotonic clock never goes back; a caller's older reading is
        // treated as now.
        self.now_ns = self.now_ns.max(now_ns);
        self.wall_ms = wall_ms;
        if self.registry.epoch() != self.epoch {
            self.refresh();
        }
        self.advance_timers()
    }

    /// Publishes what the call changed; returns how many messages waiting
    /// in the overflow it moved into rings.
    fn end(&mut self) -> usize {
        self.flush_touched();
        self.flush_overflow()
    }

    #[inline(always)]
    fn part(&self, p: u32) -> &Partition {
        // Partition indices come from `names`/`by_incarnation` or from a
        // message of a live partition: always occupied.
        self.partitions[p as usize]
            .as_ref()
            .expect("live partition index")
    }

    #[inline(always)]
    fn part_mut(&mut self, p: u32) -> &mut Partition {
        self.partitions[p as usize]
            .as_mut()
            .expect("live partition index")
    }

    fn new_req(&mut self, ticket: u64, kind: PendingKind) -> u64 {
        let req = self.next_req;
        self.next_req += 1;
        self.pending.insert(
            req,
            Pending {
                ticket,
                cancelled: false,
                kind,
            },
        );
        self.tickets.insert(ticket, req);
        req
    }

    fn finish_ticket(&mut self, ticket: u64, result: OpResult) {
        self.completions.push((ticket, result));
    }

    /// Removes a pending request and reports its result unless cancelled.
    fn finish(&mut self, req: u64, result: OpResult) {
        if let Some(p) = self.pending.remove(&req) {
            if !p.cancelled {
                self.tickets.remove(&p.ticket);
                self.completions.push((p.ticket, result));
            }
        }
    }

    fn send_to(&mut self, dest: u16, msg: ShardMsg) {
        self.sent_count += 1;
        let Some(msg) = self.hold_for_sync(dest, msg) else {
            return;
        };
        let d = usize::from(dest);
        if !self.overflow[d].is_empty() {
            self.overflow[d].push_back(msg);
            return;
        }
        if let Err(msg) = self.links.push(d, msg) {
            self.overflow[d].push_back(msg);
        }
    }

    /// Moves what waits in the overflow into the rings, as room allows;
    /// returns how many messages it moved.
    fn flush_overflow(&mut self) -> usize {
        let mut moved = 0;
        for d in 0..self.overflow.len() {
            while let Some(msg) = self.overflow[d].pop_front() {
                if let Err(msg) = self.links.push(d, msg) {
                    self.overflow[d].push_front(msg);
                    break;
                }
                moved += 1;
            }
        }
        // One doorbell ring per destination for everything pushed.
        self.links.flush();
        moved
    }

    fn others(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.shards).filter(move |&s| s != self.id)
    }

    /// The local index of `queue`'s partition, or the error to answer.
    fn partition_of(&self, queue: &QueueName) -> Result<u32, EngineError> {
        self.names
            .get(queue.as_str())
            .copied()
            .ok_or_else(|| EngineError::QueueNotFound(queue.clone()))
    }

    /// This shard's partition counters of a queue (oldest age included).
    pub fn local_stats(&mut self, queue: &str) -> Option<QueueStats> {
        let p = self.names.get(queue).copied()?;
        Some(self.partition_stats(p))
    }

    /// Every message this shard holds, for tests and debugging.
    #[must_use]
    pub fn messages(&self) -> Vec<MessageView> {
        self.messages
            .keys()
            .filter_map(|k| {
                let m = self.messages.get(k)?;
                let part = self.partitions.get(m.partition() as usize)?.as_ref()?;
                let (receive_count, delivery) = self.counters(m);
                Some(MessageView {
                    id: self.message_id(m.seq.get()),
                    queue: part.name.clone(),
                    state: m.state,
                    due_ns: (m.state != MessageState::Visible).then(|| self.due_ns(m)),
                    receive_count,
                    delivery,
                    retain_until_ns: m.retain_until_ns(),
                    group: self.group_name(m.partition(), k),
                })
            })
            .collect()
    }

    /// Bytes of the memory budget this shard's messages and dedup entries
    /// hold.
    #[must_use]
    pub fn memory_in_use(&self) -> u64 {
        self.memory.in_use()
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        // Hand the budget back so a registry outliving its shards (tests)
        // reads true.
        let in_use = self.memory.in_use();
        self.memory.release(self.registry.memory(), in_use);
        self.memory.return_credit(self.registry.memory());
    }
}
