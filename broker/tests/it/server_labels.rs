//! A queue's tags and annotations through the server: set, changed and
//! read back by a version-4 client; left out of the `GET_QUEUE` reply of an
//! older client, whose decoder does not know their bits.

use sluice_broker::server::config::IoChoice;
use sluice_protocol::{AttributeUpdate, QueueAttributesRequest, Reply, Request, attribute_bits};

use crate::both_backends;
use crate::server_util::{Client, name, start};

both_backends!(labels_reach_version_4_clients_only);

fn labels_reach_version_4_clients_only(io: IoChoice) {
    let Some(server) = start(io, &[]) else {
        return;
    };
    // The test client says version 1 unless told otherwise.
    let mut c = Client::connect(server.addr);
    c.hello_version(4);
    let mut update = AttributeUpdate::default();
    update.tags_mut().set = vec![
        ("team".into(), "payments".into()),
        ("env".into(), "dev".into()),
    ];
    update.annotations_mut().set = vec![("Policy".into(), "{}".into())];
    c.create("q", update);
    let mut untag = AttributeUpdate::default();
    untag.tags_mut().remove.push("env".into());
    let untag = Request::SetQueue(QueueAttributesRequest {
        queue: name("q"),
        attributes: untag,
    });
    assert_eq!(c.call(untag), Reply::SetQueue);
    let attributes = match c.call(Request::GetQueue { queue: name("q") }) {
        Reply::GetQueue(info) => info.attributes,
        other => panic!("GET_QUEUE answered {other:?}"),
    };
    let tags: Vec<_> = attributes.tags.iter().collect();
    assert_eq!(tags, vec![("team", "payments")]);
    assert_eq!(attributes.annotations.get("Policy"), Some("{}"));

    // A version-3 client reads the queue without them.
    let mut old = Client::connect(server.addr);
    old.hello_version(3);
    let present = old.get_queue_present_mask("q");
    assert_eq!(
        present & (attribute_bits::TAGS | attribute_bits::ANNOTATIONS),
        0,
        "present mask {present:#x}"
    );
    match old.call(Request::GetQueue { queue: name("q") }) {
        Reply::GetQueue(info) => assert!(info.attributes.tags.is_empty()),
        other => panic!("GET_QUEUE answered {other:?}"),
    }
}
