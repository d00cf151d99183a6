//! Running the workloads: one pass against one target at a time, every
//! target in turn within a pass, passes interleaved.
//!
//! A pass sets up a fresh queue, opens one connection per producer and per
//! consumer (before the clock starts), then runs plain std threads:
//! producers send batches (closed loop, or open loop on the fixed schedule
//! of the latency workload), consumers receive, classify each delivery with
//! the [`Tracker`](crate::tracker::Tracker), record latencies into their
//! own [`Recorder`], and delete in batches. Sending ends at `--messages`
//! or `--duration`; consumers stop when every sent message is deleted
//! (plus a short linger for late duplicates) or when the drain timeout
//! runs out.
//!
//! With `--window 1` every operation is a blocking call: one batch in
//! flight per connection. With a window of N, a producer keeps up to N sends
//! unanswered and a consumer up to N receives and deletes, started and
//! finished in order through the adapters' pipelined paths; a receive waits
//! (long-polls) only when nothing else is in flight, and after a receive
//! that found nothing a consumer keeps a single receive in flight until one
//! finds messages again, so an empty queue is not polled in a loop. The open
//! loop sends what is due as soon as it is due while the window has room,
//! one batch of whatever is due at that moment: the same for every target.

use std::io::Write;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::adapter::{Access, AdapterError, QueueSpec, Setting, Target, TargetUrl};
use crate::config::{RunConfig, Workload};
use crate::machine::{CpuUse, Steal};
use crate::stats::{Percentiles, Recorder};
use crate::tracker::Tally;
use pass::wall_nanos;

mod consume;
#[cfg(test)]
mod fake;
mod pass;
mod produce;
mod progress;
mod workers;

/// Why a pass did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The target could not be opened or its queue set up.
    #[error("set-up failed: {0}")]
    Setup(#[source] AdapterError),
    /// A connection could not be opened.
    #[error("connecting {role} failed: {source}")]
    Connect {
        /// Which connection.
        role: String,
        /// Why.
        source: AdapterError,
    },
    /// A producer or consumer hit an error and the pass stopped.
    #[error("{role} failed: {source}")]
    Worker {
        /// Which thread.
        role: String,
        /// Why.
        source: AdapterError,
    },
    /// A producer or consumer thread panicked.
    #[error("{0} panicked")]
    Panicked(String),
    /// Writing the configuration or progress failed.
    #[error("writing output failed: {0}")]
    Output(#[from] std::io::Error),
}

/// Everything measured in one pass against one target.
#[derive(Debug, Clone)]
pub struct PassReport {
    /// The target.
    pub target: TargetUrl,
    /// The workload.
    pub workload: Workload,
    /// Pass number, from 1.
    pub pass: u32,
    /// Per-message accounting.
    pub tally: Tally,
    /// Deliveries, redeliveries and duplicates included.
    pub deliveries: u64,
    /// Deliveries that should not have happened.
    pub duplicates: u64,
    /// Bodies that were not this pass's messages.
    pub corrupt: u64,
    /// Deletes the broker refused (the lease had passed to someone else).
    pub delete_rejected: u64,
    /// Redeliveries that came before the lease's end as this process saw it
    /// (recorded as 0 lateness).
    pub early_redeliveries: u64,
    /// Whether consumers stopped at the drain timeout rather than after the
    /// last delete.
    pub drain_timed_out: bool,
    /// From the first send to the last delete.
    pub active: Duration,
    /// Deleted messages per second over `active`.
    pub throughput: f64,
    /// The merged histograms.
    pub recorder: Recorder,
    /// The configuration in force (peer settings included).
    pub settings: Vec<Setting>,
    /// The time the hypervisor took from each CPU while the pass's threads
    /// ran (`None` where the system does not count it).
    pub steal: Option<Steal>,
    /// The load generator's own CPU use while the pass's threads ran.
    pub cpu: Option<CpuUse>,
}

impl PassReport {
    /// The metric SLOs and plots use: redelivery lateness for the
    /// redelivery workload, send to receive otherwise.
    pub fn primary(&self) -> &Histogram<u64> {
        match self.workload {
            Workload::Redelivery => &self.recorder.lateness,
            _ => &self.recorder.send_to_receive,
        }
    }

    /// The name of [`PassReport::primary`].
    pub fn primary_name(&self) -> &'static str {
        match self.workload {
            Workload::Redelivery => "redelivery lateness",
            _ => "send to receive",
        }
    }

    /// Percentiles of the primary metric.
    pub fn primary_percentiles(&self) -> Percentiles {
        Percentiles::of(self.primary())
    }
}

/// The result of one pass against one target.
#[derive(Debug)]
pub struct PassOutcome {
    /// The target.
    pub target: TargetUrl,
    /// Pass number, from 1.
    pub pass: u32,
    /// The report, or why there is none.
    pub result: Result<PassReport, RunError>,
}

/// Where a run writes as it goes.
pub struct Output<'a> {
    /// The printed configuration of each pass.
    pub config: &'a mut dyn Write,
    /// The progress line, once a second; `None` for `--quiet`.
    pub progress: Option<&'a mut (dyn Write + Send)>,
}

impl std::fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Runs every pass over every target, interleaved: pass 1 of each target in
/// the order given, then pass 2, and so on.
pub fn run(cfg: &RunConfig, out: &mut Output<'_>) -> Vec<PassOutcome> {
    let mut outcomes = Vec::new();
    for pass in 1..=cfg.passes {
        for url in &cfg.targets {
            let result = url
                .open_access(&Access {
                    token: cfg.token.clone(),
                    read_spin: cfg.read_spin,
                    sluice_tls: cfg.sluice_tls.clone(),
                    sqs: cfg.sqs.clone(),
                    sqs_tls: cfg.sqs_tls.clone(),
                })
                .map_err(RunError::Setup)
                .and_then(|mut target| run_pass(cfg, url, target.as_mut(), pass, out));
            outcomes.push(PassOutcome {
                target: url.clone(),
                pass,
                result,
            });
        }
    }
    outcomes
}

/// A queue name valid for every peer, fresh for each pass.
fn queue_name(pass: u32) -> String {
    format!(
        "sluice_loadgen_{}_{:x}_p{pass}",
        std::process::id(),
        wall_nanos() & 0xffff_ffff_ffff
    )
}

/// Writes the configuration block of a pass.
fn print_config(
    out: &mut dyn Write,
    cfg: &RunConfig,
    url: &TargetUrl,
    pass: u32,
    settings: &[Setting],
) -> std::io::Result<()> {
    writeln!(out, "== {url}  pass {pass} of {} ==", cfg.passes)?;
    let width = settings.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in settings {
        writeln!(out, "  {:width$}  {}", s.name, s.value)?;
    }
    out.flush()
}

/// Runs one pass of the configured workload against `target`.
pub fn run_pass(
    cfg: &RunConfig,
    url: &TargetUrl,
    target: &mut dyn Target,
    pass: u32,
    out: &mut Output<'_>,
) -> Result<PassReport, RunError> {
    let spec = QueueSpec {
        name: queue_name(pass),
        visibility_timeout: cfg.visibility_timeout,
        batch_max: cfg.batch,
        body_bytes: cfg.size,
        producers: cfg.producers,
        consumers: cfg.consumers,
        groups: cfg.groups,
        fifo: cfg.fifo,
        dedup_keys: cfg.dedup_keys,
        backlog: cfg.backlog > 0,
    };
    target.setup(&spec).map_err(RunError::Setup)?;
    let result = workers::run_set_up(cfg, url, target, pass, out);
    let teardown = target.teardown();
    let report = result?;
    teardown.map_err(RunError::Setup)?;
    Ok(report)
}

#[cfg(test)]
mod tests;
