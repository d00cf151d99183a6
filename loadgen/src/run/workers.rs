//! One pass on a target already set up: connects every producer and
//! consumer (before the clock starts), runs them on std threads with the
//! progress line beside them, and gathers the pass's report.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pass::Pass;
use super::{Output, PassReport, RunError, print_config, progress};
use crate::adapter::{Adapter, AdapterError, Role, Setting, Target, TargetUrl};
use crate::config::RunConfig;
use crate::machine::{self, CpuUse, Steal};

/// Connections of a pass, opened before the clock starts.
type Connections = Vec<Box<dyn Adapter>>;

/// Runs one pass on `target`, its queue set up: the settings printed,
/// the connections opened, the threads run, the report gathered.
pub(super) fn run_set_up(
    cfg: &RunConfig,
    url: &TargetUrl,
    target: &mut dyn Target,
    pass: u32,
    out: &mut Output<'_>,
) -> Result<PassReport, RunError> {
    let settings = pass_settings(cfg, target);
    print_config(out.config, cfg, url, pass, &settings)?;
    let (producers, consumers) = connect_all(cfg, target)?;

    let state = Pass::new(cfg, pass);

    let label = format!("{url} pass {pass}/{}", cfg.passes);
    let steal_before = machine::Sample::now();
    let cpu_before = machine::CpuClock::now();
    run_threads(&state, producers, consumers, &label, out);
    let steal = steal_before.and_then(|before| Some(machine::Sample::now()?.since(&before)));
    let cpu = cpu_before
        .and_then(|before| Some(machine::CpuClock::now()?.since(&before, machine::allowed_cpus())));
    report(cfg, url, pass, &state, settings, steal, cpu)
}

/// The settings a pass prints and reports: the workload, the connections,
/// the pipeline, then the target's own.
fn pass_settings(cfg: &RunConfig, target: &dyn Target) -> Vec<Setting> {
    let mut settings = vec![
        Setting::new("workload", cfg.describe()),
        Setting::new(
            "connections",
            format!(
                "{} producer + {} consumer, one each, plus one for set-up and tear-down",
                cfg.producers, cfg.consumers
            ),
        ),
        Setting::new(
            "pipeline",
            if cfg.window == 1 {
                format!("one batch of up to {} in flight per connection", cfg.batch)
            } else {
                format!(
                    "up to {} batches of up to {} in flight per connection (--window)",
                    cfg.window, cfg.batch
                )
            },
        ),
    ];
    settings.extend(target.settings());
    settings
}

/// One connection per producer and per consumer: (producers, consumers).
fn connect_all(
    cfg: &RunConfig,
    target: &mut dyn Target,
) -> Result<(Connections, Connections), RunError> {
    let mut producers = Vec::with_capacity(cfg.producers);
    for i in 0..cfg.producers {
        let a = target
            .connect(Role::Producer(i))
            .map_err(|source| RunError::Connect {
                role: format!("producer {i}"),
                source,
            })?;
        producers.push(a);
    }
    let mut consumers = Vec::with_capacity(cfg.consumers);
    for i in 0..cfg.consumers {
        let a = target
            .connect(Role::Consumer(i))
            .map_err(|source| RunError::Connect {
                role: format!("consumer {i}"),
                source,
            })?;
        consumers.push(a);
    }

    Ok((producers, consumers))
}

/// Runs the producers and consumers on their threads, and the progress
/// line beside them, until every one is done; a failure is kept in
/// `state`.
fn run_threads(
    state: &Pass<'_>,
    producers: Connections,
    consumers: Connections,
    label: &str,
    out: &mut Output<'_>,
) {
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for (i, mut a) in consumers.into_iter().enumerate() {
            let role = format!("consumer {i}");
            let h = std::thread::Builder::new()
                .name(format!("consumer-{i}"))
                .spawn_scoped(s, move || {
                    if let Err(source) = state.consume(i, a.as_mut()) {
                        state.fail(RunError::Worker { role, source });
                    }
                });
            workers.push((format!("consumer {i}"), h));
        }
        for (i, mut a) in producers.into_iter().enumerate() {
            let role = format!("producer {i}");
            let h = std::thread::Builder::new()
                .name(format!("producer-{i}"))
                .spawn_scoped(s, move || {
                    let r = match state.schedule {
                        Some(_) => state.produce_open(i, a.as_mut()),
                        None => state.produce_closed(a.as_mut()),
                    };
                    state.producer_finished();
                    if let Err(source) = r {
                        state.fail(RunError::Worker { role, source });
                    }
                });
            workers.push((format!("producer {i}"), h));
        }
        let progress = out
            .progress
            .as_deref_mut()
            .map(|w| s.spawn(move || progress::report(state, label, w)));
        for (role, h) in workers {
            match h {
                Ok(h) => {
                    if h.join().is_err() {
                        state.fail(RunError::Panicked(role));
                    }
                }
                Err(e) => state.fail(RunError::Worker {
                    role,
                    source: AdapterError::Io {
                        peer: "loadgen",
                        source: e,
                    },
                }),
            }
        }
        state.finished.store(true, Ordering::Release);
        if let Some(p) = progress {
            let _ = p.join();
        }
    });
}

/// The report of a finished pass, or the first failure of its threads.
fn report(
    cfg: &RunConfig,
    url: &TargetUrl,
    pass: u32,
    state: &Pass<'_>,
    settings: Vec<Setting>,
    steal: Option<Steal>,
    cpu: Option<CpuUse>,
) -> Result<PassReport, RunError> {
    if let Some(err) = state
        .error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        return Err(err);
    }
    let issued = state.next_seq.load(Ordering::Acquire).min(state.capacity);
    let tally = state.tracker.tally(issued);
    let first = state.first_send_ns.load(Ordering::Relaxed);
    let last = state.last_settle_ns.load(Ordering::Relaxed);
    let active = Duration::from_nanos(last.saturating_sub(first.min(last)));
    let throughput = if active.is_zero() {
        0.0
    } else {
        tally.deleted as f64 / active.as_secs_f64()
    };
    Ok(PassReport {
        target: url.clone(),
        workload: cfg.workload,
        pass,
        tally,
        deliveries: state.deliveries.load(Ordering::Relaxed),
        duplicates: state.duplicates.load(Ordering::Relaxed),
        corrupt: state.corrupt.load(Ordering::Relaxed),
        delete_rejected: state.delete_rejected.load(Ordering::Relaxed),
        early_redeliveries: state.early.load(Ordering::Relaxed),
        drain_timed_out: state.drain_timed_out.load(Ordering::Relaxed),
        active,
        throughput,
        recorder: state.merged(),
        settings,
        steal,
        cpu,
    })
}
