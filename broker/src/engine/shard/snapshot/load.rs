//! Loading a shard's section of a snapshot back into a fresh shard.

use sluice_protocol::group_id::GROUP_ID_BYTES_MAX;
use sluice_protocol::limits::{DEDUP_KEY_BYTES_MAX, FRAME_BYTES_MAX_LIMIT};
use sluice_protocol::{AttributesRef, MessageId};

use super::{
    COUNTERS, FLAG_EXT, FLAG_GROUP, FLAG_IN_AGE_FIFO, FLAG_LEASE, FLAGS_KNOWN, LoadClock,
    STATE_MASK, ShardLoad, invalid,
};
use crate::engine::dedup::Probe;
use crate::engine::limits::{CHUNKED_BYTES_MAX, DEDUP_ENTRY_BYTES};
use crate::engine::section::{SectionError, SectionRead};
use crate::engine::shard::{EXT_BYTES, LEASE_BYTES, MESSAGE_BYTES, NS_PER_MS, Shard, TimerEvent};
use crate::engine::slab::{Slab, SlotKey};
use crate::engine::stored_message::{self, MessageState, NONE, NewMessage, StoredMessage, U48};

/// A message record's fields before its data, as read and checked.
struct RecordHead {
    /// Where the record starts.
    start: u64,
    slot: u32,
    generation: u32,
    seq: u64,
    sent_at_ms: u64,
    age_ms: u64,
    retention_ms: u32,
    state: MessageState,
    in_age: bool,
    /// Delivery, receive count, first received, dead-letter source.
    ext: Option<(u64, u32, u32, u32)>,
    /// Lease end, lease start (both relative to the save), receipt check.
    lease: Option<(u64, u64, u32)>,
    /// Its group's name follows its data.
    grouped: bool,
}

impl Shard {
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

    pub(super) fn load_message<R: SectionRead>(
        &mut self,
        r: &mut R,
        p: u32,
        slots: u32,
        hole_generation: u32,
        clock: LoadClock,
        load: &mut ShardLoad,
    ) -> Result<(), R::Error> {
        let RecordHead {
            start,
            slot,
            generation,
            seq,
            sent_at_ms,
            age_ms,
            retention_ms,
            state,
            in_age,
            ext,
            lease,
            grouped,
        } = self.read_record_head(r, slots)?;
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
        // (A lease comes with a side entry: read_record_head checks.)
        let side = u64::from(ext.is_some()) * EXT_BYTES + u64::from(lease.is_some()) * LEASE_BYTES;
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
        let group = match grouped.then(|| read_group(r)).transpose() {
            Ok(g) => g,
            Err(e) => {
                self.bodies.release(chunk, data_len);
                self.memory.release(self.registry.memory(), cost);
                return Err(e);
            }
        };
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
        self.restore_side(key, state, in_age, ext, lease, clock, load);
        self.place_loaded(p, key, state, in_age, retain_until_ns, sent_ms);
        self.regroup_loaded(p, key, state, group.as_deref());
        self.arm_timer(key);
        Ok(())
    }

    /// Puts a message loaded into a grouped queue back in its group: on a
    /// FIFO queue, waiting when visible or delayed since its send, in
    /// flight (its group locked) when leased or waiting out the backoff
    /// after a lease; on a fair queue, as a send puts it (`enter_group`).
    fn regroup_loaded(&mut self, p: u32, key: SlotKey, state: MessageState, name: Option<&str>) {
        if name.is_some() && self.part(p).grouping.is_none() {
            // A fair queue's: its first message with a group makes it fair.
            self.make_fair(p, Some(key));
        }
        if self.part(p).grouping.is_none() {
            return;
        }
        let name = name.map_or(&b""[..], str::as_bytes);
        let delivered = self
            .messages
            .get(key)
            .and_then(|m| self.ext_of(m))
            .is_some_and(|e| e.delivery > 0);
        let fair = self.part(p).attrs.kind != sluice_protocol::QueueKind::Fifo;
        if fair || state == MessageState::Visible || !delivered {
            self.enter_group(p, key, name);
        } else {
            self.add_member(p, key, name, true);
        }
    }

    /// Reads a message record up to its data: where it goes, its sequence
    /// number and times, and its flags with the side entry and lease they
    /// announce.
    fn read_record_head<R: SectionRead>(
        &self,
        r: &mut R,
        slots: u32,
    ) -> Result<RecordHead, R::Error> {
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
        Ok(RecordHead {
            start,
            slot,
            generation,
            seq,
            sent_at_ms,
            age_ms,
            retention_ms,
            state,
            in_age,
            ext,
            lease,
            grouped: flags & FLAG_GROUP != 0,
        })
    }

    /// Restores a loaded message's side entry and lease (or delay), its
    /// times moved by the time the broker was stopped, and counts it.
    #[allow(clippy::too_many_arguments)]
    fn restore_side(
        &mut self,
        key: SlotKey,
        state: MessageState,
        in_age: bool,
        ext: Option<(u64, u32, u32, u32)>,
        lease: Option<(u64, u64, u32)>,
        clock: LoadClock,
        load: &mut ShardLoad,
    ) {
        let elapsed = clock.elapsed_ms();
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
    }

    /// Counts a loaded message in its partition and puts it in its
    /// indexes: the age FIFO (or the moved index), and the ready FIFO or
    /// the fresh messages when visible.
    fn place_loaded(
        &mut self,
        p: u32,
        key: SlotKey,
        state: MessageState,
        in_age: bool,
        retain_until_ns: u64,
        sent_ms: u64,
    ) {
        let slot = key.slot;
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

    pub(super) fn load_dedup<R: SectionRead>(
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
        // A FIFO queue's keys live on its home shard, with its messages.
        let owner = if self.part(p).attrs.kind == sluice_protocol::QueueKind::Fifo {
            self.fifo_home(inc)
        } else {
            crate::engine::dedup::owner_shard(inc, &key, self.shards)
        };
        if owner != self.id {
            return Err(invalid(
                at,
                "dedup key",
                format!("belongs to shard {owner}, found in shard {}", self.id),
            ));
        }
        let hash = match self.dedup.probe(inc, &key, clock.now_ns) {
            Probe::Found(_) => return Err(invalid(at, "dedup key", "appears twice")),
            Probe::Absent(hash) => hash,
        };
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
        if self.record_dedup(inc, &key, hash, id, cost, until) {
            load.dedup += 1;
        }
        Ok(())
    }
}

/// A FIFO queue's message's group name, after its data: length u8, then
/// 0 to 128 of `!` to `~` (empty for a message that came without one).
fn read_group<R: SectionRead>(r: &mut R) -> Result<Box<str>, R::Error> {
    let len = r.u8("group length")?;
    let at = r.offset();
    let name = r.bytes(len.into(), "group")?;
    if name.len() > GROUP_ID_BYTES_MAX || !name.iter().all(|b| (b'!'..=b'~').contains(b)) {
        return Err(invalid(
            at,
            "group",
            "not a message group id (at most 128 of '!' to '~')",
        ));
    }
    // Checked ASCII just above.
    Ok(core::str::from_utf8(name).unwrap_or_default().into())
}
