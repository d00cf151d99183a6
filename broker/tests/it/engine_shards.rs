//! Cross-shard behaviour: a hot queue drained from every core, forwarded
//! receipts, many waiters overflowing the rings.

use crate::engine_util::*;
use sluice_broker::engine::{Op, OpResult};
use sluice_protocol::{
    AttributeUpdate, ChangeVisibilityRequest, DeleteRequest, ErrorCode, VisibilityChange,
};

#[test]
fn a_hot_queue_on_one_shard_is_drained_from_the_others() {
    let mut c = cluster(3);
    create(&mut c, "hot", AttributeUpdate::default());
    send_entries(
        &mut c,
        0,
        "hot",
        (0..300).map(|i| entry(&i.to_string())).collect(),
    );
    let mut total = 0;
    for shard in [1, 2, 1] {
        let got = receive(&mut c, shard, "hot", 100);
        assert!(got.iter().all(|m| m.receipt.shard == 0), "the owner leases");
        let receipts = got.iter().map(|m| m.receipt).collect();
        assert!(
            delete(&mut c, shard, "hot", receipts)
                .iter()
                .all(Result::is_ok)
        );
        total += got.len();
    }
    assert_eq!(total, 300);
    assert!(receive(&mut c, 2, "hot", 100).is_empty());
    let s = stats(&mut c, "hot");
    assert_eq!(
        (s.sent, s.received, s.deleted, s.visible),
        (300, 300, 300, 0)
    );
}

#[test]
fn a_receive_fills_from_local_then_other_shards() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    send_entries(&mut c, 0, "q", (0..3).map(|_| entry("a")).collect());
    send_entries(&mut c, 1, "q", (0..3).map(|_| entry("b")).collect());
    let got = receive(&mut c, 1, "q", 5);
    assert_eq!(got.len(), 5);
    assert_eq!(got.iter().filter(|m| m.receipt.shard == 1).count(), 3);
}

#[test]
fn many_waiters_on_another_shard_overflow_the_rings_without_loss() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    let tickets: Vec<u64> = (0..40)
        .map(|_| {
            c.submit(
                1,
                Op::Receive(ReceiveRequest {
                    queue: qn("q"),
                    max_messages: 1,
                    visibility_timeout_ms: None,
                    wait_ms: Some(10_000),
                    bind_leases: false,
                    with_source: false,
                }),
            )
        })
        .collect();
    send_entries(&mut c, 0, "q", (0..40).map(|_| entry("x")).collect());
    check(&mut c);
    let mut served = 0;
    for t in tickets {
        match c.take(t) {
            Some(OpResult::Received(m)) => served += m.len(),
            None => {}
            other => panic!("{other:?}"),
        }
    }
    let s = stats(&mut c, "q");
    assert_eq!(s.in_flight as usize, served);
    assert_eq!(s.visible as usize, 40 - served);
    assert!(served > 0);
    c.advance_ms(10_000);
    check(&mut c);
}

#[test]
fn a_forwarded_batch_naming_one_receipt_twice_is_answered_entry_by_entry() {
    // Entries are applied in order on the owner: the second change and the
    // second delete see what the first did.
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    send(&mut c, 1, "q", "a");
    let m = receive(&mut c, 1, "q", 1).remove(0);
    let t = c.submit(
        0,
        Op::ChangeVisibility(ChangeVisibilityRequest {
            queue: qn("q"),
            entries: vec![
                VisibilityChange {
                    receipt: m.receipt,
                    visibility_timeout_ms: 10,
                },
                VisibilityChange {
                    receipt: m.receipt,
                    visibility_timeout_ms: 0,
                },
            ],
        }),
    );
    let r = c.take(t).expect("answered once the shards settled");
    assert_eq!(r, OpResult::VisibilityChanged(vec![Ok(()), Ok(())]));
    check(&mut c);
    let t = c.submit(
        0,
        Op::Delete(DeleteRequest {
            queue: qn("q"),
            receipts: vec![m.receipt, m.receipt],
        }),
    );
    match c.take(t).expect("answered once the shards settled") {
        OpResult::Deleted(r) => {
            assert_eq!(r[0], Ok(()));
            assert_eq!(r[1].map_err(|e| e.code()), Err(ErrorCode::Gone));
        }
        other => panic!("{other:?}"),
    }
    check(&mut c);
}
