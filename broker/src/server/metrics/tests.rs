//! The metrics server over real sockets on 127.0.0.1, port 0: routes, bad
//! and slow clients, shutdown. Timeouts in these tests only bound how long a
//! failing test can hang; nothing asserts on timing.

use super::*;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A server whose source writes one counter: the number of scrapes so far.
fn server_with(options: MetricsServerOptions) -> (MetricsServer, Arc<AtomicU64>) {
    let scrapes = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&scrapes);
    let server = MetricsServer::start_with(
        loopback(),
        move |out: &mut String| {
            let n = counted.fetch_add(1, Ordering::Relaxed) + 1;
            PromWriter::new(out).counter("test_scrapes_total", "Scrapes.", n);
        },
        options,
    )
    .expect("binds 127.0.0.1:0");
    (server, scrapes)
}

fn default_server() -> (MetricsServer, Arc<AtomicU64>) {
    server_with(MetricsServerOptions::default())
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("the server listens");
    stream
        .set_read_timeout(Some(CLIENT_TIMEOUT))
        .expect("socket option");
    stream
        .set_write_timeout(Some(CLIENT_TIMEOUT))
        .expect("socket option");
    stream
}

/// Everything the server sends until it closes.
fn read_all(stream: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    stream
        .read_to_end(&mut reply)
        .expect("the server closes cleanly");
    String::from_utf8_lossy(&reply).into_owned()
}

/// Sends `request` and returns the whole reply.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = connect(addr);
    stream.write_all(request).expect("the request is sent");
    read_all(&mut stream)
}

struct Reply {
    status: String,
    headers: Vec<(String, String)>,
    body: String,
}

fn parse(reply: &str) -> Reply {
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {reply:?}"));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default().to_owned();
    let headers = lines
        .map(|line| {
            let (k, v) = line
                .split_once(": ")
                .unwrap_or_else(|| panic!("bad header {line:?}"));
            (k.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    parse(&exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    ))
}

#[test]
fn metrics_are_served_as_prometheus_text() {
    let (server, scrapes) = default_server();
    assert_ne!(
        server.local_addr().port(),
        0,
        "port 0 resolves to the bound port"
    );
    let reply = get(server.local_addr(), "/metrics");
    assert_eq!(reply.status, "HTTP/1.1 200 OK");
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert_eq!(reply.header("connection"), Some("close"));
    assert_eq!(
        reply.body,
        "# HELP test_scrapes_total Scrapes.\n# TYPE test_scrapes_total counter\ntest_scrapes_total 1\n"
    );
    assert_eq!(
        reply.header("content-length"),
        Some(reply.body.len().to_string().as_str())
    );
    // Each scrape renders afresh, into an emptied buffer.
    let again = get(server.local_addr(), "/metrics?x=1");
    assert!(
        again.body.ends_with("test_scrapes_total 2\n"),
        "{}",
        again.body
    );
    assert_eq!(again.body.matches("# HELP").count(), 1);
    assert_eq!(scrapes.load(Ordering::Relaxed), 2);
    server.shutdown();
}

#[test]
fn health_head_not_found_and_wrong_methods() {
    let (server, scrapes) = default_server();
    let addr = server.local_addr();

    let health = get(addr, "/healthz");
    assert_eq!(
        (health.status.as_str(), health.body.as_str()),
        ("HTTP/1.1 200 OK", "ok\n")
    );

    let head = parse(&exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n"));
    assert_eq!(head.status, "HTTP/1.1 200 OK");
    assert!(head.body.is_empty());
    assert_ne!(head.header("content-length"), Some("0"));

    for path in ["/", "/metricsx", "/healthz/", "/favicon.ico"] {
        assert_eq!(get(addr, path).status, "HTTP/1.1 404 Not Found", "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get"] {
        let reply = parse(&exchange(
            addr,
            format!("{method} /metrics HTTP/1.1\r\n\r\n").as_bytes(),
        ));
        assert_eq!(reply.status, "HTTP/1.1 405 Method Not Allowed", "{method}");
        assert_eq!(reply.header("allow"), Some("GET, HEAD"));
    }
    assert_eq!(scrapes.load(Ordering::Relaxed), 1, "only the HEAD rendered");
}

#[test]
fn garbage_gets_400_and_the_server_carries_on() {
    let (server, _) = default_server();
    let addr = server.local_addr();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random_bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    let mut requests: Vec<Vec<u8>> = vec![
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
        b"GET /metrics\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/1.1 extra\r\n\r\n".to_vec(),
        b"\r\n\r\n".to_vec(),
        b"\n\n".to_vec(),
    ];
    for n in [1, 10, 100, 1000, 4000] {
        let mut bytes = random_bytes(n);
        bytes.extend_from_slice(b"\r\n\r\n");
        requests.push(bytes);
    }
    for request in &requests {
        let reply = exchange(addr, request);
        assert!(
            reply.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{request:?}: {reply:?}"
        );
    }
    // Part of a request, then the client closes its side: 400, not a hang.
    for request in [random_bytes(300), b"GET /metrics HTTP/1.1\r\n".to_vec()] {
        let mut stream = connect(addr);
        stream.write_all(&request).expect("sent");
        stream.shutdown(Shutdown::Write).expect("half-close");
        assert!(read_all(&mut stream).starts_with("HTTP/1.1 400 Bad Request\r\n"));
    }
    // Connect and leave at once.
    drop(connect(addr));
    assert_eq!(get(addr, "/healthz").status, "HTTP/1.1 200 OK");
}

#[test]
fn oversize_requests_get_431() {
    let (server, _) = server_with(MetricsServerOptions {
        request_bytes_max: 1024,
        ..MetricsServerOptions::default()
    });
    let addr = server.local_addr();
    let mut request = b"GET /metrics HTTP/1.1\r\nX-Padding: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 8 * 1024));
    for terminated in [false, true] {
        let mut request = request.clone();
        if terminated {
            request.extend_from_slice(b"\r\n\r\n");
        }
        let reply = exchange(addr, &request);
        assert!(reply.starts_with("HTTP/1.1 431 "), "{reply:?}");
    }
    // A head just within the limit is served.
    let mut fits = b"GET /healthz HTTP/1.1\r\nX-Padding: ".to_vec();
    fits.extend(std::iter::repeat_n(b'a', 1024 - fits.len() - 4));
    fits.extend_from_slice(b"\r\n\r\n");
    assert_eq!(fits.len(), 1024);
    assert_eq!(parse(&exchange(addr, &fits)).status, "HTTP/1.1 200 OK");
}

/// A body after the head is read and discarded after the reply (so that
/// closing does not reset the connection under the reply on a real network;
/// loopback delivers the reply either way, so this checks only that a body
/// does not confuse the server).
#[test]
fn a_request_with_a_body_is_answered() {
    let (server, _) = default_server();
    let mut request = b"GET /healthz HTTP/1.1\r\nContent-Length: 20000\r\n\r\n".to_vec();
    request.extend(std::iter::repeat_n(b'x', 20_000));
    let reply = parse(&exchange(server.local_addr(), &request));
    assert_eq!(
        (reply.status.as_str(), reply.body.as_str()),
        ("HTTP/1.1 200 OK", "ok\n")
    );
}

#[test]
fn slow_clients_time_out_with_408() {
    let (server, _) = server_with(MetricsServerOptions {
        read_timeout: Duration::from_millis(200),
        ..MetricsServerOptions::default()
    });
    let addr = server.local_addr();
    // Nothing at all, then a request that never finishes.
    for partial in [&b""[..], b"GET /metr"] {
        let mut stream = connect(addr);
        stream.write_all(partial).expect("sent");
        let reply = read_all(&mut stream);
        assert!(
            reply.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
            "{partial:?}: {reply:?}"
        );
    }
    assert_eq!(get(addr, "/healthz").status, "HTTP/1.1 200 OK");
}

#[test]
fn a_panicking_source_gets_500_and_the_server_carries_on() {
    let server = MetricsServer::start(loopback(), |_: &mut String| {
        panic!("source bug (expected by this test)")
    })
    .expect("binds");
    let addr = server.local_addr();
    let reply = get(addr, "/metrics");
    assert_eq!(reply.status, "HTTP/1.1 500 Internal Server Error");
    assert_eq!(get(addr, "/healthz").status, "HTTP/1.1 200 OK");
}

#[test]
fn shutdown_and_drop_stop_the_server() {
    let (server, _) = default_server();
    let addr = server.local_addr();
    assert_eq!(get(addr, "/healthz").status, "HTTP/1.1 200 OK");
    server.shutdown();
    assert!(
        TcpStream::connect(addr).is_err(),
        "nothing listens on {addr} after shutdown"
    );

    let (server, _) = default_server();
    let addr = server.local_addr();
    drop(server);
    assert!(
        TcpStream::connect(addr).is_err(),
        "nothing listens on {addr} after drop"
    );

    // Stopping while a client holds a connection open: that client gets a
    // 408 if the thread was already serving it, or is closed unanswered if
    // it was still waiting in the backlog; either way shutdown returns.
    let (server, _) = server_with(MetricsServerOptions {
        read_timeout: Duration::from_millis(200),
        ..MetricsServerOptions::default()
    });
    let addr = server.local_addr();
    let mut idle = connect(addr);
    server.shutdown();
    let mut reply = Vec::new();
    let _ = idle.read_to_end(&mut reply);
    assert!(
        reply.is_empty() || reply.starts_with(b"HTTP/1.1 408"),
        "{reply:?}"
    );
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn the_address_in_use_is_an_error_not_a_panic() {
    let (server, _) = default_server();
    let err = MetricsServer::start(server.local_addr(), |_: &mut String| {});
    assert!(err.is_err());
}

#[test]
fn shard_histograms_scraped_through_the_server() {
    let mut shards: Vec<LatencyHistogram> = (0..2).map(|_| LatencyHistogram::new()).collect();
    let readers: Vec<HistogramReader> = shards.iter().map(LatencyHistogram::reader).collect();
    let server = MetricsServer::start(loopback(), move |out: &mut String| {
        let mut merged = HistogramSnapshot::default();
        for reader in &readers {
            merged.merge(&reader.snapshot());
        }
        PromWriter::new(out)
            .family(
                "sluice_request_duration_seconds",
                "Request latency.",
                MetricType::Histogram,
            )
            .histogram(&[("op", "send")], &merged);
    })
    .expect("binds");
    shards[0].record(Duration::from_micros(30));
    shards[1].record(Duration::from_millis(30));
    shards[1].record(Duration::from_secs(120));
    let body = get(server.local_addr(), "/metrics").body;
    assert!(
        body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"0.00005\"} 1\n")
    );
    assert!(body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"0.05\"} 2\n"));
    assert!(body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"60\"} 2\n"));
    assert!(body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"+Inf\"} 3\n"));
    assert!(
        body.contains("sluice_request_duration_seconds_count{op=\"send\"} 3\n"),
        "{body}"
    );
}

/// Today's scrapers hold a connection open between scrapes, or a client
/// connects and sends nothing: the scrapes of others are served meanwhile.
/// The read timeout is far longer than the client's, so a server that
/// served one connection at a time could not answer the second scrape
/// before the client gives up.
#[test]
fn an_idle_connection_does_not_hold_back_other_scrapes() {
    let (server, scrapes) = server_with(MetricsServerOptions {
        read_timeout: Duration::from_secs(600),
        ..MetricsServerOptions::default()
    });
    let addr = server.local_addr();
    let mut idle = connect(addr);
    let mut also_idle = connect(addr);
    also_idle.write_all(b"GET /metr").expect("sent");
    for _ in 0..3 {
        let reply = get(addr, "/metrics");
        assert_eq!(reply.status, "HTTP/1.1 200 OK");
    }
    assert_eq!(get(addr, "/healthz").status, "HTTP/1.1 200 OK");
    assert_eq!(scrapes.load(Ordering::Relaxed), 3);
    // The idle connections were held open all along: they are answered now.
    idle.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
        .expect("still open");
    assert!(read_all(&mut idle).starts_with("HTTP/1.1 200 OK\r\n"));
    also_idle
        .write_all(b"ics HTTP/1.1\r\n\r\n")
        .expect("still open");
    let reply = parse(&read_all(&mut also_idle));
    assert_eq!(reply.status, "HTTP/1.1 200 OK");
    assert!(
        reply.body.contains("test_scrapes_total 4\n"),
        "{}",
        reply.body
    );
}

#[test]
fn connections_beyond_the_limit_get_503_and_the_others_go_on() {
    let (server, _) = server_with(MetricsServerOptions {
        read_timeout: Duration::from_secs(600),
        connections_max: 1,
        ..MetricsServerOptions::default()
    });
    let addr = server.local_addr();
    let mut idle = connect(addr);
    // Accepted in order: the idle one holds the only place.
    let busy = parse(&exchange(addr, b"GET /healthz HTTP/1.1\r\n\r\n"));
    assert_eq!(busy.status, "HTTP/1.1 503 Service Unavailable");
    assert_eq!(busy.header("retry-after"), Some("1"));
    idle.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
        .expect("still open");
    assert!(read_all(&mut idle).starts_with("HTTP/1.1 200 OK\r\n"));
    // Its thread ends and gives the place back.
    let mut served = false;
    for _ in 0..2_000 {
        if get(addr, "/healthz").status == "HTTP/1.1 200 OK" {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(served, "the place is given back");
}

/// A source that can be told the server is draining.
struct Draining(Arc<AtomicBool>);

impl MetricsSource for Draining {
    fn render(&self, out: &mut String) {
        PromWriter::new(out).counter("test_total", "Test.", 1);
    }

    fn draining(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[test]
fn healthz_answers_503_while_draining_and_metrics_still_serve() {
    let flag = Arc::new(AtomicBool::new(false));
    let server = MetricsServer::start(loopback(), Draining(Arc::clone(&flag))).expect("binds");
    let addr = server.local_addr();
    assert_eq!(get(addr, "/healthz").body, "ok\n");
    flag.store(true, Ordering::Relaxed);
    let reply = get(addr, "/healthz");
    assert_eq!(reply.status, "HTTP/1.1 503 Service Unavailable");
    assert!(reply.body.starts_with("draining"), "{}", reply.body);
    let head = exchange(addr, b"HEAD /healthz HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 503 "), "{head:?}");
    assert_eq!(get(addr, "/metrics").status, "HTTP/1.1 200 OK");
}

#[test]
fn histograms_of_any_buckets_are_cumulative_and_end_at_the_count() {
    let mut out = String::new();
    PromWriter::new(&mut out)
        .family("t_seconds", "T.", MetricType::Histogram)
        .histogram_buckets(
            &[("op", "send")],
            &REQUEST_BUCKET_BOUNDS_NANOS[..3],
            &[2, 0, 1, 4, 5],
            1.5,
        );
    assert_eq!(
        out,
        "# HELP t_seconds T.\n# TYPE t_seconds histogram\n\
         t_seconds_bucket{op=\"send\",le=\"0.000001\"} 2\n\
         t_seconds_bucket{op=\"send\",le=\"0.000002\"} 2\n\
         t_seconds_bucket{op=\"send\",le=\"0.000004\"} 3\n\
         t_seconds_bucket{op=\"send\",le=\"+Inf\"} 12\n\
         t_seconds_sum{op=\"send\"} 1.5\n\
         t_seconds_count{op=\"send\"} 12\n"
    );
}

/// A client that reads a large exposition a little at a time, always
/// within the per-write timeout, holds its connection thread only until
/// the exchange's deadline: then the connection is closed, and the one
/// thread the server has serves the next scrape.
#[test]
fn a_slow_reader_is_cut_off_at_the_exchange_deadline() {
    let server = MetricsServer::start_with(
        loopback(),
        |out: &mut String| {
            // 32 MiB, several times what the loopback socket buffers hold.
            let line = "# HELP padding x\n".repeat(64);
            for _ in 0..32 * 1024 {
                out.push_str(&line[..1024]);
            }
        },
        MetricsServerOptions {
            connections_max: 1,
            write_timeout: Duration::from_millis(500),
            exchange_timeout: Duration::from_millis(800),
            ..MetricsServerOptions::default()
        },
    )
    .expect("binds");
    let addr = server.local_addr();
    let mut slow = connect(addr);
    slow.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("socket option");
    slow.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .expect("sent");
    // Reading 256 KiB every 50 ms, always within the per-write timeout,
    // would take 6 s for the whole reply; the server gives up on it at its
    // exchange deadline, and the client then reads to the end of what was
    // in the socket buffers. Bounded: at most 30 s of this.
    let mut chunk = vec![0u8; 256 * 1024];
    let mut read = 0usize;
    let mut closed = false;
    for _ in 0..600 {
        match slow.read(&mut chunk) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                closed = true;
                break;
            }
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        closed,
        "the slow reader was never cut off ({read} bytes read)"
    );
    assert!(read < 32 * 1024 * 1024, "the whole reply was read: {read}");
    // The one connection thread is free again.
    assert_eq!(get(addr, "/healthz").status, "HTTP/1.1 200 OK");
}
