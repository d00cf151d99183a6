//! A tiny HTTP/1.1 server for `GET /metrics` and `GET /healthz`.
//!
//! One request per connection (`Connection: close`). A thread named
//! `sluice-metrics` accepts; each connection is served on a thread of its
//! own (`sluice-metrics-conn`), at most
//! [`MetricsServerOptions::connections_max`] at once (one more is answered
//! 503 at once and closed), so a client that connects and sends nothing
//! does not hold back the scrapes behind it. Every connection is bounded:
//! the request head must fit [`MetricsServerOptions::request_bytes_max`]
//! (else 431) and arrive within [`MetricsServerOptions::read_timeout`] in
//! all, not per read (else 408), so a client trickling bytes cannot hold
//! its thread longer; and the whole exchange, the reply's writes included,
//! must end within [`MetricsServerOptions::exchange_timeout`], so a client
//! that reads a large exposition a little at a time cannot hold its thread
//! for minutes either (the connection is closed when it runs out). Anything that is not an HTTP/1.x request line gets
//! 400; a method other than GET or HEAD gets 405; a path other than the two
//! gets 404. `/healthz` answers 200 `ok`, or 503 `draining` once the
//! source says the server is shutting down
//! ([`MetricsSource::draining`]). Nothing a client sends can make a thread
//! panic, and a panic in the caller's [`MetricsSource`] is caught and
//! answered with 500.
//!
//! Stopping: [`MetricsServer::shutdown`] (or drop) sets a flag and connects
//! to the listener to wake the blocking `accept`, then joins the accepting
//! thread. Connection threads still serving end on their own within their
//! timeouts; they are not waited for.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crate::server::limits::{
    METRICS_CONNECTIONS_MAX, METRICS_EXCHANGE_TIMEOUT, METRICS_LINGER_BYTES_MAX,
    METRICS_LINGER_TIMEOUT, METRICS_READ_TIMEOUT, METRICS_REQUEST_BYTES_MAX, METRICS_WRITE_TIMEOUT,
};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering};

/// Where the metrics text comes from: called on every scrape of `/metrics`
/// on a metrics connection thread, to append Prometheus text (see
/// [`PromWriter`](super::PromWriter)) to `out`, which arrives empty.
/// Scrapes may run at once on several threads.
///
/// Any `Fn(&mut String) + Send + Sync` closure is a source (never
/// draining).
pub trait MetricsSource: Send + Sync + 'static {
    /// Appends the exposition text.
    fn render(&self, out: &mut String);

    /// Whether the server is shutting down: `/healthz` then answers 503, so
    /// that load balancers and orchestrators stop sending it clients.
    fn draining(&self) -> bool {
        false
    }
}

impl<F> MetricsSource for F
where
    F: Fn(&mut String) + Send + Sync + 'static,
{
    fn render(&self, out: &mut String) {
        self(out)
    }
}

/// Limits of the metrics server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsServerOptions {
    /// Largest request head (request line and headers) read.
    pub request_bytes_max: usize,
    /// Time for the whole request head to arrive.
    pub read_timeout: Duration,
    /// Time for a write of the reply to make progress.
    pub write_timeout: Duration,
    /// Time for the whole exchange, from accept to the last byte of the
    /// reply: past it the connection is closed, the reply cut short.
    pub exchange_timeout: Duration,
    /// After the reply, time to read and discard what the client still
    /// sends, so that closing does not reset the connection under the reply.
    pub linger_timeout: Duration,
    /// Connections served at once.
    pub connections_max: usize,
}

impl Default for MetricsServerOptions {
    fn default() -> Self {
        MetricsServerOptions {
            request_bytes_max: METRICS_REQUEST_BYTES_MAX,
            read_timeout: METRICS_READ_TIMEOUT,
            write_timeout: METRICS_WRITE_TIMEOUT,
            exchange_timeout: METRICS_EXCHANGE_TIMEOUT,
            linger_timeout: METRICS_LINGER_TIMEOUT,
            connections_max: METRICS_CONNECTIONS_MAX,
        }
    }
}

/// The running metrics server. Stops on [`shutdown`](Self::shutdown) or drop.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` (port 0: any free port) and serves `source` on a thread
    /// named `sluice-metrics`, with default limits.
    pub fn start(addr: SocketAddr, source: impl MetricsSource) -> io::Result<MetricsServer> {
        MetricsServer::start_with(addr, source, MetricsServerOptions::default())
    }

    /// As [`start`](Self::start), with these limits.
    pub fn start_with(
        addr: SocketAddr,
        source: impl MetricsSource,
        options: MetricsServerOptions,
    ) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let source: Arc<dyn MetricsSource> = Arc::new(source);
        let thread = thread::Builder::new()
            .name("sluice-metrics".to_owned())
            .spawn(move || accept_loop(&listener, &source, options, &thread_stop))?;
        Ok(MetricsServer {
            local_addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address bound, with the actual port when 0 was asked for.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets a request being served finish, and waits for the
    /// thread to end.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own.
        let wake = match self.local_addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.local_addr.port())
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.local_addr.port())
            }
            _ => self.local_addr,
        };
        match TcpStream::connect_timeout(&wake, Duration::from_secs(1)) {
            Ok(_) => {
                if thread.join().is_err() {
                    tracing::error!("the metrics thread panicked");
                }
            }
            // Without the wake-up the thread would only notice the flag at
            // its next connection: leave it rather than block here.
            Err(err) => {
                tracing::warn!(%wake, %err, "could not wake the metrics thread; leaving it")
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Counts a connection being served; uncounts it when dropped.
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(
    listener: &TcpListener,
    source: &Arc<dyn MetricsSource>,
    options: MetricsServerOptions,
    stop: &AtomicBool,
) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok((stream, peer)) => {
                if active.fetch_add(1, Ordering::AcqRel) >= options.connections_max {
                    active.fetch_sub(1, Ordering::AcqRel);
                    tracing::debug!(%peer, "metrics endpoint busy: connection answered 503");
                    refuse_busy(stream);
                    continue;
                }
                let guard = Active(Arc::clone(&active));
                let source = Arc::clone(source);
                let spawned = thread::Builder::new()
                    .name("sluice-metrics-conn".to_owned())
                    .spawn(move || {
                        let _guard = guard;
                        let mut request = Vec::with_capacity(options.request_bytes_max + 1);
                        let mut body = String::new();
                        if let Err(err) = serve(stream, &*source, &options, &mut request, &mut body)
                        {
                            tracing::debug!(%peer, %err, "metrics connection ended with an error");
                        }
                    });
                if let Err(err) = spawned {
                    // The closure, its guard and the stream are dropped.
                    tracing::warn!(%err, "metrics endpoint could not start a connection thread");
                    thread::sleep(Duration::from_millis(100));
                }
            }
            Err(err) => {
                // Out of file descriptors and the like: do not spin.
                tracing::warn!(%err, "metrics endpoint could not accept a connection");
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Answers 503 without reading the request, on the accepting thread: the
/// reply fits the socket's send buffer, and the write gives up quickly.
fn refuse_busy(mut stream: TcpStream) {
    let body = "too many metrics connections at once; retry\n";
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(reply.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
}

/// How reading a request head ended.
enum Head {
    /// A complete head.
    Complete,
    /// Larger than the limit.
    TooLarge,
    /// The deadline passed.
    TimedOut,
    /// The client closed its side first.
    Closed,
    /// The first bytes cannot begin a request line (a sluice client's HELLO
    /// sent to the metrics port, say): answered 400 at once, not after the
    /// deadline.
    NotHttp,
}

/// Whether `buf`, the start of a request, can still begin a request line:
/// its method so far is made of token characters.
fn could_be_http(buf: &[u8]) -> bool {
    let method = buf.split(|&b| b == b' ').next().unwrap_or(buf);
    method
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
}

/// The end of the request head: the index after the blank line, if any.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    limit: usize,
    deadline: Instant,
) -> io::Result<Head> {
    let mut chunk = [0u8; 1024];
    loop {
        if head_end(buf).is_some() {
            return Ok(Head::Complete);
        }
        if buf.len() > limit {
            return Ok(Head::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Head::TimedOut);
        }
        stream.set_read_timeout(Some(left))?;
        let want = chunk.len().min(limit + 1 - buf.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Ok(Head::Closed),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if !could_be_http(buf) {
                    return Ok(Head::NotHttp);
                }
            }
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Head::TimedOut);
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Health,
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Parses the request line: `METHOD SP TARGET SP HTTP/1.x`. Returns the
/// route and whether the method was HEAD.
fn route(head: &[u8]) -> (Route, bool) {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = head[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[..line_end]);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return (Route::BadRequest, false);
    };
    let is_token = |s: &[u8]| {
        !s.is_empty()
            && s.iter()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
    };
    if !is_token(method)
        || !version.starts_with(b"HTTP/1.")
        || target.is_empty()
        || !target.iter().all(|b| b.is_ascii_graphic())
    {
        return (Route::BadRequest, false);
    }
    let head_only = method == b"HEAD";
    if method != b"GET" && !head_only {
        return (Route::MethodNotAllowed, false);
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or(target);
    let route = match path {
        b"/metrics" => Route::Metrics,
        b"/healthz" => Route::Health,
        _ => Route::NotFound,
    };
    (route, head_only)
}

fn serve(
    mut stream: TcpStream,
    source: &dyn MetricsSource,
    options: &MetricsServerOptions,
    request: &mut Vec<u8>,
    body: &mut String,
) -> io::Result<()> {
    let accepted = Instant::now();
    let exchange_deadline = accepted + options.exchange_timeout;
    let deadline = (accepted + options.read_timeout).min(exchange_deadline);
    request.clear();
    let head = read_head(&mut stream, request, options.request_bytes_max, deadline)?;
    body.clear();
    let (status, content_type, head_only) = match head {
        Head::Complete => {
            let (route, head_only) = route(request);
            let (status, content_type) = match route {
                Route::Metrics => match catch_unwind(AssertUnwindSafe(|| source.render(body))) {
                    Ok(()) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8"),
                    Err(_) => {
                        body.clear();
                        body.push_str("the metrics source failed\n");
                        ("500 Internal Server Error", "text/plain; charset=utf-8")
                    }
                },
                Route::Health => match catch_unwind(AssertUnwindSafe(|| source.draining())) {
                    Ok(false) => {
                        body.push_str("ok\n");
                        ("200 OK", "text/plain; charset=utf-8")
                    }
                    Ok(true) => {
                        body.push_str("draining: the server is shutting down\n");
                        ("503 Service Unavailable", "text/plain; charset=utf-8")
                    }
                    Err(_) => {
                        body.push_str("the health source failed\n");
                        ("500 Internal Server Error", "text/plain; charset=utf-8")
                    }
                },
                Route::NotFound => {
                    body.push_str("not found: try /metrics or /healthz\n");
                    ("404 Not Found", "text/plain; charset=utf-8")
                }
                Route::MethodNotAllowed => {
                    body.push_str("method not allowed: use GET\n");
                    ("405 Method Not Allowed", "text/plain; charset=utf-8")
                }
                Route::BadRequest => {
                    body.push_str("bad request\n");
                    ("400 Bad Request", "text/plain; charset=utf-8")
                }
            };
            (status, content_type, head_only)
        }
        Head::TooLarge => {
            body.push_str("request too large\n");
            (
                "431 Request Header Fields Too Large",
                "text/plain; charset=utf-8",
                false,
            )
        }
        Head::TimedOut => {
            body.push_str("request timeout\n");
            ("408 Request Timeout", "text/plain; charset=utf-8", false)
        }
        // A client that sent part of a request and closed its side.
        Head::Closed if !request.is_empty() => {
            body.push_str("bad request\n");
            ("400 Bad Request", "text/plain; charset=utf-8", false)
        }
        Head::Closed => return Ok(()),
        Head::NotHttp => {
            body.push_str("bad request: this is the metrics endpoint, which speaks HTTP\n");
            ("400 Bad Request", "text/plain; charset=utf-8", false)
        }
    };
    let allow = if status.starts_with("405") {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    let writes = Writes {
        progress: options.write_timeout,
        deadline: exchange_deadline,
    };
    writes.write_all(&mut stream, header.as_bytes())?;
    if !head_only {
        writes.write_all(&mut stream, body.as_bytes())?;
    }
    stream.shutdown(Shutdown::Write)?;
    linger(&mut stream, options.linger_timeout);
    Ok(())
}

/// How a reply is written: each write must make progress within
/// `progress`, and all of them end by `deadline`.
struct Writes {
    progress: Duration,
    deadline: Instant,
}

impl Writes {
    fn write_all(&self, stream: &mut TcpStream, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the exchange ran out of time before the reply was written",
                ));
            }
            stream.set_write_timeout(Some(left.min(self.progress)))?;
            match stream.write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Reads and discards what the client still sends until it closes, for at
/// most `timeout` and [`METRICS_LINGER_BYTES_MAX`] bytes. Closing with unread bytes
/// would reset the connection, and the client could lose the reply.
fn linger(stream: &mut TcpStream, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut chunk = [0u8; 4096];
    let mut discarded = 0;
    while discarded < METRICS_LINGER_BYTES_MAX {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => discarded += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        let cases: &[(&[u8], Route, bool)] = &[
            (
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                Route::Metrics,
                false,
            ),
            (b"GET /metrics?name[]=x HTTP/1.0\n\n", Route::Metrics, false),
            (b"HEAD /healthz HTTP/1.1\r\n\r\n", Route::Health, true),
            (b"GET /healthz/ HTTP/1.1\r\n\r\n", Route::NotFound, false),
            (b"GET / HTTP/1.1\r\n\r\n", Route::NotFound, false),
            (
                b"POST /metrics HTTP/1.1\r\n\r\n",
                Route::MethodNotAllowed,
                false,
            ),
            (
                b"DELETE /healthz HTTP/1.1\r\n\r\n",
                Route::MethodNotAllowed,
                false,
            ),
            (b"GET /metrics HTTP/2.0\r\n\r\n", Route::BadRequest, false),
            (b"GET /metrics\r\n\r\n", Route::BadRequest, false),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", Route::BadRequest, false),
            (b"GET /me trics HTTP/1.1\r\n\r\n", Route::BadRequest, false),
            (b"G(T /metrics HTTP/1.1\r\n\r\n", Route::BadRequest, false),
            (
                b"GET /m\xffetrics HTTP/1.1\r\n\r\n",
                Route::BadRequest,
                false,
            ),
            (b"\r\n\r\n", Route::BadRequest, false),
            (b"", Route::BadRequest, false),
        ];
        for (head, want, head_only) in cases {
            let got = route(head);
            assert_eq!(
                (&got.0, got.1),
                (want, *head_only),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn binary_input_is_not_http_at_once() {
        assert!(could_be_http(b"GET /metrics HTTP/1.1\r\n"));
        assert!(could_be_http(b"GE"));
        assert!(could_be_http(b""));
        // A sluice HELLO frame: a little-endian length first.
        assert!(!could_be_http(&[0x1c, 0, 0, 0, 0x01]));
        assert!(!could_be_http(b"G\x00T /"));
    }

    #[test]
    fn head_ends() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(head_end(b""), None);
    }
}
