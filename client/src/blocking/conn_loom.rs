//! Loom models of the blocking connection's threads (build with
//! `RUSTFLAGS="--cfg sluice_loom"`; see `.ci/run`): the production
//! [`Connection`] over an in-memory wire, with callers on several threads
//! and, in some models, a server thread. Loom runs every interleaving of
//! their mutexes, atomics, parks and wake-ups (up to its preemption bound)
//! and fails a model on a panic; when every thread is blocked (a caller
//! parked for good because a wake-up was lost, or replies left unread while
//! nobody leads); or when the threads only spin (a stalled write that never
//! reads what waits: loom's "exceeded maximum number of branches").
//!
//! What each model asserts: every caller gets the reply to its own request
//! (or, when the wire ends, a disconnect-class error), and when all callers
//! are done the connection holds no entry, no leader and no parked thread.

use std::io;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use loom::sync::{Arc, Condvar};
use sluice_protocol::limits::PROTOCOL_VERSION;
use sluice_protocol::{FrameDecoder, HelloReply, Reply, Request, ServerLimits};

use super::conn::{Connection, Refused};
use super::sync::{Mutex, lock, thread};
use super::wire::Wire;
use crate::error::Result;

/// Far enough that no deadline of a model passes (a model has no clock).
const PATIENCE: Duration = Duration::from_secs(3600);
const FRAME_BYTES_MAX: u32 = 1 << 20;

/// How the model's server answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serve {
    /// Within the write that brings the request, on the caller's thread.
    OnWrite,
    /// On its own thread, after the write.
    OnThread,
}

/// Both directions of one in-memory connection.
struct Pipe {
    /// Bytes the client wrote that the server has not taken.
    to_server: BytesMut,
    /// Bytes the server wrote that the client has not read.
    to_client: Vec<u8>,
    decoder: FrameDecoder,
    /// Requests the server answers; after that it ends the stream instead
    /// of answering (`None`: it answers all).
    answers_left: Option<usize>,
    /// Most bytes each direction holds (`None`: unbounded). When
    /// `to_client` is full the server takes no more requests, and when
    /// `to_server` is full a write stalls: the back-pressure of a server
    /// that stops reading until its replies are read.
    cap: Option<usize>,
    /// The stream ended: shut down by the client or ended by the server.
    ended: bool,
}

struct Shared {
    pipe: Mutex<Pipe>,
    /// Signalled when `to_client`, `to_server` or `ended` changes.
    changed: Condvar,
    serve: Serve,
}

/// The model's wire: a handle on the shared pipe.
#[derive(Clone)]
struct MemWire(Arc<Shared>);

impl std::fmt::Debug for MemWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemWire")
    }
}

impl MemWire {
    fn new(serve: Serve, answers: Option<usize>) -> MemWire {
        Self::bounded(serve, answers, None)
    }

    fn bounded(serve: Serve, answers: Option<usize>, cap: Option<usize>) -> MemWire {
        MemWire(Arc::new(Shared {
            pipe: Mutex::new(Pipe {
                to_server: BytesMut::new(),
                to_client: Vec::new(),
                decoder: FrameDecoder::new(FRAME_BYTES_MAX),
                answers_left: answers,
                cap,
                ended: false,
            }),
            changed: Condvar::new(),
            serve,
        }))
    }

    /// The server's turn: answers every whole request frame written so far
    /// (a PING with its PONG), or ends the stream once its answers are
    /// spent. Returns how many requests it took.
    fn answer(p: &mut Pipe) -> usize {
        let mut taken = 0;
        while !p.ended && p.cap.is_none_or(|cap| p.to_client.len() < cap) {
            let frame = match p.decoder.decode(&mut p.to_server) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => panic!("the client wrote a malformed frame: {e}"),
            };
            taken += 1;
            if p.answers_left == Some(0) {
                p.ended = true;
                break;
            }
            if let Some(left) = &mut p.answers_left {
                *left -= 1;
            }
            let request = Request::decode(frame.opcode, frame.flags, frame.payload)
                .expect("the client wrote a valid request");
            let Request::Ping { nonce } = request else {
                panic!("the models send only PINGs, got {request:?}");
            };
            let mut out = BytesMut::new();
            Reply::Pong { nonce }
                .encode(frame.request_id, &mut out)
                .expect("a PONG encodes");
            p.to_client.extend_from_slice(&out);
        }
        taken
    }

    /// The server thread: answers until it has taken `requests` requests or
    /// the stream ends.
    fn serve(&self, requests: usize) {
        let mut taken = 0;
        let mut p = lock(&self.0.pipe);
        while taken < requests && !p.ended {
            let n = Self::answer(&mut p);
            taken += n;
            if n > 0 {
                self.0.changed.notify_all();
            } else {
                p = self.0.changed.wait(p).expect("no panic holds the pipe");
            }
        }
        self.0.changed.notify_all();
    }

    /// The client's read of what waits for it: copies what fits into `buf`,
    /// drains it from the pipe and tells the server there is room.
    fn take_into(&self, p: &mut Pipe, buf: &mut [u8]) -> usize {
        let n = buf.len().min(p.to_client.len());
        buf[..n].copy_from_slice(&p.to_client[..n]);
        p.to_client.drain(..n);
        self.0.changed.notify_all();
        n
    }
}

impl Wire for MemWire {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut p = lock(&self.0.pipe);
        loop {
            if !p.to_client.is_empty() {
                return Ok(self.take_into(&mut p, buf));
            }
            if p.ended {
                return Ok(0);
            }
            p = self.0.changed.wait(p).expect("no panic holds the pipe");
        }
    }

    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut p = lock(&self.0.pipe);
        if p.to_client.is_empty() {
            return if p.ended {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        Ok(self.take_into(&mut p, buf))
    }

    /// Takes what fits. With nothing fitting, the socket's write time-out
    /// is modelled: the write fails with `WouldBlock` when the server has
    /// stopped reading until its replies are read (replies wait, so a real
    /// write would time out), and blocks until the server takes bytes
    /// otherwise.
    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut p = lock(&self.0.pipe);
        loop {
            if p.ended {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let room = p
                .cap
                .map_or(buf.len(), |cap| cap.saturating_sub(p.to_server.len()));
            if room > 0 {
                let n = room.min(buf.len());
                p.to_server.extend_from_slice(&buf[..n]);
                if self.0.serve == Serve::OnWrite {
                    Self::answer(&mut p);
                }
                self.0.changed.notify_all();
                return Ok(n);
            }
            if !p.to_client.is_empty() {
                drop(p);
                // The caller retries at once: let the others run first.
                thread::yield_now();
                return Err(io::ErrorKind::WouldBlock.into());
            }
            p = self.0.changed.wait(p).expect("no panic holds the pipe");
        }
    }

    fn set_read_timeout(&self, _timeout: Option<Duration>) -> io::Result<()> {
        // The models' deadlines never come.
        Ok(())
    }

    fn shutdown(&self) {
        lock(&self.0.pipe).ended = true;
        self.0.changed.notify_all();
    }
}

fn connection(wire: MemWire) -> Arc<Connection<MemWire>> {
    let hello = HelloReply {
        version: PROTOCOL_VERSION,
        server_version: "loom".into(),
        shard: 0,
        shards: 1,
        limits: ServerLimits {
            frame_bytes_max: FRAME_BYTES_MAX,
            batch_entries_max: 1024,
            requests_in_flight_max: 1024,
            receive_wait_ms_max: 20_000,
        },
    };
    let conn = Connection::new(
        wire,
        None,
        hello,
        FrameDecoder::new(FRAME_BYTES_MAX),
        BytesMut::new(),
        Duration::ZERO,
        None,
    )
    .expect("the in-memory wire takes a read time-out");
    Arc::new(conn)
}

/// One PING through the connection, as `Client::call` makes it: submit,
/// then wait. `Ok(None)`: the connection had ended before the request was
/// registered (the client would retry on a new one).
fn ping_one(conn: &Connection<MemWire>, nonce: u64) -> Result<Option<u64>> {
    let deadline = Instant::now() + PATIENCE;
    let mut id = [0u32];
    match conn.submit(&[Request::Ping { nonce }], &mut id, deadline) {
        Ok(()) => {}
        Err(Refused::Closed(_)) => return Ok(None),
        Err(Refused::Invalid(e)) => panic!("a PING is valid: {e}"),
    }
    match conn.wait(id[0], deadline, PATIENCE)? {
        Reply::Pong { nonce } => Ok(Some(nonce)),
        other => panic!("a PING answered {other:?}"),
    }
}

fn assert_idle(conn: &Connection<MemWire>) {
    assert_eq!(
        conn.snapshot(),
        (0, false, 0),
        "entries, leader, parked threads left behind"
    );
}

/// Two callers, one request each, answered by a server thread: one leads,
/// the other parks or finds its reply already read; both get their own
/// PONG, and the connection is left idle.
#[test]
fn loom_two_callers_each_get_their_own_reply() {
    loom::model(|| {
        let wire = MemWire::new(Serve::OnThread, None);
        let conn = connection(wire.clone());
        let server = thread::spawn(move || wire.serve(2));
        let other = {
            let conn = Arc::clone(&conn);
            thread::spawn(move || ping_one(&conn, 2))
        };
        assert_eq!(ping_one(&conn, 1).expect("answered"), Some(1));
        assert_eq!(other.join().expect("no panic").expect("answered"), Some(2));
        server.join().expect("no panic");
        assert_idle(&conn);
    });
}

/// Two callers with two requests each, answered as they are written: the
/// reader role passes between them (a leader whose reply is in leaves while
/// the other still waits), and no reply goes to the wrong caller.
#[test]
fn loom_callers_in_turn_pass_the_reader_role() {
    loom::model(|| {
        let conn = connection(MemWire::new(Serve::OnWrite, None));
        let other = {
            let conn = Arc::clone(&conn);
            thread::spawn(move || -> Result<()> {
                for nonce in [20, 21] {
                    assert_eq!(ping_one(&conn, nonce)?, Some(nonce));
                }
                Ok(())
            })
        };
        for nonce in [10, 11] {
            assert_eq!(ping_one(&conn, nonce).expect("answered"), Some(nonce));
        }
        other.join().expect("no panic").expect("answered");
        assert_idle(&conn);
    });
}

/// The server ends the stream instead of answering: every caller whose
/// request was registered gets a disconnect-class error (none hangs), a
/// request after that is refused, and nothing is left behind.
#[test]
fn loom_end_of_stream_fails_every_waiter() {
    loom::model(|| {
        let wire = MemWire::new(Serve::OnThread, Some(0));
        let conn = connection(wire.clone());
        let server = thread::spawn(move || wire.serve(1));
        let other = {
            let conn = Arc::clone(&conn);
            thread::spawn(move || ping_one(&conn, 2))
        };
        let outcomes = [ping_one(&conn, 1), other.join().expect("no panic")];
        server.join().expect("no panic");
        for outcome in outcomes {
            match outcome {
                Ok(None) => {}
                Ok(Some(nonce)) => panic!("PING {nonce} answered by a server that answers none"),
                Err(e) => assert!(e.is_disconnect(), "not a disconnect: {e:?}"),
            }
        }
        assert!(
            matches!(ping_one(&conn, 3), Ok(None)),
            "a closed connection took a request"
        );
        assert_idle(&conn);
    });
}

/// The length of a PING's frame, and of its PONG's.
fn frame_lens() -> (usize, usize) {
    let mut buf = BytesMut::new();
    Request::Ping { nonce: 0 }
        .encode(1, &mut buf)
        .expect("a PING encodes");
    let ping = buf.len();
    buf.clear();
    Reply::Pong { nonce: 0 }
        .encode(1, &mut buf)
        .expect("a PONG encodes");
    (ping, buf.len())
}

/// A pipeline of three PINGs written at once into a connection that holds
/// one frame each way, with the server reading only while its replies are
/// read: the write stalls, the writer reads the replies that wait (nobody
/// else leads), the server goes on, and every reply comes back.
#[test]
fn loom_a_stalled_write_reads_what_waits() {
    let (ping, pong) = frame_lens();
    assert_eq!(ping, pong, "one cap fits one frame each way");
    loom::model(move || {
        let wire = MemWire::bounded(Serve::OnThread, None, Some(ping));
        let conn = connection(wire.clone());
        let server = thread::spawn(move || wire.serve(3));
        let deadline = Instant::now() + PATIENCE;
        let requests: Vec<Request> = (1..=3).map(|nonce| Request::Ping { nonce }).collect();
        let mut ids = [0u32; 3];
        assert!(
            conn.submit(&requests, &mut ids, deadline).is_ok(),
            "the pipeline was refused"
        );
        for (nonce, id) in (1..=3).zip(ids) {
            match conn.wait(id, deadline, PATIENCE).expect("answered") {
                Reply::Pong { nonce: got } => assert_eq!(got, nonce),
                other => panic!("a PING answered {other:?}"),
            }
        }
        server.join().expect("no panic");
        assert_idle(&conn);
    });
}
