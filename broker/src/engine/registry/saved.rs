//! The registry as a snapshot records it, and back.

use std::collections::BTreeMap;

use sluice_protocol::{AttributeUpdate, QueueAttributes};

use super::{QueueEntry, QueueShared, Registry, RegistryConfig, RestoredRegistry};
use crate::engine::receipt_mac::ReceiptKey;
use crate::sync::{Arc, Ordering};

impl Registry {
    /// A registry as a snapshot left it: its receipt key and id prefix
    /// (receipts and ids from before the restart stay valid), the next
    /// incarnation, and every queue with its incarnation and attributes.
    ///
    /// # Errors
    /// What is wrong with the queues: a duplicate name or incarnation, an
    /// incarnation not below `next_incarnation`, attributes out of range,
    /// more than `queues_max`, or a dead-letter queue that does not
    /// qualify.
    pub fn restored(config: RegistryConfig, state: RestoredRegistry) -> Result<Registry, String> {
        let registry = Registry::new(config);
        let mut r = registry;
        r.key = ReceiptKey::new(state.key.0, state.key.1);
        r.run_prefix = state.run_prefix;
        if state.queues.len() > r.config.queues_max {
            return Err(format!(
                "{} queues, more than --queues-max {}",
                state.queues.len(),
                r.config.queues_max
            ));
        }
        let mut queues = BTreeMap::new();
        let mut incarnations = std::collections::HashSet::new();
        for (name, attrs, incarnation, times) in state.queues {
            if incarnation == 0 || incarnation >= state.next_incarnation {
                return Err(format!(
                    "queue {name} has incarnation {incarnation}, not in 1..{}",
                    state.next_incarnation
                ));
            }
            if !incarnations.insert(incarnation) {
                return Err(format!("incarnation {incarnation} appears twice"));
            }
            // The attributes must be within today's bounds.
            let checked = AttributeUpdate::from(&attrs)
                .apply_to(&QueueAttributes::default(), r.config.frame_bytes_max)
                .map_err(|e| format!("queue {name}: {e}"))?;
            let shared = Arc::new(QueueShared::new(name.clone(), incarnation, r.config.shards));
            let entry = QueueEntry {
                attributes: checked,
                times,
                shared,
            };
            if queues.insert(name.clone(), entry).is_some() {
                return Err(format!("queue {name} appears twice"));
            }
        }
        for (name, q) in &queues {
            Self::check_dead_letter(&queues, name, &q.attributes).map_err(|e| e.to_string())?;
        }
        {
            let mut inner = r.lock();
            for q in queues.values() {
                inner.count_dead_letter(&q.attributes, 1);
            }
            inner.queues = queues;
            inner.next_incarnation = state.next_incarnation;
            // Every queue changed: a shard that saw the empty registry
            // copies them all.
            let epoch = r.epoch.fetch_add(1, Ordering::Release) as u64 + 1;
            inner.changes.clear();
            inner.changes_from = epoch;
        }
        Ok(r)
    }

    /// What a snapshot records of the registry: keys, next incarnation and
    /// queues (name, attributes, incarnation, times), in name order.
    #[must_use]
    pub fn saved_state(&self) -> RestoredRegistry {
        let inner = self.lock();
        RestoredRegistry {
            key: self.key.halves(),
            run_prefix: self.run_prefix,
            next_incarnation: inner.next_incarnation,
            queues: inner
                .queues
                .iter()
                .map(|(n, q)| {
                    let attributes = q.attributes.clone();
                    (n.clone(), attributes, q.shared.incarnation, q.times)
                })
                .collect(),
        }
    }
}
