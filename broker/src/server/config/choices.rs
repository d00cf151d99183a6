//! The settings that are choices or addresses, and the parsers clap and the
//! config file share for them and for counts, sizes and durations.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use clap::ValueEnum;

use crate::server::limits::CPU_INDEX_LIMIT;
use sluice_protocol::units::{parse_bytes, parse_duration};

/// How the server talks to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoChoice {
    /// io_uring where the kernel allows it, else epoll (the reason is logged).
    Auto,
    /// io_uring or fail to start.
    Uring,
    /// epoll, even where io_uring is available.
    Epoll,
}

impl fmt::Display for IoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoChoice::Auto => "auto",
            IoChoice::Uring => "uring",
            IoChoice::Epoll => "epoll",
        })
    }
}

/// The clock the broker's engine runs on (`--clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ClockChoice {
    /// The real clocks.
    #[default]
    Real,
    /// A clock that stands still until an `ADVANCE_CLOCK` request (or the
    /// test server's `advance`) moves it: for tests.
    Manual,
}

impl fmt::Display for ClockChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClockChoice::Real => "real",
            ClockChoice::Manual => "manual",
        })
    }
}

/// What survives a crash (`--durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Durability {
    /// Nothing: everything is in memory.
    #[default]
    None,
    /// The write-ahead log, synced every `--log-sync-interval`.
    Batch,
    /// The write-ahead log, synced before a change is answered.
    Always,
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::None => "none",
            Durability::Batch => "batch",
            Durability::Always => "always",
        })
    }
}

/// Where the shard threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuPlacement {
    /// Shard `i` on the `i`-th CPU the process may use (its affinity mask,
    /// as `taskset` or a cpuset set it); shards beyond those CPUs unpinned.
    Auto,
    /// No pinning: the scheduler places the shards within the process's
    /// CPUs.
    None,
    /// Shard `i` on the `i`-th CPU of this list (ascending, no repeats).
    List(Vec<usize>),
}

impl fmt::Display for CpuPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuPlacement::Auto => f.write_str("auto"),
            CpuPlacement::None => f.write_str("none"),
            CpuPlacement::List(cpus) => {
                for (i, cpu) in cpus.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{cpu}")?;
                }
                Ok(())
            }
        }
    }
}

/// Parses `auto`, `none`, or a CPU list such as `0,2-3`.
pub(crate) fn parse_cpus(s: &str) -> Result<CpuPlacement, String> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "auto" => return Ok(CpuPlacement::Auto),
        "none" | "off" => return Ok(CpuPlacement::None),
        _ => {}
    }
    let bad = |why: String| format!("`{s}` is not a CPU list: {why} (examples: auto, none, 0,2-3)");
    let cpu = |x: &str| -> Result<usize, String> {
        let n: usize = x
            .trim()
            .parse()
            .map_err(|_| bad(format!("`{}` is not a CPU number", x.trim())))?;
        if n >= CPU_INDEX_LIMIT {
            return Err(bad(format!("CPU {n} is beyond {}", CPU_INDEX_LIMIT - 1)));
        }
        Ok(n)
    };
    let mut cpus = Vec::new();
    for part in t.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (cpu(a)?, cpu(b)?);
                if a > b {
                    return Err(bad(format!("the range {a}-{b} runs backwards")));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(cpu(part)?),
        }
    }
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != cpus.len() {
        return Err(bad("a CPU is named twice".to_owned()));
    }
    Ok(CpuPlacement::List(sorted))
}

/// An address as given, or `off` (`--metrics-addr`, `--sqs-listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAddr {
    /// `off`: no metrics endpoint.
    Off,
    /// Serve metrics here (port 0: any free port).
    At(SocketAddr),
}

/// Parses `HOST:PORT` where HOST is an IP address (`[...]` for IPv6) or
/// `localhost` (127.0.0.1). Names are not resolved: what the server binds
/// must not depend on DNS.
pub fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Some(port) = s.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
    }
    s.parse().map_err(|_| {
        format!(
            "`{s}` is not HOST:PORT with an IP address \
             (e.g. 127.0.0.1:7171, 0.0.0.0:7171, [::1]:7171, localhost:7171)"
        )
    })
}

/// Parses a `--listen` value: `HOST:PORT` as in [`parse_socket_addr`], or
/// the same as a URL, `sluice://HOST:PORT`, as clients write it.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let bare = match t.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sluice") => {
            rest.strip_suffix('/').unwrap_or(rest)
        }
        Some(_) => {
            return Err(format!(
                "`{s}`: the only scheme is sluice:// (e.g. sluice://0.0.0.0:7171)"
            ));
        }
        None => t,
    };
    parse_socket_addr(bare)
}

/// Parses a `--metrics-addr` value: `HOST:PORT` as in [`parse_socket_addr`],
/// or `off`.
pub fn parse_metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(MetricsAddr::Off);
    }
    parse_socket_addr(s)
        .map(MetricsAddr::At)
        .map_err(|e| format!("{e}, or `off`"))
}

/// Parses a whole non-negative number.
pub(super) fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not a whole number"));
    }
    s.parse().map_err(|_| format!("`{s}` is too large"))
}

pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|e| e.to_string())
}

pub(super) fn parse_time(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

pub(super) fn parse_durability(s: &str) -> Result<Durability, String> {
    Durability::from_str(s.trim(), true)
        .map_err(|_| format!("`{s}` is not a durability: use none, batch or always"))
}

pub(super) fn parse_clock(s: &str) -> Result<ClockChoice, String> {
    ClockChoice::from_str(s.trim(), true)
        .map_err(|_| format!("`{s}` is not a clock: use real or manual"))
}

pub(super) fn parse_io(s: &str) -> Result<IoChoice, String> {
    IoChoice::from_str(s.trim(), true)
        .map_err(|_| format!("`{s}` is not an io backend: use auto, uring or epoll"))
}

/// `--sqs-account`: 12 digits, as an AWS account id.
pub fn parse_sqs_account(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.len() == 12 && t.bytes().all(|b| b.is_ascii_digit()) {
        Ok(t.to_owned())
    } else {
        Err(format!(
            "`{s}` is not an account id: 12 digits, such as 000000000000"
        ))
    }
}

/// `--sqs-limits`: `strict` (SQS's own) or `relaxed` (sluice's larger
/// batches).
pub fn parse_sqs_limits(s: &str) -> Result<sluice_sqs::Limits, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "strict" => Ok(sluice_sqs::Limits::Strict),
        "relaxed" => Ok(sluice_sqs::Limits::Relaxed),
        _ => Err(format!(
            "`{s}` is not a choice of limits: use strict or relaxed"
        )),
    }
}
