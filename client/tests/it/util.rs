//! An in-process server on 127.0.0.1 (port 0 unless a test needs a fixed
//! one, through `sluice_broker::testing`), and small helpers. Deadlines are generous: they bound loops so a
//! broken build fails instead of hanging, and are never asserted on.

#![allow(dead_code, reason = "each test module uses a different part")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_broker::testing;
use sluice_client::{AsyncClient, Client, ClientConfig};

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
            .request_timeout(Duration::from_secs(30))
            .reconnect_delays(Duration::from_millis(20), Duration::from_millis(200))
    }

    /// A blocking client.
    pub fn client(&self) -> Client {
        Client::connect(self.client_config()).expect("client connects")
    }

    /// An async client (inside a runtime).
    pub async fn async_client(&self) -> AsyncClient {
        AsyncClient::connect(self.client_config())
            .await
            .expect("client connects")
    }

    /// Shuts the server down and waits for it.
    pub fn stop(&mut self) {
        self.server.stop();
    }
}

/// A runtime for async tests.
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
