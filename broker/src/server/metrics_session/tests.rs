//! The metrics session driven by hand: HTTP bytes in, commands and the
//! response out, an exposition whose shards publish when each test says.
//! No socket anywhere.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sluice_sqs::http::HttpLimits;

use super::{EXPOSITION_CONTENT_TYPE, Exposition, MetricsConfig, MetricsSession};
use crate::engine::{Op, OpResult};
use crate::server::session::testing::{MS, T0, config as session_config};
use crate::server::session::{
    Command, EngineAccess, Phase, SessionConfig, SessionContext, Submitted,
};
use crate::server::shared::ShardStats;

/// Shards publish when `published` is set; `render` says how many scrapes
/// began.
#[derive(Debug, Default)]
struct FakeExposition {
    begun: AtomicU64,
    published: AtomicBool,
    draining: AtomicBool,
    panics: AtomicBool,
}

impl Exposition for FakeExposition {
    fn begin_scrape(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn scraped(&self, _generation: u64) -> bool {
        self.published.load(Ordering::SeqCst)
    }

    fn render(&self, out: &mut String) {
        assert!(!self.panics.load(Ordering::SeqCst), "a broken source");
        out.push_str("# TYPE sluice_up gauge\nsluice_up 1\n");
    }

    fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// The session never asks the engine anything.
struct NoEngine;

impl EngineAccess for NoEngine {
    fn submit(&mut self, op: Op) -> Submitted {
        panic!("the metrics session submitted {op:?}")
    }
    fn submit_unanswered(&mut self, op: Op) {
        panic!("the metrics session submitted {op:?}")
    }
    fn cancel(&mut self, _ticket: u64) {}
    fn recycle(&mut self, _result: OpResult) {}
}

struct Harness {
    config: SessionConfig,
    stats: ShardStats,
    source: Arc<FakeExposition>,
    session: MetricsSession,
    now_ns: u64,
    commands: Vec<Command>,
    sent: String,
}

fn config(source: Arc<FakeExposition>) -> MetricsConfig {
    MetricsConfig {
        source,
        http: HttpLimits {
            head_bytes_max: 8 * 1024,
            headers_max: 100,
            body_bytes_max: 64 * 1024,
        },
        head_timeout_ns: 2_000 * MS,
        exchange_timeout_ns: 10_000 * MS,
        scrape_wait_ns: 250 * MS,
    }
}

impl Harness {
    fn new() -> Harness {
        let source = Arc::new(FakeExposition::default());
        Harness {
            config: session_config(),
            stats: ShardStats::new(),
            session: MetricsSession::new(
                "127.0.0.1:5000".parse().unwrap(),
                config(source.clone()),
                T0,
            ),
            source,
            now_ns: T0,
            commands: Vec::new(),
            sent: String::new(),
        }
    }

    fn with<R>(
        &mut self,
        f: impl FnOnce(&mut MetricsSession, &SessionContext<'_>, &mut NoEngine) -> R,
    ) -> R {
        let cx = SessionContext {
            now_ns: self.now_ns,
            draining: false,
            unsent_over: false,
            io_unsent: 0,
            config: &self.config,
            stats: &self.stats,
        };
        let r = f(&mut self.session, &cx, &mut NoEngine);
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

    fn poll(&mut self) -> bool {
        let now = self.now_ns;
        self.with(|s, _, _| s.poll_scrape(now))
    }

    fn closed(&self) -> bool {
        self.commands.contains(&Command::Close)
    }

    fn cut(&self) -> bool {
        self.commands.contains(&Command::CloseNow)
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:9090\r\nAccept: */*\r\n\r\n").into_bytes()
}

#[test]
fn a_scrape_waits_for_every_shard_then_answers_the_exposition() {
    let mut h = Harness::new();
    h.data(&get("/metrics"));
    assert!(h.session.awaits_scrape() && !h.session.is_reading());
    assert_eq!(h.source.begun.load(Ordering::SeqCst), 1);
    assert!(!h.poll(), "no shard has published");
    assert!(h.sent.is_empty());
    h.source.published.store(true, Ordering::SeqCst);
    assert!(h.poll());
    assert!(h.sent.starts_with("HTTP/1.1 200 OK\r\n"), "{}", h.sent);
    assert!(
        h.sent
            .contains(&format!("Content-Type: {EXPOSITION_CONTENT_TYPE}\r\n"))
    );
    assert!(h.sent.contains("Content-Length: 35\r\n"), "{}", h.sent);
    assert!(h.sent.contains("Connection: close\r\n"));
    assert!(
        h.sent
            .ends_with("\r\n\r\n# TYPE sluice_up gauge\nsluice_up 1\n")
    );
    assert!(h.closed() && !h.session.awaits_scrape());
    assert_eq!(h.session.phase(), Phase::Closing);
    // Polled again, nothing more.
    assert!(h.poll());
    assert_eq!(h.sent.matches("HTTP/1.1").count(), 1);
}

#[test]
fn a_scrape_whose_shards_do_not_publish_in_time_answers_what_they_last_did() {
    let mut h = Harness::new();
    h.data(&get("/metrics?x=1"));
    h.now_ns += 249 * MS;
    assert!(!h.poll());
    h.now_ns += MS;
    assert!(h.poll());
    assert!(h.sent.starts_with("HTTP/1.1 200 OK\r\n"), "{}", h.sent);
}

#[test]
fn head_health_not_found_and_other_methods() {
    let mut h = Harness::new();
    h.data(b"HEAD /metrics HTTP/1.1\r\n\r\n");
    h.source.published.store(true, Ordering::SeqCst);
    assert!(h.poll());
    assert!(h.sent.contains("Content-Length: 35\r\n"), "{}", h.sent);
    assert!(h.sent.ends_with("\r\n\r\n"), "no body: {}", h.sent);

    let mut h = Harness::new();
    h.data(&get("/healthz"));
    assert!(h.sent.starts_with("HTTP/1.1 200 OK\r\n") && h.sent.ends_with("ok\n"));
    assert!(h.closed());
    let mut h = Harness::new();
    h.source.draining.store(true, Ordering::SeqCst);
    h.data(&get("/healthz"));
    assert!(h.sent.starts_with("HTTP/1.1 503 "), "{}", h.sent);

    let mut h = Harness::new();
    h.data(&get("/nope"));
    assert!(h.sent.starts_with("HTTP/1.1 404 "), "{}", h.sent);
    let mut h = Harness::new();
    h.data(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(h.sent.starts_with("HTTP/1.1 405 "), "{}", h.sent);
    assert!(h.sent.contains("Allow: GET, HEAD\r\n"));
    assert_eq!(h.source.begun.load(Ordering::SeqCst), 0);
}

#[test]
fn a_request_in_pieces_is_answered_once_whole() {
    let mut h = Harness::new();
    let bytes = get("/healthz");
    for b in &bytes[..bytes.len() - 1] {
        h.data(std::slice::from_ref(b));
        assert!(h.sent.is_empty() && h.session.is_reading());
    }
    h.data(&bytes[bytes.len() - 1..]);
    assert!(h.sent.ends_with("ok\n"));
}

#[test]
fn bad_input_is_answered_and_closed() {
    let cases: [(&[u8], &str); 4] = [
        (b"\x0e\x00\x00\x00\x01\x00garbage", "400"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", "505"),
        (
            b"GET /metrics HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n",
            "413",
        ),
        (b"GET /metrics HTTP/1.1\r\nX: y\r\n", "431"),
    ];
    for (input, status) in cases {
        let mut h = Harness::new();
        if status == "431" {
            let mut big = input.to_vec();
            big.extend(std::iter::repeat_n(b'a', 9 * 1024));
            h.data(&big);
        } else {
            h.data(input);
        }
        assert!(
            h.sent.starts_with(&format!("HTTP/1.1 {status} ")),
            "{status}: {}",
            h.sent
        );
        assert!(h.closed());
        assert_eq!(h.stats.closed_bad_input.get(), 1);
        // Nothing more is read.
        h.data(&get("/healthz"));
        assert_eq!(h.sent.matches("HTTP/1.1 ").count(), 1);
    }
}

#[test]
fn a_request_that_does_not_arrive_in_time_gets_408() {
    let mut h = Harness::new();
    h.data(b"GET /metr");
    h.now_ns += 1_999 * MS;
    h.tick();
    assert!(h.sent.is_empty());
    h.now_ns += MS;
    h.tick();
    assert!(h.sent.starts_with("HTTP/1.1 408 "), "{}", h.sent);
    assert!(h.closed() && !h.cut());
    // A silent connection too.
    let mut h = Harness::new();
    h.now_ns += 2_000 * MS;
    h.tick();
    assert!(h.sent.starts_with("HTTP/1.1 408 "), "{}", h.sent);
}

#[test]
fn the_exchange_is_cut_at_its_deadline_even_while_the_response_is_read() {
    let mut h = Harness::new();
    h.data(&get("/metrics"));
    h.source.published.store(true, Ordering::SeqCst);
    assert!(h.poll());
    h.now_ns += 9_999 * MS;
    h.tick();
    assert!(!h.cut());
    h.now_ns += MS;
    h.tick();
    assert!(h.cut());
}

#[test]
fn an_evicted_connection_is_closed_at_once_and_a_refused_one_answered_503() {
    let mut h = Harness::new();
    h.data(b"GET /met");
    assert!(h.session.is_reading());
    let now = h.now_ns;
    h.with(|s, _, _| s.evict(now));
    assert!(h.cut() && !h.session.is_reading());
    let source = Arc::new(FakeExposition::default());
    let mut s = MetricsSession::refused(
        "127.0.0.1:1".parse().unwrap(),
        config(source),
        T0,
        "too many metrics connections",
    );
    s.flush();
    let commands: Vec<Command> = s.commands().collect();
    let Some(Command::Send(bytes)) = commands.first() else {
        panic!("{commands:?}")
    };
    assert!(bytes.starts_with(b"HTTP/1.1 503 "));
    assert!(commands.contains(&Command::Close));
}

#[test]
fn a_failing_source_is_answered_500() {
    let mut h = Harness::new();
    h.source.panics.store(true, Ordering::SeqCst);
    h.source.published.store(true, Ordering::SeqCst);
    h.data(&get("/metrics"));
    assert!(h.poll());
    assert!(h.sent.starts_with("HTTP/1.1 500 "), "{}", h.sent);
}
