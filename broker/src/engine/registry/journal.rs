//! The registry's changes as a write-ahead log records them.
//!
//! The engine knows no files: the server hands the registry a
//! [`RegistryJournal`] (`Registry::set_journal`), and each create, set and
//! delete hands it the queue as the change leaves it *before* the change
//! is made, under the registry's lock. So the journal sees the changes in
//! the order the registry makes them, a change it could not record is
//! refused (`EngineError::LogFailed`, nothing changed), and no shard sees
//! a queue (the epoch moves after the change) whose creation is not yet
//! recorded: a put that a shard's log holds always follows its queue's
//! record.

use std::fmt::Debug;

use sluice_protocol::{AttributeUpdate, QueueAttributes, QueueName, QueueTimes};

use super::{Inner, QueueEntry, QueueShared, Registry};
use crate::engine::error::EngineError;
use crate::sync::Arc;

/// One queue change as the log records it: the queue as it is after.
#[derive(Clone, Copy, Debug)]
pub enum QueueChange<'a> {
    /// Created or changed.
    Put {
        /// The queue's name.
        name: &'a QueueName,
        /// Its attributes after the change.
        attributes: &'a QueueAttributes,
        /// Its incarnation (a new one for a create).
        incarnation: u32,
        /// When it was created and last changed.
        times: QueueTimes,
    },
    /// Deleted.
    Deleted {
        /// The queue's name.
        name: &'a QueueName,
        /// The incarnation deleted.
        incarnation: u32,
    },
}

/// Where the registry's changes are recorded before they are made.
pub trait RegistryJournal: Send + Debug {
    /// Records `change` (durably, as the journal's mode asks). An error
    /// refuses the change: the registry stays as it was.
    ///
    /// # Errors
    /// Why the change could not be recorded (a full or failing disk).
    fn record(&mut self, change: QueueChange<'_>) -> Result<(), String>;
}

impl Registry {
    /// Records every later queue change in `journal` before it is made
    /// (replacing any journal set before).
    pub fn set_journal(&self, journal: Box<dyn RegistryJournal>) {
        self.lock().journal = Some(journal);
    }

    /// Whether a journal records the changes.
    #[must_use]
    pub fn has_journal(&self) -> bool {
        self.lock().journal.is_some()
    }
}

impl Registry {
    /// Makes a change the log recorded, at a start's replay (before any
    /// journal is set): a put replaces the attributes and times of the
    /// queue of that name and incarnation, or adds the queue with that
    /// incarnation; a delete removes it. The shards catch up as they do
    /// with any change.
    ///
    /// # Errors
    /// A change that cannot have been made: attributes out of range, a put
    /// of a name that holds another incarnation, a delete of a queue that
    /// is not there, more queues than the limit.
    pub fn apply_logged(&self, change: QueueChange<'_>) -> Result<(), String> {
        let mut inner = self.lock();
        match change {
            QueueChange::Put {
                name,
                attributes,
                incarnation,
                times,
            } => {
                let checked = AttributeUpdate::from(attributes)
                    .apply_to(&QueueAttributes::default(), self.config.frame_bytes_max)
                    .map_err(|e| format!("queue {name}: {e}"))?;
                let existing = inner.queues.get(name).map(|q| q.shared.incarnation);
                match existing {
                    Some(i) if i != incarnation => {
                        return Err(format!(
                            "queue {name} changed as incarnation {incarnation}, but it is {i}"
                        ));
                    }
                    Some(_) => {}
                    None if incarnation == 0 || inner.queues.len() >= self.config.queues_max => {
                        return Err(format!(
                            "queue {name} (incarnation {incarnation}) cannot be added: \
                             incarnation 0, or more than {} queues",
                            self.config.queues_max
                        ));
                    }
                    None => {
                        let shared = Arc::new(QueueShared::new(
                            name.clone(),
                            incarnation,
                            self.config.shards,
                        ));
                        inner.queues.insert(
                            name.clone(),
                            QueueEntry {
                                attributes: QueueAttributes::default(),
                                times,
                                shared,
                            },
                        );
                        inner.next_incarnation =
                            inner.next_incarnation.max(incarnation.saturating_add(1));
                    }
                }
                inner.count_dead_letter(&checked, 1);
                if let Some(q) = inner.queues.get_mut(name) {
                    q.times = times;
                    let old = core::mem::replace(&mut q.attributes, checked);
                    inner.count_dead_letter(&old, -1);
                }
            }
            QueueChange::Deleted { name, incarnation } => {
                match inner.queues.get(name).map(|q| q.shared.incarnation) {
                    Some(i) if i == incarnation => {}
                    _ => {
                        return Err(format!(
                            "a delete of queue {name} incarnation {incarnation}, which is not there"
                        ));
                    }
                }
                if let Some(q) = inner.queues.remove(name) {
                    inner.count_dead_letter(&q.attributes, -1);
                }
            }
        }
        let name = match change {
            QueueChange::Put { name, .. } | QueueChange::Deleted { name, .. } => name,
        };
        self.bump(&mut inner, name);
        Ok(())
    }
}

impl Inner {
    /// Records `change` in the journal, if there is one.
    pub(super) fn journal(&mut self, change: QueueChange<'_>) -> Result<(), EngineError> {
        match &mut self.journal {
            Some(j) => j.record(change).map_err(EngineError::LogFailed),
            None => Ok(()),
        }
    }
}
