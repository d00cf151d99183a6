//! The records a shard writes to its write-ahead log (`crate::wal`), and
//! their replay onto a shard loaded from the checkpoint before them. Pure
//! bytes, like the snapshot section: the engine writes into an
//! [`Out`] and reads from a [`SectionRead`]; the log's frames, files and
//! syncs are the server's.
//!
//! A record is a kind byte and its fields, little-endian:
//!
//! | kind | fields |
//! |---|---|
//! | 1, put | `u32` length of what follows; `u8` why: 0 sent, 1 moved in; `u32` queue incarnation; the message as the snapshot's message record has it (`snapshot.rs`: slot, generation, sequence number, times, state, side entry, lease, data, group) |
//! | 2, gone | `u32` slot, `u32` generation; `u8` why: 0 deleted, 1 dropped (its retention ended), 2 purged, 3 dead-lettered, 4 redriven (the last two: a put of it in its new queue follows) |
//! | 3, dedup key | `u32` length of what follows; the key's entry as the snapshot has it (`u8` key length, `u32` queue incarnation, the key, `u128` message id, `u64` ms of its window left) |
//! | 4, lease | `u32` slot, `u32` generation; `u64` delivery, `u32` receive count, `u32` ms from its send to its first receive: the counters a receive moved |
//!
//! A send that records a dedup key writes its put, then its key's record,
//! so that a producer's retry after a crash is still a duplicate.
//!
//! A message's put comes when it is stored (a send, a move in: replayed,
//! counted as its queue counts it). A put's slot and generation are new
//! to the replay: a slot the replay freed takes a later generation, as the
//! slab gives one (a record that says otherwise is refused, since the
//! entries of the message that left would name the new one).
//! A gone comes when it leaves. Times in a put are relative to the moment
//! it was written, as a snapshot's are to the save: a replay is given the
//! wall-clock time of each frame's commit ([`LoadClock::saved_wall_ms`]).
//!
//! A put of a queue that no longer exists (deleted after the record was
//! written) is skipped whole: its length says how far. A gone or lease of
//! a message that is not there is skipped too: its queue is gone since
//! (its put skipped, or the checkpoint's partition dropped as the replay
//! caught up with the registry's log).
//!
//! A receive writes its lease record, not the lease: a replay brings a
//! leased message back visible (in the ready FIFO, as a lease that ended),
//! with the receive count, delivery and first receive the receive left, so
//! that a message a crash interrupts still reaches its dead-letter queue
//! after as many receives as without the crash.

use std::collections::{HashMap, VecDeque};

use sluice_protocol::MessageId;

use super::{LoadClock, ShardLoad, invalid};
use crate::engine::error::EngineError;
use crate::engine::mesh::shard_msg::ShardMsg;
use crate::engine::section::{Out, SectionRead, SliceRead};
use crate::engine::shard::{NS_PER_MS, Removal, Shard};
use crate::engine::slab::{Slab, SlotKey};
use crate::engine::stored_message::{MessageState, NONE, StoredMessage};

/// A message stored, or its record changed.
pub const LOG_PUT: u8 = 1;
/// A message gone.
pub const LOG_GONE: u8 = 2;
/// A dedup key recorded.
pub const LOG_DEDUP: u8 = 3;
/// A message received: its counters.
pub const LOG_LEASE: u8 = 4;
/// Bytes of a lease record.
const LEASE_RECORD_BYTES: usize = 25;

/// Why a message is put: the counter a replay adds it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogPut {
    /// Sent.
    Sent,
    /// Moved in (redriven, or dead-lettered here).
    MovedIn,
}

/// Why a message is gone: the counter a replay adds it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogGone {
    /// Deleted.
    Deleted,
    /// Dropped (its retention ended).
    Dropped,
    /// Purged.
    Purged,
    /// Moved to its dead-letter queue (a put of it follows).
    DeadLettered,
    /// Redriven from this dead-letter queue (a put of it follows).
    Redriven,
}

/// Where the sequence number sits in a message record (after the slot and
/// the generation).
const SEQ_AT: usize = 8;

/// The length a put or a dedup record gives what follows it: at least the
/// 5 bytes every such record has, at most the bytes left.
fn record_length<R: SectionRead>(r: &mut R, at: u64) -> Result<u64, R::Error> {
    let len = u64::from(r.u32("record length")?);
    if len < 5 || len > r.remaining() {
        return Err(invalid(
            at,
            "record length",
            format!("{len}, with {} bytes left", r.remaining()),
        ));
    }
    Ok(len)
}

/// The length of the longest run of whole records at the start of
/// `records` (as a shard writes them) that fits in `max` bytes, or the
/// first record's when even that one does not: where a writer may cut
/// records into commits of at most `max` bytes.
#[must_use]
pub fn whole_records_within(records: &[u8], max: usize) -> usize {
    let mut at = 0;
    while at < records.len() {
        let len_at = |i: usize| {
            records
                .get(i..i + 4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let len = match records[at] {
            LOG_PUT | LOG_DEDUP => 5 + len_at(at + 1),
            LOG_LEASE => LEASE_RECORD_BYTES,
            // LOG_GONE: slot, generation, why.
            _ => 10,
        };
        let end = (at + len).min(records.len());
        if end > max && at > 0 {
            break;
        }
        at = end;
    }
    at
}

/// The messages to other shards that wait for a sync, by destination,
/// each with the byte of the log its records end at.
#[derive(Debug)]
pub struct SyncHold {
    /// Record bytes taken so far.
    taken: u64,
    /// Record bytes the server's syncs reach.
    synced: u64,
    held: Vec<VecDeque<(u64, ShardMsg)>>,
}

/// What a replay keeps from record to record.
struct Replay {
    /// Slots a put may name: fewer than the records left could fill.
    slots: u32,
    /// The generation of the free slots a put adds on its way.
    hole_generation: u32,
    clock: LoadClock,
    /// Each slot a gone freed, with the generation it removed.
    freed: HashMap<u32, u32>,
}

impl Shard {
    /// Appends the put record of the message at `key` to `out`, put for
    /// `why`: nothing when no message is there.
    pub fn log_put(&self, out: &mut Vec<u8>, key: SlotKey, why: LogPut) {
        let Some(m) = self.messages.get(key).copied() else {
            return;
        };
        let Some(part) = self
            .partitions
            .get(m.partition() as usize)
            .and_then(Option::as_ref)
        else {
            return;
        };
        let now_ns = self.now_ns;
        let now_ms = now_ns / NS_PER_MS;
        // The head in one piece: kind, the length (patched in once the
        // record is written: one pass over the message, not a counting one
        // first), why, the queue's incarnation.
        let mut head = [0u8; 10];
        head[0] = LOG_PUT;
        head[5] = match why {
            LogPut::Sent => 0,
            LogPut::MovedIn => 1,
        };
        head[6..].copy_from_slice(&part.incarnation.to_le_bytes());
        let len_at = out.len() + 1;
        out.put(&head);
        self.write_message(out, key, &m, now_ns, now_ms);
        // A message record is at most a frame and its fixed fields (well
        // within u32).
        let len = (out.len() - len_at - 4) as u32;
        out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Appends the gone record of the message at `key`, which leaves for
    /// `why`.
    pub fn log_gone(out: &mut impl Out, key: SlotKey, why: LogGone) {
        // Gathered on the stack, handed over in one piece.
        let mut r = [0u8; 10];
        r[0] = LOG_GONE;
        r[1..5].copy_from_slice(&key.slot.to_le_bytes());
        r[5..9].copy_from_slice(&key.generation.to_le_bytes());
        r[9] = match why {
            LogGone::Deleted => 0,
            LogGone::Dropped => 1,
            LogGone::Purged => 2,
            LogGone::DeadLettered => 3,
            LogGone::Redriven => 4,
        };
        out.put(&r);
    }

    /// Appends the lease record of the message at `key`, just received
    /// for the `delivery`-th time, the `receive_count`-th counted.
    pub fn log_lease(
        out: &mut impl Out,
        key: SlotKey,
        delivery: u64,
        receive_count: u32,
        first_received_delta_ms: u32,
    ) {
        // Gathered on the stack, handed over in one piece.
        let mut r = [0u8; 25];
        r[0] = LOG_LEASE;
        r[1..5].copy_from_slice(&key.slot.to_le_bytes());
        r[5..9].copy_from_slice(&key.generation.to_le_bytes());
        r[9..17].copy_from_slice(&delivery.to_le_bytes());
        r[17..21].copy_from_slice(&receive_count.to_le_bytes());
        r[21..].copy_from_slice(&first_received_delta_ms.to_le_bytes());
        out.put(&r);
    }

    /// [`Shard::log_lease`] into the shard's own records, when the log is
    /// on.
    #[cold]
    #[inline(never)]
    pub(in crate::engine::shard) fn logged_lease(
        &mut self,
        key: SlotKey,
        delivery: u64,
        receive_count: u32,
        first_received_delta_ms: u32,
    ) {
        // While the log cannot be written a receive records nothing: its
        // lease record is what a replay needs least (a receive count one
        // low), and an outage of receives must not grow the records
        // waiting in memory without bound.
        if let Some(w) = self.wal.as_mut().filter(|_| self.log_failing.is_none()) {
            Self::log_lease(w, key, delivery, receive_count, first_received_delta_ms);
        }
    }

    /// Turns this shard's write-ahead log records on or off (records not
    /// yet taken are dropped when off). A lease is logged as the counters
    /// it moved (a lease record), not as the lease: a replay brings a
    /// leased message back visible, its receive count as the last receive
    /// left it.
    pub fn set_logging(&mut self, on: bool) {
        self.wal = on.then(Vec::new);
    }

    /// Makes messages to other shards wait until the records written
    /// before them are synced (`--durability always`: a result another
    /// shard answers with must not reach its client first): the server
    /// says how far its syncs reach with [`Shard::log_synced`].
    pub fn set_hold_for_sync(&mut self, on: bool) {
        self.sync_hold = on.then(|| {
            Box::new(SyncHold {
                taken: 0,
                synced: 0,
                held: (0..self.shards).map(|_| VecDeque::new()).collect(),
            })
        });
    }

    /// The server cannot write this shard's log (`why`), or can again
    /// (`None`). While it cannot, the sends, deletes, purges and redrives
    /// that arrive here, and the send and delete entries other shards
    /// forward here, are refused with `Busy` and change nothing; receives
    /// and visibility changes, which no replay needs to be safe, go on,
    /// receives without their lease records (a crash can then bring their
    /// receive counts back one low each).
    pub fn set_log_failing(&mut self, why: Option<&str>) {
        self.log_failing = why.map(Box::from);
    }

    /// The refusal of a state-changing request while the log fails.
    #[inline]
    pub(in crate::engine::shard) fn log_refusal(&self) -> Option<EngineError> {
        let why = self.log_failing.as_deref()?;
        Some(EngineError::LogFailed(format!(
            "this shard's log cannot be written ({why}); retry later"
        )))
    }

    /// `msg` to `dest`, unless it must wait for a sync (then it is kept,
    /// after whatever already waits for `dest`, and `None` returned).
    #[inline]
    pub(in crate::engine::shard) fn hold_for_sync(
        &mut self,
        dest: u16,
        msg: ShardMsg,
    ) -> Option<ShardMsg> {
        let Some(h) = self.sync_hold.as_mut() else {
            return Some(msg);
        };
        // The records written so far end at this byte of the log.
        let until = h.taken + self.wal.as_ref().map_or(0, |w| w.len() as u64);
        let queue = &mut h.held[usize::from(dest)];
        // While the log fails nothing claims a sync: what is already held
        // waits for the disk, what comes after need not wait behind it
        // (messages of different requests, whose order no one keeps).
        if self.log_failing.is_some() || (until <= h.synced && queue.is_empty()) {
            return Some(msg);
        }
        queue.push_back((until, msg));
        None
    }

    /// The server's syncs reach `bytes` of the records taken: the messages
    /// to other shards that waited for them go. Returns how many went.
    pub fn log_synced(&mut self, bytes: u64) -> usize {
        let Some(mut h) = self.sync_hold.take() else {
            return 0;
        };
        h.synced = h.synced.max(bytes);
        let mut went = 0;
        for d in 0..h.held.len() {
            while h.held[d]
                .front()
                .is_some_and(|(until, _)| *until <= h.synced)
            {
                if let Some((_, msg)) = h.held[d].pop_front() {
                    // Behind anything still waiting for room.
                    if !self.overflow[d].is_empty() {
                        self.overflow[d].push_back(msg);
                    } else if let Err(msg) = self.links.push(d, msg) {
                        self.overflow[d].push_back(msg);
                    }
                    went += 1;
                }
            }
        }
        self.sync_hold = Some(h);
        self.links.flush();
        went
    }

    /// How many bytes of records the shard wrote since the last take.
    #[must_use]
    pub fn log_len(&self) -> usize {
        self.wal.as_ref().map_or(0, Vec::len)
    }

    /// Moves the records written since the last take (in the order the
    /// shard wrote them) to the end of `into`.
    pub fn take_log(&mut self, into: &mut Vec<u8>) {
        if let Some(w) = self.wal.as_mut() {
            if let Some(h) = self.sync_hold.as_mut() {
                h.taken += w.len() as u64;
            }
            if into.is_empty() {
                // The two buffers trade places: no copy, and each keeps
                // its room for the next turn.
                core::mem::swap(into, w);
            } else {
                into.append(w);
            }
        }
    }

    /// [`Shard::log_put`] into the shard's own records, when the log is on.
    // Out of line: without a log, a send pays one branch for it.
    #[cold]
    #[inline(never)]
    pub(in crate::engine::shard) fn logged_put(&mut self, key: SlotKey, why: LogPut) {
        if let Some(mut w) = self.wal.take() {
            self.log_put(&mut w, key, why);
            self.wal = Some(w);
        }
    }

    /// Appends the record of dedup key `key` of queue `inc`, recorded for
    /// message `id` with `left_ms` of its window left.
    pub fn log_dedup(out: &mut impl Out, inc: u32, key: &[u8], id: MessageId, left_ms: u64) {
        out.u8(LOG_DEDUP);
        // A key is at most 128 bytes.
        out.u32((1 + 4 + key.len() + 16 + 8) as u32);
        out.u8(key.len() as u8);
        out.u32(inc);
        out.put(key);
        out.u128(id.0);
        out.u64(left_ms);
    }

    /// A send's records, when the log is on: the message's put, and the
    /// dedup key it recorded (`dedup`), whose window starts now.
    #[cold]
    #[inline(never)]
    pub(in crate::engine::shard) fn logged_send(&mut self, key: SlotKey, dedup: Option<&[u8]>) {
        let Some(mut w) = self.wal.take() else {
            return;
        };
        self.log_put(&mut w, key, LogPut::Sent);
        if let (Some(k), Some(m)) = (dedup, self.messages.get(key)) {
            let part = self.part(m.partition());
            let window = u64::from(part.attrs.dedup_window.get());
            Self::log_dedup(
                &mut w,
                part.incarnation,
                k,
                self.message_id(m.seq.get()),
                window,
            );
        }
        self.wal = Some(w);
    }

    /// [`Shard::log_gone`] into the shard's own records, when the log is
    /// on.
    #[cold]
    #[inline(never)]
    pub(in crate::engine::shard) fn logged_gone(&mut self, key: SlotKey, why: LogGone) {
        if let Some(w) = self.wal.as_mut() {
            Self::log_gone(w, key, why);
        }
    }

    /// Replays the records of `r`, to its end, onto this shard, which was
    /// loaded from the checkpoint the records follow (or is fresh, built
    /// on the registry they belong to). `clock.saved_wall_ms` is when the
    /// records were written (their frame's commit).
    ///
    /// # Errors
    /// The first record that cannot be applied, with its byte offset: a
    /// field out of range, a put of a slot with another message in it, a
    /// record cut short. The shard
    /// is then half replayed and must be dropped.
    pub fn replay_log<R: SectionRead>(
        &mut self,
        r: &mut R,
        clock: LoadClock,
    ) -> Result<ShardLoad, R::Error> {
        self.replay_commits(&mut [(r, clock)])
    }

    /// [`Shard::replay_log`] of several commits in order, each read from
    /// its reader and written at its clock's `saved_wall_ms`: one replay,
    /// so that a slot one commit frees is not put again at the generation
    /// it had in a later one.
    ///
    /// # Errors
    /// As [`Shard::replay_log`].
    pub fn replay_commits<R: SectionRead>(
        &mut self,
        commits: &mut [(&mut R, LoadClock)],
    ) -> Result<ShardLoad, R::Error> {
        let Some(&(_, first)) = commits.first() else {
            return Ok(ShardLoad::default());
        };
        self.begin(first.now_ns, first.wall_ms);
        let mut load = ShardLoad::default();
        // No slot past those a put of each record could add (a record is
        // at least a message record's 43 bytes), nor past what the memory
        // budget could hold.
        let budget = self.registry.memory().limit() / Slab::<StoredMessage>::slot_bytes() as u64;
        let remaining: u64 = commits.iter().map(|(r, _)| r.remaining()).sum();
        let slots = (self.messages.slots() as u64 + remaining / 43 + 1).min(budget);
        let mut replay = Replay {
            slots: u32::try_from(slots).unwrap_or(u32::MAX),
            hole_generation: self.messages.generation_max().wrapping_add(1),
            clock: first,
            freed: HashMap::new(),
        };
        let mut result = Ok(());
        for (r, clock) in commits.iter_mut() {
            replay.clock = *clock;
            result = self.replay_inner(*r, &mut replay, &mut load);
            if result.is_err() {
                break;
            }
        }
        self.messages.rebuild_free();
        self.end();
        result.map(|()| load)
    }

    fn replay_inner<R: SectionRead>(
        &mut self,
        r: &mut R,
        replay: &mut Replay,
        load: &mut ShardLoad,
    ) -> Result<(), R::Error> {
        let clock = replay.clock;
        while r.remaining() > 0 {
            let at = r.offset();
            match r.u8("record kind")? {
                LOG_PUT => self.replay_put(r, at, replay, load)?,
                LOG_GONE => self.replay_gone(r, replay)?,
                LOG_DEDUP => self.replay_dedup(r, at, clock, load)?,
                LOG_LEASE => self.replay_lease(r)?,
                kind => {
                    return Err(invalid(
                        at,
                        "record kind",
                        format!("{kind} is not a record"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn replay_put<R: SectionRead>(
        &mut self,
        r: &mut R,
        at: u64,
        replay: &Replay,
        load: &mut ShardLoad,
    ) -> Result<(), R::Error> {
        let Replay {
            slots,
            hole_generation,
            clock,
            ref freed,
        } = *replay;
        let len = record_length(r, at)?;
        let why_at = r.offset();
        let why = match r.u8("why")? {
            0 => LogPut::Sent,
            1 => LogPut::MovedIn,
            n => return Err(invalid(why_at, "why", format!("{n} is not a reason"))),
        };
        let inc = r.u32("incarnation")?;
        let base = r.offset();
        // Below u32::MAX, so a usize.
        let record = r.bytes((len - 5) as usize, "message record")?;
        let Some(&p) = self.by_incarnation.get(&inc) else {
            // Its queue is gone since: nothing of it to restore.
            return Ok(());
        };
        let Some(seq) = record
            .get(SEQ_AT..SEQ_AT + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        else {
            return Err(invalid(base, "message record", "cut short"));
        };
        // The loader takes sequence numbers below the next one: a record
        // written later than the checkpoint moves it on.
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
        let key = SlotKey {
            slot: u32::from_le_bytes(record[..4].try_into().unwrap_or_default()),
            generation: u32::from_le_bytes(record[4..8].try_into().unwrap_or_default()),
        };
        // A first put finds its slot free, at a generation past any the
        // replay removed from it.
        if self.messages.get(key).is_some() {
            return Err(invalid(base, "slot", "a put of a message already put"));
        }
        if freed.get(&key.slot).is_some_and(|&g| key.generation <= g) {
            return Err(invalid(
                base,
                "generation",
                format!(
                    "{} at slot {}, not past the generation the replay removed",
                    key.generation, key.slot
                ),
            ));
        }
        let mut inner = SliceRead::new(record, base);
        self.load_message(&mut inner, p, slots, hole_generation, clock, load)
            .and_then(|()| inner.finish())?;
        let stats = &mut self.part_mut(p).stats;
        match why {
            LogPut::Sent => stats.sent += 1,
            LogPut::MovedIn => stats.moved_in += 1,
        }
        Ok(())
    }

    fn replay_dedup<R: SectionRead>(
        &mut self,
        r: &mut R,
        at: u64,
        clock: LoadClock,
        load: &mut ShardLoad,
    ) -> Result<(), R::Error> {
        let len = record_length(r, at)?;
        let base = r.offset();
        // Below u32::MAX, so a usize.
        let entry = r.bytes(len as usize, "dedup entry")?;
        let inc = u32::from_le_bytes([entry[1], entry[2], entry[3], entry[4]]);
        if !self.by_incarnation.contains_key(&inc) {
            // Its queue is gone since.
            return Ok(());
        }
        let mut inner = SliceRead::new(entry, base);
        self.load_dedup(&mut inner, clock, load)
            .and_then(|()| inner.finish())?;
        Ok(())
    }

    /// A lease record: the message's counters as its receive left them,
    /// in place (it stays as it was put: visible).
    fn replay_lease<R: SectionRead>(&mut self, r: &mut R) -> Result<(), R::Error> {
        let key = SlotKey {
            slot: r.u32("slot")?,
            generation: r.u32("generation")?,
        };
        let delivery = r.u64("delivery")?;
        let receive_count = r.u32("receive count")?;
        let first_received_delta_ms = r.u32("first received")?;
        let Some(m) = self.messages.get(key).copied() else {
            // Its queue is gone since.
            return Ok(());
        };
        let e = self.ensure_ext(key);
        let e = self.exts.get_mut(e);
        e.delivery = e.delivery.max(delivery);
        e.receive_count = receive_count;
        e.first_received_delta_ms = first_received_delta_ms;
        // Received before, visible again: it is taken from the ready FIFO,
        // as a message whose lease ended is (and as the loader puts one).
        if m.state == MessageState::Visible && m.ext == NONE {
            self.push_ready(m.partition(), key);
        }
        Ok(())
    }

    fn replay_gone<R: SectionRead>(
        &mut self,
        r: &mut R,
        replay: &mut Replay,
    ) -> Result<(), R::Error> {
        let key = SlotKey {
            slot: r.u32("slot")?,
            generation: r.u32("generation")?,
        };
        let why_at = r.offset();
        let why = r.u8("why")?;
        if why > 4 {
            return Err(invalid(why_at, "why", format!("{why} is not a reason")));
        }
        let Some(m) = self.messages.get(key).copied() else {
            // Its queue is gone since (its put skipped, or its partition
            // dropped as the replay caught up with the registry).
            return Ok(());
        };
        let p = m.partition();
        replay.freed.insert(key.slot, key.generation);
        match why {
            0 => self.remove_message(key, Removal::Deleted),
            1 => self.remove_message(key, Removal::Dropped),
            2 => self.remove_message(key, Removal::Purged),
            3 | 4 => {
                // Counted as the move counts it; its put in the queue it
                // moved to follows.
                self.remove_message(key, Removal::QueueGone);
                let stats = &mut self.part_mut(p).stats;
                if why == 3 {
                    stats.dead_lettered += 1;
                } else {
                    stats.redriven += 1;
                }
                self.maybe_compact(p);
            }
            n => return Err(invalid(why_at, "why", format!("{n} is not a reason"))),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
