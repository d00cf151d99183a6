//! The metrics endpoint under hostile clients, on both backends: a thousand
//! connections that hold half-sent requests (reopened as they are cut)
//! never take a scrape's place, and a client that reads a large exposition
//! slowly is cut at the exchange deadline while other scrapes go on. Every
//! loop here is bounded in count and time; nothing asserts a timing.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_broker::server::config::IoChoice;
use sluice_protocol::{AttributeUpdate, QueueAttributesRequest, Reply, Request};

use crate::both_backends;
use crate::server_util::{name, start};

both_backends!(
    bad_requests_are_answered_and_the_endpoint_goes_on,
    half_sent_requests_never_take_a_scrapes_place,
    a_slow_reader_is_cut_at_the_exchange_deadline_while_scrapes_go_on,
);

/// Sends `bytes` and reads until the server closes: the status line.
fn status_of(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may answer and close before all of a large request is
    // sent; what it says is what counts.
    let _ = s.write_all(bytes);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    text.lines().next().unwrap_or("").to_owned()
}

/// Garbage, the binary protocol's HELLO, an unknown path, another method,
/// an HTTP/2 preface, a head over 8 KiB, a body over 64 KiB: each gets its
/// status and a close, and scrapes go on.
fn bad_requests_are_answered_and_the_endpoint_goes_on(io: IoChoice) {
    let Some(server) = start(io, &["--metrics-addr", "127.0.0.1:0"]) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    let mut huge_head = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    huge_head.extend(std::iter::repeat_n(b'a', 9 * 1024));
    huge_head.extend_from_slice(b"\r\n\r\n");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0xff; 64], "HTTP/1.1 400"),
        (
            b"\x0e\x00\x00\x00\x01\x00\x00\x00\x00\x00\x01\x00".to_vec(),
            "HTTP/1.1 400",
        ),
        (b"GET /nope HTTP/1.1\r\n\r\n".to_vec(), "HTTP/1.1 404"),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n".to_vec(), "HTTP/1.1 405"),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(), "HTTP/1.1 505"),
        (huge_head, "HTTP/1.1 431"),
        (
            b"GET /metrics HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n".to_vec(),
            "HTTP/1.1 413",
        ),
    ];
    for (bytes, want) in cases {
        let got = status_of(addr, &bytes);
        assert!(got.starts_with(want), "{want}: {got:?}");
    }
    let r = scrape(addr, "/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("sluice_connections_closed_bad_input_total"),
        "{}",
        r.body
    );
}

/// A whole response: status, headers and body as text.
struct Response {
    status: u16,
    content_length: Option<usize>,
    body: String,
}

fn scrape(addr: SocketAddr, path: &str) -> Response {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let content_length = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok());
    Response {
        status,
        content_length,
        body: body.to_owned(),
    }
}

/// `count` connections that each send the start of a request and nothing
/// more; those the server cuts (or closes at its deadlines) are reopened,
/// until `stop` is set or `limit` passes. Returns how many were opened.
fn half_senders(addr: SocketAddr, count: usize, stop: &AtomicBool, limit: Duration) -> u64 {
    let open = |opened: &mut u64| -> Option<TcpStream> {
        let mut s = TcpStream::connect(addr).ok()?;
        s.write_all(b"GET /metr").ok()?;
        s.set_nonblocking(true).ok()?;
        *opened += 1;
        Some(s)
    };
    let mut opened = 0u64;
    let mut conns: Vec<Option<TcpStream>> = (0..count).map(|_| open(&mut opened)).collect();
    let until = Instant::now() + limit;
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
        for slot in &mut conns {
            let gone = match slot {
                None => true,
                Some(s) => match s.read(&mut buf) {
                    Ok(_) => true,
                    Err(e) => e.kind() != ErrorKind::WouldBlock,
                },
            };
            if gone {
                *slot = open(&mut opened);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    opened
}

/// The must-show of "One HTTP stack": 1,000 connections hold half-sent
/// requests open (more than the endpoint's share per shard, so its oldest
/// are closed to make room, and the server's head deadline cuts the rest;
/// each is reopened at once) while a scraper scrapes 20 times: every scrape
/// is answered 200 with the whole exposition.
fn half_sent_requests_never_take_a_scrapes_place(io: IoChoice) {
    let Some(server) = start(io, &["--metrics-addr", "127.0.0.1:0", "--shards", "2"]) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (stop, opened) = (stop.clone(), opened.clone());
        std::thread::spawn(move || {
            let n = half_senders(addr, 1_000, &stop, Duration::from_secs(120));
            opened.store(n, Ordering::SeqCst);
        })
    };
    // Let the thousand connect before the first scrape.
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..20 {
        let r = scrape(addr, "/metrics");
        assert_eq!(r.status, 200, "scrape {i}: {}", r.body);
        assert_eq!(r.content_length, Some(r.body.len()), "scrape {i} whole");
        assert!(r.body.contains("sluice_build_info"), "scrape {i}");
        assert!(r.body.contains("process_start_time_seconds"), "scrape {i}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(scrape(addr, "/healthz").status, 200);
    stop.store(true, Ordering::SeqCst);
    attacker.join().expect("the attacker thread");
    assert!(opened.load(Ordering::SeqCst) >= 1_000);
}

/// Creates `count` queues through pipelined CREATE_QUEUEs.
fn create_queues(server: &crate::server_util::TestServer, count: usize) {
    let mut c = server.client();
    // Within the server's requests in flight per connection.
    for chunk in (0..count).collect::<Vec<_>>().chunks(16) {
        let ids: Vec<u32> = chunk
            .iter()
            .map(|i| {
                c.send(&Request::CreateQueue(QueueAttributesRequest {
                    queue: name(&format!("padding-queue-with-a-long-name-{i:06}")),
                    attributes: AttributeUpdate::default(),
                }))
            })
            .collect();
        for id in ids {
            let reply = c.wait(id);
            assert!(matches!(reply, Reply::CreateQueue { .. }), "{reply:?}");
        }
    }
}

/// A client that reads a large exposition (over 32 MiB, several times
/// what loopback's socket buffers hold) a little at a time is cut off at
/// the exchange deadline (10 s from its accept) rather than holding its
/// connection for the minute its pace would take; meanwhile a scrape of
/// its own is answered whole.
fn a_slow_reader_is_cut_at_the_exchange_deadline_while_scrapes_go_on(io: IoChoice) {
    let Some(server) = start(
        io,
        &["--metrics-addr", "127.0.0.1:0", "--queues-max", "30000"],
    ) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    create_queues(&server, 30_000);
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    // A scrape of its own, while the slow one is being read.
    let quick = std::thread::spawn(move || scrape(addr, "/metrics"));
    // 64 KiB every 100 ms would take about a minute for the whole of it.
    let mut chunk = vec![0u8; 64 * 1024];
    let (mut read, mut cut) = (0usize, false);
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        match slow.read(&mut chunk) {
            Ok(0) => {
                cut = true;
                break;
            }
            Ok(n) => read += n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                cut = true;
                break;
            }
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let whole = quick.join().expect("the quick scrape");
    assert_eq!(whole.status, 200);
    assert_eq!(whole.content_length, Some(whole.body.len()));
    assert!(
        whole.body.len() > 32 * 1024 * 1024,
        "{} bytes",
        whole.body.len()
    );
    assert!(cut, "the slow reader was never cut off ({read} bytes read)");
    assert!(read < whole.body.len(), "the whole reply was read: {read}");
    assert_eq!(scrape(addr, "/healthz").status, 200);
}
