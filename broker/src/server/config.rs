//! The server's configuration: raw flags, environment and config file in,
//! one validated [`Config`] out.
//!
//! Parse, don't validate: [`RawArgs`] is what clap read from the command line
//! and the `SLUICE_*` environment, every setting optional and only checked for
//! syntax. [`Config::from_args`] reads the `--config` TOML file, layers the
//! sources (flag > environment > config file > default), reads the auth token,
//! detects the defaults that depend on the host, and checks every range and
//! every relation between settings once. Code past that point takes a
//! [`Config`] and never re-checks.
//!
//! ```no_run
//! use clap::Parser;
//! use sluice_broker::server::config::{Config, RawArgs};
//!
//! let config = Config::from_args(RawArgs::parse()).unwrap_or_else(|err| {
//!     eprintln!("sluice-server: {err}");
//!     std::process::exit(2);
//! });
//! println!("{config}"); // the effective configuration, token redacted
//! ```
//!
//! Every limit, default and bound is a named constant below, beside the
//! protocol's own limits in [`sluice_protocol::limits`].

mod choices;
mod display;
mod error;
mod file;
pub mod memory;
mod token;
mod validate;

pub(crate) use self::choices::parse_cpus;
pub use self::choices::{
    ClockChoice, CpuPlacement, Durability, IoChoice, MetricsAddr, parse_listen, parse_metrics_addr,
    parse_socket_addr, parse_sqs_account, parse_sqs_limits,
};
use self::choices::{parse_clock, parse_count, parse_durability, parse_io, parse_size, parse_time};
pub use self::error::ConfigError;
pub use self::token::AuthToken;
/// The duration and size grammar, shared with the clients and tools.
pub use sluice_protocol::units;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, CommandFactory, FromArgMatches, Parser};

pub use self::file::Position;
use self::memory::MemoryLimit;
use self::units::format_bytes;
use super::tls::TlsSettings;

pub use super::limits::{
    CONFIG_FILE_BYTES_MAX, CONNECTIONS_BEFORE_HELLO_MAX_DEFAULT, CONNECTIONS_MAX_DEFAULT,
    CONNECTIONS_MAX_LIMIT, CPU_INDEX_LIMIT, FRAME_BYTES_MAX_MIN, FRAME_TIMEOUT_DEFAULT,
    HELLO_FRAME_BYTES_MAX_MIN, HELLO_TIMEOUT_DEFAULT, IDLE_SPIN_DEFAULT, IDLE_SPIN_MAX,
    LISTEN_DEFAULT, LOG_DEFAULT, MEMORY_MAX_FALLBACK, MEMORY_MAX_LIMIT, MEMORY_MAX_MIN,
    METRICS_ADDR_DEFAULT, QUEUES_MAX_DEFAULT, QUEUES_MAX_LIMIT, REQUESTS_IN_FLIGHT_MAX_DEFAULT,
    REQUESTS_IN_FLIGHT_MAX_LIMIT, SERVER_SHARDS_MAX, SHUTDOWN_TIMEOUT_DEFAULT,
    SHUTDOWN_TIMEOUT_MAX, SNAPSHOT_KEEP_DEFAULT, SNAPSHOT_KEEP_MAX, SQS_LISTEN_DEFAULT,
    TIMEOUT_MAX, TIMEOUT_MIN, UNSENT_BYTES_MAX_DEFAULT, UNSENT_BYTES_MAX_LIMIT,
    UNSENT_BYTES_TOTAL_MAX_DEFAULT, UNSENT_BYTES_TOTAL_MAX_LIMIT,
};

const LONG_ABOUT: &str = "\
sluice-server: an in-memory message broker.

Every setting below can be given three ways: as a flag; as an environment
variable, SLUICE_ and the flag's name in capitals with underscores (e.g.
SLUICE_MAX_CONNECTIONS=5000); or as a key of the TOML file named by --config,
the flag's name with underscores (e.g. max_connections = 5000). Precedence:
flag, then environment, then config file, then the built-in default. A key the
config file does not know is an error.

Durations take a unit: 250us, 250ms, 1.5s, 2m, 1h30m (ns, us, ms, s, m, h,
d; decimals are exact, the total rounded to the nearest nanosecond). A plain
number is refused (is 10 seconds or milliseconds?), except 0.
Sizes are bytes, or a binary unit: 1048576, 512KiB, 1M, 1.5MiB, 2GiB (K, M,
G, T mean KiB, MiB, GiB, TiB; decimals must come to whole bytes); KB, MB and
GB are refused as ambiguous. The same grammar as sluice and sluice-loadgen.

A config file value that does not parse is refused naming its key, line and
column.

Logging follows --log (SLUICE_LOG), a tracing filter such as `info` or
`info,sluice_broker=debug`. RUST_LOG is not read, so a RUST_LOG meant for other
programs does not change the broker's logs.

Everything is held in memory: a restart loses every queue and message, unless
--snapshot PATH is given (a graceful shutdown then writes them to PATH and the
next start loads them; a crash still loses them), or --durability batch|always
with --log-dir PATH (every change is also written to a log there, which a start
after a crash replays: batch loses at most what was acknowledged within the
last --log-sync-interval, always nothing acknowledged).";

/// The command line of `sluice-server`, as read, before validation.
#[derive(Debug, Clone, Default, PartialEq, Parser)]
#[command(
    name = "sluice-server",
    version,
    about = "sluice-server: an in-memory message broker (thread-per-core, io_uring)",
    long_about = LONG_ABOUT,
    max_term_width = 100
)]
pub struct RawArgs {
    /// TOML file with settings; keys are flag names with underscores
    /// (e.g. `max_connections = 5000`). Flags and environment override it.
    #[arg(long, env = "SLUICE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Reports what a snapshot file holds (queues, messages by state, bytes)
    /// and whether it would load, without starting the server: exit 0 when
    /// it is sound, 2 when not. The file is only read.
    #[arg(long, value_name = "PATH")]
    pub check_snapshot: Option<PathBuf>,

    /// Every other setting.
    #[command(flatten)]
    pub settings: Settings,
}

/// Declares [`Settings`] once and derives from that declaration what clap
/// and serde do not: the list of keys and the merge of two layers.
macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: Option<$ty:ty>,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: Option<$ty>,)*
        }

        impl $name {
            /// The keys a config file may hold: the flag names with
            /// underscores, in the order of `--help`.
            pub const KEYS: &[&str] = &[$(stringify!($field)),*];

            /// This layer, with each setting it lacks taken from `lower`.
            #[must_use]
            pub fn or(self, lower: $name) -> $name {
                $name {
                    $($field: self.$field.or(lower.$field),)*
                }
            }
        }
    };
}

settings! {
/// Every setting, each optional: one layer of configuration (the command
/// line and environment, or a config file) before the layers are merged.
///
/// This is the one declaration of each setting: its name is the flag
/// (`--frame-bytes-max`), the variable (`SLUICE_FRAME_BYTES_MAX`) and the
/// config file key (`frame_bytes_max`); its doc comment is the help; its
/// parser reads the flag, the variable and the file alike.
#[derive(Debug, Clone, Default, PartialEq, Args, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address for clients, HOST:PORT or sluice://HOST:PORT, the host an IP
    /// address or localhost [default: 127.0.0.1:7171]. A non-loopback
    /// address needs --token-file or --insecure.
    #[arg(long, env = "SLUICE_LISTEN", value_name = "HOST:PORT", value_parser = parse_listen)]
    #[serde(deserialize_with = "file::listen")]
    pub listen: Option<SocketAddr>,

    /// Shards, one thread per core, 1..=64 [default: the CPUs of --cpus
    /// when it lists them, else the available cores].
    #[arg(long, env = "SLUICE_SHARDS", value_name = "N", value_parser = parse_count)]
    #[serde(deserialize_with = "file::count")]
    pub shards: Option<u64>,

    /// Where shard threads run: `auto` pins shard i to the i-th CPU this
    /// process may use (as taskset or a cpuset allows), `none` leaves them
    /// to the scheduler, a list such as `0,2-3` pins shard i to its i-th
    /// CPU [default: auto].
    #[arg(long, env = "SLUICE_CPUS", value_name = "auto|none|LIST", value_parser = parse_cpus)]
    #[serde(deserialize_with = "file::cpus")]
    pub cpus: Option<CpuPlacement>,

    /// Kernel interface: auto (io_uring, else epoll), uring (or fail), epoll
    /// [default: auto].
    #[arg(long, env = "SLUICE_IO", value_name = "BACKEND", value_parser = parse_io)]
    #[serde(deserialize_with = "file::io")]
    pub io: Option<IoChoice>,

    /// The broker's clock: real, or manual (for tests: it stands still
    /// until an ADVANCE_CLOCK request moves it; leases, delays and
    /// retention end only then) [default: real].
    #[arg(long, env = "SLUICE_CLOCK", value_name = "real|manual", value_parser = parse_clock)]
    #[serde(deserialize_with = "file::clock")]
    pub clock: Option<ClockChoice>,

    /// File holding the auth token every client must present, up to 1024
    /// bytes; trailing line ends are trimmed [default: no token].
    #[arg(long, env = "SLUICE_TOKEN_FILE", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub token_file: Option<PathBuf>,

    /// PEM certificate chain (the server's own first): clients must
    /// connect with TLS. Needs --tls-key [default: plain text].
    #[arg(long, env = "SLUICE_TLS_CERT", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1) [default:
    /// none, plain text].
    #[arg(long, env = "SLUICE_TLS_KEY", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates: every client must present a certificate that
    /// chains to one of them. Needs --tls-cert [default: no client
    /// certificates].
    #[arg(long, env = "SLUICE_TLS_CLIENT_CA", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub tls_client_ca: Option<PathBuf>,

    /// Allow a non-loopback --listen address without an auth token
    /// [default: false].
    #[arg(
        long,
        env = "SLUICE_INSECURE",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new()
    )]
    #[serde(deserialize_with = "file::boolean")]
    pub insecure: Option<bool>,

    /// Address of the Prometheus endpoint (/metrics, /healthz), HOST:PORT
    /// (port 0: any free port) or `off` [default: 127.0.0.1:7172].
    #[arg(long, env = "SLUICE_METRICS_ADDR", value_name = "HOST:PORT|off", value_parser = parse_metrics_addr)]
    #[serde(deserialize_with = "file::metrics_addr")]
    pub metrics_addr: Option<MetricsAddr>,

    /// Address of the SQS door (the AWS JSON protocol over HTTP/1.1, for
    /// boto3, the aws CLI and the AWS SDKs), HOST:PORT (port 0: any free
    /// port) or `off`; without --sqs-credentials any SQS signature is
    /// accepted, so a non-loopback address then needs --insecure
    /// [default: 127.0.0.1:9324].
    #[arg(long, env = "SLUICE_SQS_LISTEN", value_name = "HOST:PORT|off", value_parser = parse_metrics_addr)]
    #[serde(deserialize_with = "file::metrics_addr")]
    pub sqs_listen: Option<MetricsAddr>,

    /// The account of SQS requests whose access key is not a 12-digit
    /// account id: queues of different accounts never mix [default:
    /// 000000000000].
    #[arg(long, env = "SLUICE_SQS_ACCOUNT", value_name = "DIGITS", value_parser = parse_sqs_account)]
    #[serde(deserialize_with = "file::sqs_account")]
    pub sqs_account: Option<String>,

    /// File of the access keys whose SigV4 signatures the SQS door checks,
    /// one a line: ACCESS_KEY_ID SECRET ACCOUNT (12 digits); `#` starts a
    /// comment. A request signed otherwise is refused [default: any
    /// signature is accepted].
    #[arg(long, env = "SLUICE_SQS_CREDENTIALS", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub sqs_credentials: Option<PathBuf>,

    /// The SQS door's limits: strict (SQS's own: 10 entries a batch) or
    /// relaxed (batches up to sluice's 1024 entries) [default: strict].
    #[arg(long, env = "SLUICE_SQS_LIMITS", value_name = "strict|relaxed", value_parser = parse_sqs_limits)]
    #[serde(deserialize_with = "file::sqs_limits")]
    pub sqs_limits: Option<sluice_sqs::Limits>,

    /// Open client connections; more are refused with an error frame
    /// [default: 10000].
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", value_name = "N", value_parser = parse_count)]
    #[serde(deserialize_with = "file::count")]
    pub max_connections: Option<u64>,

    /// Of --max-connections, how many may be still before a successful
    /// HELLO (a TLS handshake included); a new connection beyond them closes
    /// the one that has waited longest, so connections that never say HELLO
    /// cannot keep real clients out [default: 1000, or --max-connections
    /// when lower].
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS_BEFORE_HELLO", value_name = "N", value_parser = parse_count)]
    #[serde(deserialize_with = "file::count")]
    pub max_connections_before_hello: Option<u64>,

    /// Largest frame after HELLO, 4KiB..=64MiB [default: 1MiB].
    #[arg(long, env = "SLUICE_FRAME_BYTES_MAX", value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "file::size")]
    pub frame_bytes_max: Option<u64>,

    /// Largest frame before HELLO succeeded, 2KiB..=--frame-bytes-max
    /// [default: 4KiB].
    #[arg(long, env = "SLUICE_HELLO_FRAME_BYTES_MAX", value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "file::size")]
    pub hello_frame_bytes_max: Option<u64>,

    /// Time from accept to a successful HELLO before the connection is closed
    /// [default: 10s].
    #[arg(long, env = "SLUICE_HELLO_TIMEOUT", value_name = "DURATION", value_parser = parse_time)]
    #[serde(deserialize_with = "file::duration")]
    pub hello_timeout: Option<Duration>,

    /// Time to finish a frame once its first byte arrived before the
    /// connection is closed; on the SQS door, an HTTP request, for at most
    /// 10s [default: 30s].
    #[arg(long, env = "SLUICE_FRAME_TIMEOUT", value_name = "DURATION", value_parser = parse_time)]
    #[serde(deserialize_with = "file::duration")]
    pub frame_timeout: Option<Duration>,

    /// Requests in flight per connection; beyond it the connection is not
    /// read until replies drain [default: 1024].
    #[arg(long, env = "SLUICE_REQUESTS_IN_FLIGHT_MAX", value_name = "N", value_parser = parse_count)]
    #[serde(deserialize_with = "file::count")]
    pub requests_in_flight_max: Option<u64>,

    /// Unsent reply bytes per connection; beyond it the connection is not
    /// read until it drains; at least --frame-bytes-max [default: 4MiB].
    #[arg(long, env = "SLUICE_UNSENT_BYTES_MAX", value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "file::size")]
    pub unsent_bytes_max: Option<u64>,

    /// Unsent reply bytes of all connections together; at least
    /// --unsent-bytes-max [default: 256MiB].
    #[arg(long, env = "SLUICE_UNSENT_BYTES_TOTAL_MAX", value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "file::size")]
    pub unsent_bytes_total_max: Option<u64>,

    /// Memory for messages (bodies, attributes, per-message state, dedup
    /// entries); sends fail with Busy beyond it [default: half of the cgroup
    /// memory limit, or of physical memory].
    #[arg(long, env = "SLUICE_MEMORY_MAX", value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "file::size")]
    pub memory_max: Option<u64>,

    /// Queues the server holds [default: 10000].
    #[arg(long, env = "SLUICE_QUEUES_MAX", value_name = "N", value_parser = parse_count)]
    #[serde(deserialize_with = "file::count")]
    pub queues_max: Option<u64>,

    /// Log filter in tracing's env-filter syntax, e.g. `info` or
    /// `warn,sluice_broker=debug`; RUST_LOG is not read [default: info].
    #[arg(long, env = "SLUICE_LOG", value_name = "FILTER")]
    #[serde(deserialize_with = "file::string")]
    pub log: Option<String>,

    /// On SIGTERM or Ctrl-C, time to answer requests in flight before
    /// exiting anyway [default: 10s].
    #[arg(long, env = "SLUICE_SHUTDOWN_TIMEOUT", value_name = "DURATION", value_parser = parse_time)]
    #[serde(deserialize_with = "file::duration")]
    pub shutdown_timeout: Option<Duration>,

    /// After its last work, a shard polls its connections and rings this
    /// long before it sleeps in the kernel: a request that comes within it
    /// costs no wake-up (lower latency, more requests per second on one
    /// connection), at the price of that CPU time spinning after each burst.
    /// Up to 10ms [default: 0s, off].
    #[arg(long, env = "SLUICE_IDLE_SPIN", value_name = "DURATION", value_parser = parse_time)]
    #[serde(deserialize_with = "file::duration")]
    pub idle_spin: Option<Duration>,

    /// Snapshot file: written on a graceful shutdown (SIGTERM, Ctrl-C) with
    /// every queue and message, loaded at start when it exists and then
    /// renamed to PATH.loaded-MS, MS the Unix time in ms [default: none, a
    /// restart loses everything].
    #[arg(long, env = "SLUICE_SNAPSHOT", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub snapshot: Option<PathBuf>,

    /// How many PATH.loaded-MS files (snapshots already loaded) to keep
    /// beside --snapshot; older ones are removed at start, 0..=1000
    /// [default: 3].
    #[arg(long, env = "SLUICE_SNAPSHOT_KEEP", value_name = "N", value_parser = parse_count)]
    #[serde(deserialize_with = "file::count")]
    pub snapshot_keep: Option<u64>,

    /// What survives a crash: none (a crash loses every queue and message),
    /// batch (queue changes and messages are written to a log in --log-dir,
    /// synced every --log-sync-interval: a crash loses at most what was
    /// acknowledged within it) or always (a change is answered only once its
    /// record is synced to disk) [default: none].
    #[arg(long, env = "SLUICE_DURABILITY", value_name = "none|batch|always", value_parser = parse_durability)]
    #[serde(deserialize_with = "file::durability")]
    pub durability: Option<Durability>,

    /// Folder of the write-ahead log and its checkpoint, for --durability
    /// batch or always; made when missing. A graceful shutdown writes the
    /// checkpoint there and starts the log afresh; a start loads the
    /// checkpoint and replays the log after it [default: none].
    #[arg(long, env = "SLUICE_LOG_DIR", value_name = "PATH")]
    #[serde(deserialize_with = "file::path")]
    pub log_dir: Option<PathBuf>,

    /// How often --durability batch writes and syncs the log (sooner once
    /// 256 KiB of records wait), 1ms..=10s: a crash, of the process or of
    /// the machine, loses at most what was acknowledged within it
    /// [default: 100ms].
    #[arg(long, env = "SLUICE_LOG_SYNC_INTERVAL", value_name = "DURATION", value_parser = parse_time)]
    #[serde(deserialize_with = "file::duration")]
    pub log_sync_interval: Option<Duration>,
}
}

/// The keys a config file may hold: the flag names with underscores.
pub const CONFIG_FILE_KEYS: &[&str] = Settings::KEYS;

impl RawArgs {
    /// Parses `args` (program name first) with the environment given by
    /// `env` instead of the process's: `env("SLUICE_LISTEN")` and so on are
    /// asked for each setting, and the process environment is not read.
    /// Precedence is the same as [`Parser::try_parse_from`]'s: a flag beats
    /// its variable. For tests and for embedding the server.
    pub fn try_parse_from_env<I, T>(
        args: I,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<RawArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let command = RawArgs::command().mut_args(|arg| {
            let Some(name) = arg
                .get_env()
                .and_then(|name| name.to_str())
                .map(str::to_owned)
            else {
                return arg;
            };
            // A default value stands below a flag, as a variable does.
            match env(&name) {
                Some(value) => arg.env(None).default_value(value),
                None => arg.env(None),
            }
        });
        let matches = command.try_get_matches_from(args)?;
        RawArgs::from_arg_matches(&matches)
    }
}

/// What the host offers, for the defaults that depend on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// CPUs this process may run on (affinity and cgroup quota included).
    pub cores: usize,
    /// Memory this process may use, if it could be read.
    pub memory: Option<MemoryLimit>,
}

impl Host {
    /// Reads the host: `std::thread::available_parallelism` (1 when it
    /// fails) and [`MemoryLimit::detect`].
    pub fn detect() -> Host {
        Host {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory: MemoryLimit::detect(),
        }
    }
}

/// Where `--memory-max` came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryMaxOrigin {
    /// Given by a flag, the environment or the config file.
    Given,
    /// Half of this detected limit.
    HalfOf(MemoryLimit),
    /// Nothing could be detected: [`MEMORY_MAX_FALLBACK`].
    Fallback,
}

/// The validated configuration. Every field is in range and consistent with
/// the others; see the flags for what each means.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address for clients.
    pub listen: SocketAddr,
    /// Shards, 1 ..= [`SERVER_SHARDS_MAX`].
    pub shards: u16,
    /// Whether `shards` was given (flag, environment or file). When not, a
    /// snapshot's own shard count wins over the default.
    pub shards_given: bool,
    /// Where the shard threads run.
    pub cpus: CpuPlacement,
    /// Kernel interface.
    pub io: IoChoice,
    /// The engine's clock.
    pub clock: ClockChoice,
    /// Token clients must present, if any.
    pub auth_token: Option<AuthToken>,
    /// TLS, when `--tls-cert` and `--tls-key` are given.
    pub tls: Option<TlsSettings>,
    /// Whether `--insecure` was given (a non-loopback listen address without
    /// a token is then allowed).
    pub insecure: bool,
    /// Metrics endpoint address; `None` when off.
    pub metrics: Option<SocketAddr>,
    /// The SQS door; `None` when off.
    pub sqs: Option<SqsSettings>,
    /// Open client connections at most.
    pub connections_max: u32,
    /// Of those, connections before a successful HELLO at most; at most
    /// `connections_max`.
    pub connections_before_hello_max: u32,
    /// Largest frame after HELLO.
    pub frame_bytes_max: u32,
    /// Largest frame before HELLO succeeded; at most `frame_bytes_max`.
    pub hello_frame_bytes_max: u32,
    /// Time from accept to a successful HELLO.
    pub hello_timeout: Duration,
    /// Time to finish a frame once begun.
    pub frame_timeout: Duration,
    /// Requests in flight per connection.
    pub requests_in_flight_max: u32,
    /// Unsent reply bytes per connection; at least `frame_bytes_max`.
    pub unsent_bytes_max: u64,
    /// Unsent reply bytes of all connections; at least `unsent_bytes_max`.
    pub unsent_bytes_total_max: u64,
    /// Memory for messages.
    pub memory_max_bytes: u64,
    /// Where `memory_max_bytes` came from.
    pub memory_max_origin: MemoryMaxOrigin,
    /// Queues at most.
    pub queues_max: u32,
    /// Log filter directive, checked to parse as a tracing `EnvFilter`.
    pub log_filter: String,
    /// Time to answer requests in flight on shutdown.
    pub shutdown_timeout: Duration,
    /// How long a shard polls after its last work before it sleeps.
    pub idle_spin: Duration,
    /// Snapshot file written on a graceful shutdown and loaded at start;
    /// `None`: none.
    pub snapshot: Option<PathBuf>,
    /// `PATH.loaded-MS` files kept beside the snapshot.
    pub snapshot_keep: u32,
    /// What survives a crash.
    pub durability: Durability,
    /// The log's folder: `Some` exactly when `durability` is not `None`.
    pub log_dir: Option<PathBuf>,
    /// How often `Durability::Batch` syncs the log.
    pub log_sync_interval: Duration,
}

/// The SQS door's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSettings {
    /// Its address.
    pub listen: SocketAddr,
    /// The account of requests that name none.
    pub account: String,
    /// Strict or relaxed limits.
    pub limits: sluice_sqs::Limits,
    /// The access keys whose signatures are checked, and their file.
    pub credentials: Option<(PathBuf, sluice_sqs::sigv4::Credentials)>,
}

#[cfg(test)]
mod tests;
