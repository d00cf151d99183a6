//! Leases, redelivery, backoff, retention, peek and the one-receive rule.

use std::collections::HashSet;

use crate::engine_util::*;
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{AttributeUpdate, Backoff};

#[test]
fn expired_lease_redelivers_with_counters() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(
            &mut c,
            "q",
            AttributeUpdate {
                visibility_timeout: Some(Millis::new(1000)),
                ..Default::default()
            },
        );
        send(&mut c, 0, "q", "a");
        let sent_at = c.wall_ms();
        c.advance_ms(10);
        let first = receive(&mut c, 0, "q", 1).remove(0);
        c.advance_ms(999);
        assert!(receive(&mut c, shards as usize - 1, "q", 1).is_empty());
        c.advance_ms(1);
        let second = receive(&mut c, shards as usize - 1, "q", 1).remove(0);
        assert_eq!(second.id, first.id);
        assert_eq!((second.receive_count, second.delivery()), (2, 2));
        assert_eq!(second.sent_at_ms, sent_at);
        assert_eq!(second.first_received_at_ms(), sent_at + 10);
        let s = stats(&mut c, "q");
        assert_eq!((s.received, s.redelivered, s.in_flight), (2, 1, 1));
    }
}

#[test]
fn visibility_override_applies_to_that_receive() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    send(&mut c, 0, "q", "a");
    receive_vis(&mut c, 1, "q", 1, Some(200));
    c.advance_ms(200);
    assert_eq!(receive(&mut c, 0, "q", 1).len(), 1);
}

#[test]
fn one_receive_never_returns_a_message_twice() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(&mut c, "q", AttributeUpdate::default());
        for s in 0..shards as usize {
            for i in 0..3 {
                send(&mut c, s, "q", &format!("{s}-{i}"));
            }
        }
        // Visibility 0: each lease ends at once, yet one receive takes each
        // message once.
        let got = receive_vis(&mut c, 0, "q", 100, Some(0));
        let ids: HashSet<_> = got.iter().map(|m| m.id).collect();
        assert_eq!(ids.len(), got.len());
        assert_eq!(got.len(), 3 * shards as usize);
        let again = receive_vis(&mut c, 0, "q", 100, Some(0));
        assert_eq!(again.len(), 3 * shards as usize);
        // Both receives' zero-length leases have ended by now.
        assert_eq!(stats(&mut c, "q").redelivered, 6 * u64::from(shards));
    }
}

#[test]
fn backoff_after_release_and_expiry_with_equal_jitter() {
    let mut c = cluster(2);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            backoff: Setting::Set(Backoff {
                base: Millis::new(100),
                max: Millis::new(300),
            }),
            ..Default::default()
        },
    );
    send(&mut c, 0, "q", "a");
    // n = 1: wait in [50, 100] after the release.
    let m = receive(&mut c, 1, "q", 1).remove(0);
    assert_eq!(change_vis(&mut c, 1, "q", m.receipt, 0), Ok(()));
    assert_eq!(stats(&mut c, "q").delayed, 1);
    let mut waited = 0;
    while receive(&mut c, 0, "q", 1).is_empty() {
        c.advance_ms(1);
        waited += 1;
        assert!(waited <= 100, "backoff past its max");
    }
    assert!(waited >= 50, "waited {waited}");
    // n = 2, expired lease: wait in [100, 200] after the lease ended.
    c.advance_ms(1000);
    let mut waited = 0;
    while receive(&mut c, 1, "q", 1).is_empty() {
        c.advance_ms(1);
        waited += 1;
        assert!(waited <= 200);
    }
    assert!(waited >= 100, "waited {waited}");
    // n = 3: min(400, 300) = 300, so [150, 300]; an explicit visibility is
    // honoured as given.
    let list = c.messages();
    let m = &list[0];
    assert_eq!(m.receive_count, 3);
    let s = stats(&mut c, "q");
    assert_eq!((s.released, s.redelivered), (1, 1));
}

#[test]
fn explicit_visibility_ignores_backoff() {
    let mut c = cluster(1);
    create(
        &mut c,
        "q",
        AttributeUpdate {
            backoff: Setting::Set(Backoff {
                base: Millis::new(60_000),
                max: Millis::new(60_000),
            }),
            ..Default::default()
        },
    );
    send(&mut c, 0, "q", "a");
    let m = receive(&mut c, 0, "q", 1).remove(0);
    assert_eq!(change_vis(&mut c, 0, "q", m.receipt, 10), Ok(()));
    c.advance_ms(10);
    // Expiry of that lease is subject to backoff (it is not a release).
    assert!(receive(&mut c, 0, "q", 1).is_empty());
    assert_eq!(stats(&mut c, "q").delayed, 1);
}

#[test]
fn retention_drops_in_every_state() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(
            &mut c,
            "q",
            AttributeUpdate {
                retention: Some(Millis::new(60_000)),
                visibility_timeout: Some(Millis::new(120_000)),
                ..Default::default()
            },
        );
        send(&mut c, 0, "q", "visible");
        send(&mut c, shards as usize - 1, "q", "in flight");
        let mut d = entry("delayed");
        d.delay = Some(Millis::new(15 * 60 * 1000));
        send_entries(&mut c, 0, "q", vec![d]);
        let got = receive(&mut c, 0, "q", 1);
        assert_eq!(got.len(), 1);
        c.advance_ms(59_999);
        assert_eq!(stats(&mut c, "q").dropped, 0);
        c.advance_ms(1);
        let s = stats(&mut c, "q");
        assert_eq!((s.dropped, s.visible, s.delayed, s.in_flight), (3, 0, 0, 0));
        assert_eq!(
            delete_one(&mut c, 0, "q", got[0].receipt),
            Err(sluice_protocol::ErrorCode::Gone)
        );
    }
}

#[test]
fn peek_reads_without_leasing_or_counting() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(&mut c, "q", AttributeUpdate::default());
        for s in 0..shards as usize {
            send(&mut c, s, "q", "a");
            send(&mut c, s, "q", "b");
        }
        let before = stats(&mut c, "q");
        let p = peek(&mut c, shards as usize - 1, "q", 3);
        assert_eq!(p.len(), 3.min(2 * shards as usize));
        assert!(p.iter().all(|m| m.first_received_at_ms().is_none()));
        assert_eq!(stats(&mut c, "q"), before);
        assert_eq!(peek(&mut c, 0, "q", 100).len(), 2 * shards as usize);
        assert_eq!(receive(&mut c, 0, "q", 100).len(), 2 * shards as usize);
        assert!(peek(&mut c, 0, "q", 100).is_empty());
    }
}
