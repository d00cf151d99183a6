//! The fault suite and the soak behind `sluice-chaos`: a real
//! `sluice-server` process on loopback, faults done to it over real
//! sockets, and every message counted.
//!
//! Each fault is a [`Fault`] with its own server (so descriptors and peak
//! memory are its own), its own queues and, where it makes sense, a steady
//! producer/consumer load beside it ([`workload::Steady`]). Every message
//! body carries a sequence number; the [`ledger::Ledger`] records what
//! became of each one and, at the end, after a final drain of the queues,
//! compares that with the broker's per-queue counters: nothing lost,
//! duplicates counted (delivery is at-least-once), the accounting identity
//! intact, descriptors back to their count before the fault, peak memory
//! within its stated bound.
//!
//! Every loop is bounded in count and in time, and everything runs on
//! loopback. The pieces:
//! - [`server`]: the broker process, its log and `/proc` figures;
//! - [`ledger`]: per-message accounting and the reconciliation;
//! - [`workload`]: the steady load, the drain, client helpers;
//! - [`raw`]: raw-frame connections for clients that misbehave;
//! - [`consumer`]: consumers as child processes, to be killed;
//! - [`faults`]: the scenarios;
//! - [`report`]: tables and JSON;
//! - [`soak`]: hours of mixed load against one server.

use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_client::Client;

pub mod consumer;
pub mod faults;
pub mod ledger;
pub mod raw;
pub mod report;
pub mod server;
pub mod soak;
pub mod workload;

use ledger::{Ledger, Reconciled};
use server::{ServerProcess, ServerSpec};

/// Why a scenario could not run (as opposed to a violation it found).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// Starting the server, a thread or a process failed.
    #[error("setup: {0}")]
    Setup(String),
    /// A request of the suite's own control client failed.
    #[error("client: {0}")]
    Client(String),
}

/// Full run or the short form CI runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// The figures of record.
    Full,
    /// A short form of every fault (the whole suite in under 2 minutes).
    Quick,
}

impl Mode {
    /// `quick` in quick mode, else `full`.
    #[must_use]
    pub fn pick<T>(self, full: T, quick: T) -> T {
        match self {
            Mode::Full => full,
            Mode::Quick => quick,
        }
    }
}

/// What a scenario gets.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// How to start the server.
    pub spec: ServerSpec,
    /// Full or quick.
    pub mode: Mode,
    /// Print progress lines on stderr.
    pub verbose: bool,
    /// The `sluice-chaos` executable, for child processes.
    pub exe: std::path::PathBuf,
}

impl Ctx {
    /// A progress line on stderr.
    pub fn say(&self, what: impl AsRef<str>) {
        if self.verbose {
            eprintln!("  .. {}", what.as_ref());
        }
    }
}

/// The figures and verdict of one fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    /// Short name (`consumer-kill`, ...).
    pub name: String,
    /// What was done.
    pub description: String,
    /// Wall time, seconds.
    pub seconds: f64,
    /// The server's flags.
    pub server_args: Vec<String>,
    /// The per-message tally.
    pub messages: Reconciled,
    /// Whether the queues were drained at the end, so that "lost" was
    /// checked (not after SIGTERM: an in-memory broker loses what it held).
    pub lost_checked: bool,
    /// Queues whose counters broke the accounting identity.
    pub identity_mismatches: u64,
    /// Server descriptors with only the control connection open, before.
    pub fds_before: Option<u64>,
    /// The same after the fault (`None` when the server is gone).
    pub fds_after: Option<u64>,
    /// The server's peak RSS (`VmHWM`), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// The server's RSS right after start, bytes.
    pub start_rss_bytes: Option<u64>,
    /// The bound peak RSS was held to, bytes, and how it was made.
    pub rss_bound_bytes: Option<u64>,
    /// How the bound was made.
    pub rss_bound_rule: String,
    /// Scenario-specific figures, in order.
    pub facts: Vec<(String, String)>,
    /// Everything that went wrong (empty: the fault passed).
    pub violations: Vec<String>,
}

impl FaultReport {
    /// Whether the fault passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// A scenario of the fault suite.
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// Its name on the command line and in reports.
    pub name: &'static str,
    /// One line on what it does.
    pub description: &'static str,
    /// The scenario.
    pub run: fn(&Ctx) -> Result<FaultReport, ChaosError>,
}

/// A server started for one fault, with the control connection and the
/// figures taken before the fault.
#[derive(Debug)]
pub struct Harness {
    /// The server.
    pub server: ServerProcess,
    /// The control connection (stats, set-up, drain).
    pub control: Client,
    /// The address clients use.
    pub addr: String,
    started: Instant,
    fds_before: Option<u64>,
    fd_kinds_before: String,
    start_rss: Option<u64>,
    facts: Vec<(String, String)>,
    violations: Vec<String>,
}

/// A killed server's port is free again within this.
const RESTART_PATIENCE: Duration = Duration::from_secs(15);
/// Descriptors settle back within this after the clients close.
const FDS_SETTLE: Duration = Duration::from_secs(10);
/// Leases left by crashed consumers run out within this (the scenarios use
/// leases of a few seconds at most).
pub const DRAIN_PATIENCE: Duration = Duration::from_secs(30);

impl Harness {
    /// Starts a server with the scenario's `flags` and connects the control
    /// client.
    ///
    /// # Errors
    /// The server did not start or the control client could not connect.
    pub fn start(ctx: &Ctx, flags: &[&str]) -> Result<Harness, ChaosError> {
        let server = ServerProcess::start(&ctx.spec, flags)?;
        let addr = server.addr_string();
        let control = workload::client(&addr)?;
        // The server answers HELLO once the connection is registered, so
        // the count now includes the control connection; the binary opens
        // a few more descriptors just after it logs that it serves (its
        // signal thread's), so wait for the count to hold still.
        let fds_before = settled_fds(&server);
        let fd_kinds_before = server::proc_fd_kinds(server.pid());
        let start_rss = server.memory().map(|m| m.rss_bytes);
        Ok(Harness {
            server,
            control,
            addr,
            started: Instant::now(),
            fds_before,
            fd_kinds_before,
            start_rss,
            facts: Vec::new(),
            violations: Vec::new(),
        })
    }

    /// Kills the server with SIGKILL and starts it again with the same
    /// flags on the same address (its clients reconnect there), plus
    /// `flags`, telling `ledger` when the kill began and that the server is
    /// gone. The descriptor check is off from then: the server that ends
    /// the fault was not there before it.
    ///
    /// # Errors
    /// The server did not start again, or the control client could not
    /// connect.
    pub fn crash_and_restart(
        &mut self,
        ctx: &Ctx,
        flags: &[&str],
        ledger: &Ledger,
    ) -> Result<(), ChaosError> {
        let began = Instant::now();
        self.server.kill();
        ledger.killed(began);
        // The control connection learns its server is gone, and closes
        // (the killed server's end of it would hold the port meanwhile).
        let _ = self.control.queue_info("-");
        let mut spec = ctx.spec.clone();
        spec.extra.push(format!("--listen={}", self.addr));
        // The killed server's connections may hold its port a moment,
        // until their clients see the close.
        let deadline = Instant::now() + RESTART_PATIENCE;
        self.server = loop {
            match ServerProcess::start(&spec, flags) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        self.control = workload::client(&self.addr)?;
        self.fds_before = None;
        "(not checked: the server was restarted)".clone_into(&mut self.fd_kinds_before);
        Ok(())
    }

    /// Records a scenario-specific figure.
    pub fn fact(&mut self, name: &str, value: impl ToString) {
        self.facts.push((name.to_owned(), value.to_string()));
    }

    /// Records a violation.
    pub fn violation(&mut self, what: impl Into<String>) {
        self.violations.push(what.into());
    }

    /// The server's RSS right after start.
    #[must_use]
    pub fn start_rss(&self) -> u64 {
        self.start_rss.unwrap_or(0)
    }

    /// Checks that the server's descriptors come back to their count before
    /// the fault (only the control connection open); returns the count.
    pub fn fds_back(&mut self) -> Option<u64> {
        let before = self.fds_before?;
        let mut now = self.server.fds();
        workload::wait_until(FDS_SETTLE, || {
            now = self.server.fds();
            now == Some(before)
        });
        if now != Some(before) {
            self.violation(format!(
                "server descriptors not back: {before} before the fault ({}), {} after ({})",
                self.fd_kinds_before,
                now.map_or("unknown".to_owned(), |n| n.to_string()),
                server::proc_fd_kinds(self.server.pid())
            ));
        }
        now
    }

    /// Finishes the report: the ledger reconciled with the broker's counters
    /// of `queues` (after a drain when `drain`), descriptors, peak memory
    /// against `rss_bound` (bytes and the rule that made it).
    ///
    /// # Errors
    /// A request of the control client failed.
    pub fn finish(
        mut self,
        fault: &Fault,
        ledger: &Ledger,
        queues: &[&str],
        rss_bound: (u64, String),
    ) -> Result<FaultReport, ChaosError> {
        let drained = workload::drain(&self.control, ledger, queues, DRAIN_PATIENCE)?;
        if !drained.complete {
            self.violation(format!(
                "the final drain did not empty {queues:?} within {DRAIN_PATIENCE:?}"
            ));
        }
        let (totals, broken, stats) = workload::totals(&self.control, queues)?;
        for (q, s) in queues.iter().zip(&stats) {
            if !s.identity_holds() {
                self.violation(format!("accounting identity broken on {q}: {s:?}"));
            }
        }
        let messages = ledger.reconcile(Some(totals), true);
        let fds_after = self.fds_back();
        let kinds = self.fd_kinds_before.clone();
        self.fact("server descriptors before, by kind", kinds);
        let peak = self.server.memory().map(|m| m.peak_bytes);
        let warnings = self.server.warnings();
        self.fact("server WARN/ERROR log lines", warnings.len());
        for w in warnings.iter().take(5) {
            self.fact("server log", w.clone());
        }
        let mut report = self.report(fault, messages, broken, fds_after, peak, Some(rss_bound));
        report.lost_checked = true;
        Ok(report)
    }

    /// The report from figures the scenario gathered itself ("lost" not
    /// checked: no final drain).
    #[must_use]
    pub fn report(
        self,
        fault: &Fault,
        messages: Reconciled,
        identity_mismatches: u64,
        fds_after: Option<u64>,
        peak_rss: Option<u64>,
        rss_bound: Option<(u64, String)>,
    ) -> FaultReport {
        let mut violations = self.violations;
        if messages.violation_count > messages.violations.len() as u64 {
            violations.push(format!(
                "{} message violations in all (the first {} follow)",
                messages.violation_count,
                messages.violations.len()
            ));
        }
        violations.extend(messages.violations.iter().cloned());
        let (bound, rule) = rss_bound.map_or((None, String::new()), |(b, r)| (Some(b), r));
        if let (Some(peak), Some(bound)) = (peak_rss, bound) {
            if peak > bound {
                violations.push(format!(
                    "server peak RSS {} above its bound {} ({rule})",
                    report::mib(peak),
                    report::mib(bound)
                ));
            }
        }
        FaultReport {
            name: fault.name.to_owned(),
            description: fault.description.to_owned(),
            seconds: self.started.elapsed().as_secs_f64(),
            server_args: self.server.args().to_vec(),
            messages,
            lost_checked: false,
            identity_mismatches,
            fds_before: self.fds_before,
            fds_after,
            peak_rss_bytes: peak_rss,
            start_rss_bytes: self.start_rss,
            rss_bound_bytes: bound,
            rss_bound_rule: rule,
            facts: self.facts,
            violations,
        }
    }
}

/// The server's descriptor count once it has held still for 250 ms (at
/// most 5 s).
fn settled_fds(server: &ServerProcess) -> Option<u64> {
    let mut last = server.fds();
    let mut same = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while same < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = server.fds();
        if now == last {
            same += 1;
        } else {
            same = 0;
            last = now;
        }
    }
    last
}

/// MiB in bytes.
pub const MIB: u64 = 1024 * 1024;
