//! What a held message costs and how the engine's compact layout behaves:
//! the memory budget charged per message as it moves between states, the
//! receive order across fresh and returned messages, lease groups, and the
//! result vectors handed back for reuse.

use sluice_broker::engine::shard::{EXT_BYTES, LEASE_BYTES, MESSAGE_BYTES};
use sluice_broker::engine::{Cluster, Op, OpResult};
use sluice_protocol::Millis;
use sluice_protocol::{AttributeUpdate, ReceiveRequest};

use crate::engine_util::*;

fn memory(c: &Cluster) -> u64 {
    (0..c.len()).map(|s| c.shard(s).memory_in_use()).sum()
}

#[test]
fn the_budget_charges_what_a_message_holds_in_each_state() {
    let mut c = cluster(1);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(100)),
            ..Default::default()
        },
    );
    let body = "x".repeat(100);
    send(&mut c, 0, "q", &body);
    let held = 100 + MESSAGE_BYTES;
    assert_eq!(memory(&c), held, "a held message: its data and record");
    const { assert!(MESSAGE_BYTES < 64, "a held message under 64 bytes of state") };
    let m = receive(&mut c, 0, "q", 1).remove(0);
    assert_eq!(memory(&c), held + EXT_BYTES + LEASE_BYTES, "in flight");
    c.advance_ms(100);
    check(&mut c);
    assert_eq!(memory(&c), held + EXT_BYTES, "delivered, visible again");
    let again = receive(&mut c, 0, "q", 1).remove(0);
    assert_eq!(again.id, m.id);
    delete_one(&mut c, 0, "q", again.receipt).expect("deleted");
    assert_eq!(memory(&c), 0, "everything given back");
}

#[test]
fn messages_are_received_in_the_order_they_became_visible() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(
            &mut c,
            "q",
            AttributeUpdate {
                visibility_timeout: Some(Millis::new(10)),
                ..Default::default()
            },
        );
        let a = send(&mut c, 0, "q", "a");
        let b = send(&mut c, 0, "q", "b");
        assert_eq!(receive(&mut c, 0, "q", 1)[0].id, a);
        // a's lease ends: it is visible again after b (sent before that)
        // and before c (sent after).
        c.advance_ms(10);
        let d = send(&mut c, 0, "q", "c");
        let order: Vec<_> = receive(&mut c, 0, "q", 3).iter().map(|m| m.id).collect();
        assert_eq!(order, [b, a, d], "{shards} shards");
        // Peek sees the order a receive would take.
        c.advance_ms(10);
        let peeked: Vec<_> = peek(&mut c, 0, "q", 3).iter().map(|m| m.id).collect();
        assert_eq!(peeked, [b, a, d]);
    }
}

#[test]
fn leases_of_one_receive_end_together_unless_changed_or_deleted() {
    let mut c = cluster(1);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(50)),
            ..Default::default()
        },
    );
    for i in 0..4 {
        send(&mut c, 0, "q", &format!("m{i}"));
    }
    let got = receive(&mut c, 0, "q", 4);
    assert_eq!(got.len(), 4);
    delete_one(&mut c, 0, "q", got[0].receipt).expect("deleted");
    change_vis(&mut c, 0, "q", got[1].receipt, 200).expect("lease extended");
    c.advance_ms(50);
    check(&mut c);
    // The two left in the group came back; the extended one did not.
    let back = receive(&mut c, 0, "q", 4);
    let ids: Vec<_> = back.iter().map(|m| m.id).collect();
    assert_eq!(ids, [got[2].id, got[3].id]);
    // Deleting every member of a group leaves no timer behind (the
    // invariants count the wheel's timers after each step).
    for m in back {
        delete_one(&mut c, 0, "q", m.receipt).expect("deleted");
    }
    c.advance_ms(150);
    let last = receive(&mut c, 0, "q", 4);
    assert_eq!(last.iter().map(|m| m.id).collect::<Vec<_>>(), [got[1].id]);
    assert_eq!((last[0].receive_count, last[0].delivery()), (2, 2));
}

#[test]
fn a_result_handed_back_is_filled_again() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    let receive = || {
        Op::Receive(ReceiveRequest {
            queue: qn("q"),
            max_messages: 8,
            visibility_timeout_ms: None,
            wait_ms: Some(0),
            bind_leases: false,
            with_source: false,
        })
    };
    send(&mut c, 0, "q", "a");
    let shard = c.shard_mut(0);
    let first = shard.submit(1, receive(), 2_000_000_000, 0);
    let Some(OpResult::Received(v)) = first else {
        panic!("{first:?}");
    };
    assert_eq!(v.len(), 1);
    let at = v.as_ptr() as usize;
    shard.recycle(OpResult::Received(v));
    let second = shard.submit(2, receive(), 2_000_000_000, 0);
    let Some(OpResult::Received(v)) = second else {
        panic!("{second:?}");
    };
    assert!(v.is_empty());
    assert_eq!(v.as_ptr() as usize, at, "the same vector, reused");
}
