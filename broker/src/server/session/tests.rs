//! The session driven by hand: bytes in, commands and replies out, an
//! engine that answers as each test says. No socket anywhere.

use bytes::{Bytes, BytesMut};
use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, ErrorCode, FrameDecoder, HelloRequest,
    MessageAttributes, MessageId, QueueName, Receipt, ReceiveRequest, ReceivedMessage, Reply,
    Request, SendEntry, SendRequest, ServerStatsReply, VisibilityChange,
};

use super::testing::{FakeEngine, MS, T0, config};
use super::{Answer, Command, Phase, Question, Session, SessionConfig, SessionContext};
use crate::engine::{EntryError, Op, OpResult};
use crate::server::clock::{EngineTime, NotManual};
use crate::server::config::AuthToken;
use crate::server::limits::CLOSE_FLUSH_TIMEOUT_NS;
use crate::server::shared::ShardStats;

/// A session with its shard around it: the config, counters and the
/// io layer's unsent bytes as a test sets them.
struct Harness {
    config: SessionConfig,
    stats: ShardStats,
    engine: FakeEngine,
    session: Session,
    now_ns: u64,
    draining: bool,
    io_unsent: usize,
    /// A manual clock's time since the start (ms); `None`: the real
    /// clock.
    manual_clock: Option<u64>,
    /// Every command so far, replies decoded out of the `Send`s.
    commands: Vec<Command>,
    replies: Vec<(u32, Reply)>,
    reply_bytes: BytesMut,
    reply_decoder: FrameDecoder,
    /// What the server answers a wrong token's `AuthOutcome` with.
    auth_delay_ns: u64,
    /// Whether questions are answered at once (as the shard loop does) or
    /// left for the test to answer.
    answers: bool,
}

fn q() -> QueueName {
    QueueName::from_static("q")
}

fn frame(id: u32, request: &Request) -> Bytes {
    let mut b = BytesMut::new();
    request.encode(id, &mut b).expect("encodes");
    b.freeze()
}

fn hello(token: &[u8]) -> Request {
    Request::Hello(HelloRequest {
        version: 1,
        token: Bytes::copy_from_slice(token),
        session_timeout_ms: 0,
    })
}

fn delete(receipts: usize) -> Request {
    Request::Delete(DeleteRequest {
        queue: q(),
        receipts: vec![Receipt::default(); receipts],
    })
}

fn receive() -> Request {
    Request::Receive(ReceiveRequest {
        queue: q(),
        max_messages: 10,
        visibility_timeout_ms: None,
        wait_ms: Some(1000),
        bind_leases: false,
        with_source: false,
    })
}

impl Harness {
    fn new(config: SessionConfig) -> Harness {
        let session = Session::new("127.0.0.1:9".parse().unwrap(), &config, T0);
        Harness {
            config,
            stats: ShardStats::new(),
            engine: FakeEngine::default(),
            session,
            now_ns: T0,
            draining: false,
            io_unsent: 0,
            manual_clock: None,
            commands: Vec::new(),
            replies: Vec::new(),
            reply_bytes: BytesMut::new(),
            reply_decoder: FrameDecoder::new(sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT),
            auth_delay_ns: 0,
            answers: true,
        }
    }

    /// A session that has said HELLO.
    fn ready() -> Harness {
        let mut h = Harness::new(config());
        h.data(&frame(1, &hello(b"")));
        assert!(matches!(h.replies.pop(), Some((1, Reply::Hello(_)))));
        h
    }

    fn call(&mut self, f: impl FnOnce(&mut Session, &SessionContext<'_>, &mut FakeEngine)) {
        let cx = SessionContext {
            now_ns: self.now_ns,
            draining: self.draining,
            unsent_over: false,
            io_unsent: self.io_unsent,
            config: &self.config,
            stats: &self.stats,
        };
        f(&mut self.session, &cx, &mut self.engine);
        // Questions are answered at once, as the shard loop does.
        loop {
            self.session.flush();
            let mut asked = None;
            for c in self.session.commands() {
                match c {
                    Command::Send(bytes) => {
                        self.reply_bytes.extend_from_slice(&bytes);
                        while let Some(f) =
                            self.reply_decoder.decode(&mut self.reply_bytes).unwrap()
                        {
                            let reply = Reply::decode(f.opcode, f.payload).expect("a valid reply");
                            self.replies.push((f.request_id, reply));
                        }
                    }
                    Command::Ask(q) => {
                        assert!(asked.is_none(), "one question at a time");
                        asked = Some(q);
                        self.commands.push(c);
                    }
                    c => self.commands.push(c),
                }
            }
            let Some(question) = asked.filter(|_| self.answers) else {
                break;
            };
            let answer = match question {
                Question::ServerStats => Answer::ServerStats(ServerStatsReply {
                    server_version: "sluice test".into(),
                    io_backend: "none".into(),
                    shards: 2,
                    counters: Vec::new(),
                }),
                Question::AdvanceClock { by_ms } => {
                    Answer::ClockAdvanced(self.manual_clock.ok_or(NotManual).map(|since| {
                        let elapsed = since + by_ms;
                        self.manual_clock = Some(elapsed);
                        (
                            elapsed,
                            EngineTime {
                                now_ns: T0 + elapsed * MS,
                                wall_ms: 1_700_000_000_000 + elapsed,
                            },
                        )
                    }))
                }
                Question::AuthOutcome { ok } => {
                    Answer::AuthDelay(if ok { 0 } else { self.auth_delay_ns })
                }
            };
            self.session.on_answer(answer, &cx, &mut self.engine);
        }
    }

    fn data(&mut self, bytes: &[u8]) {
        self.call(|s, cx, e| s.on_data(bytes, cx, e));
    }

    fn result(&mut self, ticket: u64, result: OpResult) -> bool {
        let mut ours = false;
        self.call(|s, cx, e| ours = s.on_result(ticket, result, cx, e));
        ours
    }

    fn tick_at(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        self.call(|s, cx, e| s.tick(cx, e));
    }

    fn error_codes(&self) -> Vec<(u32, ErrorCode)> {
        self.replies
            .iter()
            .filter_map(|(id, r)| match r {
                Reply::Error(e) => Some((*id, e.code)),
                _ => None,
            })
            .collect()
    }

    fn closed(&self) -> bool {
        self.commands.contains(&Command::Close)
    }
}

#[test]
fn hello_is_answered_with_the_shard_and_raises_the_frame_limit() {
    let mut h = Harness::new(config());
    h.data(&frame(7, &hello(b"")));
    let (id, reply) = h.replies.pop().expect("a reply");
    assert_eq!(id, 7);
    let Reply::Hello(hello) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!((hello.shard, hello.shards), (1, 2));
    assert_eq!(h.session.phase(), Phase::Ready);
    // A frame above the 4 KiB of before HELLO is taken now.
    let entry = SendEntry::new(Bytes::from(vec![b'x'; 8 * 1024]));
    let send = Request::Send(SendRequest::new(q(), [&entry]).unwrap());
    h.data(&frame(8, &send));
    assert!(matches!(h.engine.submitted[..], [Op::Send(_)]));
    assert!(!h.closed());
}

#[test]
fn the_first_frame_must_be_hello() {
    let mut h = Harness::new(config());
    h.data(&frame(3, &Request::Ping { nonce: 1 }));
    assert_eq!(h.error_codes(), [(3, ErrorCode::HelloRequired)]);
    assert!(h.closed());
    assert_eq!(h.session.phase(), Phase::Closing);
    assert_eq!(h.stats.closed_bad_input.get(), 1);
    // Nothing more is read or answered.
    h.data(&frame(4, &hello(b"")));
    assert_eq!(h.replies.len(), 1);
}

#[test]
fn a_hello_of_another_version_is_refused() {
    let next = sluice_protocol::limits::PROTOCOL_VERSION + 1;
    for version in [0, next, 0xffff] {
        let mut h = Harness::new(config());
        let hello = Request::Hello(HelloRequest {
            version,
            token: Bytes::new(),
            session_timeout_ms: 0,
        });
        h.data(&frame(1, &hello));
        assert_eq!(h.error_codes(), [(1, ErrorCode::UnsupportedVersion)]);
        assert!(h.closed());
    }
}

#[test]
fn both_versions_are_answered_in_their_own() {
    for version in [1, 2, 3, 4] {
        let mut h = Harness::new(config());
        h.data(&frame(
            7,
            &Request::Hello(HelloRequest {
                version,
                token: Bytes::new(),
                session_timeout_ms: 0,
            }),
        ));
        let Some((7, Reply::Hello(reply))) = h.replies.pop() else {
            panic!("{:?}", h.replies)
        };
        assert_eq!(reply.version, version);
        assert_eq!(h.session.phase(), Phase::Ready);
    }
}

fn hello_with_timeout(timeout_ms: u32) -> Request {
    Request::Hello(HelloRequest {
        version: 2,
        token: Bytes::new(),
        session_timeout_ms: timeout_ms,
    })
}

#[test]
fn a_session_timeout_out_of_range_is_refused() {
    for timeout_ms in [1, 99, 3_600_001, u32::MAX] {
        let mut h = Harness::new(config());
        h.data(&frame(1, &hello_with_timeout(timeout_ms)));
        assert_eq!(
            h.error_codes(),
            [(1, ErrorCode::InvalidArgument)],
            "{timeout_ms}"
        );
        assert!(h.closed());
    }
    for timeout_ms in [0, 100, 3_600_000] {
        let mut h = Harness::new(config());
        h.data(&frame(1, &hello_with_timeout(timeout_ms)));
        assert!(
            matches!(h.replies[..], [(1, Reply::Hello(_))]),
            "{timeout_ms}"
        );
    }
}

#[test]
fn a_silent_connection_is_closed_after_its_session_timeout_and_pings_keep_it() {
    let mut h = Harness::new(config());
    h.data(&frame(1, &hello_with_timeout(1000)));
    h.tick_at(T0 + 999 * MS);
    assert!(!h.closed());
    // A PING (any bytes) restarts the count.
    h.now_ns = T0 + 900 * MS;
    h.data(&frame(2, &Request::Ping { nonce: 1 }));
    h.tick_at(T0 + 1_899 * MS);
    assert!(!h.closed(), "pinged 999 ms ago");
    // A long poll in flight does not count as activity.
    h.engine.later();
    h.now_ns = T0 + 1_500 * MS;
    h.data(&frame(3, &receive()));
    h.tick_at(T0 + 2_499 * MS);
    assert!(!h.closed());
    h.tick_at(T0 + 2_500 * MS);
    assert!(h.closed(), "silent for its whole timeout");
    assert_eq!(h.stats.timed_out.get(), 1);
    assert_eq!(h.engine.cancelled, [1], "the long poll is cancelled");
    assert_eq!(h.stats.closed_bad_input.get(), 0, "not bad input");
}

#[test]
fn without_a_session_timeout_a_silent_connection_stays() {
    let mut h = Harness::ready();
    h.tick_at(T0 + 3_600_000 * MS);
    assert!(!h.closed());
}

fn bound_receive() -> Request {
    Request::Receive(ReceiveRequest {
        bind_leases: true,
        with_source: false,
        ..match receive() {
            Request::Receive(r) => r,
            _ => unreachable!(),
        }
    })
}

fn delivered(i: u8) -> ReceivedMessage {
    ReceivedMessage {
        id: MessageId(i.into()),
        receipt: Receipt {
            slot: i.into(),
            delivery: 1,
            ..Receipt::default()
        },
        receive_count: 1,
        sent_at_ms: 0,
        first_received_delta_ms: 0,
        attributes: MessageAttributes::new(),
        body: Bytes::from_static(b"m"),
        group: None,
    }
}

/// The receipts of the `Op::Abandon`s the session handed the engine.
fn abandoned(h: &Harness) -> Vec<Receipt> {
    let mut out: Vec<Receipt> = h
        .engine
        .unanswered
        .iter()
        .flat_map(|op| match op {
            Op::Abandon(r) => {
                assert_eq!(r.queue, q());
                r.receipts.clone()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    out.sort_by_key(|r| r.slot);
    out
}

#[test]
fn bound_leases_are_released_when_the_peer_closes_except_those_it_ended() {
    let mut h = Harness::ready();
    // One bound receive answered at once, one later; one unbound.
    h.engine.script.push_back(Some(OpResult::Received(vec![
        delivered(1),
        delivered(2),
        delivered(3),
    ])));
    h.data(&frame(10, &bound_receive()));
    h.engine.later();
    h.data(&frame(11, &bound_receive()));
    assert!(h.result(1, OpResult::Received(vec![delivered(4)])));
    h.engine
        .script
        .push_back(Some(OpResult::Received(vec![delivered(5)])));
    h.data(&frame(12, &receive()));
    assert_eq!(h.session.bound_leases(), 4, "1 to 4 are bound, 5 is not");
    // The client deletes 1 and releases 2; extending 3 keeps it bound.
    h.data(&frame(
        13,
        &Request::Delete(DeleteRequest {
            queue: q(),
            receipts: vec![delivered(1).receipt],
        }),
    ));
    let change = |receipt, visibility_timeout_ms| {
        Request::ChangeVisibility(ChangeVisibilityRequest {
            queue: q(),
            entries: vec![VisibilityChange {
                receipt,
                visibility_timeout_ms,
            }],
        })
    };
    h.data(&frame(14, &change(delivered(2).receipt, 0)));
    h.data(&frame(15, &change(delivered(3).receipt, 60_000)));
    assert_eq!(h.session.bound_leases(), 2);
    assert!(h.engine.unanswered.is_empty());
    // The peer goes away: 3 and 4 are handed to the engine to release.
    h.call(|s, _, e| s.on_closed(e));
    assert_eq!(abandoned(&h), [delivered(3).receipt, delivered(4).receipt]);
    assert_eq!(h.session.bound_leases(), 0);
}

#[test]
fn bound_leases_are_released_on_a_close_by_the_server_too() {
    // A protocol error...
    let mut h = Harness::ready();
    h.engine
        .script
        .push_back(Some(OpResult::Received(vec![delivered(7)])));
    h.data(&frame(10, &bound_receive()));
    h.data(&[1, 0, 0, 0]);
    assert!(h.closed());
    assert_eq!(abandoned(&h), [delivered(7).receipt]);
    // ...released once, not again when the io layer reports the close.
    h.call(|s, _, e| s.on_closed(e));
    assert_eq!(abandoned(&h), [delivered(7).receipt]);

    // The session timeout...
    let mut h = Harness::new(config());
    h.data(&frame(1, &hello_with_timeout(100)));
    h.engine
        .script
        .push_back(Some(OpResult::Received(vec![delivered(8)])));
    h.data(&frame(10, &bound_receive()));
    h.tick_at(T0 + 100 * MS);
    assert!(h.closed());
    assert_eq!(abandoned(&h), [delivered(8).receipt]);

    // ...and shutdown.
    let mut h = Harness::ready();
    h.engine
        .script
        .push_back(Some(OpResult::Received(vec![delivered(9)])));
    h.data(&frame(10, &bound_receive()));
    h.draining = true;
    h.now_ns = T0 + 200 * MS;
    h.call(|s, cx, e| s.drain(T0, cx, e));
    assert!(h.closed());
    assert_eq!(abandoned(&h), [delivered(9).receipt]);
}

#[test]
fn messages_a_bound_reply_cannot_carry_are_released_not_bound() {
    let mut h = Harness::new(SessionConfig {
        frame_bytes_max: 4096,
        ..config()
    });
    h.data(&frame(1, &hello(b"")));
    h.engine.later();
    h.data(&frame(60, &bound_receive()));
    let big = |i: u8| ReceivedMessage {
        body: Bytes::from(vec![i; 3000]),
        ..delivered(i)
    };
    assert!(h.result(1, OpResult::Received(vec![big(1), big(2)])));
    assert_eq!(h.session.bound_leases(), 1, "only the one delivered");
    assert!(matches!(h.engine.unanswered[..], [Op::ChangeVisibility(_)]));
    h.engine.unanswered.clear();
    h.call(|s, _, e| s.on_closed(e));
    assert_eq!(abandoned(&h), [big(1).receipt]);
}

#[test]
fn advance_clock_moves_a_manual_clock_and_is_refused_on_the_real_one() {
    let mut h = Harness::ready();
    h.data(&frame(5, &Request::AdvanceClock { by_ms: 30_000 }));
    assert_eq!(h.error_codes(), [(5, ErrorCode::Unsupported)]);
    let Some((_, Reply::Error(e))) = h.replies.last() else {
        panic!()
    };
    assert!(e.message.contains("--clock manual"), "{}", e.message);
    assert!(!h.closed());
    assert_eq!(h.manual_clock, None, "nothing moved");

    let mut h = Harness::ready();
    h.manual_clock = Some(0);
    let mut both = BytesMut::new();
    both.extend_from_slice(&frame(6, &Request::AdvanceClock { by_ms: 30_000 }));
    both.extend_from_slice(&frame(7, &Request::Ping { nonce: 1 }));
    h.data(&both);
    // The clock moved at once; the reply, and the PING behind it, wait
    // until every shard caught up with the new time.
    assert_eq!(h.manual_clock, Some(30_000));
    assert_eq!(h.session.clock_wait(), Some(T0 + 30_000 * MS));
    assert!(h.replies.is_empty());
    h.call(|s, cx, e| s.on_clock_caught_up(cx, e));
    assert_eq!(h.session.clock_wait(), None);
    assert_eq!(
        h.replies,
        [
            (
                6,
                Reply::AdvanceClock {
                    elapsed_ms: 30_000,
                    wall_ms: 1_700_000_030_000
                }
            ),
            (7, Reply::Pong { nonce: 1 })
        ]
    );
    assert!(h.engine.submitted.is_empty(), "answered by the session");
}

/// A question to the server holds the connection up: the frames behind it
/// are served only once it is answered, and in order.
#[test]
fn a_question_holds_the_frames_behind_it_until_answered() {
    let mut h = Harness::ready();
    h.answers = false;
    let mut both = BytesMut::new();
    both.extend_from_slice(&frame(4, &Request::ServerStats));
    both.extend_from_slice(&frame(5, &Request::Ping { nonce: 9 }));
    h.data(&both);
    assert_eq!(h.commands, [Command::Ask(Question::ServerStats)]);
    assert!(h.replies.is_empty(), "{:?}", h.replies);
    // An answer to another question is a server bug: the connection
    // closes with an internal error rather than answering wrongly.
    let stats = ServerStatsReply {
        server_version: "sluice test".into(),
        io_backend: "none".into(),
        shards: 2,
        counters: Vec::new(),
    };
    h.call(|s, cx, e| s.on_answer(Answer::ServerStats(stats.clone()), cx, e));
    assert_eq!(
        h.replies,
        [
            (4, Reply::ServerStats(stats.clone())),
            (5, Reply::Pong { nonce: 9 })
        ]
    );
    h.call(|s, cx, e| s.on_answer(Answer::AuthDelay(0), cx, e));
    assert_eq!(h.replies.len(), 2, "an answer nobody asked for is dropped");
    assert!(!h.closed());

    let mut h = Harness::ready();
    h.answers = false;
    h.data(&frame(6, &Request::ServerStats));
    h.call(|s, cx, e| s.on_answer(Answer::AuthDelay(0), cx, e));
    assert_eq!(h.error_codes(), [(0, ErrorCode::Internal)]);
    assert!(h.closed());
}

#[test]
fn a_configured_token_is_required_and_checked() {
    let with_token = || SessionConfig {
        auth_token: Some(AuthToken::from_bytes(b"s3cret")),
        ..config()
    };
    for token in [&b""[..], b"wrong!"] {
        let mut h = Harness::new(with_token());
        h.data(&frame(1, &hello(token)));
        assert_eq!(h.error_codes(), [(1, ErrorCode::Unauthorized)], "{token:?}");
        assert!(h.closed());
    }
    let mut h = Harness::new(with_token());
    h.data(&frame(1, &hello(b"s3cret")));
    assert!(matches!(h.replies[..], [(1, Reply::Hello(_))]));
    assert!(!h.closed());
}

/// A peer that keeps failing gets its `Unauthorized` only after the
/// delay the guard gives, on the session's own clock, and nothing it
/// sends meanwhile is read.
#[test]
fn a_slowed_down_failure_is_answered_only_after_its_delay() {
    let mut h = Harness::new(SessionConfig {
        auth_token: Some(AuthToken::from_bytes(b"s3cret")),
        ..config()
    });
    h.auth_delay_ns = 400 * MS;
    let mut bytes = frame(1, &hello(b"guess")).to_vec();
    bytes.extend_from_slice(&frame(2, &hello(b"s3cret")));
    h.data(&bytes);
    assert!(h.replies.is_empty() && !h.closed(), "{:?}", h.replies);
    h.data(&frame(3, &hello(b"s3cret")));
    h.tick_at(T0 + 399 * MS);
    assert!(h.replies.is_empty() && !h.closed(), "{:?}", h.replies);
    h.tick_at(T0 + 400 * MS);
    assert_eq!(h.error_codes(), [(1, ErrorCode::Unauthorized)]);
    assert_eq!(h.replies.len(), 1, "the later HELLOs were not read");
    assert!(h.closed());
}

#[test]
fn a_frame_above_the_hello_limit_is_refused_unread() {
    let mut h = Harness::new(config());
    // A length prefix declaring 5 KiB: refused before anything of it is
    // buffered.
    h.data(&(5 * 1024u32).to_le_bytes());
    assert_eq!(h.error_codes(), [(0, ErrorCode::FrameTooLarge)]);
    assert!(h.closed());
}

#[test]
fn no_hello_in_time_closes() {
    let mut h = Harness::new(config());
    h.tick_at(T0 + 9_999 * MS);
    assert!(!h.closed());
    h.tick_at(T0 + 10_000 * MS);
    assert!(h.closed());
    assert_eq!(h.stats.closed_bad_input.get(), 1);
}

#[test]
fn a_frame_left_unfinished_closes_and_a_finished_one_does_not() {
    let mut h = Harness::ready();
    let ping = frame(2, &Request::Ping { nonce: 9 });
    h.data(&ping[..3]);
    h.tick_at(T0 + 29_999 * MS);
    assert!(!h.closed());
    h.data(&ping[3..]);
    assert_eq!(h.replies.pop(), Some((2, Reply::Pong { nonce: 9 })));
    h.tick_at(T0 + 60_000 * MS);
    assert!(!h.closed(), "the whole frame arrived");
    h.data(&ping[..3]);
    h.tick_at(T0 + 90_000 * MS);
    assert!(h.closed());
}

#[test]
fn a_late_answer_holds_later_requests_back_but_a_receive_does_not() {
    let mut h = Harness::ready();
    // A RECEIVE that waits: later frames are served meanwhile.
    h.engine.later();
    h.data(&frame(10, &receive()));
    h.data(&frame(11, &Request::Ping { nonce: 1 }));
    assert_eq!(h.replies.pop(), Some((11, Reply::Pong { nonce: 1 })));
    // A DELETE forwarded to another shard: a barrier.
    h.engine.later();
    let mut both = BytesMut::new();
    both.extend_from_slice(&frame(12, &delete(1)));
    both.extend_from_slice(&frame(13, &Request::Ping { nonce: 2 }));
    h.data(&both);
    assert_eq!(h.engine.submitted.len(), 2);
    assert!(h.replies.is_empty(), "PING waits behind the DELETE");
    assert_eq!(h.session.in_flight(), 2);
    // The DELETE's answer comes: it, then the PING, in order.
    let results = vec![Err(EntryError::Gone)];
    let storage = results.as_ptr() as usize;
    assert!(h.result(2, OpResult::Deleted(results)));
    // Its vector goes back to the engine, empty, once written.
    assert!(matches!(
        h.engine.recycled.pop(),
        Some(OpResult::Deleted(v)) if v.is_empty() && v.as_ptr() as usize == storage
    ));
    assert_eq!(
        h.replies,
        [
            (
                12,
                Reply::Delete {
                    results: vec![Err(ErrorCode::Gone)]
                }
            ),
            (13, Reply::Pong { nonce: 2 })
        ]
    );
    // The RECEIVE's answer overtakes nothing and is still delivered.
    h.replies.clear();
    assert!(h.result(1, OpResult::Received(Vec::new())));
    assert!(matches!(h.replies[..], [(10, Reply::Receive { .. })]));
    assert!(!h.result(99, OpResult::QueueUpdated), "not its ticket");
}

#[test]
fn too_many_requests_in_flight_pause_reading_until_answers_come() {
    let mut h = Harness::ready();
    let mut four = BytesMut::new();
    for id in 0..5 {
        h.engine.later();
        four.extend_from_slice(&frame(20 + id, &receive()));
    }
    h.data(&four);
    // Four in flight (the limit): the fifth waits, reading stops.
    assert_eq!(h.session.in_flight(), 4);
    assert_eq!(h.commands, [Command::SetReading(false)]);
    assert!(h.session.is_paused());
    let mut resumed = true;
    h.call(|s, cx, e| resumed = s.resume(cx, e));
    assert!(!resumed, "still four in flight");
    assert!(h.result(1, OpResult::Received(Vec::new())));
    assert!(h.session.is_paused(), "a paused session waits for resume");
    h.call(|s, cx, e| resumed = s.resume(cx, e));
    // Reading resumes; the fifth is served and fills the limit again.
    assert_eq!(
        h.commands,
        [
            Command::SetReading(false),
            Command::SetReading(true),
            Command::SetReading(false)
        ]
    );
    assert!(!resumed);
    assert_eq!(h.session.in_flight(), 4);
    assert_eq!(h.engine.submitted.len(), 5);
}

#[test]
fn unsent_replies_pause_reading_until_half_drained() {
    let mut h = Harness::ready();
    h.io_unsent = 64 * 1024;
    h.data(&frame(30, &Request::Ping { nonce: 1 }));
    assert!(
        h.replies.is_empty(),
        "not served while the peer does not read"
    );
    assert_eq!(h.commands, [Command::SetReading(false)]);
    let mut resumed = true;
    h.io_unsent = 40 * 1024;
    h.call(|s, cx, e| resumed = s.resume(cx, e));
    assert!(!resumed, "above half the limit");
    h.io_unsent = 30 * 1024;
    h.call(|s, cx, e| resumed = s.resume(cx, e));
    assert!(resumed);
    assert_eq!(h.replies, [(30, Reply::Pong { nonce: 1 })]);
}

#[test]
fn a_closing_session_cancels_what_is_in_flight_and_is_cut_off_if_it_does_not_read() {
    let mut h = Harness::ready();
    h.engine.later();
    h.data(&frame(40, &receive()));
    // Framing lost: an error, then the close; the RECEIVE is cancelled.
    h.data(&[1, 0, 0, 0]);
    assert_eq!(h.error_codes(), [(0, ErrorCode::Malformed)]);
    assert_eq!(h.commands, [Command::Close]);
    assert_eq!(h.engine.cancelled, [1]);
    // Its answer, had it raced the cancel, is not the session's.
    assert!(!h.result(1, OpResult::Received(Vec::new())));
    h.tick_at(T0 + CLOSE_FLUSH_TIMEOUT_NS - 1);
    assert_eq!(h.commands, [Command::Close]);
    h.tick_at(T0 + CLOSE_FLUSH_TIMEOUT_NS);
    assert_eq!(h.commands, [Command::Close, Command::CloseNow]);
}

#[test]
fn a_bad_payload_is_answered_and_the_connection_stays() {
    let mut h = Harness::ready();
    // A well-framed frame of an unknown opcode.
    let mut f = BytesMut::from(&frame(50, &Request::Ping { nonce: 0 })[..]);
    f[4] = 0x7e;
    h.data(&f);
    assert_eq!(h.error_codes(), [(50, ErrorCode::UnknownOperation)]);
    assert!(!h.closed());
    h.data(&frame(51, &Request::Ping { nonce: 3 }));
    assert_eq!(h.replies.last(), Some(&(51, Reply::Pong { nonce: 3 })));
    // HELLO, the unknown frame and the PING, counted by operation.
    assert_eq!(h.stats.requests.iter().map(|c| c.get()).sum::<u64>(), 3);
}

#[test]
fn a_flag_the_request_does_not_define_is_malformed_and_the_connection_stays() {
    let mut h = Harness::ready();
    // PING defines no flag; RECEIVE defines bits 0 and 1 only.
    let mut ping = BytesMut::from(&frame(52, &Request::Ping { nonce: 0 })[..]);
    ping[5] = 0x01;
    h.data(&ping);
    let mut recv = BytesMut::from(&frame(53, &receive())[..]);
    recv[5] = 0x04;
    h.data(&recv);
    assert_eq!(
        h.error_codes(),
        [(52, ErrorCode::Malformed), (53, ErrorCode::Malformed)]
    );
    assert!(h.engine.submitted.is_empty());
    assert!(!h.closed());
    h.data(&frame(54, &bound_receive()));
    assert!(matches!(h.engine.submitted[..], [Op::Receive(ref r)] if r.bind_leases));
}

#[test]
fn received_messages_a_reply_cannot_carry_are_released() {
    let mut h = Harness::new(SessionConfig {
        frame_bytes_max: 4096,
        ..config()
    });
    h.data(&frame(1, &hello(b"")));
    h.replies.clear();
    h.engine.later();
    h.data(&frame(60, &receive()));
    let message = |i: u8| ReceivedMessage {
        id: MessageId(i.into()),
        receipt: Receipt {
            delivery: i.into(),
            ..Receipt::default()
        },
        receive_count: 1,
        sent_at_ms: 0,
        first_received_delta_ms: 0,
        attributes: MessageAttributes::new(),
        body: Bytes::from(vec![i; 3000]),
        group: None,
    };
    // Two messages of 3,000 bytes: a 4 KiB reply holds the first.
    assert!(h.result(1, OpResult::Received(vec![message(1), message(2)])));
    let Some((60, Reply::Receive { messages })) = h.replies.pop() else {
        panic!("{:?}", h.replies)
    };
    assert_eq!(messages.to_messages(), [message(1)]);
    let [Op::ChangeVisibility(release)] = &h.engine.unanswered[..] else {
        panic!("{:?}", h.engine.unanswered)
    };
    assert_eq!(release.queue, q());
    assert_eq!(release.entries.len(), 1);
    assert_eq!(release.entries[0].receipt, message(2).receipt);
    assert_eq!(release.entries[0].visibility_timeout_ms, 0);
}

#[test]
fn the_io_layer_closing_a_connection_cancels_its_requests() {
    let mut h = Harness::ready();
    h.engine.later();
    h.data(&frame(61, &receive()));
    h.engine.later();
    h.data(&frame(62, &delete(1)));
    h.call(|s, _, e| s.on_closed(e));
    h.engine.cancelled.sort_unstable();
    assert_eq!(h.engine.cancelled, [1, 2]);
    assert_eq!(h.session.in_flight(), 0);
    h.data(&frame(63, &Request::Ping { nonce: 1 }));
    assert!(h.replies.is_empty(), "nothing is read after the close");
}

#[test]
fn a_draining_server_answers_shutting_down_and_closes_quiet_connections() {
    let mut waiting = Harness::new(config());
    waiting.draining = true;
    waiting.call(|s, cx, e| s.begin_drain(cx, e));
    assert_eq!(waiting.error_codes(), [(0, ErrorCode::ShuttingDown)]);
    assert!(waiting.closed());

    let mut h = Harness::ready();
    h.draining = true;
    h.call(|s, cx, e| s.begin_drain(cx, e));
    assert!(!h.closed(), "a ready connection is served on");
    h.data(&frame(70, &Request::Ping { nonce: 1 }));
    assert_eq!(h.error_codes(), [(70, ErrorCode::ShuttingDown)]);
    h.now_ns = T0 + 50 * MS;
    h.call(|s, cx, e| s.drain(T0, cx, e));
    assert!(!h.closed(), "bytes arrived a moment ago");
    h.now_ns = T0 + 100 * MS;
    h.call(|s, cx, e| s.drain(T0, cx, e));
    assert!(h.closed());
    assert_eq!(h.error_codes().len(), 2);
}

/// A question's log line names it and its request, never the HELLO's
/// token.
#[test]
fn a_question_in_a_log_leaves_the_token_out() {
    let asked = super::Asked::Auth {
        request_id: 7,
        hello: HelloRequest {
            version: 1,
            token: Bytes::from_static(b"s3cret-token"),
            session_timeout_ms: 0,
        },
        ok: false,
    };
    let line = format!("{asked:?}");
    assert_eq!(line, "AuthOutcome { ok: false } for request 7");
}
