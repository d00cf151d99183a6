//! Long-poll receives: wake-ups on any shard, timeouts, queue deletion,
//! shutdown and cancellation.

use crate::engine_util::*;
use sluice_broker::engine::{Cluster, Op, OpResult};
use sluice_protocol::Millis;
use sluice_protocol::{AttributeUpdate, ErrorCode};

fn waiting(c: &mut Cluster, shard: usize, queue: &str, wait_ms: u32) -> u64 {
    let t = c.submit(
        shard,
        Op::Receive(ReceiveRequest {
            queue: qn(queue),
            max_messages: 10,
            visibility_timeout_ms: None,
            wait_ms: Some(wait_ms),
            bind_leases: false,
            with_source: false,
        }),
    );
    check(c);
    t
}

#[test]
fn a_waiter_is_woken_by_a_send_on_any_shard() {
    for (wait_on, send_on) in [(0, 0), (0, 1), (1, 0)] {
        let mut c = cluster(2);
        create(&mut c, "q", AttributeUpdate::default());
        let t = waiting(&mut c, wait_on, "q", 20_000);
        c.advance_ms(100);
        assert!(c.take(t).is_none());
        send(&mut c, send_on, "q", "hello");
        match c.take(t) {
            Some(OpResult::Received(m)) => {
                assert_eq!(m.len(), 1);
                assert_eq!(&m[0].body[..], b"hello");
            }
            other => panic!("{other:?}"),
        }
        check(&mut c);
    }
}

#[test]
fn queue_default_wait_and_empty_batch_when_it_ends() {
    let mut c = cluster(2);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            receive_wait: Some(Millis::new(1000)),
            ..Default::default()
        },
    );
    let t = c.submit(
        1,
        Op::Receive(ReceiveRequest {
            queue: qn("q"),
            max_messages: 1,
            visibility_timeout_ms: None,
            wait_ms: None,
            bind_leases: false,
            with_source: false,
        }),
    );
    c.advance_ms(999);
    assert!(c.take(t).is_none());
    c.advance_ms(1);
    assert_eq!(c.take(t), Some(OpResult::Received(vec![])));
    check(&mut c);
    let r = c.call(
        0,
        Op::Receive(ReceiveRequest {
            queue: qn("q"),
            max_messages: 1,
            visibility_timeout_ms: None,
            wait_ms: Some(20_001),
            bind_leases: false,
            with_source: false,
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
}

#[test]
fn waiters_are_served_first_come_first_served_within_a_shard() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    let first = waiting(&mut c, 0, "q", 10_000);
    let second = waiting(&mut c, 0, "q", 10_000);
    send(&mut c, 0, "q", "one");
    assert!(matches!(c.take(first), Some(OpResult::Received(m)) if m.len() == 1));
    assert!(c.take(second).is_none());
    send(&mut c, 0, "q", "two");
    assert!(matches!(c.take(second), Some(OpResult::Received(m)) if m.len() == 1));
}

#[test]
fn a_message_made_visible_by_expiry_wakes_a_waiter() {
    let mut c = cluster(2);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            ..Default::default()
        },
    );
    send(&mut c, 0, "q", "a");
    receive(&mut c, 0, "q", 1);
    let t = waiting(&mut c, 1, "q", 5000);
    c.advance_ms(1000);
    assert!(
        matches!(c.take(t), Some(OpResult::Received(m)) if m.len() == 1 && m[0].receive_count == 2)
    );
    check(&mut c);
}

#[test]
fn deleting_the_queue_answers_waiters_with_queue_not_found() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    let a = waiting(&mut c, 0, "q", 10_000);
    let b = waiting(&mut c, 1, "q", 10_000);
    call(&mut c, 0, Op::DeleteQueue { queue: qn("q") });
    for t in [a, b] {
        assert_eq!(
            error_code(c.take(t).expect("answered")),
            ErrorCode::QueueNotFound
        );
    }
}

#[test]
fn shutdown_answers_waiters_at_once_and_later_receives_do_not_wait() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    let a = waiting(&mut c, 0, "q", 10_000);
    let b = waiting(&mut c, 1, "q", 10_000);
    c.shutdown();
    assert_eq!(c.take(a), Some(OpResult::Received(vec![])));
    assert_eq!(c.take(b), Some(OpResult::Received(vec![])));
    let t = waiting(&mut c, 0, "q", 10_000);
    assert_eq!(c.take(t), Some(OpResult::Received(vec![])));
}

#[test]
fn a_cancelled_waiter_takes_nothing() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    let t = waiting(&mut c, 1, "q", 10_000);
    c.cancel(1, t);
    send(&mut c, 0, "q", "a");
    assert!(c.take(t).is_none());
    assert_eq!(stats(&mut c, "q").visible, 1);
}
