//! Two shards behind one port, on both backends: a delete whose receipt
//! names another shard is forwarded to its owner, and a long poll on one
//! shard is woken by a send on the other.

use std::time::Duration;

use sluice_broker::server::config::IoChoice;
use sluice_protocol::Reply;

use crate::both_backends;
use crate::server_util::{Client, TestServer, attrs, eventually, start};

both_backends!(
    a_delete_is_forwarded_to_the_owner_shard,
    a_long_poll_is_woken_by_a_send_on_another_shard,
);

/// Connections on shard 0 and on shard 1: connects until HELLO has
/// reported both (the kernel spreads connections by a hash).
fn one_per_shard(server: &TestServer) -> (Client, Client) {
    let mut on: [Option<Client>; 2] = [None, None];
    for _ in 0..500 {
        let mut c = Client::connect(server.addr);
        let hello = c.hello(b"").expect("HELLO");
        assert_eq!(hello.shards, 2);
        let slot = &mut on[usize::from(hello.shard)];
        if slot.is_none() {
            *slot = Some(c);
        }
        if on.iter().all(Option::is_some) {
            let [a, b] = on;
            return (a.unwrap(), b.unwrap());
        }
    }
    panic!("500 connections all landed on one shard");
}

fn a_delete_is_forwarded_to_the_owner_shard(io: IoChoice) {
    let Some(server) = start(io, &["--shards", "2"]) else {
        return;
    };
    let (mut a, mut b) = one_per_shard(&server);
    a.create("q", attrs());
    let sent = a.send_body("q", "owned by shard 0");
    let m = eventually(Duration::from_secs(20), "the message", || {
        a.receive("q", 1, None, 1_000).into_iter().next()
    });
    assert_eq!(m.id, sent.id);
    assert_eq!(m.receipt.shard, 0, "the receipt names the owner");
    assert_eq!(b.delete("q", &[m.receipt]), vec![Ok(())]);
    let s = b.stats("q");
    assert_eq!((s.deleted, s.in_flight, s.visible), (1, 0, 0));
    assert!(s.identity_holds());
}

fn a_long_poll_is_woken_by_a_send_on_another_shard(io: IoChoice) {
    let Some(server) = start(io, &["--shards", "2"]) else {
        return;
    };
    let (mut a, mut b) = one_per_shard(&server);
    a.create("q", attrs());
    // Shard 1 waits up to 20 s; the PING after it proves it was handled
    // (requests take effect in order) before the send.
    let id = b.send(&Client::receive_request("q", 10, None, 20_000));
    b.ping();
    let sent = a.send_body("q", "wake up");
    match b.wait(id) {
        Reply::Receive { messages } => {
            let got = messages.to_messages();
            assert_eq!(got.len(), 1, "woken with the message, not by the deadline");
            assert_eq!(got[0].id, sent.id);
            assert_eq!(got[0].receipt.shard, 0);
        }
        other => panic!("{other:?}"),
    }
}
