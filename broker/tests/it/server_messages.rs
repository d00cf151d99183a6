//! What a message carries through the server: its attributes exactly as the
//! wire allows them, there and back (RECEIVE and PEEK).

use bytes::Bytes;
use sluice_broker::server::config::IoChoice;
use sluice_protocol::{MessageAttributes, Reply, Request, SendEntry};

use crate::both_backends;
use crate::server_util::{attrs, name, start};

both_backends!(attribute_keys_the_wire_allows_are_stored_and_delivered);

/// The wire allows attribute keys of 0 to 4,096 bytes (within the 4 KiB of
/// keys and values); the engine once refused empty keys and keys above 255
/// bytes. Both now go in and come back as sent, through RECEIVE and PEEK.
fn attribute_keys_the_wire_allows_are_stored_and_delivered(io: IoChoice) {
    let Some(server) = start(io, &[]) else {
        return;
    };
    let mut c = server.client();
    c.create("q", attrs());
    let long_key = "k".repeat(300);
    let attributes = MessageAttributes::from_pairs([
        ("", "empty key"),
        (long_key.as_str(), "long key"),
        ("trace", ""),
    ])
    .expect("attributes the wire allows");
    let mut entry = SendEntry::new(Bytes::from_static(b"body"));
    entry.attributes = attributes.clone();
    let results = c.send_entries("q", &[entry]);
    assert!(results[0].is_ok(), "{results:?}");

    let peeked = match c.call(Request::Peek {
        queue: name("q"),
        max_messages: 1,
    }) {
        Reply::Peek { messages, .. } => messages,
        other => panic!("PEEK answered {other:?}"),
    };
    assert_eq!(peeked[0].attributes, attributes);

    let received = c.receive("q", 1, None, 0);
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].attributes, attributes);
    assert_eq!(received[0].attributes.get(""), Some("empty key"));
    assert_eq!(received[0].attributes.get(&long_key), Some("long key"));
    assert_eq!(&received[0].body[..], b"body");
}
