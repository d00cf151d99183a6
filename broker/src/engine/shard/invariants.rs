//! The shard's internal consistency, checked by tests after every step.

use std::collections::HashMap;

use super::{PendingKind, Shard};
use crate::engine::bodies::EMPTY;
use crate::engine::partition::Partition;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{MessageState, NONE, StoredMessage};
use crate::engine::wheel::TimerId;

impl Shard {
    /// Checks the shard's internal consistency: per partition, the
    /// accounting identity and that the gauges match the messages; every
    /// message has its timer when it needs one, its lease entry exactly when
    /// not visible, its ready-FIFO entry or its place after the fresh cursor
    /// when visible, and its membership entry; the side tables hold exactly
    /// the messages' entries; memory accounting matches. Tests call it
    /// after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut tally = Tally::default();
        for key in self.messages.keys() {
            self.check_message(key, &mut tally)?;
        }
        let group_timers = self.check_lease_groups(tally.grouped)?;
        if tally.exts != self.exts.len() || tally.leases != self.leases.len() {
            return Err(format!(
                "messages hold {} ext and {} lease entries, the tables {} and {}",
                tally.exts,
                tally.leases,
                self.exts.len(),
                self.leases.len()
            ));
        }
        self.check_chunks(tally.chunk_live)?;
        self.check_partitions(&tally.counts)?;
        self.check_memory_and_wheel(tally.mem, tally.timers, group_timers)
    }

    /// One message: its partition, lease, lease group, timer, FIFOs and
    /// index entries; adds it to the tally.
    fn check_message(&self, key: SlotKey, tally: &mut Tally) -> Result<(), String> {
        let m = self
            .messages
            .get(key)
            .ok_or_else(|| format!("slab key {key:?} does not resolve"))?;
        let part = self
            .partitions
            .get(m.partition() as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("message {key:?} in a dropped partition"))?;
        let c = tally.counts.entry(m.partition()).or_default();
        match m.state {
            MessageState::Visible => c[0] += 1,
            MessageState::Delayed => c[1] += 1,
            MessageState::InFlight => c[2] += 1,
        }
        let ext = self.ext_of(m);
        let lease = self.lease_of(m);
        tally.exts += usize::from(ext.is_some());
        tally.leases += usize::from(lease.is_some());
        if (m.state == MessageState::Visible) == lease.is_some() {
            return Err(format!(
                "message {key:?} of {} is {:?} with lease {lease:?}",
                part.name, m.state
            ));
        }
        let timer = ext.map_or(TimerId::NONE, |e| e.timer);
        let group = lease.map_or(NONE, |l| l.group);
        if group != NONE {
            self.check_grouped(key, m, part, group)?;
            *tally.grouped.entry(group).or_default() += 1;
        }
        let needs_timer = !(m.state == MessageState::Visible && m.in_age_fifo()) && group == NONE;
        if timer.is_none() == needs_timer {
            return Err(format!(
                "message {key:?} of {} ({:?}, in age FIFO: {}) has timer {timer:?}",
                part.name,
                m.state,
                m.in_age_fifo()
            ));
        }
        if !timer.is_none() {
            tally.timers += 1;
        }
        Self::check_fifos(key, m, part)?;
        tally.mem += self.message_cost(m);
        let len = self.data_len(m) as u64;
        if m.chunk != EMPTY {
            *tally.chunk_live.entry(m.chunk).or_default() += len;
        } else if len != 0 {
            return Err(format!("message {key:?} holds {len} bytes in no chunk"));
        }
        Ok(())
    }

    /// A message in lease group `group`: in flight, in its age FIFO, and
    /// listed by the group.
    fn check_grouped(
        &self,
        key: SlotKey,
        m: &StoredMessage,
        part: &Partition,
        group: u32,
    ) -> Result<(), String> {
        if m.state != MessageState::InFlight || !m.in_age_fifo() {
            return Err(format!(
                "message {key:?} of {} ({:?}, in age FIFO: {}) in lease group {group}",
                part.name,
                m.state,
                m.in_age_fifo()
            ));
        }
        let listed = self
            .groups
            .groups
            .get(group as usize)
            .is_some_and(|g| g.members.contains(&key));
        if !listed {
            return Err(format!(
                "message {key:?} not listed by its lease group {group}"
            ));
        }
        Ok(())
    }

    /// A message's place in its partition's age FIFO, ready FIFO and
    /// moved index.
    fn check_fifos(key: SlotKey, m: &StoredMessage, part: &Partition) -> Result<(), String> {
        if m.in_age_fifo() && part.retention_timer.is_none() {
            return Err(format!(
                "message {key:?} of {} in an age FIFO without a retention timer",
                part.name
            ));
        }
        if m.in_age_fifo() && m.retain_until_ns() > part.age_tail_until_ns {
            return Err(format!(
                "message {key:?} of {} retained past its FIFO's tail",
                part.name
            ));
        }
        let fresh = m.is_plain() && m.in_age_fifo() && !m.in_ready();
        if m.state == MessageState::Visible && !m.in_ready() && !fresh {
            return Err(format!(
                "visible message {key:?} of {} neither fresh nor in its ready FIFO",
                part.name
            ));
        }
        if fresh && !part.age.iter_from(part.fresh).any(|k| k == key) {
            return Err(format!(
                "fresh message {key:?} of {} behind its partition's fresh cursor",
                part.name
            ));
        }
        if m.in_ready() {
            let n = part.ready.iter().filter(|e| e.key == key).count();
            if n != 1 {
                return Err(format!("message {key:?} has {n} ready entries"));
            }
        }
        let indexed = if m.in_age_fifo() {
            part.age.iter().any(|k| k == key)
        } else {
            part.moved.contains(&(m.sent_ns(), key.slot))
        };
        if !indexed {
            return Err(format!(
                "message {key:?} of {} missing from its index",
                part.name
            ));
        }
        Ok(())
    }

    /// Every open lease group counts the leases in it and has its timer;
    /// no lease is in a closed group. Returns the groups' timers.
    fn check_lease_groups(&self, mut grouped: HashMap<u32, u32>) -> Result<usize, String> {
        let mut group_timers = 0;
        for (g, group) in self.groups.in_use() {
            if grouped.remove(&g) != Some(group.live) {
                return Err(format!(
                    "lease group {g} counts {} members in it",
                    group.live
                ));
            }
            if group.timer.is_none() {
                return Err(format!("lease group {g} has members and no timer"));
            }
            group_timers += 1;
        }
        if let Some((g, n)) = grouped.into_iter().next() {
            return Err(format!("{n} leases in lease group {g}, which is closed"));
        }
        Ok(group_timers)
    }

    /// Every chunk's live bytes are its messages' bytes.
    fn check_chunks(&self, mut chunk_live: HashMap<u32, u64>) -> Result<(), String> {
        for (chunk, live) in self.bodies.live_bytes() {
            let held = chunk_live.remove(&chunk).unwrap_or(0);
            if held != u64::from(live) {
                return Err(format!(
                    "chunk {chunk} counts {live} live bytes, its messages hold {held}"
                ));
            }
        }
        if let Some((chunk, held)) = chunk_live.into_iter().next() {
            return Err(format!("messages hold {held} bytes of free chunk {chunk}"));
        }
        Ok(())
    }

    /// Per partition: the accounting identity, the gauges against the
    /// messages' states, the moved index, and the parked waiters.
    fn check_partitions(&self, counts: &HashMap<u32, [u64; 3]>) -> Result<(), String> {
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
            self.check_grouping(i as u32, part)?;
            self.check_waiters(part)?;
        }
        // Each grouped partition's messages are members (`check_grouping`),
        // and the members are no more than them.
        let grouped: u64 = self
            .partitions
            .iter()
            .flatten()
            .filter(|part| part.grouping.is_some())
            .map(|part| part.live())
            .sum();
        if grouped != self.grouped.members.len() as u64 {
            return Err(format!(
                "shard {} holds {grouped} messages of grouped queues but {} group members",
                self.id,
                self.grouped.members.len()
            ));
        }
        Ok(())
    }

    /// A grouped partition: every message is a member of a group; a taken
    /// one is never visible (it is back in its group when it is), one not
    /// taken never in flight (a lease counts in its group) and waits in
    /// its group; the groups count their taken members.
    fn check_grouping(&self, p: u32, part: &Partition) -> Result<(), String> {
        let Some(grouping) = &part.grouping else {
            return Ok(());
        };
        let keys = self.members(p);
        let mut listed = Vec::with_capacity(keys.len());
        for key in keys {
            let member = self.grouped.members.get(key).ok_or_else(|| {
                format!(
                    "{key:?} of {} on shard {} is no group member",
                    part.name, self.id
                )
            })?;
            let m = self
                .messages
                .get(key)
                .filter(|m| m.partition() == p)
                .ok_or_else(|| format!("group member {key:?} of {} is gone", part.name))?;
            if member.taken && m.state == MessageState::Visible {
                return Err(format!(
                    "{key:?} of {} is visible but its group counts it in flight",
                    part.name
                ));
            }
            if !member.taken && m.state == MessageState::InFlight {
                return Err(format!(
                    "{key:?} of {} is in flight but its group does not count it",
                    part.name
                ));
            }
            if grouping.groups.name(member.group).is_none() {
                return Err(format!("{key:?} of {} names no group", part.name));
            }
            listed.push((member.group, m.seq.get(), key, member.taken));
        }
        grouping
            .groups
            .check(&listed)
            .map_err(|e| format!("groups of {} on shard {}: {e}", part.name, self.id))
    }

    /// A partition's waiters are parked receives of it, as many as its queue
    /// counts for this shard.
    fn check_waiters(&self, part: &Partition) -> Result<(), String> {
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
        Ok(())
    }

    /// Memory accounting against the messages' cost, and the wheel's timers
    /// against everything that holds one.
    fn check_memory_and_wheel(
        &self,
        mem: u64,
        timers: usize,
        group_timers: usize,
    ) -> Result<(), String> {
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
        let retention_timers = self
            .partitions
            .iter()
            .flatten()
            .filter(|p| p.retention_timer.is_some())
            .count();
        let expect = timers + group_timers + retention_timers + self.dedup.timers() + waiter_timers;
        if self.wheel.len() != expect {
            return Err(format!(
                "wheel holds {} timers, expected {expect} (messages, lease groups, partitions' retention, queues' dedup entries, waiters)",
                self.wheel.len()
            ));
        }
        Ok(())
    }
}

/// What the messages add up to, checked against the tables after the walk.
#[derive(Default)]
struct Tally {
    /// Per partition: visible, delayed and in-flight messages.
    counts: HashMap<u32, [u64; 3]>,
    mem: u64,
    timers: usize,
    chunk_live: HashMap<u32, u64>,
    exts: usize,
    leases: usize,
    /// Per lease group: the leases in it.
    grouped: HashMap<u32, u32>,
}
