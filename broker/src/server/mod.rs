//! The server: shards, connections, routing, configuration and metrics —
//! the one layer that sees the protocol, the engine and the io layer.
//!
//! [`Server::start`] takes a validated [`Config`] and runs one thread per
//! shard, each with its own io driver (its own `SO_REUSEPORT` listener on
//! the shared address, see [`crate::io`]) and its own engine [`Shard`]; the
//! shards' rings are wired into a mesh whose doorbells wake the drivers. It
//! returns a [`ServerHandle`] at once, with the listener bound: tests run a
//! server in-process on port 0.
//!
//! ```no_run
//! use clap::Parser;
//! use sluice_broker::server::config::{Config, RawArgs};
//! use sluice_broker::server::Server;
//!
//! let raw = RawArgs::try_parse_from(["sluice-server", "--listen", "127.0.0.1:0", "--shards", "2"])?;
//! let server = Server::start(Config::from_args(raw)?)?;
//! println!("clients connect to {} ({})", server.local_addr(), server.backend());
//! server.shutdown(); // what SIGTERM does: answer what is in flight, then stop
//! server.join()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Shard `i` runs on a thread named `sluice-shard-i`, pinned (`--cpus
//! auto`, the default) to the `i`-th CPU the process may use: its affinity
//! mask, as `taskset`, `numactl` or a container's cpuset set it, so a
//! broker started on CPUs 2-3 runs its shards on 2 and 3. Shards beyond
//! those CPUs, and every shard with `--cpus none`, run unpinned within the
//! process's CPUs; `--cpus LIST` names the CPUs. A failed pin is logged and
//! the shard runs unpinned. The metrics endpoint and the SQS door are
//! listeners of the shards, beside the binary port's.
//!
//! At start the server raises its soft open-files limit to the hard one and
//! warns when `--max-connections` would not fit in it. A shard out of
//! descriptors refuses new connections with an error frame (through a
//! reserve descriptor, see [`crate::io`]), counts them, logs it at most
//! every 10 s, and keeps serving the connections it has.
//!
//! | file | concept |
//! |---|---|
//! | `config.rs` | flags, environment, config file -> validated [`Config`] |
//! | `shard_loop/` | one shard's event loop: the driver, the engine, the sessions, deadlines (`mod.rs`); its state at start (`setup.rs`); admission, refusals, closes, the cap before HELLO (`accept.rs`); the metrics endpoint's connections and scrapes (`metrics.rs`); shutdown (`drain.rs`) |
//! | `session/` | one connection's protocol state machine, without a socket: framing, order, back-pressure, heartbeat, closing (`mod.rs`); HELLO and auth (`hello.rs`); serving requests (`serve.rs`); its tests (`tests.rs`) |
//! | `auth_guard.rs` | failed HELLOs by address: the delay before `Unauthorized`, the log's rate limit |
//! | `snapshot_at_start.rs` | `--snapshot` at start: the lock, the file checked and loaded, moved aside, older ones pruned |
//! | `start.rs` | `Server::start`: configuration checks, the snapshot at start, the engines, the shard threads |
//! | `path_lock.rs` | the exclusive lock on `--snapshot`'s path (`PATH.lock`), held from start to exit |
//! | `bound_leases.rs` | the leases a connection bound to itself, released when it closes |
//! | `convert.rs` | wire requests -> engine ops, engine results -> wire replies |
//! | `transport.rs` | between the driver's bytes and the session: plain text, or TLS (rustls, sans-IO) |
//! | `tls.rs` | the TLS files, read once into rustls's server configuration |
//! | `limits.rs` | every limit of the server: flag bounds and defaults, connection timings |
//! | `shared.rs` | what the threads share: connection count, counters, snapshots |
//! | `metrics.rs`, `metrics/` | every metric: the Prometheus writer, histograms; what the server measures and the `/metrics` text (`telemetry.rs`); the `process_*` metrics from `/proc/self` (`process.rs`) |
//! | `metrics_session.rs` | one connection of the metrics endpoint, without a socket: `/metrics` (a scrape that waits for every shard without blocking its own), `/healthz`, deadlines |
//! | `sqs_session.rs`, `outbox.rs` | one connection of the SQS door, without a socket; what an HTTP session hands the io layer |
//! | `signals.rs` | SIGTERM / SIGINT to a graceful shutdown |
//! | `clock.rs` | the only clock reads; the engine's clock, real or manual |

pub mod auth_guard;
mod bound_leases;
pub mod config;
mod conn;
pub mod metrics;

pub mod clock;
mod convert;
mod durable;
pub mod limits;
mod metrics_session;
mod outbox;
pub mod path_lock;
pub mod session;
mod shard_loop;
mod shared;
pub mod signals;
mod snapshot_at_start;
pub mod sqs_session;
mod start;
pub mod tls;
pub mod transport;

use crate::sync::Arc;
use crate::sync::thread::JoinHandle;
use std::fmt;
use std::net::SocketAddr;

use self::clock::Clock;
pub use self::clock::{EngineTime, NotManual};
pub use self::config::Config;
use self::shared::ServerState;
use crate::engine::Shard;
use crate::io::{Backend, OpenError};
use crate::snapshot::{self, format::SnapshotError};

pub use self::limits::{REFUSED_CONNECTIONS_MAX, SHARD_RING_CAPACITY};

/// What a shard thread ends with: its engine, to be saved (`None` when it
/// ended before it started serving), or its driver's error.
type ShardOutcome = Result<Option<Shard>, std::io::Error>;

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A non-loopback listen address without an auth token or `--insecure`
    /// (the configuration refuses this too; checked again for a [`Config`]
    /// built by hand).
    #[error(
        "refusing to listen on {0} without an auth token: give --token-file, a loopback \
         address, or --insecure"
    )]
    InsecureListen(SocketAddr),
    /// A shard's io driver could not be opened (the listener could not be
    /// bound, or `--io uring` and io_uring is unavailable).
    #[error("shard {shard}: {source}")]
    Io {
        /// The shard.
        shard: u16,
        /// Why.
        #[source]
        source: OpenError,
    },
    /// A shard thread could not be started, or died while starting.
    #[error("shard {shard}: thread failed to start: {source}")]
    Thread {
        /// The shard.
        shard: u16,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `--cpus` names a CPU this process may not run on.
    #[error(
        "--cpus names CPU {cpu}, which this process may not run on (it may use {allowed}): \
         pick CPUs from that set, or use --cpus auto"
    )]
    CpuNotAllowed {
        /// The CPU.
        cpu: usize,
        /// The CPUs the process may use, as a list.
        allowed: String,
    },
    /// The snapshot could not be loaded: truncated, corrupt, another
    /// version, other limits, another shard count, or too large for
    /// `--memory-max`. The file is left as it was.
    #[error("snapshot {}: {source}; the file was left untouched", path.display())]
    Snapshot {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong, with its byte offset.
        #[source]
        source: SnapshotError,
    },
    /// No snapshot could be written beside `--snapshot`'s path (no such
    /// folder, no permission): refused at start rather than found out at
    /// the shutdown that would need it.
    #[error(
        "cannot write a snapshot at {} (--snapshot): {source}; give a path in a folder this \
         process may write to",
        path.display()
    )]
    SnapshotUnwritable {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The snapshot loaded but could not be moved aside: starting would let
    /// a crash bring its messages back.
    #[error(
        "snapshot {} loaded but cannot be moved aside ({source}); not starting, so that a \
         crash cannot load it again",
        path.display()
    )]
    SnapshotMove {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Another broker (or another server in this process) holds the lock
    /// on the snapshot path.
    #[error("snapshot {}: {source}", path.display())]
    SnapshotLocked {
        /// The snapshot file.
        path: std::path::PathBuf,
        /// Who holds it, or why it could not be locked.
        #[source]
        source: path_lock::LockError,
    },
    /// Another process listens on one of the broker's ports. With
    /// `SO_REUSEPORT` a second broker of the same user could otherwise
    /// join the first's port and take half its connections.
    #[error(
        "cannot listen on {addr} ({flag}): another process listens there (another \
         sluice-server?); stop it or give {flag} another port"
    )]
    PortTaken {
        /// The flag that names the address.
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// The write-ahead log could not be opened or replayed: corrupt before
    /// its end, unreadable, or written by another shard count. Every file is
    /// left as it was.
    #[error("write-ahead log {}: {why}; the files were left untouched", path.display())]
    Log {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What is wrong, with its byte offset where there is one.
        why: String,
    },
    /// Another broker holds the lock on `--log-dir`.
    #[error("write-ahead log folder {}: {source}", path.display())]
    LogLocked {
        /// The folder.
        path: std::path::PathBuf,
        /// Who holds it, or why it could not be locked.
        #[source]
        source: path_lock::LockError,
    },
    /// The metrics endpoint could not be bound.
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why a server stopped other than cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A shard's io driver failed.
    #[error("shard {shard}: io driver failed: {source}")]
    Driver {
        /// The shard.
        shard: u16,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A shard thread panicked (a bug).
    #[error("shard {shard} panicked")]
    Panicked {
        /// The shard.
        shard: u16,
    },
    /// The snapshot could not be written (the previous file, if any, is
    /// untouched).
    #[error("cannot write snapshot {}: {source}", path.display())]
    Snapshot {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// No snapshot was written: the path's lock no longer guards it
    /// (another broker may own the path now).
    #[error("no snapshot written to {}: {source}", path.display())]
    SnapshotLockLost {
        /// The file.
        path: std::path::PathBuf,
        /// How the lock was lost.
        #[source]
        source: path_lock::LockError,
    },
    /// No snapshot was written: a shard did not stop cleanly.
    #[error("no snapshot written to {}: a shard failed, its messages cannot be saved", path.display())]
    SnapshotSkipped {
        /// The file.
        path: std::path::PathBuf,
    },
}

/// The server.
#[derive(Debug)]
pub struct Server;

/// `--check-snapshot PATH`: reads the whole file the way a start with
/// `config` would (the same shard count, `--memory-max` and `--queues-max`
/// checks), without starting.
///
/// # Errors
/// What the start would refuse, with its byte offset.
pub fn check_snapshot(
    path: &std::path::Path,
    config: &Config,
    wall_ms: u64,
) -> Result<snapshot::CheckReport, SnapshotError> {
    let source = snapshot::Source::File(path);
    let opened = snapshot::open(source)?;
    let shards = snapshot_at_start::shards_for_snapshot(config, opened.header.shards);
    opened.check_fit(shards, config.memory_max_bytes, config.queues_max as usize)?;
    snapshot::check(source, wall_ms)
}

/// Saves the shards (ended, after the shutdown drain) to `path`: their
/// rings are settled first, so that what one shard still had to tell
/// another (a forwarded send, a steal's reply) has landed.
fn save_snapshot(
    path: &std::path::Path,
    engines: &mut [Shard],
    engine_clock: &Clock,
) -> Result<(), ServerError> {
    let Some(registry) = engines.first().map(|e| e.registry().clone()) else {
        return Ok(());
    };
    let started = clock::now_ns();
    // Bounded: a round that does nothing ends it, and every round moves
    // messages forward; a handful of rounds is the most it ever takes.
    for _ in 0..1000 {
        let t = engine_clock.engine_time(clock::now_ns(), clock::wall_ms());
        let (now, wall) = (t.now_ns, t.wall_ms);
        let work: usize = engines.iter_mut().map(|e| e.poll(now, wall)).sum();
        let mut done = Vec::new();
        for e in engines.iter_mut() {
            // Results for connections that are gone.
            e.drain_completions(&mut done);
        }
        if work == 0 && !engines.iter().any(Shard::has_outbound) {
            break;
        }
    }
    // Times are saved relative to the engine's now (the manual clock's,
    // under `--clock manual`); the header's wall-clock time is the real
    // one, from which the next start counts the time stopped.
    let now = engine_clock
        .engine_time(clock::now_ns(), clock::wall_ms())
        .now_ns;
    let report =
        snapshot::save(path, &registry, engines, now, clock::wall_ms()).map_err(|source| {
            ServerError::Snapshot {
                path: path.to_owned(),
                source,
            }
        })?;
    let took_ns = clock::now_ns().saturating_sub(started).max(1);
    tracing::info!(
        file = %report.path.display(),
        queues = report.queues,
        messages = report.messages,
        bytes = report.bytes,
        seconds = took_ns as f64 / 1e9,
        mb_per_s = report.bytes as f64 / 1e6 / (took_ns as f64 / 1e9),
        sizing_s = report.sizing.as_secs_f64(),
        writing_s = report.writing.as_secs_f64(),
        fsync_s = report.syncing.as_secs_f64(),
        "snapshot written (mode 0600: it holds the receipt key)"
    );
    Ok(())
}

/// A running server. Dropping it shuts the server down and waits for it.
pub struct ServerHandle {
    shared: Arc<ServerState>,
    threads: Vec<JoinHandle<ShardOutcome>>,
    metrics_addr: Option<SocketAddr>,
    sqs_addr: Option<SocketAddr>,
    /// The lock on `--snapshot`'s path: released when the handle drops,
    /// after the shutdown's save.
    _snapshot_lock: Option<path_lock::PathLock>,
    /// `--log-dir`, where the shutdown writes its checkpoint.
    checkpointing: Option<durable::Checkpointing>,
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.local_addr())
            .field("metrics_addr", &self.metrics_addr)
            .field("sqs_addr", &self.sqs_addr)
            .field("backend", &self.backend())
            .field("shards", &self.threads.len())
            .finish_non_exhaustive()
    }
}

/// Starts a server's graceful shutdown from anywhere (a signal thread).
#[derive(Debug, Clone)]
pub struct ShutdownTrigger(Arc<ServerState>);

impl ShutdownTrigger {
    /// As [`ServerHandle::shutdown`].
    pub fn shutdown(&self) {
        self.0.begin_shutdown();
    }
}

impl ServerHandle {
    /// The address clients connect to (the actual port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The metrics endpoint's address; `None` when metrics are off.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The SQS door's address (`http://` it); `None` when it is off.
    pub fn sqs_addr(&self) -> Option<SocketAddr> {
        self.sqs_addr
    }

    /// The io backend every shard runs on.
    pub fn backend(&self) -> Backend {
        self.shared.backend
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Begins the graceful shutdown and returns at once: the shards stop
    /// accepting, answer waiting receives with an empty batch, answer what
    /// is in flight (within `--shutdown-timeout`), close their connections
    /// and end. [`join`](Self::join) waits for that.
    pub fn shutdown(&self) {
        self.shared.begin_shutdown();
    }

    /// Moves the broker's manual clock (`--clock manual`) forward by `by`
    /// (whole milliseconds) and wakes every shard: leases, delays,
    /// backoffs, long-poll waits and retention that end within it end now.
    /// Every request that arrives after this returns sees the new time.
    /// Returns the manual time elapsed since the server started (every
    /// advance so far) and the broker's time now.
    ///
    /// # Errors
    /// [`NotManual`] when the server runs on the real clock; nothing
    /// changes.
    pub fn advance_clock(&self, by: std::time::Duration) -> Result<(u64, EngineTime), NotManual> {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let moved = self.shared.advance_clock(by_ms)?;
        // Every shard wakes at once; only a server stuck elsewhere would
        // take this long, and then the caller's next request still sees
        // the new time on the shard that serves it.
        if !self
            .shared
            .wait_clock(moved.1.now_ns, std::time::Duration::from_secs(10))
        {
            tracing::warn!("the shards did not catch up with the manual clock within 10 s");
        }
        Ok(moved)
    }

    /// A handle that starts the shutdown from another thread.
    pub fn shutdown_trigger(&self) -> ShutdownTrigger {
        ShutdownTrigger(self.shared.clone())
    }

    /// Waits until every shard has ended (after a shutdown).
    pub fn join(mut self) -> Result<(), ServerError> {
        self.join_inner()
    }

    fn join_inner(&mut self) -> Result<(), ServerError> {
        let mut first_error = None;
        let shards = self.threads.len();
        let mut engines = Vec::with_capacity(shards);
        for (i, t) in self.threads.drain(..).enumerate() {
            let shard = u16::try_from(i).unwrap_or(u16::MAX);
            let e = match t.join() {
                Ok(Ok(Some(engine))) => {
                    engines.push(engine);
                    continue;
                }
                Ok(Ok(None)) => continue,
                Ok(Err(source)) => ServerError::Driver { shard, source },
                Err(_) => ServerError::Panicked { shard },
            };
            tracing::error!(error = %e, "shard failed");
            // Whatever happened, the others must stop too.
            self.shared.begin_shutdown();
            first_error.get_or_insert(e);
        }
        if let Some(path) = self.shared.config.snapshot.clone() {
            let lost = self._snapshot_lock.as_ref().map(path_lock::PathLock::check);
            let saved = if let Some(Err(source)) = lost {
                Err(ServerError::SnapshotLockLost { path, source })
            } else if first_error.is_none() && engines.len() == shards {
                save_snapshot(&path, &mut engines, &self.shared.clock)
            } else {
                Err(ServerError::SnapshotSkipped { path })
            };
            if let Err(e) = saved {
                tracing::error!(error = %e, "snapshot not written");
                first_error.get_or_insert(e);
            }
        }
        if let Some(c) = self.checkpointing.as_mut() {
            let path = c.next();
            let saved = if let Err(source) = c.lock.check() {
                Err(ServerError::SnapshotLockLost { path, source })
            } else if first_error.is_none() && engines.len() == shards {
                save_snapshot(&path, &mut engines, &self.shared.clock).map(|()| c.advance())
            } else {
                Err(ServerError::SnapshotSkipped { path })
            };
            if let Err(e) = saved {
                tracing::error!(
                    error = %e,
                    "no checkpoint written: the next start replays the log instead"
                );
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shared.begin_shutdown();
            let _ = self.join_inner();
        }
    }
}
