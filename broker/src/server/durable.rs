//! `--durability batch|always` at start and at a graceful shutdown.
//!
//! At start: the log folder locked (`log.lock`: two brokers on one folder
//! would write over each other's logs) and opened at its newest
//! generation; that generation's checkpoint loaded, if it has one; the
//! registry's log replayed onto the checkpoint's registry, then each
//! shard's log onto its shard; the registry's journal and each shard's log
//! handed out for the broker to write on. A torn end (a crash during a
//! commit's write: never acknowledged under `always`) is cut and reported;
//! anything else wrong stops the start, naming the file and the byte, with
//! every file left as it was.
//!
//! A start whose replay found anything (a crash came before it) then
//! writes what it rebuilt as the next generation's checkpoint and removes
//! the old generation's files, as a graceful shutdown does: a broker that
//! crashes again and again neither grows its log nor replays all of it at
//! every start. When the checkpoint cannot be written (a full disk), the
//! start goes on writing the logs it replayed.
//!
//! At a graceful shutdown, once every shard has stopped: the next
//! generation's checkpoint written, then the old generation's files
//! removed (`crate::wal::dir`).

use std::path::{Path, PathBuf};

use super::clock::Clock;
use super::shard_loop::ShardLog;
use super::snapshot_at_start::{Loaded, load_snapshot, open_fitting};
use super::{Config, StartError, path_lock};
use crate::engine::section::SliceRead;
use crate::engine::shard::LoadClock;
use crate::engine::{Registry, RegistryConfig, Shard};
use crate::server::config::Durability;
use crate::snapshot;
use crate::wal::dir::LogDir;
use crate::wal::file::{LogFile, Recovered};
use crate::wal::registry::{RegistryLog, replay};

/// The log folder as a start found it.
pub(super) struct DurableStart {
    lock: path_lock::PathLock,
    dir: LogDir,
    checkpoint: Option<snapshot::Opened>,
}

/// What a graceful shutdown needs: the folder and its lock.
#[derive(Debug)]
pub(super) struct Checkpointing {
    pub(super) lock: path_lock::PathLock,
    pub(super) dir: LogDir,
}

fn failed(path: &Path, why: impl std::fmt::Display) -> StartError {
    StartError::Log {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

impl DurableStart {
    /// Locks and opens `--log-dir` and its checkpoint, when there is a log;
    /// sets `config.shards` to the checkpoint's when `--shards` was not
    /// given.
    pub(super) fn open(config: &mut Config) -> Result<Option<DurableStart>, StartError> {
        let Some(path) = config.log_dir.clone() else {
            return Ok(None);
        };
        std::fs::create_dir_all(&path).map_err(|e| failed(&path, e))?;
        let lock = path_lock::lock(&path.join("log")).map_err(|source| StartError::LogLocked {
            path: path.clone(),
            source,
        })?;
        let dir = LogDir::open(&path).map_err(|e| failed(&path, e))?;
        let checkpoint = match dir.checkpoint() {
            Some(file) => Some(open_fitting(&file, config)?),
            None => None,
        };
        if let Some(extra) = dir
            .shard_logs_from(config.shards)
            .map_err(|e| failed(&path, e))?
            .first()
        {
            return Err(failed(
                extra,
                format!(
                    "a log of a shard this start does not have ({} shards): start with the \
                     --shards that wrote it",
                    config.shards
                ),
            ));
        }
        Ok(Some(DurableStart {
            lock,
            dir,
            checkpoint,
        }))
    }

    /// The registry the checkpoint holds, or a new one.
    pub(super) fn registry(&self, config: RegistryConfig) -> Result<Registry, StartError> {
        match (&self.checkpoint, self.dir.checkpoint()) {
            (Some(o), Some(path)) => o
                .registry(config)
                .map_err(|source| StartError::Snapshot { path, source }),
            _ => Ok(Registry::new(config)),
        }
    }

    /// Loads the checkpoint into `engines` (fresh shards on `registry`,
    /// from [`DurableStart::registry`]), then makes the queue changes of
    /// the registry's log (a queue deleted since the checkpoint takes its
    /// messages with it), then replays each shard's log onto its shard (a
    /// put, removal or receive of a message whose queue is gone since is
    /// skipped); when it replayed anything, writes the next checkpoint
    /// ([`DurableStart::checkpoint_replayed`]); turns the registry's
    /// journal and the shards' records on: the logs to write them to.
    /// `now` and `wall` are `engine_clock`'s at start.
    pub(super) fn load_shards(
        &mut self,
        registry: &Registry,
        engines: &mut [Shard],
        config: &Config,
        engine_clock: &Clock,
        now: u64,
        wall: u64,
    ) -> Result<Vec<ShardLog>, StartError> {
        let started = super::clock::now_ns();
        let loaded: Option<Loaded> = match (&self.checkpoint, self.dir.checkpoint()) {
            (Some(opened), Some(path)) => Some(load_snapshot(&path, opened, engines, now, wall)?),
            _ => None,
        };
        let path = self.dir.registry_log();
        let (mut journal, recovered) = RegistryLog::open(&path).map_err(|e| failed(&path, e))?;
        report_torn(&path, &recovered);
        let registry_commits = recovered.commits().len();
        replay(&recovered.commits(), registry).map_err(|e| failed(&path, e))?;
        let always = config.durability == Durability::Always;
        // One thread per shard, all at once, as a snapshot's load.
        let replayed: Vec<Result<Replayed, StartError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = engines
                .iter_mut()
                .enumerate()
                .map(|(i, engine)| {
                    // At most SHARDS_MAX shards.
                    let path = self.dir.shard_log(i as u16);
                    scope.spawn(move || replay_shard(engine, &path, now, wall))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(failed(self.dir.path(), "a shard's replay panicked"))
                    })
                })
                .collect()
        });
        let mut replayed = replayed.into_iter().collect::<Result<Vec<_>, _>>()?;
        let commits: usize = replayed.iter().map(|r| r.commits).sum();
        let bytes: u64 = replayed.iter().map(|r| r.bytes).sum();
        let took = super::clock::now_ns().saturating_sub(started);
        tracing::info!(
            folder = %self.dir.path().display(),
            generation = self.dir.generation(),
            checkpoint = %self.dir.checkpoint().map_or("none".into(), |p| p.display().to_string()),
            checkpoint_messages = loaded.as_ref().map_or(0, |l| l.messages()),
            log_commits = commits,
            log_bytes = bytes,
            seconds = %format_args!("{:.3}", took as f64 / 1e9),
            durability = %config.durability,
            "write-ahead log replayed (leased messages are visible again)"
        );
        if registry_commits + commits > 0 && self.checkpoint_replayed(engines, engine_clock) {
            // The next generation's logs, empty.
            let path = self.dir.registry_log();
            journal = RegistryLog::open(&path).map_err(|e| failed(&path, e))?.0;
            for (i, r) in replayed.iter_mut().enumerate() {
                // At most SHARDS_MAX shards.
                let path = self.dir.shard_log(i as u16);
                r.file = LogFile::open(&path, 1).map_err(|e| failed(&path, e))?.0;
            }
        }
        let mut logs = Vec::with_capacity(engines.len());
        for (r, engine) in replayed.into_iter().zip(engines.iter_mut()) {
            engine.set_logging(true);
            engine.set_hold_for_sync(always);
            logs.push(ShardLog::new(
                r.file,
                always,
                config.log_sync_interval,
                r.took_ns,
            ));
        }
        registry.set_journal(Box::new(journal));
        Ok(logs)
    }

    /// After a replay: what it rebuilt written as the next generation's
    /// checkpoint, as a shutdown writes its own (the shards first catch up
    /// with the registry's replayed changes: a queue deleted since takes
    /// its messages with it), and the old generation's files removed.
    /// `false` when the checkpoint could not be written (the start then
    /// goes on with the logs it replayed).
    fn checkpoint_replayed(&mut self, engines: &mut [Shard], engine_clock: &Clock) -> bool {
        let path = self.dir.next_checkpoint();
        if let Err(e) = super::save_snapshot(&path, engines, engine_clock) {
            tracing::warn!(
                error = %e,
                "the replayed state could not be written as a checkpoint: the start goes on \
                 writing the logs it replayed"
            );
            return false;
        }
        advance(&mut self.dir);
        tracing::info!(
            checkpoint = %path.display(),
            "the replayed state is the new checkpoint; the logs before it are removed"
        );
        true
    }

    /// What the shutdown's checkpoint needs.
    pub(super) fn into_checkpointing(self) -> Checkpointing {
        Checkpointing {
            lock: self.lock,
            dir: self.dir,
        }
    }
}

/// One shard's log, replayed.
struct Replayed {
    file: LogFile,
    commits: usize,
    bytes: u64,
    took_ns: u64,
}

/// Opens the log at `path` (a torn end cut and reported) and replays its
/// commits onto `engine`, each at its own wall-clock time.
fn replay_shard(
    engine: &mut Shard,
    path: &Path,
    now: u64,
    wall: u64,
) -> Result<Replayed, StartError> {
    let started = super::clock::now_ns();
    let (file, recovered) = LogFile::open(path, 1).map_err(|e| failed(path, e))?;
    report_torn(path, &recovered);
    let found = recovered.commits();
    let mut readers: Vec<SliceRead<'_>> = found
        .iter()
        .map(|c| SliceRead::new(c.records, c.records_at))
        .collect();
    let mut replayed: Vec<(&mut SliceRead<'_>, LoadClock)> = readers
        .iter_mut()
        .zip(&found)
        .map(|(r, c)| {
            let clock = LoadClock {
                now_ns: now,
                wall_ms: wall,
                saved_wall_ms: c.wall_ms,
            };
            (r, clock)
        })
        .collect();
    engine
        .replay_commits(&mut replayed)
        .map_err(|e| failed(path, e))?;
    Ok(Replayed {
        file,
        commits: found.len(),
        bytes: found.iter().map(|c| c.records.len() as u64).sum(),
        took_ns: super::clock::now_ns().saturating_sub(started),
    })
}

/// Says that a log's end was cut, and why.
fn report_torn(path: &Path, recovered: &Recovered) {
    if let Some((at, why)) = recovered.torn {
        tracing::warn!(
            file = %path.display(),
            byte = at,
            why,
            "the log's last commit was cut short by a crash ({why} at byte {at}) and was \
             cut off: it was never acknowledged under --durability always"
        );
    }
}

impl Checkpointing {
    /// Where the checkpoint goes.
    pub(super) fn next(&self) -> PathBuf {
        self.dir.next_checkpoint()
    }

    /// The checkpoint is written: the old generation goes.
    pub(super) fn advance(&mut self) {
        advance(&mut self.dir);
    }
}

/// The next generation's checkpoint is written: the folder moves on to it,
/// and the old generation's files go (one that cannot be removed is said,
/// and the next start removes it).
fn advance(dir: &mut LogDir) {
    if let Err(e) = dir.advance() {
        tracing::warn!(
            error = %e,
            folder = %dir.path().display(),
            "the checkpoint is written, but an old log could not be removed: the next start \
             removes it"
        );
    }
}
