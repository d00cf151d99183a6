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

use sluice_protocol::{QueueAttributes, QueueName, QueueTimes};

use super::{Inner, Registry};
use crate::engine::error::EngineError;

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

impl Inner {
    /// Records `change` in the journal, if there is one.
    pub(super) fn journal(&mut self, change: QueueChange<'_>) -> Result<(), EngineError> {
        match &mut self.journal {
            Some(j) => j.record(change).map_err(EngineError::LogFailed),
            None => Ok(()),
        }
    }
}
