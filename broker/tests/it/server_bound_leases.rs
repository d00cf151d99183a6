//! Leases bound to their connection, the session timeout and the manual
//! clock, end to end through the server on both backends. Visibility
//! timeouts here are far longer than any test runs (10 min, 1 h), so a
//! message that comes back at all came back because its connection closed,
//! not because its lease ran out: no timing is asserted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_broker::server::config::IoChoice;
use sluice_protocol::Millis;
use sluice_protocol::{
    ChangeVisibilityRequest, ErrorCode, HelloRequest, MessageId, Reply, Request, SendEntry,
    VisibilityChange,
};

use crate::both_backends;
use crate::server_util::{Client, TestServer, attrs, name, start};

const LIMIT: Duration = Duration::from_secs(20);
/// A lease that outlives every test.
const LONG_MS: u32 = 600_000;

both_backends!(
    bound_leases_come_back_at_once_when_the_connection_closes,
    only_leases_still_current_are_released,
    unbound_leases_wait_out_their_timeout,
    a_silent_connection_is_closed_and_its_leases_released,
    pings_keep_an_idle_or_long_polling_connection_open,
    advance_clock_on_the_real_clock_is_refused_and_changes_nothing,
    a_manual_clock_ends_leases_delays_and_long_polls_when_moved,
);

/// A client connected to shard `shard` (connections are spread by the
/// kernel: it opens them until one lands there).
fn client_on(server: &TestServer, shard: u16) -> Client {
    for _ in 0..200 {
        let mut c = Client::connect(server.addr);
        let hello = c.hello(b"").expect("HELLO accepted");
        assert_eq!(
            hello.version, 1,
            "a version-1 client is answered in version 1"
        );
        if hello.shard == shard {
            return c;
        }
    }
    panic!("no connection landed on shard {shard}");
}

/// Receives with `c` until `n` messages came, each receive long-polling.
fn receive_n(
    c: &mut Client,
    queue: &str,
    n: usize,
    bound: bool,
) -> Vec<sluice_protocol::ReceivedMessage> {
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < n {
        assert!(
            start.elapsed() < LIMIT,
            "{} of {n} messages received",
            got.len()
        );
        let batch = if bound {
            c.receive_bound(queue, 1024, Some(LONG_MS), 1_000)
        } else {
            c.receive(queue, 1024, Some(LONG_MS), 1_000)
        };
        got.extend(batch);
    }
    got
}

fn ids(messages: &[sluice_protocol::ReceivedMessage]) -> BTreeSet<MessageId> {
    messages.iter().map(|m| m.id).collect()
}

fn bound_leases_come_back_at_once_when_the_connection_closes(io: IoChoice) {
    let Some(server) = start(io, &["--shards", "2"]) else {
        return;
    };
    let mut admin = server.client();
    admin.create("jobs", attrs());
    // Messages owned by both shards: each producer's shard accepts its own.
    let mut sent = BTreeSet::new();
    for shard in [0, 1] {
        let mut producer = client_on(&server, shard);
        for chunk in 0..4 {
            let entries: Vec<SendEntry> = (0..25)
                .map(|i| SendEntry::new(Bytes::from(format!("{shard}-{chunk}-{i}"))))
                .collect();
            for r in producer.send_entries("jobs", &entries) {
                sent.insert(r.expect("accepted").id);
            }
        }
    }
    assert_eq!(sent.len(), 200);

    let mut consumer = server.client();
    let held = receive_n(&mut consumer, "jobs", 200, true);
    assert_eq!(ids(&held), sent);
    let owners: BTreeSet<u16> = held.iter().map(|m| m.receipt.shard).collect();
    assert_eq!(owners, BTreeSet::from([0, 1]), "leases on both shards");
    let s = admin.stats("jobs");
    assert_eq!((s.in_flight, s.visible), (200, 0));

    // The consumer goes away without a word.
    drop(consumer);
    let mut other = server.client();
    let again = receive_n(&mut other, "jobs", 200, false);
    assert_eq!(ids(&again), sent, "every message is receivable again");
    assert!(
        again
            .iter()
            .all(|m| m.delivery() == 2 && m.receive_count == 2)
    );
    let s = admin.stats("jobs");
    assert_eq!(
        (s.released, s.redelivered, s.in_flight, s.received),
        (200, 0, 200, 400),
        "{s:?}"
    );
    assert_eq!(admin.server_counter("leases_abandoned"), 200);
}

fn change(queue: &str, receipt: sluice_protocol::Receipt, ms: u32) -> Request {
    Request::ChangeVisibility(ChangeVisibilityRequest {
        queue: name(queue),
        entries: vec![VisibilityChange {
            receipt,
            visibility_timeout_ms: ms,
        }],
    })
}

fn only_leases_still_current_are_released(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut admin = server.client();
    admin.create("jobs", attrs());
    let entries: Vec<SendEntry> = (0..4)
        .map(|i| SendEntry::new(Bytes::from(format!("m{i}"))))
        .collect();
    admin.send_entries("jobs", &entries);
    let mut a = server.client();
    let mut held = receive_n(&mut a, "jobs", 4, true);
    held.sort_by_key(|m| m.body.clone());
    let [m0, m1, m2, m3] = &held[..] else {
        panic!("{held:?}")
    };
    // A deletes m0, releases m1 and extends m2; m3 it leaves alone.
    assert_eq!(a.delete("jobs", &[m0.receipt]), [Ok(())]);
    assert!(
        matches!(a.call(change("jobs", m1.receipt, 0)), Reply::ChangeVisibility { results } if results == [Ok(())])
    );
    assert!(
        matches!(a.call(change("jobs", m2.receipt, LONG_MS)), Reply::ChangeVisibility { results } if results == [Ok(())])
    );
    // B receives the released m1: its lease is B's now.
    let mut b = server.client();
    let b_held = receive_n(&mut b, "jobs", 1, false);
    assert_eq!(b_held[0].id, m1.id);

    drop(a);
    let mut c = server.client();
    let back = receive_n(&mut c, "jobs", 2, false);
    assert_eq!(ids(&back), BTreeSet::from([m2.id, m3.id]));
    assert!(
        c.receive("jobs", 10, None, 0).is_empty(),
        "nothing else came back"
    );
    let s = admin.stats("jobs");
    assert_eq!((s.in_flight, s.visible, s.deleted), (3, 0, 1), "{s:?}");
    assert_eq!(s.released, 3, "one by the client, two by the close");
    // B's lease of m1 was left alone.
    assert_eq!(b.delete("jobs", &[b_held[0].receipt]), [Ok(())]);
}

fn unbound_leases_wait_out_their_timeout(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut admin = server.client();
    admin.create("jobs", attrs());
    admin.send_body("jobs", "x");
    let mut a = server.client();
    let held = receive_n(&mut a, "jobs", 1, false);
    drop(a);
    // Closing changed nothing: the lease holds (10 min).
    let mut b = server.client();
    b.ping();
    assert!(b.receive("jobs", 1, None, 500).is_empty());
    let s = admin.stats("jobs");
    assert_eq!((s.in_flight, s.released), (1, 0));
    assert_eq!(admin.server_counter("leases_abandoned"), 0);
    assert_eq!(b.delete("jobs", &[held[0].receipt]), [Ok(())]);
}

fn hello_v2(c: &mut Client, session_timeout_ms: u32) {
    let reply = c
        .hello_with(HelloRequest {
            version: 2,
            token: Bytes::new(),
            session_timeout_ms,
        })
        .expect("HELLO accepted");
    assert_eq!(reply.version, 2);
}

fn a_silent_connection_is_closed_and_its_leases_released(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut admin = server.client();
    admin.create("jobs", attrs());
    let sent = admin.send_body("jobs", "x");
    let mut a = Client::connect(server.addr);
    hello_v2(&mut a, 200);
    let held = a.receive_bound("jobs", 1, Some(LONG_MS), 1_000);
    assert_eq!(held.len(), 1);
    // Silent from now on: the server closes the connection...
    let frames = a.read_until_closed();
    assert!(frames.is_empty(), "closed without a word: {frames:?}");
    // ...and the message comes back.
    let mut b = server.client();
    let back = receive_n(&mut b, "jobs", 1, false);
    assert_eq!(back[0].id, sent.id);
    assert_eq!(admin.server_counter("connections_timed_out"), 1);
    assert_eq!(admin.server_counter("leases_abandoned"), 1);
}

fn pings_keep_an_idle_or_long_polling_connection_open(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut admin = server.client();
    admin.create("jobs", attrs());
    let mut a = Client::connect(server.addr);
    hello_v2(&mut a, 200);
    // Idle but for PINGs, for five timeouts.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        a.ping();
        std::thread::sleep(Duration::from_millis(40));
    }
    // Long-polling for five timeouts, PINGs beside it.
    let poll = a.send(&Client::receive_request("jobs", 1, None, 1_000));
    let until = Instant::now() + Duration::from_millis(1_100);
    while Instant::now() < until {
        a.ping();
        std::thread::sleep(Duration::from_millis(40));
    }
    match a.wait(poll) {
        Reply::Receive { messages } => assert!(messages.is_empty()),
        other => panic!("{other:?}"),
    }
    a.ping();
    assert_eq!(admin.server_counter("connections_timed_out"), 0);
}

fn advance_clock_on_the_real_clock_is_refused_and_changes_nothing(io: IoChoice) {
    let Some(server) = start(io, &[]) else { return };
    let mut a = server.client();
    a.create("jobs", attrs());
    a.send_body("jobs", "x");
    let held = a.receive("jobs", 1, Some(3_600_000), 1_000);
    assert_eq!(held.len(), 1);
    match a.call(Request::AdvanceClock { by_ms: 7_200_000 }) {
        Reply::Error(e) => {
            assert_eq!(e.code, ErrorCode::Unsupported);
            assert!(e.message.contains("--clock manual"), "{}", e.message);
        }
        other => panic!("ADVANCE_CLOCK answered {other:?}"),
    }
    // Nothing moved: the hour-long lease holds, the connection goes on.
    a.ping();
    assert!(a.receive("jobs", 1, None, 0).is_empty());
    let s = a.stats("jobs");
    assert_eq!((s.in_flight, s.visible, s.redelivered), (1, 0, 0));
    assert_eq!(a.delete("jobs", &[held[0].receipt]), [Ok(())]);
}

fn advance(c: &mut Client, by_ms: u64) -> u64 {
    match c.call(Request::AdvanceClock { by_ms }) {
        Reply::AdvanceClock { elapsed_ms, .. } => elapsed_ms,
        other => panic!("ADVANCE_CLOCK answered {other:?}"),
    }
}

fn a_manual_clock_ends_leases_delays_and_long_polls_when_moved(io: IoChoice) {
    let Some(server) = start(io, &["--clock", "manual", "--shards", "2"]) else {
        return;
    };
    let mut a = client_on(&server, 0);
    let mut b = client_on(&server, 1);
    a.create("jobs", attrs());
    let sent = a.send_body("jobs", "x");
    // A 30 s lease (the queue's default) runs out only when the clock moves.
    let first = a.receive("jobs", 1, None, 0);
    assert_eq!(first.len(), 1);
    assert!(b.receive("jobs", 1, None, 0).is_empty());
    assert_eq!(advance(&mut b, 29_999), 29_999);
    assert!(b.receive("jobs", 1, None, 0).is_empty(), "1 ms left");
    assert_eq!(advance(&mut a, 1), 30_000);
    let again = b.receive("jobs", 1, None, 0);
    assert_eq!((again[0].id, again[0].receive_count), (sent.id, 2));
    assert_eq!(first[0].delivery() + 1, again[0].delivery());
    assert_eq!(
        again[0].first_received_at_ms(),
        first[0].first_received_at_ms(),
        "stamped on the manual wall clock"
    );

    // A delay ends when the clock passes it.
    let delayed = SendEntry {
        delay: Some(Millis::new(5_000)),
        ..SendEntry::new(Bytes::from_static(b"later"))
    };
    a.send_entries("jobs", &[delayed]);
    assert!(a.receive("jobs", 1, None, 0).is_empty());
    advance(&mut b, 5_000);
    assert_eq!(&a.receive("jobs", 1, None, 0)[0].body[..], b"later");

    // A long poll of 20 s (manual time) on one shard is answered, empty,
    // when a client of the other shard moves the clock past it.
    let poll = a.send(&Client::receive_request("jobs", 1, None, 20_000));
    a.ping();
    advance(&mut b, 20_000);
    match a.wait(poll) {
        Reply::Receive { messages } => assert!(messages.is_empty()),
        other => panic!("{other:?}"),
    }
    // The in-process handle moves the same clock: both leases of 30 s
    // (x's second, from 30 s; later's, from 35 s) run out by 65 s.
    let (elapsed_ms, _) = server
        .handle()
        .advance_clock(Duration::from_secs(10))
        .expect("a manual clock");
    assert_eq!(elapsed_ms, 65_000);
    assert_eq!(advance(&mut a, 0), 65_000);
    let s = a.stats("jobs");
    assert_eq!((s.redelivered, s.visible, s.in_flight), (3, 2, 0), "{s:?}");
}
