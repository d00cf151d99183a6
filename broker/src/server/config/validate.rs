//! From merged settings to a validated [`Config`]: defaults, ranges and
//! the relations between settings, checked once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sluice_protocol::limits as wire;
use sluice_protocol::units::{format_bytes, format_duration};

use super::{
    AuthToken, Config, ConfigError, CpuPlacement, Durability, Host, IoChoice, MemoryMaxOrigin,
    MetricsAddr, RawArgs, Settings, SqsSettings,
};
use crate::server::limits::{
    CONNECTIONS_BEFORE_HELLO_MAX_DEFAULT, CONNECTIONS_MAX_DEFAULT, CONNECTIONS_MAX_LIMIT,
    FRAME_BYTES_MAX_MIN, FRAME_TIMEOUT_DEFAULT, HELLO_FRAME_BYTES_MAX_MIN, HELLO_TIMEOUT_DEFAULT,
    IDLE_SPIN_DEFAULT, IDLE_SPIN_MAX, LISTEN_DEFAULT, LOG_DEFAULT, LOG_SYNC_INTERVAL_DEFAULT,
    LOG_SYNC_INTERVAL_MAX, LOG_SYNC_INTERVAL_MIN, MEMORY_MAX_FALLBACK, MEMORY_MAX_LIMIT,
    MEMORY_MAX_MIN, METRICS_ADDR_DEFAULT, MIB, QUEUES_MAX_DEFAULT, QUEUES_MAX_LIMIT,
    REQUESTS_IN_FLIGHT_MAX_DEFAULT, REQUESTS_IN_FLIGHT_MAX_LIMIT, SERVER_SHARDS_MAX,
    SHUTDOWN_TIMEOUT_DEFAULT, SHUTDOWN_TIMEOUT_MAX, SNAPSHOT_KEEP_DEFAULT, SNAPSHOT_KEEP_MAX,
    SQS_LISTEN_DEFAULT, TIMEOUT_MAX, TIMEOUT_MIN, UNSENT_BYTES_MAX_DEFAULT, UNSENT_BYTES_MAX_LIMIT,
    UNSENT_BYTES_TOTAL_MAX_DEFAULT, UNSENT_BYTES_TOTAL_MAX_LIMIT,
};
use crate::server::tls::TlsSettings;

/// Checks `value` against `min ..= max`.
fn in_range<T: PartialOrd + Copy>(
    flag: &'static str,
    value: T,
    min: T,
    max: T,
    show: impl Fn(T) -> String,
) -> Result<T, ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::OutOfRange {
            flag,
            value: show(value),
            min: show(min),
            max: show(max),
        });
    }
    Ok(value)
}

/// A count in `min ..= max`, narrowed to `u32`.
fn count_u32(flag: &'static str, value: u64, min: u32, max: u32) -> Result<u32, ConfigError> {
    let value = in_range(flag, value, u64::from(min), u64::from(max), |n| {
        n.to_string()
    })?;
    // In range of a u32 bound, so it fits.
    Ok(u32::try_from(value).unwrap_or(max))
}

/// A size in `min ..= max`, narrowed to `u32`.
fn size_u32(flag: &'static str, value: u64, min: u32, max: u32) -> Result<u32, ConfigError> {
    let value = in_range(flag, value, u64::from(min), u64::from(max), format_bytes)?;
    Ok(u32::try_from(value).unwrap_or(max))
}

impl Config {
    /// Validates `raw` on this host: reads `--config` and the token file,
    /// detects cores and memory for the defaults.
    pub fn from_args(raw: RawArgs) -> Result<Config, ConfigError> {
        Config::from_args_on(raw, &Host::detect())
    }

    /// Validates `raw` with the defaults of `host`.
    pub fn from_args_on(raw: RawArgs, host: &Host) -> Result<Config, ConfigError> {
        let file = match &raw.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        Config::from_settings(raw.settings.or(file), host)
    }

    /// Validates merged settings, filling in the defaults of `host`.
    pub fn from_settings(s: Settings, host: &Host) -> Result<Config, ConfigError> {
        let (shards, shards_given, cpus) = shards_and_cpus(&s, host)?;
        let c = ConnectionLimits::from_settings(&s)?;
        let (memory_max_bytes, memory_max_origin) = memory_max(&s, host)?;
        let queues_max = count_u32(
            "queues-max",
            s.queues_max.unwrap_or(QUEUES_MAX_DEFAULT.into()),
            1,
            QUEUES_MAX_LIMIT,
        )?;
        let shutdown_timeout = in_range(
            "shutdown-timeout",
            s.shutdown_timeout.unwrap_or(SHUTDOWN_TIMEOUT_DEFAULT),
            Duration::ZERO,
            SHUTDOWN_TIMEOUT_MAX,
            format_duration,
        )?;

        let idle_spin = in_range(
            "idle-spin",
            s.idle_spin.unwrap_or(IDLE_SPIN_DEFAULT),
            Duration::ZERO,
            IDLE_SPIN_MAX,
            format_duration,
        )?;

        let snapshot_keep = count_u32(
            "snapshot-keep",
            s.snapshot_keep.unwrap_or(SNAPSHOT_KEEP_DEFAULT.into()),
            0,
            SNAPSHOT_KEEP_MAX,
        )?;

        let (durability, log_dir, log_sync_interval) = durability(&s)?;

        let log_filter = s.log.clone().unwrap_or_else(|| LOG_DEFAULT.to_owned());
        check_log_filter(&log_filter)?;

        let (listen, metrics) = addresses(&s)?;
        let (auth_token, tls, insecure) = security(&s, listen)?;
        let sqs = sqs_door(&s, listen, metrics, insecure)?;

        Ok(Config {
            listen,
            shards,
            shards_given,
            cpus,
            io: s.io.unwrap_or(IoChoice::Auto),
            clock: s.clock.unwrap_or_default(),
            auth_token,
            tls,
            insecure,
            metrics,
            sqs,
            connections_max: c.connections_max,
            connections_before_hello_max: c.connections_before_hello_max,
            frame_bytes_max: c.frame_bytes_max,
            hello_frame_bytes_max: c.hello_frame_bytes_max,
            hello_timeout: c.hello_timeout,
            frame_timeout: c.frame_timeout,
            requests_in_flight_max: c.requests_in_flight_max,
            unsent_bytes_max: c.unsent_bytes_max,
            unsent_bytes_total_max: c.unsent_bytes_total_max,
            memory_max_bytes,
            memory_max_origin,
            queues_max,
            log_filter,
            shutdown_timeout,
            idle_spin,
            snapshot: s.snapshot,
            snapshot_keep,
            durability,
            log_dir,
            log_sync_interval,
        })
    }
}

/// `--durability`, `--log-dir` (given exactly when the durability is not
/// none, and not with `--snapshot`) and `--log-sync-interval`.
fn durability(s: &Settings) -> Result<(Durability, Option<PathBuf>, Duration), ConfigError> {
    let durability = s.durability.unwrap_or_default();
    let interval = in_range(
        "log-sync-interval",
        s.log_sync_interval.unwrap_or(LOG_SYNC_INTERVAL_DEFAULT),
        LOG_SYNC_INTERVAL_MIN,
        LOG_SYNC_INTERVAL_MAX,
        format_duration,
    )?;
    match (durability, &s.log_dir) {
        (Durability::None, None) => Ok((durability, None, interval)),
        (Durability::None, Some(_)) => Err(ConfigError::Durability(
            "--log-dir is the folder of --durability batch or always: give one of them, \
             or leave --log-dir out",
        )),
        (_, None) => Err(ConfigError::Durability(
            "--durability batch and always write their log to --log-dir PATH: give one",
        )),
        (_, Some(_)) if s.snapshot.is_some() => Err(ConfigError::Durability(
            "--snapshot is for --durability none: with a log, the checkpoint a graceful \
             shutdown writes is kept in --log-dir",
        )),
        (_, Some(dir)) => Ok((durability, Some(dir.clone()), interval)),
    }
}

/// `--shards` (and whether it was given) and `--cpus`, which sets the
/// default shard count when it lists CPUs.
fn shards_and_cpus(s: &Settings, host: &Host) -> Result<(u16, bool, CpuPlacement), ConfigError> {
    let cpus = s.cpus.clone().unwrap_or(CpuPlacement::Auto);
    let cores = match &cpus {
        CpuPlacement::List(list) => list.len(),
        _ => host.cores,
    };
    let shards_default = cores.clamp(1, usize::from(SERVER_SHARDS_MAX)) as u64;
    let shards_given = s.shards.is_some();
    let shards = s.shards.unwrap_or(shards_default);
    let shards = in_range("shards", shards, 1, u64::from(SERVER_SHARDS_MAX), |n| {
        n.to_string()
    })?;
    let shards = u16::try_from(shards).unwrap_or(SERVER_SHARDS_MAX);
    if let CpuPlacement::List(list) = &cpus {
        if list.len() < usize::from(shards) {
            return Err(ConfigError::FewerCpusThanShards {
                cpus: cpus.to_string(),
                count: list.len(),
                shards,
            });
        }
    }
    Ok((shards, shards_given, cpus))
}

/// The limits of a connection and of all of them.
struct ConnectionLimits {
    connections_max: u32,
    connections_before_hello_max: u32,
    frame_bytes_max: u32,
    hello_frame_bytes_max: u32,
    hello_timeout: Duration,
    frame_timeout: Duration,
    requests_in_flight_max: u32,
    unsent_bytes_max: u64,
    unsent_bytes_total_max: u64,
}

impl ConnectionLimits {
    fn from_settings(s: &Settings) -> Result<ConnectionLimits, ConfigError> {
        let connections_max = count_u32(
            "max-connections",
            s.max_connections.unwrap_or(CONNECTIONS_MAX_DEFAULT.into()),
            1,
            CONNECTIONS_MAX_LIMIT,
        )?;
        let connections_before_hello_max = count_u32(
            "max-connections-before-hello",
            s.max_connections_before_hello.unwrap_or(
                CONNECTIONS_BEFORE_HELLO_MAX_DEFAULT
                    .min(connections_max)
                    .into(),
            ),
            1,
            connections_max,
        )?;
        let frame_bytes_max = size_u32(
            "frame-bytes-max",
            s.frame_bytes_max
                .unwrap_or(wire::FRAME_BYTES_MAX_DEFAULT.into()),
            FRAME_BYTES_MAX_MIN,
            wire::FRAME_BYTES_MAX_LIMIT,
        )?;
        let hello_frame_bytes_max = size_u32(
            "hello-frame-bytes-max",
            s.hello_frame_bytes_max
                .unwrap_or(wire::FRAME_BYTES_MAX_BEFORE_HELLO.into()),
            HELLO_FRAME_BYTES_MAX_MIN,
            wire::FRAME_BYTES_MAX_LIMIT,
        )?;
        if hello_frame_bytes_max > frame_bytes_max {
            return Err(ConfigError::HelloFrameAboveFrame {
                hello: format_bytes(hello_frame_bytes_max.into()),
                frame: format_bytes(frame_bytes_max.into()),
            });
        }
        let hello_timeout = in_range(
            "hello-timeout",
            s.hello_timeout.unwrap_or(HELLO_TIMEOUT_DEFAULT),
            TIMEOUT_MIN,
            TIMEOUT_MAX,
            format_duration,
        )?;
        let frame_timeout = in_range(
            "frame-timeout",
            s.frame_timeout.unwrap_or(FRAME_TIMEOUT_DEFAULT),
            TIMEOUT_MIN,
            TIMEOUT_MAX,
            format_duration,
        )?;
        let requests_in_flight_max = count_u32(
            "requests-in-flight-max",
            s.requests_in_flight_max
                .unwrap_or(REQUESTS_IN_FLIGHT_MAX_DEFAULT.into()),
            1,
            REQUESTS_IN_FLIGHT_MAX_LIMIT,
        )?;
        let unsent_bytes_max = in_range(
            "unsent-bytes-max",
            s.unsent_bytes_max.unwrap_or(UNSENT_BYTES_MAX_DEFAULT),
            u64::from(FRAME_BYTES_MAX_MIN),
            UNSENT_BYTES_MAX_LIMIT,
            format_bytes,
        )?;
        if unsent_bytes_max < u64::from(frame_bytes_max) {
            return Err(ConfigError::UnsentBelowFrame {
                unsent: format_bytes(unsent_bytes_max),
                frame: format_bytes(frame_bytes_max.into()),
            });
        }
        let unsent_bytes_total_max = in_range(
            "unsent-bytes-total-max",
            s.unsent_bytes_total_max
                .unwrap_or(UNSENT_BYTES_TOTAL_MAX_DEFAULT),
            u64::from(FRAME_BYTES_MAX_MIN),
            UNSENT_BYTES_TOTAL_MAX_LIMIT,
            format_bytes,
        )?;
        if unsent_bytes_total_max < unsent_bytes_max {
            return Err(ConfigError::UnsentTotalBelowPerConnection {
                total: format_bytes(unsent_bytes_total_max),
                unsent: format_bytes(unsent_bytes_max),
            });
        }
        Ok(ConnectionLimits {
            connections_max,
            connections_before_hello_max,
            frame_bytes_max,
            hello_frame_bytes_max,
            hello_timeout,
            frame_timeout,
            requests_in_flight_max,
            unsent_bytes_max,
            unsent_bytes_total_max,
        })
    }
}

/// `--memory-max`, given or half of what the host has.
fn memory_max(s: &Settings, host: &Host) -> Result<(u64, MemoryMaxOrigin), ConfigError> {
    let (memory_max_bytes, memory_max_origin) = match (s.memory_max, &host.memory) {
        (Some(bytes), _) => (bytes, MemoryMaxOrigin::Given),
        // Half, rounded down to a whole MiB so that it reads as one.
        (None, Some(limit)) => (
            (limit.bytes / 2) & !(MIB - 1),
            MemoryMaxOrigin::HalfOf(limit.clone()),
        ),
        (None, None) => (MEMORY_MAX_FALLBACK, MemoryMaxOrigin::Fallback),
    };
    let memory_max_bytes = in_range(
        "memory-max",
        memory_max_bytes,
        MEMORY_MAX_MIN,
        MEMORY_MAX_LIMIT,
        format_bytes,
    )?;
    Ok((memory_max_bytes, memory_max_origin))
}

/// `--listen` and `--metrics-addr`, which must differ.
fn addresses(s: &Settings) -> Result<(SocketAddr, Option<SocketAddr>), ConfigError> {
    let listen = s.listen.unwrap_or(LISTEN_DEFAULT);
    let metrics = match s
        .metrics_addr
        .unwrap_or(MetricsAddr::At(METRICS_ADDR_DEFAULT))
    {
        MetricsAddr::Off => None,
        MetricsAddr::At(addr) => Some(addr),
    };
    if metrics == Some(listen) && listen.port() != 0 {
        return Err(ConfigError::MetricsOnListenAddr { addr: listen });
    }
    Ok((listen, metrics))
}

/// The SQS door: its address, which no other listener may share and which
/// needs `--insecure` off loopback, its account and limits.
fn sqs_door(
    s: &Settings,
    listen: SocketAddr,
    metrics: Option<SocketAddr>,
    insecure: bool,
) -> Result<Option<SqsSettings>, ConfigError> {
    let addr = match s.sqs_listen.unwrap_or(MetricsAddr::At(SQS_LISTEN_DEFAULT)) {
        MetricsAddr::Off => return Ok(None),
        MetricsAddr::At(addr) => addr,
    };
    if addr.port() != 0 {
        if addr == listen {
            return Err(ConfigError::SharedAddress {
                first: "--listen",
                second: "--sqs-listen",
                addr,
            });
        }
        if Some(addr) == metrics {
            return Err(ConfigError::SharedAddress {
                first: "--metrics-addr",
                second: "--sqs-listen",
                addr,
            });
        }
    }
    let credentials = match &s.sqs_credentials {
        None => None,
        Some(path) => {
            let reason = |reason: String| ConfigError::SqsCredentials {
                path: path.clone(),
                reason,
            };
            let text = std::fs::read_to_string(path).map_err(|e| reason(e.to_string()))?;
            let creds = sluice_sqs::sigv4::Credentials::parse(&text).map_err(reason)?;
            Some((path.clone(), creds))
        }
    };
    if !insecure && credentials.is_none() && !addr.ip().to_canonical().is_loopback() {
        return Err(ConfigError::InsecureSqsListen {
            listen: addr,
            port: addr.port(),
        });
    }
    Ok(Some(SqsSettings {
        listen: addr,
        account: s
            .sqs_account
            .clone()
            .unwrap_or_else(|| "000000000000".to_owned()),
        limits: s.sqs_limits.unwrap_or_default(),
        credentials,
    }))
}

/// The auth token, TLS, and `--insecure` (a non-loopback `listen` needs a
/// token or it).
fn security(
    s: &Settings,
    listen: SocketAddr,
) -> Result<(Option<AuthToken>, Option<TlsSettings>, bool), ConfigError> {
    let auth_token = s.token_file.as_deref().map(AuthToken::read).transpose()?;
    let tls = match (
        s.tls_cert.clone(),
        s.tls_key.clone(),
        s.tls_client_ca.clone(),
    ) {
        (Some(cert), Some(key), ca) => Some(TlsSettings::load(cert, key, ca)?),
        (None, None, None) => None,
        (Some(_), None, _) => {
            return Err(ConfigError::TlsIncomplete {
                given: "--tls-cert",
                missing: "--tls-key",
            });
        }
        (None, Some(_), _) => {
            return Err(ConfigError::TlsIncomplete {
                given: "--tls-key",
                missing: "--tls-cert",
            });
        }
        (None, None, Some(_)) => {
            return Err(ConfigError::TlsIncomplete {
                given: "--tls-client-ca",
                missing: "--tls-cert and --tls-key",
            });
        }
    };
    let insecure = s.insecure.unwrap_or(false);
    if auth_token.is_none() && !insecure && !listen.ip().to_canonical().is_loopback() {
        return Err(ConfigError::InsecureListen {
            listen,
            port: listen.port(),
        });
    }
    Ok((auth_token, tls, insecure))
}

fn check_log_filter(directive: &str) -> Result<(), ConfigError> {
    let bad = |message: String| ConfigError::BadLogFilter {
        directive: directive.to_owned(),
        message,
    };
    if directive.trim().is_empty() {
        return Err(bad("it is empty; use `off` to turn logging off".to_owned()));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(directive)
        .map(drop)
        .map_err(|err| bad(err.to_string()))
}
