//! The io layer against real sockets: each test body runs once per backend.
//!
//! Each test runs a driver on its own thread on 127.0.0.1 port 0 with a small
//! handler, and talks to it with std::net clients. Tests that need io_uring
//! print a skip line where it cannot be set up, except under `CI=true`, where
//! they fail instead. Loops are bounded and deadlines generous; nothing here
//! asserts a timing.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_broker::io::{
    Backend, BackendChoice, ConnId, Connections, DriverConfig, Event, OpenError, Waker, open,
};

/// How long a test waits for anything before it fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// An event as the test thread sees it.
#[derive(Debug)]
enum Ev {
    Accepted(ConnId, SocketAddr),
    Refused(ConnId),
    Data(ConnId, usize),
    Closed(ConnId, Option<ErrorKind>),
    Woken,
    /// Out of descriptors: tested through the binary under a lowered
    /// `ulimit -n` (`server_limits.rs`), as a limit is process-wide.
    AcceptFailed,
}

type Handler = Box<dyn FnMut(&mut Connections, &Event<'_>) + Send>;
type Job = Box<dyn FnOnce(&mut Connections) + Send>;

/// A driver running on its own thread.
struct Server {
    addr: SocketAddr,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    stop_accepting: Arc<AtomicBool>,
    jobs: Sender<Job>,
    events: Receiver<Ev>,
    thread: Option<JoinHandle<()>>,
}

fn pattern(offset: usize) -> u8 {
    (offset % 251) as u8
}

fn config(listen: SocketAddr) -> DriverConfig {
    DriverConfig {
        // Small and few buffers, so transfers cross many of them and the
        // io_uring receive runs out of buffers and must be re-armed.
        recv_buffer_bytes: 4096,
        recv_buffer_count: 8,
        ring_entries: 64,
        ..DriverConfig::new(listen)
    }
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Starts a driver, or returns `None` (after printing why) when io_uring was
/// asked for and is unavailable outside CI.
fn start(choice: BackendChoice, config: DriverConfig, mut handler: Handler) -> Option<Server> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (event_tx, events) = mpsc::channel();
    let (jobs, job_rx) = mpsc::channel::<Job>();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = Arc::clone(&stop);
    let stop_accepting = Arc::new(AtomicBool::new(false));
    let stop_accepting_flag = Arc::clone(&stop_accepting);
    let thread = thread::spawn(move || {
        let opened = match open(&config, choice) {
            Ok(opened) => opened,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        let mut driver = opened.driver;
        let expected = match choice {
            BackendChoice::Epoll => Backend::Epoll,
            _ => Backend::IoUring,
        };
        assert_eq!(driver.backend(), expected, "{}", driver.setup_detail());
        let _ = ready_tx.send(Ok((driver.local_addr(), driver.waker())));
        while !stop_flag.load(Ordering::Acquire) {
            let result = driver.poll(None, &mut |ops, event| {
                let ev = match &event {
                    Event::Accepted { conn, peer, .. } => Ev::Accepted(*conn, *peer),
                    Event::Refused { conn, .. } => Ev::Refused(*conn),
                    Event::Data { conn, bytes } => {
                        assert!(!bytes.is_empty(), "empty Data event");
                        Ev::Data(*conn, bytes.len())
                    }
                    Event::Closed { conn, error } => {
                        Ev::Closed(*conn, error.as_ref().map(|e| e.kind()))
                    }
                    Event::Woken => {
                        while let Ok(job) = job_rx.try_recv() {
                            job(ops);
                        }
                        Ev::Woken
                    }
                    Event::AcceptFailed { .. } => Ev::AcceptFailed,
                };
                handler(ops, &event);
                let _ = event_tx.send(ev);
            });
            result.expect("poll failed");
            if stop_accepting_flag.swap(false, Ordering::AcqRel) {
                driver.stop_accepting();
            }
        }
    });
    match ready_rx
        .recv_timeout(DEADLINE)
        .expect("driver thread did not start")
    {
        Ok((addr, waker)) => Some(Server {
            addr,
            waker,
            stop,
            stop_accepting,
            jobs,
            events,
            thread: Some(thread),
        }),
        Err(OpenError::UringUnavailable(why)) if choice == BackendChoice::IoUring => {
            let _ = thread.join();
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("io_uring is required under CI=true but unavailable: {why}");
            }
            eprintln!("SKIP: io_uring unavailable here ({why}); this test needs it");
            None
        }
        Err(e) => panic!("open failed: {e}"),
    }
}

impl Server {
    /// Runs `f` on the driver thread with its connection table and returns
    /// what it returns.
    fn ask<T: Send + 'static>(&self, f: impl FnOnce(&mut Connections) -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move |ops| {
                let _ = tx.send(f(ops));
            }))
            .expect("driver thread gone");
        self.waker.wake();
        rx.recv_timeout(DEADLINE)
            .expect("driver did not run the job")
    }

    /// The next event that `pick` accepts, skipping others.
    fn wait_for<T>(&self, what: &str, mut pick: impl FnMut(Ev) -> Option<T>) -> T {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ev) => {
                    if let Some(found) = pick(ev) {
                        return found;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("timed out waiting for {what}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("driver thread ended waiting for {what}")
                }
            }
        }
    }

    fn accepted(&self) -> ConnId {
        self.wait_for("Accepted", |ev| match ev {
            Ev::Accepted(conn, _) => Some(conn),
            _ => None,
        })
    }

    fn closed(&self, conn: ConnId) -> Option<ErrorKind> {
        self.wait_for("Closed", |ev| match ev {
            Ev::Closed(c, error) if c == conn => Some(error),
            _ => None,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
        let Some(thread) = self.thread.take() else {
            return;
        };
        let deadline = Instant::now() + DEADLINE;
        while !thread.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if !thread.is_finished() {
            if !thread::panicking() {
                panic!("driver thread did not stop: wake() did not end its poll");
            }
            return;
        }
        if let Err(panic) = thread.join() {
            if !thread::panicking() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

fn echo() -> Handler {
    Box::new(|ops, event| {
        if let Event::Data { conn, bytes } = event {
            ops.send(*conn, Bytes::copy_from_slice(bytes));
        }
    })
}

fn sink() -> Handler {
    Box::new(|_, _| {})
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream.set_write_timeout(Some(DEADLINE)).unwrap();
    stream
}

/// Reads until end of stream; fails on error or timeout.
fn read_to_end(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    stream.read_to_end(&mut out).expect("read to end");
    out
}

/// Writes `next(written)` chunks without blocking until the socket stays
/// full: `ready()` must hold and 25 tries in a row, 2 ms apart, must find it
/// full (a correct driver that stopped reading never drains it again; one
/// that reads on does). Fails past the deadline or 256 MiB, far more than
/// loopback socket buffers hold. Returns the bytes written.
fn write_until_stuck(
    client: &mut TcpStream,
    mut written: usize,
    mut next: impl FnMut(usize) -> Vec<u8>,
    ready: impl Fn() -> bool,
) -> usize {
    client.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + DEADLINE;
    let mut full_in_a_row = 0;
    while full_in_a_row < 25 {
        assert!(
            Instant::now() < deadline && written < 256 << 20,
            "writes never stayed blocked: the driver kept reading"
        );
        let chunk = next(written);
        match client.write(&chunk) {
            Ok(n) => {
                written += n;
                full_in_a_row = 0;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if ready() {
                    full_in_a_row += 1;
                }
                thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("client write: {e}"),
        }
    }
    client.set_nonblocking(false).unwrap();
    written
}

// ---- the test bodies ----

fn echo_large_transfer(choice: BackendChoice) {
    let Some(server) = start(choice, config(localhost()), echo()) else {
        return;
    };
    const TOTAL: usize = 24 << 20;
    let mut client = connect(server.addr);
    let mut writer = client.try_clone().unwrap();
    let conn = server.accepted();
    let sender = thread::spawn(move || {
        // Odd sizes, so sends and receives split everywhere.
        let sizes = [1usize, 7, 1000, 65_536, 100_003, 4096, 3];
        let mut offset = 0;
        let mut k = 0;
        while offset < TOTAL {
            let len = sizes[k % sizes.len()].min(TOTAL - offset);
            let chunk: Vec<u8> = (offset..offset + len).map(pattern).collect();
            writer.write_all(&chunk).expect("client write");
            offset += len;
            k += 1;
        }
    });
    let mut buf = vec![0u8; 50_000];
    let mut received = 0;
    while received < TOTAL {
        let n = client.read(&mut buf).expect("client read");
        assert!(n > 0, "server closed after {received} bytes");
        for (k, byte) in buf[..n].iter().enumerate() {
            assert_eq!(
                *byte,
                pattern(received + k),
                "byte {} differs",
                received + k
            );
        }
        received += n;
    }
    sender.join().unwrap();
    // The Data events for this connection account for every byte.
    let mut delivered = 0;
    while delivered < TOTAL {
        delivered += server.wait_for("Data", |ev| match ev {
            Ev::Data(c, n) if c == conn => Some(n),
            _ => None,
        });
    }
    assert_eq!(delivered, TOTAL);
    assert_eq!(server.ask(move |ops| ops.unsent_bytes(conn)), 0);
    drop(client);
    assert_eq!(server.closed(conn), None);
}

fn many_connections(choice: BackendChoice) {
    let Some(server) = start(choice, config(localhost()), echo()) else {
        return;
    };
    const CONNS: usize = 200;
    let mut clients: Vec<TcpStream> = (0..CONNS).map(|_| connect(server.addr)).collect();
    let mut peers = HashMap::new();
    for _ in 0..CONNS {
        let (conn, peer) = server.wait_for("Accepted", |ev| match ev {
            Ev::Accepted(conn, peer) => Some((conn, peer)),
            _ => None,
        });
        assert!(peers.insert(peer, conn).is_none(), "peer reported twice");
    }
    for client in &clients {
        assert!(
            peers.contains_key(&client.local_addr().unwrap()),
            "Accepted names the peer"
        );
    }
    for (k, client) in clients.iter_mut().enumerate() {
        let msg: Vec<u8> = (0..4096).map(|j| pattern(k * 7 + j)).collect();
        client.write_all(&msg).unwrap();
    }
    for (k, client) in clients.iter_mut().enumerate() {
        let mut got = vec![0u8; 4096];
        client.read_exact(&mut got).unwrap();
        let want: Vec<u8> = (0..4096).map(|j| pattern(k * 7 + j)).collect();
        assert_eq!(got, want, "connection {k}");
    }
    assert_eq!(server.ask(|ops| ops.admitted()), CONNS);
    drop(clients);
    let mut closed = 0;
    while closed < CONNS {
        server.wait_for("Closed", |ev| {
            matches!(ev, Ev::Closed(_, None)).then_some(())
        });
        closed += 1;
    }
    assert_eq!(server.ask(|ops| ops.admitted()), 0);
}

fn peer_close_gives_closed(choice: BackendChoice) {
    let Some(server) = start(choice, config(localhost()), echo()) else {
        return;
    };
    let mut client = connect(server.addr);
    let conn = server.accepted();
    client.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        server.closed(conn),
        None,
        "end of stream is an orderly close"
    );
    // The server closed its side too.
    assert_eq!(read_to_end(&mut client), b"");
    // The id is stale now: everything on it is a no-op.
    let stale = server.ask(move |ops| {
        let sent = ops.send(conn, Bytes::from_static(b"late"));
        ops.close_now(conn);
        (sent, ops.is_open(conn), ops.unsent_bytes(conn))
    });
    assert_eq!(stale, (false, false, 0));
}

fn peer_reset_gives_closed_error(choice: BackendChoice) {
    // Greet every connection, so the client can close with unread bytes,
    // which makes its kernel send a reset instead of a FIN.
    let handler: Handler = Box::new(|ops, event| {
        if let Event::Accepted { conn, .. } = event {
            ops.send(*conn, Bytes::from_static(b"hello"));
        }
    });
    let Some(server) = start(choice, config(localhost()), handler) else {
        return;
    };
    let client = connect(server.addr);
    let conn = server.accepted();
    let mut peek = [0u8; 5];
    let deadline = Instant::now() + DEADLINE;
    while client.peek(&mut peek).unwrap() < 5 {
        assert!(Instant::now() < deadline, "greeting never arrived");
        thread::sleep(Duration::from_millis(1));
    }
    drop(client);
    let error = server.closed(conn);
    assert!(error.is_some(), "a reset is reported as an error");
}

fn close_flushes_queued_sends(choice: BackendChoice) {
    const TOTAL: usize = 8 << 20;
    const CHUNK: usize = 64 << 10;
    let handler: Handler = Box::new(|ops, event| {
        if let Event::Data { conn, .. } = event {
            for start in (0..TOTAL).step_by(CHUNK) {
                let chunk: Vec<u8> = (start..start + CHUNK).map(pattern).collect();
                assert!(ops.send(*conn, Bytes::from(chunk)));
            }
            ops.close(*conn);
            assert!(
                !ops.send(*conn, Bytes::from_static(b"x")),
                "no sends after close"
            );
        }
    });
    let Some(server) = start(choice, config(localhost()), handler) else {
        return;
    };
    let mut client = connect(server.addr);
    let conn = server.accepted();
    client.write_all(b"go").unwrap();
    let got = read_to_end(&mut client);
    assert_eq!(got.len(), TOTAL);
    assert!(
        got.iter().enumerate().all(|(k, b)| *b == pattern(k)),
        "content differs"
    );
    assert_eq!(server.closed(conn), None);
}

fn close_now_drops_queued_sends(choice: BackendChoice) {
    let handler: Handler = Box::new(|ops, event| {
        if let Event::Data { conn, .. } = event {
            ops.send(*conn, Bytes::from(vec![1u8; 1 << 20]));
            ops.close_now(*conn);
        }
    });
    let Some(server) = start(choice, config(localhost()), handler) else {
        return;
    };
    let mut client = connect(server.addr);
    let conn = server.accepted();
    client.write_all(b"go").unwrap();
    // Nothing was handed to the kernel before the close: nothing arrives.
    let mut got = Vec::new();
    match client.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(
        got.is_empty(),
        "{} bytes arrived after close_now",
        got.len()
    );
    assert_eq!(server.closed(conn), None);
}

/// Shared state of the backpressure handler.
#[derive(Default)]
struct Pause {
    conn: Mutex<Option<ConnId>>,
    paused: AtomicBool,
    delivered: AtomicUsize,
    data_while_paused: AtomicUsize,
    mismatches: AtomicUsize,
}

fn backpressure_stops_data(choice: BackendChoice) {
    let state = Arc::new(Pause::default());
    let shared = Arc::clone(&state);
    let handler: Handler = Box::new(move |ops, event| {
        if let Event::Data { conn, bytes } = event {
            if shared.paused.load(Ordering::Relaxed) {
                shared.data_while_paused.fetch_add(1, Ordering::Relaxed);
            }
            let start = shared.delivered.fetch_add(bytes.len(), Ordering::Relaxed);
            let wrong = bytes
                .iter()
                .enumerate()
                .filter(|(k, b)| **b != pattern(start + k))
                .count();
            shared.mismatches.fetch_add(wrong, Ordering::Relaxed);
            let mut first = shared.conn.lock().unwrap();
            if first.is_none() {
                *first = Some(*conn);
                ops.set_reading(*conn, false);
                assert!(!ops.is_reading(*conn));
                shared.paused.store(true, Ordering::Relaxed);
            }
        }
    });
    // Default (plenty of) receive buffers: a driver that kept its receive
    // running while paused would never run out and would read on.
    let Some(server) = start(choice, DriverConfig::new(localhost()), handler) else {
        return;
    };
    let mut client = connect(server.addr);
    let conn = server.accepted();
    client.write_all(&[pattern(0)]).unwrap();
    server.wait_for("first Data", |ev| matches!(ev, Ev::Data(..)).then_some(()));
    // With reading paused the kernel's buffers fill and the client's
    // writes block for good; they would not if the driver read on.
    let written = write_until_stuck(
        &mut client,
        1,
        |at| (at..at + 65_536).map(pattern).collect(),
        || true,
    );
    let blocked = written;
    assert_eq!(state.data_while_paused.load(Ordering::Relaxed), 0);
    let delivered = state.delivered.load(Ordering::Relaxed);
    assert!(
        delivered < blocked,
        "delivered {delivered} of {blocked} while paused"
    );
    // Resume: everything arrives, in order.
    state.paused.store(false, Ordering::Relaxed);
    server.ask(move |ops| ops.set_reading(conn, true));
    let deadline = Instant::now() + DEADLINE;
    while state.delivered.load(Ordering::Relaxed) < written {
        assert!(Instant::now() < deadline, "data did not resume");
        thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(state.delivered.load(Ordering::Relaxed), written);
    assert_eq!(
        state.mismatches.load(Ordering::Relaxed),
        0,
        "bytes out of order"
    );
}

fn wake_ends_poll(choice: BackendChoice) {
    let Some(server) = start(choice, config(localhost()), sink()) else {
        return;
    };
    // The driver thread polls with no timeout: only a wake ends each wait.
    for _ in 0..3 {
        let waker = Arc::clone(&server.waker);
        thread::spawn(move || waker.wake()).join().unwrap();
        server.wait_for("Woken", |ev| matches!(ev, Ev::Woken).then_some(()));
    }
    // Many concurrent wakes coalesce into at least one Woken after them.
    let wakers: Vec<_> = (0..8)
        .map(|_| {
            let waker = Arc::clone(&server.waker);
            thread::spawn(move || {
                for _ in 0..100 {
                    waker.wake();
                }
            })
        })
        .collect();
    for w in wakers {
        w.join().unwrap();
    }
    server.wait_for("Woken", |ev| matches!(ev, Ev::Woken).then_some(()));
}

fn max_connections_refused(choice: BackendChoice) {
    let handler: Handler = Box::new(|ops, event| match event {
        Event::Refused { conn, .. } => {
            ops.send(*conn, Bytes::from_static(b"FULL\n"));
        }
        Event::Data { conn, bytes } => {
            ops.send(*conn, Bytes::copy_from_slice(bytes));
        }
        _ => {}
    });
    let config = DriverConfig {
        connections_max: 2,
        refused_connections_max: 4,
        ..config(localhost())
    };
    let Some(server) = start(choice, config, handler) else {
        return;
    };
    let roundtrip = |client: &mut TcpStream| {
        client.write_all(b"abc").unwrap();
        let mut got = [0u8; 3];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abc");
    };
    let mut first = connect(server.addr);
    let first_id = server.accepted();
    roundtrip(&mut first);
    let mut second = connect(server.addr);
    server.accepted();
    roundtrip(&mut second);

    let mut third = connect(server.addr);
    // Like a real client, it speaks first; the refused connection is never
    // read, yet the error frame must still arrive.
    third.write_all(b"HELLO").unwrap();
    let refused = server.wait_for("Refused", |ev| match ev {
        Ev::Refused(conn) => Some(conn),
        Ev::Accepted(..) => panic!("third connection admitted over the limit"),
        _ => None,
    });
    // Give the server's reset (it closes with the HELLO unread) time to
    // arrive before reading: bytes queued before a reset stay readable.
    thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    let end = third.read_to_end(&mut got);
    assert_eq!(got, b"FULL\n", "{end:?}");
    assert_eq!(server.closed(refused), None);
    assert_eq!(server.ask(|ops| ops.admitted()), 2);

    // A slot frees when a connection closes.
    drop(first);
    assert_eq!(server.closed(first_id), None);
    let mut fourth = connect(server.addr);
    server.accepted();
    roundtrip(&mut fourth);
    roundtrip(&mut second);
}

/// A refused connection whose caller resumes reading it (a TLS port, whose
/// refusal needs a handshake first) gets its data and stays open until the
/// caller closes it; it still holds a refused slot, not an admitted one.
fn refused_connections_can_be_read(choice: BackendChoice) {
    let handler: Handler = Box::new(|ops, event| match event {
        Event::Refused { conn, .. } => ops.set_reading(*conn, true),
        Event::Data { conn, bytes } => {
            ops.send(*conn, Bytes::copy_from_slice(bytes));
            if bytes.ends_with(b".") {
                ops.close(*conn);
            }
        }
        _ => {}
    });
    let config = DriverConfig {
        connections_max: 1,
        refused_connections_max: 2,
        ..config(localhost())
    };
    let Some(server) = start(choice, config, handler) else {
        return;
    };
    let _first = connect(server.addr);
    server.accepted();
    let mut refused = connect(server.addr);
    let id = server.wait_for("Refused", |ev| match ev {
        Ev::Refused(conn) => Some(conn),
        Ev::Accepted(..) => panic!("second connection admitted over the limit"),
        _ => None,
    });
    // Read, and still open after its first exchange.
    refused.write_all(b"hello").unwrap();
    let mut got = [0u8; 5];
    refused.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello");
    assert_eq!(server.ask(|ops| ops.admitted()), 1);
    assert!(server.ask(move |ops| ops.is_open(id)));
    // The caller's close ends it, after the reply.
    refused.write_all(b"bye.").unwrap();
    let mut rest = Vec::new();
    refused.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"bye.");
    assert_eq!(server.closed(id), None);
}

fn reuse_port_spreads_connections(choice: BackendChoice) {
    let Some(a) = start(choice, config(localhost()), echo()) else {
        return;
    };
    assert_ne!(a.addr.port(), 0, "local_addr reports the chosen port");
    let Some(b) = start(choice, config(a.addr), echo()) else {
        return;
    };
    assert_eq!(a.addr, b.addr);
    const CONNS: usize = 64;
    let mut clients: Vec<TcpStream> = (0..CONNS).map(|_| connect(a.addr)).collect();
    for client in &mut clients {
        client.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
    }
    let (on_a, on_b) = (a.ask(|ops| ops.admitted()), b.ask(|ops| ops.admitted()));
    assert_eq!(on_a + on_b, CONNS);
    // A hash of 64 different source ports lands on one socket with
    // probability 2^-63.
    assert!(
        on_a > 0 && on_b > 0,
        "all {CONNS} connections on one driver: {on_a} + {on_b}"
    );
}

/// Shared state of the unsent-bytes handler.
#[derive(Default)]
struct Unsent {
    max_seen: AtomicUsize,
    at_pause: Mutex<Option<usize>>,
    data_while_paused: AtomicUsize,
}

fn unsent_bytes_grow_then_stop(choice: BackendChoice) {
    const LIMIT: usize = 1 << 20;
    const REPLY: usize = 256 << 10;
    let state = Arc::new(Unsent::default());
    let shared = Arc::clone(&state);
    let reply = Bytes::from(vec![7u8; REPLY]);
    let handler: Handler = Box::new(move |ops, event| {
        if let Event::Data { conn, .. } = event {
            let mut at_pause = shared.at_pause.lock().unwrap();
            if at_pause.is_some() {
                shared.data_while_paused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // The server's rule: over the limit, stop reading.
            if ops.unsent_bytes(*conn) >= LIMIT {
                ops.set_reading(*conn, false);
                *at_pause = Some(ops.unsent_bytes(*conn));
                return;
            }
            ops.send(*conn, reply.clone());
            shared
                .max_seen
                .fetch_max(ops.unsent_bytes(*conn), Ordering::Relaxed);
        }
    });
    let Some(server) = start(choice, config(localhost()), handler) else {
        return;
    };
    let mut client = connect(server.addr);
    let conn = server.accepted();
    // The client writes and never reads, until the server has paused and
    // the socket stays full.
    let paused = Arc::clone(&state);
    write_until_stuck(
        &mut client,
        0,
        |_| vec![1u8; 1024],
        move || paused.at_pause.lock().unwrap().is_some(),
    );
    let at_pause = *state.at_pause.lock().unwrap();
    let at_pause = at_pause.expect("reading was never paused");
    assert!(at_pause >= LIMIT, "paused at {at_pause}");
    let max_seen = state.max_seen.load(Ordering::Relaxed);
    assert!(
        max_seen < LIMIT + REPLY,
        "unsent grew to {max_seen} past the limit"
    );
    // Paused and with nothing more sent, it cannot grow; it shrinks only as
    // the kernel takes bytes.
    for _ in 0..3 {
        let now = server.ask(move |ops| ops.unsent_bytes(conn));
        assert!(
            now <= at_pause,
            "unsent grew to {now} from {at_pause} at pause"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(state.data_while_paused.load(Ordering::Relaxed), 0);
    assert_eq!(
        server.ask(|ops| ops.unsent_bytes_total()),
        server.ask(move |ops| ops.unsent_bytes(conn))
    );
}

fn stop_accepting_keeps_connections(choice: BackendChoice) {
    let Some(server) = start(choice, config(localhost()), echo()) else {
        return;
    };
    let mut client = connect(server.addr);
    server.accepted();
    server.stop_accepting.store(true, Ordering::Release);
    server.waker.wake();
    // Once the listener is closed, connecting is refused. A connection that
    // slipped into the backlog before that is reset with it; try again.
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "the listener never closed");
        match TcpStream::connect(server.addr) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => break,
            // Caught in the handshake as the listener closed.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connect: {e}"),
            Ok(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
    // The connection accepted before goes on working.
    client.write_all(b"still here").unwrap();
    let mut got = [0u8; 10];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still here");
    assert_eq!(server.ask(|ops| ops.admitted()), 1);
}

fn poll_returns_after_timeout(choice: BackendChoice) {
    let mut driver = match open(&config(localhost()), choice) {
        Ok(opened) => opened.driver,
        Err(OpenError::UringUnavailable(why)) => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "io_uring is required under CI=true: {why}"
            );
            eprintln!("SKIP: io_uring unavailable here ({why}); this test needs it");
            return;
        }
        Err(e) => panic!("open: {e}"),
    };
    // Nothing happens: each poll ends by its timeout, with no event.
    for timeout in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(20),
    ] {
        let mut events = 0;
        driver
            .poll(Some(timeout), &mut |_, _| events += 1)
            .expect("poll");
        assert_eq!(events, 0);
    }
}

macro_rules! both_backends {
    ($($body:ident),* $(,)?) => {
        $(
            mod $body {
                use super::*;

                #[test]
                fn io_uring() {
                    super::$body(BackendChoice::IoUring);
                }

                #[test]
                fn epoll() {
                    super::$body(BackendChoice::Epoll);
                }
            }
        )*
    };
}

both_backends!(
    echo_large_transfer,
    many_connections,
    peer_close_gives_closed,
    peer_reset_gives_closed_error,
    close_flushes_queued_sends,
    close_now_drops_queued_sends,
    backpressure_stops_data,
    wake_ends_poll,
    max_connections_refused,
    refused_connections_can_be_read,
    reuse_port_spreads_connections,
    unsent_bytes_grow_then_stop,
    stop_accepting_keeps_connections,
    poll_returns_after_timeout,
);

#[test]
fn auto_prefers_io_uring_or_says_why_not() {
    let opened = open(&config(localhost()), BackendChoice::Auto).expect("open");
    match (&opened.fallback, opened.driver.backend()) {
        (None, Backend::IoUring) => {}
        (Some(why), Backend::Epoll) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("io_uring is required under CI=true: {why}");
            }
            eprintln!("SKIP part: io_uring unavailable, fell back to epoll: {why}");
        }
        other => panic!("inconsistent open result: {other:?}"),
    }
}

#[test]
fn invalid_config_is_refused() {
    let bad = DriverConfig {
        recv_buffer_count: 3,
        ..config(localhost())
    };
    for choice in [
        BackendChoice::Auto,
        BackendChoice::IoUring,
        BackendChoice::Epoll,
    ] {
        assert!(matches!(
            open(&bad, choice),
            Err(OpenError::InvalidConfig(_))
        ));
    }
}

#[test]
fn listen_error_is_not_a_fallback() {
    // Binding an address in use without SO_REUSEPORT fails for both
    // backends, and Auto must report it rather than hide it.
    let taken = std::net::TcpListener::bind(localhost()).unwrap();
    let config = DriverConfig {
        reuse_port: false,
        ..config(taken.local_addr().unwrap())
    };
    for choice in [BackendChoice::Auto, BackendChoice::Epoll] {
        assert!(matches!(
            open(&config, choice),
            Err(OpenError::Listen { .. })
        ));
    }
}
