//! Delete, change visibility and abandon by receipt: every outcome a
//! receipt can have (valid, after expiry, stale, gone, invalid; PROTOCOL.md
//! §8), and the release of a closed connection's bound leases.

use crate::engine_util::*;
use sluice_broker::engine::{Cluster, RegistryConfig};
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{AttributeUpdate, Backoff, ErrorCode};

fn queue(c: &mut Cluster, vis_ms: u32) {
    create(
        c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(vis_ms)),
            ..Default::default()
        },
    );
}

#[test]
fn delete_after_lease_end_succeeds_if_nobody_received_since() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        queue(&mut c, 1000);
        send(&mut c, 0, "q", "a");
        let m = receive(&mut c, 0, "q", 1).remove(0);
        c.advance_ms(5000);
        let s = stats(&mut c, "q");
        assert_eq!((s.visible, s.redelivered), (1, 1));
        assert_eq!(
            delete_one(&mut c, shards as usize - 1, "q", m.receipt),
            Ok(())
        );
        assert_eq!(stats(&mut c, "q").deleted, 1);
        assert_eq!(delete_one(&mut c, 0, "q", m.receipt), Err(ErrorCode::Gone));
    }
}

#[test]
fn older_delivery_is_stale_and_leaves_the_message_alone() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        queue(&mut c, 1000);
        send(&mut c, 0, "q", "a");
        let first = receive(&mut c, 0, "q", 1).remove(0);
        c.advance_ms(1000);
        let second = receive(&mut c, shards as usize - 1, "q", 1).remove(0);
        assert_eq!(second.delivery(), 2);
        assert_eq!(
            delete_one(&mut c, 0, "q", first.receipt),
            Err(ErrorCode::StaleReceipt)
        );
        assert_eq!(
            change_vis(&mut c, 0, "q", first.receipt, 0),
            Err(ErrorCode::StaleReceipt)
        );
        let s = stats(&mut c, "q");
        assert_eq!((s.in_flight, s.deleted, s.released), (1, 0, 0));
        assert_eq!(delete_one(&mut c, 0, "q", second.receipt), Ok(()));
    }
}

#[test]
fn forged_other_queue_and_other_run_receipts_are_invalid() {
    let mut c = cluster(2);
    queue(&mut c, 1000);
    create(&mut c, "other", AttributeUpdate::default());
    send(&mut c, 0, "q", "a");
    send(&mut c, 0, "other", "b");
    let m = receive(&mut c, 0, "q", 1).remove(0);
    let o = receive(&mut c, 0, "other", 1).remove(0);
    let mut forged = m.receipt;
    forged.delivery += 1;
    assert_eq!(
        delete_one(&mut c, 0, "q", forged),
        Err(ErrorCode::InvalidReceipt)
    );
    let mut forged = m.receipt;
    forged.check ^= 1;
    assert_eq!(
        delete_one(&mut c, 1, "q", forged),
        Err(ErrorCode::InvalidReceipt)
    );
    assert_eq!(
        delete_one(&mut c, 0, "q", o.receipt),
        Err(ErrorCode::InvalidReceipt)
    );
    assert_eq!(
        change_vis(&mut c, 1, "q", o.receipt, 10),
        Err(ErrorCode::InvalidReceipt)
    );
    assert_eq!(
        delete_one(&mut c, 0, "q", sluice_protocol::Receipt::default()),
        Err(ErrorCode::InvalidReceipt)
    );
    // Another run: same layout, another seed.
    let mut c2 = Cluster::new(RegistryConfig {
        shards: 2,
        seed: 7,
        ..Default::default()
    });
    queue(&mut c2, 1000);
    send(&mut c2, 0, "q", "a");
    assert_eq!(
        delete_one(&mut c2, 0, "q", m.receipt),
        Err(ErrorCode::InvalidReceipt)
    );
    assert_eq!(delete_one(&mut c, 0, "q", m.receipt), Ok(()));
}

/// A receipt is unforgeable bit by bit: each of its 208 bits flipped in
/// turn, the receipt deletes nothing and changes no visibility (each is
/// refused as invalid), and the message stays in flight until the true
/// receipt deletes it.
#[test]
fn every_bit_flipped_in_a_receipt_is_refused() {
    use sluice_protocol::{RECEIPT_BYTES, Receipt};
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        queue(&mut c, 60_000);
        send(&mut c, 0, "q", "a");
        let m = receive(&mut c, 0, "q", 1).remove(0);
        let wire = m.receipt.to_bytes();
        for bit in 0..RECEIPT_BYTES * 8 {
            let mut flipped = wire;
            flipped[bit / 8] ^= 1 << (bit % 8);
            let forged = Receipt::from_bytes(&flipped);
            assert_ne!(forged, m.receipt, "bit {bit}");
            for at in 0..shards as usize {
                assert_eq!(
                    delete_one(&mut c, at, "q", forged),
                    Err(ErrorCode::InvalidReceipt),
                    "bit {bit}, shard {at}"
                );
                assert_eq!(
                    change_vis(&mut c, at, "q", forged, 0),
                    Err(ErrorCode::InvalidReceipt),
                    "bit {bit}, shard {at}"
                );
            }
        }
        let s = stats(&mut c, "q");
        assert_eq!((s.in_flight, s.visible, s.deleted), (1, 0, 0));
        assert_eq!(delete_one(&mut c, 0, "q", m.receipt), Ok(()));
        assert_eq!(stats(&mut c, "q").deleted, 1);
    }
}

#[test]
fn change_visibility_after_expiry_leases_again_without_counting() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        queue(&mut c, 1000);
        send(&mut c, 0, "q", "a");
        let m = receive(&mut c, 0, "q", 1).remove(0);
        c.advance_ms(1500);
        let before = stats(&mut c, "q");
        assert_eq!(before.visible, 1);
        assert_eq!(
            change_vis(&mut c, shards as usize - 1, "q", m.receipt, 10_000),
            Ok(())
        );
        let after = stats(&mut c, "q");
        assert_eq!((after.visible, after.in_flight), (0, 1));
        assert_eq!(
            (after.received, after.redelivered, after.released),
            (before.received, before.redelivered, before.released)
        );
        assert!(receive(&mut c, 0, "q", 1).is_empty());
        c.advance_ms(9999);
        assert!(receive(&mut c, 0, "q", 1).is_empty());
        c.advance_ms(1);
        assert_eq!(receive(&mut c, 0, "q", 1).len(), 1);
    }
}

#[test]
fn change_visibility_extends_and_zero_releases() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        queue(&mut c, 1000);
        send(&mut c, 0, "q", "a");
        let m = receive(&mut c, 0, "q", 1).remove(0);
        assert_eq!(change_vis(&mut c, 0, "q", m.receipt, 5000), Ok(()));
        c.advance_ms(4999);
        assert!(receive(&mut c, 0, "q", 1).is_empty());
        assert_eq!(
            change_vis(&mut c, shards as usize - 1, "q", m.receipt, 0),
            Ok(())
        );
        let s = stats(&mut c, "q");
        assert_eq!((s.released, s.visible, s.redelivered), (1, 1, 0));
        let again = receive(&mut c, 0, "q", 1).remove(0);
        assert_eq!(again.receive_count, 2);
        let r = change_vis(&mut c, 0, "q", again.receipt, 12 * 3600 * 1000 + 1);
        assert_eq!(r, Err(ErrorCode::InvalidArgument));
    }
}

#[test]
fn a_message_in_backoff_can_be_deleted() {
    let mut c = cluster(2);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            backoff: Setting::Set(Backoff {
                base: Millis::new(60_000),
                max: Millis::new(60_000),
            }),
            ..Default::default()
        },
    );
    send(&mut c, 0, "q", "a");
    let m = receive(&mut c, 1, "q", 1).remove(0);
    c.advance_ms(1000);
    let s = stats(&mut c, "q");
    assert_eq!((s.delayed, s.redelivered), (1, 1));
    assert_eq!(delete_one(&mut c, 1, "q", m.receipt), Ok(()));
    assert_eq!(stats(&mut c, "q").deleted, 1);
}

#[test]
fn old_receipt_after_slot_reuse_is_gone_and_never_touches_the_new_message() {
    let mut c = cluster(1);
    queue(&mut c, 1000);
    send(&mut c, 0, "q", "old");
    let old = receive(&mut c, 0, "q", 1).remove(0);
    assert_eq!(delete_one(&mut c, 0, "q", old.receipt), Ok(()));
    send(&mut c, 0, "q", "new");
    let new = receive(&mut c, 0, "q", 1).remove(0);
    assert_eq!(new.receipt.slot, old.receipt.slot, "the slot was reused");
    assert_eq!(
        delete_one(&mut c, 0, "q", old.receipt),
        Err(ErrorCode::Gone)
    );
    assert_eq!(
        change_vis(&mut c, 0, "q", old.receipt, 0),
        Err(ErrorCode::Gone)
    );
    assert_eq!(stats(&mut c, "q").in_flight, 1);
    assert_eq!(delete_one(&mut c, 0, "q", new.receipt), Ok(()));
}

#[test]
fn batch_results_in_order_mixing_local_and_forwarded() {
    let mut c = cluster(2);
    queue(&mut c, 30_000);
    send(&mut c, 0, "q", "on 0");
    send(&mut c, 1, "q", "on 1");
    let got = receive(&mut c, 0, "q", 2);
    assert_eq!(got.len(), 2);
    let mut receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
    let mut forged = receipts[0];
    forged.check ^= 0xff;
    receipts.insert(1, forged);
    let r = delete(&mut c, 1, "q", receipts.clone());
    assert!(r[0].is_ok() && r[2].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().code(), ErrorCode::InvalidReceipt);
    let r = delete(&mut c, 0, "q", receipts);
    assert_eq!(r[0].as_ref().unwrap_err().code(), ErrorCode::Gone);
    assert_eq!(r[2].as_ref().unwrap_err().code(), ErrorCode::Gone);
    assert_eq!(stats(&mut c, "q").deleted, 2);
}

fn abandon(
    c: &mut Cluster,
    shard: usize,
    queue: &str,
    receipts: Vec<sluice_protocol::Receipt>,
) -> Vec<Result<(), ErrorCode>> {
    match call(
        c,
        shard,
        sluice_broker::engine::Op::Abandon(DeleteRequest {
            queue: qn(queue),
            receipts,
        }),
    ) {
        sluice_broker::engine::OpResult::VisibilityChanged(r) => {
            r.into_iter().map(|r| r.map_err(|e| e.code())).collect()
        }
        other => panic!("abandon: {other:?}"),
    }
}

#[test]
fn abandon_releases_current_running_leases_on_every_shard() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        queue(&mut c, 600_000);
        // Messages on every shard; the consumer on the last one gets them
        // all (steals for the others), so receipts name every shard.
        for s in 0..shards as usize {
            for i in 0..3 {
                send(&mut c, s, "q", &format!("{s}-{i}"));
            }
        }
        let n = 3 * shards as usize;
        let held = receive(&mut c, shards as usize - 1, "q", 100);
        assert_eq!(held.len(), n);
        let owners: std::collections::BTreeSet<u16> =
            held.iter().map(|m| m.receipt.shard).collect();
        assert_eq!(owners.len(), shards as usize);
        let receipts = held.iter().map(|m| m.receipt).collect();
        assert_eq!(abandon(&mut c, 0, "q", receipts), vec![Ok(()); n]);
        let s = stats(&mut c, "q");
        assert_eq!(
            (s.visible, s.in_flight, s.released, s.redelivered),
            (n as u64, 0, n as u64, 0)
        );
        // Visible again at once: delivered a second time.
        let again = receive(&mut c, 0, "q", 100);
        assert_eq!(again.len(), n);
        assert!(again.iter().all(|m| m.delivery() == 2));
    }
}

#[test]
fn abandon_leaves_leases_that_are_not_current_or_not_running_alone() {
    for shards in [1u16, 2] {
        let last = shards as usize - 1;
        let mut c = cluster(shards);
        queue(&mut c, 1_000);

        // A lease that ran out: nothing to release (not counted), and once
        // the message is received again the old receipt is stale and the
        // new lease untouched.
        send(&mut c, 0, "q", "ran out");
        let first = receive(&mut c, last, "q", 1).remove(0);
        c.advance_ms(1_000);
        assert_eq!(abandon(&mut c, 0, "q", vec![first.receipt]), [Ok(())]);
        let s = stats(&mut c, "q");
        assert_eq!((s.visible, s.redelivered, s.released), (1, 1, 0));
        let second = receive(&mut c, 0, "q", 1).remove(0);
        assert_eq!(
            abandon(&mut c, last, "q", vec![first.receipt]),
            [Err(ErrorCode::StaleReceipt)]
        );
        let s = stats(&mut c, "q");
        assert_eq!((s.in_flight, s.released), (1, 0));
        assert_eq!(delete_one(&mut c, last, "q", second.receipt), Ok(()));

        // Deleted: gone. Released by its client: nothing more to do.
        send(&mut c, 0, "q", "deleted");
        let m = receive(&mut c, last, "q", 1).remove(0);
        assert_eq!(delete_one(&mut c, last, "q", m.receipt), Ok(()));
        assert_eq!(
            abandon(&mut c, last, "q", vec![m.receipt]),
            [Err(ErrorCode::Gone)]
        );
        send(&mut c, 0, "q", "released");
        let m = receive(&mut c, last, "q", 1).remove(0);
        assert_eq!(change_vis(&mut c, last, "q", m.receipt, 0), Ok(()));
        let mut forged = m.receipt;
        forged.check ^= 1;
        assert_eq!(
            abandon(&mut c, last, "q", vec![m.receipt, forged]),
            [Ok(()), Err(ErrorCode::InvalidReceipt)]
        );
        let s = stats(&mut c, "q");
        assert_eq!((s.visible, s.in_flight, s.released), (1, 0, 1), "{s:?}");
    }
}

#[test]
fn an_abandoned_lease_waits_out_the_queues_backoff_like_a_release() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(
            &mut c,
            "q",
            AttributeUpdate {
                visibility_timeout: Some(Millis::new(600_000)),
                backoff: Setting::Set(Backoff {
                    base: Millis::new(100),
                    max: Millis::new(100),
                }),
                ..Default::default()
            },
        );
        send(&mut c, 0, "q", "a");
        let m = receive(&mut c, shards as usize - 1, "q", 1).remove(0);
        assert_eq!(abandon(&mut c, 0, "q", vec![m.receipt]), [Ok(())]);
        let s = stats(&mut c, "q");
        assert_eq!((s.delayed, s.visible, s.released), (1, 0, 1));
        assert!(receive(&mut c, 0, "q", 1).is_empty());
        c.advance_ms(100);
        assert_eq!(receive(&mut c, 0, "q", 1)[0].delivery(), 2);
    }
}
