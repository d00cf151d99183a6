//! An in-process sluice server (`sluice_broker::testing`) on a free
//! loopback port, metrics off.

use sluice_broker::testing::TestServer;

/// A running server; shut down and joined on drop.
pub struct SluiceServer(TestServer);

impl SluiceServer {
    /// One shard on `127.0.0.1:0`, with `extra` server flags.
    pub fn start(extra: &[&str]) -> SluiceServer {
        SluiceServer(TestServer::builder().args(extra).start())
    }

    /// `sluice://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("sluice://{}", self.0.addr())
    }
}
