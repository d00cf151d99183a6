//! Catching up with the registry: a shard creates its partition of a new
//! queue and drops its partition of a deleted one (messages, dedup entries,
//! waiters and receives in progress included), for the queues changed since
//! its last look (or all of them, when it is far behind).

use std::collections::HashSet;

use sluice_protocol::QueueName;

use super::{PendingKind, Removal, Shard};
use crate::engine::RegistryChanges;
use crate::engine::partition::Partition;
use crate::engine::registry::QueueEntry;
use crate::engine::slab::SlotKey;

impl Shard {
    /// Catches up with the registry: the queues changed since this shard's
    /// epoch alone, or every queue when it is too far behind.
    pub(super) fn refresh(&mut self) {
        match self.registry.changes_since(self.epoch) {
            RegistryChanges::Delta(epoch, changed) => {
                self.epoch = epoch;
                for (name, entry) in changed {
                    self.apply_change(name, entry);
                }
            }
            RegistryChanges::Full(epoch, queues) => {
                self.epoch = epoch;
                self.refresh_all(queues);
            }
        }
    }

    /// One queue as the registry has it now (`None`: deleted).
    fn apply_change(&mut self, name: QueueName, entry: Option<QueueEntry>) {
        if let Some(&p) = self.names.get(&name) {
            let same = entry
                .as_ref()
                .is_some_and(|e| self.part(p).incarnation == e.shared.incarnation());
            if !same {
                // Deleted, or deleted and created again since.
                self.drop_partition(p);
            }
        }
        if let Some(entry) = entry {
            self.upsert_partition(name, entry);
        }
    }

    fn refresh_all(&mut self, queues: Vec<(QueueName, QueueEntry)>) {
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
            self.upsert_partition(name, entry);
        }
    }

    /// The partition of `entry`: its attributes updated, or made.
    fn upsert_partition(&mut self, name: QueueName, entry: QueueEntry) {
        let inc = entry.shared.incarnation();
        if let Some(&p) = self.by_incarnation.get(&inc) {
            if let Some(part) = self.partitions[p as usize].as_mut() {
                part.attrs = entry.attributes;
            }
            return;
        }
        let part = Box::new(Partition::new(name.clone(), entry.attributes, entry.shared));
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

    pub(super) fn drop_partition(&mut self, p: u32) {
        let members = self.members(p);
        for key in members {
            self.remove_message(key, Removal::QueueGone);
        }
        let (inc, waiters) = {
            let part = self.part_mut(p);
            (part.incarnation, core::mem::take(&mut part.waiters))
        };
        if let Some(t) = self.part_mut(p).retention_timer.take() {
            self.wheel.cancel(t);
        }
        let (timer, cost) = self.dedup.remove_queue(inc);
        if let Some(t) = timer {
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
        {
            let part = self.partitions[p as usize]
                .as_mut()
                .expect("live partition index");
            part.ready.clear(&mut self.ready_spare);
            part.age.clear(&mut self.age_spare);
        }
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
    pub(super) fn members(&self, p: u32) -> Vec<SlotKey> {
        let part = self.part(p);
        let mut out = Vec::with_capacity(usize::try_from(part.live()).unwrap_or(0));
        for key in part.age.iter() {
            if let Some(m) = self.messages.get(key) {
                if m.partition() == p && m.in_age_fifo() {
                    out.push(key);
                }
            }
        }
        for &(_, slot) in &part.moved {
            if let Some((generation, m)) = self.messages.get_any(slot) {
                if m.partition() == p && !m.in_age_fifo() {
                    out.push(SlotKey { slot, generation });
                }
            }
        }
        out
    }
}
