//! Send: batches, sizes, depth, memory, delays, dedup, ids, attributes.

use std::collections::HashSet;

use crate::engine_util::*;
use bytes::Bytes;
use sluice_broker::engine::{Cluster, RegistryConfig};
use sluice_protocol::Millis;
use sluice_protocol::{AttributeUpdate, ErrorCode, SendBatch, SendEntry};

/// An entry with body `body` and dedup key `key`.
fn keyed(body: &str, key: &str) -> SendEntry {
    let mut e = entry(body);
    e.dedup_key = Some(Bytes::copy_from_slice(key.as_bytes()));
    e
}

#[test]
fn batch_limits() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    let r = call(
        &mut c,
        0,
        send_op("q", &(0..1025).map(|_| entry("x")).collect::<Vec<_>>()),
    );
    assert_eq!(error_code(r), ErrorCode::BatchTooLarge);
    let r = call(&mut c, 0, send_op("q", &[]));
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    let ok = send_entries(&mut c, 0, "q", (0..1024).map(|_| entry("x")).collect());
    assert!(ok.iter().all(Result::is_ok));
    let r = call(&mut c, 0, send_op("nope", &[entry("x")]));
    assert_eq!(error_code(r), ErrorCode::QueueNotFound);
}

#[test]
fn message_too_large_counts_body_and_attributes_per_entry() {
    let mut c = cluster(1);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            message_bytes_max: Some(10),
            ..Default::default()
        },
    );
    let mut with_attrs = entry("12345");
    with_attrs.attributes = attrs(&[("ab", "cde")]);
    let mut too_big = entry("123456");
    too_big.attributes = attrs(&[("ab", "cde")]);
    let r = send_entries(
        &mut c,
        0,
        "q",
        vec![with_attrs, too_big, entry("12345678901")],
    );
    assert!(r[0].is_ok());
    assert_eq!(
        r[1].as_ref().unwrap_err().code(),
        ErrorCode::MessageTooLarge
    );
    assert_eq!(
        r[2].as_ref().unwrap_err().code(),
        ErrorCode::MessageTooLarge
    );
    assert_eq!(stats(&mut c, "q").sent, 1);
}

#[test]
fn per_entry_argument_errors() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    let mut long_delay = entry("a");
    long_delay.delay = Some(Millis::new(15 * 60 * 1000 + 1));
    // A key above 128 bytes cannot even be put in a batch: the engine never
    // sees one.
    let mut long_key = entry("b");
    long_key.dedup_key = Some(Bytes::from(vec![b'k'; 129]));
    assert!(SendBatch::from_entries([&long_key]).is_err());
    // An empty key is "no key" on the wire: the entry is sent, undeduped.
    let mut empty_key = entry("c");
    empty_key.dedup_key = Some(Bytes::new());
    let r = send_entries(
        &mut c,
        0,
        "q",
        vec![long_delay, empty_key.clone(), empty_key, entry("ok")],
    );
    assert_eq!(
        r[0].as_ref().unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert!(
        r[1..]
            .iter()
            .all(|r| r.as_ref().is_ok_and(|ok| !ok.duplicate))
    );
}

#[test]
fn queue_full_counts_every_state_across_shards() {
    let mut c = cluster(2);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            max_depth: Some(3),
            ..Default::default()
        },
    );
    send(&mut c, 0, "q", "a");
    let mut d = entry("delayed");
    d.delay = Some(Millis::new(1000));
    assert!(send_entries(&mut c, 1, "q", vec![d])[0].is_ok());
    send(&mut c, 1, "q", "b");
    let got = receive(&mut c, 1, "q", 1);
    assert_eq!(got.len(), 1);
    for s in 0..2 {
        let r = send_entries(&mut c, s, "q", vec![entry("x")]);
        assert_eq!(r[0].as_ref().unwrap_err().code(), ErrorCode::QueueFull);
    }
    assert_eq!(delete_one(&mut c, 1, "q", got[0].receipt), Ok(()));
    send(&mut c, 0, "q", "room again");
    let s = stats(&mut c, "q");
    assert_eq!(s.sent, 4);
}

#[test]
fn busy_when_memory_is_spent_while_receive_and_delete_go_on() {
    let mut c = Cluster::new(RegistryConfig {
        shards: 1,
        seed: 1,
        memory_bytes_max: 1000,
        ..Default::default()
    });
    create(&mut c, "q", AttributeUpdate::default());
    let body = "x".repeat(200);
    let r = send_entries(&mut c, 0, "q", (0..5).map(|_| entry(&body)).collect());
    let busy = r
        .iter()
        .filter(|e| matches!(e, Err(e) if e.code() == ErrorCode::Busy))
        .count();
    let ok = r.iter().filter(|e| e.is_ok()).count();
    assert!(ok >= 1 && busy >= 1, "{r:?}");
    assert_eq!(ok + busy, 5);
    assert_eq!(stats(&mut c, "q").sent, ok as u64);
    let got = receive(&mut c, 0, "q", 10);
    assert_eq!(got.len(), ok);
    let receipts = got.iter().map(|m| m.receipt).collect();
    assert!(delete(&mut c, 0, "q", receipts).iter().all(Result::is_ok));
    assert!(send_entries(&mut c, 0, "q", vec![entry(&body)])[0].is_ok());
}

#[test]
fn delay_per_message_and_queue_default() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(
            &mut c,
            "q",
            AttributeUpdate {
                delay: Some(Millis::new(1000)),
                ..Default::default()
            },
        );
        let mut now = entry("now");
        now.delay = Some(Millis::new(0));
        let mut later = entry("later");
        later.delay = Some(Millis::new(3000));
        send_entries(&mut c, 0, "q", vec![entry("default"), now, later]);
        let s = stats(&mut c, "q");
        assert_eq!((s.visible, s.delayed), (1, 2));
        let got = receive(&mut c, shards as usize - 1, "q", 10);
        assert_eq!(
            got.iter().map(|m| &m.body[..]).collect::<Vec<_>>(),
            vec![b"now"]
        );
        c.advance_ms(999);
        assert!(receive(&mut c, 0, "q", 10).is_empty());
        c.advance_ms(1);
        let got = receive(&mut c, 0, "q", 10);
        assert_eq!(
            got.iter().map(|m| &m.body[..]).collect::<Vec<_>>(),
            vec![b"default"]
        );
        c.advance_ms(2000);
        assert_eq!(receive(&mut c, 0, "q", 10).len(), 1);
    }
}

#[test]
fn dedup_within_batch_across_shards_and_window() {
    let mut c = cluster(2);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            dedup_window: Some(Millis::new(10_000)),
            ..Default::default()
        },
    );
    let r = send_entries(
        &mut c,
        0,
        "q",
        vec![keyed("a", "k1"), keyed("b", "k1"), keyed("c", "k2")],
    );
    let first = r[0].as_ref().unwrap();
    assert!(!first.duplicate);
    let dup = r[1].as_ref().unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.id, first.id);
    assert!(!r[2].as_ref().unwrap().duplicate);
    // The other shard sees the same window.
    c.advance_ms(6000);
    let r = send_entries(&mut c, 1, "q", vec![keyed("d", "k1")]);
    assert!(r[0].as_ref().unwrap().duplicate);
    assert_eq!(r[0].as_ref().unwrap().id, first.id);
    let s = stats(&mut c, "q");
    assert_eq!(s.sent, 2, "duplicates are not counted");
    // Duplicates did not refresh the window: it ends 10 s after the first.
    c.advance_ms(4000);
    let r = send_entries(&mut c, 1, "q", vec![keyed("e", "k1")]);
    assert!(!r[0].as_ref().unwrap().duplicate);
    assert_ne!(r[0].as_ref().unwrap().id, first.id);
    // Window 0 disables dedup.
    create(
        &mut c,
        "nodedup",
        AttributeUpdate {
            dedup_window: Some(Millis::new(0)),
            ..Default::default()
        },
    );
    let r = send_entries(&mut c, 0, "nodedup", vec![keyed("a", "k"), keyed("b", "k")]);
    assert!(r.iter().all(|e| !e.as_ref().unwrap().duplicate));
}

#[test]
fn a_keyed_send_that_fails_records_no_key() {
    // A send checks its key in as it looks it up; when it then fails
    // (queue full), the key is taken back, and a later send of it is no
    // duplicate, including one whose key replaced an entry past its window.
    let mut c = cluster(1);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            max_depth: Some(1),
            dedup_window: Some(Millis::new(1_000)),
            ..Default::default()
        },
    );
    let a = send_entries(&mut c, 0, "q", vec![keyed("a", "k1")]);
    let a_id = a[0].as_ref().unwrap().id;
    c.advance_ms(1_000);
    // k2 new, k1 past its window: both fail, and both are taken back.
    let r = send_entries(&mut c, 0, "q", vec![keyed("b", "k2"), keyed("x", "k1")]);
    for e in &r {
        assert_eq!(e.as_ref().unwrap_err().code(), ErrorCode::QueueFull);
    }
    c.check_invariants().unwrap();
    let got = receive(&mut c, 0, "q", 1);
    assert_eq!(delete_one(&mut c, 0, "q", got[0].receipt), Ok(()));
    let r = send_entries(&mut c, 0, "q", vec![keyed("c", "k2")]);
    let c_sent = r[0].as_ref().unwrap();
    assert!(
        !c_sent.duplicate,
        "k2 was not recorded by the send that failed"
    );
    let r = send_entries(&mut c, 0, "q", vec![keyed("d", "k2"), keyed("y", "k1")]);
    assert!(r[0].as_ref().unwrap().duplicate);
    assert_eq!(r[0].as_ref().unwrap().id, c_sent.id);
    assert_eq!(r[1].as_ref().unwrap_err().code(), ErrorCode::QueueFull);
    let got = receive(&mut c, 0, "q", 1);
    assert_eq!(delete_one(&mut c, 0, "q", got[0].receipt), Ok(()));
    let r = send_entries(&mut c, 0, "q", vec![keyed("y", "k1")]);
    let y = r[0].as_ref().unwrap();
    assert!(!y.duplicate && y.id != a_id);
    c.check_invariants().unwrap();
}

#[test]
fn a_batch_without_a_max_depth_counts_only_what_it_stored() {
    // A queue without a max depth: the batch takes its room in the depth
    // at once and gives back what its duplicates and refused entries did
    // not take (the invariants compare the depth with the messages held).
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(
            &mut c,
            "q",
            AttributeUpdate {
                dedup_window: Some(Millis::new(10_000)),
                ..Default::default()
            },
        );
        let mut late = entry("late");
        late.delay = Some(Millis::new(16 * 60 * 1000));
        let r = send_entries(
            &mut c,
            0,
            "q",
            vec![keyed("a", "k1"), keyed("b", "k1"), late, entry("c")],
        );
        assert!(r[1].as_ref().unwrap().duplicate);
        assert_eq!(
            r[2].as_ref().unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        c.check_invariants().unwrap();
        let s = stats(&mut c, "q");
        assert_eq!((s.sent, s.visible), (2, 2));
    }
}

#[test]
fn ids_are_unique_and_differ_across_runs() {
    let mut ids = HashSet::new();
    for seed in [1u64, 2] {
        let mut c = Cluster::new(RegistryConfig {
            shards: 2,
            seed,
            ..Default::default()
        });
        create(&mut c, "q", AttributeUpdate::default());
        for s in 0..2 {
            let r = send_entries(&mut c, s, "q", (0..100).map(|_| entry("x")).collect());
            for e in r {
                assert!(ids.insert(e.unwrap().id));
            }
        }
    }
    assert_eq!(ids.len(), 400);
}

#[test]
fn delivered_message_carries_everything() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    let mut e = entry("body");
    e.attributes = attrs(&[("trace", "t-1"), ("kind", "order")]);
    let id = send_entries(&mut c, 0, "q", vec![e]).remove(0).unwrap().id;
    let sent_at = c.wall_ms();
    c.advance_ms(5);
    let got = receive(&mut c, 1, "q", 1);
    let m = &got[0];
    assert_eq!(m.id, id);
    assert_eq!(&m.body[..], b"body");
    assert_eq!(
        m.attributes.iter().collect::<Vec<_>>(),
        vec![("trace", "t-1"), ("kind", "order")]
    );
    assert_eq!((m.receive_count, m.delivery()), (1, 1));
    assert_eq!(m.sent_at_ms, sent_at);
    assert_eq!(m.first_received_at_ms(), sent_at + 5);
    assert_eq!(m.receipt.shard, 0, "the owner leased it");
}
