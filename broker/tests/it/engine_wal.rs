//! The write-ahead log's records on the engine: what a cluster's shards
//! log while they serve, replayed onto a fresh cluster with the same
//! queues, gives back the same messages, in the same queues and groups:
//! every way a message arrives or leaves writes its record.

use crate::engine_util::*;
use bytes::Bytes;
use sluice_broker::engine::section::SliceRead;
use sluice_broker::engine::shard::LoadClock;
use sluice_broker::engine::{Cluster, Op, OpResult};
use sluice_protocol::{
    AttributeUpdate, DeleteRequest, ErrorCode, MessageGroupId, Millis, QueueKind, RedrivePolicy,
    SendEntry, Setting,
};

const SHARDS: u16 = 2;

fn queues(c: &mut Cluster) {
    create(c, "dlq", AttributeUpdate::default());
    create(
        c,
        "work",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1_000)),
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receives: 1,
            }),
            ..Default::default()
        },
    );
    create(
        c,
        "fifo",
        AttributeUpdate {
            kind: Some(QueueKind::Fifo),
            ..Default::default()
        },
    );
    create(c, "gone", AttributeUpdate::default());
}

/// Each message of `c`: its queue, id and group, sorted.
fn contents(c: &Cluster) -> Vec<(String, u128, Option<String>)> {
    let mut v: Vec<_> = c
        .messages()
        .into_iter()
        .map(|m| (m.queue.to_string(), m.id.0, m.group.map(String::from)))
        .collect();
    v.sort();
    v
}

#[test]
fn a_replayed_log_holds_what_the_cluster_held() {
    let mut a = cluster(SHARDS);
    queues(&mut a);
    for s in 0..usize::from(SHARDS) {
        a.shard_mut(s).set_logging(true);
    }
    // Sends on both shards, to a standard and a FIFO queue.
    for i in 0..30 {
        send(&mut a, i % 2, "work", &format!("w{i}"));
    }
    for i in 0..12 {
        let mut e = entry(&format!("f{i}"));
        e.group = Some(MessageGroupId::new(&format!("g{}", i % 3)).unwrap());
        e.dedup_key = Some(bytes::Bytes::from(format!("k{i}")));
        assert!(send_entries(&mut a, i % 2, "fifo", vec![e])[0].is_ok());
    }
    for i in 0..5 {
        send(&mut a, 0, "gone", &format!("x{i}"));
    }
    // Deletes: half of a receive.
    let got = receive(&mut a, 0, "work", 10);
    let half: Vec<_> = got.iter().take(5).map(|m| m.receipt).collect();
    assert!(delete(&mut a, 0, "work", half).iter().all(Result::is_ok));
    let fifo = receive(&mut a, 1, "fifo", 4);
    assert!(!fifo.is_empty());
    assert!(delete_one(&mut a, 1, "fifo", fifo[0].receipt).is_ok());
    // Leases that run out, and a second receive past max receives: the
    // messages go to the dead-letter queue.
    a.advance_ms(1_500);
    let again = receive(&mut a, 0, "work", 40);
    assert!(!again.is_empty());
    a.advance_ms(1_500);
    let moved = receive(&mut a, 0, "work", 40);
    let dlq = stats(&mut a, "dlq");
    assert!(dlq.moved_in > 0, "{dlq:?} ({} received)", moved.len());
    // A redrive back, and a purge.
    let (redriven, _) = redrive(&mut a, 0, "dlq", 3);
    assert!(redriven > 0);
    match call(&mut a, 0, Op::PurgeQueue { queue: qn("gone") }) {
        OpResult::Purged { .. } => {}
        other => panic!("{other:?}"),
    }
    let expected = contents(&a);
    assert!(expected.len() > 20, "{}", expected.len());

    let mut b = cluster(SHARDS);
    queues(&mut b);
    for s in 0..usize::from(SHARDS) {
        let mut log = Vec::new();
        a.shard_mut(s).take_log(&mut log);
        assert!(!log.is_empty());
        let clock = LoadClock {
            now_ns: b.now_ns(),
            wall_ms: b.wall_ms(),
            saved_wall_ms: b.wall_ms(),
        };
        b.shard_mut(s)
            .replay_log(&mut SliceRead::new(&log, 0), clock)
            .unwrap_or_else(|e| panic!("shard {s}: {e}"));
    }
    check(&mut b);
    assert_eq!(contents(&b), expected);
    // The FIFO queue's dedup keys came back with the messages: a retry of
    // a send that the crash would have cut is a duplicate of the message
    // sent first (k0's was deleted, its key still counts).
    for k in ["k0", "k5"] {
        let mut e = entry("retried");
        e.group = Some(MessageGroupId::new("g0").unwrap());
        e.dedup_key = Some(bytes::Bytes::from(k));
        let r = send_entries(&mut b, 0, "fifo", vec![e]).remove(0).unwrap();
        assert!(r.duplicate, "{k}");
    }
    // The counters agree on what arrived and what left.
    for q in ["work", "dlq", "fifo", "gone"] {
        let (sa, sb) = (stats(&mut a, q), stats(&mut b, q));
        assert_eq!(
            (
                sa.sent,
                sa.moved_in,
                sa.deleted,
                sa.dead_lettered,
                sa.redriven,
                sa.purged
            ),
            (
                sb.sent,
                sb.moved_in,
                sb.deleted,
                sb.dead_lettered,
                sb.redriven,
                sb.purged
            ),
            "{q}"
        );
    }
    // And a second take finds nothing new.
    let mut rest = Vec::new();
    a.shard_mut(0).take_log(&mut rest);
    assert!(rest.is_empty());
}

#[test]
fn a_replay_brings_leased_messages_back_visible() {
    let mut a = cluster(1);
    queues(&mut a);
    a.shard_mut(0).set_logging(true);
    for i in 0..10 {
        send(&mut a, 0, "dlq", &format!("w{i}"));
    }
    let got = receive_vis(&mut a, 0, "dlq", 4, Some(60_000));
    assert_eq!(got.len(), 4);
    assert!(delete_one(&mut a, 0, "dlq", got[0].receipt).is_ok());
    let mut log = Vec::new();
    a.shard_mut(0).take_log(&mut log);
    let mut b = cluster(1);
    queues(&mut b);
    let clock = LoadClock {
        now_ns: b.now_ns(),
        wall_ms: b.wall_ms(),
        saved_wall_ms: a.wall_ms(),
    };
    b.shard_mut(0)
        .replay_log(&mut SliceRead::new(&log, 0), clock)
        .unwrap();
    check(&mut b);
    // A receive logs the counters it moved, not the lease: the three still
    // leased come back visible, received once before (this receive is
    // their second), with the six never received.
    let again = receive(&mut b, 0, "dlq", 20);
    assert_eq!(again.len(), 9);
    let mut twice: Vec<_> = again
        .iter()
        .filter(|m| m.receive_count == 2)
        .map(|m| m.id)
        .collect();
    twice.sort_unstable();
    let mut leased: Vec<_> = got[1..].iter().map(|m| m.id).collect();
    leased.sort_unstable();
    assert_eq!(twice, leased);
    assert_eq!(again.iter().filter(|m| m.receive_count == 1).count(), 6);
    assert!(again.iter().all(|m| m.id != got[0].id), "the deleted one");
}

#[test]
fn receive_counts_survive_a_replay_and_a_dead_letter_move_follows_them() {
    let mut a = cluster(1);
    queues(&mut a);
    a.shard_mut(0).set_logging(true);
    // "work" sends its messages to "dlq" once received once.
    send(&mut a, 0, "work", "poison");
    assert_eq!(receive_vis(&mut a, 0, "work", 1, Some(60_000)).len(), 1);
    let mut log = Vec::new();
    a.shard_mut(0).take_log(&mut log);
    let mut b = cluster(1);
    queues(&mut b);
    let clock = LoadClock {
        now_ns: b.now_ns(),
        wall_ms: b.wall_ms(),
        saved_wall_ms: a.wall_ms(),
    };
    b.shard_mut(0)
        .replay_log(&mut SliceRead::new(&log, 0), clock)
        .unwrap();
    check(&mut b);
    // Its receive counted before the crash: the next one moves it.
    assert!(receive(&mut b, 0, "work", 10).is_empty());
    let dead = receive(&mut b, 0, "dlq", 10);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].receive_count, 2);
}

/// A SEND of one FIFO entry, its body its dedup key.
fn fifo_send(body: &str) -> Op {
    send_op("fifo", &[fifo_entry(body, body)])
}

/// Two shards that log and hold their messages to each other for syncs,
/// and a FIFO send on each: a FIFO queue's messages live on its home
/// shard, so one send is local and answered, the other forwarded there,
/// its result coming back over a ring. The cluster, the tickets, the home
/// shard and the other.
fn a_send_forwarded_home() -> (Cluster, [u64; 2], usize, usize) {
    let mut c = cluster(2);
    queues(&mut c);
    for s in 0..2 {
        c.shard_mut(s).set_logging(true);
        c.shard_mut(s).set_hold_for_sync(true);
    }
    let tickets = [c.submit(0, fifo_send("a")), c.submit(1, fifo_send("b"))];
    let done: Vec<bool> = tickets.iter().map(|&t| c.take(t).is_some()).collect();
    let (home, away) = match done[..] {
        [true, false] => (0, 1),
        [false, true] => (1, 0),
        _ => panic!("one send is local and answered, the other waits: {done:?}"),
    };
    (c, tickets, home, away)
}

#[test]
fn a_result_another_shard_computed_waits_for_its_sync() {
    let (mut c, tickets, home, away) = a_send_forwarded_home();
    // The home shard's records not yet taken, then taken and not synced:
    // the forwarded result waits.
    c.settle();
    assert!(c.take(tickets[away]).is_none());
    let mut log = Vec::new();
    c.shard_mut(home).take_log(&mut log);
    c.settle();
    assert!(c.take(tickets[away]).is_none());
    // Synced short of its records: still waits; synced past them: it goes.
    assert_eq!(c.shard_mut(home).log_synced(1), 0);
    c.settle();
    assert!(c.take(tickets[away]).is_none());
    assert_eq!(c.shard_mut(home).log_synced(log.len() as u64), 1);
    c.settle();
    assert!(matches!(c.take(tickets[away]), Some(OpResult::Sent(r)) if r[0].is_ok()));
}

/// While a shard's log fails, what it sends other shards no longer waits
/// for a sync (it claims none: the entries forwarded to it are refused),
/// and what waited before still waits for its records.
#[test]
fn a_failing_log_holds_nothing_new_and_keeps_what_waited() {
    let (mut c, tickets, home, away) = a_send_forwarded_home();
    c.settle();
    assert!(
        c.take(tickets[away]).is_none(),
        "the forwarded result waits"
    );
    c.shard_mut(home)
        .set_log_failing(Some("No space left on device"));
    let refused = c.submit(away, fifo_send("c"));
    c.settle();
    match c.take(refused) {
        Some(OpResult::Sent(r)) => {
            assert_eq!(r[0].as_ref().err().map(|e| e.code()), Some(ErrorCode::Busy));
        }
        other => panic!("{other:?}"),
    }
    assert!(c.take(tickets[away]).is_none(), "what waited still waits");
    c.shard_mut(home).set_log_failing(None);
    let mut log = Vec::new();
    c.shard_mut(home).take_log(&mut log);
    assert_eq!(c.shard_mut(home).log_synced(log.len() as u64), 1);
    c.settle();
    assert!(matches!(c.take(tickets[away]), Some(OpResult::Sent(r)) if r[0].is_ok()));
}

/// A FIFO entry of group `g0` with dedup key `key`.
fn fifo_entry(body: &str, key: &str) -> SendEntry {
    let mut e = entry(body);
    e.group = Some(MessageGroupId::new("g0").unwrap());
    e.dedup_key = Some(Bytes::from(key.to_owned()));
    e
}

fn refused(r: OpResult) -> String {
    match r {
        OpResult::Error(e) => {
            assert_eq!(e.code(), ErrorCode::Busy, "{e}");
            e.to_string()
        }
        other => panic!("not refused: {other:?}"),
    }
}

/// A shard whose log the server cannot write refuses what needs a record
/// (sends, deletes, purges and redrives arriving there, and the send and
/// delete entries other shards forward to it) with `Busy`, changing
/// nothing, and goes on serving receives and visibility changes; once the
/// log can be written again, it takes them all again.
#[test]
fn a_shard_whose_log_fails_refuses_changes_and_serves_receives() {
    let mut c = cluster(SHARDS);
    queues(&mut c);
    for s in 0..usize::from(SHARDS) {
        c.shard_mut(s).set_logging(true);
    }
    // A FIFO queue's messages live on its home shard: the one to fail.
    let first = send_entries(&mut c, 0, "fifo", vec![fifo_entry("f0", "k0")]);
    let h = ((first[0].as_ref().unwrap().id.0 >> 48) & 0xffff) as usize;
    let other = 1 - h;
    for i in 0..4 {
        send(&mut c, h, "work", &format!("w{i}"));
    }
    send(&mut c, h, "dlq", "d0");
    let before = contents(&c);
    c.shard_mut(h)
        .set_log_failing(Some("No space left on device (os error 28)"));
    for op in [
        send_op("work", &[entry("x")]),
        Op::PurgeQueue { queue: qn("work") },
        Op::Redrive {
            queue: qn("dlq"),
            max_messages: 1,
            to: Some(qn("work")),
        },
    ] {
        let why = refused(call(&mut c, h, op));
        assert!(why.contains("os error 28"), "{why}");
    }
    let forwarded = send_entries(&mut c, other, "fifo", vec![fifo_entry("f1", "k1")]);
    assert_eq!(
        forwarded[0].as_ref().err().map(|e| e.code()),
        Some(ErrorCode::Busy)
    );
    assert_eq!(contents(&c), before);
    // Receives and visibility changes go on, receives without records.
    let mut waiting = Vec::new();
    c.shard_mut(h).take_log(&mut waiting);
    waiting.clear();
    let got = receive(&mut c, h, "work", 2);
    assert_eq!(got.len(), 2);
    c.shard_mut(h).take_log(&mut waiting);
    assert!(waiting.is_empty(), "{} bytes of records", waiting.len());
    assert_eq!(change_vis(&mut c, h, "work", got[0].receipt, 5_000), Ok(()));
    let delete_op = |r| {
        Op::Delete(DeleteRequest {
            queue: qn("work"),
            receipts: vec![r],
        })
    };
    refused(call(&mut c, h, delete_op(got[0].receipt)));
    assert_eq!(
        delete_one(&mut c, other, "work", got[1].receipt),
        Err(ErrorCode::Busy)
    );
    assert_eq!(contents(&c), before);
    // The disk is back.
    c.shard_mut(h).set_log_failing(None);
    assert_eq!(delete_one(&mut c, other, "work", got[1].receipt), Ok(()));
    match call(&mut c, h, delete_op(got[0].receipt)) {
        OpResult::Deleted(r) => assert_eq!(r.len(), 1, "{r:?}"),
        other => panic!("{other:?}"),
    }
    send(&mut c, h, "work", "w4");
    let again = send_entries(&mut c, other, "fifo", vec![fifo_entry("f1", "k1")]);
    assert!(again[0].is_ok(), "{again:?}");
    // Two deleted, two sent.
    assert_eq!(contents(&c).len(), before.len());
}
