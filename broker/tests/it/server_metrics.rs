//! The metrics endpoint, on both backends: `/healthz` answers and
//! `/metrics` has the queue depths, the per-queue counters (sent, moved in,
//! received, deleted, redelivered, released, dead-lettered, redriven,
//! dropped, purged), requests by operation and the lease histograms. Also
//! the engine's lease hook on its own, on the deterministic cluster.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use sluice_broker::engine::{Cluster, LeaseObserver, LeaseOutcome, Op, OpResult, RegistryConfig};
use sluice_broker::server::config::IoChoice;
use sluice_protocol::{
    AttributeUpdate, ChangeVisibilityRequest, DeleteRequest, QueueAttributesRequest,
    ReceiveRequest, SendEntry, VisibilityChange,
};

use crate::both_backends;
use crate::engine_util::{qn, send_op};
use crate::server_util::{attrs, eventually, start};

both_backends!(metrics_show_queues_counters_and_lease_histograms);

fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the response");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

fn metrics_show_queues_counters_and_lease_histograms(io: IoChoice) {
    let Some(server) = start(io, &["--metrics-addr", "127.0.0.1:0", "--shards", "2"]) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    let (status, _) = http_get(addr, "/healthz");
    assert_eq!(status, 200);

    let mut c = server.client();
    c.create("orders", attrs());
    for i in 0..3 {
        c.send_body("orders", &format!("o{i}"));
    }
    // One deleted, one released, one left to expire.
    let mut got = Vec::new();
    eventually(Duration::from_secs(20), "three messages", || {
        got.extend(c.receive("orders", 3, Some(100), 1_000));
        (got.len() >= 3).then_some(())
    });
    assert_eq!(c.delete("orders", &[got[0].receipt]), vec![Ok(())]);
    match c.call(sluice_protocol::Request::ChangeVisibility(
        sluice_protocol::ChangeVisibilityRequest {
            queue: crate::server_util::name("orders"),
            entries: vec![sluice_protocol::VisibilityChange {
                receipt: got[1].receipt,
                visibility_timeout_ms: 0,
            }],
        },
    )) {
        sluice_protocol::Reply::ChangeVisibility { results } => assert_eq!(results, vec![Ok(())]),
        other => panic!("{other:?}"),
    }
    eventually(Duration::from_secs(20), "the third lease to expire", || {
        (c.stats("orders").redelivered >= 1).then_some(())
    });
    let text = eventually(Duration::from_secs(20), "the queue in /metrics", || {
        let (status, body) = http_get(addr, "/metrics");
        assert_eq!(status, 200);
        body.contains("sluice_queue_redelivered_total{queue=\"orders\"} 1")
            .then_some(body)
    });
    for needle in [
        "sluice_info{",
        "sluice_connections ",
        "sluice_requests_total{op=\"send\"} 3",
        "sluice_queue_messages{queue=\"orders\",state=\"visible\"}",
        "sluice_queue_messages{queue=\"orders\",state=\"delayed\"} 0",
        "sluice_queue_messages{queue=\"orders\",state=\"in_flight\"}",
        "sluice_queue_oldest_message_age_seconds{queue=\"orders\"}",
        "sluice_queue_sent_total{queue=\"orders\"} 3",
        "sluice_queue_deleted_total{queue=\"orders\"} 1",
        "sluice_queue_released_total{queue=\"orders\"} 1",
        "sluice_queue_dead_lettered_total{queue=\"orders\"} 0",
        "sluice_lease_hold_seconds_count{outcome=\"deleted\"} 1",
        "sluice_lease_hold_seconds_count{outcome=\"released\"} 1",
        "sluice_lease_hold_seconds_count{outcome=\"expired\"} 1",
        "sluice_lease_hold_seconds_bucket{outcome=\"expired\",le=\"+Inf\"} 1",
        "sluice_redelivery_lateness_seconds_count 1",
        "sluice_memory_used_bytes ",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let backend = if io == IoChoice::Uring {
        "io_uring"
    } else {
        "epoll"
    };
    assert!(text.contains(&format!("io_backend=\"{backend}\"")));
    let (status, _) = http_get(addr, "/nope");
    assert_eq!(status, 404);
}

/// What the engine reported: an outcome and its hold time, or `None` and a
/// lateness.
type Log = std::sync::Arc<std::sync::Mutex<Vec<(Option<LeaseOutcome>, u64)>>>;

/// Records what the engine reports.
#[derive(Default)]
struct Seen(Log);

impl LeaseObserver for Seen {
    fn lease_ended(&mut self, outcome: LeaseOutcome, held_ns: u64) {
        self.0.lock().unwrap().push((Some(outcome), held_ns));
    }
    fn redelivery_lateness(&mut self, lateness_ns: u64) {
        self.0.lock().unwrap().push((None, lateness_ns));
    }
}

#[test]
fn the_engine_reports_how_leases_end() {
    let mut c = Cluster::new(RegistryConfig {
        shards: 1,
        seed: 7,
        ..Default::default()
    });
    let seen = Seen::default();
    let log = seen.0.clone();
    c.shard_mut(0).set_lease_observer(Box::new(seen));
    let r = c.call(
        0,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: AttributeUpdate::default(),
        }),
    );
    assert!(matches!(r, OpResult::QueueCreated { .. }));
    let send = |c: &mut Cluster| {
        c.call(
            0,
            send_op("q", &[SendEntry::new(bytes::Bytes::from_static(b"x"))]),
        )
    };
    let receive = |c: &mut Cluster, vis: u32| match c.call(
        0,
        Op::Receive(ReceiveRequest {
            queue: qn("q"),
            max_messages: 1,
            visibility_timeout_ms: Some(vis),
            wait_ms: Some(0),
            bind_leases: false,
        }),
    ) {
        OpResult::Received(m) => m.into_iter().next().expect("a message"),
        other => panic!("{other:?}"),
    };
    send(&mut c);
    let m = receive(&mut c, 1_000);
    c.advance_ms(250);
    let r = c.call(
        0,
        Op::Delete(DeleteRequest {
            queue: qn("q"),
            receipts: vec![m.receipt],
        }),
    );
    assert!(matches!(r, OpResult::Deleted(ref v) if v[0].is_ok()));
    send(&mut c);
    let m = receive(&mut c, 1_000);
    c.advance_ms(100);
    let r = c.call(
        0,
        Op::ChangeVisibility(ChangeVisibilityRequest {
            queue: qn("q"),
            entries: vec![VisibilityChange {
                receipt: m.receipt,
                visibility_timeout_ms: 0,
            }],
        }),
    );
    assert!(matches!(r, OpResult::VisibilityChanged(ref v) if v[0].is_ok()));
    let _ = receive(&mut c, 500);
    c.advance_ms(600);
    // The message again, its connection closing 300 ms later.
    let m = receive(&mut c, 1_000);
    c.advance_ms(300);
    let r = c.call(
        0,
        Op::Abandon(DeleteRequest {
            queue: qn("q"),
            receipts: vec![m.receipt],
        }),
    );
    assert!(matches!(r, OpResult::VisibilityChanged(ref v) if v[0].is_ok()));
    let log = log.lock().unwrap().clone();
    let ms = |ns: u64| ns / 1_000_000;
    assert_eq!(log.len(), 5, "{log:?}");
    assert_eq!((log[0].0, ms(log[0].1)), (Some(LeaseOutcome::Deleted), 250));
    assert_eq!(
        (log[1].0, ms(log[1].1)),
        (Some(LeaseOutcome::Released), 100)
    );
    assert_eq!((log[2].0, ms(log[2].1)), (Some(LeaseOutcome::Expired), 500));
    assert_eq!(log[3].0, None, "then the lateness");
    assert!(ms(log[3].1) <= 100, "{log:?}");
    assert_eq!(
        (log[4].0, ms(log[4].1)),
        (Some(LeaseOutcome::Abandoned), 300)
    );
}
