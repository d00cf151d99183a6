//! FIFO queues on the engine: a group's messages in send order, none while
//! an earlier one of the group is in flight, back in place after a release
//! or an expiry, dead-lettered without blocking the group, deduplicated by
//! key or content, and the rules a FIFO queue's sends and attributes
//! follow. On one shard and on several (every send goes to the queue's home
//! shard; receives elsewhere steal from it).

use crate::engine_util::*;
use bytes::Bytes;
use sluice_broker::engine::{Cluster, EntryError, Op};
use sluice_protocol::{
    AttributeUpdate, ErrorCode, MessageGroupId, Millis, QueueKind, RedrivePolicy, SendEntry,
    Setting,
};

fn fifo() -> AttributeUpdate {
    AttributeUpdate {
        kind: Some(QueueKind::Fifo),
        ..AttributeUpdate::default()
    }
}

fn grouped(group: &str, body: &str) -> SendEntry {
    entry(body)
        .group(MessageGroupId::new(group).unwrap())
        .dedup_key(format!("{group}/{body}"))
}

fn bodies(got: &[sluice_protocol::ReceivedMessage]) -> Vec<String> {
    got.iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

fn send_all(c: &mut Cluster, shard: usize, queue: &str, entries: Vec<SendEntry>) {
    for r in send_entries(c, shard, queue, entries) {
        assert!(matches!(r, Ok(o) if !o.duplicate), "{r:?}");
    }
}

#[test]
fn a_group_delivers_in_order_and_one_batch_at_a_time() {
    for shards in [1u16, 3] {
        let mut c = cluster(shards);
        create(&mut c, "f", fifo());
        let last = usize::from(shards) - 1;
        send_all(
            &mut c,
            0,
            "f",
            vec![
                grouped("a", "a1"),
                grouped("a", "a2"),
                grouped("b", "b1"),
                grouped("a", "a3"),
            ],
        );
        // Consecutive messages of a, then b; a's third waits behind the two.
        let first = receive(&mut c, last, "f", 2);
        assert_eq!(bodies(&first), ["a1", "a2"], "{shards} shards");
        let second = receive(&mut c, 0, "f", 10);
        assert_eq!(bodies(&second), ["b1"], "a is locked while a1, a2 fly");
        assert!(receive(&mut c, last, "f", 10).is_empty());
        // One of two deleted: a stays locked.
        assert_eq!(delete_one(&mut c, 0, "f", first[0].receipt), Ok(()));
        assert!(receive(&mut c, 0, "f", 10).is_empty());
        assert_eq!(delete_one(&mut c, last, "f", first[1].receipt), Ok(()));
        assert_eq!(bodies(&receive(&mut c, 0, "f", 10)), ["a3"]);
        let s = stats(&mut c, "f");
        assert_eq!((s.sent, s.deleted, s.in_flight), (4, 2, 2));
    }
}

#[test]
fn a_released_or_expired_message_comes_back_first_in_its_group() {
    let mut c = cluster(1);
    create(
        &mut c,
        "f",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            ..fifo()
        },
    );
    send_all(
        &mut c,
        0,
        "f",
        ["m1", "m2", "m3"].iter().map(|b| grouped("g", b)).collect(),
    );
    let got = receive(&mut c, 0, "f", 2);
    assert_eq!(bodies(&got), ["m1", "m2"]);
    // m2 released first, then m1 expires: m1, m2, m3 again, in order.
    assert_eq!(change_vis(&mut c, 0, "f", got[1].receipt, 0), Ok(()));
    assert!(receive(&mut c, 0, "f", 10).is_empty(), "m1 still flies");
    c.advance_ms(1001);
    let again = receive(&mut c, 0, "f", 10);
    assert_eq!(bodies(&again), ["m1", "m2", "m3"]);
    assert_eq!(again[0].receive_count, 2);
    assert_eq!(again[2].receive_count, 1);
}

#[test]
fn groups_are_independent_and_a_receive_spreads_over_them() {
    let mut c = cluster(1);
    create(&mut c, "f", fifo());
    let mut entries = Vec::new();
    for i in 0..3 {
        for g in ["x", "y", "z"] {
            entries.push(grouped(g, &format!("{g}{i}")));
        }
    }
    send_all(&mut c, 0, "f", entries);
    let got = receive(&mut c, 0, "f", 9);
    let mut seen: Vec<String> = bodies(&got);
    assert_eq!(seen.len(), 9);
    // Within each group, send order.
    for g in ["x", "y", "z"] {
        let of: Vec<&String> = seen.iter().filter(|b| b.starts_with(g)).collect();
        assert_eq!(of, [&format!("{g}0"), &format!("{g}1"), &format!("{g}2")]);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 9);
}

#[test]
fn a_dead_lettered_message_unblocks_its_group_and_keeps_its_group() {
    let mut c = cluster(1);
    create(&mut c, "dlq", fifo());
    create(
        &mut c,
        "f",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(100)),
            redrive: Setting::Set(RedrivePolicy::new("dlq", 1)),
            ..fifo()
        },
    );
    send_all(
        &mut c,
        0,
        "f",
        vec![grouped("g", "poison"), grouped("g", "next")],
    );
    assert_eq!(bodies(&receive(&mut c, 0, "f", 1)), ["poison"]);
    c.advance_ms(101);
    // Its second delivery would exceed max receives: dead-lettered, and the
    // next of its group goes, in the same receive of one: the message that
    // went to the dead-letter queue took no room in the reply.
    assert_eq!(bodies(&receive(&mut c, 0, "f", 1)), ["next"]);
    assert_eq!(bodies(&receive(&mut c, 0, "dlq", 10)), ["poison"]);
    let s = stats(&mut c, "dlq");
    assert_eq!((s.moved_in, s.in_flight), (1, 1));
}

#[test]
fn sends_to_a_fifo_queue_follow_its_rules() {
    let mut c = cluster(2);
    create(&mut c, "f", fifo());
    let g = || MessageGroupId::new("g").unwrap();
    let r = send_entries(
        &mut c,
        1,
        "f",
        vec![
            entry("no group").dedup_key("k1"),
            entry("no key").group(g()),
            entry("own delay")
                .group(g())
                .dedup_key("k2")
                .delay(Millis::new(5)),
            entry("fine").group(g()).dedup_key("k3"),
            entry("again").group(g()).dedup_key("k3"),
        ],
    );
    assert_eq!(r[0], Err(EntryError::GroupRequired));
    assert_eq!(r[1], Err(EntryError::DedupKeyRequired));
    assert_eq!(r[2], Err(EntryError::DelayOnFifo));
    let first = r[3].unwrap();
    assert!(!first.duplicate);
    assert_eq!(r[4].unwrap().id, first.id);
    assert!(
        r[4].unwrap().duplicate,
        "the same dedup key within the window"
    );
    for e in &r[..3] {
        assert_eq!(e.unwrap_err().code(), ErrorCode::InvalidArgument);
    }
    assert_eq!(stats(&mut c, "f").sent, 1);
}

#[test]
fn content_based_dedup_takes_the_body_and_nothing_else() {
    let mut c = cluster(2);
    create(
        &mut c,
        "f",
        AttributeUpdate {
            content_based_dedup: Some(true),
            ..fifo()
        },
    );
    let g = || MessageGroupId::new("g").unwrap();
    let r = send_entries(
        &mut c,
        0,
        "f",
        vec![
            entry("same").group(g()),
            entry("same")
                .group(MessageGroupId::new("other").unwrap())
                .attributes(attrs(&[("k", "v")])),
            entry("different").group(g()),
            entry("same").group(g()).dedup_key("own-key"),
        ],
    );
    let ids: Vec<_> = r.iter().map(|r| r.unwrap()).collect();
    assert!(!ids[0].duplicate);
    assert!(
        ids[1].duplicate && ids[1].id == ids[0].id,
        "same body: a duplicate"
    );
    assert!(!ids[2].duplicate);
    assert!(!ids[3].duplicate, "an own key wins over the content");
    // A standard queue refuses content-based dedup.
    let r = call(
        &mut c,
        0,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("s"),
            attributes: AttributeUpdate {
                content_based_dedup: Some(true),
                ..AttributeUpdate::default()
            },
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
}

#[test]
fn a_queue_keeps_its_kind_and_its_dead_letter_queue_shares_it() {
    let mut c = cluster(1);
    create(&mut c, "f", fifo());
    create(&mut c, "s", AttributeUpdate::default());
    let set = |queue: &str, attributes| {
        Op::SetQueue(QueueAttributesRequest {
            queue: qn(queue),
            attributes,
        })
    };
    let r = call(
        &mut c,
        0,
        set(
            "s",
            AttributeUpdate {
                kind: Some(QueueKind::Fifo),
                ..AttributeUpdate::default()
            },
        ),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    // Naming its own kind is no change.
    let r = call(&mut c, 0, set("f", fifo()));
    assert!(
        matches!(r, sluice_broker::engine::OpResult::QueueUpdated),
        "{r:?}"
    );
    for (queue, dlq) in [("f", "s"), ("s", "f")] {
        let r = call(
            &mut c,
            0,
            set(
                queue,
                AttributeUpdate {
                    redrive: Setting::Set(RedrivePolicy::new(dlq, 3)),
                    ..AttributeUpdate::default()
                },
            ),
        );
        assert_eq!(
            error_code(r),
            ErrorCode::InvalidArgument,
            "{queue} -> {dlq}"
        );
    }
    let r = call(
        &mut c,
        0,
        Op::Redrive {
            queue: qn("s"),
            max_messages: 10,
            to: Some(qn("f")),
        },
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    assert_eq!(info(&mut c, 0, "f").attributes.kind, QueueKind::Fifo);
}

#[test]
fn a_delayed_head_holds_its_group_and_a_purge_frees_it() {
    let mut c = cluster(1);
    create(
        &mut c,
        "f",
        AttributeUpdate {
            delay: Some(Millis::new(500)),
            ..fifo()
        },
    );
    send_all(&mut c, 0, "f", vec![grouped("g", "early")]);
    // The queue's delay is shortened: a later message is visible first,
    // but it waits for the earlier one of its group.
    let r = call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("f"),
            attributes: AttributeUpdate {
                delay: Some(Millis::ZERO),
                ..AttributeUpdate::default()
            },
        }),
    );
    assert!(matches!(r, sluice_broker::engine::OpResult::QueueUpdated));
    send_all(
        &mut c,
        0,
        "f",
        vec![grouped("g", "late"), grouped("h", "other")],
    );
    assert_eq!(bodies(&receive(&mut c, 0, "f", 10)), ["other"]);
    c.advance_ms(500);
    assert_eq!(bodies(&receive(&mut c, 0, "f", 10)), ["early", "late"]);
    let r = call(&mut c, 0, Op::PurgeQueue { queue: qn("f") });
    assert!(
        matches!(r, sluice_broker::engine::OpResult::Purged { messages: 3 }),
        "{r:?}"
    );
    send_all(&mut c, 0, "f", vec![grouped("g", "after")]);
    assert_eq!(bodies(&receive(&mut c, 0, "f", 10)), ["after"]);
}

#[test]
fn a_reply_too_small_for_a_batch_leaves_the_rest_in_order() {
    let mut c = Cluster::new(sluice_broker::engine::RegistryConfig {
        shards: 1,
        seed: 42,
        frame_bytes_max: 64 * 1024,
        ..Default::default()
    });
    create(&mut c, "f", fifo());
    let big = "x".repeat(20_000);
    let entries = (0..4)
        .map(|i| {
            entry(&big)
                .group(MessageGroupId::new("g").unwrap())
                .dedup_key(Bytes::from(format!("k{i}")))
        })
        .collect();
    send_all(&mut c, 0, "f", entries);
    // Some fit the frame; the rest stay, first in their group.
    let got = receive(&mut c, 0, "f", 4);
    assert!(!got.is_empty() && got.len() < 4, "{}", got.len());
    let first_round = got.len();
    for m in &got {
        assert_eq!(delete_one(&mut c, 0, "f", m.receipt), Ok(()));
    }
    let rest = receive(&mut c, 0, "f", 4);
    assert!(!rest.is_empty());
    let mut seen = first_round;
    let mut rest = rest;
    while !rest.is_empty() {
        seen += rest.len();
        for m in &rest {
            assert_eq!(delete_one(&mut c, 0, "f", m.receipt), Ok(()));
        }
        rest = receive(&mut c, 0, "f", 4);
    }
    assert_eq!(seen, 4);
}

#[test]
fn a_snapshot_keeps_groups_their_order_and_their_locks() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(&mut c, "dlq", fifo());
        create(
            &mut c,
            "f",
            AttributeUpdate {
                visibility_timeout: Some(Millis::new(60_000)),
                redrive: Setting::Set(RedrivePolicy::new("dlq", 5)),
                ..fifo()
            },
        );
        let mut entries = Vec::new();
        for i in 0..4 {
            for g in ["locked", "free", "mixed"] {
                entries.push(grouped(g, &format!("{g}{i}")));
            }
        }
        send_all(&mut c, 0, "f", entries);
        // "locked": its first two leased for a minute; "mixed": its first
        // leased then released (back at its head).
        let got = receive(&mut c, 0, "f", 12);
        assert_eq!(got.len(), 12);
        let mut keep = None;
        for m in &got {
            let body = String::from_utf8(m.body.to_vec()).unwrap();
            match body.as_str() {
                "locked0" => keep = Some(m.receipt),
                "locked1" => {}
                "mixed0" => assert_eq!(change_vis(&mut c, 0, "f", m.receipt, 0), Ok(())),
                _ => assert_eq!(change_vis(&mut c, 0, "f", m.receipt, 0), Ok(())),
            }
        }
        // locked1 goes back, but locked0 still flies: the group stays locked.
        let locked1 = got.iter().find(|m| &m.body[..] == b"locked1").unwrap();
        assert_eq!(change_vis(&mut c, 0, "f", locked1.receipt, 0), Ok(()));
        let mut d = restarted(&mut c, shards);
        check(&mut d);
        assert_eq!(info(&mut d, 0, "f").attributes.kind, QueueKind::Fifo);
        let after = bodies(&receive(&mut d, 0, "f", 20));
        let of = |g: &str| -> Vec<&str> {
            after
                .iter()
                .filter(|b| b.starts_with(g))
                .map(String::as_str)
                .collect()
        };
        assert_eq!(of("free"), ["free0", "free1", "free2", "free3"]);
        assert_eq!(of("mixed"), ["mixed0", "mixed1", "mixed2", "mixed3"]);
        assert!(of("locked").is_empty(), "locked0 still flies: {after:?}");
        // Its receipt from before the restart settles it, and the group goes.
        assert_eq!(delete_one(&mut d, 0, "f", keep.unwrap()), Ok(()));
        assert_eq!(
            bodies(&receive(&mut d, 0, "f", 20)),
            ["locked1", "locked2", "locked3"]
        );
    }
}
