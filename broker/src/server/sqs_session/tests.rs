//! The SQS session driven by hand: HTTP bytes in, commands and responses
//! out, an engine that answers as each test says. No socket anywhere.

use sluice_protocol::QueueName;
use sluice_sqs::http::HttpLimits;
use sluice_sqs::{Door, DoorConfig};

use super::{SqsConfig, SqsSession};
use crate::engine::{Op, OpResult};
use crate::server::limits::CLOSE_FLUSH_TIMEOUT_NS;
use crate::server::session::testing::{FakeEngine, MS, T0, config};
use crate::server::session::{Command, Phase, SessionConfig, SessionContext};
use crate::server::shared::ShardStats;

struct Harness {
    config: SessionConfig,
    stats: ShardStats,
    engine: FakeEngine,
    session: SqsSession,
    now_ns: u64,
    draining: bool,
    commands: Vec<Command>,
    /// Everything sent, as text.
    sent: String,
}

fn sqs_config() -> SqsConfig {
    SqsConfig {
        door: Door::new(DoorConfig::default()),
        http: HttpLimits::default(),
        request_timeout_ns: 10_000 * MS,
        idle_timeout_ns: 120_000 * MS,
    }
}

fn list_queues() -> Vec<u8> {
    request("ListQueues", "{}", "")
}

fn request(action: &str, body: &str, extra: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:9324\r\nX-Amz-Target: AmazonSQS.{action}\r\nContent-Type: application/x-amz-json-1.0\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Harness {
    fn new() -> Harness {
        Harness {
            config: config(),
            stats: ShardStats::new(),
            engine: FakeEngine::default(),
            session: SqsSession::new("127.0.0.1:5000".parse().unwrap(), sqs_config(), T0),
            now_ns: T0,
            draining: false,
            commands: Vec::new(),
            sent: String::new(),
        }
    }

    fn with<R>(
        &mut self,
        f: impl FnOnce(&mut SqsSession, &SessionContext<'_>, &mut FakeEngine) -> R,
    ) -> R {
        let cx = SessionContext {
            now_ns: self.now_ns,
            draining: self.draining,
            unsent_over: false,
            io_unsent: 0,
            config: &self.config,
            stats: &self.stats,
        };
        let r = f(&mut self.session, &cx, &mut self.engine);
        self.session.flush();
        for c in self.session.commands() {
            if let Command::Send(bytes) = &c {
                self.sent.push_str(&String::from_utf8_lossy(bytes));
            }
            self.commands.push(c);
        }
        r
    }

    fn data(&mut self, bytes: &[u8]) {
        self.with(|s, cx, e| s.on_data(bytes, cx, e));
    }

    fn tick(&mut self) {
        self.with(|s, cx, e| s.tick(cx, e));
    }

    fn closed(&self) -> bool {
        self.commands.contains(&Command::Close)
    }

    fn responses(&self) -> usize {
        self.sent.matches("HTTP/1.1 ").count()
    }
}

#[test]
fn a_request_is_answered_from_the_engine() {
    let mut h = Harness::new();
    h.data(&list_queues());
    assert_eq!(h.engine.submitted.len(), 1);
    assert!(matches!(h.engine.submitted[0], Op::ListQueues { .. }));
    assert!(h.sent.starts_with("HTTP/1.1 200 OK\r\n"), "{}", h.sent);
    assert!(h.sent.contains("x-amzn-RequestId: "), "{}", h.sent);
    assert!(h.sent.ends_with("{\"QueueUrls\":[]}"), "{}", h.sent);
    assert!(!h.closed());
    assert_eq!(h.session.phase(), Phase::Ready);
    assert_eq!(h.stats.sqs.requests.iter().map(|c| c.get()).sum::<u64>(), 1);
}

#[test]
fn a_request_in_pieces_is_answered_once_whole() {
    let mut h = Harness::new();
    let bytes = list_queues();
    for b in &bytes[..bytes.len() - 1] {
        h.data(std::slice::from_ref(b));
        assert_eq!(h.responses(), 0);
    }
    h.data(&bytes[bytes.len() - 1..]);
    assert_eq!(h.responses(), 1);
}

#[test]
fn pipelined_requests_wait_for_the_one_before_and_are_answered_in_order() {
    let mut h = Harness::new();
    h.engine.script.push_back(None);
    let mut two = list_queues();
    two.extend_from_slice(&request("GetQueueUrl", "{\"QueueName\":\"nope\"}", ""));
    h.data(&two);
    // The first waits in the engine; the second is not served yet.
    assert_eq!(h.engine.submitted.len(), 1);
    assert_eq!(h.responses(), 0);
    let names = vec![QueueName::new("q1").unwrap()];
    h.with(|s, cx, e| assert!(s.on_result(1, OpResult::Queues(names), cx, e)));
    assert_eq!(h.engine.submitted.len(), 2);
    assert_eq!(h.responses(), 2);
    let first = h.sent.find("QueueUrls").expect("the list first");
    let second = h
        .sent
        .find("HTTP/1.1 200")
        .map(|_| h.sent.rfind("HTTP/1.1 ").unwrap());
    assert!(second.is_some_and(|s| s > first), "{}", h.sent);
    // A result for a ticket that is not this session's is not taken.
    h.with(|s, cx, e| assert!(!s.on_result(7, OpResult::QueueUpdated, cx, e)));
}

#[test]
fn a_bad_request_is_answered_with_its_status_and_closes() {
    for (bytes, status) in [
        (&b"\x00\x01\x02garbage\r\n\r\n"[..], "400"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n",
            "413",
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", "400"),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "400",
        ),
    ] {
        let mut h = Harness::new();
        h.data(bytes);
        assert!(
            h.sent.starts_with(&format!("HTTP/1.1 {status} ")),
            "{:?}: {}",
            String::from_utf8_lossy(bytes),
            h.sent
        );
        assert!(h.closed());
        assert!(h.engine.submitted.is_empty());
        assert_eq!(h.stats.closed_bad_input.get(), 1);
        // Nothing more is read.
        h.data(&list_queues());
        assert_eq!(h.responses(), 1);
    }
}

#[test]
fn ten_thousand_headers_are_refused() {
    let mut h = Harness::new();
    let mut bytes = b"POST / HTTP/1.1\r\n".to_vec();
    for i in 0..10_000 {
        bytes.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    bytes.extend_from_slice(b"\r\n");
    h.data(&bytes);
    assert!(h.sent.starts_with("HTTP/1.1 431 "), "{}", h.sent);
    assert!(h.closed());
}

#[test]
fn a_chunked_body_is_served() {
    let mut h = Harness::new();
    let bytes = b"POST / HTTP/1.1\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    h.data(bytes);
    assert!(h.sent.starts_with("HTTP/1.1 200 OK"), "{}", h.sent);
}

#[test]
fn a_request_that_trickles_in_is_cut_off_at_its_deadline() {
    let mut h = Harness::new();
    let bytes = list_queues();
    h.data(&bytes[..10]);
    h.now_ns += 9_999 * MS;
    h.tick();
    assert!(!h.closed());
    h.data(&bytes[10..11]);
    h.now_ns += MS;
    h.tick();
    assert!(h.sent.starts_with("HTTP/1.1 408 "), "{}", h.sent);
    assert!(h.closed());
    // A peer that does not read its last response is cut off.
    h.now_ns += CLOSE_FLUSH_TIMEOUT_NS;
    h.tick();
    assert!(h.commands.contains(&Command::CloseNow));
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let mut h = Harness::new();
    h.data(&list_queues());
    h.now_ns += 119_000 * MS;
    h.tick();
    assert!(!h.closed());
    h.now_ns += 1_000 * MS;
    h.tick();
    assert!(h.closed());
    assert_eq!(h.stats.closed_bad_input.get(), 0);
}

#[test]
fn a_long_poll_is_not_an_idle_connection() {
    let mut h = Harness::new();
    h.engine.script.push_back(None);
    h.data(&list_queues());
    h.now_ns += 200_000 * MS;
    h.tick();
    assert!(!h.closed());
}

#[test]
fn expect_continue_is_answered_before_the_body() {
    let mut h = Harness::new();
    let full = request("ListQueues", "{}", "Expect: 100-continue\r\n");
    let head = full.len() - 2;
    h.data(&full[..head]);
    assert_eq!(h.sent, "HTTP/1.1 100 Continue\r\n\r\n");
    h.data(&full[head..]);
    assert!(h.sent.contains("HTTP/1.1 200 OK"), "{}", h.sent);
    assert_eq!(h.sent.matches("100 Continue").count(), 1);
}

#[test]
fn connection_close_closes_after_the_response() {
    let mut h = Harness::new();
    h.data(&request("ListQueues", "{}", "Connection: close\r\n"));
    assert!(h.sent.contains("Connection: close\r\n"), "{}", h.sent);
    assert!(h.closed());
}

#[test]
fn other_methods_are_405() {
    let mut h = Harness::new();
    h.data(b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(h.sent.starts_with("HTTP/1.1 405 "), "{}", h.sent);
    assert!(h.sent.contains("Allow: POST, GET\r\n"));
    assert!(!h.closed());
}

#[test]
fn sqs_errors_are_answered_and_counted() {
    let mut h = Harness::new();
    h.data(&request("NoSuchThing", "{}", ""));
    h.data(&request("CreateQueue", "{\"QueueName\": 5}", ""));
    h.data(&request("CreateQueue", "{not json", ""));
    assert_eq!(h.sent.matches("HTTP/1.1 400 ").count(), 3, "{}", h.sent);
    assert!(h.sent.contains("x-amzn-query-error: "), "{}", h.sent);
    assert!(!h.closed());
    assert_eq!(h.stats.sqs.errors.iter().map(|c| c.get()).sum::<u64>(), 3);
}

#[test]
fn while_draining_a_request_gets_503_and_the_connection_closes() {
    let mut h = Harness::new();
    h.draining = true;
    h.data(&list_queues());
    assert!(h.sent.starts_with("HTTP/1.1 503 "), "{}", h.sent);
    assert!(h.closed());
    assert!(h.engine.submitted.is_empty());
}

#[test]
fn a_closed_connection_cancels_its_call_in_the_engine() {
    let mut h = Harness::new();
    h.engine.script.push_back(None);
    h.data(&list_queues());
    h.session.on_closed(&mut h.engine);
    assert_eq!(h.engine.cancelled, vec![1]);
}

#[test]
fn a_refused_connection_is_told_503_and_closed() {
    let mut s = SqsSession::refused("127.0.0.1:5000".parse().unwrap(), sqs_config(), T0, "full");
    assert_eq!(s.phase(), Phase::Closing);
    let commands: Vec<Command> = s.commands().collect();
    let Some(Command::Send(bytes)) = commands.first() else {
        panic!("{commands:?}");
    };
    let text = String::from_utf8_lossy(bytes);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.ends_with("full\n"), "{text}");
    assert_eq!(commands.last(), Some(&Command::Close));
}
