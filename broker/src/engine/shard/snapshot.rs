//! A shard's part of a snapshot: writing its section (its messages, in
//! each partition's age order then its `moved` index, and its dedup
//! entries) and loading one back into a fresh shard. The layout is
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

use sluice_protocol::limits::{DEDUP_KEY_BYTES_MAX, FRAME_BYTES_MAX_LIMIT};
use sluice_protocol::{AttributesRef, MessageId, QueueStats};

use super::{EXT_BYTES, LEASE_BYTES, MESSAGE_BYTES, NS_PER_MS, Shard, TimerEvent};
use crate::engine::limits::{CHUNKED_BYTES_MAX, DEDUP_ENTRY_BYTES};
use crate::engine::section::{Out, SectionError, SectionRead};
use crate::engine::slab::{Slab, SlotKey};
use crate::engine::stored_message::{self, MessageState, NONE, NewMessage, StoredMessage, U48};

const STATE_MASK: u8 = 0b11;
const FLAG_IN_AGE_FIFO: u8 = 1 << 2;
const FLAG_EXT: u8 = 1 << 3;
const FLAG_LEASE: u8 = 1 << 4;
const FLAGS_KNOWN: u8 = STATE_MASK | FLAG_IN_AGE_FIFO | FLAG_EXT | FLAG_LEASE;

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

impl Default for Record {
    fn default() -> Self {
        Record {
            buf: [0; RECORD_BYTES_MAX],
            len: 0,
        }
    }
}

impl Record {
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
        let data_len = self.data_len(m);
        if out.counting() {
            let fixed = RECORD_BASE_BYTES
                + RECORD_EXT_BYTES * usize::from(ext.is_some())
                + RECORD_LEASE_BYTES * usize::from(lease.is_some());
            out.skip((fixed + data_len) as u64);
            return;
        }
        // The record's fixed part gathered on the stack, handed over in one
        // piece.
        let mut rec = Record::default();
        rec.put(&key.slot.to_le_bytes());
        rec.put(&key.generation.to_le_bytes());
        rec.put(&m.seq.get().to_le_bytes());
        rec.put(&m.sent_at_ms.get().to_le_bytes());
        rec.put(&now_ms.saturating_sub(m.sent_ms.get()).to_le_bytes());
        rec.put(&m.retention_ms.to_le_bytes());
        rec.put(&[flags]);
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
    }

    /// Loads this shard's section into this shard, which must be fresh
    /// (built on a registry restored from the same snapshot, nothing sent
    /// yet). Reads to the end of the section and checks its checksum; on
    /// an error the shard is left half loaded and must be dropped.
    ///
    /// # Errors
    /// The first problem, with its byte offset; a checksum that does not
    /// match wins over a parse error it explains.
    pub fn load_snapshot<R: SectionRead>(
        &mut self,
        r: &mut R,
        clock: LoadClock,
    ) -> Result<ShardLoad, R::Error> {
        self.begin(clock.now_ns, clock.wall_ms);
        let result = self.load_inner(r, clock);
        let result = match result {
            Ok(load) => r.finish().map(|()| load),
            Err(e) => Err(r.verify().err().unwrap_or(e)),
        };
        self.messages.rebuild_free();
        self.end();
        result
    }

    fn load_inner<R: SectionRead>(
        &mut self,
        r: &mut R,
        clock: LoadClock,
    ) -> Result<ShardLoad, R::Error> {
        let mut load = ShardLoad::default();
        let at = r.offset();
        let next_seq = r.u64("next sequence number")?;
        if next_seq > U48::MAX {
            return Err(invalid(
                at,
                "next sequence number",
                format!("{next_seq} is above 2^48 - 1"),
            ));
        }
        self.next_seq = next_seq;
        let at = r.offset();
        let slots = r.u32("slots")?;
        let slab_bytes = u64::from(slots) * Slab::<StoredMessage>::slot_bytes() as u64;
        let budget = self.registry.memory().limit();
        if slab_bytes > budget {
            return Err(SectionError::TooLarge {
                offset: at,
                needs: slab_bytes,
                max: budget,
            }
            .into());
        }
        let hole_generation = r.u32("hole generation")?;
        let at = r.offset();
        let partitions = r.u32("partitions")?;
        if partitions as usize > self.by_incarnation.len() {
            return Err(invalid(
                at,
                "partitions",
                format!(
                    "{partitions}, but the registry section has {} queues",
                    self.by_incarnation.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for _ in 0..partitions {
            let at = r.offset();
            let inc = r.u32("incarnation")?;
            let Some(&p) = self.by_incarnation.get(&inc) else {
                return Err(invalid(
                    at,
                    "incarnation",
                    format!("queue incarnation {inc} is not in the registry section"),
                ));
            };
            if !seen.insert(inc) {
                return Err(invalid(
                    at,
                    "incarnation",
                    format!("queue incarnation {inc} appears twice"),
                ));
            }
            let mut stats = self.part(p).stats;
            for field in COUNTERS {
                *field(&mut stats) = r.u64("counter")?;
            }
            self.part_mut(p).stats = stats;
            let at = r.offset();
            let count = r.u64("message count")?;
            // Each record takes at least 43 bytes: a count beyond what the
            // section holds is a lie, caught before the loop.
            if count > r.remaining() / 43 {
                return Err(invalid(
                    at,
                    "message count",
                    format!(
                        "{count} records cannot fit in the {} bytes left",
                        r.remaining()
                    ),
                ));
            }
            for _ in 0..count {
                self.load_message(r, p, slots, hole_generation, clock, &mut load)?;
            }
        }
        let at = r.offset();
        let dedup = r.u64("dedup entries")?;
        if dedup > r.remaining() / 29 {
            return Err(invalid(
                at,
                "dedup entries",
                format!(
                    "{dedup} entries cannot fit in the {} bytes left",
                    r.remaining()
                ),
            ));
        }
        for _ in 0..dedup {
            self.load_dedup(r, clock, &mut load)?;
        }
        Ok(load)
    }

    fn load_message<R: SectionRead>(
        &mut self,
        r: &mut R,
        p: u32,
        slots: u32,
        hole_generation: u32,
        clock: LoadClock,
        load: &mut ShardLoad,
    ) -> Result<(), R::Error> {
        let start = r.offset();
        let slot = r.u32("slot")?;
        let generation = r.u32("generation")?;
        if slot >= slots {
            return Err(invalid(
                start,
                "slot",
                format!("{slot}, but the shard has {slots} slots"),
            ));
        }
        let at = r.offset();
        let seq = r.u64("sequence number")?;
        if seq >= self.next_seq {
            return Err(invalid(
                at,
                "sequence number",
                format!("{seq}, not below the next one, {}", self.next_seq),
            ));
        }
        let sent_at_ms = r.u64("sent at")?.min(U48::MAX);
        let age_ms = r.u64("age")?;
        let retention_ms = r.u32("retention")?;
        let at = r.offset();
        let flags = r.u8("flags")?;
        let state = match flags & STATE_MASK {
            0 => MessageState::Visible,
            1 => MessageState::Delayed,
            2 => MessageState::InFlight,
            _ => {
                return Err(invalid(at, "flags", "state 3 is not a state"));
            }
        };
        let in_age = flags & FLAG_IN_AGE_FIFO != 0;
        let has_ext = flags & FLAG_EXT != 0;
        let has_lease = flags & FLAG_LEASE != 0;
        // A lease needs a side entry, so does a message outside the age FIFO;
        // a visible message has no lease, a delayed or leased one has.
        let consistent = flags & !FLAGS_KNOWN == 0
            && has_lease == (state != MessageState::Visible)
            && (has_ext || (in_age && !has_lease));
        if !consistent {
            return Err(invalid(
                at,
                "flags",
                format!("{flags:#04x} is not a combination a message can have"),
            ));
        }
        let ext = if has_ext {
            Some((
                r.u64("delivery")?,
                r.u32("receive count")?,
                r.u32("first received")?,
                r.u32("dead-letter source")?,
            ))
        } else {
            None
        };
        let lease = if has_lease {
            Some((
                r.u64("lease end")?,
                r.u64("lease start")?,
                r.u32("receipt check")?,
            ))
        } else {
            None
        };
        let at = r.offset();
        let attrs_len = usize::from(r.u16("attributes length")?);
        let data_len = r.u32("data length")? as usize;
        if data_len > FRAME_BYTES_MAX_LIMIT as usize || attrs_len > data_len {
            return Err(invalid(
                at,
                "data length",
                format!("{data_len} bytes with {attrs_len} of attributes"),
            ));
        }
        let data_at = r.offset();
        let data = r.bytes(data_len, "message data")?;
        let (body, attrs) = data.split_at(data_len - attrs_len);
        if !attrs.is_empty() {
            let count = stored_message::attribute_count(attrs);
            if AttributesRef::from_wire(count, attrs).is_err() || attrs_len > (1 << 13) - 1 {
                return Err(invalid(
                    data_at + body.len() as u64,
                    "attributes",
                    "not a valid attribute block",
                ));
            }
        }
        // What the message holds of the budget, side entries included.
        let side = match (has_ext, has_lease) {
            (false, _) => 0,
            (true, false) => EXT_BYTES,
            (true, true) => EXT_BYTES + LEASE_BYTES,
        };
        let cost = data_len as u64 + MESSAGE_BYTES;
        let budget = self.registry.memory();
        if !self.memory.reserve(budget, cost + side) {
            return Err(SectionError::TooLarge {
                offset: start,
                needs: self.memory.in_use() + cost + side,
                max: budget.limit(),
            }
            .into());
        }
        self.memory.release(self.registry.memory(), side);
        let (chunk, offset) = self.bodies.store(body, attrs);
        let elapsed = clock.elapsed_ms();
        let now_ms = clock.now_ns / NS_PER_MS;
        let sent_ms = now_ms.saturating_sub(age_ms.saturating_add(elapsed));
        let retain_until_ns = sent_ms
            .saturating_add(u64::from(retention_ms))
            .saturating_mul(NS_PER_MS);
        let part = self.part(p);
        // A message the file puts in the age FIFO out of retention order
        // (a clock that jumped, a file written by hand) keeps its own
        // retention timer instead, as a send out of order does.
        let in_age = in_age && (part.age.is_empty() || retain_until_ns >= part.age_tail_until_ns);
        let key = SlotKey { slot, generation };
        let record = StoredMessage::new(NewMessage {
            chunk,
            offset,
            data_len,
            solo: data_len > CHUNKED_BYTES_MAX,
            attrs_len,
            seq,
            sent_at_ms,
            sent_ms,
            retention_ms,
            partition: p,
            state,
            in_age_fifo: in_age,
        });
        if self
            .messages
            .insert_at(key, record, hole_generation)
            .is_none()
        {
            self.bodies.release(chunk, data_len);
            self.memory.release(self.registry.memory(), cost);
            return Err(invalid(
                start,
                "slot",
                format!("slot {slot} holds two messages"),
            ));
        }
        load.data_bytes += data_len as u64;
        if let Some((delivery, receive_count, first_received_delta_ms, source)) = ext {
            let e = self.ensure_ext(key);
            let e = self.exts.get_mut(e);
            e.delivery = delivery;
            e.receive_count = receive_count;
            e.first_received_delta_ms = first_received_delta_ms;
            e.source = source;
        } else if !in_age {
            self.ensure_ext(key);
        }
        if let Some((due_in_ms, leased_ago_ms, check)) = lease {
            let ended = due_in_ms <= elapsed;
            let due_ns = if ended {
                clock
                    .now_ns
                    .saturating_sub((elapsed - due_in_ms).saturating_mul(NS_PER_MS))
            } else {
                clock
                    .now_ns
                    .saturating_add((due_in_ms - elapsed).saturating_mul(NS_PER_MS))
            };
            let leased_ns = clock.now_ns.saturating_sub(
                leased_ago_ms
                    .saturating_add(elapsed)
                    .saturating_mul(NS_PER_MS),
            );
            self.restored_lease(key, due_ns, leased_ns, check);
            match (state, ended) {
                (MessageState::InFlight, true) => load.leases_ended += 1,
                (MessageState::InFlight, false) => load.in_flight += 1,
                (_, true) => load.delays_ended += 1,
                (_, false) => load.delayed += 1,
            }
        } else {
            load.visible += 1;
        }
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        *Self::gauge_mut(&mut part.stats, state) += 1;
        part.shared.add_depth();
        if in_age {
            part.age.push_back(key, &mut self.age_spare);
            part.age_tail_until_ns = retain_until_ns;
            if part.retention_timer.is_none() {
                let t = self.wheel.insert(retain_until_ns, TimerEvent::Retention(p));
                self.part_mut(p).retention_timer = Some(t);
            }
        } else {
            part.moved.insert((sent_ms * NS_PER_MS, slot));
            if let Some(m) = self.messages.get_mut(key) {
                m.set_in_age_fifo(false);
            }
        }
        if state == MessageState::Visible {
            if self.messages.get(key).is_some_and(|m| m.ext != NONE) {
                self.push_ready(p, key);
            } else {
                self.mark_touched(p, true);
            }
        }
        self.arm_timer(key);
        Ok(())
    }

    /// Restores a lease (or delay) ending at `due_ns`. Leases come back
    /// unbound: any receipt of the delivery may delete or extend it, and it
    /// ends at `due_ns` whoever held it. (Bound leases never reach a
    /// snapshot: the sessions that hold the bindings release them when the
    /// shutdown drain closes their connections, before the save.) Were a
    /// binding ever kept in the engine, this is where a restored lease
    /// would be released instead (its connection is gone): set `due_ns` to
    /// now and the first tick makes it visible again.
    fn restored_lease(&mut self, key: SlotKey, due_ns: u64, leased_ns: u64, check: u32) {
        let l = self.ensure_lease(key);
        if l == NONE {
            return;
        }
        let lease = self.leases.get_mut(l);
        lease.due_ns = due_ns;
        lease.leased_ns = leased_ns;
        lease.check = check;
    }

    fn load_dedup<R: SectionRead>(
        &mut self,
        r: &mut R,
        clock: LoadClock,
        load: &mut ShardLoad,
    ) -> Result<(), R::Error> {
        let at = r.offset();
        let len = usize::from(r.u8("dedup key length")?);
        if len == 0 || len > DEDUP_KEY_BYTES_MAX {
            return Err(invalid(
                at,
                "dedup key length",
                format!("{len}, not in 1..={DEDUP_KEY_BYTES_MAX}"),
            ));
        }
        let inc_at = r.offset();
        let inc = r.u32("dedup incarnation")?;
        let key = r.bytes(len, "dedup key")?.to_vec();
        let id = MessageId(r.u128("dedup message id")?);
        let left_ms = r.u64("dedup window left")?;
        let Some(&p) = self.by_incarnation.get(&inc) else {
            return Err(invalid(
                inc_at,
                "dedup incarnation",
                format!("queue incarnation {inc} is not in the registry section"),
            ));
        };
        let owner = crate::engine::dedup::owner_shard(inc, &key, self.shards);
        if owner != self.id {
            return Err(invalid(
                at,
                "dedup key",
                format!("belongs to shard {owner}, found in shard {}", self.id),
            ));
        }
        if self.dedup.lookup(inc, &key).is_some() {
            return Err(invalid(at, "dedup key", "appears twice"));
        }
        let _ = p;
        let left_ms = left_ms.saturating_sub(clock.elapsed_ms());
        if left_ms == 0 {
            return Ok(());
        }
        let cost = len as u64 + DEDUP_ENTRY_BYTES;
        let budget = self.registry.memory();
        if !self.memory.reserve(budget, cost) {
            return Err(SectionError::TooLarge {
                offset: at,
                needs: self.memory.in_use() + cost,
                max: budget.limit(),
            }
            .into());
        }
        let until = clock
            .now_ns
            .saturating_add(left_ms.saturating_mul(NS_PER_MS));
        if let Some(slot) = self.dedup.insert(inc, &key, id, cost, until) {
            let t = self.wheel.insert(until, TimerEvent::Dedup(slot));
            self.dedup.set_timer(slot, t);
            load.dedup += 1;
        } else {
            self.memory.release(self.registry.memory(), cost);
        }
        Ok(())
    }
}
