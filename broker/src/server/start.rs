//! Starting a server: the checks and warnings on the configuration, the
//! snapshot (its lock, its shard count, loading it), the engines, one
//! thread per shard with its io driver, the metrics endpoint. Everything
//! that can fail is done before the loaded snapshot is moved aside, so a
//! start that fails leaves the file where it was.

use super::durable::DurableStart;
use super::shard_loop::ShardLog;
use super::snapshot_at_start::{Loaded, SnapshotAtStart, load_snapshot, move_aside, prune_loaded};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::OnceLock;

use sluice_protocol::{ErrorCode, Reply};

use super::clock::{self, Clock};
use super::config::{ClockChoice, CpuPlacement, Durability, IoChoice};
use super::limits::{
    self, DESCRIPTORS_BASE, DESCRIPTORS_PER_SHARD, REFUSED_CONNECTIONS_MAX, SHARD_RING_CAPACITY,
};
use super::metrics::telemetry::LeaseMetrics;
use super::shard_loop::{self, ShardStart};
use super::shared::ServerState;
use super::{Config, Server, ServerHandle, ShardOutcome, StartError, transport};
use crate::engine::mesh::doorbell::Wake;
use crate::engine::random::splitmix64;
use crate::engine::{Registry, RegistryConfig, Shard};
use crate::io::ListenerId;
use crate::io::{self, Backend, BackendChoice, DriverConfig, ListenerConfig, OpenError, Waker};
use crate::server::limits::METRICS_CONNECTIONS_MAX;
use crate::snapshot;
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, mpsc};

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

/// What a shard thread reports once its driver is open (or failed).
struct Opened {
    waker: Arc<Waker>,
    addr: SocketAddr,
    /// The SQS door's address, when it is open.
    sqs_addr: Option<SocketAddr>,
    /// The metrics endpoint's address, when it is open.
    metrics_addr: Option<SocketAddr>,
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
        warn_about(&config);
        check_ports_free(&config)?;
        let snap = SnapshotAtStart::open(&mut config)?;
        let mut durable = DurableStart::open(&mut config)?;
        let shards = config.shards.max(1);
        let placement = placement(&config.cpus, shards)?;
        check_open_files(&config);
        let engine_clock = engine_clock(&config);
        let mut engines = Engines::build(&config, shards, &snap, durable.as_mut(), &engine_clock)?;
        let spawned = spawn_shards(&config, shards, &placement)?;
        // Every listener is bound: only now is the loaded file moved aside
        // (a start that fails before this leaves it where it was).
        if let (Some(load), Some(path)) = (engines.loaded.take(), &snap.path) {
            if let Err(source) = move_aside(path, engines.wall, &load) {
                spawned.abort();
                return Err(StartError::SnapshotMove {
                    path: path.clone(),
                    source,
                });
            }
            prune_loaded(path, config.snapshot_keep);
        }
        let listen = spawned.listen;
        let sqs_addr = spawned.sqs_listen;
        let metrics_addr = spawned.metrics_listen;
        let backend = spawned
            .drivers
            .first()
            .map_or(Backend::Epoll, |o| o.backend);
        for (l, o) in engines.late.iter().zip(&spawned.drivers) {
            let _ = l.set(o.waker.clone());
        }
        let io_fallback = spawned.drivers.first().and_then(|o| o.fallback.clone());
        let lease: Vec<LeaseMetrics> = (0..shards).map(|_| LeaseMetrics::new()).collect();
        let shared = Arc::new(ServerState::new(
            config,
            engines.registry.clone(),
            backend,
            io_fallback,
            listen,
            spawned
                .drivers
                .iter()
                .zip(&lease)
                .map(|(o, l)| (o.waker.clone(), l.readers()))
                .collect(),
            engine_clock,
        ));
        let Spawned {
            threads, starts, ..
        } = spawned;
        let mut logs = engines.logs.into_iter();
        for ((mut engine, lease), start) in engines.shards.into_iter().zip(lease).zip(&starts) {
            let doorbell = engine.doorbell().clone();
            engine.set_lease_observer(Box::new(lease));
            // A shard that is waiting on its channel takes this; one that
            // died is reported by join.
            let _ = start.send(ShardStart {
                engine,
                doorbell,
                shared: shared.clone(),
                log: logs.next(),
            });
        }
        drop(starts);
        tracing::info!(
            listen = %listen,
            sqs = %sqs_addr.map_or("off".to_owned(), |a| format!("http://{a}")),
            metrics = %metrics_addr.map_or("off".to_owned(), |a| a.to_string()),
            shards,
            cpus = %describe_placement(&placement),
            backend = %backend,
            snapshot = %shared.config.snapshot.as_ref().map_or_else(
                || "none".to_owned(),
                |p| format!("{} (written on a graceful shutdown; a crash loses what is held)", p.display())
            ),
            durability = %describe_durability(&shared.config),
            "sluice is serving (everything is in memory)"
        );
        Ok(ServerHandle {
            metrics_addr,
            sqs_addr,
            shared,
            threads,
            _snapshot_lock: snap.lock,
            checkpointing: durable.map(DurableStart::into_checkpointing),
        })
    }
}

/// The start's log line on what survives a crash.
fn describe_durability(config: &Config) -> String {
    let dir = config
        .log_dir
        .as_ref()
        .map_or(String::new(), |d| d.display().to_string());
    match config.durability {
        Durability::None if config.snapshot.is_some() => {
            "none: a crash loses what is held".to_owned()
        }
        Durability::None => "none: a restart loses every queue and message".to_owned(),
        Durability::Batch => format!(
            "batch: logged to {dir}, synced every {:?} (a crash loses at most what was \
             acknowledged within it)",
            config.log_sync_interval
        ),
        Durability::Always => {
            format!("always: logged to {dir}, each change synced before it is answered")
        }
    }
}

/// What the configuration deserves a warning for: a short token, a TLS
/// certificate clients will refuse, clear text off loopback.
fn warn_about(config: &Config) {
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
    if let Some((path, _)) = config.sqs.as_ref().and_then(|s| s.credentials.as_ref()) {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map(|m| m.permissions().mode());
        if mode.is_ok_and(|m| m & 0o077 != 0) {
            tracing::warn!(
                sqs_credentials = %path.display(),
                "the SQS credentials file can be read by others than its owner: it holds \
                 secrets; chmod 600 it"
            );
        }
    }
    if config.tls.is_none() && !config.listen.ip().to_canonical().is_loopback() {
        tracing::warn!(
            listen = %config.listen,
            "listening on a non-loopback address without TLS: the auth token and every \
             message cross the network in clear text (give --tls-cert and --tls-key)"
        );
    }
}

/// The engine's clock, `--clock`.
fn engine_clock(config: &Config) -> Clock {
    match config.clock {
        ClockChoice::Real => Clock::Real,
        ClockChoice::Manual => {
            tracing::warn!(
                "the broker runs on a manual clock (--clock manual, for tests): leases, \
                 delays, waits and retention end only when ADVANCE_CLOCK moves it"
            );
            Clock::manual()
        }
    }
}

/// The engine, built before any listener is bound: the registry, the
/// shards, and the snapshot loaded into them. Their doorbells wake drivers
/// that do not exist yet: `LateWake`s, set once each driver is open
/// (nothing rings them before that).
struct Engines {
    registry: Arc<Registry>,
    shards: Vec<Shard>,
    late: Vec<Arc<OnceLock<Arc<Waker>>>>,
    loaded: Option<Loaded>,
    /// The shards' write-ahead logs, under `--durability batch|always`.
    logs: Vec<ShardLog>,
    /// The wall-clock time of the start (the loaded file's new name).
    wall: u64,
}

impl Engines {
    fn build(
        config: &Config,
        shards: u16,
        snap: &SnapshotAtStart,
        durable: Option<&mut DurableStart>,
        engine_clock: &Clock,
    ) -> Result<Engines, StartError> {
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
        let registry = Arc::new(match (durable.as_deref(), &snap.opened, &snap.path) {
            (Some(d), _, _) => d.registry(registry_config)?,
            (None, Some(o), Some(path)) => {
                o.registry(registry_config)
                    .map_err(|source| StartError::Snapshot {
                        path: path.clone(),
                        source,
                    })?
            }
            _ => Registry::new(registry_config),
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
        let loaded = match (&snap.opened, &snap.path) {
            (Some(opened), Some(path)) => {
                Some(load_snapshot(path, opened, &mut engines, now, wall)?)
            }
            _ => None,
        };
        let logs = match durable {
            Some(d) => d.load_shards(&registry, &mut engines, config, engine_clock, now, wall)?,
            None => Vec::new(),
        };
        Ok(Engines {
            registry,
            shards: engines,
            late,
            loaded,
            logs,
            wall,
        })
    }
}

/// The shard threads, each with its io driver open and waiting for its
/// [`ShardStart`].
struct Spawned {
    threads: Vec<JoinHandle<ShardOutcome>>,
    starts: Vec<mpsc::Sender<ShardStart>>,
    drivers: Vec<Opened>,
    /// The address bound (the actual port when 0 was asked for).
    listen: SocketAddr,
    /// The SQS door's address bound, when it is open.
    sqs_listen: Option<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
}

impl Spawned {
    /// Gives up starting: the threads end without serving.
    fn abort(self) {
        drop(self.starts);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A shard's driver: the binary port's listener, then the SQS door's
/// (`shard_loop::SQS_LISTENER`) and the metrics endpoint's
/// (`shard_loop::metrics_listener`) when open, at the addresses `spawned`
/// holds (shard 0's actual ports once it bound).
fn driver_config(config: &Config, spawned: &Spawned, shed_reply: &Arc<[u8]>) -> DriverConfig {
    // A small constant: within u32.
    let metrics_max = config.metrics.map_or(0, |_| METRICS_CONNECTIONS_MAX as u32);
    DriverConfig {
        reuse_port: true,
        // The limit is the shared count's (refused with an error frame
        // past it); the driver's slots also hold the connections closed to
        // make room before HELLO until their close completes, and the
        // metrics endpoint's.
        connections_max: config
            .connections_max
            .saturating_add(config.connections_before_hello_max)
            .saturating_add(metrics_max),
        refused_connections_max: REFUSED_CONNECTIONS_MAX,
        shed_reply: shed_reply.clone(),
        // The SQS door is HTTPS on a TLS server, so its shed reply is the
        // binary port's TLS alert then; the metrics endpoint is plain HTTP.
        more_listeners: [
            spawned.sqs_listen.map(|addr| (addr, config.tls.is_some())),
            spawned.metrics_listen.map(|addr| (addr, false)),
        ]
        .into_iter()
        .flatten()
        .map(|(addr, tls)| ListenerConfig {
            addr,
            shed_reply: if tls {
                shed_reply.clone()
            } else {
                Arc::from(&shard_loop::sqs_unavailable()[..])
            },
        })
        .collect(),
        ..DriverConfig::new(spawned.listen)
    }
}

/// Starts a thread per shard, pinned as `placement` says, and opens its io
/// driver on it; shard 0 binds first and the others take its port and its
/// backend.
fn spawn_shards(
    config: &Config,
    shards: u16,
    placement: &[Option<usize>],
) -> Result<Spawned, StartError> {
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
    let mut spawned = Spawned {
        threads: Vec::new(),
        starts: Vec::new(),
        drivers: Vec::new(),
        listen: config.listen,
        sqs_listen: config.sqs.as_ref().map(|sqs| sqs.listen),
        metrics_listen: config.metrics,
    };
    // The SQS door's listener and the metrics endpoint's, when open.
    let sqs_listener = spawned.sqs_listen.map(|_| shard_loop::SQS_LISTENER);
    let metrics_listener = spawned
        .metrics_listen
        .map(|_| shard_loop::metrics_listener(sqs_listener.is_some()));
    for i in 0..shards {
        let driver_config = driver_config(config, &spawned, &shed_reply);
        let (report_rx, start_tx, thread) = match spawn_shard(
            i,
            placement[usize::from(i)],
            driver_config,
            choice,
            (sqs_listener, metrics_listener),
        ) {
            Ok(s) => s,
            Err(source) => {
                spawned.abort();
                return Err(StartError::Thread { shard: i, source });
            }
        };
        spawned.threads.push(thread);
        spawned.starts.push(start_tx);
        match report_rx.recv() {
            Ok(Ok(o)) => {
                if i == 0 {
                    // The others bind the port shard 0 got, and use its
                    // backend without trying again.
                    spawned.listen = o.addr;
                    spawned.sqs_listen = o.sqs_addr;
                    spawned.metrics_listen = o.metrics_addr;
                    choice = match o.backend {
                        Backend::IoUring => BackendChoice::IoUring,
                        Backend::Epoll => BackendChoice::Epoll,
                    };
                    if let Some(why) = &o.fallback {
                        warn_fallback(why);
                    }
                    tracing::debug!(backend = %o.backend, detail = %o.detail, "io backend");
                }
                spawned.drivers.push(o);
            }
            Ok(Err(source)) => {
                spawned.abort();
                return Err(match source {
                    OpenError::Listen { addr, error }
                        if error.kind() == std::io::ErrorKind::AddrInUse =>
                    {
                        let sqs = config.sqs.as_ref().is_some_and(|s| s.listen == addr);
                        let flag = if sqs {
                            "--sqs-listen"
                        } else if config.metrics == Some(addr) {
                            "--metrics-addr"
                        } else {
                            "--listen"
                        };
                        StartError::PortTaken { flag, addr }
                    }
                    OpenError::Listen { addr, error } if config.metrics == Some(addr) => {
                        StartError::Metrics {
                            addr,
                            source: error,
                        }
                    }
                    source => StartError::Io { shard: i, source },
                });
            }
            Err(_) => {
                spawned.abort();
                return Err(StartError::Thread {
                    shard: i,
                    source: std::io::Error::other("the shard thread ended while starting"),
                });
            }
        }
    }
    Ok(spawned)
}

/// Shard `i`'s thread: pinned to `pin`, it opens its driver, reports it,
/// then waits for its [`ShardStart`] (a dropped sender: the server gave up
/// starting) and runs the shard loop.
#[allow(
    clippy::type_complexity,
    reason = "the two channels and the thread of one shard, used once"
)]
fn spawn_shard(
    i: u16,
    pin: Option<usize>,
    driver_config: DriverConfig,
    choice: BackendChoice,
    (sqs_listener, metrics_listener): (Option<ListenerId>, Option<ListenerId>),
) -> std::io::Result<(
    mpsc::Receiver<Result<Opened, OpenError>>,
    mpsc::Sender<ShardStart>,
    JoinHandle<ShardOutcome>,
)> {
    let (report_tx, report_rx) = mpsc::channel::<Result<Opened, OpenError>>();
    let (start_tx, start_rx) = mpsc::channel::<ShardStart>();
    let thread = thread::Builder::new()
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
                sqs_addr: sqs_listener.and_then(|l| o.driver.listener_addr(l)),
                metrics_addr: metrics_listener.and_then(|l| o.driver.listener_addr(l)),
                backend: o.driver.backend(),
                fallback: o.fallback.map(|why| why.to_string()),
                detail: o.driver.setup_detail().to_owned(),
            };
            if report_tx.send(Ok(report)).is_err() {
                return Ok(None);
            }
            let Ok(start) = start_rx.recv() else {
                return Ok(None);
            };
            shard_loop::run(i, o.driver, start).map(Some)
        })?;
    Ok((report_rx, start_tx, thread))
}

/// The warning no one may miss: io_uring could not be set up (`why`).
fn warn_fallback(why: &str) {
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

/// Refuses to start when another process listens on one of the broker's
/// ports (port 0 picks a free one, so it is not looked at).
///
/// The shards bind their listeners with `SO_REUSEPORT`, which lets any
/// process of the same user join the group and take a share of the
/// connections, so the binding alone would not notice a second broker. A
/// listener bound first without `SO_REUSEPORT` fails there whenever any
/// socket listens on the port; it is closed at once and the shards bind
/// after it. Two brokers starting within that moment could still both
/// succeed.
fn check_ports_free(config: &Config) -> Result<(), StartError> {
    let ports = [
        ("--listen", Some(config.listen)),
        ("--sqs-listen", config.sqs.as_ref().map(|s| s.listen)),
        ("--metrics-addr", config.metrics),
    ];
    for (flag, addr) in ports {
        let Some(addr) = addr.filter(|a| a.port() != 0) else {
            continue;
        };
        match std::net::TcpListener::bind(addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(StartError::PortTaken { flag, addr });
            }
            // Any other failure is the real bind's to report.
            _ => {}
        }
    }
    Ok(())
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
