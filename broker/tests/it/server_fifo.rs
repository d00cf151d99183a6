//! FIFO queues through the server: a version-5 client creates one, sends
//! with group ids and receives them back in group order, with their groups;
//! a version-4 client reads the same queue as a standard one and its
//! messages without groups, since its decoder knows neither.

use sluice_broker::server::config::IoChoice;
use sluice_protocol::{
    AttributeUpdate, MessageGroupId, QueueKind, Reply, Request, SendEntry, attribute_bits,
};

use crate::both_backends;
use crate::server_util::{Client, name, start};

both_backends!(fifo_queues_reach_version_5_clients_whole);

fn fifo_queues_reach_version_5_clients_whole(io: IoChoice) {
    let Some(server) = start(io, &[]) else {
        return;
    };
    let mut c = Client::connect(server.addr);
    c.hello_version(5);
    c.create(
        "orders.fifo",
        AttributeUpdate {
            kind: Some(QueueKind::Fifo),
            content_based_dedup: Some(true),
            ..AttributeUpdate::default()
        },
    );
    let entry = |group: &str, body: &'static str| {
        SendEntry::new(body).group(MessageGroupId::new(group).unwrap())
    };
    let sent = c.send_entries(
        "orders.fifo",
        &[
            entry("a", "a1"),
            entry("b", "b1"),
            entry("a", "a2"),
            entry("a", "a1"),
        ],
    );
    assert!(sent[..3].iter().all(|r| matches!(r, Ok(o) if !o.duplicate)));
    assert!(
        matches!(&sent[3], Ok(o) if o.duplicate),
        "the same body: deduplicated by content"
    );
    let got = c.receive("orders.fifo", 10, None, 0);
    let seen: Vec<(&str, &[u8])> = got
        .iter()
        .map(|m| (m.group.as_ref().unwrap().as_str(), &m.body[..]))
        .collect();
    assert_eq!(seen, [("a", &b"a1"[..]), ("a", b"a2"), ("b", b"b1")]);
    assert!(
        c.receive("orders.fifo", 10, None, 0).is_empty(),
        "a and b fly"
    );
    match c.call(Request::GetQueue {
        queue: name("orders.fifo"),
    }) {
        Reply::GetQueue(info) => {
            assert_eq!(info.attributes.kind, QueueKind::Fifo);
            assert!(info.attributes.content_based_dedup);
        }
        other => panic!("GET_QUEUE answered {other:?}"),
    }
    // Released, they come back; a version-4 client gets them without their
    // groups, and the queue without its kind.
    let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
    let release = Request::ChangeVisibility(sluice_protocol::ChangeVisibilityRequest {
        queue: name("orders.fifo"),
        entries: receipts
            .iter()
            .map(|&receipt| sluice_protocol::VisibilityChange {
                receipt,
                visibility_timeout_ms: 0,
            })
            .collect(),
    });
    assert!(matches!(c.call(release), Reply::ChangeVisibility { .. }));
    let mut old = Client::connect(server.addr);
    old.hello_version(4);
    let again = old.receive("orders.fifo", 10, None, 0);
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|m| m.group.is_none()));
    let present = old.get_queue_present_mask("orders.fifo");
    assert_eq!(
        present & (attribute_bits::KIND | attribute_bits::CONTENT_BASED_DEDUP),
        0,
        "present mask {present:#x}"
    );
}
