//! The command line: clap's parse of the flags (`Cli`), then the resolved
//! and checked settings every workload reads (`Args`).
//!
//! Every count takes `_` as a digit separator (`3_000_000`). A flag given
//! twice keeps its last value. `--quick` lowers the defaults of the counts
//! it names; a count given explicitly wins over it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{ArgAction, Parser, ValueEnum};

use crate::Res;

/// The workloads `--only` can name, in the order of the help.
const WORKLOADS: [&str; 7] = ["send", "e2e", "rtt", "client", "shared", "shards", "tls"];

/// The workloads run when `--only` is not given.
const WORKLOADS_DEFAULT: [&str; 5] = ["send", "e2e", "rtt", "client", "shards"];

/// The server's I/O backend (`sluice-server --io`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub(crate) enum Io {
    /// io_uring.
    Uring,
    /// epoll.
    Epoll,
}

impl Io {
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Io::Uring => "uring",
            Io::Epoll => "epoll",
        }
    }
}

/// The whole server, driven over loopback with raw protocol frames (and
/// the native clients): the figures of BENCHMARKS.md that need
/// `sluice-server` itself.
///
/// Starts `sluice-server` (a fresh one per measurement, pinned to
/// `--server-cpu`, or to CPUs 0,1 for two shards) on a free loopback port,
/// pins itself to `--client-cpu`, measures each workload of `--only` for
/// each backend of `--io` in each of `--passes` passes, and prints a table
/// of medians over the passes.
#[derive(Debug, Parser)]
#[command(
    name = "server_bench",
    args_override_self = true,
    after_help = "Workloads (--only): send = SENDs alone, pipelined, on 1 connection and \
                  --send-conns more; e2e = send + receive + delete on one connection; \
                  rtt = one request at a time (PING, SEND of one message) next to a std::net \
                  echo; client = the native clients next to raw frames, and threads or tasks \
                  sharing one client; shared = the shared-client figures alone, with their \
                  floors; shards = one hot queue over 1 and 2 shards; tls = the native client \
                  without and with TLS (only when asked for).\n\
                  Counts take `_` as a digit separator. Exit status: 0 done; 1 a run failed; \
                  2 bad flags."
)]
pub(crate) struct Cli {
    /// A short smoke run: 1 pass, 200,000 send and 100,000 e2e messages,
    /// 2,000 round trips after 200, 100,000 client requests (counts given
    /// explicitly win).
    #[arg(long)]
    quick: bool,

    /// The sluice-server binary to start [default: sluice-server beside
    /// this binary].
    #[arg(long, value_name = "PATH")]
    server: Option<PathBuf>,

    /// Passes; each figure is measured once a pass, with a fresh server,
    /// and the summary gives the median [default: 3; 1 with --quick].
    #[arg(long, value_name = "N", value_parser = small)]
    passes: Option<usize>,

    /// Messages per SEND, and most messages per RECEIVE (at most 1024).
    #[arg(long, value_name = "N", value_parser = small, default_value = "64")]
    batch: usize,

    /// Bytes of each message body (and of each echo round trip).
    #[arg(long, value_name = "BYTES", value_parser = small, default_value = "100")]
    size: usize,

    /// SENDs kept in flight per connection.
    #[arg(long, value_name = "N", value_parser = small, default_value = "16")]
    window: usize,

    /// RECEIVEs (long polls) kept in flight per receiving connection.
    #[arg(long, value_name = "N", value_parser = small, default_value = "4")]
    receives: usize,

    /// Most messages sent and not yet deleted (e2e, shards, tls).
    #[arg(long, value_name = "N", value_parser = count, default_value = "4096")]
    backlog: u64,

    /// Messages counted by `send`, after a tenth as many as warm-up
    /// [default: 3,000,000; 200,000 with --quick].
    #[arg(long, value_name = "N", value_parser = count)]
    send_messages: Option<u64>,

    /// Messages counted by `e2e`, `shards` and the TLS end to end, after a
    /// tenth as many as warm-up [default: 2,000,000; 100,000 with --quick].
    #[arg(long, value_name = "N", value_parser = count)]
    e2e_messages: Option<u64>,

    /// Connection counts `send` is measured with, comma-separated.
    #[arg(
        long,
        value_name = "N,..",
        value_parser = small,
        value_delimiter = ',',
        action = ArgAction::Set,
        default_value = "1,2"
    )]
    send_conns: Vec<usize>,

    /// Round trips counted per probe (rtt, client, tls PING) [default:
    /// 50,000; 2,000 with --quick].
    #[arg(long, value_name = "N", value_parser = count)]
    rounds: Option<u64>,

    /// Round trips per probe before the counted ones [default: 5,000; 200
    /// with --quick].
    #[arg(long, value_name = "N", value_parser = count)]
    warmup_rounds: Option<u64>,

    /// Threads sharing one blocking Client (and tasks sharing one
    /// AsyncClient, and threads of the yield floor).
    #[arg(long, value_name = "N", value_parser = small, default_value = "16")]
    client_threads: usize,

    /// PINGs of each shared-client figure in all, and hand-offs of each
    /// floor [default: 1,000,000; 100,000 with --quick].
    #[arg(long, value_name = "N", value_parser = count)]
    client_requests: Option<u64>,

    /// Read spin (microseconds) of the client figures "with read spin".
    #[arg(long, value_name = "N", value_parser = count, default_value = "50")]
    client_spin_us: u64,

    /// Producer connections of `shards`.
    #[arg(long, value_name = "N", value_parser = small, default_value = "2")]
    producers: usize,

    /// Consumer connections of `shards`.
    #[arg(long, value_name = "N", value_parser = small, default_value = "2")]
    consumers: usize,

    /// CPU the server runs on (and the echo server; two shards use CPUs
    /// 0,1).
    #[arg(long, value_name = "C", value_parser = small, default_value = "0")]
    server_cpu: usize,

    /// CPU the driver pins itself (and its threads) to.
    #[arg(long, value_name = "C", value_parser = small, default_value = "1")]
    client_cpu: usize,

    /// Workloads to run, comma-separated (see below) [default:
    /// send,e2e,rtt,client,shards].
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        action = ArgAction::Set,
        value_parser = WORKLOADS,
        hide_possible_values = true
    )]
    only: Vec<String>,

    /// Server backends, comma-separated; each figure is measured for each.
    #[arg(
        long,
        value_name = "IO,..",
        value_delimiter = ',',
        action = ArgAction::Set,
        default_value = "uring,epoll"
    )]
    io: Vec<Io>,

    /// Drive a server already running at this address instead of starting
    /// one (under callgrind or strace, say): one pass, and the first --io
    /// only labels the figures. Not with `shards` or `tls`, which start
    /// their own servers.
    #[arg(long, value_name = "HOST:PORT")]
    connect: Option<SocketAddr>,
}

/// A count: digits, `_` allowed between them.
fn count(v: &str) -> Result<u64, String> {
    v.replace('_', "")
        .parse::<u64>()
        .map_err(|e| format!("{v}: {e}"))
}

/// A count that is also a size in memory.
fn small(v: &str) -> Result<usize, String> {
    usize::try_from(count(v)?).map_err(|e| format!("{v}: {e}"))
}

/// The settings of a run, resolved from the flags and checked.
#[derive(Clone, Debug)]
pub(crate) struct Args {
    pub(crate) server: PathBuf,
    pub(crate) passes: usize,
    pub(crate) batch: usize,
    pub(crate) size: usize,
    pub(crate) window: usize,
    pub(crate) receives: usize,
    pub(crate) backlog: u64,
    pub(crate) send_messages: u64,
    pub(crate) e2e_messages: u64,
    pub(crate) send_conns: Vec<usize>,
    pub(crate) rounds: u64,
    pub(crate) warmup_rounds: u64,
    pub(crate) client_threads: usize,
    pub(crate) client_requests: u64,
    pub(crate) client_spin_us: u64,
    pub(crate) producers: usize,
    pub(crate) consumers: usize,
    pub(crate) server_cpu: usize,
    pub(crate) client_cpu: usize,
    pub(crate) only: Vec<String>,
    pub(crate) ios: Vec<Io>,
    /// Drive a server already running here instead of starting one.
    pub(crate) connect: Option<SocketAddr>,
}

impl Cli {
    /// The settings, with `--server` defaulting to `sluice-server` beside
    /// `exe`, the defaults `--quick` lowers, and the checks of the counts.
    /// Whether the server binary exists is not checked here
    /// ([`Args::check_server`]).
    pub(crate) fn resolve(self, exe: &Path) -> Res<Args> {
        let quick = |normal: u64, quick_value: u64| if self.quick { quick_value } else { normal };
        let mut args = Args {
            server: self
                .server
                .unwrap_or_else(|| exe.with_file_name("sluice-server")),
            passes: self.passes.unwrap_or(if self.quick { 1 } else { 3 }),
            batch: self.batch,
            size: self.size,
            window: self.window,
            receives: self.receives,
            backlog: self.backlog,
            send_messages: self.send_messages.unwrap_or(quick(3_000_000, 200_000)),
            e2e_messages: self.e2e_messages.unwrap_or(quick(2_000_000, 100_000)),
            send_conns: self.send_conns,
            rounds: self.rounds.unwrap_or(quick(50_000, 2_000)),
            warmup_rounds: self.warmup_rounds.unwrap_or(quick(5_000, 200)),
            client_threads: self.client_threads,
            client_requests: self.client_requests.unwrap_or(quick(1_000_000, 100_000)),
            client_spin_us: self.client_spin_us,
            producers: self.producers,
            consumers: self.consumers,
            server_cpu: self.server_cpu,
            client_cpu: self.client_cpu,
            only: if self.only.is_empty() {
                WORKLOADS_DEFAULT.map(String::from).to_vec()
            } else {
                self.only
            },
            ios: self.io,
            connect: self.connect,
        };
        args.check_counts()?;
        if args.connect.is_some() {
            // One run against a server started by hand (under callgrind or
            // strace, say): `--io` only labels the figures.
            args.passes = 1;
            args.ios.truncate(1);
            if args.only.iter().any(|o| o == "shards" || o == "tls") {
                return Err(
                    "--connect cannot run `shards` or `tls` (they start their own servers)".into(),
                );
            }
        }
        Ok(args)
    }
}

impl Args {
    fn check_counts(&self) -> Res<()> {
        if self.passes == 0
            || self.batch == 0
            || self.batch > 1024
            || self.size == 0
            || self.window == 0
            || self.receives == 0
            || self.rounds == 0
            || self.producers == 0
            || self.consumers == 0
            || self.client_threads == 0
            || self.client_requests < self.client_threads as u64
            || self.send_conns.contains(&0)
        {
            return Err("counts must be positive, --batch at most 1024".into());
        }
        Ok(())
    }

    /// The server binary is there, unless the run drives one by `--connect`.
    pub(crate) fn check_server(&self) -> Res<()> {
        if self.connect.is_none() && !self.server.exists() {
            return Err(format!(
                "no server binary at {}: run `cargo build --release -p sluice-broker --bin \
                 sluice-server` or pass --server",
                self.server.display()
            ));
        }
        Ok(())
    }

    pub(crate) fn runs(&self, what: &str) -> bool {
        self.only.iter().any(|o| o == what)
    }

    /// The shared-client figures: part of `client`, or alone (`shared`).
    pub(crate) fn runs_shared(&self) -> bool {
        self.runs("client") || self.runs("shared")
    }
}

#[cfg(test)]
mod tests;
