//! An in-process server on 127.0.0.1 (port 0 unless a test needs a fixed
//! one, through `sluice_broker::testing`), and small helpers. Deadlines are generous: they bound loops so a
//! broken build fails instead of hanging, and are never asserted on.

#![allow(dead_code, reason = "each test module uses a different part")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_broker::testing;
#[cfg(feature = "async")]
use sluice_client::AsyncClient;
use sluice_client::{Client, ClientConfig};

/// Bound on any waiting loop in these tests.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// An in-process server (`sluice_broker::testing`) and clients for it.
pub struct TestServer {
    server: testing::TestServer,
    pub addr: SocketAddr,
}

impl TestServer {
    /// A server on a free loopback port.
    pub fn start() -> TestServer {
        TestServer::start_on("127.0.0.1:0", &[])
    }

    /// A server on `listen` with extra server flags.
    pub fn start_on(listen: &str, extra: &[&str]) -> TestServer {
        let server = testing::TestServer::builder()
            .arg("--listen", listen)
            .arg("--memory-max", "128MiB")
            .args(extra)
            .start();
        TestServer {
            addr: server.addr(),
            server,
        }
    }

    /// The client configuration for this server.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::new(self.addr.to_string())
            .with_request_timeout(Duration::from_secs(30))
            .with_reconnect_delays(Duration::from_millis(20), Duration::from_millis(200))
    }

    /// A blocking client.
    pub fn client(&self) -> Client {
        Client::connect(self.client_config()).expect("client connects")
    }

    /// An async client (inside a runtime).
    #[cfg(feature = "async")]
    pub async fn async_client(&self) -> AsyncClient {
        AsyncClient::connect(self.client_config())
            .await
            .expect("client connects")
    }

    /// The metrics endpoint's address, when started with `--metrics-addr`.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.server.handle().metrics_addr()
    }

    /// Shuts the server down and waits for it.
    pub fn stop(&mut self) {
        self.server.stop();
    }
}

/// A runtime for async tests.
#[cfg(feature = "async")]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Retries `f` until it returns `Some` or [`PATIENCE`] passes.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP proxy in front of a server that can cut every connection through
/// it at once (an abrupt disconnect, as a network failure or a crashed
/// broker gives), and counts the request frames of each opcode it passed
/// on, so a test knows what the server has been sent.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: std::sync::Arc<ProxyShared>,
}

#[derive(Default)]
struct ProxyShared {
    /// Both ends of every connection made so far.
    streams: std::sync::Mutex<Vec<std::net::TcpStream>>,
    /// Request frames passed on, by opcode.
    frames: std::sync::Mutex<std::collections::HashMap<u8, usize>>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = std::sync::Arc::new(ProxyShared::default());
        let accepting = std::sync::Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut streams = accepting.streams.lock().unwrap();
                    streams.push(client.try_clone().expect("clone"));
                    streams.push(server.try_clone().expect("clone"));
                }
                let up = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let counting = std::sync::Arc::clone(&accepting);
                std::thread::spawn(move || pump(up.0, up.1, Some(&counting)));
                std::thread::spawn(move || pump(server, client, None));
            }
        });
        Proxy { addr, shared }
    }

    /// Shuts both ends of every connection made so far; new ones work.
    pub fn cut(&self) {
        for s in self.shared.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Request frames with this opcode passed on so far.
    pub fn frames(&self, opcode: u8) -> usize {
        self.shared
            .frames
            .lock()
            .unwrap()
            .get(&opcode)
            .copied()
            .unwrap_or(0)
    }

    /// A blocking client through the proxy.
    pub fn client(&self, config: ClientConfig) -> Client {
        Client::connect(config.with_addr(self.addr.to_string())).expect("client connects")
    }
}

/// Copies bytes from `from` to `to` until either ends; with `count`, counts
/// the frames going by (requests: they start at the connection's start).
fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream, count: Option<&ProxyShared>) {
    use std::io::{Read, Write};
    let mut decoder = sluice_protocol::FrameDecoder::new(16 << 20);
    let mut frames = bytes::BytesMut::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some(shared) = count {
            frames.extend_from_slice(&buf[..n]);
            let mut counts = shared.frames.lock().unwrap();
            while let Ok(Some(frame)) = decoder.decode(&mut frames) {
                *counts.entry(frame.opcode).or_default() += 1;
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}
