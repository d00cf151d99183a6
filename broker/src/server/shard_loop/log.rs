//! The shard's write-ahead log in its loop (`--durability batch|always`).
//!
//! The records a turn's requests wrote are committed at the turn's end as
//! one frame (a group commit: one write, and under `always` one sync, for
//! every request the turn served).
//! - `always`: every reply, close and refusal a session issues during the
//!   turn is held, and handed to the io layer only after the sync; the
//!   engine holds its messages to other shards the same way
//!   (`Shard::set_hold_for_sync`), so a result another shard answers does
//!   not outrun the records behind it either.
//! - `batch`: replies go out at once; the log is synced every
//!   `--log-sync-interval` (the loop wakes for it), so a crash loses at
//!   most what was acknowledged within it.
//!
//! A write or sync that fails stops the broker: the replies that waited
//! for it are dropped and their connections closed (their clients retry,
//! as at-least-once lets them), and the server shuts down, writing its
//! checkpoint if the disk lets it. Nothing acknowledged is then missing
//! from the log but what `batch` allows.

use std::time::Duration;

use super::State;
use super::commands::apply;
use crate::engine::shard::whole_records_within;
use crate::io::{ConnId, Connections};
use crate::server::clock;
use crate::server::session::Command;
use crate::server::shared::LogStats;
use crate::wal::file::{COMMIT_RECORDS_MAX, LogFile};

/// A shard's log as its loop holds it.
#[derive(Debug)]
pub struct ShardLog {
    file: LogFile,
    /// `--durability always`: replies wait for the turn's sync.
    always: bool,
    /// `--log-sync-interval`, ns.
    interval_ns: u64,
    /// The records the engine wrote, taken at the turn's end.
    records: Vec<u8>,
    /// Whether commits were appended since the last sync.
    unsynced: bool,
    /// When the log was last synced.
    synced_ns: u64,
    /// Commands held until the turn's sync, in the order issued.
    held: Vec<(ConnId, Command)>,
    /// A write or sync failed: nothing more is written, nothing held goes.
    failed: bool,
    /// How long the start's replay of this log took (for the metrics).
    pub(super) replay_ns: u64,
}

impl ShardLog {
    /// A shard's log over `file`, whose replay at start took `replay_ns`.
    pub fn new(file: LogFile, always: bool, interval: Duration, replay_ns: u64) -> ShardLog {
        ShardLog {
            replay_ns,
            file,
            always,
            interval_ns: clock::nanos(interval),
            records: Vec::new(),
            unsynced: false,
            synced_ns: clock::now_ns(),
            held: Vec::new(),
            failed: false,
        }
    }

    /// Where a session's replies and closes wait for the sync: under
    /// `always`.
    pub fn hold(&mut self) -> Option<&mut Vec<(ConnId, Command)>> {
        self.always.then_some(&mut self.held)
    }

    /// How long the loop may sleep before the log needs it: the time left
    /// of the sync interval while commits wait for a sync.
    pub fn wait(&self, now_ns: u64) -> Option<Duration> {
        (self.unsynced && !self.failed).then(|| {
            Duration::from_nanos(
                self.synced_ns
                    .saturating_add(self.interval_ns)
                    .saturating_sub(now_ns),
            )
        })
    }

    /// Appends `records` as commits of at most the largest a frame holds,
    /// cut between records.
    fn append(&mut self, wall_ms: u64, stats: &LogStats) -> std::io::Result<()> {
        let mut at = 0;
        while at < self.records.len() {
            let n = whole_records_within(&self.records[at..], COMMIT_RECORDS_MAX);
            let before = self.file.len();
            self.file.append(wall_ms, &self.records[at..at + n])?;
            stats.bytes.add(self.file.len() - before);
            stats.commits.add(1);
            at += n;
            self.unsynced = true;
        }
        self.records.clear();
        Ok(())
    }

    /// Commits the turn's records and syncs as the mode asks.
    ///
    /// # Errors
    /// The write or sync failed, now or before.
    fn commit(&mut self, now_ns: u64, wall_ms: u64, stats: &LogStats) -> std::io::Result<()> {
        if self.failed {
            return Err(std::io::Error::other("the log failed earlier"));
        }
        self.append(wall_ms, stats)?;
        let due = self.always || now_ns >= self.synced_ns.saturating_add(self.interval_ns);
        if self.unsynced && due {
            self.sync(stats)?;
            self.synced_ns = now_ns;
        }
        Ok(())
    }

    /// Syncs what was appended, timed.
    fn sync(&mut self, stats: &LogStats) -> std::io::Result<()> {
        let started = clock::now_ns();
        self.file.sync()?;
        stats.synced(clock::now_ns().saturating_sub(started));
        self.unsynced = false;
        Ok(())
    }
}

impl State {
    /// The loop ends: what is appended and not yet synced is synced.
    pub(super) fn close_log(&mut self) {
        let stats = &self.shared.shards[usize::from(self.index)].stats.log;
        if let Some(log) = self.log.as_mut().filter(|l| l.unsynced && !l.failed) {
            if let Err(e) = log.sync(stats) {
                stats.failures.add(1);
                tracing::error!(shard = self.index, error = %e, "the write-ahead log's last sync failed");
            }
        }
    }

    /// The turn's end: its records committed (and synced as the mode
    /// asks), then what waited for them let go.
    pub(super) fn commit_log(&mut self, io: &mut Connections) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        self.engine.take_log(&mut log.records);
        let stats = &self.shared.shards[usize::from(self.index)].stats.log;
        let result = log.commit(clock::now_ns(), self.engine_time.wall_ms, stats);
        if let Err(e) = result {
            if !log.failed {
                log.failed = true;
                stats.failures.add(1);
                tracing::error!(
                    shard = self.index,
                    error = %e,
                    "the write-ahead log could not be written or synced: closing the \
                     connections whose replies waited for it and stopping the broker"
                );
                self.shared.begin_shutdown();
            }
            for (id, _) in log.held.drain(..) {
                io.close_now(id);
            }
            return;
        }
        if !log.always {
            return;
        }
        self.engine.log_synced();
        let held = core::mem::take(&mut log.held);
        for (id, command) in held {
            let Some(conn) = self
                .conns
                .get_mut(id.index() as usize)
                .and_then(Option::as_mut)
                .filter(|c| c.id == id)
            else {
                continue;
            };
            // A question is never held.
            let _ = apply(
                &mut conn.transport,
                &mut conn.ending,
                io,
                id,
                command,
                &mut self.paused,
            );
        }
    }
}
