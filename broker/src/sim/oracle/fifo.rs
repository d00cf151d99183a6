//! FIFO order, as a client could check it at a settled checkpoint.
//!
//! With [`SimConfig::fifo`](crate::sim::SimConfig::fifo), work is a FIFO
//! queue. Its sends all go to its home shard, so its messages' ids rise with
//! their sends, and a message moved back into it (a redrive) was delivered
//! before. So a message of work that was never delivered and is still
//! there waited ahead of every later message of its group all along: no
//! later message of its group may have been delivered from work. Which
//! message a receive takes first among groups, and the lock, leave no trace
//! a client sees at every step; the engine's own invariants (its groups
//! against their members) are checked after every few steps.

use std::collections::HashMap;

use sluice_protocol::MessageId;

use super::Oracle;
use crate::engine::MessageView;
use crate::sim::queues::WORK;

impl Oracle {
    /// No message of a group of work was delivered while an earlier one of
    /// its group, still in work now, was never delivered.
    pub(super) fn check_fifo_order(&self, views: &[MessageView]) -> Result<(), String> {
        // Per group, the first message that was never delivered.
        let mut waiting: HashMap<&str, MessageId> = HashMap::new();
        for v in views {
            if &*v.queue != WORK || v.delivery > 0 {
                continue;
            }
            if let Some(g) = v.group.as_deref() {
                let first = waiting.entry(g).or_insert(v.id);
                *first = (*first).min(v.id);
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        for (id, t) in &self.tracks {
            let Some(g) = t.work_group.as_deref() else {
                continue;
            };
            if let Some(first) = waiting.get(g) {
                if first < id {
                    return Err(format!(
                        "{id:?} of group {g} was delivered from {WORK} while {first:?}, \
                         sent before it in its group, was never delivered and is still there"
                    ));
                }
            }
        }
        Ok(())
    }
}
