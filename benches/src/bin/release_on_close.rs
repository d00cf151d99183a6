//! Redelivery after a consumer process dies holding its leases: how long
//! from SIGKILL until another consumer has received every message the dead
//! one held, for sluice (leases bound to the connection) and beanstalkd
//! (which releases a closed connection's reservations too). Redis streams
//! and NATS JetStream wait out the lease instead (XAUTOCLAIM's min idle
//! time, AckWait): BENCHMARKS.md quotes that, nothing here measures it.
//!
//! Each run: the queue (tube) holds `--messages` messages; a holder
//! process (this binary, `--hold`) receives them all with leases of
//! `--lease` (sluice: bound to its connection; beanstalkd: reserved with
//! that TTR), says so, and waits; a survivor connection is open and
//! waiting (sluice: a long-polling RECEIVE of up to 1,024; beanstalkd:
//! pipelined `reserve-with-timeout`s, 64 at a time). The driver sends the
//! holder SIGKILL, notes the time, and times the survivor's first message
//! and its last. The survivor deletes them all, so the next run starts
//! empty. Runs alternate between the brokers, `--runs` each; the summary
//! gives the median and the maximum.
//!
//! Both brokers run as child processes on `--server-cpu` (default 0), the
//! driver and the holder on `--client-cpu` (default 1).
//!
//! ```text
//! cargo build --release -p sluice-broker --bin sluice-server
//! cargo build --release -p sluice-benches --bin release_on_close
//! ./target/release/release_on_close [--runs 11] [--messages 1000] [--lease-s 30]
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_broker::io::pin_current_thread;
use sluice_client::{Client, ClientConfig, QueueOptions, Receipt, ReceiveOptions, SendEntry};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const QUEUE: &str = "release";
/// Longest wait for a broker to listen, a holder to hold, a survivor to
/// receive everything: a run that takes longer fails.
const PATIENCE: Duration = Duration::from_secs(120);

struct Args {
    server: PathBuf,
    beanstalkd: PathBuf,
    runs: usize,
    messages: usize,
    lease_s: u32,
    server_cpu: usize,
    client_cpu: usize,
}

fn usage() -> ! {
    eprintln!(
        "usage: release_on_close [--server PATH] [--beanstalkd PATH] [--runs N] [--messages N] \
         [--lease-s S] [--server-cpu N] [--client-cpu N]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut a = Args {
        server: exe.with_file_name("sluice-server"),
        beanstalkd: PathBuf::from("beanstalkd"),
        runs: 11,
        messages: 1000,
        lease_s: 30,
        server_cpu: 0,
        client_cpu: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        let number = |v: String| v.parse::<usize>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--server" => a.server = PathBuf::from(value()),
            "--beanstalkd" => a.beanstalkd = PathBuf::from(value()),
            "--runs" => a.runs = number(value()),
            "--messages" => a.messages = number(value()),
            "--lease-s" => a.lease_s = u32::try_from(number(value())).unwrap_or_else(|_| usage()),
            "--server-cpu" => a.server_cpu = number(value()),
            "--client-cpu" => a.client_cpu = number(value()),
            _ => usage(),
        }
    }
    a
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A broker child process, killed on drop.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_broker(cpu: usize, program: &PathBuf, args: &[String], addr: SocketAddr) -> Broker {
    let child = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    let started = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            started.elapsed() < PATIENCE,
            "{} did not listen",
            program.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Broker(child)
}

// ----- beanstalkd's text protocol, as little as needed --------------------------

struct Beanstalk {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Beanstalk {
    fn connect(addr: SocketAddr) -> Beanstalk {
        let s = TcpStream::connect(addr).expect("connect to beanstalkd");
        s.set_nodelay(true).expect("nodelay");
        Beanstalk {
            reader: BufReader::new(s.try_clone().expect("clone the socket")),
            writer: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.reader.read_line(&mut l).expect("read from beanstalkd");
        l.trim_end().to_owned()
    }

    fn put_all(&mut self, n: usize, ttr: u32) {
        let mut out = Vec::new();
        for i in 0..n {
            let body = format!("job {i}");
            out.extend_from_slice(format!("put 0 0 {ttr} {}\r\n{body}\r\n", body.len()).as_bytes());
        }
        self.writer.write_all(&out).expect("put");
        for _ in 0..n {
            let l = self.line();
            assert!(l.starts_with("INSERTED"), "put: {l}");
        }
    }

    /// Pipelines `n` reserves waiting up to `timeout_s` each; the job ids.
    fn reserve(&mut self, n: usize, timeout_s: u32) -> Vec<u64> {
        let cmd = format!("reserve-with-timeout {timeout_s}\r\n").repeat(n);
        self.writer.write_all(cmd.as_bytes()).expect("reserve");
        let mut ids = Vec::new();
        for _ in 0..n {
            let l = self.line();
            if l == "TIMED_OUT" {
                continue;
            }
            let mut parts = l.split(' ');
            assert_eq!(parts.next(), Some("RESERVED"), "reserve: {l}");
            let id: u64 = parts.next().and_then(|p| p.parse().ok()).expect("job id");
            let len: usize = parts.next().and_then(|p| p.parse().ok()).expect("job size");
            let mut body = vec![0; len + 2];
            self.reader.read_exact(&mut body).expect("job body");
            ids.push(id);
        }
        ids
    }

    fn delete_all(&mut self, ids: &[u64]) {
        let mut out = String::new();
        for id in ids {
            out.push_str(&format!("delete {id}\r\n"));
        }
        self.writer.write_all(out.as_bytes()).expect("delete");
        for _ in ids {
            let l = self.line();
            assert_eq!(l, "DELETED");
        }
    }
}

// ----- the holder process ------------------------------------------------------

/// `--hold sluice|beanstalkd ADDR N LEASE_S`: receive N messages with leases
/// of LEASE_S, print `HOLDING N`, wait to be killed.
fn hold(kind: &str, addr: &str, n: usize, lease_s: u32) -> ! {
    let mut held = 0;
    match kind {
        "sluice" => {
            let client = Client::connect(ClientConfig::new(addr)).expect("connect");
            let options = ReceiveOptions::new(1024)
                .visibility_timeout(Duration::from_secs(lease_s.into()))
                .wait(Duration::from_secs(1))
                .bind_leases(true);
            while held < n {
                held += client.receive(QUEUE, options).expect("receive").len();
            }
            // Held, with its connection, until the process is killed.
            std::mem::forget(client);
        }
        "beanstalkd" => {
            let mut b = Beanstalk::connect(addr.parse().expect("an address"));
            while held < n {
                held += b.reserve((n - held).min(64), 1).len();
            }
            std::mem::forget(b);
        }
        _ => usage(),
    }
    println!("HOLDING {held}");
    std::io::stdout().flush().expect("flush");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn spawn_holder(kind: &str, addr: SocketAddr, n: usize, lease_s: u32, cpu: usize) -> Child {
    let exe = std::env::current_exe().expect("this binary");
    let mut child = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(exe)
        .args([
            "--hold",
            kind,
            &addr.to_string(),
            &n.to_string(),
            &lease_s.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the holder");
    let out = child.stdout.take().expect("holder stdout");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("the holder's word");
    assert_eq!(line.trim(), format!("HOLDING {n}"), "holder");
    child
}

/// Time from the kill to the survivor's first and last message.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: Duration,
    all: Duration,
}

fn run_sluice(addr: SocketAddr, a: &Args) -> Run {
    let admin = Client::connect(ClientConfig::new(addr.to_string())).expect("connect");
    for chunk in 0..a.messages.div_ceil(256) {
        let n = (a.messages - chunk * 256).min(256);
        let entries: Vec<SendEntry> = (0..n).map(|i| SendEntry::new(format!("job {i}"))).collect();
        for r in admin.send_batch(QUEUE, &entries).expect("send") {
            r.expect("accepted");
        }
    }
    let mut holder = spawn_holder("sluice", addr, a.messages, a.lease_s, a.client_cpu);
    let survivor = Client::connect(ClientConfig::new(addr.to_string())).expect("connect");
    let options = ReceiveOptions::new(1024)
        .visibility_timeout(Duration::from_secs(600))
        .wait(Duration::from_secs(20));
    // The first receive is in flight, parked, before the kill.
    let mut pending = Some(survivor.start_receive(QUEUE, options).expect("receive"));
    std::thread::sleep(Duration::from_millis(50));
    let killed = Instant::now();
    holder.kill().expect("SIGKILL the holder");
    let mut receipts: Vec<Receipt> = Vec::new();
    let mut first = None;
    while receipts.len() < a.messages {
        assert!(
            killed.elapsed() < PATIENCE,
            "only {} came back",
            receipts.len()
        );
        let got = match pending.take() {
            Some(p) => p.wait().expect("receive"),
            None => survivor.receive(QUEUE, options).expect("receive"),
        };
        if !got.is_empty() {
            first.get_or_insert_with(|| killed.elapsed());
        }
        receipts.extend(got.iter().map(|m| m.receipt));
    }
    let all = killed.elapsed();
    let _ = holder.wait();
    for chunk in receipts.chunks(1024) {
        for r in admin.delete_batch(QUEUE, chunk).expect("delete") {
            r.expect("deleted");
        }
    }
    Run {
        first: first.unwrap_or(all),
        all,
    }
}

fn run_beanstalkd(addr: SocketAddr, a: &Args) -> Run {
    Beanstalk::connect(addr).put_all(a.messages, a.lease_s);
    let mut holder = spawn_holder("beanstalkd", addr, a.messages, a.lease_s, a.client_cpu);
    let mut survivor = Beanstalk::connect(addr);
    // The first reserves are sent, and wait, before the kill.
    let batch = 64.min(a.messages);
    let cmd = "reserve-with-timeout 20\r\n".repeat(batch);
    survivor.writer.write_all(cmd.as_bytes()).expect("reserve");
    std::thread::sleep(Duration::from_millis(50));
    let killed = Instant::now();
    holder.kill().expect("SIGKILL the holder");
    let mut ids = Vec::new();
    let mut first = None;
    // Read the replies of the reserves sent before the kill, then go on.
    for _ in 0..batch {
        let l = survivor.line();
        let mut parts = l.split(' ');
        assert_eq!(parts.next(), Some("RESERVED"), "reserve: {l}");
        let id: u64 = parts.next().and_then(|p| p.parse().ok()).expect("job id");
        let len: usize = parts.next().and_then(|p| p.parse().ok()).expect("size");
        let mut body = vec![0; len + 2];
        survivor.reader.read_exact(&mut body).expect("body");
        first.get_or_insert_with(|| killed.elapsed());
        ids.push(id);
    }
    while ids.len() < a.messages {
        assert!(killed.elapsed() < PATIENCE, "only {} came back", ids.len());
        let n = (a.messages - ids.len()).min(64);
        ids.extend(survivor.reserve(n, 20));
    }
    let all = killed.elapsed();
    let _ = holder.wait();
    survivor.delete_all(&ids);
    Run {
        first: first.unwrap_or(all),
        all,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(name: &str, runs: &mut [Run]) {
    runs.sort_by_key(|r| r.all);
    let median_all = runs[runs.len() / 2].all;
    let max_all = runs.iter().map(|r| r.all).max().unwrap_or_default();
    let mut firsts: Vec<Duration> = runs.iter().map(|r| r.first).collect();
    firsts.sort();
    println!(
        "| {name} | {:.1} | {:.1} | {:.1} | {} |",
        ms(firsts[firsts.len() / 2]),
        ms(median_all),
        ms(max_all),
        runs.len()
    );
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--hold") {
        let [_, _, kind, addr, n, lease] = &argv[..] else {
            usage()
        };
        hold(
            kind,
            addr,
            n.parse().unwrap_or_else(|_| usage()),
            lease.parse().unwrap_or_else(|_| usage()),
        );
    }
    let a = parse_args();
    if let Err(e) = pin_current_thread(a.client_cpu) {
        eprintln!("not pinned to CPU {}: {e}", a.client_cpu);
    }
    let sluice_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let _sluice = start_broker(
        a.server_cpu,
        &a.server,
        &[
            "--listen".into(),
            sluice_addr.to_string(),
            "--shards".into(),
            "1".into(),
            "--metrics-addr".into(),
            "off".into(),
            "--sqs-listen".into(),
            "off".into(),
            "--log".into(),
            "warn".into(),
        ],
        sluice_addr,
    );
    let admin = Client::connect(ClientConfig::new(sluice_addr.to_string())).expect("connect");
    admin
        .create_queue(QUEUE, &QueueOptions::new())
        .expect("create the queue");
    let bs_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let _beanstalkd = start_broker(
        a.server_cpu,
        &a.beanstalkd,
        &[
            "-l".into(),
            "127.0.0.1".into(),
            "-p".into(),
            bs_addr.port().to_string(),
        ],
        bs_addr,
    );
    eprintln!(
        "{} messages, leases of {} s, {} runs each, brokers on CPU {}, driver and holder on CPU {}",
        a.messages, a.lease_s, a.runs, a.server_cpu, a.client_cpu
    );
    let (mut sluice, mut beanstalkd) = (Vec::new(), Vec::new());
    for i in 0..a.runs {
        let s = run_sluice(sluice_addr, &a);
        let b = run_beanstalkd(bs_addr, &a);
        eprintln!(
            "run {i}: sluice first {:.1} ms, all {:.1} ms; beanstalkd first {:.1} ms, all {:.1} ms",
            ms(s.first),
            ms(s.all),
            ms(b.first),
            ms(b.all)
        );
        sluice.push(s);
        beanstalkd.push(b);
    }
    println!(
        "| broker | first message back, median (ms) | all {} back, median (ms) | all back, max (ms) | runs |",
        a.messages
    );
    println!("|---|---|---|---|---|");
    summary("sluice (leases bound to the connection)", &mut sluice);
    summary(
        "beanstalkd (reservations of a closed connection)",
        &mut beanstalkd,
    );
}
