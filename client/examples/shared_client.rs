//! One blocking `Client` shared by many threads: each thread clones the
//! client (a clone shares the connection) and sends PINGs one at a time.
//! The connection combines what the threads write at the same moment into
//! one write, and one of the waiting threads reads the replies for all.
//!
//! It prints the requests answered per second and the process's CPU time
//! per request, so it doubles as the program to profile a shared client
//! with (`perf stat`, `perf record`). Run a server, then this example:
//!
//! ```sh
//! cargo run --release -p sluice-broker --bin sluice-server &
//! cargo run --release -p sluice-client --example shared_client -- --addr 127.0.0.1:7171
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_client::{Client, ClientConfig};

/// Many threads sharing one blocking client, PING after PING.
#[derive(Debug, Parser)]
struct Args {
    /// Broker address.
    #[arg(long, default_value = "127.0.0.1:7171")]
    addr: String,
    /// Threads sharing the client.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: u64,
    /// PINGs in all, split evenly between the threads (rounded up to a
    /// multiple of `--threads`).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// The client's read spin, in microseconds (0: off).
    #[arg(long, default_value_t = 0)]
    read_spin_us: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = ClientConfig::new(args.addr.clone())
        .with_read_spin(Duration::from_micros(args.read_spin_us));
    let client = match Client::connect(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let per_thread = args.requests.div_ceil(args.threads);
    let (t0, cpu0) = (Instant::now(), cpu_time());
    let failed = std::thread::scope(|s| {
        let workers: Vec<_> = (0..args.threads)
            .map(|_| {
                let c = client.clone();
                s.spawn(move || {
                    (0..per_thread).try_for_each(|_| c.ping().map(drop).map_err(|e| e.to_string()))
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a thread panicked".into()))
                    .err()
            })
            .next()
    });
    if let Some(e) = failed {
        eprintln!("a PING failed: {e}");
        return ExitCode::FAILURE;
    }
    let n = per_thread * args.threads;
    let elapsed = t0.elapsed().as_secs_f64();
    println!(
        "{} threads, {n} PINGs: {:.0} requests/s, {:.2} us of CPU per request",
        args.threads,
        n as f64 / elapsed,
        cpu_time().saturating_sub(cpu0).as_secs_f64() * 1e6 / n as f64
    );
    ExitCode::SUCCESS
}

/// CPU time this process has used so far, every thread, user and system
/// (Linux: from `/proc/self/stat`, in clock ticks of 10 ms, Linux's
/// USER_HZ; zero where it cannot be read).
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command name, which is in parentheses.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    Duration::from_millis(ticks * 10)
}
