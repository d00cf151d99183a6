//! Graceful shutdown, on both backends: a waiting receive gets an empty
//! batch at once, what is in flight is answered, connections close, and
//! the server's threads end.

use std::time::Duration;

use sluice_broker::server::config::IoChoice;
use sluice_protocol::{ErrorCode, Reply, Request};

use crate::both_backends;
use crate::server_util::{Client, attrs, error_of, start};

both_backends!(
    a_waiting_receive_gets_an_empty_batch_and_everything_is_answered,
    shutdown_on_two_shards_ends_every_thread,
);

fn a_waiting_receive_gets_an_empty_batch_and_everything_is_answered(io: IoChoice) {
    let Some(mut server) = start(io, &["--shutdown-timeout", "20s"]) else {
        return;
    };
    let mut waiter = server.client();
    waiter.create("q", attrs());
    let wait_id = waiter.send(&Client::receive_request("q", 10, None, 20_000));
    waiter.ping(); // the receive is parked

    // A pipelined burst, written and not read yet when shutdown starts.
    let mut busy = server.client();
    let ids: Vec<u32> = (0..200)
        .map(|i| busy.send(&Request::Ping { nonce: i }))
        .collect();

    let handle = server.server.take_handle();
    handle.shutdown();
    match waiter.wait(wait_id) {
        Reply::Receive { messages } => assert!(messages.is_empty()),
        other => panic!("the waiting receive got {other:?}"),
    }
    // Then the waiter's connection closes (after at most a ShuttingDown
    // notice).
    for f in waiter.read_until_closed() {
        assert_eq!(error_of(&f).map(|e| e.code), Some(ErrorCode::ShuttingDown));
    }
    // Every pipelined request got exactly one answer: a PONG, or
    // ShuttingDown if it arrived after the shutdown began.
    let mut answered = 0;
    for f in busy.read_until_closed() {
        if f.request_id == 0 {
            continue;
        }
        assert!(ids.contains(&f.request_id));
        match Reply::decode(f.opcode, f.payload).unwrap() {
            Reply::Pong { nonce } => {
                assert_eq!(u64::from(f.request_id), nonce + 2, "HELLO took id 1")
            }
            Reply::Error(e) => assert_eq!(e.code, ErrorCode::ShuttingDown),
            other => panic!("{other:?}"),
        }
        answered += 1;
    }
    assert_eq!(answered, ids.len(), "one answer per request");
    handle.join().expect("a clean stop");
    // Nothing listens any more.
    assert!(
        std::net::TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).is_err()
            || Client::connect(server.addr).read_until_closed().len() <= 1
    );
}

fn shutdown_on_two_shards_ends_every_thread(io: IoChoice) {
    let Some(mut server) = start(io, &["--shards", "2", "--shutdown-timeout", "20s"]) else {
        return;
    };
    let mut clients: Vec<Client> = (0..8).map(|_| server.client()).collect();
    clients[0].create("q", attrs());
    let waits: Vec<u32> = clients
        .iter_mut()
        .map(|c| c.send(&Client::receive_request("q", 1, None, 20_000)))
        .collect();
    for c in &mut clients {
        c.ping();
    }
    let handle = server.server.take_handle();
    handle.shutdown();
    for (c, id) in clients.iter_mut().zip(waits) {
        match c.wait(id) {
            Reply::Receive { messages } => assert!(messages.is_empty()),
            other => panic!("{other:?}"),
        }
        let _ = c.read_until_closed();
    }
    handle.join().expect("a clean stop");
}
