//! An in-process sluice server on a free loopback port, metrics off.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_broker::server::config::{Config, Host, RawArgs};
use sluice_broker::server::{Server, ServerHandle};

/// How long a server may take to bind a free port (a port just freed can
/// be refused for a moment).
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A running server; shut down and joined on drop.
pub struct SluiceServer {
    handle: Option<ServerHandle>,
    addr: SocketAddr,
}

impl SluiceServer {
    /// One shard on `127.0.0.1:0`, with `extra` server flags.
    pub fn start(extra: &[&str]) -> SluiceServer {
        let mut argv = vec![
            "sluice-server",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "off",
            "--shards",
            "1",
            "--memory-max",
            "256MiB",
        ];
        argv.extend_from_slice(extra);
        let host = Host {
            cores: 2,
            memory: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let raw = RawArgs::try_parse_from_env(argv.clone(), |_| None).expect("flags parse");
            let config = Config::from_args_on(raw, &host).expect("a valid configuration");
            match Server::start(config) {
                Ok(handle) => {
                    let addr = handle.local_addr();
                    return SluiceServer {
                        handle: Some(handle),
                        addr,
                    };
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("sluice-server did not start yet ({e}); retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("sluice-server did not start: {e}"),
            }
        }
    }

    /// `sluice://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("sluice://{}", self.addr)
    }
}

impl Drop for SluiceServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
            let _ = h.join();
        }
    }
}
