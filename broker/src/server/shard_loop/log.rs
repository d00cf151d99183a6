//! The shard's write-ahead log in its loop (`--durability batch|always`).
//!
//! At each turn's end the shard commits the records its requests wrote.
//! - `always`: every reply, close and refusal a session issues is held,
//!   marked with how far into the log the records before it reach, and
//!   handed to the io layer once a sync covers that far; the engine holds
//!   its messages to other shards the same way (`Shard::set_hold_for_sync`,
//!   `Shard::log_synced`), so a result another shard answers does not
//!   outrun the records behind it either. The syncs run on the shard's
//!   syncer thread (`crate::wal::syncer`), one at a time: while one runs,
//!   the shard goes on serving and gathers the records of every turn into
//!   the next commit, written (one frame, or more past the frame limit)
//!   once the sync is done and synced in turn. So a commit's frames are
//!   written only after the previous commit's sync, as the log's scan at
//!   start expects, and the slower the disk, the larger the group.
//! - `batch`: replies go out at once; the records stay in the engine's
//!   buffer until the sync is due (every `--log-sync-interval`, the loop
//!   wakes for it) or 256 KiB gather, then are taken without a copy,
//!   written and synced.
//!
//! A write that fails (a full disk, a quota) keeps its records, and the
//! shard's engine refuses what would need a record with `Busy`, saying why
//! (`Shard::set_log_failing`), until a retry (every 50 ms at first, then
//! backing off to every second) writes them: receives and visibility
//! changes go on meanwhile, their replies not held (a crash then can bring
//! receive counts back low by those receives, as under `batch`), and
//! whatever waited for the failed records goes once they are synced. A
//! connection's replies keep their order: one with a reply held waits
//! behind it.
//!
//! A sync that fails stops the broker, as databases do: after a failed
//! `fdatasync` the kernel may have dropped the pages it could not write and
//! marked them clean, so no later sync can say what is on disk. The
//! replies that waited for it are dropped and their connections closed
//! (their clients retry, as at-least-once lets them), and the server shuts
//! down, writing its checkpoint if the disk lets it.

use std::collections::VecDeque;
use std::time::Duration;

use super::commands::apply;
use super::{Conn, State, live_conn};
use crate::engine::shard::whole_records_within;
use crate::io::{ConnId, Connections, Waker};
use crate::server::clock;
use crate::server::session::Command;
use crate::server::shared::LogStats;
use crate::sync::Arc;
use crate::wal::file::{COMMIT_RECORDS_MAX, LogFile};
use crate::wal::syncer::Syncer;

/// A shard's log as its loop holds it.
#[derive(Debug)]
pub struct ShardLog {
    file: LogFile,
    /// `--durability always`.
    always: bool,
    /// `--log-sync-interval`, ns.
    interval_ns: u64,
    /// Records taken and not yet written.
    records: Vec<u8>,
    /// Record bytes taken from the engine, written, and known synced.
    taken: u64,
    written: u64,
    synced: u64,
    /// When the log was last synced (`batch`).
    synced_ns: u64,
    /// `always`: the thread that syncs, once the loop has started it, and
    /// the last commit the sync under way covers.
    syncer: Option<Syncer>,
    sync_seq: u64,
    /// `always`: this turn's commands, then all that wait for a sync, in
    /// order, each with the record bytes it waits for.
    staged: Vec<(ConnId, Command)>,
    held: VecDeque<(u64, ConnId, Command)>,
    /// A write failed, and no retry has written its records yet.
    failing: Option<Failing>,
    /// A sync failed: nothing more is written, nothing held goes.
    failed: bool,
    /// How long the start's replay of this log took (for the metrics).
    pub(super) replay_ns: u64,
}

/// A write that failed, while no retry has written its records.
#[derive(Debug)]
struct Failing {
    /// The error, as the refusals say it.
    why: String,
    /// When to try again, and how long the wait after that is.
    retry_ns: u64,
    backoff_ns: u64,
}

/// `batch` writes its records once this many are gathered, or when the
/// sync is due: one large write costs the kernel a third of what many
/// small ones do for the same bytes.
const BATCH_WRITE_BYTES: usize = 256 * 1024;

/// The first wait before writing again after a failed write, and the
/// longest the wait grows to.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

impl ShardLog {
    /// A shard's log over `file`, whose replay at start took `replay_ns`.
    pub fn new(file: LogFile, always: bool, interval: Duration, replay_ns: u64) -> ShardLog {
        ShardLog {
            file,
            always,
            interval_ns: clock::nanos(interval),
            records: Vec::new(),
            taken: 0,
            written: 0,
            synced: 0,
            synced_ns: clock::now_ns(),
            syncer: None,
            sync_seq: 0,
            staged: Vec::new(),
            held: VecDeque::new(),
            failing: None,
            failed: false,
            replay_ns,
        }
    }

    /// Starts the syncer thread of shard `index` (`always`), which wakes
    /// the loop through `waker` when a sync is done.
    ///
    /// # Errors
    /// The log's file could not be shared with it, or the thread started.
    pub fn start_syncer(&mut self, index: u16, waker: Arc<Waker>) -> std::io::Result<()> {
        if !self.always {
            return Ok(());
        }
        let file = self.file.sync_handle()?;
        let syncer = Syncer::start(
            format!("sluice-sync-{index}"),
            move || file.sync_data(),
            move || waker.wake(),
            clock::now_ns,
        )?;
        self.syncer = Some(syncer);
        Ok(())
    }

    /// Where a session's replies and closes wait for the sync: under
    /// `always`.
    pub fn hold(&mut self) -> Option<&mut Vec<(ConnId, Command)>> {
        self.always.then_some(&mut self.staged)
    }

    /// How long the loop may sleep before the log needs it: after a failed
    /// write, until its retry; under `batch`, the time left of the sync
    /// interval while records (`pending`: bytes the engine holds, not yet
    /// taken) or commits wait for it; `always` is woken by its syncer.
    pub fn wait(&self, now_ns: u64, pending: usize) -> Option<Duration> {
        if self.failed {
            return None;
        }
        if let Some(f) = &self.failing {
            return Some(Duration::from_nanos(f.retry_ns.saturating_sub(now_ns)));
        }
        let unwritten = !self.records.is_empty() || pending > 0;
        (!self.always && (self.written > self.synced || unwritten)).then(|| {
            Duration::from_nanos(
                self.synced_ns
                    .saturating_add(self.interval_ns)
                    .saturating_sub(now_ns),
            )
        })
    }

    /// Why the log cannot be written, while it cannot.
    pub fn failing(&self) -> Option<&str> {
        self.failing.as_ref().map(|f| f.why.as_str())
    }

    /// Whether a write may be tried now: always when none failed, else
    /// once the retry's time has come.
    fn may_write(&self, now_ns: u64) -> bool {
        self.failing.as_ref().is_none_or(|f| now_ns >= f.retry_ns)
    }

    /// Writes the records taken, keeping those a failed write did not
    /// take, and notes the failure (retried later) or the recovery.
    fn write_or_fail(&mut self, now_ns: u64, wall_ms: u64, stats: &LogStats) {
        match self.write(wall_ms, stats) {
            Ok(()) => self.failing = None,
            Err(e) => {
                stats.failures.add(1);
                let backoff_ns = self
                    .failing
                    .as_ref()
                    .map_or(clock::nanos(RETRY_FIRST), |f| {
                        (f.backoff_ns * 2).min(clock::nanos(RETRY_MAX))
                    });
                self.failing = Some(Failing {
                    why: e.to_string(),
                    retry_ns: now_ns.saturating_add(backoff_ns),
                    backoff_ns,
                });
            }
        }
    }

    /// Writes the records taken as commits of at most the largest a frame
    /// holds, cut between records; a failed write keeps the records it did
    /// not take.
    fn write(&mut self, wall_ms: u64, stats: &LogStats) -> std::io::Result<()> {
        let mut at = 0;
        let result = loop {
            if at >= self.records.len() {
                break Ok(());
            }
            let rest = &self.records[at..];
            // Cut between records only past the limit (rare): no walk
            // over them otherwise.
            let n = if rest.len() <= COMMIT_RECORDS_MAX {
                rest.len()
            } else {
                whole_records_within(rest, COMMIT_RECORDS_MAX)
            };
            let before = self.file.len();
            if let Err(e) = self.file.append(wall_ms, &self.records[at..at + n]) {
                break Err(e);
            }
            stats.bytes.add(self.file.len() - before);
            stats.commits.add(1);
            at += n;
        };
        self.written += at as u64;
        self.records.drain(..at);
        result
    }

    /// Whether the records the engine holds (`pending` bytes) are to be
    /// taken now: always under `always`; under `batch` once they are to be
    /// written (the sync is due, or enough gathered), so that until then
    /// they stay in the engine's buffer, which the take then swaps for
    /// this one without a copy.
    fn take_now(&self, now_ns: u64, pending: usize) -> bool {
        self.always
            || (pending > 0
                && (self.due(now_ns) || self.records.len() + pending >= BATCH_WRITE_BYTES))
    }

    /// `batch`: whether the interval since the last sync is up.
    fn due(&self, now_ns: u64) -> bool {
        now_ns >= self.synced_ns.saturating_add(self.interval_ns)
    }

    /// `batch` at a turn's end: the records taken written once the
    /// interval is up or enough gathered, and synced when the interval is
    /// up.
    fn commit_batch(&mut self, now_ns: u64, wall_ms: u64, stats: &LogStats) -> std::io::Result<()> {
        let due = self.due(now_ns);
        let full = self.records.len() >= BATCH_WRITE_BYTES;
        if (due || full) && !self.records.is_empty() && self.may_write(now_ns) {
            self.write_or_fail(now_ns, wall_ms, stats);
        }
        if self.written > self.synced && due {
            self.sync_here(stats)?;
            self.synced_ns = now_ns;
        }
        Ok(())
    }

    /// `always` at a turn's end: the sync under way answered, if it is; the
    /// turn's commands marked (unless the log was failing through the turn:
    /// those are left staged, as they need no sync); the records gathered
    /// written and a sync of them asked for, if none runs.
    fn commit_always(&mut self, now_ns: u64, wall_ms: u64, stats: &LogStats) -> Result<(), String> {
        let Some(syncer) = self.syncer.as_mut() else {
            return Err("the log's syncer did not start".into());
        };
        if let Some(answer) = syncer.poll() {
            let (bytes, nanos) = answer?;
            self.synced = self.synced.max(bytes);
            self.file.mark_synced(self.sync_seq);
            stats.synced(nanos);
        }
        let until = self.taken;
        if self.failing.is_none() {
            self.held
                .extend(self.staged.drain(..).map(|(id, c)| (until, id, c)));
        }
        let idle = !self.syncer.as_ref().is_some_and(Syncer::busy);
        if self.written < self.taken && idle && self.may_write(now_ns) {
            let before = self.written;
            self.write_or_fail(now_ns, wall_ms, stats);
            if self.written > before {
                self.sync_seq = self.file.last_seq();
                if let Some(s) = self.syncer.as_mut() {
                    s.request(self.written);
                }
            }
        }
        Ok(())
    }

    /// Syncs what was written, on the loop's thread, timed.
    fn sync_here(&mut self, stats: &LogStats) -> std::io::Result<()> {
        let started = clock::now_ns();
        self.file.sync()?;
        stats.synced(clock::now_ns().saturating_sub(started));
        self.synced = self.written;
        Ok(())
    }

    /// The loop ends: the sync under way finished, what was gathered
    /// written and synced here.
    fn close(&mut self, wall_ms: u64, stats: &LogStats) -> Result<(), String> {
        if let Some(mut s) = self.syncer.take() {
            while s.busy() {
                match s.poll() {
                    Some(answer) => {
                        answer?;
                        self.file.mark_synced(self.sync_seq);
                    }
                    None => std::thread::sleep(Duration::from_micros(100)),
                }
            }
        }
        self.write(wall_ms, stats).map_err(|e| e.to_string())?;
        if self.written > self.synced {
            self.sync_here(stats).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl State {
    /// The loop ends: everything taken is written and synced.
    pub(super) fn close_log(&mut self) {
        let stats = &self.shared.shards[usize::from(self.index)].stats.log;
        let Some(log) = self.log.as_mut().filter(|l| !l.failed) else {
            return;
        };
        self.engine.take_log(&mut log.records);
        if let Err(e) = log.close(self.engine_time.wall_ms, stats) {
            stats.failures.add(1);
            tracing::error!(shard = self.index, error = %e, "the write-ahead log's last commit failed");
        }
    }

    /// The turn's end: its records taken and committed as the mode asks,
    /// then what waited for a sync that is done let go, and what needs none
    /// while the log fails.
    pub(super) fn commit_log(&mut self, io: &mut Connections) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let stats = &self.shared.shards[usize::from(self.index)].stats.log;
        let now = clock::now_ns();
        let before = log.records.len();
        if log.take_now(now, self.engine.log_len()) {
            self.engine.take_log(&mut log.records);
        }
        log.taken += (log.records.len() - before) as u64;
        let was_failing = log.failing.is_some();
        let result = if log.failed {
            Err("the log failed earlier".to_owned())
        } else if log.always {
            log.commit_always(now, self.engine_time.wall_ms, stats)
        } else {
            log.commit_batch(now, self.engine_time.wall_ms, stats)
                .map_err(|e| e.to_string())
        };
        if let Err(e) = result {
            if !log.failed {
                log.failed = true;
                stats.failures.add(1);
                tracing::error!(
                    shard = self.index,
                    error = %e,
                    "the write-ahead log could not be synced: closing the connections \
                     whose replies waited for it and stopping the broker"
                );
                self.shared.begin_shutdown();
            }
            for (id, _) in log.staged.drain(..) {
                io.close_now(id);
            }
            for (_, id, _) in log.held.drain(..) {
                io.close_now(id);
            }
            return;
        }
        match (was_failing, log.failing()) {
            // The state first, then the line that says so.
            (false, Some(why)) => {
                self.engine.set_log_failing(Some(why));
                stats.failing.set(1);
                tracing::error!(
                    shard = self.index,
                    error = why,
                    "the write-ahead log cannot be written: sends, deletes, purges and \
                     redrives are refused with Busy until a retry writes it"
                );
            }
            (true, None) => {
                self.engine.set_log_failing(None);
                stats.failing.set(0);
                tracing::info!(shard = self.index, "the write-ahead log is written again");
            }
            _ => {}
        }
        if !log.always {
            return;
        }
        self.engine.log_synced(log.synced);
        while log
            .held
            .front()
            .is_some_and(|(until, _, _)| *until <= log.synced)
        {
            let Some((_, id, command)) = log.held.pop_front() else {
                break;
            };
            deliver(&mut self.conns, &mut self.paused, io, id, command);
        }
        // What a turn of a failing log staged needs no sync (nothing it
        // answers was taken): it goes, unless a reply of its connection is
        // held, behind which it waits to keep the connection's order.
        if !log.staged.is_empty() {
            for (id, command) in std::mem::take(&mut log.staged) {
                if log.held.iter().any(|(_, h, _)| *h == id) {
                    log.held.push_back((log.taken, id, command));
                } else {
                    deliver(&mut self.conns, &mut self.paused, io, id, command);
                }
            }
        }
    }
}

/// Hands `command` of connection `id` to the io layer, if it is still open.
fn deliver(
    conns: &mut [Option<Conn>],
    paused: &mut Vec<ConnId>,
    io: &mut Connections,
    id: ConnId,
    command: Command,
) {
    let Some(conn) = live_conn(conns, id) else {
        return;
    };
    // A question is never held.
    let _ = apply(
        &mut conn.transport,
        &mut conn.ending,
        io,
        id,
        command,
        paused,
    );
}
