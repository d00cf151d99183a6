//! The whole server, driven over loopback with raw protocol frames: the
//! figures of BENCHMARKS.md that need `sluice-server` itself.
//!
//! The driver starts `sluice-server` as a child process (`taskset -c 0`, or
//! `-c 0,1` for two shards) on a free port picked beforehand, pins itself to
//! `--client-cpu` (default 1), and speaks the protocol with `sluice-protocol`
//! over blocking `std::net` sockets, so the client side costs as little as
//! it can: SEND and RECEIVE frames are encoded once and written again and
//! again, replies are decoded in place. Each figure is measured for
//! `--io uring` and `--io epoll` in turn, within each of `--passes` passes
//! (a fresh server per measurement); the summary gives the median over the
//! passes.
//!
//! - `send`: SENDs of `--batch` x `--size`-byte messages, `--window` batches
//!   in flight per connection, on 1 connection (and `--send-conns` more);
//!   messages acknowledged per second.
//! - `e2e`: one connection keeps `--window` SENDs and `--receives` RECEIVEs
//!   (up to `--batch` messages, long poll) in flight and DELETEs every
//!   received batch at once; at most `--backlog` messages sent and not yet
//!   deleted. Messages deleted per second.
//! - `rtt`: one request at a time on one connection: PING, and SEND of one
//!   `--size`-byte message; round trips in an HdrHistogram, next to a
//!   blocking std::net echo server (TCP_NODELAY, `--size` bytes) on a thread
//!   pinned to the server's CPU. The servers of both backends and the echo
//!   run at once and take turns request by request, so that the machine's
//!   noise falls on all of them alike.
//! - `client`: the native client (`sluice-client`) in place of raw frames:
//!   its PING round trips through the blocking `Client` (without and with a
//!   read spin) and the `AsyncClient` (a current-thread runtime) join the
//!   `rtt` turns above, next to the raw-frame PING; then `--client-threads`
//!   threads share one blocking `Client`, each sending PINGs one at a time
//!   (`--client-requests` in all; once more with the read spin), and as many tasks share one
//!   `AsyncClient`. Requests answered per second. `shared` runs these
//!   shared-client figures alone (with the two floors: park/unpark between
//!   two threads, and `sched_yield` round robin among `--client-threads`
//!   threads), for profiling.
//! - `shards`: one hot queue, `--producers` and `--consumers` connections
//!   spread over the shards (connections are opened until HELLO names the
//!   shard wanted), with 1 shard (server on CPU 0) and 2 shards (server on
//!   CPUs 0 and 1, which the driver then shares). Messages deleted per
//!   second.
//!
//! - `tls` (only when asked for: `--only tls`): the same broker without
//!   and with TLS (rustls; a CA and server certificate made at start, in a
//!   temporary folder), through the native blocking client, in one run:
//!   PING round trips (p50, p99), the plain and the TLS server taking turns
//!   request by request; then end to end, one producer connection keeping
//!   `--window` SENDs of `--batch` x `--size` bytes in flight and one
//!   consumer connection receiving (up to `--batch`, long poll) and
//!   deleting each batch, at most `--backlog` messages sent and not yet
//!   deleted, `--e2e-messages` in all: messages deleted per second.
//!
//! ```text
//! cargo build --release -p sluice-broker --bin sluice-server
//! cargo build --release -p sluice-benches --bin server_bench
//! ./target/release/server_bench [--quick] [--only send,e2e,rtt,client,shared,shards,tls] ...
//! ./target/release/server_bench --help     # every flag, its default and meaning
//! ```
//!
//! Where to look: `args` (the command line, parsed with clap, and its
//! checks), `launch` (the server under test), `raw_client` (a raw protocol
//! connection and the frames it writes), `pipeline` (the pipelined run that
//! `send`, `e2e` and `shards` share), `workloads/` (one file per workload),
//! `table` (the figures and the lines printed as each is measured) and
//! `summary` (the tables of medians at the end).

mod args;
mod launch;
mod pipeline;
mod raw_client;
mod summary;
mod table;
mod workloads;

use std::io;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use sluice_broker::io::pin_current_thread;
use sluice_broker::testing::TestPki;

use args::{Args, Cli};
use table::{Table, lat_line, rate_line, req_line};
use workloads::{client, pipelined, rtt, tls};

/// Largest reply frame the driver accepts (the server's default limit is
/// 1 MiB).
pub(crate) const REPLY_FRAME_BYTES_MAX: u32 = 16 << 20;
/// Bytes read per `read` call.
pub(crate) const READ_CHUNK_BYTES: usize = 256 << 10;
/// A blocking read that waits longer than this fails the run.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a started server to accept connections.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections opened at most to land one on a given shard.
pub(crate) const SHARD_TRIES_MAX: usize = 200;
/// Long-poll wait of the RECEIVEs (ms).
pub(crate) const RECEIVE_WAIT_MS: u32 = 1000;
/// The queue every bench uses.
pub(crate) const QUEUE: &str = "bench";

pub(crate) type Res<T> = Result<T, String>;

pub(crate) fn err(context: &str) -> impl Fn(io::Error) -> String + '_ {
    move |e| format!("{context}: {e}")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn run_pass(args: &Args, t: &mut Table) -> Res<()> {
    if args.runs("send") {
        for &conns in &args.send_conns {
            for &io in &args.ios {
                let r = pipelined::bench_send(args, io, conns)?;
                rate_line(t, format!("send {} {conns} conn", io.flag()), r);
            }
        }
    }
    if args.runs("e2e") {
        for &io in &args.ios {
            let r = pipelined::bench_e2e(args, io)?;
            rate_line(t, format!("e2e {}", io.flag()), r);
        }
    }
    if args.runs("rtt") || args.runs("client") {
        for (name, l) in rtt::bench_rtt(args)? {
            lat_line(t, &name, l);
        }
    }
    if args.runs_shared() {
        req_line(
            t,
            "thread hand-off floor".into(),
            client::bench_handoff_floor(args)?,
        );
        req_line(
            t,
            "thread yield floor".into(),
            client::bench_yield_floor(args)?,
        );
        for &io in &args.ios {
            let r = client::bench_client_threads(args, io, Duration::ZERO)?;
            req_line(t, format!("client {} threads", io.flag()), r);
            let spin = Duration::from_micros(args.client_spin_us);
            let r = client::bench_client_threads(args, io, spin)?;
            req_line(t, format!("client {} threads+spin", io.flag()), r);
            let r = client::bench_client_tasks(args, io)?;
            req_line(t, format!("client {} tasks", io.flag()), r);
        }
    }
    if args.runs("tls") {
        let pki = TestPki::generate();
        for &io in &args.ios {
            let (plain, tls) = tls::bench_tls_ping(args, io, &pki)?;
            lat_line(t, &format!("PING {} plain", io.flag()), plain);
            lat_line(t, &format!("PING {} TLS", io.flag()), tls);
            for (name, pki) in [("plain", None), ("TLS", Some(&pki))] {
                let rate = tls::bench_tls_e2e(args, io, pki)?;
                println!(
                    "  {:<34} {rate:>12.0} msg/s",
                    format!("client e2e {} {name}", io.flag())
                );
                t.push(format!("client e2e {} {name}", io.flag()), rate);
            }
        }
    }
    if args.runs("shards") {
        for shards in [1, 2] {
            for &io in &args.ios {
                let r = pipelined::bench_shards(args, io, shards)?;
                rate_line(t, format!("hot queue {} {shards} shard", io.flag()), r);
            }
        }
    }
    Ok(())
}

/// The settings of this run, from the command line (exits on `--help` and
/// on flags clap rejects).
fn parse_args() -> Res<Args> {
    let exe = std::env::current_exe().map_err(err("current_exe"))?;
    let args = Cli::parse().resolve(&exe)?;
    args.check_server()?;
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(why) => Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, why)
            .exit(),
    };
    if let Err(e) = pin_current_thread(args.client_cpu) {
        eprintln!(
            "server_bench: cannot pin the driver to CPU {}: {e}",
            args.client_cpu
        );
        std::process::exit(1);
    }
    println!(
        "server_bench: server {} on CPU {} (2 shards: CPUs 0,1), driver on CPU {}; {} B \
         messages, batches of {}, {} SENDs and {} RECEIVEs in flight per connection, backlog {} \
         messages; send {} / e2e {} messages after 10% warm-up; {} round trips after {}; {} \
         pass(es); load average {}",
        args.server.display(),
        args.server_cpu,
        args.client_cpu,
        args.size,
        args.batch,
        args.window,
        args.receives,
        args.backlog,
        args.send_messages,
        args.e2e_messages,
        args.rounds,
        args.warmup_rounds,
        args.passes,
        loadavg()
    );
    let mut table = Table::default();
    for pass in 0..args.passes {
        println!("pass {} (load average {}):", pass + 1, loadavg());
        if let Err(e) = run_pass(&args, &mut table) {
            eprintln!("server_bench: {e}");
            std::process::exit(1);
        }
    }
    println!("load average at the end: {}", loadavg());
    summary::summary(&args, &table);
}
