//! The metrics endpoint, on both backends: `/healthz` answers and
//! `/metrics` has the queue depths, the per-queue counters (sent, moved in,
//! received, deleted, redelivered, released, dead-lettered, redriven,
//! dropped, purged), requests by operation and the lease histograms. Also
//! the engine's lease hook on its own, on the deterministic cluster. The
//! metrics operators expect: build info, `process_*`, request durations by
//! operation, errors by code (a `Busy` leaves a trace), per-shard loops, the
//! io backend, `/healthz` 503 while draining, and scrapes served while
//! another connection sits idle.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use sluice_broker::engine::{Cluster, LeaseObserver, LeaseOutcome, Op, OpResult, RegistryConfig};
use sluice_broker::server::config::IoChoice;
use sluice_protocol::{
    AttributeUpdate, ChangeVisibilityRequest, DeleteRequest, ErrorCode, MessageGroupId,
    QueueAttributesRequest, QueueKind, ReceiveRequest, Reply, Request, SendEntry, VisibilityChange,
};

use crate::both_backends;
use crate::engine_util::{qn, send_op};
use crate::server_util::{Client, attrs, eventually, start};

both_backends!(
    metrics_show_queues_counters_and_lease_histograms,
    metrics_operators_expect,
    an_idle_connection_does_not_hold_back_a_scrape,
    the_sqs_door_is_counted_by_action,
    a_fifo_queues_locked_groups_are_a_gauge,
);

/// An SQS call (AWS JSON) over a connection of its own: the reply's body.
fn sqs_call(addr: SocketAddr, action: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the SQS door");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: {addr}\r\nX-Amz-Target: AmazonSQS.{action}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the response");
    text.split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned()
}

fn the_sqs_door_is_counted_by_action(io: IoChoice) {
    let Some(server) = start(
        io,
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--sqs-listen",
            "127.0.0.1:0",
        ],
    ) else {
        return;
    };
    let metrics = server.handle().metrics_addr().expect("metrics on");
    let sqs = server.handle().sqs_addr().expect("the SQS door");
    sqs_call(sqs, "CreateQueue", r#"{"QueueName":"q"}"#);
    let missing = sqs_call(sqs, "GetQueueUrl", r#"{"QueueName":"nope"}"#);
    assert!(missing.contains("QueueDoesNotExist"), "{missing}");
    let url = format!("http://{sqs}/000000000000/q");
    sqs_call(
        sqs,
        "SendMessage",
        &format!(r#"{{"QueueUrl":"{url}","MessageBody":"x"}}"#),
    );
    let handle = |reply: &str| {
        let at = reply
            .find("\"ReceiptHandle\":\"")
            .expect("a receipt handle")
            + 17;
        reply[at..at + reply[at..].find('"').expect("its end")].to_owned()
    };
    let receive = format!(r#"{{"QueueUrl":"{url}","VisibilityTimeout":0,"WaitTimeSeconds":5}}"#);
    let first = handle(&sqs_call(sqs, "ReceiveMessage", &receive));
    let second = handle(&sqs_call(sqs, "ReceiveMessage", &receive));
    assert_ne!(first, second);
    let stale = sqs_call(
        sqs,
        "DeleteMessage",
        &format!(r#"{{"QueueUrl":"{url}","ReceiptHandle":"{first}"}}"#),
    );
    assert_eq!(stale, "{}");
    let (status, text) = http_get(metrics, "/metrics");
    assert_eq!(status, 200);
    for (series, want) in [
        ("sluice_sqs_requests_total{action=\"create_queue\"}", 1.0),
        ("sluice_sqs_requests_total{action=\"receive_message\"}", 2.0),
        ("sluice_sqs_requests_total{action=\"get_queue_url\"}", 1.0),
        ("sluice_sqs_errors_total{action=\"get_queue_url\"}", 1.0),
        ("sluice_sqs_errors_total{action=\"create_queue\"}", 0.0),
        ("sluice_sqs_stale_deletes_total", 1.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}");
    }
}

/// `sluice_queue_groups_in_flight`: a FIFO queue's groups with a message
/// in flight (on two shards: its home's), 0 for a queue without groups.
fn a_fifo_queues_locked_groups_are_a_gauge(io: IoChoice) {
    let Some(server) = start(io, &["--metrics-addr", "127.0.0.1:0", "--shards", "2"]) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    let mut c = Client::connect(server.addr);
    c.hello_version(5);
    c.create(
        "f",
        AttributeUpdate {
            kind: Some(QueueKind::Fifo),
            content_based_dedup: Some(true),
            ..AttributeUpdate::default()
        },
    );
    c.create("plain", attrs());
    let entry = |group: &str, body: &'static str| {
        SendEntry::new(body).group(MessageGroupId::new(group).unwrap())
    };
    let sent = c.send_entries(
        "f",
        &[
            entry("a", "a1"),
            entry("a", "a2"),
            entry("b", "b1"),
            entry("c", "c1"),
        ],
    );
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let gauge = |text: &str, queue: &str| {
        sample(
            text,
            &format!("sluice_queue_groups_in_flight{{queue=\"{queue}\"}}"),
        )
    };
    let until = |want: f64| {
        eventually(Duration::from_secs(20), "the gauge", || {
            let (status, text) = http_get(addr, "/metrics");
            assert_eq!(status, 200);
            (gauge(&text, "f") == Some(want)).then_some(text)
        })
    };
    let text = until(0.0);
    assert_eq!(gauge(&text, "plain"), Some(0.0));
    // a1 and a2: group a is locked.
    let mut got = Vec::new();
    eventually(Duration::from_secs(20), "a's two messages", || {
        got.extend(c.receive("f", 2, None, 1_000));
        (got.len() >= 2).then_some(())
    });
    until(1.0);
    // b1 and c1 too: three groups locked; a's deleted: two.
    eventually(Duration::from_secs(20), "b's and c's", || {
        got.extend(c.receive("f", 10, None, 1_000));
        (got.len() >= 4).then_some(())
    });
    until(3.0);
    let a: Vec<_> = got[..2].iter().map(|m| m.receipt).collect();
    assert_eq!(c.delete("f", &a), vec![Ok(()), Ok(())]);
    until(2.0);
}

pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
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
            with_source: false,
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

/// The value of the sample line that starts with `series ` (exact labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

fn metrics_operators_expect(io: IoChoice) {
    let Some(server) = start(
        io,
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--shards",
            "2",
            "--memory-max",
            "1MiB",
        ],
    ) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    let mut c = server.client();
    c.create("big", attrs());
    // Fill the memory budget until sends are refused with Busy.
    let body = Bytes::from(vec![b'x'; 60 * 1024]);
    let (mut sends, mut busy) = (0u64, 0u64);
    for _ in 0..200 {
        let results = c.send_entries("big", &[SendEntry::new(body.clone())]);
        sends += 1;
        busy += results
            .iter()
            .filter(|r| **r == Err(ErrorCode::Busy))
            .count() as u64;
        if busy >= 2 {
            break;
        }
    }
    assert!(busy >= 2, "1 MiB of memory holds fewer than 200 x 60 KiB");
    match c.call(Request::GetQueue {
        queue: crate::server_util::name("missing"),
    }) {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::QueueNotFound),
        other => panic!("{other:?}"),
    }
    c.ping();

    let (status, text) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    let version = env!("CARGO_PKG_VERSION");
    let backend = if io == IoChoice::Uring {
        "io_uring"
    } else {
        "epoll"
    };
    let want: Vec<(String, f64)> = vec![
        (format!("sluice_build_info{{version=\"{version}\"}}"), 1.0),
        (format!("sluice_io_backend{{backend=\"{backend}\"}}"), 1.0),
        ("sluice_io_backend_fallback".into(), 0.0),
        ("sluice_draining".into(), 0.0),
        ("sluice_errors_total{code=\"busy\"}".into(), busy as f64),
        ("sluice_errors_total{code=\"queue_not_found\"}".into(), 1.0),
        ("sluice_errors_total{code=\"unauthorized\"}".into(), 0.0),
        (
            "sluice_request_duration_seconds_count{op=\"send\"}".into(),
            sends as f64,
        ),
        (
            "sluice_request_duration_seconds_bucket{op=\"send\",le=\"+Inf\"}".into(),
            sends as f64,
        ),
        (
            "sluice_request_duration_seconds_count{op=\"ping\"}".into(),
            1.0,
        ),
        (
            "sluice_request_duration_seconds_count{op=\"get_queue\"}".into(),
            1.0,
        ),
        // The start check's connection and this one.
        (
            "sluice_request_duration_seconds_count{op=\"hello\"}".into(),
            2.0,
        ),
    ];
    for (series, value) in &want {
        assert_eq!(sample(&text, series), Some(*value), "{series} in:\n{text}");
    }
    for series in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "sluice_shard_loop_turns_total{shard=\"0\"}",
        "sluice_shard_loop_turns_total{shard=\"1\"}",
        "sluice_shard_loop_turns_with_events_total{shard=\"0\"}",
        "sluice_shard_busy_seconds_total{shard=\"1\"}",
        "sluice_shard_ring_received_total{shard=\"0\"}",
        "sluice_shard_ring_sent_total{shard=\"1\"}",
        "sluice_shard_connections{shard=\"0\"}",
    ] {
        let v = sample(&text, series).unwrap_or_else(|| panic!("{series} missing:\n{text}"));
        assert!(v >= 0.0, "{series} {v}");
    }
    assert!(sample(&text, "process_open_fds").is_some_and(|n| n >= 3.0));
    assert!(sample(&text, "process_resident_memory_bytes").is_some_and(|n| n > 0.0));
    let turns: f64 = (0..2)
        .filter_map(|i| {
            sample(
                &text,
                &format!("sluice_shard_loop_turns_total{{shard=\"{i}\"}}"),
            )
        })
        .sum();
    assert!(turns > 0.0, "the loops turned");
    // Durations are cumulative over the buckets.
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("sluice_request_duration_seconds_bucket{op=\"send\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(
        buckets.len() > 2 && buckets.windows(2).all(|w| w[0] <= w[1]),
        "{buckets:?}"
    );

    // Draining: /healthz answers 503 until the server is gone.
    let (status, body) = http_get(addr, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    server.handle().shutdown();
    let (status, body) = http_get(addr, "/healthz");
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("draining"), "{body}");
    let (_, text) = http_get(addr, "/metrics");
    assert_eq!(sample(&text, "sluice_draining"), Some(1.0));
}

/// A connection to the metrics port that sends nothing does not hold back
/// the scrape behind it (the endpoint's read timeout is 5 s; nothing here
/// depends on it, only on the scrape being answered while the idle
/// connection is still open).
fn an_idle_connection_does_not_hold_back_a_scrape(io: IoChoice) {
    let Some(server) = start(io, &["--metrics-addr", "127.0.0.1:0"]) else {
        return;
    };
    let addr = server.handle().metrics_addr().expect("metrics on");
    let mut idle = TcpStream::connect(addr).expect("connect");
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("sluice_build_info"), "{body}");
    let (status, _) = http_get(addr, "/healthz");
    assert_eq!(status, 200);
    // The idle connection was held open all along: it is answered now, or,
    // on a slow machine where its 5 s ran out, told 408.
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = idle.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
    let mut reply = String::new();
    let _ = idle.read_to_string(&mut reply);
    assert!(
        reply.starts_with("HTTP/1.1 200 OK") || reply.starts_with("HTTP/1.1 408"),
        "{reply:?}"
    );
}
