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
//! - A message has one timer at a time: at the earlier of its retention
//!   deadline and (in flight or delayed) the end of its lease or delay.
//!   Removing a message cancels its timer at once.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use sluice_protocol::attributes::{DELAY_MS_MAX, RECEIVE_WAIT_MS_MAX, VISIBILITY_TIMEOUT_MS_MAX};
use sluice_protocol::limits::{
    BATCH_ENTRIES_MAX, DEDUP_KEY_BYTES_MAX, FRAME_RESERVED_BYTES, RECEIVE_ENTRY_OVERHEAD_BYTES,
};
use sluice_protocol::{ErrorCode, MessageId, QueueStats, Receipt, WireError};

use super::dedup::{DedupTable, owner_shard};
use super::doorbell::ShardLinks;
use super::memory::{DEDUP_ENTRY_BYTES, MESSAGE_STATE_BYTES, ShardMemory};
use super::message::{Message, MessageState};
use super::msg::{ForwardEntry, GatherReply, GatherRequest, ReceiptAction, ShardMsg};
use super::ops::{Op, OpResult, PeekedMessage, QueueInfo, ReceivedMessage, SendEntry, SendOk};
use super::partition::Partition;
use super::random::Rng;
use super::registry::{Registry, not_found};
use super::slab::{Slab, SlotKey};
use super::wheel::{TimerId, TimerWheel};

const NS_PER_MS: u64 = 1_000_000;

/// How one shard is set up. The number of shards, the memory budget and the
/// run's keys come from the [`Registry`].
#[derive(Clone, Copy, Debug)]
pub struct ShardConfig {
    /// This shard's index (0 ..< shards).
    pub shard: u16,
    /// Seed of this shard's PRNG (backoff jitter).
    pub seed: u64,
}

/// A read-only view of one stored message, for tests and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageView {
    /// Id.
    pub id: MessageId,
    /// Queue it is in.
    pub queue: Arc<str>,
    /// Where it stands.
    pub state: MessageState,
    /// End of the lease or delay (in flight or delayed).
    pub due_ns: Option<u64>,
    /// Deliveries since sent or redriven.
    pub receive_count: u32,
    /// Deliveries ever.
    pub delivery: u64,
    /// When retention drops it.
    pub retain_until_ns: u64,
}

#[derive(Clone, Copy, Debug)]
enum TimerEvent {
    Message(SlotKey),
    Dedup(SlotKey),
    Waiter(u64),
}

/// Reply-frame room left for a receive.
#[derive(Clone, Copy, Debug)]
struct ReplyBudget {
    bytes_left: usize,
    holds_any: bool,
}

impl ReplyBudget {
    /// Takes room for a message of `cost` bytes; the first one always fits.
    fn take(&mut self, cost: usize) -> bool {
        if self.holds_any && cost > self.bytes_left {
            return false;
        }
        self.bytes_left = self.bytes_left.saturating_sub(cost);
        self.holds_any = true;
        true
    }
}

#[derive(Debug)]
struct PendingReceive {
    incarnation: u32,
    max: usize,
    visibility_timeout_ms: Option<u32>,
    budget: ReplyBudget,
    got: Vec<ReceivedMessage>,
    /// Shards still to ask, last first.
    candidates: Vec<u16>,
    steal_from: Option<u16>,
    deadline_ns: Option<u64>,
    timer: Option<TimerId>,
    waiting: bool,
    expired: bool,
    queue_gone: bool,
    budget_full: bool,
}

#[derive(Debug)]
enum GatherAcc {
    Stats(Box<QueueInfo>),
    Purged(u64),
    Peek {
        messages: Vec<PeekedMessage>,
        max: u32,
    },
    Redrive {
        moved: u64,
        stayed: u64,
        max: u32,
    },
    Refresh,
}

#[derive(Debug)]
struct PendingGather {
    incarnation: u32,
    acc: GatherAcc,
    outstanding: u16,
    /// For the sequential kinds (peek, redrive): the next shard to ask.
    next_shard: u16,
}

#[derive(Debug)]
enum PendingKind {
    Receive(PendingReceive),
    Gather(PendingGather),
    Send {
        results: Vec<Option<Result<SendOk, WireError>>>,
        outstanding: u16,
    },
    Receipts {
        action: ReceiptAction,
        results: Vec<Option<Result<(), WireError>>>,
        outstanding: u16,
    },
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
    partitions: Vec<Option<Partition>>,
    free_partitions: Vec<u32>,
    names: HashMap<Arc<str>, u32>,
    by_incarnation: HashMap<u32, u32>,
    messages: Slab<Message>,
    wheel: TimerWheel<TimerEvent>,
    dedup: DedupTable,
    rng: Rng,
    memory: ShardMemory,
    next_seq: u64,
    pending: HashMap<u64, Pending>,
    tickets: HashMap<u64, u64>,
    next_req: u64,
    completions: Vec<(u64, OpResult)>,
    touched: Vec<u32>,
    sent_count: usize,
    shut_down: bool,
    fired: Vec<TimerEvent>,
    inbox: Vec<(usize, ShardMsg)>,
}

fn err(code: ErrorCode, message: impl Into<String>) -> WireError {
    WireError::new(code, message)
}

fn receipt_error(code: ErrorCode) -> WireError {
    let message = match code {
        ErrorCode::InvalidReceipt => {
            "receipt is malformed, forged, or from another queue, incarnation or run"
        }
        ErrorCode::StaleReceipt => "receipt names an older delivery; the message is untouched",
        ErrorCode::Gone => "the message no longer exists",
        _ => "receipt refused",
    };
    err(code, message)
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
            wheel: TimerWheel::new(now_ns),
            dedup: DedupTable::default(),
            rng: Rng::new(config.seed),
            memory: ShardMemory::default(),
            next_seq: 0,
            pending: HashMap::new(),
            tickets: HashMap::new(),
            next_req: 1,
            completions: Vec::new(),
            touched: Vec::new(),
            sent_count: 0,
            shut_down: false,
            fired: Vec::new(),
            inbox: Vec::new(),
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

    // ----- entry points -------------------------------------------------

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

    /// Drains the inbound rings, fires due timers, expires waiters and
    /// pushes pending outbound messages. Returns how much work it did
    /// (messages handled and sent, timers fired): 0 means nothing happened.
    pub fn poll(&mut self, now_ns: u64, wall_ms: u64) -> usize {
        let sent_before = self.sent_count;
        let fired = self.begin(now_ns, wall_ms);
        let mut inbox = core::mem::take(&mut self.inbox);
        self.links.drain(|from, msg| inbox.push((from, msg)));
        let handled = inbox.len();
        for (from, msg) in inbox.drain(..) {
            // The mesh never has more than 1024 shards (Registry::new).
            self.handle_msg(from as u16, msg);
        }
        self.inbox = inbox;
        self.end();
        handled + fired + (self.sent_count - sent_before)
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
                self.completions
                    .push((ticket, OpResult::Received(Vec::new())));
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

    fn end(&mut self) {
        self.flush_touched();
        self.flush_overflow();
    }

    // ----- registry view --------------------------------------------------

    fn refresh(&mut self) {
        let (epoch, queues) = self.registry.snapshot();
        self.epoch = epoch;
        let live: HashSet<u32> = queues.iter().map(|(_, q)| q.shared.incarnation()).collect();
        let gone: Vec<u32> = self
            .by_incarnation
            .iter()
            .filter(|(inc, _)| !live.contains(inc))
            .map(|(_, p)| *p)
            .collect();
        for p in gone {
            self.drop_partition(p);
        }
        for (name, entry) in queues {
            let inc = entry.shared.incarnation();
            if let Some(&p) = self.by_incarnation.get(&inc) {
                if let Some(part) = self.partitions[p as usize].as_mut() {
                    part.attrs = entry.attributes;
                }
                continue;
            }
            let part = Partition::new(name.clone(), entry.attributes, entry.shared);
            let idx = match self.free_partitions.pop() {
                Some(i) => {
                    self.partitions[i as usize] = Some(part);
                    i
                }
                None => {
                    self.partitions.push(Some(part));
                    // At most 2^32 queues ever coexist: the registry caps them.
                    (self.partitions.len() - 1) as u32
                }
            };
            self.names.insert(name, idx);
            self.by_incarnation.insert(inc, idx);
        }
    }

    fn part(&self, p: u32) -> &Partition {
        // Partition indices come from `names`/`by_incarnation` or from a
        // message of a live partition: always occupied.
        self.partitions[p as usize]
            .as_ref()
            .expect("live partition index")
    }

    fn part_mut(&mut self, p: u32) -> &mut Partition {
        self.partitions[p as usize]
            .as_mut()
            .expect("live partition index")
    }

    fn drop_partition(&mut self, p: u32) {
        let members = self.members(p);
        for key in members {
            self.remove_message(key, Removal::QueueGone);
        }
        let (inc, waiters) = {
            let part = self.part_mut(p);
            (part.incarnation, core::mem::take(&mut part.waiters))
        };
        let (timers, cost) = self.dedup.remove_queue(inc);
        for t in timers {
            self.wheel.cancel(t);
        }
        self.memory.release(self.registry.memory(), cost);
        // Every receive on this queue, parked or stealing, learns the news.
        let receives: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, pe)| matches!(&pe.kind, PendingKind::Receive(r) if r.incarnation == inc))
            .map(|(req, _)| *req)
            .collect();
        let shared = self.part(p).shared.clone();
        for req in &waiters {
            shared.remove_waiter(self.id);
            if let Some(PendingKind::Receive(r)) = self.pending.get_mut(req).map(|pe| &mut pe.kind)
            {
                r.waiting = false;
            }
        }
        shared.store_visible_hint(self.id, 0);
        let name = self.part(p).name.clone();
        self.names.remove(&name);
        self.by_incarnation.remove(&inc);
        self.partitions[p as usize] = None;
        self.free_partitions.push(p);
        for req in receives {
            if let Some(PendingKind::Receive(r)) = self.pending.get_mut(&req).map(|pe| &mut pe.kind)
            {
                r.queue_gone = true;
            }
            self.continue_receive(req);
        }
    }

    /// Every message of partition `p`.
    fn members(&self, p: u32) -> Vec<SlotKey> {
        let part = self.part(p);
        let mut out = Vec::with_capacity(usize::try_from(part.live()).unwrap_or(0));
        for &key in &part.age {
            if let Some(m) = self.messages.get(key) {
                if m.partition == p && m.in_age_fifo {
                    out.push(key);
                }
            }
        }
        for &(_, slot) in &part.moved {
            if let Some((generation, m)) = self.messages.get_any(slot) {
                if m.partition == p && !m.in_age_fifo {
                    out.push(SlotKey { slot, generation });
                }
            }
        }
        out
    }

    // ----- requests and completions ---------------------------------------

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
        let d = usize::from(dest);
        if !self.overflow[d].is_empty() {
            self.overflow[d].push_back(msg);
            return;
        }
        if let Err(msg) = self.links.push(d, msg) {
            self.overflow[d].push_back(msg);
        }
    }

    fn flush_overflow(&mut self) {
        for d in 0..self.overflow.len() {
            while let Some(msg) = self.overflow[d].pop_front() {
                if let Err(msg) = self.links.push(d, msg) {
                    self.overflow[d].push_front(msg);
                    break;
                }
            }
        }
        // One doorbell ring per destination for everything pushed.
        self.links.flush();
    }

    fn others(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.shards).filter(move |&s| s != self.id)
    }

    // ----- operations -----------------------------------------------------

    fn handle(&mut self, ticket: u64, op: Op) {
        match op {
            Op::CreateQueue { name, attributes } => {
                let r = match self.registry.create(&name, &attributes) {
                    Ok((incarnation, created)) => OpResult::QueueCreated {
                        incarnation,
                        created,
                    },
                    Err(e) => OpResult::Error(e),
                };
                self.refresh();
                self.finish_ticket(ticket, r);
            }
            Op::SetQueueAttributes { name, update } => {
                let r = match self.registry.set(&name, &update) {
                    Ok(()) => OpResult::QueueUpdated,
                    Err(e) => OpResult::Error(e),
                };
                self.refresh();
                self.finish_ticket(ticket, r);
            }
            Op::DeleteQueue { name } => match self.registry.delete(&name) {
                Err(e) => self.finish_ticket(ticket, OpResult::Error(e)),
                Ok(_) => {
                    self.refresh();
                    self.start_gather(ticket, 0, GatherAcc::Refresh, GatherRequest::Refresh);
                }
            },
            Op::ListQueues { prefix } => {
                let names = self.registry.list(&prefix);
                self.finish_ticket(ticket, OpResult::Queues(names));
            }
            Op::GetQueue { name } => match self.names.get(name.as_str()).copied() {
                None => self.finish_ticket(ticket, OpResult::Error(not_found(&name))),
                Some(p) => {
                    let part = self.part(p);
                    let info = QueueInfo {
                        name: part.name.to_string(),
                        incarnation: part.incarnation,
                        attributes: part.attrs.clone(),
                        stats: QueueStats::default(),
                    };
                    let inc = part.incarnation;
                    self.start_gather(
                        ticket,
                        inc,
                        GatherAcc::Stats(Box::new(info)),
                        GatherRequest::Stats,
                    );
                }
            },
            Op::PurgeQueue { name } => match self.names.get(name.as_str()).copied() {
                None => self.finish_ticket(ticket, OpResult::Error(not_found(&name))),
                Some(p) => {
                    let inc = self.part(p).incarnation;
                    self.start_gather(ticket, inc, GatherAcc::Purged(0), GatherRequest::Purge);
                }
            },
            Op::Peek { queue, max } => match self.names.get(queue.as_str()).copied() {
                None => self.finish_ticket(ticket, OpResult::Error(not_found(&queue))),
                Some(_) if max == 0 || max as usize > BATCH_ENTRIES_MAX => self.finish_ticket(
                    ticket,
                    OpResult::error(
                        ErrorCode::InvalidArgument,
                        format!("max: {max} is outside 1 ..= {BATCH_ENTRIES_MAX}"),
                    ),
                ),
                Some(p) => {
                    let inc = self.part(p).incarnation;
                    let acc = GatherAcc::Peek {
                        messages: Vec::new(),
                        max,
                    };
                    self.start_gather(ticket, inc, acc, GatherRequest::Peek { max });
                }
            },
            Op::Redrive { queue, max } => match self.names.get(queue.as_str()).copied() {
                None => self.finish_ticket(ticket, OpResult::Error(not_found(&queue))),
                Some(_) if max == 0 => self.finish_ticket(
                    ticket,
                    OpResult::error(ErrorCode::InvalidArgument, "max: must be at least 1"),
                ),
                Some(p) => {
                    let inc = self.part(p).incarnation;
                    let acc = GatherAcc::Redrive {
                        moved: 0,
                        stayed: 0,
                        max,
                    };
                    self.start_gather(ticket, inc, acc, GatherRequest::Redrive { max });
                }
            },
            Op::Send { queue, entries } => self.op_send(ticket, &queue, entries),
            Op::Receive {
                queue,
                max,
                visibility_timeout_ms,
                wait_ms,
            } => self.op_receive(ticket, &queue, max, visibility_timeout_ms, wait_ms),
            Op::Delete { queue, receipts } => {
                let entries = receipts.into_iter().map(|r| (r, 0)).collect();
                self.op_receipts(ticket, &queue, ReceiptAction::Delete, entries);
            }
            Op::ChangeVisibility { queue, entries } => {
                let entries = entries
                    .into_iter()
                    .map(|e| (e.receipt, e.timeout_ms))
                    .collect();
                self.op_receipts(ticket, &queue, ReceiptAction::ChangeVisibility, entries);
            }
        }
    }

    fn batch_error(len: usize) -> Option<OpResult> {
        if len == 0 {
            Some(OpResult::error(
                ErrorCode::InvalidArgument,
                "entries: a batch needs at least one entry",
            ))
        } else if len > BATCH_ENTRIES_MAX {
            Some(OpResult::error(
                ErrorCode::BatchTooLarge,
                format!("entries: {len} is more than {BATCH_ENTRIES_MAX}"),
            ))
        } else {
            None
        }
    }

    // ----- send -------------------------------------------------------------

    fn op_send(&mut self, ticket: u64, queue: &str, entries: Vec<SendEntry>) {
        let Some(p) = self.names.get(queue).copied() else {
            return self.finish_ticket(ticket, OpResult::Error(not_found(queue)));
        };
        if let Some(e) = Self::batch_error(entries.len()) {
            return self.finish_ticket(ticket, e);
        }
        let (inc, window) = {
            let part = self.part(p);
            (part.incarnation, part.attrs.dedup_window_ms)
        };
        let mut results: Vec<Option<Result<SendOk, WireError>>> = vec![None; entries.len()];
        let mut forwards: Vec<(u16, Vec<(u16, SendEntry)>)> = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            if let Some(key) = &entry.dedup_key {
                if window > 0 && self.shards > 1 && Self::dedup_key_ok(key) {
                    let owner = owner_shard(inc, key, self.shards);
                    if owner != self.id {
                        // Batches hold at most 1024 entries.
                        let item = (i as u16, entry);
                        match forwards.iter_mut().find(|(d, _)| *d == owner) {
                            Some((_, v)) => v.push(item),
                            None => forwards.push((owner, vec![item])),
                        }
                        continue;
                    }
                }
            }
            results[i] = Some(self.send_entry(p, &entry));
        }
        if forwards.is_empty() {
            let results = results.into_iter().flatten().collect();
            return self.finish_ticket(ticket, OpResult::Sent(results));
        }
        let outstanding = forwards.len() as u16;
        let req = self.new_req(
            ticket,
            PendingKind::Send {
                results,
                outstanding,
            },
        );
        for (dest, entries) in forwards {
            self.send_to(
                dest,
                ShardMsg::SendForward {
                    req,
                    incarnation: inc,
                    entries,
                },
            );
        }
    }

    fn dedup_key_ok(key: &Bytes) -> bool {
        !key.is_empty() && key.len() <= DEDUP_KEY_BYTES_MAX
    }

    fn message_id(&self, seq: u64) -> MessageId {
        MessageId(
            (u128::from(self.registry.run_prefix()) << 64)
                | (u128::from(self.id) << 48)
                | u128::from(seq & ((1 << 48) - 1)),
        )
    }

    fn send_entry(&mut self, p: u32, entry: &SendEntry) -> Result<SendOk, WireError> {
        let part = self.part(p);
        let inc = part.incarnation;
        let delay_ms = entry.delay_ms.unwrap_or(part.attrs.delay_ms);
        if delay_ms > DELAY_MS_MAX {
            return Err(err(
                ErrorCode::InvalidArgument,
                format!("delay_ms: {delay_ms} is outside 0 ..= {DELAY_MS_MAX}"),
            ));
        }
        if let Some(key) = &entry.dedup_key {
            if !Self::dedup_key_ok(key) {
                return Err(err(
                    ErrorCode::InvalidArgument,
                    format!("dedup_key: must have 1 ..= {DEDUP_KEY_BYTES_MAX} bytes"),
                ));
            }
        }
        let size = entry.body.len() + entry.attributes.size_bytes();
        if size > part.attrs.message_bytes_max as usize {
            return Err(err(
                ErrorCode::MessageTooLarge,
                format!(
                    "message: {size} bytes of body and attributes exceed the queue's {}",
                    part.attrs.message_bytes_max
                ),
            ));
        }
        let window_ms = part.attrs.dedup_window_ms;
        let dedup_key = entry.dedup_key.as_ref().filter(|_| window_ms > 0);
        if let Some(key) = dedup_key {
            if let Some(id) = self.dedup.lookup(inc, key) {
                return Ok(SendOk {
                    id,
                    duplicate: true,
                });
            }
        }
        if !part.shared.try_reserve_depth(part.attrs.max_depth) {
            return Err(err(
                ErrorCode::QueueFull,
                format!("queue {} holds its max depth", part.name),
            ));
        }
        let retention_ns = u64::from(part.attrs.retention_ms) * NS_PER_MS;
        let shared = part.shared.clone();
        let data_len = entry.body.len() + entry.attributes.encoded().len();
        let msg_cost = data_len as u64 + MESSAGE_STATE_BYTES;
        let dedup_cost = dedup_key.map_or(0, |k| k.len() as u64 + DEDUP_ENTRY_BYTES);
        if !self
            .memory
            .reserve(self.registry.memory(), msg_cost + dedup_cost)
        {
            shared.release_depth();
            return Err(err(
                ErrorCode::Busy,
                "the broker's memory budget is spent; retry later",
            ));
        }
        let (data, body_len) = Message::store_data(&entry.body, &entry.attributes);
        let now = self.now_ns;
        let delayed = delay_ms > 0;
        let seq = self.next_seq;
        let Some(key) = self.messages.insert(Message {
            data,
            body_len,
            seq,
            sent_at_ms: self.wall_ms,
            sent_ns: now,
            retain_until_ns: now.saturating_add(retention_ns),
            due_ns: now + u64::from(delay_ms) * NS_PER_MS,
            delivery: 0,
            first_received_ms: 0,
            receive_count: 0,
            partition: p,
            source: 0,
            state: if delayed {
                MessageState::Delayed
            } else {
                MessageState::Visible
            },
            in_ready: false,
            in_age_fifo: true,
            timer: None,
        }) else {
            shared.release_depth();
            self.memory
                .release(self.registry.memory(), msg_cost + dedup_cost);
            return Err(err(ErrorCode::Busy, "no message slot left on this shard"));
        };
        self.next_seq += 1;
        let id = self.message_id(seq);
        let part = self.part_mut(p);
        part.stats.sent += 1;
        part.age.push_back(key);
        if delayed {
            part.stats.delayed += 1;
        } else {
            part.stats.visible += 1;
            self.push_ready(p, key);
        }
        self.arm_timer(key);
        if let Some(k) = dedup_key {
            let window_ns = u64::from(window_ms) * NS_PER_MS;
            if let Some(slot) = self.dedup.insert(inc, k, id, dedup_cost) {
                let t = self
                    .wheel
                    .insert(now.saturating_add(window_ns), TimerEvent::Dedup(slot));
                self.dedup.set_timer(slot, t);
            } else {
                self.memory.release(self.registry.memory(), dedup_cost);
            }
        }
        Ok(SendOk {
            id,
            duplicate: false,
        })
    }

    // ----- message state ------------------------------------------------------

    fn mark_touched(&mut self, p: u32, gained: bool) {
        let part = self.part_mut(p);
        part.gained |= gained;
        if !part.touched {
            part.touched = true;
            self.touched.push(p);
        }
    }

    fn push_ready(&mut self, p: u32, key: SlotKey) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        if !m.in_ready {
            m.in_ready = true;
            self.part_mut(p).ready.push_back(key);
        }
        self.mark_touched(p, true);
    }

    /// (Re)schedules the message's one timer.
    fn arm_timer(&mut self, key: SlotKey) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        let deadline = match m.state {
            MessageState::Visible => m.retain_until_ns,
            MessageState::Delayed | MessageState::InFlight => m.due_ns.min(m.retain_until_ns),
        };
        if let Some(t) = m.timer.take() {
            self.wheel.cancel(t);
        }
        let t = self.wheel.insert(deadline, TimerEvent::Message(key));
        if let Some(m) = self.messages.get_mut(key) {
            m.timer = Some(t);
        }
    }

    fn gauge_mut(stats: &mut QueueStats, state: MessageState) -> &mut u64 {
        match state {
            MessageState::Visible => &mut stats.visible,
            MessageState::Delayed => &mut stats.delayed,
            MessageState::InFlight => &mut stats.in_flight,
        }
    }

    /// Moves a message to `state` (gauges follow).
    fn set_state(&mut self, key: SlotKey, state: MessageState, due_ns: u64) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        let (old, p) = (m.state, m.partition);
        m.state = state;
        m.due_ns = due_ns;
        let part = self.part_mut(p);
        *Self::gauge_mut(&mut part.stats, old) -= 1;
        *Self::gauge_mut(&mut part.stats, state) += 1;
        if state == MessageState::Visible {
            self.push_ready(p, key);
        } else if old == MessageState::Visible {
            self.mark_touched(p, false);
        }
        self.arm_timer(key);
    }

    /// After a release or an expired lease at `at_ns`: visible now, or
    /// delayed by the queue's backoff (equal jitter).
    fn make_available(&mut self, key: SlotKey, at_ns: u64) {
        let Some(m) = self.messages.get(key) else {
            return;
        };
        let backoff = self.part(m.partition).attrs.backoff;
        let wait_ms = match backoff {
            None => 0,
            Some(b) => {
                let n = m.receive_count.max(1);
                let d = if n > 32 {
                    u64::from(b.max_ms)
                } else {
                    (u64::from(b.base_ms) << (n - 1)).min(u64::from(b.max_ms))
                };
                d / 2 + self.rng.below_inclusive(d - d / 2)
            }
        };
        if wait_ms == 0 {
            self.set_state(key, MessageState::Visible, at_ns);
        } else {
            self.set_state(key, MessageState::Delayed, at_ns + wait_ms * NS_PER_MS);
        }
    }

    fn remove_message(&mut self, key: SlotKey, why: Removal) {
        let Some(m) = self.messages.remove(key) else {
            return;
        };
        if let Some(t) = m.timer {
            self.wheel.cancel(t);
        }
        let p = m.partition;
        let cost = m.data.len() as u64 + MESSAGE_STATE_BYTES;
        self.memory.release(self.registry.memory(), cost);
        let part = self.part_mut(p);
        *Self::gauge_mut(&mut part.stats, m.state) -= 1;
        match why {
            Removal::Deleted => part.stats.deleted += 1,
            Removal::Dropped => part.stats.dropped += 1,
            Removal::Purged => part.stats.purged += 1,
            Removal::QueueGone => {}
        }
        part.shared.release_depth();
        if !m.in_age_fifo {
            part.moved.remove(&(m.sent_ns, key.slot));
        }
        if m.state == MessageState::Visible {
            self.mark_touched(p, false);
        }
        if why != Removal::QueueGone {
            self.maybe_compact(p);
        }
    }

    fn key_live_in(&self, key: SlotKey, p: u32) -> bool {
        self.messages.get(key).is_some_and(|m| m.partition == p)
    }

    fn maybe_compact(&mut self, p: u32) {
        let part = self.part(p);
        if part.needs_compaction(part.age.len()) {
            let mut age = core::mem::take(&mut self.part_mut(p).age);
            age.retain(|&k| {
                self.key_live_in(k, p) && self.messages.get(k).is_some_and(|m| m.in_age_fifo)
            });
            self.part_mut(p).age = age;
        }
        let part = self.part(p);
        if part.needs_compaction(part.ready.len()) {
            let mut ready = core::mem::take(&mut self.part_mut(p).ready);
            ready.retain(|&k| self.key_live_in(k, p));
            self.part_mut(p).ready = ready;
        }
    }

    /// Moves a visible message to partition `to` (dead-letter or redrive):
    /// a new generation, so receipts of the old queue answer `Gone`.
    fn move_message(&mut self, key: SlotKey, to: u32, redrive: bool) -> Option<SlotKey> {
        let m = self.messages.get(key)?;
        let (from, sent_ns, in_age, state) = (m.partition, m.sent_ns, m.in_age_fifo, m.state);
        debug_assert_eq!(state, MessageState::Visible);
        let from_inc = self.part(from).incarnation;
        {
            let part = self.part_mut(from);
            part.stats.visible -= 1;
            if redrive {
                part.stats.redriven += 1;
            } else {
                part.stats.dead_lettered += 1;
            }
            part.shared.release_depth();
            if !in_age {
                part.moved.remove(&(sent_ns, key.slot));
            }
        }
        self.mark_touched(from, false);
        let new_key = self.messages.bump(key)?;
        let retention_ns = u64::from(self.part(to).attrs.retention_ms) * NS_PER_MS;
        let m = self.messages.get_mut(new_key)?;
        m.partition = to;
        m.source = if redrive { 0 } else { from_inc };
        if redrive {
            m.receive_count = 0;
        }
        m.in_ready = false;
        m.in_age_fifo = false;
        m.retain_until_ns = sent_ns.saturating_add(retention_ns);
        let part = self.part_mut(to);
        part.stats.moved_in += 1;
        part.stats.visible += 1;
        part.shared.add_depth();
        part.moved.insert((sent_ns, new_key.slot));
        self.push_ready(to, new_key);
        self.arm_timer(new_key);
        self.maybe_compact(from);
        Some(new_key)
    }

    /// Pops the next visible message of `p`'s ready FIFO.
    fn pop_visible(&mut self, p: u32) -> Option<SlotKey> {
        loop {
            let key = self.part_mut(p).ready.pop_front()?;
            let Some(m) = self.messages.get_mut(key) else {
                continue;
            };
            if m.partition != p {
                continue;
            }
            m.in_ready = false;
            if m.state == MessageState::Visible {
                return Some(key);
            }
        }
    }

    /// Leases up to `max` visible messages of `p` into `out`, dead-lettering
    /// those whose next delivery would exceed the redrive policy.
    fn take_visible(
        &mut self,
        p: u32,
        max: usize,
        visibility_timeout_ms: Option<u32>,
        budget: &mut ReplyBudget,
        out: &mut Vec<ReceivedMessage>,
    ) {
        let (vis_ms, dlq, inc) = {
            let part = self.part(p);
            let dlq = part.attrs.redrive.as_ref().and_then(|r| {
                self.names
                    .get(r.dead_letter_queue.as_str())
                    .map(|&d| (d, u32::from(r.max_receives)))
            });
            (
                visibility_timeout_ms.unwrap_or(part.attrs.visibility_timeout_ms),
                dlq,
                part.incarnation,
            )
        };
        let start = out.len();
        while out.len() - start < max {
            let Some(key) = self.pop_visible(p) else {
                break;
            };
            let Some(m) = self.messages.get(key) else {
                continue;
            };
            if let Some((d, max_receives)) = dlq {
                if m.receive_count >= max_receives && d != p {
                    self.move_message(key, d, false);
                    continue;
                }
            }
            let cost = RECEIVE_ENTRY_OVERHEAD_BYTES + m.data.len();
            if !budget.take(cost) {
                // Back to the front: it is the next one to go.
                if let Some(m) = self.messages.get_mut(key) {
                    m.in_ready = true;
                }
                self.part_mut(p).ready.push_front(key);
                break;
            }
            let now = self.now_ns;
            let wall = self.wall_ms;
            let Some(m) = self.messages.get_mut(key) else {
                continue;
            };
            m.receive_count = m.receive_count.saturating_add(1);
            m.delivery += 1;
            if m.delivery == 1 {
                m.first_received_ms = wall;
            }
            let receipt = self.registry.receipt_key().sign(Receipt {
                incarnation: inc,
                shard: self.id,
                slot: key.slot,
                generation: key.generation,
                delivery: m.delivery,
                check: 0,
            });
            let delivered = ReceivedMessage {
                id: MessageId(0),
                receipt,
                body: m.body(),
                attributes: m.attributes(),
                receive_count: m.receive_count,
                delivery: m.delivery,
                sent_at_ms: m.sent_at_ms,
                first_received_at_ms: m.first_received_ms,
            };
            let seq = m.seq;
            out.push(ReceivedMessage {
                id: self.message_id(seq),
                ..delivered
            });
            self.part_mut(p).stats.received += 1;
            self.set_state(
                key,
                MessageState::InFlight,
                now.saturating_add(u64::from(vis_ms) * NS_PER_MS),
            );
        }
    }

    // ----- timers -----------------------------------------------------------

    fn advance_timers(&mut self) -> usize {
        let mut total = 0;
        loop {
            let mut fired = core::mem::take(&mut self.fired);
            self.wheel.advance(self.now_ns, |_, ev| fired.push(ev));
            if fired.is_empty() {
                self.fired = fired;
                return total;
            }
            total += fired.len();
            for ev in fired.drain(..) {
                match ev {
                    TimerEvent::Message(key) => self.on_message_timer(key),
                    TimerEvent::Dedup(slot) => {
                        if let Some(cost) = self.dedup.expire(slot) {
                            self.memory.release(self.registry.memory(), cost);
                        }
                    }
                    TimerEvent::Waiter(req) => self.on_waiter_timeout(req),
                }
            }
            self.fired = fired;
        }
    }

    fn on_message_timer(&mut self, key: SlotKey) {
        let now = self.now_ns;
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        m.timer = None;
        if m.retain_until_ns <= now {
            self.remove_message(key, Removal::Dropped);
            return;
        }
        match m.state {
            MessageState::InFlight if m.due_ns <= now => {
                let due = m.due_ns;
                let p = m.partition;
                self.part_mut(p).stats.redelivered += 1;
                self.make_available(key, due);
            }
            MessageState::Delayed if m.due_ns <= now => {
                let due = m.due_ns;
                self.set_state(key, MessageState::Visible, due);
            }
            _ => self.arm_timer(key),
        }
    }

    // ----- receive ----------------------------------------------------------

    fn op_receive(
        &mut self,
        ticket: u64,
        queue: &str,
        max: u32,
        visibility_timeout_ms: Option<u32>,
        wait_ms: Option<u32>,
    ) {
        let Some(p) = self.names.get(queue).copied() else {
            return self.finish_ticket(ticket, OpResult::Error(not_found(queue)));
        };
        let invalid = if max == 0 || max as usize > BATCH_ENTRIES_MAX {
            Some(format!("max: {max} is outside 1 ..= {BATCH_ENTRIES_MAX}"))
        } else if let Some(v) = visibility_timeout_ms.filter(|&v| v > VISIBILITY_TIMEOUT_MS_MAX) {
            Some(format!(
                "visibility_timeout_ms: {v} is outside 0 ..= {VISIBILITY_TIMEOUT_MS_MAX}"
            ))
        } else {
            wait_ms
                .filter(|&w| w > RECEIVE_WAIT_MS_MAX)
                .map(|w| format!("wait_ms: {w} is outside 0 ..= {RECEIVE_WAIT_MS_MAX}"))
        };
        if let Some(m) = invalid {
            return self.finish_ticket(ticket, OpResult::error(ErrorCode::InvalidArgument, m));
        }
        let part = self.part(p);
        let inc = part.incarnation;
        let wait = if self.shut_down {
            0
        } else {
            wait_ms.unwrap_or(part.attrs.receive_wait_ms)
        };
        let frame = self.registry.config().frame_bytes_max;
        let mut pr = PendingReceive {
            incarnation: inc,
            max: max as usize,
            visibility_timeout_ms,
            budget: ReplyBudget {
                bytes_left: frame.saturating_sub(FRAME_RESERVED_BYTES) as usize,
                holds_any: false,
            },
            got: Vec::new(),
            candidates: Vec::new(),
            steal_from: None,
            deadline_ns: (wait > 0).then(|| self.now_ns + u64::from(wait) * NS_PER_MS),
            timer: None,
            waiting: false,
            expired: false,
            queue_gone: false,
            budget_full: false,
        };
        let mut got = Vec::new();
        self.take_visible(p, pr.max, visibility_timeout_ms, &mut pr.budget, &mut got);
        pr.budget_full = got.len() < pr.max && self.part(p).stats.visible > 0;
        pr.got = got;
        if pr.got.len() < pr.max && !pr.budget_full {
            pr.candidates = self.steal_candidates(p);
        }
        let req = self.new_req(ticket, PendingKind::Receive(pr));
        self.continue_receive(req);
    }

    /// Other shards whose hint says they have visible messages, best last.
    fn steal_candidates(&self, p: u32) -> Vec<u16> {
        let shared = &self.part(p).shared;
        let mut c: Vec<(u64, u16)> = self
            .others()
            .map(|s| (shared.visible_hint(s), s))
            .filter(|(v, _)| *v > 0)
            .collect();
        c.sort_unstable();
        c.into_iter().map(|(_, s)| s).collect()
    }

    fn receive_mut(&mut self, req: u64) -> Option<&mut PendingReceive> {
        match self.pending.get_mut(&req).map(|p| &mut p.kind) {
            Some(PendingKind::Receive(r)) => Some(r),
            _ => None,
        }
    }

    /// Drives a receive one step: steal, park, or finish.
    fn continue_receive(&mut self, req: u64) {
        loop {
            let Some(pending) = self.pending.get_mut(&req) else {
                return;
            };
            let cancelled = pending.cancelled;
            let PendingKind::Receive(r) = &mut pending.kind else {
                return;
            };
            if r.steal_from.is_some() {
                return;
            }
            if cancelled {
                self.drop_receive(req);
                return;
            }
            if r.queue_gone {
                let inc = r.incarnation;
                self.unpark(req);
                let name = format!("queue (incarnation {inc}) was deleted");
                self.finish_receive(req, OpResult::error(ErrorCode::QueueNotFound, name));
                return;
            }
            let done = r.got.len() >= r.max || r.budget_full;
            if !done {
                if let Some(dest) = r.candidates.pop() {
                    r.steal_from = Some(dest);
                    let msg = ShardMsg::Steal {
                        req,
                        incarnation: r.incarnation,
                        max: (r.max - r.got.len()) as u32,
                        visibility_timeout_ms: r.visibility_timeout_ms,
                        reply_bytes_left: r.budget.bytes_left,
                        holds_any: r.budget.holds_any,
                    };
                    self.send_to(dest, msg);
                    return;
                }
            }
            let may_wait = r.got.is_empty() && !r.expired && r.deadline_ns.is_some() && !done;
            if !may_wait {
                let got = core::mem::take(&mut r.got);
                self.unpark(req);
                self.finish_receive(req, OpResult::Received(got));
                return;
            }
            if r.waiting {
                return;
            }
            // Park: FIFO per queue on this shard; register, then re-read the
            // hints (the Dekker pairing of registry.rs).
            r.waiting = true;
            let inc = r.incarnation;
            let deadline = r.deadline_ns.unwrap_or(self.now_ns);
            let Some(&p) = self.by_incarnation.get(&inc) else {
                if let Some(r) = self.receive_mut(req) {
                    r.waiting = false;
                    r.queue_gone = true;
                }
                continue;
            };
            let t = self.wheel.insert(deadline, TimerEvent::Waiter(req));
            self.part_mut(p).waiters.push_back(req);
            self.part(p).shared.add_waiter(self.id);
            let candidates = self.steal_candidates(p);
            if let Some(r) = self.receive_mut(req) {
                r.timer = Some(t);
                r.candidates = candidates;
            }
        }
    }

    /// Takes a receive out of its queue's waiter FIFO (if parked) and
    /// cancels its deadline.
    fn unpark(&mut self, req: u64) {
        let Some(r) = self.receive_mut(req) else {
            return;
        };
        let timer = r.timer.take();
        let was_waiting = core::mem::replace(&mut r.waiting, false);
        let inc = r.incarnation;
        if let Some(t) = timer {
            self.wheel.cancel(t);
        }
        if was_waiting {
            if let Some(&p) = self.by_incarnation.get(&inc) {
                let id = self.id;
                let part = self.part_mut(p);
                if let Some(pos) = part.waiters.iter().position(|&w| w == req) {
                    part.waiters.remove(pos);
                }
                part.shared.remove_waiter(id);
            }
        }
    }

    fn drop_receive(&mut self, req: u64) {
        self.unpark(req);
        if let Some(p) = self.pending.remove(&req) {
            if self.tickets.get(&p.ticket) == Some(&req) {
                self.tickets.remove(&p.ticket);
            }
        }
    }

    fn finish_receive(&mut self, req: u64, result: OpResult) {
        self.finish(req, result);
    }

    fn on_waiter_timeout(&mut self, req: u64) {
        if let Some(r) = self.receive_mut(req) {
            r.timer = None;
            r.expired = true;
            self.continue_receive(req);
        }
    }

    /// Serves parked receives from `p`'s own visible messages.
    fn serve_local_waiters(&mut self, p: u32) {
        let waiters: Vec<u64> = self.part(p).waiters.iter().copied().collect();
        for req in waiters {
            if self.part(p).stats.visible == 0 {
                break;
            }
            let Some(r) = self.receive_mut(req) else {
                continue;
            };
            if r.steal_from.is_some() {
                continue;
            }
            let (max, vis) = (r.max, r.visibility_timeout_ms);
            let mut budget = r.budget;
            let mut got = Vec::new();
            self.take_visible(p, max, vis, &mut budget, &mut got);
            if let Some(r) = self.receive_mut(req) {
                r.budget = budget;
                r.got.extend(got);
            }
            self.continue_receive(req);
        }
    }

    fn flush_touched(&mut self) {
        while let Some(p) = self.touched.pop() {
            let Some(part) = self.partitions[p as usize].as_mut() else {
                continue;
            };
            part.touched = false;
            let gained = core::mem::take(&mut part.gained);
            if gained && !part.waiters.is_empty() {
                self.serve_local_waiters(p);
                let Some(part) = self.partitions[p as usize].as_mut() else {
                    continue;
                };
                part.touched = false;
            }
            let part = self.part(p);
            let visible = part.stats.visible;
            part.shared.store_visible_hint(self.id, visible);
            if gained && visible > 0 {
                let shared = part.shared.clone();
                let inc = part.incarnation;
                let wake: Vec<u16> = shared.waiting_shards(self.id).collect();
                for d in wake {
                    self.send_to(d, ShardMsg::Wake { incarnation: inc });
                }
            }
        }
    }

    // ----- receipts -----------------------------------------------------------

    fn op_receipts(
        &mut self,
        ticket: u64,
        queue: &str,
        action: ReceiptAction,
        entries: Vec<(Receipt, u32)>,
    ) {
        let Some(p) = self.names.get(queue).copied() else {
            return self.finish_ticket(ticket, OpResult::Error(not_found(queue)));
        };
        if let Some(e) = Self::batch_error(entries.len()) {
            return self.finish_ticket(ticket, e);
        }
        let inc = self.part(p).incarnation;
        let mut results: Vec<Option<Result<(), WireError>>> = vec![None; entries.len()];
        let mut forwards: Vec<(u16, Vec<ForwardEntry>)> = Vec::new();
        for (i, (receipt, timeout_ms)) in entries.into_iter().enumerate() {
            if action == ReceiptAction::ChangeVisibility && timeout_ms > VISIBILITY_TIMEOUT_MS_MAX {
                results[i] = Some(Err(err(
                    ErrorCode::InvalidArgument,
                    format!(
                        "timeout_ms: {timeout_ms} is outside 0 ..= {VISIBILITY_TIMEOUT_MS_MAX}"
                    ),
                )));
                continue;
            }
            if !self.registry.receipt_key().verify(&receipt)
                || receipt.incarnation != inc
                || receipt.shard >= self.shards
            {
                results[i] = Some(Err(receipt_error(ErrorCode::InvalidReceipt)));
                continue;
            }
            if receipt.shard != self.id {
                let e = ForwardEntry {
                    // Batches hold at most 1024 entries.
                    index: i as u16,
                    receipt,
                    timeout_ms,
                };
                match forwards.iter_mut().find(|(d, _)| *d == receipt.shard) {
                    Some((_, v)) => v.push(e),
                    None => forwards.push((receipt.shard, vec![e])),
                }
                continue;
            }
            results[i] = Some(self.apply_receipt(inc, &receipt, action, timeout_ms));
        }
        let wrap = |action, r: Vec<Result<(), WireError>>| match action {
            ReceiptAction::Delete => OpResult::Deleted(r),
            ReceiptAction::ChangeVisibility => OpResult::VisibilityChanged(r),
        };
        if forwards.is_empty() {
            let r = results.into_iter().flatten().collect();
            return self.finish_ticket(ticket, wrap(action, r));
        }
        let outstanding = forwards.len() as u16;
        let req = self.new_req(
            ticket,
            PendingKind::Receipts {
                action,
                results,
                outstanding,
            },
        );
        for (dest, entries) in forwards {
            self.send_to(
                dest,
                ShardMsg::Forward {
                    req,
                    incarnation: inc,
                    action,
                    entries,
                },
            );
        }
    }

    /// Applies a checked receipt naming this shard.
    fn apply_receipt(
        &mut self,
        incarnation: u32,
        receipt: &Receipt,
        action: ReceiptAction,
        timeout_ms: u32,
    ) -> Result<(), WireError> {
        let Some(&p) = self.by_incarnation.get(&incarnation) else {
            return Err(receipt_error(ErrorCode::Gone));
        };
        let key = SlotKey {
            slot: receipt.slot,
            generation: receipt.generation,
        };
        let Some(m) = self.messages.get(key) else {
            return Err(receipt_error(ErrorCode::Gone));
        };
        if m.partition != p {
            return Err(receipt_error(ErrorCode::Gone));
        }
        if receipt.delivery < m.delivery {
            return Err(receipt_error(ErrorCode::StaleReceipt));
        }
        if receipt.delivery > m.delivery {
            return Err(receipt_error(ErrorCode::InvalidReceipt));
        }
        let state = m.state;
        match action {
            ReceiptAction::Delete => self.remove_message(key, Removal::Deleted),
            ReceiptAction::ChangeVisibility if timeout_ms == 0 => {
                if state == MessageState::InFlight {
                    self.part_mut(p).stats.released += 1;
                    self.make_available(key, self.now_ns);
                }
            }
            ReceiptAction::ChangeVisibility => {
                let due = self
                    .now_ns
                    .saturating_add(u64::from(timeout_ms) * NS_PER_MS);
                self.set_state(key, MessageState::InFlight, due);
            }
        }
        Ok(())
    }

    // ----- fan-out ------------------------------------------------------------

    fn start_gather(
        &mut self,
        ticket: u64,
        incarnation: u32,
        acc: GatherAcc,
        request: GatherRequest,
    ) {
        let local = self.gather_local(incarnation, request);
        let mut g = PendingGather {
            incarnation,
            acc,
            outstanding: 0,
            next_shard: 0,
        };
        Self::fold(&mut g.acc, local);
        let req = self.new_req(ticket, PendingKind::Gather(g));
        match request {
            GatherRequest::Stats | GatherRequest::Purge | GatherRequest::Refresh => {
                let others: Vec<u16> = self.others().collect();
                if let Some(PendingKind::Gather(g)) =
                    self.pending.get_mut(&req).map(|p| &mut p.kind)
                {
                    g.outstanding = others.len() as u16;
                }
                for d in others {
                    self.send_to(
                        d,
                        ShardMsg::Gather {
                            req,
                            incarnation,
                            request,
                        },
                    );
                }
                self.continue_gather(req);
            }
            GatherRequest::Peek { .. } | GatherRequest::Redrive { .. } => {
                self.continue_gather(req);
            }
        }
    }

    /// What a sequential gather still wants (0 when done).
    fn remaining(acc: &GatherAcc) -> u32 {
        match acc {
            GatherAcc::Peek { messages, max } => max.saturating_sub(messages.len() as u32),
            GatherAcc::Redrive { moved, stayed, max } => {
                u64::from(*max).saturating_sub(moved + stayed) as u32
            }
            _ => 0,
        }
    }

    fn continue_gather(&mut self, req: u64) {
        let Some(PendingKind::Gather(g)) = self.pending.get_mut(&req).map(|p| &mut p.kind) else {
            return;
        };
        if g.outstanding > 0 {
            return;
        }
        let want = Self::remaining(&g.acc);
        if want > 0 {
            // Sequential kinds: ask the next shard for what is still wanted.
            while g.next_shard < self.shards && g.next_shard == self.id {
                g.next_shard += 1;
            }
            if g.next_shard < self.shards {
                let dest = g.next_shard;
                g.next_shard += 1;
                g.outstanding = 1;
                let request = match g.acc {
                    GatherAcc::Peek { .. } => GatherRequest::Peek { max: want },
                    _ => GatherRequest::Redrive { max: want },
                };
                let incarnation = g.incarnation;
                self.send_to(
                    dest,
                    ShardMsg::Gather {
                        req,
                        incarnation,
                        request,
                    },
                );
                return;
            }
        }
        let Some(Pending {
            ticket,
            cancelled,
            kind,
        }) = self.pending.remove(&req)
        else {
            return;
        };
        let PendingKind::Gather(g) = kind else {
            return;
        };
        let result = match g.acc {
            GatherAcc::Stats(info) => OpResult::Queue(*info),
            GatherAcc::Purged(n) => OpResult::Purged { messages: n },
            GatherAcc::Peek { messages, .. } => OpResult::Peeked(messages),
            GatherAcc::Redrive { moved, stayed, .. } => OpResult::Redriven { moved, stayed },
            GatherAcc::Refresh => OpResult::QueueDeleted,
        };
        if !cancelled {
            self.tickets.remove(&ticket);
            self.completions.push((ticket, result));
        }
    }

    fn fold(acc: &mut GatherAcc, reply: GatherReply) {
        match (acc, reply) {
            (GatherAcc::Stats(info), GatherReply::Stats(s)) => info.stats.merge(&s),
            (GatherAcc::Purged(n), GatherReply::Purged(m)) => *n += m,
            (GatherAcc::Peek { messages, max }, GatherReply::Peeked(more)) => {
                let room = (*max as usize).saturating_sub(messages.len());
                messages.extend(more.into_iter().take(room));
            }
            (
                GatherAcc::Redrive { moved, stayed, .. },
                GatherReply::Redriven {
                    moved: m,
                    stayed: s,
                },
            ) => {
                *moved += m;
                *stayed += s;
            }
            _ => {}
        }
    }

    /// This shard's part of a fan-out.
    fn gather_local(&mut self, incarnation: u32, request: GatherRequest) -> GatherReply {
        if request == GatherRequest::Refresh {
            if self.registry.epoch() != self.epoch {
                self.refresh();
            }
            return GatherReply::Refreshed;
        }
        let p = self.by_incarnation.get(&incarnation).copied();
        match request {
            GatherRequest::Stats => {
                GatherReply::Stats(p.map(|p| self.partition_stats(p)).unwrap_or_default())
            }
            GatherRequest::Purge => {
                let mut n = 0;
                if let Some(p) = p {
                    for key in self.members(p) {
                        self.remove_message(key, Removal::Purged);
                        n += 1;
                    }
                    self.maybe_compact(p);
                }
                GatherReply::Purged(n)
            }
            GatherRequest::Peek { max } => {
                GatherReply::Peeked(p.map(|p| self.peek_local(p, max)).unwrap_or_default())
            }
            GatherRequest::Redrive { max } => {
                let (moved, stayed) = p.map_or((0, 0), |p| self.redrive_local(p, max));
                GatherReply::Redriven { moved, stayed }
            }
            GatherRequest::Refresh => GatherReply::Refreshed,
        }
    }

    fn partition_stats(&mut self, p: u32) -> QueueStats {
        let mut oldest: Option<u64> = None;
        while let Some(&key) = self.part(p).age.front() {
            match self.messages.get(key) {
                Some(m) if m.partition == p && m.in_age_fifo => {
                    oldest = Some(m.sent_ns);
                    break;
                }
                _ => {
                    self.part_mut(p).age.pop_front();
                }
            }
        }
        let part = self.part(p);
        if let Some(&(sent, _)) = part.moved.first() {
            oldest = Some(oldest.map_or(sent, |o| o.min(sent)));
        }
        let mut s = part.stats;
        s.oldest_age_ms = oldest.map_or(0, |o| self.now_ns.saturating_sub(o) / NS_PER_MS);
        s
    }

    fn peek_local(&self, p: u32, max: u32) -> Vec<PeekedMessage> {
        let part = self.part(p);
        let mut out = Vec::new();
        for &key in &part.ready {
            if out.len() >= max as usize {
                break;
            }
            let Some(m) = self.messages.get(key) else {
                continue;
            };
            if m.partition != p || m.state != MessageState::Visible {
                continue;
            }
            out.push(PeekedMessage {
                id: self.message_id(m.seq),
                body: m.body(),
                attributes: m.attributes(),
                receive_count: m.receive_count,
                delivery: m.delivery,
                sent_at_ms: m.sent_at_ms,
                first_received_at_ms: (m.delivery > 0).then_some(m.first_received_ms),
            });
        }
        out
    }

    fn redrive_local(&mut self, p: u32, max: u32) -> (u64, u64) {
        let (mut moved, mut stayed) = (0u64, 0u64);
        let mut keep = Vec::new();
        while moved + stayed < u64::from(max) {
            let Some(key) = self.pop_visible(p) else {
                break;
            };
            let Some(m) = self.messages.get(key) else {
                continue;
            };
            let target = (m.source != 0)
                .then(|| self.by_incarnation.get(&m.source).copied())
                .flatten();
            let ok = target.is_some_and(|t| {
                let part = self.part(t);
                part.shared.try_reserve_depth(part.attrs.max_depth)
            });
            match target.filter(|_| ok) {
                Some(t) => {
                    // move_message counts the depth in again; undo the
                    // reservation that checked the limit.
                    self.part(t).shared.release_depth();
                    self.move_message(key, t, true);
                    moved += 1;
                }
                None => {
                    stayed += 1;
                    keep.push(key);
                }
            }
        }
        for key in keep.into_iter().rev() {
            if let Some(m) = self.messages.get_mut(key) {
                m.in_ready = true;
                self.part_mut(p).ready.push_front(key);
            }
        }
        (moved, stayed)
    }

    // ----- inbound ------------------------------------------------------------

    fn handle_msg(&mut self, from: u16, msg: ShardMsg) {
        match msg {
            ShardMsg::Forward {
                req,
                incarnation,
                action,
                entries,
            } => {
                let results = entries
                    .iter()
                    .map(|e| {
                        (
                            e.index,
                            self.apply_receipt(incarnation, &e.receipt, action, e.timeout_ms),
                        )
                    })
                    .collect();
                self.send_to(from, ShardMsg::ForwardReply { req, results });
            }
            ShardMsg::ForwardReply { req, results } => {
                let Some(PendingKind::Receipts {
                    action,
                    results: acc,
                    outstanding,
                }) = self.pending.get_mut(&req).map(|p| &mut p.kind)
                else {
                    return;
                };
                for (i, r) in results {
                    if let Some(slot) = acc.get_mut(usize::from(i)) {
                        *slot = Some(r);
                    }
                }
                *outstanding -= 1;
                if *outstanding == 0 {
                    let action = *action;
                    let r = core::mem::take(acc).into_iter().flatten().collect();
                    let result = match action {
                        ReceiptAction::Delete => OpResult::Deleted(r),
                        ReceiptAction::ChangeVisibility => OpResult::VisibilityChanged(r),
                    };
                    self.finish(req, result);
                }
            }
            ShardMsg::SendForward {
                req,
                incarnation,
                entries,
            } => {
                let results = match self.by_incarnation.get(&incarnation).copied() {
                    Some(p) => entries
                        .iter()
                        .map(|(i, e)| (*i, self.send_entry(p, e)))
                        .collect(),
                    None => entries
                        .iter()
                        .map(|(i, _)| (*i, Err(err(ErrorCode::QueueNotFound, "queue was deleted"))))
                        .collect(),
                };
                self.send_to(from, ShardMsg::SendReply { req, results });
            }
            ShardMsg::SendReply { req, results } => {
                let Some(PendingKind::Send {
                    results: acc,
                    outstanding,
                }) = self.pending.get_mut(&req).map(|p| &mut p.kind)
                else {
                    return;
                };
                for (i, r) in results {
                    if let Some(slot) = acc.get_mut(usize::from(i)) {
                        *slot = Some(r);
                    }
                }
                *outstanding -= 1;
                if *outstanding == 0 {
                    let r = core::mem::take(acc).into_iter().flatten().collect();
                    self.finish(req, OpResult::Sent(r));
                }
            }
            ShardMsg::Steal {
                req,
                incarnation,
                max,
                visibility_timeout_ms,
                reply_bytes_left,
                holds_any,
            } => {
                let mut budget = ReplyBudget {
                    bytes_left: reply_bytes_left,
                    holds_any,
                };
                let mut messages = Vec::new();
                if let Some(p) = self.by_incarnation.get(&incarnation).copied() {
                    self.take_visible(
                        p,
                        max as usize,
                        visibility_timeout_ms,
                        &mut budget,
                        &mut messages,
                    );
                }
                self.send_to(
                    from,
                    ShardMsg::StealReply {
                        req,
                        messages,
                        reply_bytes_left: budget.bytes_left,
                    },
                );
            }
            ShardMsg::StealReply {
                req,
                messages,
                reply_bytes_left,
            } => {
                let Some(r) = self.receive_mut(req) else {
                    return;
                };
                r.steal_from = None;
                if !messages.is_empty() {
                    r.budget.holds_any = true;
                }
                r.budget.bytes_left = reply_bytes_left;
                r.got.extend(messages);
                self.continue_receive(req);
            }
            ShardMsg::Wake { incarnation } => {
                let Some(&p) = self.by_incarnation.get(&incarnation) else {
                    return;
                };
                let waiters: Vec<u64> = self.part(p).waiters.iter().copied().collect();
                let mut target = None;
                for req in &waiters {
                    if let Some(r) = self.receive_mut(*req) {
                        if r.steal_from.is_none() {
                            target = Some(*req);
                            break;
                        }
                    }
                }
                let target = target.or_else(|| waiters.first().copied());
                if let Some(req) = target {
                    if let Some(r) = self.receive_mut(req) {
                        if !r.candidates.contains(&from) {
                            r.candidates.push(from);
                        }
                    }
                    self.continue_receive(req);
                }
            }
            ShardMsg::Gather {
                req,
                incarnation,
                request,
            } => {
                let reply = self.gather_local(incarnation, request);
                self.send_to(from, ShardMsg::GatherReply { req, reply });
            }
            ShardMsg::GatherReply { req, reply } => {
                let Some(PendingKind::Gather(g)) = self.pending.get_mut(&req).map(|p| &mut p.kind)
                else {
                    return;
                };
                Self::fold(&mut g.acc, reply);
                g.outstanding = g.outstanding.saturating_sub(1);
                self.continue_gather(req);
            }
        }
    }

    // ----- introspection ------------------------------------------------------

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
                let part = self.partitions.get(m.partition as usize)?.as_ref()?;
                Some(MessageView {
                    id: self.message_id(m.seq),
                    queue: part.name.clone(),
                    state: m.state,
                    due_ns: (m.state != MessageState::Visible).then_some(m.due_ns),
                    receive_count: m.receive_count,
                    delivery: m.delivery,
                    retain_until_ns: m.retain_until_ns,
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

    /// Checks the shard's internal consistency: per partition, the
    /// accounting identity and that the gauges match the messages; every
    /// message has its timer, its ready-FIFO entry when visible and its
    /// membership entry; memory accounting matches. Tests call it after
    /// every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut counts: HashMap<u32, [u64; 3]> = HashMap::new();
        let mut mem = 0u64;
        for key in self.messages.keys() {
            let m = self
                .messages
                .get(key)
                .ok_or_else(|| format!("slab key {key:?} does not resolve"))?;
            let part = self
                .partitions
                .get(m.partition as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| format!("message {key:?} in a dropped partition"))?;
            let c = counts.entry(m.partition).or_default();
            match m.state {
                MessageState::Visible => c[0] += 1,
                MessageState::Delayed => c[1] += 1,
                MessageState::InFlight => c[2] += 1,
            }
            if m.timer.is_none() {
                return Err(format!("message {key:?} of {} has no timer", part.name));
            }
            if m.state == MessageState::Visible && !m.in_ready {
                return Err(format!(
                    "visible message {key:?} of {} not in its ready FIFO",
                    part.name
                ));
            }
            if m.in_ready {
                let n = part.ready.iter().filter(|&&k| k == key).count();
                if n != 1 {
                    return Err(format!("message {key:?} has {n} ready entries"));
                }
            }
            let indexed = if m.in_age_fifo {
                part.age.contains(&key)
            } else {
                part.moved.contains(&(m.sent_ns, key.slot))
            };
            if !indexed {
                return Err(format!(
                    "message {key:?} of {} missing from its index",
                    part.name
                ));
            }
            mem += m.data.len() as u64 + MESSAGE_STATE_BYTES;
        }
        for (i, part) in self.partitions.iter().enumerate() {
            let Some(part) = part else { continue };
            let s = &part.stats;
            if !s.identity_holds() {
                return Err(format!(
                    "identity broken on shard {} for {}: {s:?}",
                    self.id, part.name
                ));
            }
            let c = counts.get(&(i as u32)).copied().unwrap_or_default();
            if [s.visible, s.delayed, s.in_flight] != c {
                return Err(format!(
                    "gauges of {} on shard {} are {:?}, messages say {c:?}",
                    part.name,
                    self.id,
                    [s.visible, s.delayed, s.in_flight]
                ));
            }
            if part.moved.len() as u64 > part.live() {
                return Err(format!("moved index of {} has stale entries", part.name));
            }
            let counted = part.shared.waiters(self.id);
            if part.waiters.len() as u64 != counted {
                return Err(format!(
                    "{} waiters parked on {} of shard {}, the queue counts {counted}",
                    part.waiters.len(),
                    part.name,
                    self.id
                ));
            }
            for req in &part.waiters {
                let parked = matches!(
                    self.pending.get(req).map(|p| &p.kind),
                    Some(PendingKind::Receive(r)) if r.waiting && r.incarnation == part.incarnation
                );
                if !parked {
                    return Err(format!(
                        "waiter {req} of {} is not a parked receive",
                        part.name
                    ));
                }
            }
        }
        let dedup_mem = self.memory.in_use() - mem.min(self.memory.in_use());
        if mem > self.memory.in_use() {
            return Err(format!(
                "messages hold {mem} bytes but the shard accounts {}",
                self.memory.in_use()
            ));
        }
        if self.dedup.len() == 0 && dedup_mem != 0 {
            return Err(format!("{dedup_mem} bytes accounted to no dedup entry"));
        }
        let waiter_timers = self
            .pending
            .values()
            .filter(|p| matches!(&p.kind, PendingKind::Receive(r) if r.timer.is_some()))
            .count();
        let expect = self.messages.len() + self.dedup.len() + waiter_timers;
        if self.wheel.len() != expect {
            return Err(format!(
                "wheel holds {} timers, expected {expect} (messages, dedup entries, waiters)",
                self.wheel.len()
            ));
        }
        Ok(())
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
