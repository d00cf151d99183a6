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

mod file;
pub mod memory;
/// The duration and size grammar, shared with the clients and tools.
pub use sluice_protocol::units;

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, CommandFactory, FromArgMatches, Parser, ValueEnum};
use sluice_protocol::limits as wire;

pub use self::file::Position;
use self::memory::MemoryLimit;
use self::units::{format_bytes, format_duration, parse_bytes, parse_duration};
use super::limits::MIB;
use super::tls::{TlsError, TlsSettings};

pub use super::limits::{
    CONFIG_FILE_BYTES_MAX, CONNECTIONS_BEFORE_HELLO_MAX_DEFAULT, CONNECTIONS_MAX_DEFAULT,
    CONNECTIONS_MAX_LIMIT, CPU_INDEX_LIMIT, FRAME_BYTES_MAX_MIN, FRAME_TIMEOUT_DEFAULT,
    HELLO_FRAME_BYTES_MAX_MIN, HELLO_TIMEOUT_DEFAULT, IDLE_SPIN_DEFAULT, IDLE_SPIN_MAX,
    LISTEN_DEFAULT, LOG_DEFAULT, MEMORY_MAX_FALLBACK, MEMORY_MAX_LIMIT, MEMORY_MAX_MIN,
    METRICS_ADDR_DEFAULT, QUEUES_MAX_DEFAULT, QUEUES_MAX_LIMIT, REQUESTS_IN_FLIGHT_MAX_DEFAULT,
    REQUESTS_IN_FLIGHT_MAX_LIMIT, SHARDS_MAX, SHUTDOWN_TIMEOUT_DEFAULT, SHUTDOWN_TIMEOUT_MAX,
    SNAPSHOT_KEEP_DEFAULT, SNAPSHOT_KEEP_MAX, TIMEOUT_MAX, TIMEOUT_MIN, UNSENT_BYTES_MAX_DEFAULT,
    UNSENT_BYTES_MAX_LIMIT, UNSENT_BYTES_TOTAL_MAX_DEFAULT, UNSENT_BYTES_TOTAL_MAX_LIMIT,
};

/// Bytes beyond the token an auth token file may hold (its trailing line
/// ends).
const TOKEN_FILE_SLACK_BYTES: usize = 64;

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
next start loads them; a crash still loses them).";

/// How the server talks to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoChoice {
    /// io_uring where the kernel allows it, else epoll (the reason is logged).
    Auto,
    /// io_uring or fail to start.
    Uring,
    /// epoll, even where io_uring is available.
    Epoll,
}

impl fmt::Display for IoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoChoice::Auto => "auto",
            IoChoice::Uring => "uring",
            IoChoice::Epoll => "epoll",
        })
    }
}

/// The clock the broker's engine runs on (`--clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ClockChoice {
    /// The real clocks.
    #[default]
    Real,
    /// A clock that stands still until an `ADVANCE_CLOCK` request (or the
    /// test server's `advance`) moves it: for tests.
    Manual,
}

impl fmt::Display for ClockChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClockChoice::Real => "real",
            ClockChoice::Manual => "manual",
        })
    }
}

/// Where the shard threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuPlacement {
    /// Shard `i` on the `i`-th CPU the process may use (its affinity mask,
    /// as `taskset` or a cpuset set it); shards beyond those CPUs unpinned.
    Auto,
    /// No pinning: the scheduler places the shards within the process's
    /// CPUs.
    None,
    /// Shard `i` on the `i`-th CPU of this list (ascending, no repeats).
    List(Vec<usize>),
}

impl fmt::Display for CpuPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuPlacement::Auto => f.write_str("auto"),
            CpuPlacement::None => f.write_str("none"),
            CpuPlacement::List(cpus) => {
                for (i, cpu) in cpus.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{cpu}")?;
                }
                Ok(())
            }
        }
    }
}

/// Parses `auto`, `none`, or a CPU list such as `0,2-3`.
pub(crate) fn parse_cpus(s: &str) -> Result<CpuPlacement, String> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "auto" => return Ok(CpuPlacement::Auto),
        "none" | "off" => return Ok(CpuPlacement::None),
        _ => {}
    }
    let bad = |why: String| format!("`{s}` is not a CPU list: {why} (examples: auto, none, 0,2-3)");
    let cpu = |x: &str| -> Result<usize, String> {
        let n: usize = x
            .trim()
            .parse()
            .map_err(|_| bad(format!("`{}` is not a CPU number", x.trim())))?;
        if n >= CPU_INDEX_LIMIT {
            return Err(bad(format!("CPU {n} is beyond {}", CPU_INDEX_LIMIT - 1)));
        }
        Ok(n)
    };
    let mut cpus = Vec::new();
    for part in t.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (cpu(a)?, cpu(b)?);
                if a > b {
                    return Err(bad(format!("the range {a}-{b} runs backwards")));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(cpu(part)?),
        }
    }
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != cpus.len() {
        return Err(bad("a CPU is named twice".to_owned()));
    }
    Ok(CpuPlacement::List(sorted))
}

/// A metrics address as given: an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAddr {
    /// `off`: no metrics endpoint.
    Off,
    /// Serve metrics here (port 0: any free port).
    At(SocketAddr),
}

/// Parses `HOST:PORT` where HOST is an IP address (`[...]` for IPv6) or
/// `localhost` (127.0.0.1). Names are not resolved: what the server binds
/// must not depend on DNS.
pub fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Some(port) = s.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
    }
    s.parse().map_err(|_| {
        format!(
            "`{s}` is not HOST:PORT with an IP address \
             (e.g. 127.0.0.1:7171, 0.0.0.0:7171, [::1]:7171, localhost:7171)"
        )
    })
}

/// Parses a `--listen` value: `HOST:PORT` as in [`parse_socket_addr`], or
/// the same as a URL, `sluice://HOST:PORT`, as clients write it.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let bare = match t.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sluice") => {
            rest.strip_suffix('/').unwrap_or(rest)
        }
        Some(_) => {
            return Err(format!(
                "`{s}`: the only scheme is sluice:// (e.g. sluice://0.0.0.0:7171)"
            ));
        }
        None => t,
    };
    parse_socket_addr(bare)
}

/// Parses a `--metrics-addr` value: `HOST:PORT` as in [`parse_socket_addr`],
/// or `off`.
pub fn parse_metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(MetricsAddr::Off);
    }
    parse_socket_addr(s)
        .map(MetricsAddr::At)
        .map_err(|e| format!("{e}, or `off`"))
}

/// Parses a whole non-negative number.
fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not a whole number"));
    }
    s.parse().map_err(|_| format!("`{s}` is too large"))
}

fn parse_size(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|e| e.to_string())
}

fn parse_time(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn parse_clock(s: &str) -> Result<ClockChoice, String> {
    ClockChoice::from_str(s.trim(), true)
        .map_err(|_| format!("`{s}` is not a clock: use real or manual"))
}

fn parse_io(s: &str) -> Result<IoChoice, String> {
    IoChoice::from_str(s.trim(), true)
        .map_err(|_| format!("`{s}` is not an io backend: use auto, uring or epoll"))
}

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
    /// connection is closed [default: 30s].
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

/// The auth token clients must present in HELLO. Its `Debug` shows the
/// length, never the bytes.
#[derive(Clone)]
pub struct AuthToken {
    bytes: Vec<u8>,
    path: PathBuf,
}

impl AuthToken {
    /// Reads a token file: its content less trailing `\n` and `\r`, 1 ..=
    /// [`wire::AUTH_TOKEN_BYTES_MAX`] bytes.
    pub fn read(path: &Path) -> Result<AuthToken, ConfigError> {
        let read_error = |source| ConfigError::ReadTokenFile {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let cap = wire::AUTH_TOKEN_BYTES_MAX + TOKEN_FILE_SLACK_BYTES;
        let mut bytes = Vec::with_capacity(cap + 1);
        file.take(cap as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        let too_long = || ConfigError::TokenTooLong {
            path: path.to_owned(),
            max: wire::AUTH_TOKEN_BYTES_MAX,
        };
        if bytes.len() > cap {
            return Err(too_long());
        }
        while bytes.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(ConfigError::TokenFileEmpty {
                path: path.to_owned(),
            });
        }
        if bytes.len() > wire::AUTH_TOKEN_BYTES_MAX {
            return Err(too_long());
        }
        Ok(AuthToken {
            bytes,
            path: path.to_owned(),
        })
    }

    /// A token given in code (tests), with no file behind it.
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: &[u8]) -> AuthToken {
        AuthToken {
            bytes: bytes.to_vec(),
            path: PathBuf::from("<given in code>"),
        }
    }

    /// The token.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `presented` is the token, comparing every byte whatever the
    /// first difference (the time taken tells only the lengths).
    pub fn matches(&self, presented: &[u8]) -> bool {
        if presented.len() != self.bytes.len() {
            return false;
        }
        let diff = self
            .bytes
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthToken")
            .field("path", &self.path)
            .field(
                "bytes",
                &format_args!("<{} bytes, redacted>", self.bytes.len()),
            )
            .finish()
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
    /// Shards, 1 ..= [`SHARDS_MAX`].
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
}

/// Why a configuration was refused. Each message names the setting (flag
/// and config key are the same name) or the file and says what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    ReadConfigFile {
        /// The file named by `--config`.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The config file is larger than [`CONFIG_FILE_BYTES_MAX`].
    #[error("config file {} is larger than {max}: is it the right file?", path.display())]
    ConfigFileTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, formatted.
        max: String,
    },
    /// The config file is not valid TOML.
    #[error("config file {}, {at}: not valid TOML: {message}", path.display())]
    ConfigFileSyntax {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped.
        at: Position,
        /// The TOML parser's message.
        message: String,
    },
    /// The config file holds a key that is no setting.
    #[error(
        "config file {}, {at}: unknown key `{key}`; the keys are the flag names with underscores: {known}",
        path.display()
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key as written.
        key: String,
        /// Where the key is.
        at: Position,
        /// The keys that exist.
        known: String,
    },
    /// A config file value does not parse, or is of the wrong type.
    #[error("config file {}, {at}: bad value for `{key}`: {message}", path.display())]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Where the value is.
        at: Position,
        /// What is wrong and what would be accepted.
        message: String,
    },
    /// The auth token file could not be read.
    #[error("cannot read auth token file {} (--token-file): {source}", path.display())]
    ReadTokenFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The auth token file holds no token.
    #[error(
        "auth token file {} is empty: put the token in it, or drop --token-file",
        path.display()
    )]
    TokenFileEmpty {
        /// The file.
        path: PathBuf,
    },
    /// The auth token is too long.
    #[error("the token in {} is longer than {max} bytes", path.display())]
    TokenTooLong {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        max: usize,
    },
    /// A setting is outside its bounds.
    #[error("--{flag} is {value}: it must be at least {min} and at most {max}")]
    OutOfRange {
        /// The flag, without dashes.
        flag: &'static str,
        /// The value given, formatted.
        value: String,
        /// The smallest value allowed, formatted.
        min: String,
        /// The largest value allowed, formatted.
        max: String,
    },
    /// The HELLO frame limit is above the frame limit.
    #[error(
        "--hello-frame-bytes-max ({hello}) is larger than --frame-bytes-max ({frame}): \
         a HELLO is a frame too, lower the first or raise the second"
    )]
    HelloFrameAboveFrame {
        /// `--hello-frame-bytes-max`, formatted.
        hello: String,
        /// `--frame-bytes-max`, formatted.
        frame: String,
    },
    /// A connection could not queue one reply of the largest size.
    #[error(
        "--unsent-bytes-max ({unsent}) is smaller than --frame-bytes-max ({frame}): \
         a connection must be able to hold one reply of the largest size"
    )]
    UnsentBelowFrame {
        /// `--unsent-bytes-max`, formatted.
        unsent: String,
        /// `--frame-bytes-max`, formatted.
        frame: String,
    },
    /// The total unsent budget is below one connection's.
    #[error(
        "--unsent-bytes-total-max ({total}) is smaller than --unsent-bytes-max ({unsent}), \
         the budget of a single connection"
    )]
    UnsentTotalBelowPerConnection {
        /// `--unsent-bytes-total-max`, formatted.
        total: String,
        /// `--unsent-bytes-max`, formatted.
        unsent: String,
    },
    /// `--tls-key` without `--tls-cert`, or the other way round, or
    /// `--tls-client-ca` without them.
    #[error(
        "{given} needs {missing}: TLS takes a certificate chain and its key \
         (--tls-cert and --tls-key), and --tls-client-ca only adds client certificates to them"
    )]
    TlsIncomplete {
        /// The setting given.
        given: &'static str,
        /// The one missing.
        missing: &'static str,
    },
    /// A TLS file that cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A non-loopback listen address without a token or `--insecure`.
    #[error(
        "refusing to listen on {listen} without an auth token: anyone who can reach it could \
         read and delete every message. Give --token-file FILE, listen on a loopback \
         address (e.g. 127.0.0.1:{port}), or pass --insecure if the network is trusted"
    )]
    InsecureListen {
        /// The listen address.
        listen: SocketAddr,
        /// Its port, for the suggestion.
        port: u16,
    },
    /// The metrics endpoint and the client listener would share an address.
    #[error("--metrics-addr {addr} is the --listen address: give them different ports, or `off`")]
    MetricsOnListenAddr {
        /// The shared address.
        addr: SocketAddr,
    },
    /// `--cpus` lists fewer CPUs than there are shards.
    #[error(
        "--cpus {cpus} lists {count} CPUs for {shards} shards: list one CPU per shard, \
         lower --shards, or use --cpus auto or none"
    )]
    FewerCpusThanShards {
        /// The list as given.
        cpus: String,
        /// How many CPUs it names.
        count: usize,
        /// `--shards`.
        shards: u16,
    },
    /// The log filter does not parse.
    #[error(
        "--log `{directive}` is not a log filter: {message} \
         (examples: info, warn,sluice_broker=debug, off)"
    )]
    BadLogFilter {
        /// The filter as given.
        directive: String,
        /// The parser's message.
        message: String,
    },
}

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
        let cpus = s.cpus.unwrap_or(CpuPlacement::Auto);
        let cores = match &cpus {
            CpuPlacement::List(list) => list.len(),
            _ => host.cores,
        };
        let shards_default = cores.clamp(1, usize::from(SHARDS_MAX)) as u64;
        let shards_given = s.shards.is_some();
        let shards = s.shards.unwrap_or(shards_default);
        let shards = in_range("shards", shards, 1, u64::from(SHARDS_MAX), |n| {
            n.to_string()
        })?;
        let shards = u16::try_from(shards).unwrap_or(SHARDS_MAX);
        if let CpuPlacement::List(list) = &cpus {
            if list.len() < usize::from(shards) {
                return Err(ConfigError::FewerCpusThanShards {
                    cpus: cpus.to_string(),
                    count: list.len(),
                    shards,
                });
            }
        }

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

        let log_filter = s.log.unwrap_or_else(|| LOG_DEFAULT.to_owned());
        check_log_filter(&log_filter)?;

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
        let auth_token = s.token_file.as_deref().map(AuthToken::read).transpose()?;
        let tls = match (s.tls_cert, s.tls_key, s.tls_client_ca) {
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
            connections_max,
            connections_before_hello_max,
            frame_bytes_max,
            hello_frame_bytes_max,
            hello_timeout,
            frame_timeout,
            requests_in_flight_max,
            unsent_bytes_max,
            unsent_bytes_total_max,
            memory_max_bytes,
            memory_max_origin,
            queues_max,
            log_filter,
            shutdown_timeout,
            idle_spin,
            snapshot: s.snapshot,
            snapshot_keep,
        })
    }
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

/// A size for people: exact in the grammar when a whole number of MiB,
/// else `about 23.5GiB`.
fn approx_bytes(n: u64) -> String {
    if n % MIB == 0 {
        return format_bytes(n);
    }
    let (unit, scale) = [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", MIB)]
        .into_iter()
        .find(|&(_, scale)| n >= scale)
        .unwrap_or(("KiB", 1 << 10));
    #[allow(clippy::cast_precision_loss, reason = "one decimal for people")]
    let value = n as f64 / scale as f64;
    format!("about {value:.1}{unit}")
}

/// A TOML string literal.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The effective configuration as a config file (token redacted: the file is
/// named, the token is not shown), one `key = value` line per setting, with
/// comments where a value came from the host. It parses back, through
/// `--config`, to the same configuration.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "listen = {}", quoted(&self.listen.to_string()))?;
        if self.shards_given {
            writeln!(f, "shards = {}", self.shards)?;
        } else {
            writeln!(
                f,
                "# shards: {}, one per core (not given: a snapshot's own count wins)",
                self.shards
            )?;
        }
        writeln!(f, "cpus = {}", quoted(&self.cpus.to_string()))?;
        writeln!(f, "io = {}", quoted(&self.io.to_string()))?;
        writeln!(f, "clock = {}", quoted(&self.clock.to_string()))?;
        match &self.auth_token {
            Some(token) => writeln!(
                f,
                "token_file = {}  # token of {} bytes, not shown",
                quoted(&token.path.to_string_lossy()),
                token.bytes.len()
            )?,
            None => writeln!(f, "# token_file: none, clients need no token")?,
        }
        match &self.tls {
            Some(tls) => {
                writeln!(f, "tls_cert = {}", quoted(&tls.cert.to_string_lossy()))?;
                writeln!(f, "tls_key = {}", quoted(&tls.key.to_string_lossy()))?;
                match &tls.client_ca {
                    Some(ca) => writeln!(f, "tls_client_ca = {}", quoted(&ca.to_string_lossy()))?,
                    None => writeln!(f, "# tls_client_ca: none, clients need no certificate")?,
                }
            }
            None => writeln!(
                f,
                "# tls_cert, tls_key, tls_client_ca: none, clients connect in plain text"
            )?,
        }
        writeln!(f, "insecure = {}", self.insecure)?;
        match self.metrics {
            Some(addr) => writeln!(f, "metrics_addr = {}", quoted(&addr.to_string()))?,
            None => writeln!(f, "metrics_addr = \"off\"")?,
        }
        writeln!(f, "max_connections = {}", self.connections_max)?;
        writeln!(
            f,
            "max_connections_before_hello = {}",
            self.connections_before_hello_max
        )?;
        let size = |n: u64| quoted(&format_bytes(n));
        let time = |d: Duration| quoted(&format_duration(d));
        writeln!(f, "frame_bytes_max = {}", size(self.frame_bytes_max.into()))?;
        writeln!(
            f,
            "hello_frame_bytes_max = {}",
            size(self.hello_frame_bytes_max.into())
        )?;
        writeln!(f, "hello_timeout = {}", time(self.hello_timeout))?;
        writeln!(f, "frame_timeout = {}", time(self.frame_timeout))?;
        writeln!(
            f,
            "requests_in_flight_max = {}",
            self.requests_in_flight_max
        )?;
        writeln!(f, "unsent_bytes_max = {}", size(self.unsent_bytes_max))?;
        writeln!(
            f,
            "unsent_bytes_total_max = {}",
            size(self.unsent_bytes_total_max)
        )?;
        write!(f, "memory_max = {}", size(self.memory_max_bytes))?;
        match &self.memory_max_origin {
            MemoryMaxOrigin::Given => writeln!(f)?,
            MemoryMaxOrigin::HalfOf(limit) => writeln!(
                f,
                "  # half of {} ({})",
                limit.source,
                approx_bytes(limit.bytes)
            )?,
            MemoryMaxOrigin::Fallback => writeln!(
                f,
                "  # fallback: neither a cgroup limit nor physical memory was found"
            )?,
        }
        writeln!(f, "queues_max = {}", self.queues_max)?;
        writeln!(f, "log = {}", quoted(&self.log_filter))?;
        writeln!(f, "shutdown_timeout = {}", time(self.shutdown_timeout))?;
        writeln!(f, "idle_spin = {}", time(self.idle_spin))?;
        match &self.snapshot {
            Some(path) => writeln!(f, "snapshot = {}", quoted(&path.to_string_lossy()))?,
            None => writeln!(
                f,
                "# snapshot: none, a restart loses every queue and message"
            )?,
        }
        writeln!(f, "snapshot_keep = {}", self.snapshot_keep)
    }
}

#[cfg(test)]
mod tests;
