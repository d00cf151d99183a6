//! Two shards behind one port, on both backends: a delete whose receipt
//! names another shard is forwarded to its owner, and a long poll on one
//! shard is woken by a send on the other.

use std::time::Duration;

use sluice_broker::server::config::IoChoice;
use sluice_protocol::{DeleteRequest, Reply, Request};

use crate::both_backends;
use crate::server_util::{Client, TestServer, attrs, eventually, name, start};

both_backends!(
    a_delete_is_forwarded_to_the_owner_shard,
    replies_keep_request_order_behind_a_forwarded_delete,
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

/// PROTOCOL.md §3: requests take effect in the order they arrive and only a
/// RECEIVE may reply late. A DELETE forwarded to its owner shard is answered
/// after a ring round trip; a PING pipelined behind it must still be answered
/// after it, and a second DELETE of the same receipt behind them sees the
/// first one's effect (`Gone`).
fn replies_keep_request_order_behind_a_forwarded_delete(io: IoChoice) {
    let Some(server) = start(io, &["--shards", "2"]) else {
        return;
    };
    let (mut a, mut b) = one_per_shard(&server);
    a.create("q", attrs());
    a.send_body("q", "owned by shard 0");
    let m = eventually(Duration::from_secs(20), "the message", || {
        a.receive("q", 1, None, 1_000).into_iter().next()
    });
    assert_eq!(m.receipt.shard, 0);
    let delete = || {
        Request::Delete(DeleteRequest {
            queue: name("q"),
            receipts: vec![m.receipt],
        })
    };
    let first = b.send(&delete());
    let ping = b.send(&Request::Ping { nonce: 7 });
    let second = b.send(&delete());
    let order: Vec<(u32, Reply)> = (0..3).map(|_| b.read_reply()).collect();
    let ids: Vec<u32> = order.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![first, ping, second], "replies in request order");
    match (&order[0].1, &order[2].1) {
        (Reply::Delete { results: r1 }, Reply::Delete { results: r2 }) => {
            assert_eq!(r1, &vec![Ok(())], "the first delete succeeds");
            assert_eq!(
                r2,
                &vec![Err(sluice_protocol::ErrorCode::Gone)],
                "the second sees the first one's effect"
            );
        }
        other => panic!("{other:?}"),
    }
}
