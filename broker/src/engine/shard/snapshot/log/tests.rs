use bytes::Bytes;
use sluice_protocol::{
    AttributeUpdate, QueueAttributesRequest, QueueKind, QueueName, ReceiveRequest, SendEntry,
    SendRequest,
};

use super::{LOG_GONE, LOG_PUT, LogGone, LogPut};
use crate::engine::section::{SectionError, SliceRead};
use crate::engine::shard::{LoadClock, Shard};
use crate::engine::slab::SlotKey;
use crate::engine::{Cluster, Op, OpResult, RegistryConfig};

fn cluster() -> Cluster {
    let mut c = Cluster::new(RegistryConfig {
        shards: 1,
        seed: 7,
        ..Default::default()
    });
    for (name, kind) in [("work", QueueKind::Standard), ("fifo", QueueKind::Fifo)] {
        let r = c.call(
            0,
            Op::CreateQueue(QueueAttributesRequest {
                queue: QueueName::new(name).unwrap(),
                attributes: AttributeUpdate {
                    kind: Some(kind),
                    ..Default::default()
                },
            }),
        );
        assert!(matches!(r, OpResult::QueueCreated { .. }), "{r:?}");
    }
    c
}

fn send(c: &mut Cluster, queue: &str, bodies: &[&str], group: Option<&str>) {
    let entries: Vec<SendEntry> = bodies
        .iter()
        .map(|b| {
            let mut e = SendEntry::new(Bytes::copy_from_slice(b.as_bytes()));
            if let Some(g) = group {
                e.group = Some(sluice_protocol::MessageGroupId::new(g).unwrap());
                e.dedup_key = Some(Bytes::copy_from_slice(b.as_bytes()));
            }
            e
        })
        .collect();
    let op = Op::Send(SendRequest::new(QueueName::new(queue).unwrap(), &entries).unwrap());
    match c.call(0, op) {
        OpResult::Sent(r) => assert!(r.iter().all(Result::is_ok), "{r:?}"),
        other => panic!("{other:?}"),
    }
}

fn receive(c: &mut Cluster, queue: &str, max: u16) -> Vec<String> {
    let op = Op::Receive(ReceiveRequest {
        queue: QueueName::new(queue).unwrap(),
        max_messages: max,
        visibility_timeout_ms: None,
        wait_ms: Some(0),
        bind_leases: false,
        with_source: false,
    });
    match c.call(0, op) {
        OpResult::Received(m) => m
            .iter()
            .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn keys(s: &Shard) -> Vec<SlotKey> {
    s.messages.keys().collect()
}

fn clock(c: &Cluster) -> LoadClock {
    LoadClock {
        now_ns: c.now_ns(),
        wall_ms: c.wall_ms(),
        saved_wall_ms: c.wall_ms(),
    }
}

/// A log of every message of `c` put, then the first `gone` of them gone.
fn log_of(c: &Cluster, gone: usize) -> Vec<u8> {
    let s = c.shard(0);
    let mut out = Vec::new();
    let all = keys(s);
    for &k in &all {
        s.log_put(&mut out, k, LogPut::Sent);
    }
    for &k in all.iter().take(gone) {
        Shard::log_gone(&mut out, k, LogGone::Deleted);
    }
    out
}

#[test]
fn a_replayed_log_restores_the_messages_it_put_and_not_those_it_removed() {
    let mut a = cluster();
    send(&mut a, "work", &["w0", "w1", "w2", "w3"], None);
    send(&mut a, "fifo", &["f0", "f1", "f2"], Some("g"));
    send(&mut a, "fifo", &["h0"], Some("h"));
    let log = log_of(&a, 2);
    let mut b = cluster();
    let load = b
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&log, 0), clock(&a))
        .unwrap();
    assert_eq!(load.messages(), 8, "every put counted");
    b.check_invariants().unwrap();
    // The first two keys were work's w0 and w1.
    assert_eq!(receive(&mut b, "work", 10), ["w2", "w3"]);
    // A FIFO queue's groups come back in order and locked as a send
    // leaves them: one receive takes g's run, then h's.
    let mut fifo = receive(&mut b, "fifo", 10);
    fifo.sort();
    assert_eq!(fifo, ["f0", "f1", "f2", "h0"]);
    b.check_invariants().unwrap();
    // Sends after the replay take later sequence numbers, and fresh slots.
    send(&mut b, "work", &["w4"], None);
    assert_eq!(receive(&mut b, "work", 10), ["w4"]);
}

#[test]
fn a_put_twice_is_refused_and_a_gone_queue_is_skipped() {
    let mut a = cluster();
    send(&mut a, "work", &["w0"], None);
    let once = log_of(&a, 0);
    let mut twice = once.clone();
    twice.extend_from_slice(&once);
    let mut b = cluster();
    let e = b
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&twice, 0), clock(&a))
        .unwrap_err()
        .to_string();
    assert!(e.contains("already put"), "{e}");
    // Put, gone, and put again at the generation it had: refused, since
    // what the first left behind would name the second.
    let key = keys(a.shard(0))[0];
    let mut again = once.clone();
    Shard::log_gone(&mut again, key, LogGone::Deleted);
    again.extend_from_slice(&once);
    let mut b = cluster();
    let e = b
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&again, 0), clock(&a))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not past the generation"), "{e}");
    // A cluster without the queue skips its puts.
    let mut c = Cluster::new(RegistryConfig {
        shards: 1,
        seed: 7,
        ..Default::default()
    });
    let load = c
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&once, 0), clock(&a))
        .unwrap();
    assert_eq!(load.messages(), 0);
    c.check_invariants().unwrap();
    assert!(c.messages().is_empty());
}

#[test]
fn a_bad_log_is_refused_with_its_offset_never_a_panic() {
    let mut a = cluster();
    send(&mut a, "work", &["w0", "w1"], None);
    send(&mut a, "fifo", &["f0"], Some("g"));
    let log = log_of(&a, 1);
    // Every cut short: refused, or (at a record's end) replayed so far.
    for cut in 0..log.len() {
        let mut b = cluster();
        let r = b
            .shard_mut(0)
            .replay_log(&mut SliceRead::new(&log[..cut], 0), clock(&a));
        if let Err(e) = r {
            let SectionError::Invalid { offset, .. } = e else {
                panic!("{e}");
            };
            assert!(offset <= cut as u64, "cut {cut}: offset {offset}");
        }
    }
    // Every byte changed: refused or replayed, and the shard consistent
    // when replayed.
    for i in 0..log.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut bad = log.clone();
            bad[i] ^= x;
            let mut b = cluster();
            if b.shard_mut(0)
                .replay_log(&mut SliceRead::new(&bad, 0), clock(&a))
                .is_ok()
            {
                b.check_invariants()
                    .unwrap_or_else(|e| panic!("byte {i} ^ {x:#x}: {e}"));
            }
        }
    }
    // A kind that is no record; a gone of a message never put (its queue
    // deleted since) is skipped.
    let mut b = cluster();
    let e = b
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&[9], 40), clock(&a))
        .unwrap_err()
        .to_string();
    assert!(e.contains("record kind") && e.contains("byte 40"), "{e}");
    let mut gone = vec![LOG_GONE];
    gone.extend_from_slice(&[0; 9]);
    let load = b
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&gone, 0), clock(&a))
        .unwrap();
    assert_eq!(load.messages(), 0);
    b.check_invariants().unwrap();
    gone[9] = 5;
    let e = b
        .shard_mut(0)
        .replay_log(&mut SliceRead::new(&gone, 0), clock(&a))
        .unwrap_err()
        .to_string();
    assert!(e.contains("why") && e.contains("byte 9"), "{e}");
    assert_eq!(LOG_PUT, log[0]);
}

#[test]
fn records_are_cut_into_commits_between_records_only() {
    let mut a = cluster();
    send(&mut a, "work", &["w0", "w1", "w2"], None);
    let log = log_of(&a, 3);
    // Three puts, then three gones of 10 bytes each.
    let put = (log.len() - 30) / 3;
    let cut = |max| super::whole_records_within(&log, max);
    assert_eq!(cut(log.len()), log.len());
    assert_eq!(cut(usize::MAX), log.len());
    assert_eq!(cut(put), put);
    assert_eq!(cut(2 * put + 1), 2 * put);
    assert_eq!(cut(3 * put + 19), 3 * put + 10);
    // A first record larger than the limit is taken whole.
    assert_eq!(cut(1), put);
    assert_eq!(super::whole_records_within(&log[3 * put..], 5), 10);
    assert_eq!(super::whole_records_within(&[], 5), 0);
    // Commits cut so replay one by one to what the whole log does.
    let mut b = cluster();
    let mut at = 0;
    let mut readers = Vec::new();
    while at < log.len() {
        let n = super::whole_records_within(&log[at..], put + 10);
        readers.push(SliceRead::new(&log[at..at + n], at as u64));
        at += n;
    }
    assert_eq!(readers.len(), 4);
    let mut commits: Vec<_> = readers.iter_mut().map(|r| (r, clock(&a))).collect();
    b.shard_mut(0).replay_commits(&mut commits).unwrap();
    b.check_invariants().unwrap();
    assert!(receive(&mut b, "work", 10).is_empty());
}
