//! Send: validation, the memory budget and max depth, dedup, and the
//! forwarding of entries whose dedup key another shard owns.

use sluice_protocol::queue_attributes::DELAY_MS_MAX;
use sluice_protocol::{
    MessageId, QueueKind, QueueName, SendBatch, SendEntry, SendEntryRef, SendOutcome,
};

use super::{
    EXT_BYTES, GROUP_MEMBER_BYTES, LEASE_BYTES, MESSAGE_BYTES, NS_PER_MS, PendingKind, Shard,
    TimerEvent,
};
use crate::engine::dedup::{CheckIn, KeyHash, Recorded, owner_shard};
use crate::engine::error::EntryError;
use crate::engine::limits::{CHUNKED_BYTES_MAX, DEDUP_ENTRY_BYTES};
use crate::engine::mesh::shard_msg::ShardMsg;
use crate::engine::ops::OpResult;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{self, MessageState, NewMessage, StoredMessage};

/// How a send's entry counts in its queue's depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Depth {
    /// It reserves its room itself, under the queue's max depth.
    Reserve,
    /// Its batch reserved its room already (a queue without a max depth),
    /// and gives back the room its entries did not take.
    Reserved,
}

impl Shard {
    pub(super) fn op_send(&mut self, ticket: u64, queue: &QueueName, entries: &SendBatch) {
        let p = match self.partition_of(queue) {
            Ok(p) => p,
            Err(e) => return self.finish_ticket(ticket, e.into()),
        };
        if let Some(e) = Self::batch_error(entries.len()) {
            return self.finish_ticket(ticket, e.into());
        }
        let (inc, window, fifo) = {
            let part = self.part(p);
            (
                part.incarnation,
                part.attrs.dedup_window.get(),
                part.attrs.kind == QueueKind::Fifo,
            )
        };
        // A FIFO queue's messages all go to its home shard (`grouped.rs`).
        let home = if fifo { self.fifo_home(inc) } else { self.id };
        // The common case, no entry another shard must take: the results
        // go straight into a vector of the result pool.
        let may_forward = home != self.id
            || (!fifo
                && window > 0
                && self.shards > 1
                && entries.iter().any(|e| e.dedup_key.is_some()));
        if !may_forward {
            // A queue without a max depth takes the batch's room in its
            // depth at once: one atomic instruction a batch, not one a
            // message (each waits for the stores before it, here the cache
            // misses of a dedup key's record).
            let depth = match self.part(p).attrs.max_depth {
                None => {
                    self.part(p).shared.add_depth_n(entries.len());
                    Depth::Reserved
                }
                Some(_) => Depth::Reserve,
            };
            let mut results = self.sent_vec();
            results.reserve(entries.len());
            // Each message stored takes the next sequence number.
            let first_seq = self.next_seq;
            if window > 0 && (fifo || entries.iter().next().is_some_and(|e| e.dedup_key.is_some()))
            {
                self.send_keyed(p, inc, entries, depth, &mut results);
            } else {
                for e in entries.iter() {
                    let r = self.send_entry(p, e, depth, None);
                    results.push(r);
                }
            }
            let stored = (self.next_seq - first_seq) as usize;
            if depth == Depth::Reserved && stored < entries.len() {
                self.part(p).shared.release_depth_n(entries.len() - stored);
            }
            return self.finish_ticket(ticket, OpResult::Sent(results));
        }
        let mut results: Vec<Option<Result<SendOutcome, EntryError>>> = vec![None; entries.len()];
        let mut forwards: Vec<(u16, Vec<(u16, SendEntry)>)> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let owner = match entry.dedup_key {
                _ if fifo => Some(home),
                Some(key) => Some(owner_shard(inc, key, self.shards)),
                None => None,
            };
            if let Some(owner) = owner {
                if owner != self.id {
                    // Batches hold at most BATCH_ENTRIES_MAX (1024) entries.
                    // The entry travels as values sharing the frame's bytes.
                    let item = (i as u16, entries.share(entry));
                    match forwards.iter_mut().find(|(d, _)| *d == owner) {
                        Some((_, v)) => v.push(item),
                        None => forwards.push((owner, vec![item])),
                    }
                    continue;
                }
            }
            results[i] = Some(self.send_entry(p, entry, Depth::Reserve, None));
        }
        if forwards.is_empty() {
            let mut done = self.sent_vec();
            done.extend(results.into_iter().flatten());
            return self.finish_ticket(ticket, OpResult::Sent(done));
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

    /// The entries of a batch to partition `p` (of queue `inc`) whose
    /// entries carry dedup keys, into `results`: the keys hashed first, and
    /// the CPU told to fetch where each will be looked up, then each entry
    /// sent (see [`crate::engine::dedup::DedupTable::hash_ahead`]).
    // Out of line: a batch without keys never comes here.
    #[inline(never)]
    fn send_keyed(
        &mut self,
        p: u32,
        inc: u32,
        entries: &SendBatch,
        depth: Depth,
        results: &mut Vec<Result<SendOutcome, EntryError>>,
    ) {
        let views: Vec<SendEntryRef<'_>> = entries.iter().collect();
        let mut hashes = core::mem::take(&mut self.key_hashes);
        hashes.clear();
        self.dedup
            .hash_ahead(inc, views.iter().map(|e| e.dedup_key), &mut hashes);
        // And their groups' names, when the queue has groups (a FIFO
        // queue's entries all name one).
        let mut names = core::mem::take(&mut self.grouped.names_ahead);
        names.clear();
        if let Some(grouping) = self.part(p).grouping.as_deref() {
            let groups = &grouping.groups;
            names.extend(views.iter().map(|e| e.group.map(|g| groups.look_ahead(g))));
        }
        for (i, (&e, &hash)) in views.iter().zip(&hashes).enumerate() {
            // For this entry's join alone.
            self.grouped.name_ahead = names.get(i).copied().flatten();
            let r = self.send_entry(p, e, depth, hash);
            self.grouped.name_ahead = None;
            results.push(r);
        }
        self.grouped.names_ahead = names;
        self.key_hashes = hashes;
    }

    pub(super) fn message_id(&self, seq: u64) -> MessageId {
        MessageId(
            (u128::from(self.registry.run_prefix()) << 64)
                | (u128::from(self.id) << 48)
                | u128::from(seq & ((1 << 48) - 1)),
        )
    }

    /// Accepts one entry into partition `p` (or recognises it as a
    /// duplicate). Body and attributes are copied once, into the shard's
    /// own storage; the caller's buffer can go. `key_hash` is the hash of
    /// the entry's dedup key, when its batch hashed its keys ahead (a key
    /// of its own is the one checked in, even on a FIFO queue that
    /// deduplicates by content).
    pub(super) fn send_entry(
        &mut self,
        p: u32,
        entry: SendEntryRef<'_>,
        depth: Depth,
        key_hash: Option<u32>,
    ) -> Result<SendOutcome, EntryError> {
        let mut content_key = None;
        // A FIFO queue's partition has its groups from the start: an entry
        // without a group, to a partition without groups, is a standard
        // queue's as it stands (and is not copied).
        let fifo_key = if entry.group.is_none() && self.part(p).grouping.is_none() {
            None
        } else {
            self.grouped_entry(p, &entry, &mut content_key)?
        };
        let part = self.part(p);
        let inc = part.incarnation;
        let delay_ms = entry.delay_ms.unwrap_or(part.attrs.delay.get());
        if delay_ms > DELAY_MS_MAX {
            return Err(EntryError::DelayOutOfRange);
        }
        let size = entry.body.len() + entry.attributes.content_bytes();
        if size > part.attrs.message_bytes_max as usize {
            return Err(EntryError::MessageTooLarge);
        }
        let window_ms = part.attrs.dedup_window.get();
        let grouped = part.grouping.is_some();
        let dedup_key = fifo_key
            .unwrap_or(entry.dedup_key)
            .filter(|_| window_ms > 0);
        // The key is recorded as it is checked, for the message this send
        // stores (its id is the next sequence number's), and taken back
        // should the send fail after all (`undo_dedup`).
        // `key_hash` is the entry's own key's, and so the key's checked in.
        let check = dedup_key.map(|k| self.check_in(inc, k, key_hash, window_ms));
        let (recorded, dedup_cost) = match check {
            Some(Err(id)) => {
                return Ok(SendOutcome {
                    id,
                    duplicate: true,
                });
            }
            Some(Ok(r)) => r,
            None => (None, 0),
        };
        let now = self.now_ns;
        let part = self.part(p);
        if depth == Depth::Reserve && !part.shared.try_reserve_depth(part.attrs.max_depth) {
            self.undo_dedup(inc, recorded);
            return Err(EntryError::QueueFull);
        }
        let retention_ms = part.attrs.retention.get();
        let attributes = entry.attributes.wire_bytes();
        let data_len = entry.body.len() + attributes.len();
        let sent_ms = stored_message::sent_ms(now);
        let retain_until_ns = (sent_ms + u64::from(retention_ms)) * NS_PER_MS;
        let in_age_fifo = part.age.is_empty() || retain_until_ns >= part.age_tail_until_ns;
        let delayed = delay_ms > 0;
        let side = side_bytes(delayed, in_age_fifo);
        // A grouped message's membership is charged here, with the message.
        let member = if grouped { GROUP_MEMBER_BYTES } else { 0 };
        let msg_cost = data_len as u64 + MESSAGE_BYTES;
        if !self.memory.reserve(
            self.registry.memory(),
            msg_cost + member + side + dedup_cost,
        ) {
            self.unreserve_depth(p, depth);
            self.undo_dedup(inc, recorded);
            return Err(EntryError::MemoryFull);
        }
        // The side entries charge themselves as they are made.
        if side > 0 {
            self.memory.release(self.registry.memory(), side);
        }
        let (chunk, offset) = self.bodies.store(entry.body, attributes);
        let seq = self.next_seq;
        let Some(key) = self.messages.insert(StoredMessage::new(NewMessage {
            chunk,
            offset,
            data_len,
            solo: data_len > CHUNKED_BYTES_MAX,
            attrs_len: attributes.len(),
            seq,
            sent_at_ms: self.wall_ms,
            sent_ms,
            retention_ms,
            partition: p,
            state: if delayed {
                MessageState::Delayed
            } else {
                MessageState::Visible
            },
            in_age_fifo,
        })) else {
            self.unreserve_depth(p, depth);
            self.bodies.release(chunk, data_len);
            self.memory
                .release(self.registry.memory(), msg_cost + member + dedup_cost);
            self.undo_dedup(inc, recorded);
            return Err(EntryError::SlotsFull);
        };
        self.next_seq += 1;
        let id = self.message_id(seq);
        if grouped {
            // A fair queue's message without a group is in the group "".
            self.enter_group_as(p, key, seq, !delayed, entry.group.unwrap_or_default(), true);
        }
        self.place_new(p, key, in_age_fifo, retain_until_ns, sent_ms, delay_ms);
        if self.wal.is_some() {
            self.logged_send(key, dedup_key.filter(|_| recorded.is_some()));
        }
        if let Some(r) = recorded {
            self.dedup_recorded(inc, r);
        }
        Ok(SendOutcome {
            id,
            duplicate: false,
        })
    }

    /// Records dedup key `key` of queue `inc` (its `hash` from the probe
    /// that did not find it) for message `id` until `until`, its memory
    /// (`cost`) reserved already: released again for a key without a hash
    /// (longer than a dedup key can be, never recorded). Arms the queue's
    /// dedup timer when it has none. Returns whether it was recorded.
    pub(super) fn record_dedup(
        &mut self,
        inc: u32,
        key: &[u8],
        hash: Option<KeyHash>,
        id: MessageId,
        cost: u64,
        until: u64,
    ) -> bool {
        let Some(hash) = hash else {
            self.memory.release(self.registry.memory(), cost);
            return false;
        };
        let r = self.dedup.insert(inc, key, hash, id, cost, until);
        self.dedup_recorded(inc, r);
        true
    }

    /// Checks dedup key `key` of queue `inc` (window `window_ms`) in for
    /// the message this send stores next: recorded, with the memory it
    /// costs, or not (a key longer than a dedup key can be); `Err` with
    /// the id of the message it recorded within its window.
    fn check_in(
        &mut self,
        inc: u32,
        key: &[u8],
        hashed: Option<u32>,
        window_ms: u32,
    ) -> Result<(Option<Recorded>, u64), MessageId> {
        let cost = key.len() as u64 + DEDUP_ENTRY_BYTES;
        let until = self.now_ns.saturating_add(u64::from(window_ms) * NS_PER_MS);
        let id = self.message_id(self.next_seq);
        match self
            .dedup
            .check_in(inc, key, hashed, self.now_ns, id, cost, until)
        {
            CheckIn::Found(id) => Err(id),
            CheckIn::Recorded(r) => Ok((Some(r), cost)),
            CheckIn::Unrecordable => Ok((None, 0)),
        }
    }

    /// A dedup key of queue `inc` was recorded, as `r` says: the memory of
    /// an entry it replaced is released, and the queue's dedup timer armed
    /// when it has none.
    fn dedup_recorded(&mut self, inc: u32, r: Recorded) {
        if r.freed > 0 {
            self.memory.release(self.registry.memory(), r.freed);
        }
        if let Some(at) = r.arm_at {
            let t = self.wheel.insert(at, TimerEvent::Dedup(inc));
            self.dedup.set_timer(inc, t);
        }
    }

    /// A send's entry that reserved its room in `p`'s depth (`depth`) was
    /// not stored. (Room its batch reserved, the batch gives back.)
    fn unreserve_depth(&mut self, p: u32, depth: Depth) {
        if depth == Depth::Reserve {
            self.part(p).shared.release_depth();
        }
    }

    /// A send that checked its key in (`recorded`) failed: the key's entry
    /// is taken back, and the memory of an entry it replaced released
    /// still (that entry stays dead).
    // Out of line: a send fails rarely.
    #[cold]
    #[inline(never)]
    fn undo_dedup(&mut self, inc: u32, recorded: Option<Recorded>) {
        if let Some(r) = recorded {
            self.dedup.undo_last(inc);
            if r.freed > 0 {
                self.memory.release(self.registry.memory(), r.freed);
            }
        }
    }

    /// What a grouped queue does with an entry before the send's common
    /// path: a standard queue's first entry with a group makes the queue
    /// fair (a FIFO queue has its groups from the start); a FIFO queue's
    /// entry is checked (it has a group) and gets its dedup key, its own or
    /// its body's hash (kept in `content`): `Some(key)`. `None` for a
    /// standard queue's entry, whose key is its own.
    // Out of line: a standard queue's entry without a group never comes
    // here, and the send's hot path stays lean.
    #[inline(never)]
    fn grouped_entry<'a>(
        &mut self,
        p: u32,
        entry: &SendEntryRef<'a>,
        content: &'a mut Option<[u8; 32]>,
    ) -> Result<Option<Option<&'a [u8]>>, EntryError> {
        if entry.group.is_some() && self.part(p).grouping.is_none() {
            self.make_fair(p, None);
        }
        let attrs = &self.part(p).attrs;
        if attrs.kind != QueueKind::Fifo {
            return Ok(None);
        }
        // A FIFO queue's entry: a group, no delay of its own, and a dedup
        // key (its own, or its body's hash) unless dedup is off (a window
        // of 0).
        if entry.group.is_none() {
            return Err(EntryError::GroupRequired);
        }
        if entry.delay_ms.is_some() {
            return Err(EntryError::DelayOnFifo);
        }
        if let Some(key) = entry.dedup_key {
            return Ok(Some(Some(key)));
        }
        if attrs.content_based_dedup {
            let key = content.insert(content_dedup_key(entry.body));
            return Ok(Some(Some(&key[..])));
        }
        if attrs.dedup_window.get() > 0 {
            return Err(EntryError::DedupKeyRequired);
        }
        Ok(Some(None))
    }

    /// Counts a message just stored in partition `p` as sent and puts it in
    /// its indexes: the age FIFO (or the moved index, with a timer of its
    /// own), and, as its state says, the ready FIFO or its delay's lease.
    #[inline(always)]
    fn place_new(
        &mut self,
        p: u32,
        key: SlotKey,
        in_age_fifo: bool,
        retain_until_ns: u64,
        sent_ms: u64,
        delay_ms: u32,
    ) {
        let delayed = delay_ms > 0;
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        part.stats.sent += 1;
        if in_age_fifo {
            part.age.push_back(key, &mut self.age_spare);
            part.age_tail_until_ns = retain_until_ns;
            if part.retention_timer.is_none() {
                let t = self.wheel.insert(retain_until_ns, TimerEvent::Retention(p));
                self.part_mut(p).retention_timer = Some(t);
            }
        } else {
            // Retention shortened since the FIFO's back was sent: out of
            // order, so a timer of its own.
            part.moved.insert((sent_ms * NS_PER_MS, key.slot));
        }
        let part = self.part_mut(p);
        if delayed {
            part.stats.delayed += 1;
            let lease = self.ensure_lease(key);
            self.leases.get_mut(lease).due_ns = self.now_ns + u64::from(delay_ms) * NS_PER_MS;
        } else {
            part.stats.visible += 1;
            if in_age_fifo {
                // Fresh: served from the age FIFO (partition.rs), and no
                // timer (its retention is the FIFO's).
                self.mark_touched(p, true);
            } else {
                self.ensure_ext(key);
                self.push_ready(p, key);
                self.arm_timer(key);
            }
        }
        if delayed {
            self.arm_timer(key);
        }
    }
}

/// What a message sent will hold beside its data and record: the side
/// entries a delayed message (its lease: the delay's end) or one out of
/// retention order (its own timer) needs from the start.
fn side_bytes(delayed: bool, in_age_fifo: bool) -> u64 {
    match (delayed, in_age_fifo) {
        (false, true) => 0,
        (false, false) => EXT_BYTES,
        (true, _) => EXT_BYTES + LEASE_BYTES,
    }
}

/// The dedup key of a FIFO queue's entry that has none, on a queue that
/// deduplicates by content: the SHA-256 of its body (as SQS's content-based
/// deduplication; the attributes do not count).
#[inline(never)]
fn content_dedup_key(body: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(body).into()
}
