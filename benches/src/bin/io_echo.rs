//! Echo over sluice's io layer (io_uring, epoll) against a blocking std::net
//! echo server: the io layer's share of the latency goal (one request at a
//! time: p50 within 3 µs and p99 within 10 µs of such an echo server; see
//! BENCHMARKS.md).
//!
//! Each server runs on one thread pinned to `--server-cpu` (default 0), the
//! client on `--client-cpu` (default 1). Per server and pass:
//!
//! - latency: one request at a time on one connection (`--size` bytes,
//!   `--rounds` round trips after `--warmup`), HdrHistogram of round trips;
//! - throughput: one connection, `--depth` messages written at once and read
//!   back before the next batch, `--messages` in all.
//!
//! The three servers take turns within each of `--passes` passes; the
//! summary gives the median over passes of each figure.
//!
//! ```text
//! cargo run --release -p sluice-benches --bin io_echo -- [--quick] [--rounds N] ...
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use sluice_broker::io::{BackendChoice, DriverConfig, Event, Waker, open, pin_current_thread};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Uring,
    Epoll,
    Std,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Uring => "sluice io_uring",
            Kind::Epoll => "sluice epoll",
            Kind::Std => "std::net blocking",
        }
    }
}

#[derive(Clone, Debug)]
struct Args {
    rounds: u64,
    warmup: u64,
    size: usize,
    messages: u64,
    depth: usize,
    passes: usize,
    server_cpu: usize,
    client_cpu: usize,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut args = Args {
            rounds: 100_000,
            warmup: 10_000,
            size: 64,
            messages: 2_000_000,
            depth: 64,
            passes: 3,
            server_cpu: 0,
            client_cpu: 1,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--quick" {
                args.rounds = 5_000;
                args.warmup = 500;
                args.messages = 100_000;
                args.passes = 1;
                continue;
            }
            if flag == "--help" || flag == "-h" {
                return Err(String::new());
            }
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |e: std::num::ParseIntError| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--rounds" => args.rounds = value.parse().map_err(bad)?,
                "--warmup" => args.warmup = value.parse().map_err(bad)?,
                "--size" => args.size = value.parse().map_err(bad)?,
                "--messages" => args.messages = value.parse().map_err(bad)?,
                "--depth" => args.depth = value.parse().map_err(bad)?,
                "--passes" => args.passes = value.parse().map_err(bad)?,
                "--server-cpu" => args.server_cpu = value.parse().map_err(bad)?,
                "--client-cpu" => args.client_cpu = value.parse().map_err(bad)?,
                other => return Err(format!("unknown flag {other}")),
            }
        }
        if args.size == 0 || args.depth == 0 || args.rounds == 0 || args.passes == 0 {
            return Err("sizes, depth, rounds and passes must be positive".into());
        }
        Ok(args)
    }
}

/// A running echo server.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Option<Arc<Waker>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Server {
    fn start(kind: Kind, cpu: usize) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = thread::spawn(move || -> io::Result<()> {
            pin_current_thread(cpu)?;
            match kind {
                Kind::Std => std_echo(&flag, &ready_tx),
                Kind::Uring | Kind::Epoll => driver_echo(kind, &flag, &ready_tx),
            }
        });
        match ready_rx.recv() {
            Ok((addr, waker)) => Ok(Self {
                addr,
                stop,
                waker,
                thread: Some(thread),
            }),
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(io::Error::other("server thread ended before it was ready")),
            },
        }
    }

    fn stop(mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Release);
        match &self.waker {
            Some(waker) => waker.wake(),
            // Unblock accept.
            None => drop(TcpStream::connect(self.addr)),
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("server thread panicked")),
            None => Ok(()),
        }
    }
}

type Ready = mpsc::Sender<(SocketAddr, Option<Arc<Waker>>)>;

fn driver_echo(kind: Kind, stop: &AtomicBool, ready: &Ready) -> io::Result<()> {
    let choice = match kind {
        Kind::Uring => BackendChoice::IoUring,
        _ => BackendChoice::Epoll,
    };
    let config = DriverConfig::new("127.0.0.1:0".parse().expect("a valid address"));
    let mut driver = open(&config, choice).map_err(io::Error::other)?.driver;
    eprintln!(
        "  {}: {} ({})",
        kind.name(),
        driver.backend(),
        driver.setup_detail()
    );
    let _ = ready.send((driver.local_addr(), Some(driver.waker())));
    while !stop.load(Ordering::Acquire) {
        driver.poll(None, &mut |ops, event| {
            if let Event::Data { conn, bytes } = event {
                ops.send(conn, Bytes::copy_from_slice(bytes));
            }
        })?;
    }
    Ok(())
}

fn std_echo(stop: &AtomicBool, ready: &Ready) -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let _ = ready.send((listener.local_addr()?, None));
    let mut buf = vec![0u8; 64 * 1024];
    for stream in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let mut stream = stream?;
        stream.set_nodelay(true)?;
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => stream.write_all(&buf[..n])?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    Ok(())
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(stream)
}

/// One request at a time; returns the round-trip histogram in ns.
fn latency(addr: SocketAddr, args: &Args) -> io::Result<Histogram<u64>> {
    let mut stream = connect(addr)?;
    let msg = vec![0x5au8; args.size];
    let mut back = vec![0u8; args.size];
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(io::Error::other)?;
    for round in 0..args.warmup + args.rounds {
        let start = Instant::now();
        stream.write_all(&msg)?;
        stream.read_exact(&mut back)?;
        let elapsed = start.elapsed().as_nanos() as u64;
        if round >= args.warmup {
            hist.saturating_record(elapsed.max(1));
        }
    }
    if back != msg {
        return Err(io::Error::other("echo returned different bytes"));
    }
    Ok(hist)
}

/// Batches of `depth` messages written at once and read back; messages/s.
fn throughput(addr: SocketAddr, args: &Args) -> io::Result<f64> {
    let mut stream = connect(addr)?;
    let batch = vec![0xa5u8; args.size * args.depth];
    let mut back = vec![0u8; batch.len()];
    let batches = args.messages.div_ceil(args.depth as u64);
    // Warm up with a tenth as many.
    for _ in 0..batches / 10 {
        stream.write_all(&batch)?;
        stream.read_exact(&mut back)?;
    }
    let start = Instant::now();
    for _ in 0..batches {
        stream.write_all(&batch)?;
        stream.read_exact(&mut back)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok((batches * args.depth as u64) as f64 / elapsed)
}

#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    mean_us: f64,
    msgs_per_s: f64,
}

fn run(kind: Kind, args: &Args) -> io::Result<Figures> {
    let server = Server::start(kind, args.server_cpu)?;
    let hist = latency(server.addr, args)?;
    let msgs_per_s = throughput(server.addr, args)?;
    server.stop()?;
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(Figures {
        p50_us: us(hist.value_at_quantile(0.50)),
        p99_us: us(hist.value_at_quantile(0.99)),
        p999_us: us(hist.value_at_quantile(0.999)),
        mean_us: hist.mean() / 1000.0,
        msgs_per_s,
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("io_echo: {why}");
            }
            eprintln!(
                "usage: io_echo [--quick] [--rounds N] [--warmup N] [--size BYTES] \
                 [--messages N] [--depth N] [--passes N] [--server-cpu C] [--client-cpu C]"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = pin_current_thread(args.client_cpu) {
        eprintln!(
            "io_echo: cannot pin the client to CPU {}: {e}",
            args.client_cpu
        );
        std::process::exit(1);
    }
    println!(
        "io_echo: {} B messages; latency {} round trips after {} warm-up; throughput {} \
         messages in batches of {}; server on CPU {}, client on CPU {}; {} passes",
        args.size,
        args.rounds,
        args.warmup,
        args.messages,
        args.depth,
        args.server_cpu,
        args.client_cpu,
        args.passes
    );
    let kinds = [Kind::Uring, Kind::Epoll, Kind::Std];
    let mut results: Vec<Vec<Figures>> = vec![Vec::new(); kinds.len()];
    for pass in 0..args.passes {
        println!("pass {}:", pass + 1);
        for (k, kind) in kinds.iter().enumerate() {
            match run(*kind, &args) {
                Ok(f) => {
                    println!(
                        "  {:<18} p50 {:>7.2} us  p99 {:>7.2} us  p99.9 {:>7.2} us  mean {:>7.2} us  {:>10.0} msg/s",
                        kind.name(),
                        f.p50_us,
                        f.p99_us,
                        f.p999_us,
                        f.mean_us,
                        f.msgs_per_s
                    );
                    results[k].push(f);
                }
                Err(e) => {
                    eprintln!("io_echo: {} failed: {e}", kind.name());
                    std::process::exit(1);
                }
            }
        }
    }
    println!("\nmedian of {} passes:", args.passes);
    println!(
        "| server | p50 µs | p99 µs | p99.9 µs | mean µs | pipelined msg/s |\n|---|---:|---:|---:|---:|---:|"
    );
    let std_index = kinds.len() - 1;
    let pick = |k: usize, f: fn(&Figures) -> f64| median(results[k].iter().map(f).collect());
    for (k, kind) in kinds.iter().enumerate() {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} |",
            kind.name(),
            pick(k, |f| f.p50_us),
            pick(k, |f| f.p99_us),
            pick(k, |f| f.p999_us),
            pick(k, |f| f.mean_us),
            pick(k, |f| f.msgs_per_s)
        );
    }
    println!("\ndifference from std::net (median p50 / p99):");
    for (k, kind) in kinds.iter().enumerate().take(std_index) {
        println!(
            "  {:<18} p50 {:+.2} us  p99 {:+.2} us  throughput {:.2}x",
            kind.name(),
            pick(k, |f| f.p50_us) - pick(std_index, |f| f.p50_us),
            pick(k, |f| f.p99_us) - pick(std_index, |f| f.p99_us),
            pick(k, |f| f.msgs_per_s) / pick(std_index, |f| f.msgs_per_s)
        );
    }
}
