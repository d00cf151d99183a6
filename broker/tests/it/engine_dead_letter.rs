//! Dead-lettering and redrive.

use crate::engine_util::*;
use sluice_broker::engine::{Cluster, Op, OpResult};
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::message::SOURCE_ATTRIBUTE;
use sluice_protocol::{AttributeUpdate, ErrorCode, ReceiveRequest, ReceivedMessage, RedrivePolicy};

fn setup(shards: u16, max_receives: u16) -> Cluster {
    let mut c = cluster(shards);
    create(&mut c, "dlq", AttributeUpdate::default());
    create(
        &mut c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receives,
            }),
            ..Default::default()
        },
    );
    c
}

fn receive_with_source(c: &mut Cluster, shard: usize, queue: &str) -> Vec<ReceivedMessage> {
    let request = ReceiveRequest {
        queue: qn(queue),
        max_messages: 10,
        visibility_timeout_ms: Some(1000),
        wait_ms: Some(0),
        bind_leases: false,
        with_source: true,
    };
    match call(c, shard, Op::Receive(request)) {
        OpResult::Received(m) => m,
        other => panic!("receive: {other:?}"),
    }
}

/// Receives of `q` until the message `body` is dead-lettered into `dlq`.
fn dead_letter(c: &mut Cluster, body: &str, pairs: &[(&str, &str)]) {
    let mut e = entry(body);
    e.attributes = attrs(pairs);
    assert!(send_entries(c, 0, "q", vec![e]).remove(0).is_ok());
    assert_eq!(receive(c, 0, "q", 1).len(), 1);
    c.advance_ms(1000);
    assert!(receive(c, 0, "q", 10).is_empty());
}

#[test]
fn a_receive_that_asks_is_told_a_dead_letters_source() {
    for shards in [1u16, 2] {
        let mut c = setup(shards, 1);
        dead_letter(&mut c, "poison", &[("k", "v")]);
        send(&mut c, 0, "dlq", "sent straight to the dlq");
        // From the last shard too: a steal carries the question along.
        let mut got = receive_with_source(&mut c, shards as usize - 1, "dlq");
        if got.len() < 2 {
            got.extend(receive_with_source(&mut c, 0, "dlq"));
        }
        got.sort_by_key(|m| m.body.clone());
        assert_eq!(got.len(), 2, "{shards} shard(s)");
        assert_eq!(&got[0].body[..], b"poison");
        assert_eq!(got[0].attributes.get(SOURCE_ATTRIBUTE), Some("q"));
        assert_eq!(got[0].attributes.get("k"), Some("v"));
        assert_eq!(got[1].attributes.get(SOURCE_ATTRIBUTE), None);
        // A receive that does not ask is not told.
        c.advance_ms(1000);
        for m in receive(&mut c, 0, "dlq", 10) {
            assert_eq!(m.attributes.get(SOURCE_ATTRIBUTE), None);
            assert_eq!(delete_one(&mut c, 0, "dlq", m.receipt), Ok(()));
        }
        for m in receive(&mut c, shards as usize - 1, "dlq", 10) {
            assert_eq!(delete_one(&mut c, 0, "dlq", m.receipt), Ok(()));
        }
        check(&mut c);
    }
}

#[test]
fn a_source_that_does_not_fit_or_is_gone_is_left_out() {
    let mut c = setup(1, 1);
    // Sixteen attributes: no room for a seventeenth.
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
    dead_letter(&mut c, "full", &pairs);
    let got = receive_with_source(&mut c, 0, "dlq");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attributes.len(), 16);
    assert_eq!(got[0].attributes.get(SOURCE_ATTRIBUTE), None);
    // An attribute of that name sent by the producer stays as it was.
    dead_letter(&mut c, "named", &[(SOURCE_ATTRIBUTE, "mine")]);
    let got = receive_with_source(&mut c, 0, "dlq");
    let named = got.iter().find(|m| &m.body[..] == b"named").unwrap();
    assert_eq!(named.attributes.get(SOURCE_ATTRIBUTE), Some("mine"));
    assert_eq!(named.attributes.len(), 1);
    // Once the source queue is deleted, nothing names it.
    dead_letter(&mut c, "orphan", &[]);
    let r = call(&mut c, 0, Op::DeleteQueue { queue: qn("q") });
    assert!(matches!(r, OpResult::QueueDeleted), "{r:?}");
    let got = receive_with_source(&mut c, 0, "dlq");
    let orphan = got.iter().find(|m| &m.body[..] == b"orphan").unwrap();
    assert_eq!(orphan.attributes.get(SOURCE_ATTRIBUTE), None);
}

#[test]
fn the_receive_that_would_exceed_max_moves_the_message() {
    for shards in [1u16, 2] {
        let mut c = setup(shards, 2);
        let mut e = entry("poison");
        e.attributes = attrs(&[("k", "v")]);
        let id = send_entries(&mut c, 0, "q", vec![e]).remove(0).unwrap().id;
        let sent_at = c.wall_ms();
        let r1 = receive(&mut c, 0, "q", 1).remove(0);
        c.advance_ms(1000);
        let r2 = receive(&mut c, shards as usize - 1, "q", 1).remove(0);
        assert_eq!(r2.receive_count, 2);
        c.advance_ms(1000);
        // Until the third receive the message counts as visible and a late
        // delete would still work; the receive moves it instead.
        assert_eq!(stats(&mut c, "q").visible, 1);
        assert!(receive(&mut c, 0, "q", 10).is_empty());
        let s = stats(&mut c, "q");
        assert_eq!((s.dead_lettered, s.visible, s.received), (1, 0, 2));
        let d = stats(&mut c, "dlq");
        assert_eq!((d.moved_in, d.visible, d.sent), (1, 1, 0));
        assert_eq!(delete_one(&mut c, 0, "q", r2.receipt), Err(ErrorCode::Gone));
        assert_eq!(delete_one(&mut c, 0, "q", r1.receipt), Err(ErrorCode::Gone));
        let m = receive(&mut c, shards as usize - 1, "dlq", 1).remove(0);
        assert_eq!(m.id, id);
        assert_eq!(
            m.receive_count, 3,
            "max + 1 on its first delivery from the DLQ"
        );
        assert_eq!(m.delivery(), 3);
        assert_eq!(m.sent_at_ms, sent_at);
        assert_eq!(m.attributes, attrs(&[("k", "v")]));
        assert_eq!(delete_one(&mut c, 0, "dlq", m.receipt), Ok(()));
    }
}

#[test]
fn a_late_delete_before_the_next_receive_still_works() {
    let mut c = setup(1, 1);
    send(&mut c, 0, "q", "a");
    let r = receive(&mut c, 0, "q", 1).remove(0);
    c.advance_ms(5000);
    assert_eq!(delete_one(&mut c, 0, "q", r.receipt), Ok(()));
    assert_eq!(stats(&mut c, "dlq").moved_in, 0);
}

#[test]
fn retention_in_the_dlq_counts_from_the_original_send() {
    let mut c = setup(1, 1);
    call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("dlq"),
            attributes: AttributeUpdate {
                retention: Some(Millis::new(60_000)),
                ..Default::default()
            },
        }),
    );
    send(&mut c, 0, "q", "a");
    receive(&mut c, 0, "q", 1);
    c.advance_ms(50_000);
    assert!(receive(&mut c, 0, "q", 1).is_empty());
    assert_eq!(stats(&mut c, "dlq").visible, 1);
    c.advance_ms(10_000);
    let d = stats(&mut c, "dlq");
    assert_eq!((d.dropped, d.visible), (1, 0));
}

#[test]
fn redrive_moves_back_resets_receive_count_and_keeps_what_cannot_move() {
    for shards in [1u16, 2] {
        let mut c = setup(shards, 1);
        create(&mut c, "other", AttributeUpdate::default());
        for s in 0..shards as usize {
            send(&mut c, s, "q", "a");
            send(&mut c, s, "q", "b");
        }
        let n = 2 * u64::from(shards);
        assert_eq!(receive(&mut c, 0, "q", 100).len() as u64, n);
        c.advance_ms(1000);
        assert!(receive(&mut c, 0, "q", 100).is_empty());
        assert_eq!(stats(&mut c, "dlq").visible, n);
        // A message sent straight to the DLQ has no source: it stays.
        send(&mut c, 0, "dlq", "native");
        let (moved, stayed) = redrive(&mut c, shards as usize - 1, "dlq", 100);
        assert_eq!((moved, stayed), (n, 1));
        let d = stats(&mut c, "dlq");
        assert_eq!((d.redriven, d.visible), (n, 1));
        let s = stats(&mut c, "q");
        assert_eq!((s.moved_in, s.visible), (n, n));
        let m = receive(&mut c, 0, "q", 1).remove(0);
        assert_eq!((m.receive_count, m.delivery()), (1, 2));
        let r = call(
            &mut c,
            0,
            Op::Redrive {
                queue: qn("nope"),
                max_messages: 1,
                to: None,
            },
        );
        assert_eq!(error_code(r), ErrorCode::QueueNotFound);
    }
}

fn redrive_to(c: &mut Cluster, shard: usize, queue: &str, to: &str, max: u32) -> OpResult {
    call(
        c,
        shard,
        Op::Redrive {
            queue: qn(queue),
            max_messages: max,
            to: Some(qn(to)),
        },
    )
}

#[test]
fn redrive_to_a_queue_moves_every_message_there_even_without_a_source() {
    for shards in [1u16, 2] {
        let mut c = setup(shards, 1);
        create(&mut c, "retry", AttributeUpdate::default());
        for s in 0..shards as usize {
            send(&mut c, s, "q", "a");
        }
        let n = u64::from(shards);
        assert_eq!(receive(&mut c, 0, "q", 100).len() as u64, n);
        c.advance_ms(1000);
        assert!(receive(&mut c, 0, "q", 100).is_empty());
        // One more with no source: a destination takes it too.
        send(&mut c, 0, "dlq", "native");
        let r = redrive_to(&mut c, shards as usize - 1, "dlq", "retry", 100);
        assert_eq!(
            r,
            OpResult::Redriven {
                moved: n + 1,
                stayed: 0
            }
        );
        let d = stats(&mut c, "dlq");
        assert_eq!((d.redriven, d.visible), (n + 1, 0));
        let r = stats(&mut c, "retry");
        assert_eq!((r.moved_in, r.visible), (n + 1, n + 1));
        assert_eq!(stats(&mut c, "q").visible, 0);
        let m = receive(&mut c, 0, "retry", 100);
        assert_eq!(m.len() as u64, n + 1);
        assert!(m.iter().all(|m| m.receive_count == 1));
    }
}

#[test]
fn redrive_to_refuses_itself_and_unknown_queues_and_keeps_what_does_not_fit() {
    let mut c = setup(1, 1);
    let itself = redrive_to(&mut c, 0, "dlq", "dlq", 1);
    assert_eq!(error_code(itself), ErrorCode::InvalidArgument);
    let unknown = redrive_to(&mut c, 0, "dlq", "nope", 1);
    assert_eq!(error_code(unknown), ErrorCode::QueueNotFound);
    create(
        &mut c,
        "small",
        AttributeUpdate {
            max_depth: Some(1),
            ..Default::default()
        },
    );
    send(&mut c, 0, "dlq", "a");
    send(&mut c, 0, "dlq", "b");
    let r = redrive_to(&mut c, 0, "dlq", "small", 10);
    assert_eq!(
        r,
        OpResult::Redriven {
            moved: 1,
            stayed: 1
        }
    );
    // What stayed is still first in line.
    assert_eq!(peek(&mut c, 0, "dlq", 10)[0].body, "b");
}

#[test]
fn redrive_leaves_messages_whose_source_is_full_or_gone() {
    let mut c = setup(1, 1);
    send(&mut c, 0, "q", "a");
    send(&mut c, 0, "q", "b");
    receive(&mut c, 0, "q", 10);
    c.advance_ms(1000);
    receive(&mut c, 0, "q", 10);
    call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: AttributeUpdate {
                max_depth: Some(1),
                ..Default::default()
            },
        }),
    );
    assert_eq!(redrive(&mut c, 0, "dlq", 10), (1, 1));
    assert_eq!(redrive(&mut c, 0, "dlq", 10), (0, 1));
    // Source gone.
    call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: AttributeUpdate {
                redrive: Setting::Clear,
                ..Default::default()
            },
        }),
    );
    call(&mut c, 0, Op::DeleteQueue { queue: qn("q") });
    create(&mut c, "q", AttributeUpdate::default());
    assert_eq!(redrive(&mut c, 0, "dlq", 10), (0, 1));
    assert_eq!(stats(&mut c, "dlq").visible, 1);
}
