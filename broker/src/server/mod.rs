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
//! the shard runs unpinned. The metrics endpoint has its own thread
//! (`sluice-metrics`).
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
//! | `shard_loop.rs` | one shard's event loop: the driver, the engine, the sessions, deadlines, shutdown |
//! | `session/` | one connection's protocol state machine, without a socket: framing, order, back-pressure, heartbeat, closing (`mod.rs`); HELLO and auth (`hello.rs`); serving requests (`serve.rs`); its tests (`tests.rs`) |
//! | `auth_guard.rs` | failed HELLOs by address: the delay before `Unauthorized`, the log's rate limit |
//! | `path_lock.rs` | the exclusive lock on `--snapshot`'s path (`PATH.lock`), held from start to exit |
//! | `bound_leases.rs` | the leases a connection bound to itself, released when it closes |
//! | `convert.rs` | wire requests -> engine ops, engine results -> wire replies |
//! | `transport.rs` | between the driver's bytes and the session: plain text, or TLS (rustls, sans-IO) |
//! | `tls.rs` | the TLS files, read once into rustls's server configuration |
//! | `limits.rs` | every limit of the server: flag bounds and defaults, connection timings |
//! | `shared.rs` | what the threads share: connection count, counters, snapshots |
//! | `telemetry.rs` | lease histograms and the `/metrics` text |
//! | `process.rs` | the `process_*` metrics from `/proc/self` |
//! | `metrics.rs` | Prometheus writer, histograms, the HTTP endpoint |
//! | `signals.rs` | SIGTERM / SIGINT to a graceful shutdown |
//! | `clock.rs` | the only clock reads; the engine's clock, real or manual |

pub mod auth_guard;
mod bound_leases;
pub mod config;
pub mod metrics;

pub mod clock;
mod convert;
pub mod limits;
pub mod path_lock;
mod process;
pub mod session;
mod shard_loop;
mod shared;
pub mod signals;
mod telemetry;
pub mod tls;
pub mod transport;

use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, mpsc};
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;

use self::clock::Clock;
pub use self::clock::{EngineTime, NotManual};
pub use self::config::Config;
use self::config::{ClockChoice, CpuPlacement, IoChoice};
use self::metrics::MetricsServer;
use self::shard_loop::ShardStart;
use self::shared::Shared;
use self::telemetry::LeaseMetrics;
use crate::engine::mesh::doorbell::Wake;
use crate::engine::random::splitmix64;
use crate::engine::shard::{LoadClock, ShardLoad};
use crate::engine::{Registry, RegistryConfig, Shard};
use crate::io::{self, Backend, BackendChoice, DriverConfig, OpenError, Waker};
use crate::snapshot::{self, format::SnapshotError};
use sluice_protocol::{ErrorCode, Reply};
use std::sync::OnceLock;

use self::limits::{DESCRIPTORS_BASE, DESCRIPTORS_PER_SHARD};
pub use self::limits::{REFUSED_CONNECTIONS_MAX, SHARD_RING_CAPACITY};

/// Wakes a shard's io driver when another shard rings its doorbell, once
/// the driver is open: the engines (and their
/// doorbells) are built, and a snapshot loaded into them, before any
/// driver exists. Until the driver is set, nobody needs waking (no shard
/// loop runs).
struct LateWake(Arc<OnceLock<Arc<Waker>>>);

impl Wake for LateWake {
    fn wake(&self) {
        if let Some(w) = self.0.get() {
            w.wake();
        }
    }
}

/// What a shard thread ends with: its engine, to be saved (`None` when it
/// ended before it started serving), or its driver's error.
type ShardOutcome = Result<Option<Shard>, std::io::Error>;

/// What was loaded from a snapshot, for the log line once the file is
/// moved aside.
struct Loaded {
    load: ShardLoad,
    queues: u64,
    bytes: u64,
    took_ns: u64,
}

/// Loads `opened` (the file at `path`) into `engines`, one thread per
/// shard.
fn load_snapshot(
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
fn move_aside(path: &std::path::Path, wall: u64, loaded: &Loaded) -> std::io::Result<()> {
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

/// What a shard thread reports once its driver is open (or failed).
struct Opened {
    waker: Arc<Waker>,
    addr: SocketAddr,
    backend: Backend,
    fallback: Option<String>,
    detail: String,
}

impl Server {
    /// Starts a server: every shard's listener is bound and every thread
    /// running when this returns.
    pub fn start(mut config: Config) -> Result<ServerHandle, StartError> {
        if config.auth_token.is_none()
            && !config.insecure
            && !config.listen.ip().to_canonical().is_loopback()
        {
            return Err(StartError::InsecureListen(config.listen));
        }
        if let Some(token) = &config.auth_token {
            let len = token.as_bytes().len();
            if len < limits::AUTH_TOKEN_BYTES_WARN_BELOW {
                tracing::warn!(
                    token_bytes = len,
                    "the auth token (--token-file) is only {len} bytes: anyone who can reach \
                     the port can guess a short token; use at least {} random bytes, e.g. \
                     `openssl rand -hex 32 > token`",
                    limits::AUTH_TOKEN_BYTES_WARN_BELOW
                );
            }
        }
        if let Some(warning) = config.tls.as_ref().and_then(|t| t.cert_warning.as_ref()) {
            let cert = config.tls.as_ref().map(|t| t.cert.display().to_string());
            tracing::warn!(tls_cert = cert.unwrap_or_default(), "{warning}");
        }
        if config.tls.is_none() && !config.listen.ip().to_canonical().is_loopback() {
            tracing::warn!(
                listen = %config.listen,
                "listening on a non-loopback address without TLS: the auth token and every \
                 message cross the network in clear text (give --tls-cert and --tls-key)"
            );
        }
        if let Some(path) = &config.snapshot {
            // Found out now, not at the shutdown that would need it.
            snapshot::probe_writable(path).map_err(|source| StartError::SnapshotUnwritable {
                path: path.clone(),
                source,
            })?;
        }
        // Held from before the snapshot is read until after it is written.
        let snapshot_lock = match &config.snapshot {
            Some(path) => {
                Some(
                    path_lock::lock(path).map_err(|source| StartError::SnapshotLocked {
                        path: path.clone(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        let snapshot_path = config.snapshot.clone().filter(|p| p.exists());
        if let (Some(path), None) = (&config.snapshot, &snapshot_path) {
            log_missing_snapshot(path);
        }
        let snapshot_error = |path: &std::path::Path, source| StartError::Snapshot {
            path: path.to_owned(),
            source,
        };
        let opened = match &snapshot_path {
            Some(path) => {
                let opened = snapshot::open(snapshot::Source::File(path))
                    .map_err(|e| snapshot_error(path, e))?;
                config.shards = shards_for_snapshot(&config, opened.header.shards);
                opened
                    .check_fit(
                        config.shards,
                        config.memory_max_bytes,
                        config.queues_max as usize,
                    )
                    .map_err(|e| snapshot_error(path, e))?;
                Some(opened)
            }
            None => None,
        };
        let shards = config.shards.max(1);
        let placement = placement(&config.cpus, shards)?;
        check_open_files(&config);
        // Sent before any handshake: on a TLS port, an alert a TLS client
        // can read (an ERROR frame would be a corrupt record to it).
        let shed_reply = match &config.tls {
            None => encoded(&Reply::error(
                ErrorCode::TooManyConnections,
                "the server is out of file descriptors; retry later",
            )),
            Some(_) => Arc::from(&transport::TLS_INTERNAL_ERROR_ALERT[..]),
        };
        let mut choice = match config.io {
            IoChoice::Auto => BackendChoice::Auto,
            IoChoice::Uring => BackendChoice::IoUring,
            IoChoice::Epoll => BackendChoice::Epoll,
        };
        // The engine first: the registry, the shards, and the snapshot
        // loaded into them, all before any listener is bound. Their
        // doorbells wake drivers that do not exist yet: `LateWake`s, set
        // once each driver is open (nothing rings them before that).
        let engine_clock = match config.clock {
            ClockChoice::Real => Clock::Real,
            ClockChoice::Manual => {
                tracing::warn!(
                    "the broker runs on a manual clock (--clock manual, for tests): leases, \
                     delays, waits and retention end only when ADVANCE_CLOCK moves it"
                );
                Clock::manual()
            }
        };
        let start_time = engine_clock.engine_time(clock::now_ns(), clock::wall_ms());
        let (now, wall) = (start_time.now_ns, start_time.wall_ms);
        let mut seed = random_seed();
        let registry_config = RegistryConfig {
            shards,
            seed: splitmix64(&mut seed),
            memory_bytes_max: config.memory_max_bytes,
            queues_max: config.queues_max as usize,
            frame_bytes_max: config.frame_bytes_max,
        };
        let registry = Arc::new(match &opened {
            Some(o) => o.registry(registry_config).map_err(|e| {
                snapshot_error(
                    snapshot_path.as_deref().unwrap_or(std::path::Path::new("")),
                    e,
                )
            })?,
            None => Registry::new(registry_config),
        });
        let late: Vec<Arc<OnceLock<Arc<Waker>>>> =
            (0..shards).map(|_| Arc::new(OnceLock::new())).collect();
        let late_wakers: Vec<Box<dyn Wake>> = late
            .iter()
            .map(|l| Box::new(LateWake(l.clone())) as Box<dyn Wake>)
            .collect();
        let mut engines = snapshot::fresh_shards(
            &registry,
            SHARD_RING_CAPACITY,
            late_wakers,
            splitmix64(&mut seed),
            now,
            wall,
        );
        let loaded = match (&opened, &snapshot_path) {
            (Some(opened), Some(path)) => {
                Some(load_snapshot(path, opened, &mut engines, now, wall)?)
            }
            _ => None,
        };

        let mut listen = config.listen;
        let mut threads: Vec<JoinHandle<ShardOutcome>> = Vec::new();
        let mut starts: Vec<mpsc::Sender<ShardStart>> = Vec::new();
        let mut drivers: Vec<Opened> = Vec::new();
        let abort = |threads: Vec<JoinHandle<_>>, starts: Vec<mpsc::Sender<ShardStart>>| {
            drop(starts);
            for t in threads {
                let _ = t.join();
            }
        };
        for i in 0..shards {
            let (report_tx, report_rx) = mpsc::channel::<Result<Opened, OpenError>>();
            let (start_tx, start_rx) = mpsc::channel::<ShardStart>();
            let driver_config = DriverConfig {
                reuse_port: true,
                // The limit is the shared count's (refused with an error
                // frame past it); the driver's slots also hold the
                // connections closed to make room before HELLO until their
                // close completes.
                connections_max: config
                    .connections_max
                    .saturating_add(config.connections_before_hello_max),
                refused_connections_max: REFUSED_CONNECTIONS_MAX,
                shed_reply: shed_reply.clone(),
                ..DriverConfig::new(listen)
            };
            let pin = placement[usize::from(i)];
            let spawned = thread::Builder::new()
                .name(format!("sluice-shard-{i}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        if let Err(e) = io::pin_current_thread(cpu) {
                            tracing::warn!(shard = i, cpu, error = %e, "shard not pinned to its CPU");
                        }
                    }
                    let o = match io::open(&driver_config, choice) {
                        Ok(o) => o,
                        Err(e) => {
                            let _ = report_tx.send(Err(e));
                            return Ok(None);
                        }
                    };
                    let report = Opened {
                        waker: o.driver.waker(),
                        addr: o.driver.local_addr(),
                        backend: o.driver.backend(),
                        fallback: o.fallback.map(|why| why.to_string()),
                        detail: o.driver.setup_detail().to_owned(),
                    };
                    if report_tx.send(Ok(report)).is_err() {
                        return Ok(None);
                    }
                    // The server gives up starting by dropping the sender.
                    let Ok(start) = start_rx.recv() else {
                        return Ok(None);
                    };
                    shard_loop::run(i, o.driver, start).map(Some)
                });
            let thread = match spawned {
                Ok(t) => t,
                Err(source) => {
                    abort(threads, starts);
                    return Err(StartError::Thread { shard: i, source });
                }
            };
            threads.push(thread);
            starts.push(start_tx);
            match report_rx.recv() {
                Ok(Ok(o)) => {
                    if i == 0 {
                        // The others bind the port shard 0 got, and use its
                        // backend without trying again.
                        listen = o.addr;
                        choice = match o.backend {
                            Backend::IoUring => BackendChoice::IoUring,
                            Backend::Epoll => BackendChoice::Epoll,
                        };
                        if let Some(why) = &o.fallback {
                            tracing::warn!(
                                reason = %why,
                                "IO_URING UNAVAILABLE: FALLING BACK TO EPOLL. io_uring could not \
                                 be set up ({why}), so every shard runs on epoll, which costs \
                                 more CPU per request. In a container this is usually the \
                                 runtime's default seccomp profile blocking the io_uring \
                                 system calls: run with a profile that allows io_uring_setup, \
                                 io_uring_enter and io_uring_register (see deploy/README.md), or \
                                 pass --io epoll to choose epoll and silence this warning. \
                                 /metrics shows sluice_io_backend_fallback 1."
                            );
                        }
                        tracing::debug!(backend = %o.backend, detail = %o.detail, "io backend");
                    }
                    drivers.push(o);
                }
                Ok(Err(source)) => {
                    abort(threads, starts);
                    return Err(StartError::Io { shard: i, source });
                }
                Err(_) => {
                    abort(threads, starts);
                    return Err(StartError::Thread {
                        shard: i,
                        source: std::io::Error::other("the shard thread ended while starting"),
                    });
                }
            }
        }
        // Every listener is bound: only now is the loaded file moved aside
        // (a start that fails before this leaves it where it was).
        if let (Some(load), Some(path)) = (loaded, &snapshot_path) {
            if let Err(source) = move_aside(path, wall, &load) {
                abort(threads, starts);
                return Err(StartError::SnapshotMove {
                    path: path.clone(),
                    source,
                });
            }
            prune_loaded(path, config.snapshot_keep);
        }
        let backend = drivers.first().map_or(Backend::Epoll, |o| o.backend);
        for (l, o) in late.iter().zip(&drivers) {
            let _ = l.set(o.waker.clone());
        }
        let io_fallback = drivers.first().and_then(|o| o.fallback.clone());
        let lease: Vec<LeaseMetrics> = (0..shards).map(|_| LeaseMetrics::new()).collect();
        let shared = Arc::new(Shared::new(
            config,
            registry.clone(),
            backend,
            io_fallback,
            listen,
            drivers
                .iter()
                .zip(&lease)
                .map(|(o, l)| (o.waker.clone(), l.readers()))
                .collect(),
            engine_clock,
        ));
        for ((mut engine, lease), start) in engines.into_iter().zip(lease).zip(&starts) {
            let doorbell = engine.doorbell().clone();
            engine.set_lease_observer(Box::new(lease));
            // A shard that is waiting on its channel takes this; one that
            // died is reported by join.
            let _ = start.send(ShardStart {
                engine,
                doorbell,
                shared: shared.clone(),
            });
        }
        drop(starts);

        let metrics = match shared.config.metrics {
            None => None,
            Some(addr) => {
                let source = telemetry::ServerMetrics(shared.clone());
                match MetricsServer::start(addr, source) {
                    Ok(m) => Some(m),
                    Err(source) => {
                        shared.begin_shutdown();
                        for t in threads {
                            let _ = t.join();
                        }
                        return Err(StartError::Metrics { addr, source });
                    }
                }
            }
        };
        tracing::info!(
            listen = %listen,
            metrics = %metrics.as_ref().map_or("off".to_owned(), |m| m.local_addr().to_string()),
            shards,
            cpus = %describe_placement(&placement),
            backend = %backend,
            snapshot = %shared.config.snapshot.as_ref().map_or_else(
                || "none: a restart loses every queue and message".to_owned(),
                |p| format!("{} (written on a graceful shutdown; a crash loses what is held)", p.display())
            ),
            "sluice is serving (everything is in memory)"
        );
        Ok(ServerHandle {
            metrics_addr: metrics.as_ref().map(MetricsServer::local_addr),
            shared,
            threads,
            metrics,
            _snapshot_lock: snapshot_lock,
        })
    }
}

/// The shard count to start with when a snapshot of `file_shards` shards
/// is there: the snapshot's own when `--shards` was not given (a changed
/// CPU set or CPU limit must not stop a restart), else `--shards`, which
/// [`snapshot::Opened::check_fit`] then refuses if it differs.
fn shards_for_snapshot(config: &Config, file_shards: u16) -> u16 {
    if config.shards_given || file_shards == config.shards {
        return config.shards;
    }
    if !(1..=config::SHARDS_MAX).contains(&file_shards) {
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
    let shards = shards_for_snapshot(config, opened.header.shards);
    opened.check_fit(shards, config.memory_max_bytes, config.queues_max as usize)?;
    snapshot::check(source, wall_ms)
}

/// Says why `--snapshot`'s file is not there: a first start, or a last stop
/// that wrote none (a crash), which a `PATH.loaded-MS` file beside it shows.
fn log_missing_snapshot(path: &std::path::Path) {
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
fn prune_loaded(path: &std::path::Path, keep: u32) {
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

/// The CPU each shard is pinned to (`None`: unpinned), from `--cpus` and
/// the CPUs the calling thread may use.
fn placement(cpus: &CpuPlacement, shards: u16) -> Result<Vec<Option<usize>>, StartError> {
    let shards = usize::from(shards);
    let allowed = io::allowed_cpus();
    match cpus {
        CpuPlacement::None => Ok(vec![None; shards]),
        CpuPlacement::Auto => match allowed {
            Ok(allowed) => Ok((0..shards).map(|i| allowed.get(i).copied()).collect()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read this process's CPUs; shards run unpinned");
                Ok(vec![None; shards])
            }
        },
        CpuPlacement::List(list) => {
            if let Ok(allowed) = &allowed {
                if let Some(&cpu) = list.iter().find(|c| !allowed.contains(c)) {
                    return Err(StartError::CpuNotAllowed {
                        cpu,
                        allowed: CpuPlacement::List(allowed.clone()).to_string(),
                    });
                }
            }
            Ok((0..shards).map(|i| list.get(i).copied()).collect())
        }
    }
}

/// "0,1" for shards pinned to CPUs 0 and 1; `-` for an unpinned shard.
fn describe_placement(placement: &[Option<usize>]) -> String {
    let cpus: Vec<String> = placement
        .iter()
        .map(|p| p.map_or_else(|| "-".to_owned(), |c| c.to_string()))
        .collect();
    cpus.join(",")
}

/// Raises the open-files limit to the hard limit and warns when
/// `--max-connections` does not fit in it.
fn check_open_files(config: &Config) {
    let limit = match io::raise_open_files_limit() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open-files limit");
            return;
        }
    };
    if limit.soft > limit.before {
        tracing::debug!(
            from = limit.before,
            to = limit.soft,
            "open-files limit raised"
        );
    }
    let own = DESCRIPTORS_BASE + DESCRIPTORS_PER_SHARD * u64::from(config.shards.max(1));
    let need = u64::from(config.connections_max) + own;
    if need > limit.soft {
        tracing::warn!(
            limit = limit.soft,
            hard = limit.hard,
            max_connections = config.connections_max,
            "the open-files limit ({}) is below what --max-connections {} needs (about {need}): \
             connections beyond about {} will be refused with an error; raise the hard limit \
             (ulimit -Hn, systemd LimitNOFILE=) or lower --max-connections",
            limit.soft,
            config.connections_max,
            limit.soft.saturating_sub(own),
        );
    }
}

/// A reply's bytes as one frame with request id 0.
fn encoded(reply: &Reply) -> Arc<[u8]> {
    let mut buf = bytes::BytesMut::with_capacity(reply.encoded_len());
    match reply.encode(0, &mut buf) {
        Ok(()) => Arc::from(&buf[..]),
        // Only an error frame too large for the protocol fails; an empty
        // refusal still closes the connection.
        Err(_) => Arc::from(&[][..]),
    }
}

/// A seed for the run (receipt key, message ids): from the OS, so receipts
/// of an earlier run fail their check and ids never repeat across runs.
fn random_seed() -> u64 {
    let mut buf = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok()
    {
        return u64::from_le_bytes(buf);
    }
    // No /dev/urandom: the std hasher's per-process random keys, and the
    // time.
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(clock::wall_ms());
    h.write_u32(std::process::id());
    h.finish()
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
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<ShardOutcome>>,
    metrics: Option<MetricsServer>,
    metrics_addr: Option<SocketAddr>,
    /// The lock on `--snapshot`'s path: released when the handle drops,
    /// after the shutdown's save.
    _snapshot_lock: Option<path_lock::PathLock>,
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.local_addr())
            .field("metrics_addr", &self.metrics_addr)
            .field("backend", &self.backend())
            .field("shards", &self.threads.len())
            .finish_non_exhaustive()
    }
}

/// Starts a server's graceful shutdown from anywhere (a signal thread).
#[derive(Debug, Clone)]
pub struct ShutdownTrigger(Arc<Shared>);

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

    /// Waits until every shard has ended (after a shutdown), then stops the
    /// metrics endpoint.
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
        if let Some(m) = self.metrics.take() {
            m.shutdown();
        }
        if let Some(path) = self.shared.config.snapshot.clone() {
            let saved = if first_error.is_none() && engines.len() == shards {
                save_snapshot(&path, &mut engines, &self.shared.clock)
            } else {
                Err(ServerError::SnapshotSkipped { path })
            };
            if let Err(e) = saved {
                tracing::error!(error = %e, "snapshot not written");
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
