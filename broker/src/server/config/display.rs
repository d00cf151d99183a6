//! The effective configuration, printed as a config file.

use std::fmt;
use std::time::Duration;

use super::{Config, MemoryMaxOrigin};
use crate::server::limits::MIB;
use sluice_protocol::units::{format_bytes, format_duration};

/// A size for people: exact in the grammar when a whole number of MiB,
/// else `about 23.5GiB`.
fn approx_bytes(n: u64) -> String {
    if n % MIB == 0 {
        return format_bytes(n);
    }
    let (unit, scale) = [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", MIB)]
        .into_iter()
        .find(|&(_, scale)| n >= scale)
        .unwrap_or(("KiB", 1 << 10));
    #[allow(clippy::cast_precision_loss, reason = "one decimal for people")]
    let value = n as f64 / scale as f64;
    format!("about {value:.1}{unit}")
}

/// A TOML string literal.
pub(super) fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The effective configuration as a config file (token redacted: the file is
/// named, the token is not shown), one `key = value` line per setting, with
/// comments where a value came from the host. It parses back, through
/// `--config`, to the same configuration.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "listen = {}", quoted(&self.listen.to_string()))?;
        if self.shards_given {
            writeln!(f, "shards = {}", self.shards)?;
        } else {
            writeln!(
                f,
                "# shards: {}, one per core (not given: a snapshot's own count wins)",
                self.shards
            )?;
        }
        writeln!(f, "cpus = {}", quoted(&self.cpus.to_string()))?;
        writeln!(f, "io = {}", quoted(&self.io.to_string()))?;
        writeln!(f, "clock = {}", quoted(&self.clock.to_string()))?;
        match &self.auth_token {
            Some(token) => writeln!(
                f,
                "token_file = {}  # token of {} bytes, not shown",
                quoted(&token.path().to_string_lossy()),
                token.as_bytes().len()
            )?,
            None => writeln!(f, "# token_file: none, clients need no token")?,
        }
        match &self.tls {
            Some(tls) => {
                writeln!(f, "tls_cert = {}", quoted(&tls.cert.to_string_lossy()))?;
                writeln!(f, "tls_key = {}", quoted(&tls.key.to_string_lossy()))?;
                match &tls.client_ca {
                    Some(ca) => writeln!(f, "tls_client_ca = {}", quoted(&ca.to_string_lossy()))?,
                    None => writeln!(f, "# tls_client_ca: none, clients need no certificate")?,
                }
            }
            None => writeln!(
                f,
                "# tls_cert, tls_key, tls_client_ca: none, clients connect in plain text"
            )?,
        }
        writeln!(f, "insecure = {}", self.insecure)?;
        match self.metrics {
            Some(addr) => writeln!(f, "metrics_addr = {}", quoted(&addr.to_string()))?,
            None => writeln!(f, "metrics_addr = \"off\"")?,
        }
        match &self.sqs {
            Some(sqs) => {
                writeln!(f, "sqs_listen = {}", quoted(&sqs.listen.to_string()))?;
                writeln!(f, "sqs_account = {}", quoted(&sqs.account))?;
                let limits = match sqs.limits {
                    sluice_sqs::Limits::Strict => "strict",
                    sluice_sqs::Limits::Relaxed => "relaxed",
                };
                writeln!(f, "sqs_limits = {}", quoted(limits))?;
                match &sqs.credentials {
                    Some((path, creds)) => writeln!(
                        f,
                        "sqs_credentials = {}  # {} access key(s), secrets not shown",
                        quoted(&path.display().to_string()),
                        creds.len()
                    )?,
                    None => writeln!(f, "# sqs_credentials: none, any signature is accepted")?,
                }
            }
            None => writeln!(f, "sqs_listen = \"off\"")?,
        }
        writeln!(f, "max_connections = {}", self.connections_max)?;
        writeln!(
            f,
            "max_connections_before_hello = {}",
            self.connections_before_hello_max
        )?;
        let size = |n: u64| quoted(&format_bytes(n));
        let time = |d: Duration| quoted(&format_duration(d));
        writeln!(f, "frame_bytes_max = {}", size(self.frame_bytes_max.into()))?;
        writeln!(
            f,
            "hello_frame_bytes_max = {}",
            size(self.hello_frame_bytes_max.into())
        )?;
        writeln!(f, "hello_timeout = {}", time(self.hello_timeout))?;
        writeln!(f, "frame_timeout = {}", time(self.frame_timeout))?;
        writeln!(
            f,
            "requests_in_flight_max = {}",
            self.requests_in_flight_max
        )?;
        writeln!(f, "unsent_bytes_max = {}", size(self.unsent_bytes_max))?;
        writeln!(
            f,
            "unsent_bytes_total_max = {}",
            size(self.unsent_bytes_total_max)
        )?;
        write!(f, "memory_max = {}", size(self.memory_max_bytes))?;
        match &self.memory_max_origin {
            MemoryMaxOrigin::Given => writeln!(f)?,
            MemoryMaxOrigin::HalfOf(limit) => writeln!(
                f,
                "  # half of {} ({})",
                limit.source,
                approx_bytes(limit.bytes)
            )?,
            MemoryMaxOrigin::Fallback => writeln!(
                f,
                "  # fallback: neither a cgroup limit nor physical memory was found"
            )?,
        }
        writeln!(f, "queues_max = {}", self.queues_max)?;
        writeln!(f, "log = {}", quoted(&self.log_filter))?;
        writeln!(f, "shutdown_timeout = {}", time(self.shutdown_timeout))?;
        writeln!(f, "idle_spin = {}", time(self.idle_spin))?;
        match &self.snapshot {
            Some(path) => writeln!(f, "snapshot = {}", quoted(&path.to_string_lossy()))?,
            None => writeln!(
                f,
                "# snapshot: none, a restart loses every queue and message"
            )?,
        }
        writeln!(f, "snapshot_keep = {}", self.snapshot_keep)?;
        self.fmt_durability(f)
    }
}

impl Config {
    /// `--durability`, `--log-dir` and `--log-sync-interval`.
    fn fmt_durability(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "durability = {}", quoted(&self.durability.to_string()))?;
        match &self.log_dir {
            Some(dir) => writeln!(f, "log_dir = {}", quoted(&dir.to_string_lossy()))?,
            None => writeln!(f, "# log_dir: none, no write-ahead log")?,
        }
        writeln!(
            f,
            "log_sync_interval = {}",
            quoted(&format_duration(self.log_sync_interval))
        )
    }
}
