use std::time::Duration;

use super::consume::{Deliveries, Samples, leaves};
use super::fake::{FakeTarget, Faults};
use super::pass::Pass;
use super::*;
use crate::adapter::Receipt;
use crate::config::{Bound, RunConfig, RunSpec};

fn config(workload: Workload, messages: u64) -> RunConfig {
    let mut cfg = RunConfig::new(RunSpec {
        workload: Some(workload),
        targets: vec![TargetUrl::parse("redis://127.0.0.1:1").unwrap()],
        messages: Some(messages),
        producers: Some(2),
        consumers: Some(2),
        batch: Some(16),
        visibility_timeout: Some(Duration::from_millis(if workload == Workload::Redelivery {
            50
        } else {
            30_000
        })),
        rate: (workload == Workload::Latency).then_some(20_000),
        ..RunSpec::default()
    })
    .unwrap();
    // A lost message keeps the consumers waiting for the whole drain.
    cfg.drain_timeout = Duration::from_millis(300);
    cfg
}

fn pass(cfg: &RunConfig, faults: Faults) -> (PassReport, String) {
    let mut printed = Vec::new();
    let report = {
        let mut out = Output {
            config: &mut printed,
            progress: None,
        };
        let mut target = FakeTarget::new(faults);
        run_pass(cfg, &cfg.targets[0], &mut target, 1, &mut out).unwrap()
    };
    (report, String::from_utf8(printed).unwrap())
}

#[test]
fn a_clean_broker_loses_and_duplicates_nothing() {
    let cfg = config(Workload::Throughput, 1_000);
    let (r, printed) = pass(&cfg, Faults::default());
    assert_eq!(r.tally.sent, 1_000);
    assert_eq!(r.tally.deleted, 1_000);
    assert_eq!((r.tally.lost, r.duplicates, r.corrupt), (0, 0, 0));
    assert!(!r.drain_timed_out);
    assert_eq!(r.recorder.send_to_receive.len(), 1_000);
    assert_eq!(r.recorder.cycle.len(), 1_000);
    assert!(r.throughput > 0.0);
    assert!(printed.contains("in-memory fake"), "{printed}");
    assert!(printed.contains("batch 16"), "{printed}");
}

#[test]
fn a_lost_and_a_duplicated_message_are_counted() {
    let cfg = config(Workload::Throughput, 1_000);
    let faults = Faults {
        lose_seq: Some(10),
        duplicate_seq: Some(20),
    };
    let (r, _) = pass(&cfg, faults);
    assert_eq!(r.tally.sent, 1_000);
    assert_eq!(r.tally.lost, 1);
    assert_eq!(r.duplicates, 1);
    assert_eq!(r.tally.deleted, 999);
    assert_eq!(
        r.deliveries, 1_000,
        "999 first deliveries and one duplicate"
    );
    assert!(
        r.drain_timed_out,
        "the lost message kept the consumers to the drain timeout"
    );
}

#[test]
fn left_messages_come_back_and_their_lateness_is_recorded() {
    let mut cfg = config(Workload::Redelivery, 400);
    cfg.fail_ratio = 0.5;
    let (r, _) = pass(&cfg, Faults::default());
    assert!(
        r.tally.left > 100 && r.tally.left < 300,
        "about half: {}",
        r.tally.left
    );
    assert_eq!(r.tally.redelivered, r.tally.left);
    assert_eq!(r.tally.deleted, 400);
    assert_eq!((r.tally.lost, r.duplicates), (0, 0));
    assert_eq!(r.recorder.lateness.len(), r.tally.left);
    assert_eq!(r.primary_name(), "redelivery lateness");
}

#[test]
fn the_latency_workload_keeps_both_measurements() {
    let cfg = config(Workload::Latency, 500);
    let (r, _) = pass(&cfg, Faults::default());
    assert_eq!((r.tally.sent, r.tally.deleted, r.tally.lost), (500, 500, 0));
    assert_eq!(r.recorder.send_to_receive.len(), 500);
    assert_eq!(r.recorder.send_to_receive_uncorrected.len(), 500);
    // The corrected latency is never below the naive one for a message.
    assert!(r.recorder.send_to_receive.max() >= r.recorder.send_to_receive_uncorrected.max());
}

#[test]
fn duration_bounded_runs_end() {
    // Open loop, so the fake broker's backlog stays small: 20,000/s for 200 ms.
    let mut cfg = config(Workload::Latency, 1);
    cfg.bound = Bound::Duration(Duration::from_millis(200));
    let (r, _) = pass(&cfg, Faults::default());
    assert_eq!(r.tally.sent, 4_000);
    assert_eq!(r.tally.deleted, r.tally.sent);
    assert_eq!(r.tally.lost, 0);
}

#[test]
fn leave_decisions_follow_the_ratio() {
    let left = (0..10_000).filter(|&s| leaves(s, 7, 0.25)).count();
    assert!((2_200..2_800).contains(&left), "{left}");
    assert!((0..100).all(|s| leaves(s, 7, 1.0)));
    assert!((0..100).all(|s| !leaves(s, 7, 0.0)));
}

#[test]
fn paced_redelivery_spreads_the_leases() {
    let mut cfg = config(Workload::Redelivery, 300);
    cfg.rate = Some(3_000);
    cfg.in_flight_max = None;
    let (r, printed) = pass(&cfg, Faults::default());
    assert!(
        printed.contains("open loop at 3000 messages/s"),
        "{printed}"
    );
    assert_eq!(
        (r.tally.left, r.tally.redelivered, r.tally.lost),
        (300, 300, 0)
    );
    // 300 messages at 3,000/s: the schedule spreads the sends over 100 ms,
    // a lower bound no machine can beat, however slow or fast.
    assert!(r.active >= Duration::from_millis(99), "{:?}", r.active);
}

#[test]
fn a_window_of_batches_loses_and_duplicates_nothing_in_every_workload() {
    for workload in [
        Workload::Throughput,
        Workload::Latency,
        Workload::Redelivery,
    ] {
        let mut cfg = config(workload, 600);
        cfg.window = 4;
        if workload == Workload::Redelivery {
            cfg.fail_ratio = 0.5;
        }
        let (r, printed) = pass(&cfg, Faults::default());
        assert!(printed.contains("up to 4 batches"), "{printed}");
        assert_eq!(r.tally.sent, 600, "{workload}");
        assert_eq!(r.tally.deleted, 600, "{workload}");
        assert_eq!(
            (r.tally.lost, r.duplicates, r.corrupt),
            (0, 0, 0),
            "{workload}"
        );
        assert_eq!(r.recorder.send_to_receive.len(), 600, "{workload}");
        assert_eq!(r.tally.redelivered, r.tally.left, "{workload}");
    }
}

#[test]
fn a_window_of_batches_still_counts_a_lost_and_a_duplicated_message() {
    let mut cfg = config(Workload::Throughput, 1_000);
    cfg.window = 8;
    let faults = Faults {
        lose_seq: Some(10),
        duplicate_seq: Some(20),
    };
    let (r, _) = pass(&cfg, faults);
    assert_eq!((r.tally.sent, r.tally.lost, r.duplicates), (1_000, 1, 1));
    assert_eq!(r.tally.deleted, 999);
}

#[test]
fn the_messages_of_one_receive_share_its_receive_time() {
    let cfg = config(Workload::Throughput, 100);
    let pass = Pass::new(&cfg, 1);
    // Four messages, all meant to be sent at time 0.
    let seqs: Vec<(u64, u64)> = (0..4).map(|seq| (seq, 0)).collect();
    let mut bodies = vec![crate::body::BodyBuf::default(); 4];
    let sent: Vec<Vec<u8>> = pass
        .stamp(&mut bodies, &seqs)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    pass.acknowledged(&seqs);

    // One receive brings the first three, and the load generator takes a
    // while over each (the sleep stands for it). All three were received
    // when the reply came, so all three get the same receive time.
    let mut batch = Deliveries::with_capacity(4);
    let mut samples = Samples::default();
    for (i, body) in sent[..3].iter().enumerate() {
        pass.classify(body, Receipt::Ids(i as u64, 0), &mut batch, &mut samples);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(batch.receipts.len(), 3);
    assert_eq!(samples.s2r.len(), 3);
    assert!(
        samples.s2r.iter().all(|&ns| ns == samples.s2r[0]),
        "{:?}",
        samples.s2r
    );

    // The next receive reads the clock again: later than the first.
    batch.clear();
    pass.classify(&sent[3], Receipt::Ids(3, 0), &mut batch, &mut samples);
    assert_eq!(samples.s2r.len(), 4);
    assert!(samples.s2r[3] > samples.s2r[0], "{:?}", samples.s2r);
}
