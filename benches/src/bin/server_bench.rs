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
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use sluice_broker::io::pin_current_thread;
use sluice_broker::testing::TestPki;
use sluice_client::ClientConfig;
use sluice_client::tls::TlsConfig;
use sluice_protocol::limits::PROTOCOL_VERSION;
use sluice_protocol::{
    AttributeUpdate, DeleteRequest, Frame, FrameDecoder, HelloRequest, QueueAttributesRequest,
    QueueName, ReceiveRequest, Reply, Request, SendEntry, SendRequest, opcode,
};

/// Largest reply frame the driver accepts (the server's default limit is
/// 1 MiB).
const REPLY_FRAME_BYTES_MAX: u32 = 16 << 20;
/// Bytes read per `read` call.
const READ_CHUNK_BYTES: usize = 256 << 10;
/// A blocking read that waits longer than this fails the run.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a started server to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections opened at most to land one on a given shard.
const SHARD_TRIES_MAX: usize = 200;
/// Long-poll wait of the RECEIVEs (ms).
const RECEIVE_WAIT_MS: u32 = 1000;
/// The queue every bench uses.
const QUEUE: &str = "bench";

type Res<T> = Result<T, String>;

fn err(context: &str) -> impl Fn(io::Error) -> String + '_ {
    move |e| format!("{context}: {e}")
}

// ----- arguments --------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Io {
    Uring,
    Epoll,
}

impl Io {
    fn flag(self) -> &'static str {
        match self {
            Io::Uring => "uring",
            Io::Epoll => "epoll",
        }
    }
}

#[derive(Clone, Debug)]
struct Args {
    server: PathBuf,
    passes: usize,
    batch: usize,
    size: usize,
    window: usize,
    receives: usize,
    backlog: u64,
    send_messages: u64,
    e2e_messages: u64,
    send_conns: Vec<usize>,
    rounds: u64,
    warmup_rounds: u64,
    client_threads: usize,
    client_requests: u64,
    client_spin_us: u64,
    producers: usize,
    consumers: usize,
    server_cpu: usize,
    client_cpu: usize,
    only: Vec<String>,
    ios: Vec<Io>,
    /// Drive a server already running here instead of starting one.
    connect: Option<SocketAddr>,
}

const USAGE: &str = "usage: server_bench [--quick] [--server PATH] [--passes N] [--batch N] \
[--size BYTES] [--window N] [--receives N] [--backlog N] [--send-messages N] [--e2e-messages N] \
[--send-conns 1,2] [--rounds N] [--warmup-rounds N] [--client-threads N] [--client-requests N] \
[--client-spin-us N] [--producers N] [--consumers N] [--server-cpu C] [--client-cpu C] \
[--only send,e2e,rtt,client,shared,shards,tls] [--io uring,epoll] \
[--connect HOST:PORT]";

impl Args {
    fn parse() -> Res<Args> {
        let exe = std::env::current_exe().map_err(err("current_exe"))?;
        let mut args = Args {
            server: exe.with_file_name("sluice-server"),
            passes: 3,
            batch: 64,
            size: 100,
            window: 16,
            receives: 4,
            backlog: 64 * 64,
            send_messages: 3_000_000,
            e2e_messages: 2_000_000,
            send_conns: vec![1, 2],
            rounds: 50_000,
            warmup_rounds: 5_000,
            client_threads: 16,
            client_requests: 1_000_000,
            client_spin_us: 50,
            producers: 2,
            consumers: 2,
            server_cpu: 0,
            client_cpu: 1,
            only: ["send", "e2e", "rtt", "client", "shards"]
                .map(String::from)
                .to_vec(),
            ios: vec![Io::Uring, Io::Epoll],
            connect: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--quick" {
                args.passes = 1;
                args.send_messages = 200_000;
                args.e2e_messages = 100_000;
                args.rounds = 2_000;
                args.warmup_rounds = 200;
                args.client_requests = 100_000;
                continue;
            }
            if flag == "--help" || flag == "-h" {
                return Err(String::new());
            }
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let num = |v: &str| -> Res<u64> {
                v.replace('_', "")
                    .parse::<u64>()
                    .map_err(|e| format!("{flag} {v}: {e}"))
            };
            let small = |v: &str| -> Res<usize> {
                usize::try_from(num(v)?).map_err(|e| format!("{flag} {v}: {e}"))
            };
            match flag.as_str() {
                "--server" => args.server = PathBuf::from(value),
                "--passes" => args.passes = small(&value)?,
                "--batch" => args.batch = small(&value)?,
                "--size" => args.size = small(&value)?,
                "--window" => args.window = small(&value)?,
                "--receives" => args.receives = small(&value)?,
                "--backlog" => args.backlog = num(&value)?,
                "--send-messages" => args.send_messages = num(&value)?,
                "--e2e-messages" => args.e2e_messages = num(&value)?,
                "--send-conns" => {
                    args.send_conns = value.split(',').map(small).collect::<Res<_>>()?;
                }
                "--rounds" => args.rounds = num(&value)?,
                "--warmup-rounds" => args.warmup_rounds = num(&value)?,
                "--client-threads" => args.client_threads = small(&value)?,
                "--client-requests" => args.client_requests = num(&value)?,
                "--client-spin-us" => args.client_spin_us = num(&value)?,
                "--producers" => args.producers = small(&value)?,
                "--consumers" => args.consumers = small(&value)?,
                "--server-cpu" => args.server_cpu = small(&value)?,
                "--client-cpu" => args.client_cpu = small(&value)?,
                "--connect" => {
                    args.connect = Some(
                        value
                            .parse()
                            .map_err(|e| format!("--connect {value}: {e}"))?,
                    );
                }
                "--only" => args.only = value.split(',').map(str::to_owned).collect(),
                "--io" => {
                    args.ios = value
                        .split(',')
                        .map(|v| match v {
                            "uring" => Ok(Io::Uring),
                            "epoll" => Ok(Io::Epoll),
                            other => Err(format!("--io {other}: use uring or epoll")),
                        })
                        .collect::<Res<_>>()?;
                }
                other => return Err(format!("unknown flag {other}")),
            }
        }
        if args.passes == 0
            || args.batch == 0
            || args.batch > 1024
            || args.size == 0
            || args.window == 0
            || args.receives == 0
            || args.rounds == 0
            || args.producers == 0
            || args.consumers == 0
            || args.client_threads == 0
            || args.client_requests < args.client_threads as u64
            || args.send_conns.contains(&0)
        {
            return Err("counts must be positive, --batch at most 1024".into());
        }
        for o in &args.only {
            if !["send", "e2e", "rtt", "client", "shared", "shards", "tls"].contains(&o.as_str()) {
                return Err(format!(
                    "--only {o}: use send, e2e, rtt, client, shared, shards or tls"
                ));
            }
        }
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
        } else if !args.server.exists() {
            return Err(format!(
                "no server binary at {}: run `cargo build --release -p sluice-broker --bin \
                 sluice-server` or pass --server",
                args.server.display()
            ));
        }
        Ok(args)
    }

    fn runs(&self, what: &str) -> bool {
        self.only.iter().any(|o| o == what)
    }

    /// The shared-client figures: part of `client`, or alone (`shared`).
    fn runs_shared(&self) -> bool {
        self.runs("client") || self.runs("shared")
    }
}

// ----- the server under test --------------------------------------------------

/// A `sluice-server` child process, killed (by its pid) when dropped.
struct ServerProc {
    child: Child,
    addr: SocketAddr,
}

/// The server to drive: a child started here, or the one `--connect` names.
struct Target {
    _child: Option<ServerProc>,
    addr: SocketAddr,
}

fn target(args: &Args, io: Io) -> Res<Target> {
    if let Some(addr) = args.connect {
        return Ok(Target { _child: None, addr });
    }
    let child = ServerProc::start(args, io, 1, &args.server_cpu.to_string(), &[])?;
    Ok(Target {
        addr: child.addr,
        _child: Some(child),
    })
}

impl ServerProc {
    fn start(args: &Args, io: Io, shards: usize, cpus: &str, extra: &[String]) -> Res<ServerProc> {
        // Port 0 would leave us guessing the port: take a free one first.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(err("picking a free port"))?
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cpus)
            .arg(&args.server)
            .args(["--shards", &shards.to_string(), "--io", io.flag()])
            .args(["--listen", &addr.to_string()])
            .args(["--metrics-addr", "off", "--log", "warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(err("starting taskset sluice-server"))?;
        // taskset execs the server: the child's pid is the server's.
        let mut server = ServerProc { child, addr };
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("sluice-server exited at start: {status}"));
            }
            if TcpStream::connect(addr).is_ok() {
                return Ok(server);
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(format!("sluice-server did not listen on {addr} in time"));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        // `Child::kill` sends SIGKILL to this child's pid only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ----- a raw protocol connection ------------------------------------------------

struct Client {
    stream: TcpStream,
    decoder: FrameDecoder,
    rbuf: BytesMut,
    scratch: Vec<u8>,
    wbuf: BytesMut,
    shard: u16,
}

impl Client {
    /// Connects and says HELLO.
    fn connect(addr: SocketAddr) -> Res<Client> {
        let stream = TcpStream::connect(addr).map_err(err("connect"))?;
        stream.set_nodelay(true).map_err(err("nodelay"))?;
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .map_err(err("read timeout"))?;
        let mut c = Client {
            stream,
            decoder: FrameDecoder::new(REPLY_FRAME_BYTES_MAX),
            rbuf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            scratch: vec![0; READ_CHUNK_BYTES],
            wbuf: BytesMut::new(),
            shard: 0,
        };
        let hello = Request::Hello(HelloRequest {
            version: PROTOCOL_VERSION,
            token: Bytes::new(),
            session_timeout_ms: 0,
        });
        match c.call(&hello)? {
            Reply::Hello(h) => c.shard = h.shard,
            other => return Err(format!("HELLO answered {other:?}")),
        }
        Ok(c)
    }

    /// A connection on shard `want`, opening (and closing) connections until
    /// HELLO names it.
    fn connect_to_shard(addr: SocketAddr, want: u16) -> Res<Client> {
        for _ in 0..SHARD_TRIES_MAX {
            let c = Client::connect(addr)?;
            if c.shard == want {
                return Ok(c);
            }
        }
        Err(format!(
            "no connection landed on shard {want} in {SHARD_TRIES_MAX} tries"
        ))
    }

    fn queue(&mut self, request: &Request) -> Res<()> {
        request
            .encode(0, &mut self.wbuf)
            .map_err(|e| format!("encode: {e}"))
    }

    fn flush(&mut self) -> Res<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&self.wbuf).map_err(err("write"))?;
        self.wbuf.clear();
        Ok(())
    }

    /// One `read` (blocking); what it got is appended to the frame buffer.
    fn fill(&mut self) -> Res<()> {
        loop {
            match self.stream.read(&mut self.scratch) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => {
                    self.rbuf.extend_from_slice(&self.scratch[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// The next whole frame already read, if any.
    fn frame(&mut self) -> Res<Option<Frame>> {
        self.decoder
            .decode(&mut self.rbuf)
            .map_err(|e| format!("reply framing: {e}"))
    }

    /// The next frame, reading until it is whole.
    fn read_frame(&mut self) -> Res<Frame> {
        loop {
            if let Some(f) = self.frame()? {
                return Ok(f);
            }
            self.fill()?;
        }
    }

    /// One request, one reply.
    fn call(&mut self, request: &Request) -> Res<Reply> {
        self.queue(request)?;
        self.flush()?;
        let f = self.read_frame()?;
        decode(f)
    }
}

fn decode(f: Frame) -> Res<Reply> {
    match Reply::decode(f.opcode, f.payload) {
        Ok(Reply::Error(e)) => Err(format!(
            "the server answered ERROR {}: {}",
            e.code, e.message
        )),
        Ok(r) => Ok(r),
        Err(e) => Err(format!("reply {:#04x}: {e}", f.opcode)),
    }
}

fn queue_name() -> QueueName {
    // A fixed, valid name.
    QueueName::new(QUEUE).expect("`bench` is a valid queue name")
}

fn create_queue(c: &mut Client) -> Res<()> {
    let req = Request::CreateQueue(QueueAttributesRequest {
        queue: queue_name(),
        attributes: AttributeUpdate::default(),
    });
    match c.call(&req)? {
        Reply::CreateQueue { .. } => Ok(()),
        other => Err(format!("CREATE_QUEUE answered {other:?}")),
    }
}

/// A whole SEND frame of `count` messages of `size` bytes.
fn send_frame(count: usize, size: usize) -> Res<Bytes> {
    let entries: Vec<SendEntry> = (0..count)
        .map(|i| {
            let fill = b'a' + u8::try_from(i % 26).unwrap_or(0);
            SendEntry::new(Bytes::from(vec![fill; size]))
        })
        .collect();
    let req = Request::Send(SendRequest::new(queue_name(), &entries).map_err(|e| e.to_string())?);
    let mut buf = BytesMut::new();
    req.encode(0, &mut buf).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

fn receive_frame(max: usize) -> Res<Bytes> {
    let req = Request::Receive(ReceiveRequest {
        queue: queue_name(),
        max_messages: u16::try_from(max).map_err(|e| e.to_string())?,
        visibility_timeout_ms: None,
        wait_ms: Some(RECEIVE_WAIT_MS),
        bind_leases: false,
    });
    let mut buf = BytesMut::new();
    req.encode(0, &mut buf).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

// ----- pipelined workloads ------------------------------------------------------

/// What one connection keeps in flight.
#[derive(Clone, Copy, Debug)]
struct Role {
    sends: usize,
    receives: usize,
}

struct Pipe {
    client: Client,
    role: Role,
    sends: usize,
    receives: usize,
    deletes: usize,
}

/// Counted over every connection of a run.
#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    /// Messages in SEND frames written.
    issued: u64,
    /// Messages the server accepted.
    acked: u64,
    /// Entries the server refused.
    refused: u64,
    /// Messages received.
    received: u64,
    /// RECEIVE replies.
    receive_replies: u64,
    /// Messages deleted.
    deleted: u64,
    /// Read calls.
    reads: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Goal {
    /// Count messages the server accepted.
    Acked,
    /// Count messages deleted.
    Deleted,
}

struct Workload {
    send: Bytes,
    receive: Bytes,
    batch: u64,
    /// Most messages sent and not yet deleted (`u64::MAX`: no limit).
    backlog: u64,
    goal: Goal,
    warmup: u64,
    messages: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Rate {
    msgs_per_s: f64,
    /// Mean messages per RECEIVE reply (0 when nothing was received).
    per_receive: f64,
    /// Bytes-arrival reads per 64 messages counted.
    reads_per_batch: f64,
}

fn pipeline(pipes: &mut [Pipe], w: &Workload) -> Res<Rate> {
    let queue = queue_name();
    let mut n = Counts::default();
    let mut started: Option<(Instant, Counts)> = None;
    let mut fds: Vec<libc::pollfd> = pipes
        .iter()
        .map(|p| libc::pollfd {
            fd: p.client.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        for p in pipes.iter_mut() {
            while p.sends < p.role.sends && n.issued.saturating_sub(n.deleted) < w.backlog {
                p.client.wbuf.extend_from_slice(&w.send);
                p.sends += 1;
                n.issued += w.batch;
            }
            while p.receives < p.role.receives {
                p.client.wbuf.extend_from_slice(&w.receive);
                p.receives += 1;
            }
            p.client.flush()?;
        }
        if pipes.len() == 1 {
            pipes[0].client.fill()?;
            fds[0].revents = libc::POLLIN;
        } else {
            let nfds = libc::nfds_t::try_from(fds.len()).map_err(|e| e.to_string())?;
            let timeout_ms = i32::try_from(READ_TIMEOUT.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: `fds` is a live, exclusively borrowed array of `nfds`
            // pollfd structs for the duration of the call.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout_ms) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("poll: {e}"));
            }
            if ready == 0 {
                return Err(format!("no reply for {READ_TIMEOUT:?}: {n:?}"));
            }
            for (p, fd) in pipes.iter_mut().zip(&fds) {
                if fd.revents != 0 {
                    p.client.fill()?;
                }
            }
        }
        for (p, fd) in pipes.iter_mut().zip(fds.iter_mut()) {
            if fd.revents == 0 {
                continue;
            }
            fd.revents = 0;
            n.reads += 1;
            while let Some(f) = p.client.frame()? {
                match f.opcode {
                    opcode::SEND_REPLY => {
                        let Reply::Send { results } = decode(f)? else {
                            return Err("SEND_REPLY decoded as another reply".into());
                        };
                        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
                        n.acked += ok;
                        n.refused += results.len() as u64 - ok;
                        p.sends -= 1;
                    }
                    opcode::RECEIVE_REPLY => {
                        let Reply::Receive { messages } = decode(f)? else {
                            return Err("RECEIVE_REPLY decoded as another reply".into());
                        };
                        p.receives -= 1;
                        n.receive_replies += 1;
                        if messages.is_empty() {
                            continue;
                        }
                        n.received += messages.len() as u64;
                        let receipts = messages.iter().map(|m| m.receipt).collect();
                        p.client.queue(&Request::Delete(DeleteRequest {
                            queue: queue.clone(),
                            receipts,
                        }))?;
                        p.deletes += 1;
                    }
                    opcode::DELETE_REPLY => {
                        let Reply::Delete { results } = decode(f)? else {
                            return Err("DELETE_REPLY decoded as another reply".into());
                        };
                        n.deleted += results.iter().filter(|r| r.is_ok()).count() as u64;
                        p.deletes -= 1;
                    }
                    _ => {
                        decode(f)?;
                        return Err("unexpected reply".into());
                    }
                }
            }
        }
        if n.refused > 0 {
            return Err(format!("the server refused {} entries", n.refused));
        }
        let done = match w.goal {
            Goal::Acked => n.acked,
            Goal::Deleted => n.deleted,
        };
        match started {
            None if done >= w.warmup => started = Some((Instant::now(), n)),
            Some((t0, base)) => {
                let base_done = match w.goal {
                    Goal::Acked => base.acked,
                    Goal::Deleted => base.deleted,
                };
                let counted = done - base_done;
                if counted >= w.messages {
                    let secs = t0.elapsed().as_secs_f64();
                    let receives = n.receive_replies - base.receive_replies;
                    return Ok(Rate {
                        msgs_per_s: counted as f64 / secs,
                        per_receive: if receives == 0 {
                            0.0
                        } else {
                            (n.received - base.received) as f64 / receives as f64
                        },
                        reads_per_batch: (n.reads - base.reads) as f64 * 64.0 / counted as f64,
                    });
                }
            }
            None => {}
        }
    }
}

fn pipe(client: Client, role: Role) -> Pipe {
    Pipe {
        client,
        role,
        sends: 0,
        receives: 0,
        deletes: 0,
    }
}

/// Send alone, pipelined, on `conns` connections.
fn bench_send(args: &Args, io: Io, conns: usize) -> Res<Rate> {
    let server = target(args, io)?;
    let mut pipes = Vec::new();
    for i in 0..conns {
        let mut c = Client::connect(server.addr)?;
        if i == 0 {
            create_queue(&mut c)?;
        }
        let role = Role {
            sends: args.window,
            receives: 0,
        };
        pipes.push(pipe(c, role));
    }
    let w = Workload {
        send: send_frame(args.batch, args.size)?,
        receive: receive_frame(args.batch)?,
        batch: args.batch as u64,
        backlog: u64::MAX,
        goal: Goal::Acked,
        warmup: args.send_messages / 10,
        messages: args.send_messages,
    };
    pipeline(&mut pipes, &w)
}

/// Send + receive + delete on one connection.
fn bench_e2e(args: &Args, io: Io) -> Res<Rate> {
    let server = target(args, io)?;
    let mut c = Client::connect(server.addr)?;
    create_queue(&mut c)?;
    let role = Role {
        sends: args.window,
        receives: args.receives,
    };
    let w = Workload {
        send: send_frame(args.batch, args.size)?,
        receive: receive_frame(args.batch)?,
        batch: args.batch as u64,
        backlog: args.backlog,
        goal: Goal::Deleted,
        warmup: args.e2e_messages / 10,
        messages: args.e2e_messages,
    };
    pipeline(&mut [pipe(c, role)], &w)
}

/// One hot queue, producers and consumers spread over `shards` shards.
fn bench_shards(args: &Args, io: Io, shards: usize) -> Res<Rate> {
    let cpus = if shards == 1 {
        args.server_cpu.to_string()
    } else {
        (0..shards)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let server = ServerProc::start(args, io, shards, &cpus, &[])?;
    let shards16 = u16::try_from(shards).map_err(|e| e.to_string())?;
    let mut pipes = Vec::new();
    let mut placed = Vec::new();
    for i in 0..args.producers + args.consumers {
        let want = u16::try_from(i % shards).unwrap_or(0) % shards16;
        let mut c = Client::connect_to_shard(server.addr, want)?;
        if i == 0 {
            create_queue(&mut c)?;
        }
        let role = if i < args.producers {
            Role {
                sends: args.window,
                receives: 0,
            }
        } else {
            Role {
                sends: 0,
                receives: args.receives,
            }
        };
        placed.push(c.shard);
        pipes.push(pipe(c, role));
    }
    let w = Workload {
        send: send_frame(args.batch, args.size)?,
        receive: receive_frame(args.batch)?,
        batch: args.batch as u64,
        backlog: args.backlog,
        goal: Goal::Deleted,
        warmup: args.e2e_messages / 10,
        messages: args.e2e_messages,
    };
    let rate = pipeline(&mut pipes, &w)?;
    println!(
        "    ({shards} shard(s): producers on shards {:?}, consumers on {:?})",
        &placed[..args.producers],
        &placed[args.producers..]
    );
    Ok(rate)
}

// ----- one request at a time -----------------------------------------------------

fn new_histogram() -> Res<Histogram<u64>> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())
}

/// One request at a time on one connection, to one of the servers.
enum Probe {
    /// A request frame to a sluice server, and the reply opcode it expects.
    Sluice {
        client: Client,
        frame: Bytes,
        reply_op: u8,
    },
    /// `--size` bytes to the std::net echo server.
    Echo {
        stream: TcpStream,
        msg: Vec<u8>,
        back: Vec<u8>,
    },
    /// A PING through the blocking native client.
    Blocking(sluice_client::Client),
    /// A PING through the async native client, on its own current-thread
    /// runtime.
    Async(tokio::runtime::Runtime, sluice_client::AsyncClient),
}

impl Probe {
    /// One round trip, in ns.
    fn round_trip(&mut self) -> Res<u64> {
        let start = Instant::now();
        match self {
            Probe::Sluice {
                client,
                frame,
                reply_op,
            } => {
                client.stream.write_all(frame).map_err(err("write"))?;
                let f = client.read_frame()?;
                if f.opcode != *reply_op {
                    return decode(f).and(Err("unexpected reply".into()));
                }
            }
            Probe::Echo { stream, msg, back } => {
                stream.write_all(msg).map_err(err("echo write"))?;
                stream.read_exact(back).map_err(err("echo read"))?;
            }
            Probe::Blocking(c) => {
                c.ping().map_err(|e| format!("Client ping: {e}"))?;
            }
            Probe::Async(rt, c) => {
                rt.block_on(c.ping())
                    .map_err(|e| format!("AsyncClient ping: {e}"))?;
            }
        }
        Ok(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Round trips to every server of the pass, interleaved request by request
/// (PING and SEND of one message to each sluice server, `--size` bytes to the
/// echo server) so that the machine's noise falls on all of them alike.
/// Returns the name and latency of each probe.
fn bench_rtt(args: &Args) -> Res<Vec<(String, Latency)>> {
    let mut servers = Vec::new();
    let mut probes: Vec<(String, Probe)> = Vec::new();
    for &io in &args.ios {
        let server = target(args, io)?;
        let mut c = Client::connect(server.addr)?;
        create_queue(&mut c)?;
        let mut ping = BytesMut::new();
        Request::Ping { nonce: 7 }
            .encode(1, &mut ping)
            .map_err(|e| e.to_string())?;
        probes.push((
            format!("rtt {} PING", io.flag()),
            Probe::Sluice {
                client: c,
                frame: ping.freeze(),
                reply_op: opcode::PONG,
            },
        ));
        probes.push((
            format!("rtt {} SEND 1", io.flag()),
            Probe::Sluice {
                client: Client::connect(server.addr)?,
                frame: send_frame(1, args.size)?,
                reply_op: opcode::SEND_REPLY,
            },
        ));
        if args.runs("client") {
            let config = ClientConfig::new(server.addr.to_string());
            let connect = |config: ClientConfig| {
                sluice_client::Client::connect(config).map_err(|e| format!("Client: {e}"))
            };
            probes.push((
                format!("rtt {} Client PING", io.flag()),
                Probe::Blocking(connect(config.clone())?),
            ));
            let spin = Duration::from_micros(args.client_spin_us);
            probes.push((
                format!("rtt {} Client+spin PING", io.flag()),
                Probe::Blocking(connect(config.clone().with_read_spin(spin))?),
            ));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(err("tokio runtime"))?;
            let c = rt
                .block_on(sluice_client::AsyncClient::connect(config))
                .map_err(|e| format!("AsyncClient: {e}"))?;
            probes.push((
                format!("rtt {} AsyncClient PING", io.flag()),
                Probe::Async(rt, c),
            ));
        }
        servers.push(server);
    }
    let echo = Echo::start(args.server_cpu)?;
    let stream = TcpStream::connect(echo.addr).map_err(err("echo connect"))?;
    stream.set_nodelay(true).map_err(err("nodelay"))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(err("read timeout"))?;
    probes.push((
        "rtt std::net echo".into(),
        Probe::Echo {
            stream,
            msg: vec![0x5a; args.size],
            back: vec![0; args.size],
        },
    ));
    let mut hists = probes
        .iter()
        .map(|_| new_histogram())
        .collect::<Res<Vec<_>>>()?;
    let n = probes.len();
    for round in 0..args.warmup_rounds + args.rounds {
        // Who goes first rotates, so no server always follows another.
        let first = usize::try_from(round).unwrap_or(0) % n;
        for k in 0..n {
            let i = (first + k) % n;
            let ns = probes[i].1.round_trip()?;
            if round >= args.warmup_rounds {
                hists[i].saturating_record(ns.max(1));
            }
        }
    }
    // The last SEND's reply, decoded in full: an accepted message.
    for (_, probe) in &mut probes {
        if let Probe::Sluice {
            client,
            frame,
            reply_op: opcode::SEND_REPLY,
        } = probe
        {
            client.stream.write_all(frame).map_err(err("write"))?;
            match decode(client.read_frame()?)? {
                Reply::Send { results } if results.len() == 1 && results[0].is_ok() => {}
                other => return Err(format!("SEND answered {other:?}")),
            }
        }
        if let Probe::Echo { msg, back, .. } = probe {
            if msg != back {
                return Err("the echo returned different bytes".into());
            }
        }
    }
    let figures = probes
        .iter()
        .zip(&hists)
        .map(|((name, _), h)| (name.clone(), Latency::of(h)))
        .collect();
    // The echo thread ends once its connection is closed.
    drop(probes);
    drop(echo);
    drop(servers);
    Ok(figures)
}

/// CPU time this process has used so far, user and system, all threads.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes a `rusage` through the pointer, which points
    // to one (zeroed, so initialised either way); RUSAGE_SELF is valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: zeroed above and filled by a successful `getrusage`.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A client figure: requests answered per second, and the client's CPU
/// time per request (this process, every thread: what one core would
/// reach if the client had it to itself is 1 / that).
#[derive(Clone, Copy, Debug)]
struct ReqRate {
    per_s: f64,
    cpu_us: f64,
}

/// `--client-threads` threads share one blocking `Client`, each sending
/// PINGs one at a time (a tenth of them first, as warm-up); PINGs answered
/// per second. The threads inherit the driver's CPU.
fn bench_client_threads(args: &Args, io: Io, spin: Duration) -> Res<ReqRate> {
    let server = target(args, io)?;
    let config = ClientConfig::new(server.addr.to_string()).with_read_spin(spin);
    let client = sluice_client::Client::connect(config).map_err(|e| format!("Client: {e}"))?;
    let threads = args.client_threads;
    let per_thread = args.client_requests / threads as u64;
    let warm = per_thread / 10;
    let start = std::sync::Barrier::new(threads + 1);
    let timed = std::sync::Barrier::new(threads + 1);
    let elapsed = thread::scope(|s| -> Res<(Duration, Duration)> {
        let mut workers = Vec::with_capacity(threads);
        for t in 0..threads {
            let (c, start, timed) = (client.clone(), &start, &timed);
            workers.push(s.spawn(move || -> Res<()> {
                let ping = |i: u64| -> Res<()> {
                    let nonce = (t as u64) << 40 | i;
                    match c.call(&Request::Ping { nonce }) {
                        Ok(Reply::Pong { nonce: got }) if got == nonce => Ok(()),
                        other => Err(format!("PING {nonce} answered {other:?}")),
                    }
                };
                start.wait();
                let warmed = (0..warm).try_for_each(ping);
                timed.wait();
                warmed?;
                (warm..per_thread).try_for_each(ping)
            }));
        }
        start.wait();
        timed.wait();
        let (t0, cpu0) = (Instant::now(), cpu_time());
        for w in workers {
            w.join()
                .map_err(|_| "a client thread panicked".to_string())??;
        }
        Ok((t0.elapsed(), cpu_time() - cpu0))
    })?;
    let n = (per_thread - warm) as f64 * threads as f64;
    Ok(ReqRate {
        per_s: n / elapsed.0.as_secs_f64(),
        cpu_us: elapsed.1.as_secs_f64() * 1e6 / n,
    })
}

/// The floor under any blocking client shared by threads on one core: two
/// threads on the driver's CPU hand a token back and forth with
/// park/unpark, as a reply handed from the thread that read it to the
/// thread that waits for it is. Hand-offs per second (each is one wake-up
/// and one switch), no network at all.
fn bench_handoff_floor(args: &Args) -> Res<ReqRate> {
    use std::sync::atomic::AtomicU64;
    let n = args.client_requests;
    let turn = Arc::new(AtomicU64::new(0));
    let (t0, cpu0) = (Instant::now(), cpu_time());
    thread::scope(|s| {
        let main = thread::current();
        let other = {
            let turn = Arc::clone(&turn);
            s.spawn(move || {
                for i in 0..n {
                    // Wait for the odd turn, then pass the token back.
                    while turn.load(Ordering::Acquire) != 2 * i + 1 {
                        thread::park();
                    }
                    turn.store(2 * i + 2, Ordering::Release);
                    main.unpark();
                }
            })
        };
        for i in 0..n {
            turn.store(2 * i + 1, Ordering::Release);
            other.thread().unpark();
            while turn.load(Ordering::Acquire) != 2 * i + 2 {
                thread::park();
            }
        }
    });
    let hand_offs = 2.0 * n as f64;
    Ok(ReqRate {
        per_s: hand_offs / t0.elapsed().as_secs_f64(),
        cpu_us: (cpu_time() - cpu0).as_secs_f64() * 1e6 / hand_offs,
    })
}

/// The cheapest switch from one thread to another on the driver's CPU:
/// `--client-threads` threads pass a token round robin, each waiting for
/// its turn with `sched_yield` (no futex, no network). Every request of a
/// blocking client shared by that many threads on one core needs at least
/// one such switch, into the thread that waits for it. Hand-offs per second.
fn bench_yield_floor(args: &Args) -> Res<ReqRate> {
    use std::sync::atomic::AtomicU64;
    let threads = args.client_threads as u64;
    let n = args.client_requests;
    let turn = AtomicU64::new(0);
    let (t0, cpu0) = (Instant::now(), cpu_time());
    thread::scope(|s| {
        for me in 0..threads {
            let turn = &turn;
            s.spawn(move || {
                let mut i = me;
                while i < n {
                    while turn.load(Ordering::Acquire) != i {
                        thread::yield_now();
                    }
                    turn.store(i + 1, Ordering::Release);
                    i += threads;
                }
            });
        }
    });
    Ok(ReqRate {
        per_s: n as f64 / t0.elapsed().as_secs_f64(),
        cpu_us: (cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64,
    })
}

/// As many tasks as `--client-threads` share one `AsyncClient` on a
/// current-thread runtime, each sending PINGs one at a time; PINGs answered
/// per second.
fn bench_client_tasks(args: &Args, io: Io) -> Res<ReqRate> {
    let server = target(args, io)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err("tokio runtime"))?;
    let tasks = args.client_threads;
    let per_task = args.client_requests / tasks as u64;
    let warm = per_task / 10;
    rt.block_on(async {
        let client =
            sluice_client::AsyncClient::connect(ClientConfig::new(server.addr.to_string()))
                .await
                .map_err(|e| format!("AsyncClient: {e}"))?;
        let run = |from: u64, to: u64| {
            let handles: Vec<_> = (0..tasks)
                .map(|t| {
                    let c = client.clone();
                    tokio::spawn(async move {
                        for i in from..to {
                            let nonce = (t as u64) << 40 | i;
                            match c.call(&Request::Ping { nonce }).await {
                                Ok(Reply::Pong { nonce: got }) if got == nonce => {}
                                other => return Err(format!("PING {nonce} answered {other:?}")),
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            async move {
                for h in handles {
                    h.await.map_err(|e| format!("a client task: {e}"))??;
                }
                Ok::<(), String>(())
            }
        };
        run(0, warm).await?;
        let (t0, cpu0) = (Instant::now(), cpu_time());
        run(warm, per_task).await?;
        let n = (per_task - warm) as f64 * tasks as f64;
        Ok(ReqRate {
            per_s: n / t0.elapsed().as_secs_f64(),
            cpu_us: (cpu_time() - cpu0).as_secs_f64() * 1e6 / n,
        })
    })
}

/// A blocking std::net echo server on a thread pinned to `cpu`.
struct Echo {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(cpu: usize) -> Res<Echo> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(err("echo bind"))?;
        let addr = listener.local_addr().map_err(err("echo addr"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            if let Err(e) = pin_current_thread(cpu) {
                eprintln!("server_bench: cannot pin the echo server to CPU {cpu}: {e}");
            }
            let mut buf = vec![0u8; 64 << 10];
            for stream in listener.incoming() {
                if flag.load(Ordering::Acquire) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                if stream.set_nodelay(true).is_err() {
                    continue;
                }
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            }
        });
        Ok(Echo {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Unblock accept.
        drop(TcpStream::connect(self.addr));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Latency {
    p50: f64,
    p99: f64,
    p999: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Latency {
            p50: us(0.50),
            p99: us(0.99),
            p999: us(0.999),
        }
    }
}

// ----- TLS next to plain text ---------------------------------------------------------

/// A server without TLS or with it, and a blocking native client on it.
fn tls_client(addr: SocketAddr, pki: Option<&TestPki>) -> Res<sluice_client::Client> {
    let mut config = ClientConfig::new(addr.to_string());
    if let Some(pki) = pki {
        let tls = TlsConfig::with_ca_file(pki.ca_pem()).map_err(|e| format!("TLS CA: {e}"))?;
        config = config.with_tls(tls);
    }
    sluice_client::Client::connect(config).map_err(|e| format!("Client on {addr}: {e}"))
}

fn tls_server(args: &Args, io: Io, pki: Option<&TestPki>) -> Res<ServerProc> {
    let extra = pki.map(TestPki::server_args).unwrap_or_default();
    ServerProc::start(args, io, 1, &args.server_cpu.to_string(), &extra)
}

/// PING round trips through the blocking client to a plain and a TLS
/// server at once, taking turns request by request: (plain, TLS).
fn bench_tls_ping(args: &Args, io: Io, pki: &TestPki) -> Res<(Latency, Latency)> {
    let plain = tls_server(args, io, None)?;
    let tls = tls_server(args, io, Some(pki))?;
    let clients = [
        tls_client(plain.addr, None)?,
        tls_client(tls.addr, Some(pki))?,
    ];
    let mut hists = [new_histogram()?, new_histogram()?];
    for round in 0..args.warmup_rounds + args.rounds {
        for (c, h) in clients.iter().zip(&mut hists) {
            let rtt = c.ping().map_err(|e| format!("PING: {e}"))?;
            if round >= args.warmup_rounds {
                h.record(u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX).max(1))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok((Latency::of(&hists[0]), Latency::of(&hists[1])))
}

/// End to end through the blocking client on two connections: a producer
/// with `--window` SENDs in flight, a consumer receiving and deleting each
/// batch, at most `--backlog` messages sent and not deleted. Messages
/// deleted per second, from the first send to the last delete.
fn bench_tls_e2e(args: &Args, io: Io, pki: Option<&TestPki>) -> Res<f64> {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;

    let server = tls_server(args, io, pki)?;
    let producer = tls_client(server.addr, pki)?;
    let consumer = tls_client(server.addr, pki)?;
    producer
        .create_queue(QUEUE, &sluice_client::QueueOptions::new())
        .map_err(|e| format!("create: {e}"))?;
    let total = args.e2e_messages.max(args.batch as u64);
    let batches = total.div_ceil(args.batch as u64);
    let total = batches * args.batch as u64;
    let entries: Vec<sluice_client::SendEntry> = (0..args.batch)
        .map(|_| sluice_client::SendEntry::new(Bytes::from(vec![b'x'; args.size])))
        .collect();
    let deleted = AtomicU64::new(0);
    let started = Instant::now();
    thread::scope(|s| -> Res<()> {
        let deleted = &deleted;
        let consumer = s.spawn(move || -> Res<()> {
            let options = sluice_client::ReceiveOptions::new(args.batch)
                .wait(Duration::from_millis(u64::from(RECEIVE_WAIT_MS)));
            let mut idle = 0;
            while deleted.load(Ordering::Acquire) < total {
                let got = consumer
                    .receive(QUEUE, options)
                    .map_err(|e| format!("receive: {e}"))?;
                if got.is_empty() {
                    idle += 1;
                    if idle > 30 {
                        return Err("no message for 30 long polls".into());
                    }
                    continue;
                }
                idle = 0;
                let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
                for r in consumer
                    .delete_batch(QUEUE, &receipts)
                    .map_err(|e| format!("delete: {e}"))?
                {
                    r.map_err(|e| format!("delete entry: {e}"))?;
                }
                deleted.fetch_add(receipts.len() as u64, Ordering::AcqRel);
            }
            Ok(())
        });
        let mut in_flight = VecDeque::new();
        let mut sent = 0u64;
        let wait_one = |q: &mut VecDeque<sluice_client::PendingReply<_>>| -> Res<()> {
            if let Some(p) = q.pop_front() {
                let results: Vec<sluice_client::Result<_>> =
                    p.wait().map_err(|e| format!("send: {e}"))?;
                for r in results {
                    r.map_err(|e| format!("send entry: {e}"))?;
                }
            }
            Ok(())
        };
        for _ in 0..batches {
            while in_flight.len() >= args.window {
                wait_one(&mut in_flight)?;
            }
            // Bounded backlog: wait for the consumer (bounded by its own
            // 30 idle long polls, after which it fails and ends).
            while sent.saturating_sub(deleted.load(Ordering::Acquire)) > args.backlog
                && !consumer.is_finished()
            {
                if in_flight.is_empty() {
                    thread::yield_now();
                } else {
                    wait_one(&mut in_flight)?;
                }
            }
            in_flight.push_back(
                producer
                    .start_send_batch(QUEUE, &entries)
                    .map_err(|e| format!("send: {e}"))?,
            );
            sent += args.batch as u64;
        }
        while !in_flight.is_empty() {
            wait_one(&mut in_flight)?;
        }
        consumer
            .join()
            .map_err(|_| "the consumer thread panicked".to_string())?
    })?;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

// ----- the run ----------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Figures of one pass, by name.
#[derive(Default)]
struct Table {
    rows: Vec<(String, Vec<f64>)>,
}

impl Table {
    fn push(&mut self, name: String, value: f64) {
        match self.rows.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(value),
            None => self.rows.push((name, vec![value])),
        }
    }

    fn median(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| median(v.clone()))
    }
}

fn req_line(t: &mut Table, name: String, r: ReqRate) {
    println!(
        "  {name:<34} {:>12.0} req/s   client CPU {:>6.2} us/req",
        r.per_s, r.cpu_us
    );
    t.push(format!("{name} cpu"), r.cpu_us);
    t.push(name, r.per_s);
}

fn rate_line(t: &mut Table, name: String, r: Rate) {
    println!(
        "  {name:<34} {:>12.0} msg/s   reads/64 msgs {:>5.2}{}",
        r.msgs_per_s,
        r.reads_per_batch,
        if r.per_receive > 0.0 {
            format!("   msgs/RECEIVE {:.1}", r.per_receive)
        } else {
            String::new()
        }
    );
    t.push(name, r.msgs_per_s);
}

fn lat_line(t: &mut Table, name: &str, l: Latency) {
    println!(
        "  {name:<34} p50 {:>8.2} us   p99 {:>8.2} us   p99.9 {:>8.2} us",
        l.p50, l.p99, l.p999
    );
    t.push(format!("{name} p50"), l.p50);
    t.push(format!("{name} p99"), l.p99);
    t.push(format!("{name} p99.9"), l.p999);
}

fn run_pass(args: &Args, t: &mut Table) -> Res<()> {
    if args.runs("send") {
        for &conns in &args.send_conns {
            for &io in &args.ios {
                let r = bench_send(args, io, conns)?;
                rate_line(t, format!("send {} {conns} conn", io.flag()), r);
            }
        }
    }
    if args.runs("e2e") {
        for &io in &args.ios {
            let r = bench_e2e(args, io)?;
            rate_line(t, format!("e2e {}", io.flag()), r);
        }
    }
    if args.runs("rtt") || args.runs("client") {
        for (name, l) in bench_rtt(args)? {
            lat_line(t, &name, l);
        }
    }
    if args.runs_shared() {
        req_line(
            t,
            "thread hand-off floor".into(),
            bench_handoff_floor(args)?,
        );
        req_line(t, "thread yield floor".into(), bench_yield_floor(args)?);
        for &io in &args.ios {
            let r = bench_client_threads(args, io, Duration::ZERO)?;
            req_line(t, format!("client {} threads", io.flag()), r);
            let spin = Duration::from_micros(args.client_spin_us);
            let r = bench_client_threads(args, io, spin)?;
            req_line(t, format!("client {} threads+spin", io.flag()), r);
            let r = bench_client_tasks(args, io)?;
            req_line(t, format!("client {} tasks", io.flag()), r);
        }
    }
    if args.runs("tls") {
        let pki = TestPki::generate();
        for &io in &args.ios {
            let (plain, tls) = bench_tls_ping(args, io, &pki)?;
            lat_line(t, &format!("PING {} plain", io.flag()), plain);
            lat_line(t, &format!("PING {} TLS", io.flag()), tls);
            for (name, pki) in [("plain", None), ("TLS", Some(&pki))] {
                let rate = bench_tls_e2e(args, io, pki)?;
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
                let r = bench_shards(args, io, shards)?;
                rate_line(t, format!("hot queue {} {shards} shard", io.flag()), r);
            }
        }
    }
    Ok(())
}

/// A figure of the summary: a median, or none when its `--io` was not run
/// (printed "-"; the precision of the format applies to a number).
#[derive(Clone, Copy)]
struct Fig(Option<f64>);

impl std::fmt::Display for Fig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(v) => std::fmt::Display::fmt(&v, f),
            None => f.write_str("-"),
        }
    }
}

fn goal_rate(got: Fig, goal: f64) -> String {
    let Fig(Some(got)) = got else {
        return "not run".into();
    };
    if got >= goal {
        format!("met ({:.2}x)", got / goal)
    } else {
        format!(
            "short by {:.0} ({:.0}%)",
            goal - got,
            100.0 * (goal - got) / goal
        )
    }
}

fn goal_delta(got: Fig, echo: Fig, allowed: f64) -> String {
    let (Fig(Some(got)), Fig(Some(echo))) = (got, echo) else {
        return "not run".into();
    };
    let d = got - echo;
    if d <= allowed {
        format!("met ({d:+.2} us vs echo)")
    } else {
        format!("short by {:.2} us ({d:+.2} us vs echo)", d - allowed)
    }
}

fn summary(args: &Args, t: &Table) {
    println!("\nmedian of {} pass(es):", args.passes);
    println!("| figure | io_uring | epoll | goal | io_uring vs goal | epoll vs goal |");
    println!("|---|---:|---:|---|---|---|");
    let both = |name: &dyn Fn(&str) -> String| {
        (Fig(t.median(&name("uring"))), Fig(t.median(&name("epoll"))))
    };
    if args.runs("send") {
        for &conns in &args.send_conns {
            let (u, e) = both(&|io| format!("send {io} {conns} conn"));
            println!(
                "| send alone, {conns} conn, {} x {} B batches, {} in flight | {u:.0} msg/s | \
                 {e:.0} msg/s | >= 2,000,000 msg/s | {} | {} |",
                args.batch,
                args.size,
                args.window,
                goal_rate(u, 2e6),
                goal_rate(e, 2e6)
            );
        }
    }
    if args.runs("e2e") {
        let (u, e) = both(&|io| format!("e2e {io}"));
        println!(
            "| send + receive + delete, 1 conn | {u:.0} msg/s | {e:.0} msg/s | >= 1,000,000 msg/s \
             | {} | {} |",
            goal_rate(u, 1e6),
            goal_rate(e, 1e6)
        );
    }
    if args.runs("rtt") {
        let echo50 = Fig(t.median("rtt std::net echo p50"));
        let echo99 = Fig(t.median("rtt std::net echo p99"));
        let echo999 = Fig(t.median("rtt std::net echo p99.9"));
        println!(
            "| std::net echo, {} B | p50 {echo50:.2} / p99 {echo99:.2} / p99.9 {echo999:.2} us | | | | |",
            args.size
        );
        for what in ["PING", "SEND 1"] {
            let (u50, e50) = both(&|io| format!("rtt {io} {what} p50"));
            let (u99, e99) = both(&|io| format!("rtt {io} {what} p99"));
            let (u999, e999) = both(&|io| format!("rtt {io} {what} p99.9"));
            println!(
                "| {what} one at a time, p50 | {u50:.2} us | {e50:.2} us | echo + 10 us | {} | {} |",
                goal_delta(u50, echo50, 10.0),
                goal_delta(e50, echo50, 10.0)
            );
            println!(
                "| {what} one at a time, p99 | {u99:.2} us | {e99:.2} us | echo + 25 us | {} | {} |",
                goal_delta(u99, echo99, 25.0),
                goal_delta(e99, echo99, 25.0)
            );
            println!(
                "| {what} one at a time, p99.9 | {u999:.2} us | {e999:.2} us | (reported) | | |"
            );
        }
    }
    if args.runs("client") {
        for (what, name) in [
            ("Client", "Client PING"),
            (
                &*format!("Client, read spin {} us", args.client_spin_us),
                "Client+spin PING",
            ),
            ("AsyncClient", "AsyncClient PING"),
        ] {
            let (r50, re50) = both(&|io| format!("rtt {io} PING p50"));
            let (r99, re99) = both(&|io| format!("rtt {io} PING p99"));
            let (u50, e50) = both(&|io| format!("rtt {io} {name} p50"));
            let (u99, e99) = both(&|io| format!("rtt {io} {name} p99"));
            let (u999, e999) = both(&|io| format!("rtt {io} {name} p99.9"));
            println!(
                "| PING through {what}, p50 | {u50:.2} us | {e50:.2} us | raw PING + 3 us | {} | {} |",
                goal_delta(u50, r50, 3.0).replace("echo", "raw"),
                goal_delta(e50, re50, 3.0).replace("echo", "raw")
            );
            println!(
                "| PING through {what}, p99 | {u99:.2} us | {e99:.2} us | raw PING + 10 us | {} | {} |",
                goal_delta(u99, r99, 10.0).replace("echo", "raw"),
                goal_delta(e99, re99, 10.0).replace("echo", "raw")
            );
            println!(
                "| PING through {what}, p99.9 | {u999:.2} us | {e999:.2} us | (reported) | | |"
            );
        }
    }
    if args.runs_shared() {
        let (u, e) = both(&|io| format!("client {io} threads"));
        let (uc, ec) = both(&|io| format!("client {io} threads cpu"));
        println!(
            "| {} threads sharing one Client, PING | {u:.0} req/s ({uc:.2} us CPU/req) | {e:.0} \
             req/s ({ec:.2} us CPU/req) | >= 500,000 req/s | {} | {} |",
            args.client_threads,
            goal_rate(u, 5e5),
            goal_rate(e, 5e5)
        );
        let (u, e) = both(&|io| format!("client {io} threads+spin"));
        let (uc, ec) = both(&|io| format!("client {io} threads+spin cpu"));
        println!(
            "| the same, read spin {} us | {u:.0} req/s ({uc:.2} us CPU/req) | {e:.0} req/s ({ec:.2} \
             us CPU/req) | >= 500,000 req/s | {} | {} |",
            args.client_spin_us,
            goal_rate(u, 5e5),
            goal_rate(e, 5e5)
        );
        let floor = t.median("thread hand-off floor").unwrap_or(f64::NAN);
        let floor_cpu = t.median("thread hand-off floor cpu").unwrap_or(f64::NAN);
        println!(
            "| reference: two threads on the client's CPU handing a token back and forth (park/unpark) \
             | {floor:.0} hand-offs/s ({floor_cpu:.2} us CPU each) | | | | |"
        );
        let floor = t.median("thread yield floor").unwrap_or(f64::NAN);
        let floor_cpu = t.median("thread yield floor cpu").unwrap_or(f64::NAN);
        println!(
            "| reference: {} threads on the client's CPU passing a token round robin (sched_yield) \
             | {floor:.0} hand-offs/s ({floor_cpu:.2} us CPU each) | | | | |",
            args.client_threads
        );
        let (u, e) = both(&|io| format!("client {io} tasks"));
        let (uc, ec) = both(&|io| format!("client {io} tasks cpu"));
        println!(
            "| {} tasks sharing one AsyncClient, PING | {u:.0} req/s ({uc:.2} us CPU/req) | {e:.0} \
             req/s ({ec:.2} us CPU/req) | reported | | |",
            args.client_threads
        );
    }
    if args.runs("tls") {
        println!(
            "\nTLS next to plain text (native blocking client; median of {} pass(es)):",
            args.passes
        );
        println!("| figure | io | plain | TLS | TLS / plain |");
        println!("|---|---|---:|---:|---:|");
        for &io in &args.ios {
            let io = io.flag();
            let pair = |name: &dyn Fn(&str) -> String| {
                (
                    t.median(&name("plain")).unwrap_or(f64::NAN),
                    t.median(&name("TLS")).unwrap_or(f64::NAN),
                )
            };
            let (p, s) = pair(&|k| format!("client e2e {io} {k}"));
            println!(
                "| send + receive + delete, msg/s | {io} | {p:.0} | {s:.0} | {:.2} |",
                s / p
            );
            for q in ["p50", "p99"] {
                let (p, s) = pair(&|k| format!("PING {io} {k} {q}"));
                println!("| PING {q}, us | {io} | {p:.1} | {s:.1} | {:.2} |", s / p);
            }
        }
    }
    if args.runs("shards") {
        for shards in [1, 2] {
            let (u, e) = both(&|io| format!("hot queue {io} {shards} shard"));
            println!(
                "| one hot queue, {shards} shard(s), {}P/{}C conns | {u:.0} msg/s | {e:.0} msg/s \
                 | reported | | |",
                args.producers, args.consumers
            );
        }
    }
    if args.ios.contains(&Io::Uring) && args.ios.contains(&Io::Epoll) {
        println!("\nepoll / io_uring (goal: within 20%):");
        for (name, _) in &t.rows {
            if let Some(rest) = name
                .strip_prefix("send uring ")
                .map(|r| format!("send epoll {r}"))
            {
                report_ratio(t, name, &rest);
            }
            if name == "e2e uring" {
                report_ratio(t, name, "e2e epoll");
            }
        }
    }
}

fn report_ratio(t: &Table, uring: &str, epoll: &str) {
    if let (Some(u), Some(e)) = (t.median(uring), t.median(epoll)) {
        println!("  {epoll:<28} {:.2}x of {uring}", e / u);
    }
}

fn main() {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("server_bench: {why}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
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
    summary(&args, &table);
}
