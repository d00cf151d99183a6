//! An in-process server for tests and benchmarks, behind the `test-util`
//! feature (as tokio's `test-util`): the broker's, the client's and the load
//! generator's tests all start their servers through it, and so can the
//! tests of services built on sluice (a dev-dependency on `sluice-broker`
//! with `features = ["test-util"]`).
//!
//! **A clock you move.** [`Builder::manual_clock`] starts the broker on a
//! manual clock (`--clock manual`) and [`TestServer::advance`] moves it:
//! leases run out, delays and backoffs end, long polls time out and
//! retention drops messages the moment the clock passes them, without the
//! test sleeping, while the ordinary clients talk to the server as to any
//! other (they can move it too, with `advance_clock`). The clock stands
//! still otherwise, so nothing expires behind a slow test's back.
//! Connection deadlines (HELLO, session timeouts) keep to real time.
//!
//! [`TestServer::builder`] starts from a configuration fit for a test:
//! 127.0.0.1 on a free port, metrics off, one shard, 256 MiB of message
//! memory, the io backend picked as in production, and the host taken as
//! two cores with no memory limit (so a test does not depend on the machine
//! it runs on). Flags given to the builder override these. A server that
//! cannot bind at once (a port just freed can be refused for a moment) is
//! retried for a while. Dropping a [`TestServer`] shuts it down and waits
//! for it.
//!
//! ```
//! use sluice_broker::testing::TestServer;
//!
//! let server = TestServer::builder().arg("--shards", "2").start();
//! println!("a test server on {}", server.addr());
//! drop(server); // shut down and joined
//!
//! let server = TestServer::builder().manual_clock().start();
//! // ... a client receives a message with a 30 s lease, and then:
//! server.advance(std::time::Duration::from_secs(30)); // the lease ran out
//! ```
//!
//! The client crate's docs (`sluice_client`, "Testing with a clock you
//! move") show a whole test: a lease that runs out and a message that
//! dead-letters on its fourth failed delivery, in milliseconds.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub mod pki;

pub use pki::{SelfSigned, TestPki};

use crate::io::OpenError;
use crate::server::config::{Config, Host, IoChoice, RawArgs};
use crate::server::{EngineTime, NotManual, Server, ServerHandle, StartError};

/// How long a server that does not start yet is retried.
pub const START_PATIENCE: Duration = Duration::from_secs(15);

/// The flags every test server starts from (a later flag overrides).
const TEST_DEFAULTS: [(&str, &str); 5] = [
    ("--listen", "127.0.0.1:0"),
    ("--metrics-addr", "off"),
    ("--sqs-listen", "off"),
    ("--shards", "1"),
    ("--memory-max", "256MiB"),
];

/// How to start a [`TestServer`].
#[derive(Clone, Debug, Default)]
pub struct Builder {
    io: Option<IoChoice>,
    args: Vec<String>,
}

impl Builder {
    /// Runs on this io backend (default: as `--io auto`).
    #[must_use]
    pub fn io(mut self, io: IoChoice) -> Builder {
        self.io = Some(io);
        self
    }

    /// Adds `--flag value` (overrides a default of the same flag).
    #[must_use]
    pub fn arg(mut self, flag: &str, value: &str) -> Builder {
        self.args.extend([flag.to_owned(), value.to_owned()]);
        self
    }

    /// Runs the broker on a manual clock (`--clock manual`), moved by
    /// [`TestServer::advance`] or a client's `ADVANCE_CLOCK`.
    #[must_use]
    pub fn manual_clock(self) -> Builder {
        self.arg("--clock", "manual")
    }

    /// Adds flags and values as given, e.g. `["--shards", "2"]`.
    #[must_use]
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Builder {
        self.args.extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// The configuration the server would start with.
    ///
    /// # Panics
    /// When the flags do not parse or do not make a valid configuration.
    #[must_use]
    pub fn config(&self) -> Config {
        let io = self.io.unwrap_or(IoChoice::Auto).to_string();
        let mut argv = vec!["sluice-server".to_owned()];
        let given = |flag: &str| self.args.iter().any(|a| a == flag);
        for (flag, value) in TEST_DEFAULTS.iter().chain([&("--io", io.as_str())]) {
            if !given(flag) {
                argv.extend([(*flag).to_owned(), (*value).to_owned()]);
            }
        }
        argv.extend(self.args.iter().cloned());
        let raw = RawArgs::try_parse_from_env(argv, |_| None).expect("test flags parse");
        let host = Host {
            cores: 2,
            memory: None,
        };
        Config::from_args_on(raw, &host).expect("the test configuration is valid")
    }

    /// Starts the server, retrying for [`START_PATIENCE`] while it cannot.
    ///
    /// # Errors
    /// The last [`StartError`] once the patience is spent, or at once when
    /// io_uring was asked for and is unavailable (retrying cannot help).
    pub fn try_start(self) -> Result<TestServer, StartError> {
        let io = self.io.unwrap_or(IoChoice::Auto);
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            match Server::start(self.config()) {
                Ok(handle) => {
                    return Ok(TestServer {
                        addr: handle.local_addr(),
                        handle: Some(handle),
                        io,
                    });
                }
                Err(
                    e @ StartError::Io {
                        source: OpenError::UringUnavailable(_),
                        ..
                    },
                ) => return Err(e),
                Err(e) if Instant::now() < deadline => {
                    eprintln!("test server did not start yet ({e}); retrying");
                    crate::sync::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts the server.
    ///
    /// # Panics
    /// When it does not start (see [`Builder::try_start`]).
    #[must_use]
    pub fn start(self) -> TestServer {
        self.try_start()
            .unwrap_or_else(|e| panic!("test server did not start: {e}"))
    }

    /// Starts the server, or returns `None` after a `SKIPPED` line when
    /// io_uring was asked for and this kernel or sandbox does not offer it;
    /// with `CI=true` in the environment that is a failure instead, so CI
    /// never skips silently.
    ///
    /// # Panics
    /// When it does not start for any other reason, or io_uring is missing
    /// on CI.
    #[must_use]
    pub fn start_or_skip(self) -> Option<TestServer> {
        match self.try_start() {
            Ok(server) => Some(server),
            Err(StartError::Io {
                source: OpenError::UringUnavailable(why),
                ..
            }) => {
                let on_ci = std::env::var("CI").is_ok_and(|v| v == "true");
                assert!(!on_ci, "io_uring unavailable on CI: {why}");
                eprintln!("SKIPPED (io_uring unavailable here: {why})");
                None
            }
            Err(e) => panic!("test server did not start: {e}"),
        }
    }
}

/// A running in-process server; shut down and joined on drop.
#[derive(Debug)]
pub struct TestServer {
    handle: Option<ServerHandle>,
    addr: SocketAddr,
    io: IoChoice,
}

impl TestServer {
    /// A builder with the test defaults (see the module docs).
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A server with the test defaults.
    ///
    /// # Panics
    /// When it does not start.
    #[must_use]
    pub fn start() -> TestServer {
        TestServer::builder().start()
    }

    /// The address clients connect to.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The io backend it was asked to run on.
    #[must_use]
    pub fn io(&self) -> IoChoice {
        self.io
    }

    /// Moves the broker's manual clock forward by `by` (whole
    /// milliseconds): every lease, delay, backoff, long-poll wait, dedup
    /// window and retention period that ends within it ends now, on every
    /// shard. Requests sent after this returns see the new time. Returns
    /// the manual time elapsed since the start (every advance so far).
    ///
    /// # Panics
    /// When the server runs on the real clock (start it with
    /// [`Builder::manual_clock`]), or after [`TestServer::stop`].
    pub fn advance(&self, by: Duration) -> Duration {
        match self.try_advance(by) {
            Ok((elapsed_ms, _)) => Duration::from_millis(elapsed_ms),
            Err(e) => panic!("{e}"),
        }
    }

    /// [`TestServer::advance`], reporting a server on the real clock as an
    /// error; returns the elapsed manual time (ms) and the broker's time.
    ///
    /// # Errors
    /// [`NotManual`] on the real clock: nothing changes.
    ///
    /// # Panics
    /// After [`TestServer::stop`].
    pub fn try_advance(&self, by: Duration) -> Result<(u64, EngineTime), NotManual> {
        self.handle().advance_clock(by)
    }

    /// The running server.
    ///
    /// # Panics
    /// After [`TestServer::stop`].
    #[must_use]
    pub fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("the test server is running")
    }

    /// Takes the running server out, to shut it down and join it by hand;
    /// the `TestServer` then holds nothing.
    ///
    /// # Panics
    /// After [`TestServer::stop`] or a first `take_handle`.
    pub fn take_handle(&mut self) -> ServerHandle {
        self.handle.take().expect("the test server is running")
    }

    /// Shuts the server down and waits for it.
    ///
    /// # Panics
    /// When it did not stop cleanly.
    pub fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
            h.join().expect("the test server stopped cleanly");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
            // A failing test is already unwinding: do not panic again.
            let _ = h.join();
        }
    }
}
