//! Leases end to end through the server, on both backends: redelivery,
//! stale receipts, late deletes, dead-lettering and redrive, delay, dedup,
//! peek, purge and queue deletion with leased messages.

use std::time::Duration;

use bytes::Bytes;
use sluice_broker::server::config::IoChoice;
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{
    AttributeUpdate, ErrorCode, QueueStats, RedrivePolicy, Reply, Request, SendEntry,
};

use crate::both_backends;
use crate::server_util::{Client, attrs, eventually, name, start};

const LIMIT: Duration = Duration::from_secs(20);

both_backends!(
    redelivery_after_the_visibility_timeout,
    stale_receipt_after_redelivery,
    delete_after_the_lease_ended_before_anyone_else_received_it,
    dead_letter_on_the_max_plus_one_delivery_then_redrive,
    delay_hides_a_message_until_it_is_due,
    dedup_returns_the_first_id,
    peek_leases_nothing,
    purge_and_queue_deletion_with_leased_messages,
    receive_replies_fit_one_frame,
    a_spinning_shard_serves_like_a_sleeping_one,
);

/// Receives until a message arrives, each receive long-polling up to 2 s.
fn receive_one(c: &mut Client, queue: &str, vis: Option<u32>) -> sluice_protocol::ReceivedMessage {
    eventually(LIMIT, "a message to receive", || {
        c.receive(queue, 1, vis, 2_000).into_iter().next()
    })
}

fn redelivery_after_the_visibility_timeout(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("jobs", attrs());
    let sent = c.send_body("jobs", "payload");
    let first = receive_one(&mut c, "jobs", Some(100));
    assert_eq!((first.id, first.receive_count), (sent.id, 1));
    let again = receive_one(&mut c, "jobs", Some(30_000));
    assert_eq!(again.id, sent.id);
    assert_eq!(again.receive_count, 2);
    assert_eq!(again.delivery(), first.delivery() + 1);
    assert_eq!(&again.body[..], b"payload");
    let s = c.stats("jobs");
    assert_eq!((s.redelivered, s.received, s.in_flight), (1, 2, 1));
}

fn stale_receipt_after_redelivery(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("jobs", attrs());
    c.send_body("jobs", "x");
    let first = receive_one(&mut c, "jobs", Some(50));
    let second = receive_one(&mut c, "jobs", Some(30_000));
    assert_eq!(
        c.delete("jobs", &[first.receipt]),
        vec![Err(ErrorCode::StaleReceipt)]
    );
    assert_eq!(
        c.stats("jobs").in_flight,
        1,
        "the stale delete left it alone"
    );
    assert_eq!(c.delete("jobs", &[second.receipt]), vec![Ok(())]);
    assert_eq!(
        c.delete("jobs", &[second.receipt]),
        vec![Err(ErrorCode::Gone)]
    );
}

fn delete_after_the_lease_ended_before_anyone_else_received_it(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("jobs", attrs());
    c.send_body("jobs", "x");
    let m = receive_one(&mut c, "jobs", Some(50));
    eventually(LIMIT, "the lease to end", || {
        let s = c.stats("jobs");
        (s.redelivered == 1 && s.visible == 1).then_some(())
    });
    assert_eq!(c.delete("jobs", &[m.receipt]), vec![Ok(())]);
    let s = c.stats("jobs");
    assert_eq!((s.visible, s.in_flight, s.deleted), (0, 0, 1));
    assert!(s.identity_holds(), "{s:?}");
}

fn dead_letter_on_the_max_plus_one_delivery_then_redrive(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("jobs.dlq", attrs());
    c.create(
        "jobs",
        AttributeUpdate {
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "jobs.dlq".into(),
                max_receives: 2,
            }),
            ..attrs()
        },
    );
    let sent = c.send_body("jobs", "poison");
    for n in 1..=2 {
        let m = receive_one(&mut c, "jobs", Some(20));
        assert_eq!(m.receive_count, n);
    }
    let dead = eventually(LIMIT, "the message in the dead-letter queue", || {
        // Receives of the source drive the move; they find nothing.
        assert!(c.receive("jobs", 1, Some(20), 100).is_empty());
        c.receive("jobs.dlq", 1, Some(60_000), 0).into_iter().next()
    });
    assert_eq!(dead.id, sent.id);
    assert_eq!(dead.receive_count, 3, "max + 1 on its first DLQ delivery");
    let s = c.stats("jobs");
    assert_eq!(s.dead_lettered, 1);
    // Back to the source queue: release it in the DLQ, then redrive.
    match c.call(Request::ChangeVisibility(
        sluice_protocol::ChangeVisibilityRequest {
            queue: name("jobs.dlq"),
            entries: vec![sluice_protocol::VisibilityChange {
                receipt: dead.receipt,
                visibility_timeout_ms: 0,
            }],
        },
    )) {
        Reply::ChangeVisibility { results } => assert_eq!(results, vec![Ok(())]),
        other => panic!("{other:?}"),
    }
    match c.call(Request::Redrive {
        queue: name("jobs.dlq"),
        max_messages: 10,
        to: None,
    }) {
        Reply::Redrive { moved, stayed } => assert_eq!((moved, stayed), (1, 0)),
        other => panic!("{other:?}"),
    }
    let back = receive_one(&mut c, "jobs", None);
    assert_eq!((back.id, back.receive_count), (sent.id, 1));
}

fn delay_hides_a_message_until_it_is_due(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("later", attrs());
    // A minute away: hidden for the whole test.
    let mut far = SendEntry::new(Bytes::from_static(b"far"));
    far.delay = Some(Millis::new(60_000));
    // Soon: hidden, then received.
    let mut soon = SendEntry::new(Bytes::from_static(b"soon"));
    soon.delay = Some(Millis::new(200));
    assert!(
        c.send_entries("later", &[far, soon])
            .iter()
            .all(Result::is_ok)
    );
    let s = c.stats("later");
    assert_eq!(s.visible, 0);
    assert!(s.delayed >= 1, "{s:?}");
    let m = receive_one(&mut c, "later", None);
    assert_eq!(&m.body[..], b"soon");
    assert!(
        c.receive("later", 10, None, 0).is_empty(),
        "the far one stays hidden"
    );
    assert_eq!(c.stats("later").delayed, 1);
}

fn dedup_returns_the_first_id(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("orders", attrs());
    let mut e = SendEntry::new(Bytes::from_static(b"order 1"));
    e.dedup_key = Some(Bytes::from_static(b"key-1"));
    let first = c.send_entries("orders", &[e.clone()])[0].unwrap();
    let again = c
        .send_entries("orders", &[e.clone(), e])
        .into_iter()
        .map(Result::unwrap)
        .collect::<Vec<_>>();
    assert!(!first.duplicate);
    for d in again {
        assert!(d.duplicate);
        assert_eq!(d.id, first.id);
    }
    let s = c.stats("orders");
    assert_eq!((s.sent, s.visible), (1, 1));
}

fn peek_leases_nothing(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("q", attrs());
    let sent = c.send_body("q", "look");
    let before = c.stats("q");
    match c.call(Request::Peek {
        queue: name("q"),
        max_messages: 10,
    }) {
        Reply::Peek { messages, .. } => {
            assert_eq!(messages.len(), 1);
            assert_eq!(messages[0].id, sent.id);
            assert_eq!(messages[0].first_received_delta_ms, None);
            assert_eq!(&messages[0].body[..], b"look");
        }
        other => panic!("{other:?}"),
    }
    let after = c.stats("q");
    assert_eq!(
        QueueStats {
            oldest_age_ms: 0,
            ..after
        },
        QueueStats {
            oldest_age_ms: 0,
            ..before
        },
        "peek changes no counter"
    );
    let m = receive_one(&mut c, "q", None);
    assert_eq!(m.receive_count, 1);
}

fn purge_and_queue_deletion_with_leased_messages(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut c = server.client();
    c.create("q", attrs());
    for i in 0..3 {
        c.send_body("q", &format!("m{i}"));
    }
    let leased = receive_one(&mut c, "q", None);
    match c.call(Request::PurgeQueue { queue: name("q") }) {
        Reply::PurgeQueue { purged } => assert_eq!(purged, 3),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.delete("q", &[leased.receipt]), vec![Err(ErrorCode::Gone)]);

    c.send_body("q", "again");
    let leased = receive_one(&mut c, "q", None);
    // A receive waiting on the queue when it is deleted.
    let mut waiter = server.client();
    let id = waiter.send(&Client::receive_request("q", 1, None, 20_000));
    waiter.ping();
    match c.call(Request::DeleteQueue { queue: name("q") }) {
        Reply::DeleteQueue => {}
        other => panic!("{other:?}"),
    }
    match waiter.wait(id) {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::QueueNotFound),
        other => panic!("the waiting receive got {other:?}"),
    }
    c.create("q", attrs());
    assert_eq!(
        c.delete("q", &[leased.receipt]),
        vec![Err(ErrorCode::InvalidReceipt)],
        "a receipt of the deleted incarnation"
    );
}

fn receive_replies_fit_one_frame(io: IoChoice) {
    // 4 KiB frames; messages with many small attributes (whose wire form is
    // larger than the engine's stored form).
    let Some(server) = start(
        io,
        &["--frame-bytes-max", "4KiB", "--unsent-bytes-max", "64KiB"],
    ) else {
        return;
    };
    let mut c = server.client();
    c.create("q", attrs());
    let pairs: Vec<(String, String)> = (0..16)
        .map(|i| (format!("k{i:x}"), String::new()))
        .collect();
    let attributes = sluice_protocol::MessageAttributes::from_pairs(pairs).unwrap();
    let entries: Vec<SendEntry> = (0..40)
        .map(|i| {
            let mut e = SendEntry::new(Bytes::from(vec![b'a' + (i % 26) as u8; 10]));
            e.attributes = attributes.clone();
            e
        })
        .collect();
    // Ten at a time: a SEND must fit the 4 KiB frame too.
    for chunk in entries.chunks(10) {
        assert!(c.send_entries("q", chunk).iter().all(Result::is_ok));
    }
    let mut seen = 0;
    eventually(LIMIT, "every message", || {
        let id = c.send(&Client::receive_request("q", 1024, Some(60_000), 0));
        let f = c.read_frame().expect("a reply");
        assert_eq!(f.request_id, id);
        assert!(
            f.encoded_len() <= 4096,
            "a reply of {} bytes",
            f.encoded_len()
        );
        let Ok(Reply::Receive { messages }) = Reply::decode(f.opcode, f.payload) else {
            panic!("not a receive reply");
        };
        for m in messages.iter() {
            assert_eq!(m.attributes.len(), 16);
        }
        seen += messages.len();
        (seen == 40).then_some(())
    });
    let s = c.stats("q");
    assert_eq!(
        (s.in_flight, s.visible),
        (40, 0),
        "nothing released or lost"
    );
}

/// `--idle-spin`: the shard polls instead of sleeping after work; requests,
/// lease timers and a long poll woken by another connection's send behave
/// the same.
fn a_spinning_shard_serves_like_a_sleeping_one(io: IoChoice) {
    let Some(server) = start(io, &["--idle-spin", "10ms"]) else {
        return;
    };
    let mut c = server.client();
    c.create("jobs", attrs());
    let sent = c.send_body("jobs", "spin");
    let first = receive_one(&mut c, "jobs", Some(50));
    let again = receive_one(&mut c, "jobs", Some(30_000));
    assert_eq!((again.id, again.receive_count), (sent.id, 2));
    assert_eq!(first.delivery() + 1, again.delivery());
    // A long poll on one connection, a send on another.
    let mut waiter = server.client();
    let id = waiter.send(&Client::receive_request("jobs", 1, Some(30_000), 10_000));
    std::thread::sleep(Duration::from_millis(50));
    let other = c.send_body("jobs", "wake");
    match waiter.wait(id) {
        Reply::Receive { messages } => {
            let got: Vec<_> = messages.to_messages().iter().map(|m| m.id).collect();
            assert_eq!(got, vec![other.id]);
        }
        other => panic!("{other:?}"),
    }
}
