//! One pass on a target already set up: connects every producer and
//! consumer (before the clock starts), runs them on std threads with the
//! progress line beside them, and gathers the pass's report.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pass::{BACKLOG_RUN_TAG, Pass};
use super::{Output, PassReport, RunError, print_config, progress};
use crate::adapter::{Adapter, AdapterError, Role, Setting, Target, TargetUrl};
use crate::body::{Stamp, write_body};
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
    put_backlog(cfg, target)?;

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
    if cfg.backlog > 0 {
        settings.push(Setting::new(
            "backlog",
            format!(
                "{} messages of one noisy tenant{}, put in the queue before the clock starts; \
                 the consumers delete them as foreign bodies, unmeasured",
                cfg.backlog,
                if cfg.groups > 0 {
                    " in group noisy (the pass's groups are the quiet tenants)"
                } else {
                    ", without a group (a plain queue)"
                }
            ),
        ));
    }
    settings.extend(target.settings());
    settings
}

/// A noisy tenant's backlog (`--backlog`), put in the queue before the
/// clock starts, in batches of `--batch`: bodies of the load generator's
/// form with a run tag no pass has ([`BACKLOG_RUN_TAG`]), so the consumers
/// delete them as bodies not of the pass and measure only the pass's own.
fn put_backlog(cfg: &RunConfig, target: &mut dyn Target) -> Result<(), RunError> {
    if cfg.backlog == 0 {
        return Ok(());
    }
    let role = || "backlog".to_owned();
    let mut a = target
        .connect(Role::Backlog)
        .map_err(|source| RunError::Connect {
            role: role(),
            source,
        })?;
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); cfg.batch];
    let mut seq = 0;
    while seq < cfg.backlog {
        // At most `--batch`, a usize.
        let n = (cfg.backlog - seq).min(cfg.batch as u64) as usize;
        for b in &mut bufs[..n] {
            let stamp = Stamp {
                run_tag: BACKLOG_RUN_TAG,
                seq,
                intended_ns: 0,
                sent_ns: 0,
            };
            write_body(b, cfg.size, stamp);
            seq += 1;
        }
        let bodies: Vec<&[u8]> = bufs[..n].iter().map(Vec::as_slice).collect();
        a.send_batch(&bodies).map_err(|source| RunError::Worker {
            role: role(),
            source,
        })?;
    }
    Ok(())
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
