//! Bad input through the server, on both backends. In each test another
//! client keeps working, and the server's memory stays bounded: its unsent
//! bytes (SERVER_STATS) and this process's RSS, against generous bounds.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use sluice_broker::server::config::IoChoice;
use sluice_protocol::{ErrorCode, Reply, Request, SendEntry, opcode};

use crate::both_backends;
use crate::server_util::{Client, TestServer, attrs, error_of, eventually, name, rss_bytes, start};

/// RSS may grow this much during a test: far above what the server should
/// need, far below what allocating a declared size would take.
const RSS_GROWTH_MAX: u64 = 512 << 20;
const LIMIT: Duration = Duration::from_secs(20);

both_backends!(
    garbage_bytes_lose_the_framing,
    an_oversized_declared_length_is_refused_unread,
    an_oversized_frame_after_hello_is_refused_unread,
    a_frame_cut_short_and_stalled_is_closed,
    a_peer_that_closes_after_its_last_bytes_is_closed_at_once,
    no_hello_in_time_is_closed,
    a_connection_flood_past_max_connections_is_refused,
    a_pipelining_flood_that_never_reads_is_paused,
    a_plain_http_request_is_refused,
    a_tls_client_hello_is_refused,
    the_first_frame_must_be_hello,
    an_unsupported_version_is_refused,
    malformed_payloads_and_unknown_opcodes_leave_the_connection_open,
);

/// Another client still works, and nothing is left unsent.
fn still_serving(server: &TestServer, rss_before: u64) {
    let mut c = server.client();
    c.ping();
    c.create("alive", attrs());
    c.send_body("alive", "yes");
    assert_eq!(c.receive("alive", 1, None, 1_000).len(), 1);
    let unsent = c.server_stats().counter("unsent_bytes").unwrap_or(u64::MAX);
    assert!(unsent < 64 << 20, "{unsent} bytes unsent");
    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(grown < RSS_GROWTH_MAX, "RSS grew by {grown} bytes");
}

/// Writes `bytes` and expects one ERROR frame with `code`, then the close.
/// Framing errors answer request id 0 (they answer no request).
fn expect_refused(server: &TestServer, hello_first: bool, bytes: &[u8], code: ErrorCode) {
    expect_refused_as(server, hello_first, bytes, code, 0);
}

fn expect_refused_as(
    server: &TestServer,
    hello_first: bool,
    bytes: &[u8],
    code: ErrorCode,
    request_id: u32,
) {
    let mut c = if hello_first {
        server.client()
    } else {
        Client::connect(server.addr)
    };
    c.write_raw(bytes);
    let frames = c.read_until_closed();
    let errors: Vec<_> = frames.iter().filter_map(error_of).collect();
    assert_eq!(errors.len(), 1, "one ERROR before the close: {frames:?}");
    assert_eq!(errors[0].code, code, "{}", errors[0].message);
    let error_frame = frames.iter().find(|f| error_of(f).is_some());
    assert_eq!(error_frame.map(|f| f.request_id), Some(request_id));
}

fn garbage_bytes_lose_the_framing(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    // A length below the 6-byte header: the stream cannot be framed.
    expect_refused(
        &server,
        false,
        b"\x05\x00\x00\x00garbage!",
        ErrorCode::Malformed,
    );
    expect_refused(&server, true, b"\x00\x00\x00\x00\x00", ErrorCode::Malformed);
    // Random bytes: whatever the first four say, the server answers and
    // closes, or waits for more (then the client gives up); it never hangs
    // the other clients.
    let mut seed = 0x1234_5678_9abc_def0u64;
    for _ in 0..20 {
        let mut c = Client::connect(server.addr);
        let bytes: Vec<u8> = (0..64)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 24) as u8
            })
            .collect();
        c.write_raw(&bytes);
        c.stream.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = c.read_until_closed();
    }
    still_serving(&server, rss);
}

fn an_oversized_declared_length_is_refused_unread(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    // 2 GiB declared before HELLO (limit 4 KiB), followed by a few bytes.
    expect_refused(
        &server,
        false,
        &[0xff, 0xff, 0xff, 0x7f, 0x20, 0, 1, 0, 0, 0, 1, 2, 3],
        ErrorCode::FrameTooLarge,
    );
    // Just above the HELLO limit.
    let mut frame = BytesMut::new();
    frame.put_u32_le(4096 - 4 + 1);
    frame.put_slice(&[opcode::HELLO, 0, 1, 0, 0, 0]);
    expect_refused(&server, false, &frame, ErrorCode::FrameTooLarge);
    still_serving(&server, rss);
}

fn an_oversized_frame_after_hello_is_refused_unread(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    // 64 MiB declared after HELLO (limit 1 MiB).
    let mut frame = BytesMut::new();
    frame.put_u32_le(64 << 20);
    frame.put_slice(&[opcode::SEND, 0, 9, 0, 0, 0]);
    expect_refused(&server, true, &frame, ErrorCode::FrameTooLarge);
    still_serving(&server, rss);
}

fn a_frame_cut_short_and_stalled_is_closed(io: IoChoice) {
    let Some(server) = start(io, &["--frame-timeout", "200ms"]) else {
        return;
    };
    let rss = rss_bytes();
    let mut c = server.client();
    let mut out = BytesMut::new();
    Request::Ping { nonce: 1 }.encode(5, &mut out).unwrap();
    // Half a PING, then nothing.
    c.write_raw(&out[..7]);
    let frames = c.read_until_closed();
    assert!(frames.is_empty(), "closed without a reply: {frames:?}");
    // A slow but steady client is fine: whole frames, a pause between.
    let mut slow = server.client();
    for _ in 0..3 {
        slow.ping();
        std::thread::sleep(Duration::from_millis(300));
    }
    slow.ping();
    still_serving(&server, rss);
}

/// A peer that closes its end right after its last bytes (half a frame, or
/// a whole request) is closed at once on both backends. Its end of stream can come in the same readiness event as
/// those bytes, and must not be missed: with the frame time-out at an hour,
/// only the end of stream can close these connections.
fn a_peer_that_closes_after_its_last_bytes_is_closed_at_once(io: IoChoice) {
    let Some(server) = start(io, &["--frame-timeout", "1h"]) else {
        return;
    };
    let rss = rss_bytes();
    let mut observer = server.client();
    let mut ping = BytesMut::new();
    Request::Ping { nonce: 1 }.encode(5, &mut ping).unwrap();
    for i in 0..200 {
        let mut c = server.client();
        let whole = i % 2 == 1;
        c.write_raw(if whole { &ping[..] } else { &ping[..7] });
        c.stream.shutdown(Shutdown::Write).unwrap();
        // Returns at the server's close; a read time-out panics. After the
        // peer's end the server closes at once, so the PONG may or may not
        // have gone out first.
        let frames = c.read_until_closed();
        assert!(
            frames.iter().all(|f| f.opcode == opcode::PONG) && frames.len() <= usize::from(whole),
            "{frames:?}"
        );
    }
    eventually(LIMIT, "only the observer connected", || {
        (observer.server_stats().counter("connections") == Some(1)).then_some(())
    });
    still_serving(&server, rss);
}

fn no_hello_in_time_is_closed(io: IoChoice) {
    let Some(server) = start(io, &["--hello-timeout", "200ms"]) else {
        return;
    };
    let rss = rss_bytes();
    let mut c = Client::connect(server.addr);
    let frames = c.read_until_closed();
    assert!(frames.is_empty(), "{frames:?}");
    still_serving(&server, rss);
}

fn a_connection_flood_past_max_connections_is_refused(io: IoChoice) {
    let Some(server) = start(io, &["--max-connections", "8"]) else {
        return;
    };
    let rss = rss_bytes();
    let mut held: Vec<Client> = (0..8).map(|_| server.client()).collect();
    let mut refused = 0;
    for _ in 0..40 {
        let mut c = Client::connect(server.addr);
        let frames = c.read_until_closed();
        let e = frames.iter().find_map(error_of).expect("an ERROR frame");
        assert_eq!(e.code, ErrorCode::TooManyConnections);
        refused += 1;
    }
    assert_eq!(refused, 40);
    for c in &mut held {
        c.ping();
    }
    let stats = held[0].server_stats();
    assert_eq!(stats.counter("connections"), Some(8));
    assert!(stats.counter("connections_refused").unwrap_or(0) >= 40);
    // Room again once some close.
    held.truncate(6);
    eventually(LIMIT, "a connection to be admitted again", || {
        server.try_client().map(drop)
    });
    drop(held);
    eventually(LIMIT, "the closed connections to be released", || {
        let mut c = server.try_client()?;
        (c.server_stats().counter("connections") == Some(1)).then_some(())
    });
    still_serving(&server, rss);
}

fn a_pipelining_flood_that_never_reads_is_paused(io: IoChoice) {
    let Some(server) = start(
        io,
        &[
            "--frame-bytes-max",
            "64KiB",
            "--unsent-bytes-max",
            "64KiB",
            "--requests-in-flight-max",
            "16",
        ],
    ) else {
        return;
    };
    let rss = rss_bytes();
    let mut c = server.client();
    c.create("big", attrs());
    let entries: Vec<SendEntry> = (0..8)
        .map(|_| SendEntry::new(Bytes::from(vec![7u8; 4000])))
        .collect();
    assert!(c.send_entries("big", &entries).iter().all(Result::is_ok));
    // PEEKs of ~32 KiB each, written as fast as the server takes them, for
    // at most 3 s or 200,000 requests; never a read.
    let mut flood = server.client();
    flood
        .stream
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut one = BytesMut::new();
    Request::Peek {
        queue: name("big"),
        max_messages: 8,
    }
    .encode(1, &mut one)
    .unwrap();
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 100).collect();
    let start = Instant::now();
    let mut written = 0usize;
    while start.elapsed() < Duration::from_secs(3) && written < 200_000 * one.len() {
        match flood.stream.write(&batch) {
            Ok(n) => written += n,
            Err(_) => break, // the server stopped reading: the socket is full
        }
    }
    let requests = written / one.len();
    eprintln!("flood: {requests} PEEKs written before the socket filled");
    // The server answered far fewer than were written: it stopped reading.
    let mut other = server.client();
    let stats = other.server_stats();
    let unsent = stats.counter("unsent_bytes").unwrap_or(u64::MAX);
    assert!(
        unsent < 8 << 20,
        "{unsent} bytes unsent after {requests} PEEKs"
    );
    let peeks = stats.counter("requests_peek").unwrap_or(0);
    eprintln!("flood: {peeks} PEEKs read by the server, {unsent} bytes unsent");
    assert!(
        (peeks as usize) < requests || requests < 1_000,
        "{peeks} of {requests} PEEKs were served without being read"
    );
    still_serving(&server, rss);
    // The flooder can still read what it was sent, in order.
    flood
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    for _ in 0..10 {
        let (_, reply) = flood.read_reply();
        assert!(matches!(reply, Reply::Peek { ref messages, .. } if messages.len() == 8));
    }
}

fn a_plain_http_request_is_refused(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    expect_refused(
        &server,
        false,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ErrorCode::FrameTooLarge,
    );
    still_serving(&server, rss);
}

fn a_tls_client_hello_is_refused(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    // The start of a TLS 1.2/1.3 ClientHello record.
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.extend_from_slice(&[0x5a; 32]);
    // A plain-text port answers a TLS client with a TLS handshake_failure
    // alert (so the client reports a TLS failure, not a reset), then closes.
    let mut raw = TcpStream::connect(server.addr).expect("connect");
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    raw.write_all(&hello).expect("sent");
    let mut reply = Vec::new();
    std::io::Read::read_to_end(&mut raw, &mut reply).expect("closed cleanly");
    assert_eq!(reply, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
    let mut c = server.client();
    let stats = c.server_stats();
    assert_eq!(
        stats.counter("connections_refused_tls_on_plain_port"),
        Some(1)
    );
    still_serving(&server, rss);
}

fn the_first_frame_must_be_hello(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    let mut out = BytesMut::new();
    Request::Ping { nonce: 1 }.encode(3, &mut out).unwrap();
    expect_refused_as(&server, false, &out, ErrorCode::HelloRequired, 3);
    still_serving(&server, rss);
}

fn an_unsupported_version_is_refused(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    let mut out = BytesMut::new();
    Request::Hello(sluice_protocol::HelloRequest {
        version: sluice_protocol::limits::PROTOCOL_VERSION + 1,
        token: Bytes::new(),
        session_timeout_ms: 0,
    })
    .encode(1, &mut out)
    .unwrap();
    let mut c = Client::connect(server.addr);
    c.write_raw(&out);
    let frames = c.read_until_closed();
    let e = frames.iter().find_map(error_of).expect("an ERROR");
    assert_eq!(e.code, ErrorCode::UnsupportedVersion);
    assert_eq!(frames[0].request_id, 1);
    // A second HELLO on a ready connection is refused, and it stays open.
    let mut c = server.client();
    let e = c.hello(b"").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    c.ping();
    still_serving(&server, rss);
}

fn malformed_payloads_and_unknown_opcodes_leave_the_connection_open(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let rss = rss_bytes();
    let mut c = server.client();
    // A PING with 3 bytes of payload instead of 8.
    let mut f = BytesMut::new();
    f.put_u32_le(6 + 3);
    f.put_slice(&[opcode::PING, 0, 77, 0, 0, 0, 1, 2, 3]);
    // An opcode nobody knows, and a reply opcode sent as a request.
    f.put_u32_le(6);
    f.put_slice(&[0x7e, 0, 78, 0, 0, 0]);
    f.put_u32_le(6);
    f.put_slice(&[opcode::PONG, 0, 79, 0, 0, 0]);
    // A SEND to a queue name with a space in it.
    f.put_u32_le(6 + 1 + 3 + 2);
    f.put_slice(&[opcode::SEND, 0, 80, 0, 0, 0, 3, b'a', b' ', b'b', 0, 0]);
    c.write_raw(&f);
    let expect = [
        (77, ErrorCode::Malformed),
        (78, ErrorCode::UnknownOperation),
        (79, ErrorCode::UnknownOperation),
        (80, ErrorCode::InvalidArgument),
    ];
    for (id, code) in expect {
        match c.wait(id) {
            Reply::Error(e) => assert_eq!(e.code, code, "request {id}: {}", e.message),
            other => panic!("request {id} answered {other:?}"),
        }
    }
    c.ping();
    let stats = c.server_stats();
    assert!(stats.counter("requests_unknown").unwrap_or(0) >= 1);
    // And the socket is still the same one.
    let _ = TcpStream::peer_addr(&c.stream).unwrap();
    still_serving(&server, rss);
}
