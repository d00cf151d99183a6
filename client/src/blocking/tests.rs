//! The blocking client against a scripted server: the test decides which
//! request is answered when, so who reads for whom is known, not hoped for.
//! Waits are bounded by [`PATIENCE`] so a broken build fails instead of
//! hanging; no figure of time is asserted.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::PROTOCOL_VERSION;
use sluice_protocol::{
    ErrorCode, FrameDecoder, HelloReply, QueueName, Reply, Request, SendEntry, SendRequest,
    ServerLimits, WireError, opcode,
};

use super::*;

const PATIENCE: Duration = Duration::from_secs(30);

/// What the scripted server does next on its current connection.
enum Ctl {
    /// Writes these bytes.
    Write(Vec<u8>),
    /// Closes the connection (both ways) and accepts the next one.
    Close,
}

/// A request as the scripted server read it: connection number, id, request.
type Seen = (usize, u32, Request);

/// A server that says HELLO, reports every request it reads and writes
/// only what the test tells it to.
struct Scripted {
    addr: SocketAddr,
    seen: Receiver<Seen>,
    ctl: Sender<Ctl>,
    _accept: JoinHandle<()>,
}

fn hello_reply() -> Reply {
    Reply::Hello(HelloReply {
        version: PROTOCOL_VERSION,
        server_version: "scripted".into(),
        shard: 0,
        shards: 1,
        limits: ServerLimits {
            frame_bytes_max: 1 << 20,
            batch_entries_max: 1024,
            requests_in_flight_max: 1024,
            receive_wait_ms_max: 20_000,
        },
    })
}

fn frame_of(id: u32, reply: &Reply) -> Vec<u8> {
    let mut buf = BytesMut::new();
    reply.encode(id, &mut buf).expect("encodable reply");
    buf.to_vec()
}

/// Reads frames from `stream` and reports each request until it ends.
fn report_requests(mut stream: TcpStream, conn: usize, seen: &Sender<Seen>) {
    let mut decoder = FrameDecoder::new(1 << 20);
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        while let Ok(Some(frame)) = decoder.decode(&mut buf) {
            if frame.opcode == opcode::HELLO {
                continue;
            }
            let request =
                Request::decode(frame.opcode, frame.flags, frame.payload).expect("a valid request");
            if seen.send((conn, frame.request_id, request)).is_err() {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

impl Scripted {
    fn start() -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (seen_tx, seen) = channel();
        let (ctl, ctl_rx) = channel::<Ctl>();
        let accept = std::thread::spawn(move || {
            for (conn, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { return };
                stream.set_nodelay(true).expect("nodelay");
                // The HELLO: read its frame, answer it.
                let mut decoder = FrameDecoder::new(4096);
                let mut buf = BytesMut::new();
                let mut byte = [0u8; 1];
                while decoder.decode(&mut buf).expect("a HELLO frame").is_none() {
                    if stream.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    buf.extend_from_slice(&byte);
                }
                stream
                    .write_all(&frame_of(1, &hello_reply()))
                    .expect("HELLO reply");
                let reader = stream.try_clone().expect("clone");
                let seen = seen_tx.clone();
                std::thread::spawn(move || report_requests(reader, conn, &seen));
                loop {
                    match ctl_rx.recv() {
                        Ok(Ctl::Write(bytes)) => {
                            if stream.write_all(&bytes).is_err() {
                                break;
                            }
                        }
                        Ok(Ctl::Close) => {
                            let _ = stream.shutdown(Shutdown::Both);
                            break;
                        }
                        Err(_) => return,
                    }
                }
            }
        });
        Scripted {
            addr,
            seen,
            ctl,
            _accept: accept,
        }
    }

    fn client(&self, request_timeout: Duration) -> Client {
        let config = ClientConfig::new(self.addr.to_string())
            .with_request_timeout(request_timeout)
            .with_reconnect_delays(Duration::from_millis(10), Duration::from_millis(50));
        Client::connect(config).expect("connects")
    }

    /// The next request the server read.
    fn next(&self) -> Seen {
        self.seen.recv_timeout(PATIENCE).expect("a request")
    }

    fn reply(&self, id: u32, reply: &Reply) {
        self.ctl.send(Ctl::Write(frame_of(id, reply))).expect("ctl");
    }

    fn close(&self) {
        self.ctl.send(Ctl::Close).expect("ctl");
    }
}

/// The client's connection: (requests in flight, a thread leads, threads parked).
fn snapshot(client: &Client) -> (usize, bool, usize) {
    let current = client.inner.current.read().unwrap();
    current.as_ref().expect("connected").snapshot()
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn long_poll(client: &Client) -> JoinHandle<Result<Vec<ReceivedMessage>>> {
    let c = client.clone();
    std::thread::spawn(move || c.receive("q", ReceiveOptions::new(1).wait(Duration::from_secs(20))))
}

#[test]
fn a_timeout_fires_while_another_thread_reads() {
    let server = Scripted::start();
    let client = server.client(Duration::from_millis(300));
    // A long poll: its thread takes the reader role and keeps it.
    let poller = long_poll(&client);
    let (_, poll_id, request) = server.next();
    assert!(matches!(request, Request::Receive(_)));
    eventually("the poller to lead", || snapshot(&client) == (1, true, 0));

    // A ping whose reply never comes: it parks behind the leader, and its
    // time-out fires there.
    let pinger = {
        let c = client.clone();
        std::thread::spawn(move || c.ping())
    };
    let (_, ping_id, _) = server.next();
    eventually("the ping to park", || snapshot(&client) == (2, true, 1));
    let err = pinger.join().unwrap().expect_err("no PONG was sent");
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    assert_eq!(snapshot(&client), (1, true, 0), "the poller still reads");

    // Its late reply is dropped; the poller gets its own.
    server.reply(ping_id, &Reply::Pong { nonce: 1 });
    server.reply(
        poll_id,
        &Reply::Error(WireError::new(ErrorCode::QueueNotFound, "q")),
    );
    let got = poller.join().unwrap();
    assert!(matches!(got, Err(Error::QueueNotFound(_))), "{got:?}");
    assert_eq!(snapshot(&client), (0, false, 0));
}

#[test]
fn the_reader_role_passes_on_when_the_leader_is_answered() {
    let server = Scripted::start();
    let client = server.client(Duration::from_secs(30));
    let first = long_poll(&client);
    let (_, first_id, _) = server.next();
    eventually("the first to lead", || snapshot(&client) == (1, true, 0));
    let second = long_poll(&client);
    let (_, second_id, _) = server.next();
    eventually("the second to park", || snapshot(&client) == (2, true, 1));

    // The leader is answered: it returns and hands the role to the other.
    server.reply(
        first_id,
        &Reply::Receive {
            messages: Default::default(),
        },
    );
    assert!(first.join().unwrap().unwrap().is_empty());
    eventually("the second to lead", || snapshot(&client) == (1, true, 0));
    server.reply(
        second_id,
        &Reply::Receive {
            messages: Default::default(),
        },
    );
    assert!(second.join().unwrap().unwrap().is_empty());
    assert_eq!(snapshot(&client), (0, false, 0));
}

#[test]
fn a_disconnect_fails_every_waiter_and_the_next_request_reconnects() {
    let server = Scripted::start();
    let client = server.client(Duration::from_secs(30));
    let waiters: Vec<_> = (0..16).map(|_| long_poll(&client)).collect();
    for _ in 0..16 {
        let (conn, _, _) = server.next();
        assert_eq!(conn, 0);
    }
    eventually("all 16 to wait", || snapshot(&client) == (16, true, 15));
    server.close();
    for w in waiters {
        let err = w.join().unwrap().expect_err("the connection dropped");
        assert!(err.is_disconnect(), "{err}");
    }
    // The next request opens a new connection.
    let pinger = {
        let c = client.clone();
        std::thread::spawn(move || c.ping())
    };
    let (conn, id, request) = server.next();
    assert_eq!(conn, 1, "a second connection");
    let Request::Ping { nonce } = request else {
        panic!("{request:?}")
    };
    server.reply(id, &Reply::Pong { nonce });
    pinger
        .join()
        .unwrap()
        .expect("answered on the new connection");
}

#[test]
fn a_large_pipeline_from_one_thread_cannot_deadlock_on_back_pressure() {
    // The server answers each request with 64 KiB of replies before it
    // reads the next: with no one reading while the only caller writes, both
    // sides would block in their writes forever.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut decoder = FrameDecoder::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut chunk = vec![0u8; 64 * 1024];
        // A reply to no request in flight, 64 KiB: the client drops it.
        let mut junk = frame_of(u32::MAX, &Reply::Pong { nonce: 0 });
        junk.extend(std::iter::repeat_n(0u8, 64 * 1024));
        let len = u32::try_from(junk.len() - 4).unwrap();
        junk[..4].copy_from_slice(&len.to_le_bytes());
        let mut answered = 0usize;
        loop {
            while let Ok(Some(frame)) = decoder.decode(&mut buf) {
                let reply = if frame.opcode == opcode::HELLO {
                    hello_reply()
                } else {
                    stream.write_all(&junk).unwrap();
                    answered += 1;
                    Reply::Error(WireError::new(ErrorCode::QueueNotFound, "q"))
                };
                stream
                    .write_all(&frame_of(frame.request_id, &reply))
                    .unwrap();
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return answered,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    let client = Client::connect(ClientConfig::new(addr.to_string())).unwrap();
    let body = Bytes::from(vec![b'x'; 60 * 1024]);
    let send = SendRequest::new(QueueName::from_static("q"), &[SendEntry::new(body)]).unwrap();
    let requests = vec![Request::Send(send); 512];
    let replies = client.call_many(&requests).expect("sent");
    assert_eq!(replies.len(), 512);
    for r in replies {
        assert!(
            matches!(r, Ok(Reply::Error(ref e)) if e.code == ErrorCode::QueueNotFound),
            "{r:?}"
        );
    }
    drop(client);
    assert_eq!(server.join().unwrap(), 512);
}

/// A parked caller under valgrind: parking reads the monotonic clock for
/// the futex's time-out, and a clock read through the vDSO, which valgrind
/// does not map, killed the process with SIGSEGV. Runs
/// [`the_reader_role_passes_on_when_the_leader_is_answered`] (a thread
/// parks there, then leads) in this very test binary under `valgrind
/// --tool=none`. Skipped where valgrind is not installed, except in CI
/// (`CI=true`), which installs it.
#[test]
fn a_parked_caller_works_under_valgrind() {
    const CHILD: &str = "blocking::tests::the_reader_role_passes_on_when_the_leader_is_answered";
    let have = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI installs valgrind (.ci/run); it is missing"
        );
        eprintln!("skipped: valgrind is not installed");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new("valgrind")
        .args(["--tool=none", "-q"])
        .arg(exe)
        .args(["--exact", CHILD, "--test-threads=1"])
        .output()
        .expect("valgrind runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "under valgrind: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "the test ran under valgrind:\n{stdout}"
    );
}
