//! A shard's part of a snapshot: writing its section (its messages, in
//! each partition's age order then its `moved` index, and its dedup
//! entries; a FIFO queue's message carries its group) and loading one back
//! into a fresh shard. The layout is
//! ARCHITECTURE.md's "Snapshot file format". The bytes go through the
//! engine's own traits (`engine/section.rs`): the file around them, its
//! checksums, threads and writes, is the snapshot module's.
//!
//! Times are saved relative to the moment of the save (ages, what is left
//! of a lease, a delay or a dedup window) and the wall-clock time between
//! the save and the load counts as time passed: a lease that ended while
//! the broker was stopped comes back with its end in the past, so the
//! first timer tick expires it exactly as it would have expired (counted as
//! redelivered, after the queue's backoff); likewise delays, retention and
//! dedup windows.
//!
//! Messages go back to the slot and generation they had, so receipts handed
//! out before the restart still name them. Leases that a later version may
//! bind to a connection are restored unbound: see
//! [`Shard::restored_lease`], the one place that decides.

use sluice_protocol::{MessageId, QueueStats};

use super::{NS_PER_MS, Shard};
use crate::engine::section::{Out, SectionError};
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{MessageState, StoredMessage};

mod load;
mod log;

pub use log::{
    LOG_DEDUP, LOG_GONE, LOG_LEASE, LOG_PUT, LogGone, LogPut, SyncHold, whole_records_within,
};

const STATE_MASK: u8 = 0b11;
const FLAG_IN_AGE_FIFO: u8 = 1 << 2;
const FLAG_EXT: u8 = 1 << 3;
const FLAG_LEASE: u8 = 1 << 4;
/// A FIFO queue's message: its group's name follows its data (format
/// version 3; earlier writers never set it).
const FLAG_GROUP: u8 = 1 << 5;
const FLAGS_KNOWN: u8 = STATE_MASK | FLAG_IN_AGE_FIFO | FLAG_EXT | FLAG_LEASE | FLAG_GROUP;

/// A message record's fixed part without a side entry or a lease: 37
/// bytes, and the two lengths (6).
const RECORD_BASE_BYTES: usize = 37 + 6;
/// What a side entry adds to a record.
const RECORD_EXT_BYTES: usize = 20;
/// What a lease adds to a record.
const RECORD_LEASE_BYTES: usize = 20;
/// The largest fixed part of a message record.
const RECORD_BYTES_MAX: usize = RECORD_BASE_BYTES + RECORD_EXT_BYTES + RECORD_LEASE_BYTES;

/// A message record's fixed part, gathered on the stack.
struct Record {
    buf: [u8; RECORD_BYTES_MAX],
    len: usize,
}

impl Record {
    /// The 37 bytes every record starts with, at their fixed offsets (no
    /// bounds to check field by field).
    #[inline]
    fn base(key: SlotKey, m: &StoredMessage, age_ms: u64, flags: u8) -> Record {
        let mut buf = [0; RECORD_BYTES_MAX];
        buf[0..4].copy_from_slice(&key.slot.to_le_bytes());
        buf[4..8].copy_from_slice(&key.generation.to_le_bytes());
        buf[8..16].copy_from_slice(&m.seq.get().to_le_bytes());
        buf[16..24].copy_from_slice(&m.sent_at_ms.get().to_le_bytes());
        buf[24..32].copy_from_slice(&age_ms.to_le_bytes());
        buf[32..36].copy_from_slice(&m.retention_ms.to_le_bytes());
        buf[36] = flags;
        Record { buf, len: 37 }
    }

    fn put(&mut self, b: &[u8]) {
        // The fields written never exceed RECORD_BYTES_MAX.
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The counters a snapshot saves per partition, in file order: the one list
/// both the writer and the reader follow.
const COUNTERS: [fn(&mut QueueStats) -> &mut u64; 10] = [
    |s| &mut s.sent,
    |s| &mut s.moved_in,
    |s| &mut s.received,
    |s| &mut s.deleted,
    |s| &mut s.redelivered,
    |s| &mut s.released,
    |s| &mut s.dead_lettered,
    |s| &mut s.redriven,
    |s| &mut s.dropped,
    |s| &mut s.purged,
];

/// The clocks when a snapshot is loaded, and when it was saved.
#[derive(Clone, Copy, Debug)]
pub struct LoadClock {
    /// Monotonic ns now.
    pub now_ns: u64,
    /// Wall-clock Unix ms now.
    pub wall_ms: u64,
    /// Wall-clock Unix ms of the save (from the header).
    pub saved_wall_ms: u64,
}

impl LoadClock {
    /// Ms that passed since the save (0 when the wall clock went back).
    #[must_use]
    pub fn elapsed_ms(&self) -> u64 {
        self.wall_ms.saturating_sub(self.saved_wall_ms)
    }
}

/// What one shard loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardLoad {
    /// Messages visible.
    pub visible: u64,
    /// Messages delayed (their delay or backoff still running).
    pub delayed: u64,
    /// Messages leased, their lease still running.
    pub in_flight: u64,
    /// Leases that ended while the broker was stopped: they expire at the
    /// first tick, as they would have (counted as redelivered).
    pub leases_ended: u64,
    /// Delays that ended while stopped: visible at the first tick.
    pub delays_ended: u64,
    /// Dedup entries whose window is still open.
    pub dedup: u64,
    /// Bytes of message data (bodies and attributes).
    pub data_bytes: u64,
}

impl ShardLoad {
    /// Adds another shard's figures.
    pub fn add(&mut self, o: &ShardLoad) {
        self.visible += o.visible;
        self.delayed += o.delayed;
        self.in_flight += o.in_flight;
        self.leases_ended += o.leases_ended;
        self.delays_ended += o.delays_ended;
        self.dedup += o.dedup;
        self.data_bytes += o.data_bytes;
    }

    /// Messages in all.
    #[must_use]
    pub fn messages(&self) -> u64 {
        self.visible + self.delayed + self.in_flight + self.leases_ended + self.delays_ended
    }
}

/// A [`SectionError::Invalid`], as the reader's error.
fn invalid<E: From<SectionError>>(
    offset: u64,
    field: &'static str,
    reason: impl Into<String>,
) -> E {
    SectionError::invalid(offset, field, reason).into()
}

fn state_code(s: MessageState) -> u8 {
    match s {
        MessageState::Visible => 0,
        MessageState::Delayed => 1,
        MessageState::InFlight => 2,
    }
}

impl Shard {
    /// Messages this shard holds.
    #[must_use]
    pub fn message_count(&self) -> u64 {
        self.messages.len() as u64
    }

    /// Bytes of this shard's section, from its counts alone (no walk over
    /// the messages): what [`Shard::write_snapshot`] writes at `now_ns`.
    /// The save checks the two agree, and sizes by the walk if they do not.
    #[must_use]
    pub fn snapshot_len(&self, now_ns: u64) -> u64 {
        let now_ns = now_ns.max(self.now_ns);
        let partitions = self.partitions.iter().filter(|p| p.is_some()).count() as u64;
        // A FIFO queue's message: its group's name and its length.
        let groups: u64 = (0..self.partitions.len() as u32)
            .filter_map(|p| Some((p, self.partitions[p as usize].as_ref()?.grouping.as_ref()?)))
            .flat_map(|(p, g)| {
                let members = self.members(p).into_iter();
                members
                    .filter_map(|key| self.grouped.members.get(key))
                    .map(|m| 1 + g.groups.name(m.group).map_or(0, str::len) as u64)
            })
            .sum();
        let dedup: u64 = self
            .dedup
            .entries()
            .filter(|e| e.3 > now_ns)
            .map(|(_, key, _, _)| 1 + 4 + key.len() as u64 + 16 + 8)
            .sum();
        8 + 4
            + 4
            + 4
            + partitions * (4 + 8 * COUNTERS.len() as u64 + 8)
            + self.messages.len() as u64 * RECORD_BASE_BYTES as u64
            + self.exts.len() as u64 * RECORD_EXT_BYTES as u64
            + self.leases.len() as u64 * RECORD_LEASE_BYTES as u64
            + self.bodies.live_total()
            + groups
            + 8
            + dedup
    }

    /// The messages of partition `p` in file order: its age FIFO's live
    /// entries, front to back, then its `moved` index.
    fn snapshot_keys(&self, p: u32, keys: &mut Vec<SlotKey>) {
        keys.clear();
        let part = self.part(p);
        for key in part.age.iter() {
            if self
                .messages
                .get(key)
                .is_some_and(|m| m.partition() == p && m.in_age_fifo())
            {
                keys.push(key);
            }
        }
        for &(_, slot) in &part.moved {
            if let Some((generation, m)) = self.messages.get_any(slot) {
                if m.partition() == p && !m.in_age_fifo() {
                    keys.push(SlotKey { slot, generation });
                }
            }
        }
    }

    /// Writes this shard's section into `out` (or, when `out` only
    /// counts, sizes it: the same walk). `now_ns` and `wall_ms` are the
    /// save's clocks; times are written relative to them. Call it on a
    /// shard at rest (after the shutdown drain).
    pub fn write_snapshot(&self, out: &mut impl Out, now_ns: u64) {
        let now_ns = now_ns.max(self.now_ns);
        let now_ms = now_ns / NS_PER_MS;
        out.u64(self.next_seq);
        // The slab holds fewer than 2^32 slots (slab.rs).
        out.u32(self.messages.slots() as u32);
        out.u32(self.messages.generation_max().wrapping_add(1));
        let live: Vec<u32> = (0..self.partitions.len() as u32)
            .filter(|&p| self.partitions[p as usize].is_some())
            .collect();
        out.u32(live.len() as u32);
        let mut keys = Vec::new();
        for p in live {
            self.snapshot_keys(p, &mut keys);
            let part = self.part(p);
            out.u32(part.incarnation);
            let mut stats = part.stats;
            for field in COUNTERS {
                out.u64(*field(&mut stats));
            }
            out.u64(keys.len() as u64);
            for &key in &keys {
                let Some(m) = self.messages.get(key).copied() else {
                    continue;
                };
                self.write_message(out, key, &m, now_ns, now_ms);
            }
        }
        let entries: Vec<(u32, Vec<u8>, MessageId, u64)> = self
            .dedup
            .entries()
            .filter(|e| e.3 > now_ns)
            .map(|(inc, key, id, until)| (inc, key.to_vec(), id, until))
            .collect();
        out.u64(entries.len() as u64);
        for (inc, key, id, until) in entries {
            // Dedup keys are at most DEDUP_KEY_BYTES_MAX (128) bytes.
            out.u8(key.len() as u8);
            out.u32(inc);
            out.put(&key);
            out.u128(id.0);
            out.u64((until - now_ns).div_ceil(NS_PER_MS));
        }
    }

    fn write_message(
        &self,
        out: &mut impl Out,
        key: SlotKey,
        m: &StoredMessage,
        now_ns: u64,
        now_ms: u64,
    ) {
        let ext = self.ext_of(m).copied();
        let lease = self.lease_of(m).copied();
        let mut flags = state_code(m.state);
        if m.in_age_fifo() {
            flags |= FLAG_IN_AGE_FIFO;
        }
        if ext.is_some() {
            flags |= FLAG_EXT;
        }
        if lease.is_some() {
            flags |= FLAG_LEASE;
        }
        let group = self.group_name(m.partition(), key);
        if group.is_some() {
            flags |= FLAG_GROUP;
        }
        let data_len = self.data_len(m);
        let group_bytes = group.as_ref().map_or(0, |g| 1 + g.len());
        if out.counting() {
            let fixed = RECORD_BASE_BYTES
                + RECORD_EXT_BYTES * usize::from(ext.is_some())
                + RECORD_LEASE_BYTES * usize::from(lease.is_some());
            out.skip((fixed + data_len + group_bytes) as u64);
            return;
        }
        // The record's fixed part gathered on the stack, handed over in one
        // piece.
        let mut rec = Record::base(key, m, now_ms.saturating_sub(m.sent_ms.get()), flags);
        if let Some(e) = ext {
            rec.put(&e.delivery.to_le_bytes());
            rec.put(&e.receive_count.to_le_bytes());
            rec.put(&e.first_received_delta_ms.to_le_bytes());
            rec.put(&e.source.to_le_bytes());
        }
        if let Some(l) = lease {
            let left = l.due_ns.saturating_sub(now_ns).div_ceil(NS_PER_MS);
            rec.put(&left.to_le_bytes());
            rec.put(&(now_ns.saturating_sub(l.leased_ns) / NS_PER_MS).to_le_bytes());
            rec.put(&l.check.to_le_bytes());
        }
        // 13 bits (stored_message.rs).
        rec.put(&(m.attrs_len() as u16).to_le_bytes());
        // A message is at most a frame (64 MiB).
        rec.put(&(data_len as u32).to_le_bytes());
        debug_assert_eq!(
            rec.len,
            RECORD_BASE_BYTES
                + RECORD_EXT_BYTES * usize::from(ext.is_some())
                + RECORD_LEASE_BYTES * usize::from(lease.is_some())
        );
        out.put(rec.bytes());
        out.put(self.bodies.borrow(m.chunk, u32::from(m.offset), data_len));
        if let Some(g) = group {
            // A group id is at most 128 bytes.
            out.u8(g.len() as u8);
            out.put(g.as_bytes());
        }
    }
}
