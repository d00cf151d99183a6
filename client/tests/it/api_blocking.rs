//! Every operation of the blocking client against a real server.

use std::time::Duration;

use bytes::Bytes;
use sluice_client::{
    Error, MessageAttributes, QueueOptions, Receipt, ReceiveOptions, RedrivePolicy, SendEntry,
};

use crate::util::TestServer;

fn now_options(max: usize) -> ReceiveOptions {
    ReceiveOptions::new(max).wait(Duration::ZERO)
}

#[test]
fn queue_management() {
    let server = TestServer::start();
    let c = server.client();
    let info = c.server_info().expect("connected");
    assert!(info.server_version.starts_with("sluice"), "{info:?}");
    c.ping().expect("ping");

    let attrs = QueueOptions::new().visibility_timeout(Duration::from_millis(5_000));
    assert!(c.create_queue("orders", &attrs).unwrap(), "created");
    assert!(!c.create_queue("orders", &attrs).unwrap(), "idempotent");
    let other = QueueOptions::new().visibility_timeout(Duration::from_millis(6_000));
    assert!(matches!(
        c.create_queue("orders", &other),
        Err(Error::QueueExists(_))
    ));
    c.create_queue("orders.dlq", &QueueOptions::new()).unwrap();
    c.create_queue("other", &QueueOptions::new()).unwrap();

    let mut names = c.list_queues("ord").unwrap();
    names.sort();
    assert_eq!(names, ["orders", "orders.dlq"]);
    assert_eq!(c.list_queues("").unwrap().len(), 3);

    let update = QueueOptions::new()
        .redrive(RedrivePolicy {
            dead_letter_queue: "orders.dlq".into(),
            max_receives: 3,
        })
        .delay(Duration::from_millis(0));
    c.set_queue("orders", &update).unwrap();
    let info = c.queue_info("orders").unwrap();
    assert_eq!(info.queue.as_str(), "orders");
    assert_eq!(info.attributes.visibility_timeout, Duration::from_secs(5));
    assert_eq!(info.attributes.redrive.as_ref().unwrap().max_receives, 3);
    assert!(info.stats.identity_holds());

    // A dead-letter queue in use cannot be deleted.
    assert!(matches!(
        c.delete_queue("orders.dlq"),
        Err(Error::InvalidArgument(_))
    ));
    c.set_queue("orders", &QueueOptions::new().clear_redrive())
        .unwrap();
    assert_eq!(c.queue_info("orders").unwrap().attributes.redrive, None);

    c.send("orders", "a").unwrap();
    c.send("orders", "b").unwrap();
    assert_eq!(c.purge_queue("orders").unwrap(), 2);
    c.delete_queue("orders.dlq").unwrap();
    assert!(matches!(
        c.queue_info("orders.dlq"),
        Err(Error::QueueNotFound(_))
    ));
    assert!(matches!(
        c.delete_queue("nope"),
        Err(Error::QueueNotFound(_))
    ));
    // Bad names fail locally.
    assert!(matches!(
        c.queue_info("a b"),
        Err(Error::InvalidArgument(_))
    ));

    let stats = c.server_stats().unwrap();
    assert_eq!(stats.shards, 1);
    assert!(!stats.io_backend.is_empty());
    assert_eq!(stats.counter("queues"), Some(2));
}

#[test]
fn messages_send_receive_delete_and_visibility() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("q", &QueueOptions::new()).unwrap();

    // A send with attributes and a dedup key, then its duplicate.
    let entry = SendEntry {
        dedup_key: Some(Bytes::from_static(b"order-17")),
        attributes: MessageAttributes::from_pairs([("type", "order")]).unwrap(),
        ..SendEntry::new("hello")
    };
    let first = c.send_entry("q", entry.clone()).unwrap();
    assert!(!first.duplicate);
    let again = c.send_entry("q", entry).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);

    // A batch with one entry too large for the queue: per-entry results.
    c.set_queue("q", &QueueOptions::new().message_bytes_max(64))
        .unwrap();
    let batch = [
        SendEntry::new("small"),
        SendEntry::new(vec![b'x'; 100]),
        SendEntry::new("also small"),
    ];
    let results = c.send_batch("q", &batch).unwrap();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(Error::MessageTooLarge(_))));
    assert!(results[2].is_ok());

    // Peek sees three messages and leases none.
    let peeked = c.peek("q", 10).unwrap();
    assert_eq!(peeked.len(), 3);
    assert!(peeked.iter().all(|m| m.receive_count == 0));

    let got = c
        .receive(
            "q",
            now_options(10).visibility_timeout(Duration::from_secs(60)),
        )
        .unwrap();
    assert_eq!(got.len(), 3);
    let hello = got
        .iter()
        .find(|m| m.id == first.id)
        .expect("the first message");
    assert_eq!(&hello.body[..], b"hello");
    assert_eq!(hello.attributes.get("type"), Some("order"));
    assert_eq!(hello.receive_count, 1);
    assert!(
        c.receive("q", now_options(10)).unwrap().is_empty(),
        "all leased"
    );

    // Release one (visibility 0): it comes back with receive count 2.
    c.change_visibility("q", hello.receipt, Duration::ZERO)
        .unwrap();
    let back = c.receive("q", now_options(10)).unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].id, hello.id);
    assert_eq!(back[0].receive_count, 2);
    assert!(back[0].delivery() > hello.delivery());
    // The first receipt is stale now.
    assert!(matches!(
        c.delete("q", hello.receipt),
        Err(Error::StaleReceipt(_))
    ));

    // Extend the others in one batch; a forged receipt fails alone.
    let forged = Receipt {
        check: got[1].receipt.check ^ 1,
        ..got[1].receipt
    };
    let changes: Vec<(Receipt, Duration)> = got
        .iter()
        .filter(|m| m.id != hello.id)
        .map(|m| (m.receipt, Duration::from_secs(120)))
        .chain([(forged, Duration::from_secs(1))])
        .collect();
    let results = c.change_visibility_batch("q", &changes).unwrap();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[1].is_ok());
    assert!(matches!(results[2], Err(Error::InvalidReceipt(_))));

    // Delete all three: one batch, then again to see Gone.
    let receipts: Vec<Receipt> = got
        .iter()
        .filter(|m| m.id != hello.id)
        .map(|m| m.receipt)
        .chain([back[0].receipt])
        .collect();
    let results = c.delete_batch("q", &receipts).unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let results = c.delete_batch("q", &receipts).unwrap();
    assert!(
        results.iter().all(|r| matches!(r, Err(Error::Gone(_)))),
        "{results:?}"
    );
    let info = c.queue_info("q").unwrap();
    assert_eq!(info.stats.deleted, 3);
    assert_eq!(info.stats.released, 1);
    assert!(info.stats.identity_holds());
}

#[test]
fn dead_letters_and_redrive() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("jobs.dlq", &QueueOptions::new()).unwrap();
    c.create_queue(
        "jobs",
        &QueueOptions::new().redrive(RedrivePolicy {
            dead_letter_queue: "jobs.dlq".into(),
            max_receives: 1,
        }),
    )
    .unwrap();
    let sent = c.send("jobs", "poison").unwrap();
    let got = c.receive("jobs", now_options(1)).unwrap();
    assert_eq!(got.len(), 1);
    c.change_visibility("jobs", got[0].receipt, Duration::ZERO)
        .unwrap();
    // The second delivery would exceed max receives: dead-lettered.
    assert!(c.receive("jobs", now_options(1)).unwrap().is_empty());
    let dead = c.peek("jobs.dlq", 10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, sent.id);

    let moved = c.redrive("jobs.dlq", 10).unwrap();
    assert_eq!((moved.moved, moved.stayed), (1, 0));
    let again = c.receive("jobs", now_options(1)).unwrap();
    assert_eq!(again[0].id, sent.id);
    assert_eq!(again[0].receive_count, 1, "a redrive resets the count");
}

#[test]
fn bare_bodies_are_sent_borrowed() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("bodies", &QueueOptions::new().message_bytes_max(64))
        .unwrap();
    // The bodies live in the caller's own buffer.
    let mut buffer = b"one".to_vec();
    buffer.extend_from_slice(&[b'x'; 100]);
    buffer.extend_from_slice(b"three");
    let bodies = [&buffer[..3], &buffer[3..103], &buffer[103..]];
    let results = c.send_bodies("bodies", &bodies).unwrap();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(Error::MessageTooLarge(_))));
    assert!(results[2].is_ok());
    // Two more batches in flight at once from this thread.
    let pending = [
        c.start_send_bodies("bodies", &[b"four"]).unwrap(),
        c.start_send_bodies("bodies", &[b"five", b"six"]).unwrap(),
    ];
    for p in pending {
        assert!(p.wait().unwrap().iter().all(Result::is_ok));
    }
    let mut got: Vec<Bytes> = c
        .receive("bodies", now_options(10))
        .unwrap()
        .into_iter()
        .map(|m| {
            assert!(m.attributes.is_empty(), "a bare body has no attributes");
            m.body
        })
        .collect();
    got.sort();
    assert_eq!(got, ["five", "four", "one", "six", "three"]);

    // What the client refuses, and what the server refuses as a whole.
    assert!(matches!(
        c.send_bodies("no such name!", &[b"x"]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.send_bodies("missing", &[b"x"]),
        Err(Error::QueueNotFound(_))
    ));
    assert!(matches!(
        c.send_bodies("bodies", &[]),
        Err(Error::InvalidArgument(_))
    ));
    let too_many = vec![&b"m"[..]; 1_025];
    assert!(matches!(
        c.send_bodies("bodies", &too_many),
        Err(Error::BatchTooLarge(_))
    ));
    // The connection is still good.
    c.ping().unwrap();
}

#[test]
fn entries_are_sent_as_borrowed_views() {
    use sluice_client::{MessageAttributes, QueueKind, SendEntryRef};
    let server = TestServer::start();
    let c = server.client();
    assert!(
        c.create_queue("views", &QueueOptions::new().fifo())
            .unwrap()
    );
    assert_eq!(
        c.queue_info("views").unwrap().attributes.kind,
        QueueKind::Fifo
    );
    // Bodies, keys and group ids all live in the caller's buffers.
    let buffer = b"a1b1a2k1k2k3ab".to_vec();
    let attributes = MessageAttributes::from_pairs([("kind", "test")]).unwrap();
    let view =
        |body: core::ops::Range<usize>, key: core::ops::Range<usize>, group: usize| SendEntryRef {
            body: &buffer[body],
            dedup_key: Some(&buffer[key]),
            group: Some(&buffer[group..group + 1]),
            ..SendEntryRef::default()
        };
    let mut with_attributes = view(0..2, 6..8, 12);
    with_attributes.attributes = attributes.as_view();
    let sent = c
        .send_views(
            "views",
            &[
                with_attributes,
                view(2..4, 8..10, 13),
                view(4..6, 10..12, 12),
                // The first one's key again: a duplicate.
                view(4..6, 6..8, 12),
            ],
        )
        .unwrap();
    let sent: Vec<_> = sent.into_iter().map(Result::unwrap).collect();
    assert!(!sent[0].duplicate && !sent[1].duplicate && !sent[2].duplicate);
    assert_eq!((sent[3].duplicate, sent[3].id), (true, sent[0].id));
    let pending = c
        .start_send_views("views", &[view(2..4, 0..2, 13)])
        .unwrap();
    assert!(pending.wait().unwrap()[0].is_ok());
    let got = c.receive("views", now_options(10)).unwrap();
    let seen: Vec<(&str, &[u8])> = got
        .iter()
        .map(|m| (m.group.as_ref().unwrap().as_str(), &m.body[..]))
        .collect();
    assert_eq!(
        seen,
        [("a", &b"a1"[..]), ("a", b"a2"), ("b", b"b1"), ("b", b"b1")]
    );
    assert_eq!(got[0].attributes, attributes);

    // What the client refuses, sending nothing: a group id the protocol
    // cannot carry, a delay past the field's range.
    let bad_group = SendEntryRef {
        body: b"x",
        group: Some(b"has space"),
        ..SendEntryRef::default()
    };
    assert!(matches!(
        c.send_views("views", &[bad_group]),
        Err(Error::InvalidArgument(_))
    ));
    let marker = SendEntryRef {
        body: b"x",
        delay_ms: Some(u32::MAX),
        ..SendEntryRef::default()
    };
    assert!(matches!(
        c.send_views("views", &[marker]),
        Err(Error::InvalidArgument(_))
    ));
    // A FIFO send needs its group: refused by the server for that entry.
    let refused = c
        .send_views(
            "views",
            &[SendEntryRef {
                body: b"x",
                dedup_key: Some(b"k9"),
                ..SendEntryRef::default()
            }],
        )
        .unwrap();
    assert!(matches!(refused[0], Err(Error::InvalidArgument(_))));
    assert_eq!(c.queue_info("views").unwrap().stats.depth(), 4);
    c.ping().unwrap();
}

#[test]
fn a_receive_batch_gives_the_messages_as_views_of_the_reply() {
    use sluice_client::MessageGroupId;
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("plain", &QueueOptions::new()).unwrap();
    let attributes = MessageAttributes::from_pairs([("kind", "test")]).unwrap();
    c.send_batch(
        "plain",
        &[
            SendEntry::new("one").attributes(attributes.clone()),
            SendEntry::new("two"),
        ],
    )
    .unwrap();
    let batch = c.receive_batch("plain", now_options(10)).unwrap();
    assert_eq!(batch.len(), 2);
    let views: Vec<_> = batch.iter().collect();
    assert_eq!((views[0].body, views[1].body), (&b"one"[..], &b"two"[..]));
    assert_eq!(views[0].attributes, attributes.as_view());
    assert!(
        views
            .iter()
            .all(|m| m.receive_count == 1 && m.group.is_none())
    );
    // The receipts are the deliveries': they delete.
    let receipts: Vec<_> = views.iter().map(|m| m.receipt).collect();
    assert!(
        c.delete_batch("plain", &receipts)
            .unwrap()
            .iter()
            .all(Result::is_ok)
    );
    // Nothing left: an empty batch, not an error.
    assert!(
        c.receive_batch("plain", now_options(10))
            .unwrap()
            .is_empty()
    );
    // Pipelined, and on a FIFO queue with the group.
    c.create_queue(
        "ledger",
        &QueueOptions::new().fifo().content_based_dedup(true),
    )
    .unwrap();
    let entry = SendEntry::new("a1").group(MessageGroupId::new("a").unwrap());
    c.send_batch("ledger", &[entry]).unwrap();
    let pending = c.start_receive_batch("ledger", now_options(10)).unwrap();
    let batch = pending.wait().unwrap();
    let m = batch.iter().next().unwrap();
    assert_eq!((m.body, m.group), (&b"a1"[..], Some("a")));
    assert!(matches!(
        c.receive_batch("missing", now_options(1)),
        Err(Error::QueueNotFound(_))
    ));
}

#[test]
fn a_fifo_queue_delivers_each_group_in_order_with_its_group() {
    use sluice_client::{MessageGroupId, QueueKind};
    let server = TestServer::start();
    let c = server.client();
    let options = QueueOptions::new().fifo().content_based_dedup(true);
    assert!(c.create_queue("ledger", &options).unwrap());
    assert_eq!(
        c.queue_info("ledger").unwrap().attributes.kind,
        QueueKind::Fifo
    );
    let entry =
        |g: &str, body: &'static str| SendEntry::new(body).group(MessageGroupId::new(g).unwrap());
    let sent = c
        .send_batch(
            "ledger",
            &[
                entry("a", "a1"),
                entry("b", "b1"),
                entry("a", "a2"),
                entry("a", "a1"),
            ],
        )
        .unwrap();
    assert!(sent[3].as_ref().unwrap().duplicate, "the same body");
    let got = c.receive("ledger", now_options(10)).unwrap();
    let seen: Vec<(&str, &[u8])> = got
        .iter()
        .map(|m| (m.group.as_ref().unwrap().as_str(), &m.body[..]))
        .collect();
    assert_eq!(seen, [("a", &b"a1"[..]), ("a", b"a2"), ("b", b"b1")]);
    assert!(
        c.receive("ledger", now_options(10)).unwrap().is_empty(),
        "both groups fly"
    );
    // A FIFO send needs its group.
    let refused = c
        .send_batch("ledger", &[SendEntry::new("no group")])
        .unwrap();
    assert!(
        matches!(refused[0], Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
}
