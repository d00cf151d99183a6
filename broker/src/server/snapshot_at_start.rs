//! `--snapshot` at start: the lock on the path, the file opened and
//! checked to fit (its shard count taken when `--shards` was not given),
//! loaded into the engines, then moved aside once every listener is bound,
//! and the older loaded files pruned.

use super::{Config, StartError, clock, config, path_lock};
use crate::engine::Shard;
use crate::engine::shard::{LoadClock, ShardLoad};
use crate::snapshot;

/// What was loaded from a snapshot, for the log line once the file is
/// moved aside.
pub(super) struct Loaded {
    load: ShardLoad,
    queues: u64,
    bytes: u64,
    took_ns: u64,
}

impl Loaded {
    /// Messages loaded.
    pub(super) fn messages(&self) -> u64 {
        self.load.messages()
    }
}

/// Loads `opened` (the file at `path`) into `engines`, one thread per
/// shard.
pub(super) fn load_snapshot(
    path: &std::path::Path,
    opened: &snapshot::Opened,
    engines: &mut [Shard],
    now: u64,
    wall: u64,
) -> Result<Loaded, StartError> {
    let started = clock::now_ns();
    let clock = LoadClock {
        now_ns: now,
        wall_ms: wall,
        saved_wall_ms: opened.header.saved_wall_ms,
    };
    let load = snapshot::load_shards(snapshot::Source::File(path), opened, engines, clock)
        .map_err(|source| StartError::Snapshot {
            path: path.to_owned(),
            source,
        })?;
    Ok(Loaded {
        load,
        queues: opened.header.queues,
        bytes: opened
            .header
            .sections
            .last()
            .map_or(0, |s| s.offset + s.len),
        took_ns: clock::now_ns().saturating_sub(started).max(1),
    })
}

/// Moves the loaded snapshot aside and logs what was loaded.
pub(super) fn move_aside(
    path: &std::path::Path,
    wall: u64,
    loaded: &Loaded,
) -> std::io::Result<()> {
    let aside = snapshot::move_aside(path, wall)?;
    let load = &loaded.load;
    tracing::info!(
        file = %path.display(),
        queues = loaded.queues,
        messages = load.messages(),
        visible = load.visible,
        delayed = load.delayed,
        in_flight = load.in_flight,
        leases_ended_while_stopped = load.leases_ended,
        delays_ended_while_stopped = load.delays_ended,
        dedup_entries = load.dedup,
        bytes = loaded.bytes,
        message_bytes = load.data_bytes,
        seconds = %format_args!("{:.3}", loaded.took_ns as f64 / 1e9),
        mb_per_s = %format_args!(
            "{:.1}",
            loaded.bytes as f64 / 1e6 / (loaded.took_ns as f64 / 1e9)
        ),
        moved_to = %aside.display(),
        "snapshot loaded (leases that ended while stopped are visible again at the first tick); \
         the file was moved aside: only the next graceful shutdown writes one to load"
    );
    Ok(())
}

/// `--snapshot` at start: the path's lock, held until the handle drops,
/// and the file, opened and checked to fit, when there is one.
pub(super) struct SnapshotAtStart {
    pub(super) lock: Option<path_lock::PathLock>,
    /// The file, when it exists.
    pub(super) path: Option<std::path::PathBuf>,
    pub(super) opened: Option<snapshot::Opened>,
}

impl SnapshotAtStart {
    /// Sets `config.shards` to the file's count when `--shards` was not
    /// given ([`shards_for_snapshot`]).
    pub(super) fn open(config: &mut Config) -> Result<SnapshotAtStart, StartError> {
        let Some(path) = config.snapshot.clone() else {
            return Ok(SnapshotAtStart {
                lock: None,
                path: None,
                opened: None,
            });
        };
        // Found out now, not at the shutdown that would need it.
        snapshot::probe_writable(&path).map_err(|source| StartError::SnapshotUnwritable {
            path: path.clone(),
            source,
        })?;
        // Held from before the snapshot is read until after it is written.
        let lock = path_lock::lock(&path).map_err(|source| StartError::SnapshotLocked {
            path: path.clone(),
            source,
        })?;
        if !path.exists() {
            log_missing_snapshot(&path);
            return Ok(SnapshotAtStart {
                lock: Some(lock),
                path: None,
                opened: None,
            });
        }
        let opened = open_fitting(&path, config)?;
        Ok(SnapshotAtStart {
            lock: Some(lock),
            path: Some(path),
            opened: Some(opened),
        })
    }
}

/// Opens the snapshot at `path` and checks that it fits this start (sets
/// `config.shards` to its count when `--shards` was not given): `--snapshot`'s
/// file, or a log folder's checkpoint.
pub(super) fn open_fitting(
    path: &std::path::Path,
    config: &mut Config,
) -> Result<snapshot::Opened, StartError> {
    let error = |source| StartError::Snapshot {
        path: path.to_owned(),
        source,
    };
    let opened = snapshot::open(snapshot::Source::File(path)).map_err(error)?;
    config.shards = shards_for_snapshot(config, opened.header.shards);
    opened
        .check_fit(
            config.shards,
            config.memory_max_bytes,
            config.queues_max as usize,
        )
        .map_err(error)?;
    Ok(opened)
}

/// The shard count to start with when a snapshot of `file_shards` shards
/// is there: the snapshot's own when `--shards` was not given (a changed
/// CPU set or CPU limit must not stop a restart), else `--shards`, which
/// [`snapshot::Opened::check_fit`] then refuses if it differs.
pub(super) fn shards_for_snapshot(config: &Config, file_shards: u16) -> u16 {
    if config.shards_given || file_shards == config.shards {
        return config.shards;
    }
    if !(1..=config::SERVER_SHARDS_MAX).contains(&file_shards) {
        // Out of this server's range: check_fit refuses it by both counts.
        return config.shards;
    }
    tracing::info!(
        snapshot_shards = file_shards,
        default_shards = config.shards,
        "starting with the snapshot's {file_shards} shards rather than one per core ({}): \
         --shards was not given. Give --shards {file_shards} to say so, or see \
         deploy/README.md to change the shard count",
        config.shards
    );
    file_shards
}

/// Says why `--snapshot`'s file is not there: a first start, or a last stop
/// that wrote none (a crash), which a `PATH.loaded-MS` file beside it shows.
pub(super) fn log_missing_snapshot(path: &std::path::Path) {
    let newest = snapshot::files::loaded_files(path)
        .ok()
        .and_then(|mut f| f.pop());
    match newest {
        Some(loaded) => tracing::warn!(
            newest_loaded = %loaded.display(),
            "snapshot {} not found: the last stop was not graceful (a crash, a kill -9, or a \
             save that failed), starting empty. {} is the snapshot an earlier start loaded: \
             renaming it back brings back the queues as they were then, messages deleted \
             since included (README.md, \"Restarting without losing messages\")",
            path.display(),
            loaded.display()
        ),
        None => tracing::info!(
            "snapshot {} not found (the first start with this path), starting empty",
            path.display()
        ),
    }
}

/// Removes all but the newest `keep` `PATH.loaded-MS` files (`--snapshot-keep`).
pub(super) fn prune_loaded(path: &std::path::Path, keep: u32) {
    match snapshot::files::prune_loaded(path, keep as usize) {
        Ok(removed) if !removed.is_empty() => tracing::info!(
            removed = removed.len(),
            kept = keep,
            "removed older loaded snapshots beside {} (--snapshot-keep)",
            path.display()
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "cannot remove older loaded snapshots beside {} (--snapshot-keep)",
            path.display()
        ),
    }
}
