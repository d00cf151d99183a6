//! Consumers killed with SIGKILL while they hold leases.
//!
//! A producer sends steadily; consumer child processes receive under a
//! short lease, hold their batch a random while ("work"), and delete most
//! of it (some they leave to run out, so that messages reach the
//! dead-letter queue after their second delivery). Every `interval` one
//! child, at random, is killed with SIGKILL and a new one takes its place.
//! The leases of a killed child run out and its messages are delivered
//! again. At the end the survivors finish, the queue and its dead-letter
//! queue are drained, and every message is accounted for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rand::Rng;
use sluice_client::{QueueOptions, RedrivePolicy};

use super::{check_errors, memory_max_flag, per_second, usual_bound};
use crate::chaos::consumer::{ChildTally, ConsumeArgs, ConsumerChild};
use crate::chaos::ledger::Ledger;
use crate::chaos::workload::{self, OpCounts};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness};

pub(super) const FAULT: Fault = Fault {
    name: "consumer-kill",
    description: "consumer processes killed with SIGKILL while holding leases (1 s leases, \
                  dead-letter after 2 deliveries)",
    run,
};

const QUEUE: &str = "kill.q";
const DLQ: &str = "kill.dlq";
const VISIBILITY: Duration = Duration::from_secs(1);

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let kills = ctx.mode.pick(120, 12);
    let interval = Duration::from_millis(250);
    let children = 4;
    let messages_max: u64 = ctx.mode.pick(400_000, 40_000);
    let time_max = ctx
        .mode
        .pick(Duration::from_secs(90), Duration::from_secs(15));

    let mm = memory_max_flag();
    let mut h = Harness::start(ctx, &["--memory-max", &mm])?;
    workload::create_queue(&h.control, DLQ, &QueueOptions::new())?;
    workload::create_queue(
        &h.control,
        QUEUE,
        &QueueOptions::new()
            .visibility_timeout(VISIBILITY)
            .redrive(RedrivePolicy::new(DLQ, 2)),
    )?;
    let ledger = Arc::new(Ledger::new(100));
    let tally = Arc::new(ChildTally::default());
    let args = ConsumeArgs {
        addr: h.addr.clone(),
        queue: QUEUE.into(),
        run_tag: ledger.run_tag(),
        batch: 32,
        visibility: VISIBILITY,
        hold_max: Duration::from_millis(40),
        leave_per_mille: 50,
    };

    // The producer: batches of 32 every 2 ms, up to messages_max.
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(OpCounts::default());
    let producer = {
        let c = workload::client(&h.addr)?;
        let (ledger, stop, counts) = (Arc::clone(&ledger), Arc::clone(&stop), Arc::clone(&counts));
        workload::spawn("chaos-producer", move || {
            while !stop.load(Relaxed) && ledger.issued() < messages_max {
                workload::send_batch(&c, QUEUE, &ledger, 32, &counts);
                std::thread::sleep(Duration::from_millis(2));
            }
        })?
    };

    let start = Instant::now();
    let mut running: Vec<ConsumerChild> = (0..children)
        .map(|_| ConsumerChild::spawn(&ctx.exe, &args, &ledger, &tally))
        .collect::<Result<_, _>>()?;
    let mut rng = rand::rng();
    let mut killed = 0u32;
    let mut lease_ages = Vec::new();
    while killed < kills && start.elapsed() < time_max {
        std::thread::sleep(interval);
        let victim = running.swap_remove(rng.random_range(0..running.len()));
        lease_ages.push(victim.age());
        victim.kill();
        killed += 1;
        running.push(ConsumerChild::spawn(&ctx.exe, &args, &ledger, &tally)?);
    }
    ctx.say(format!(
        "{killed} consumers killed in {:.1} s",
        start.elapsed().as_secs_f64()
    ));
    stop.store(true, Relaxed);
    let _ = producer.join();
    let load_secs = start.elapsed().as_secs_f64();

    // Let the survivors consume what is left (leases of the killed run out
    // within VISIBILITY; a message left twice goes to the DLQ).
    let settled = workload::wait_until(Duration::from_secs(30), || {
        workload::queue_stats(&h.control, &[QUEUE])
            .is_ok_and(|s| s[0].visible + s[0].delayed + s[0].in_flight == 0)
    });
    if !settled {
        ctx.say("the queue did not empty within 30 s; the drain takes the rest");
    }
    let mut unclean = 0;
    for child in running {
        if !child.finish(Duration::from_secs(10)) {
            unclean += 1;
        }
    }
    if unclean > 0 {
        h.violation(format!(
            "{unclean} consumer children did not finish when asked"
        ));
    }

    let sent = ledger.acked();
    h.fact("consumer processes killed (SIGKILL)", killed);
    h.fact("consumer processes at a time", children);
    h.fact("lease (visibility timeout)", format!("{VISIBILITY:?}"));
    h.fact("load phase, s", format!("{load_secs:.1}"));
    h.fact("messages sent per second", per_second(sent, load_secs));
    let child_errors = tally.errors.lock().map(|m| m.clone()).unwrap_or_default();
    for (what, n) in &child_errors {
        h.violation(format!("consumer children: {n} x {what}"));
    }
    check_errors(&mut h, "producer", &counts.errors.snapshot(), &[]);
    let q = &workload::queue_stats(&h.control, &[QUEUE])?[0];
    h.fact("leases run out (broker: redelivered)", q.redelivered);
    h.fact("dead-lettered (broker)", q.dead_lettered);
    let bound = usual_bound(h.start_rss());
    h.finish(&FAULT, &ledger, &[QUEUE, DLQ], bound)
}
