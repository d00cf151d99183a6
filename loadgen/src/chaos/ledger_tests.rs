//! The ledger's reconciliation on hand-made histories.

use std::time::{Duration, Instant};

use super::{BrokerTotals, Ledger, SendFate};

fn seqs(l: &Ledger, n: usize) -> (u64, Vec<Vec<u8>>) {
    let (first, bodies) = l.issue(n);
    assert_eq!(bodies.len(), n);
    for (i, b) in bodies.iter().enumerate() {
        assert_eq!(l.seq_of(b), Some(first + i as u64));
    }
    (first, bodies)
}

#[test]
fn a_clean_run_reconciles() {
    let l = Ledger::new(64);
    let (first, bodies) = seqs(&l, 4);
    l.sent(first, &[SendFate::Acked; 4]);
    // 0 and 1 delivered and deleted; 1 delivered twice first; 2 held; 3
    // held after a delete with a lost reply (so the delete did not
    // happen).
    assert_eq!(l.delivered([(&bodies[0][..], 1), (&bodies[1][..], 1)]), 0);
    assert_eq!(l.delivered([(&bodies[1][..], 2)]), 1);
    l.deleted([(0, 1), (1, 2)]);
    l.delivered([(&bodies[3][..], 1)]);
    l.delete_unknown([3]);
    l.delivered([(&bodies[2][..], 1), (&bodies[3][..], 2)]);
    l.held([2, 3]);
    let broker = BrokerTotals {
        sent: 4,
        deleted: 2,
        held: 2,
        dropped_or_purged: 0,
    };
    let r = l.reconcile(Some(broker), true);
    assert_eq!(r.violations, Vec::<String>::new());
    assert_eq!((r.sent, r.deleted, r.held, r.lost), (4, 2, 2, 0));
    assert_eq!((r.deliveries, r.duplicates), (6, 2));
}

#[test]
fn a_lost_message_is_caught() {
    let l = Ledger::new(32);
    let (first, bodies) = seqs(&l, 2);
    l.sent(first, &[SendFate::Acked, SendFate::Acked]);
    l.delivered([(&bodies[0][..], 1)]);
    l.deleted([(0, 1)]);
    let r = l.reconcile(
        Some(BrokerTotals {
            sent: 2,
            deleted: 1,
            held: 0,
            dropped_or_purged: 0,
        }),
        true,
    );
    assert_eq!(r.lost, 1);
    assert_eq!(r.violation_count, 1, "{:?}", r.violations);
    assert!(r.violations[0].contains("lost"));
}

#[test]
fn an_unacknowledged_delete_must_match_the_broker() {
    let l = Ledger::new(32);
    let (first, bodies) = seqs(&l, 1);
    l.sent(first, &[SendFate::Acked]);
    l.delivered([(&bodies[0][..], 1)]);
    l.delete_unknown([0]);
    // Gone at the end: the delete happened, and the broker must say so.
    let ok = BrokerTotals {
        sent: 1,
        deleted: 1,
        ..BrokerTotals::default()
    };
    assert_eq!(l.reconcile(Some(ok), true).violation_count, 0);
    let l2 = Ledger::new(32);
    let (first, bodies) = seqs(&l2, 1);
    l2.sent(first, &[SendFate::Acked]);
    l2.delivered([(&bodies[0][..], 1)]);
    l2.delete_unknown([0]);
    let r = l2.reconcile(
        Some(BrokerTotals {
            sent: 1,
            ..BrokerTotals::default()
        }),
        true,
    );
    assert_eq!(r.violation_count, 1);
    assert!(r.violations[0].contains("deletes"), "{:?}", r.violations);
}

#[test]
fn unknown_sends_count_when_a_delivery_shows_them() {
    let l = Ledger::new(32);
    let (first, bodies) = seqs(&l, 3);
    l.sent(
        first,
        &[SendFate::Unknown, SendFate::Unknown, SendFate::Refused],
    );
    l.delivered([(&bodies[0][..], 1)]);
    l.held([0]);
    let r = l.reconcile(
        Some(BrokerTotals {
            sent: 1,
            held: 1,
            ..BrokerTotals::default()
        }),
        true,
    );
    assert_eq!(r.violations, Vec::<String>::new());
    assert_eq!((r.unknown_sends, r.unknown_enqueued, r.refused), (2, 1, 1));
    // The broker counting the second one too means it was enqueued and
    // then vanished.
    let r = l.reconcile(
        Some(BrokerTotals {
            sent: 2,
            held: 1,
            ..BrokerTotals::default()
        }),
        true,
    );
    assert_eq!(r.violation_count, 1);
}

#[test]
fn impossible_deliveries_are_violations() {
    let l = Ledger::new(32);
    let (first, bodies) = seqs(&l, 2);
    l.sent(first, &[SendFate::Acked, SendFate::Refused]);
    l.delivered([(&bodies[0][..], 1)]);
    l.deleted([(0, 1)]);
    l.delivered([(&bodies[0][..], 2)]); // after the delete
    l.delivered([(&bodies[1][..], 1)]); // refused, yet delivered
    l.delivered([(&b"not ours at all, but long enough to parse"[..], 1)]);
    let other = Ledger::new(32);
    let (_, foreign) = other.issue(1);
    l.delivered([(&foreign[0][..], 1)]);
    l.deleted([(0, 2)]); // a second acknowledged delete
    let r = l.reconcile(None, false);
    assert_eq!(r.violation_count, 5, "{:?}", r.violations);
}

#[test]
fn without_a_drain_nothing_is_called_lost() {
    let l = Ledger::new(32);
    let (first, _) = seqs(&l, 3);
    l.sent(first, &[SendFate::Acked; 3]);
    let r = l.reconcile(None, false);
    assert_eq!((r.sent, r.lost, r.violation_count), (3, 0, 0));
}

/// Under a loss window, a send acknowledged shortly before a kill and gone
/// at the end is counted, not a violation, and so is a delete undone by
/// the kill (its message held at the end, or deleted again); a send
/// acknowledged long before the kill and gone is still a loss.
#[test]
fn a_kill_may_take_what_was_acknowledged_within_its_window() {
    let l = Ledger::new(32);
    l.allow_loss_before_kills(Duration::from_secs(3_600));
    let (first, bodies) = seqs(&l, 4);
    l.sent(first, &[SendFate::Acked; 4]);
    for (i, b) in bodies.iter().enumerate().take(3).skip(1) {
        l.delivered([(&b[..], 1)]);
        l.deleted([(i as u64, 1)]);
    }
    l.killed(Instant::now());
    // 0's send is lost, 1's delete undone and 1 held, 2's delete undone and
    // done again; 3 is held.
    l.delivered([(&bodies[1][..], 2), (&bodies[2][..], 2)]);
    l.deleted([(2, 2)]);
    l.delivered([(&bodies[3][..], 1)]);
    l.held([1, 3]);
    let broker = BrokerTotals {
        sent: 3,
        deleted: 1,
        held: 2,
        dropped_or_purged: 0,
    };
    let r = l.reconcile(Some(broker), true);
    assert_eq!(r.violations, Vec::<String>::new());
    assert_eq!((r.lost, r.lost_in_window, r.undone_deletes), (0, 1, 2));
    assert_eq!((r.sent, r.deleted, r.held), (4, 1, 2));

    // Without the window, the same history breaks the rules.
    let strict = Ledger::new(32);
    let (first, _) = seqs(&strict, 1);
    strict.sent(first, &[SendFate::Acked]);
    strict.killed(Instant::now());
    let r = strict.reconcile(None, true);
    assert_eq!((r.lost, r.lost_in_window), (1, 0));
}

/// A send acknowledged before the window opened is held to the rules.
#[test]
fn a_loss_before_the_window_is_a_loss() {
    let l = Ledger::new(32);
    l.allow_loss_before_kills(Duration::ZERO);
    let (first, _) = seqs(&l, 1);
    l.sent(first, &[SendFate::Acked]);
    std::thread::sleep(Duration::from_millis(5));
    l.killed(Instant::now());
    let r = l.reconcile(None, true);
    assert_eq!((r.lost, r.lost_in_window), (1, 0));
    assert_eq!(r.violation_count, 1, "{:?}", r.violations);
}
