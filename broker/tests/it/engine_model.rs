//! Model-based test: random operations and clock advances applied to the
//! engine (2 or 3 shards, driven deterministically, operations submitted on
//! random shards so steals, forwards and fan-outs happen) and to a small
//! single-threaded reference model with no shards. After every step the
//! replies, the deliveries, every message's state and every queue's stats
//! must agree.
//!
//! Receives may bind their leases to one of two connections, and a step
//! may close a connection: its bound receipts (every one it got, however
//! they ended since, as a session that saw the deletes on other
//! connections would not know) go to the engine as the release a closing
//! connection asks for (`Op::Abandon`), and the model releases those
//! leases that are still current and running.
//!
//! A run plays one kind of queues ([`Kind`]): standard queues whose sends
//! carry no group, standard queues whose sends may carry groups (fair,
//! PROTOCOL.md §8.17: the same checks, and every delivery names its group),
//! or FIFO queues (§8.16). On FIFO queues the model checks each receive
//! against the groups: a group delivers only while none of its messages is
//! in flight or waiting out a backoff (the lock), what a receive takes from
//! a group (delivered or dead-lettered) is the group's first messages in
//! send order, and a receive that returns fewer than it asked for leaves
//! no group that could deliver. Sends check the FIFO rules (a group, no
//! delay of the entry's own, a dedup key or content-based dedup) and dedup
//! by key and by content, and a FIFO queue's ids rise with its sends.
//!
//! Where the semantics leave a choice to the engine (which visible messages a
//! receive, peek or redrive takes when it cannot take them all; the jitter
//! of a backoff) the model checks that the engine's choice is allowed and
//! then adopts it.
//!
//! Cases: `PROPTEST_CASES` (default 64 here; CI runs 10,000 in release:
//! `PROPTEST_CASES=10000 cargo test -p sluice-broker --profile ci --test it engine_model`).
//! Seed: proptest's `PROPTEST_RNG_SEED`; `.ci/run` sets a fixed one and
//! prints it, so CI never depends on luck. Exploring new seeds is
//! `.ci/explore` (RELIABILITY.md). A failing case is shrunk and saved in
//! `broker/tests/proptest-regressions/engine_model.txt`, which every run
//! replays first.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use proptest::prelude::*;
use sluice_broker::engine::dedup::owner_shard;
use sluice_broker::engine::{Cluster, MessageState, MessageView, Op, OpResult, RegistryConfig};
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{
    AttributeUpdate, Backoff, ChangeVisibilityRequest, DeleteRequest, ErrorCode, MessageAttributes,
    MessageGroupId, MessageId, QueueAttributesRequest, QueueKind, QueueStats, Receipt,
    ReceiveRequest, RedrivePolicy, SendEntry, VisibilityChange,
};

use crate::engine_util::{qn, send_op};

const NS: u64 = 1_000_000;
const Q: usize = 0;
const DLQ: usize = 1;
const NAMES: [&str; 2] = ["q", "dlq"];
const MAX_RECEIVES: u32 = 2;
const MAX_DEPTH: u64 = 8;
const MESSAGE_BYTES_MAX: usize = 16;
const WINDOW_MS: u64 = 100;
const RETENTION_MS: [u64; 2] = [60_000, 120_000];
const VISIBILITY_MS: [u64; 2] = [50, 30];
/// Connections a receive may bind its leases to.
const CONNS: usize = 2;

/// The kind of queues a run plays (both of its queues are of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Standard queues; the sends' groups are left out.
    Plain,
    /// Standard queues whose sends may carry groups: fair ones.
    Fair,
    /// FIFO queues: q deduplicates by content, dlq by the entries' keys
    /// only.
    Fifo,
}

/// One SEND entry: body length, delay, dedup key, with attributes, group.
type Entry = (usize, Option<u32>, Option<u8>, bool, Option<u8>);

/// A dedup key as the engine sees it: the entry's own, or its body's
/// (content-based dedup on a FIFO queue).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum DKey {
    Key(u8),
    Content(Bytes),
}

fn group_name(g: u8) -> String {
    format!("group-{g}")
}

#[derive(Clone, Debug)]
enum Step {
    Send {
        shard: usize,
        queue: usize,
        entries: Vec<Entry>,
    },
    Receive {
        shard: usize,
        queue: usize,
        max: u32,
        vis: Option<u32>,
        /// The connection the leases bind to, if any.
        bind: Option<usize>,
    },
    /// A connection closes: its bound leases are handed to the engine on
    /// `shard` (the connection's).
    Disconnect {
        shard: usize,
        conn: usize,
    },
    Delete {
        shard: usize,
        queue: usize,
        pick: usize,
        forged: bool,
    },
    ChangeVisibility {
        shard: usize,
        queue: usize,
        pick: usize,
        forged: bool,
        timeout_ms: u32,
    },
    Advance(u64),
    Purge {
        shard: usize,
        queue: usize,
    },
    Redrive {
        shard: usize,
        max: u32,
    },
    Peek {
        shard: usize,
        queue: usize,
        max: u32,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let shard = 0usize..3;
    let queue = prop_oneof![4 => Just(Q), 1 => Just(DLQ)];
    prop_oneof![
        6 => (
            shard.clone(),
            queue.clone(),
            prop::collection::vec(
                (
                    0usize..20,
                    prop_oneof![3 => Just(None), 1 => Just(Some(0u32)), 1 => Just(Some(5)), 1 => Just(Some(20))],
                    prop_oneof![2 => Just(None), 1 => (0u8..3).prop_map(Some)],
                    any::<bool>(),
                    prop_oneof![1 => Just(None), 3 => (0u8..3).prop_map(Some)]
                ),
                1..5
            )
        )
            .prop_map(|(shard, queue, entries)| Step::Send { shard, queue, entries }),
        6 => (
            shard.clone(),
            queue.clone(),
            prop_oneof![3 => 1u32..4, 1 => Just(100u32)],
            prop_oneof![3 => Just(None), 1 => Just(Some(0u32)), 1 => Just(Some(10)), 1 => Just(Some(100))],
            prop_oneof![2 => Just(None), 1 => (0..CONNS).prop_map(Some)]
        )
            .prop_map(|(shard, queue, max, vis, bind)| Step::Receive { shard, queue, max, vis, bind }),
        2 => (shard.clone(), 0..CONNS).prop_map(|(shard, conn)| Step::Disconnect { shard, conn }),
        3 => (shard.clone(), queue.clone(), any::<usize>(), prop::bool::weighted(0.1))
            .prop_map(|(shard, queue, pick, forged)| Step::Delete { shard, queue, pick, forged }),
        3 => (
            shard.clone(),
            queue.clone(),
            any::<usize>(),
            prop::bool::weighted(0.1),
            prop_oneof![Just(0u32), Just(10), Just(100)]
        )
            .prop_map(|(shard, queue, pick, forged, timeout_ms)| Step::ChangeVisibility {
                shard,
                queue,
                pick,
                forged,
                timeout_ms
            }),
        5 => prop_oneof![4 => 1u64..60, 1 => Just(30_000u64)].prop_map(Step::Advance),
        1 => (shard.clone(), queue.clone()).prop_map(|(shard, queue)| Step::Purge { shard, queue }),
        1 => (shard.clone(), 1u32..6).prop_map(|(shard, max)| Step::Redrive { shard, max }),
        1 => (shard, queue, 1u32..6).prop_map(|(shard, queue, max)| Step::Peek { shard, queue, max }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Visible,
    Delayed(u64),
    InFlight(u64),
    /// Entered a backoff at `at`; the engine picked the wait in lo ..= hi ms.
    Backoff {
        at: u64,
        lo: u64,
        hi: u64,
    },
}

#[derive(Clone, Debug)]
struct MMsg {
    queue: usize,
    body: Bytes,
    attributes: MessageAttributes,
    st: St,
    sent_ns: u64,
    sent_at_ms: u64,
    retain_until: u64,
    rc: u32,
    delivery: u64,
    first_recv: Option<u64>,
    source: Option<usize>,
    /// Moves between queues so far: receipts taken before a move are Gone.
    moves: u32,
    group: Option<u8>,
}

#[derive(Clone, Copy, Debug)]
struct MReceipt {
    receipt: Receipt,
    queue: usize,
    id: MessageId,
    moves: u32,
    delivery: u64,
}

struct Model {
    kind: Kind,
    backoff: Option<Backoff>,
    msgs: BTreeMap<MessageId, MMsg>,
    stats: [QueueStats; 2],
    dedup: [HashMap<DKey, (MessageId, u64)>; 2],
    /// The id of the last message sent to each queue.
    last_sent: [Option<MessageId>; 2],
    receipts: Vec<MReceipt>,
    /// Receipts bound to each connection, in the order received.
    bound: [Vec<MReceipt>; CONNS],
}

fn gauge(s: &mut QueueStats, st: St) -> &mut u64 {
    match st {
        St::Visible => &mut s.visible,
        St::Delayed(_) | St::Backoff { .. } => &mut s.delayed,
        St::InFlight(_) => &mut s.in_flight,
    }
}

impl Model {
    fn set_st(&mut self, id: MessageId, st: St) {
        let m = self.msgs.get_mut(&id).unwrap();
        *gauge(&mut self.stats[m.queue], m.st) -= 1;
        *gauge(&mut self.stats[m.queue], st) += 1;
        m.st = st;
    }

    fn remove(&mut self, id: MessageId) -> MMsg {
        let m = self.msgs.remove(&id).unwrap();
        *gauge(&mut self.stats[m.queue], m.st) -= 1;
        m
    }

    fn make_available(&mut self, id: MessageId, at: u64) {
        let m = &self.msgs[&id];
        let st = match (m.queue, self.backoff) {
            (Q, Some(b)) => {
                let n = m.rc.max(1);
                let d = if n > 32 {
                    u64::from(b.max.get())
                } else {
                    (u64::from(b.base.get()) << (n - 1)).min(u64::from(b.max.get()))
                };
                St::Backoff {
                    at,
                    lo: d / 2,
                    hi: d,
                }
            }
            _ => St::Visible,
        };
        self.set_st(id, st);
    }

    /// Everything whose time came by `now`, as the engine's timers do.
    fn process(&mut self, now: u64) {
        loop {
            let mut changed = false;
            let ids: Vec<MessageId> = self.msgs.keys().copied().collect();
            for id in ids {
                let m = &self.msgs[&id];
                if m.retain_until <= now {
                    let q = m.queue;
                    self.remove(id);
                    self.stats[q].dropped += 1;
                    changed = true;
                    continue;
                }
                match m.st {
                    St::InFlight(u) if u <= now => {
                        let q = m.queue;
                        self.stats[q].redelivered += 1;
                        self.make_available(id, u);
                        changed = true;
                    }
                    St::Delayed(u) if u <= now => {
                        self.set_st(id, St::Visible);
                        changed = true;
                    }
                    _ => {}
                }
            }
            for d in &mut self.dedup {
                d.retain(|_, (_, exp)| *exp > now);
            }
            if !changed {
                return;
            }
        }
    }

    /// Adopts the engine's backoff jitter, checking it is in range.
    fn adopt_backoffs(&mut self, now: u64, views: &HashMap<MessageId, MessageView>) {
        let ids: Vec<MessageId> = self.msgs.keys().copied().collect();
        for id in ids {
            let St::Backoff { at, lo, hi } = self.msgs[&id].st else {
                continue;
            };
            let v = &views[&id];
            match v.state {
                MessageState::Delayed => {
                    let due = v.due_ns.unwrap();
                    assert!(
                        at + lo * NS <= due && due <= at + hi * NS && due > now,
                        "backoff of {id:?}: due {due} outside {at} + [{lo}, {hi}] ms (now {now})"
                    );
                    self.set_st(id, St::Delayed(due));
                }
                MessageState::Visible => {
                    assert!(at + lo * NS <= now, "backoff of {id:?} ended early");
                    self.set_st(id, St::Visible);
                }
                MessageState::InFlight => panic!("{id:?} leased while in backoff"),
            }
        }
    }

    fn visible_in(&self, q: usize) -> Vec<MessageId> {
        self.msgs
            .iter()
            .filter(|(_, m)| m.queue == q && m.st == St::Visible)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The messages of group `g` of queue `q`, in send order (a FIFO
    /// queue's ids rise with its sends: one shard accepts them all).
    fn group_members(&self, q: usize, g: Option<u8>) -> Vec<MessageId> {
        self.msgs
            .iter()
            .filter(|(_, m)| m.queue == q && m.group == g)
            .map(|(id, _)| *id)
            .collect()
    }

    fn groups_of(&self, q: usize) -> BTreeSet<Option<u8>> {
        self.msgs
            .values()
            .filter(|m| m.queue == q)
            .map(|m| m.group)
            .collect()
    }

    /// Whether FIFO group `g` of `q` may deliver: none of its messages is
    /// in flight or waiting out a backoff (on a FIFO queue, the only ways
    /// a message is not visible).
    fn unlocked(&self, q: usize, g: Option<u8>) -> bool {
        self.msgs
            .values()
            .filter(|m| m.queue == q && m.group == g)
            .all(|m| m.st == St::Visible)
    }

    fn depth(&self, q: usize) -> u64 {
        self.msgs.values().filter(|m| m.queue == q).count() as u64
    }

    fn oldest_age_ms(&self, q: usize, now: u64) -> u64 {
        self.msgs
            .values()
            .filter(|m| m.queue == q)
            .map(|m| (now - m.sent_ns) / NS)
            .max()
            .unwrap_or(0)
    }

    /// Moves a visible message to another queue (dead-letter or redrive).
    fn move_to(&mut self, id: MessageId, to: usize, redrive: bool) {
        let m = self.remove(id);
        let from = m.queue;
        if redrive {
            self.stats[from].redriven += 1;
        } else {
            self.stats[from].dead_lettered += 1;
        }
        self.stats[to].moved_in += 1;
        self.stats[to].visible += 1;
        self.msgs.insert(
            id,
            MMsg {
                queue: to,
                st: St::Visible,
                retain_until: m.sent_ns + RETENTION_MS[to] * NS,
                rc: if redrive { 0 } else { m.rc },
                source: if redrive { None } else { Some(from) },
                moves: m.moves + 1,
                ..m
            },
        );
    }
}

fn views(c: &Cluster) -> HashMap<MessageId, MessageView> {
    c.messages().into_iter().map(|v| (v.id, v)).collect()
}

fn engine_stats(c: &mut Cluster, shard: usize, q: usize) -> QueueStats {
    match c.call(
        shard,
        Op::GetQueue {
            queue: qn(NAMES[q]),
        },
    ) {
        OpResult::Queue(i) => i.stats,
        other => panic!("{other:?}"),
    }
}

fn setup(shards: u16, backoff: bool, seed: u64, kind: Kind) -> (Cluster, Model) {
    let mut c = Cluster::new(RegistryConfig {
        shards,
        seed,
        ..Default::default()
    });
    let backoff = backoff.then_some(Backoff {
        base: Millis::new(5),
        max: Millis::new(20),
    });
    let create = |c: &mut Cluster, name: &str, a: AttributeUpdate| {
        let r = c.call(
            0,
            Op::CreateQueue(QueueAttributesRequest {
                queue: qn(name),
                attributes: a,
            }),
        );
        assert!(matches!(r, OpResult::QueueCreated { .. }), "{r:?}");
    };
    let fifo = kind == Kind::Fifo;
    create(
        &mut c,
        "dlq",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(VISIBILITY_MS[DLQ] as u32)),
            retention: Some(Millis::new(RETENTION_MS[DLQ] as u32)),
            dedup_window: Some(Millis::new(WINDOW_MS as u32)),
            kind: fifo.then_some(QueueKind::Fifo),
            ..Default::default()
        },
    );
    let q = AttributeUpdate {
        visibility_timeout: Some(Millis::new(VISIBILITY_MS[Q] as u32)),
        retention: Some(Millis::new(RETENTION_MS[Q] as u32)),
        message_bytes_max: Some(MESSAGE_BYTES_MAX as u32),
        max_depth: Some(MAX_DEPTH),
        dedup_window: Some(Millis::new(WINDOW_MS as u32)),
        redrive: Setting::Set(RedrivePolicy {
            dead_letter_queue: "dlq".into(),
            max_receives: MAX_RECEIVES as u16,
        }),
        backoff: backoff.into(),
        kind: fifo.then_some(QueueKind::Fifo),
        content_based_dedup: fifo.then_some(true),
        ..Default::default()
    };
    create(&mut c, "q", q.clone());
    // A FIFO queue's messages live on its home shard, and a message
    // dead-lettered or redriven moves on the shard that holds it: the
    // FIFO runs use queues of one home, so that each queue's messages
    // are all on one shard and its groups are the queue's (a queue is
    // made again, a new incarnation, until the homes agree).
    let home = |c: &Cluster, q: usize| owner_shard(incarnation(c, q), b"", shards);
    while fifo && home(&c, Q) != home(&c, DLQ) {
        let r = c.call(0, Op::DeleteQueue { queue: qn("q") });
        assert_eq!(r, OpResult::QueueDeleted);
        create(&mut c, "q", q.clone());
    }
    let model = Model {
        kind,
        last_sent: [None, None],
        backoff,
        msgs: BTreeMap::new(),
        stats: [QueueStats::default(); 2],
        dedup: [HashMap::new(), HashMap::new()],
        receipts: Vec::new(),
        bound: [Vec::new(), Vec::new()],
    };
    (c, model)
}

fn incarnation(c: &Cluster, q: usize) -> u32 {
    c.registry().get(NAMES[q]).unwrap().shared.incarnation()
}

/// Says once per process which proptest seed drives the cases, so a failure
/// printed by `cargo test` carries what replays it.
fn say_seed() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let seed = std::env::var("PROPTEST_RNG_SEED").unwrap_or_else(|_| "random".into());
        eprintln!(
            "engine model: PROPTEST_RNG_SEED={seed} PROPTEST_CASES={} \
             (replay: the same variables, `cargo test -p sluice-broker --profile ci --test it engine_model`)",
            cases()
        );
    });
}

fn run(shards: u16, backoff: bool, seed: u64, kind: Kind, steps: Vec<Step>) {
    say_seed();
    let (mut c, mut m) = setup(shards, backoff, seed, kind);
    let n = usize::from(shards);
    for step in steps {
        apply(&mut c, &mut m, n, step);
        let now = c.now_ns();
        m.process(now);
        let vs = views(&c);
        m.adopt_backoffs(now, &vs);
        compare(&mut c, &m, &vs, n);
    }
}

fn compare(c: &mut Cluster, m: &Model, vs: &HashMap<MessageId, MessageView>, shards: usize) {
    if let Err(e) = c.check_invariants() {
        panic!("invariant: {e}");
    }
    assert_eq!(vs.len(), m.msgs.len(), "message count");
    for (id, mm) in &m.msgs {
        let v = vs
            .get(id)
            .unwrap_or_else(|| panic!("{id:?} missing from the engine"));
        assert_eq!(&*v.queue, NAMES[mm.queue], "{id:?} queue");
        let (state, due) = match mm.st {
            St::Visible => (MessageState::Visible, None),
            St::Delayed(u) => (MessageState::Delayed, Some(u)),
            St::InFlight(u) => (MessageState::InFlight, Some(u)),
            St::Backoff { .. } => unreachable!("adopted"),
        };
        assert_eq!((v.state, v.due_ns), (state, due), "{id:?} state");
        assert_eq!(
            (v.receive_count, v.delivery),
            (mm.rc, mm.delivery),
            "{id:?} counters"
        );
        assert_eq!(v.retain_until_ns, mm.retain_until, "{id:?} retention");
    }
    let now = c.now_ns();
    for q in [Q, DLQ] {
        let shard = (now as usize / NS as usize + q) % shards;
        let s = engine_stats(c, shard, q);
        let mut want = m.stats[q];
        want.oldest_age_ms = m.oldest_age_ms(q, now);
        assert_eq!(s, want, "stats of {}", NAMES[q]);
    }
}

fn apply(c: &mut Cluster, m: &mut Model, shards: usize, step: Step) {
    let now = c.now_ns();
    match step {
        Step::Advance(ms) => c.advance_ms(ms),
        Step::Send {
            shard,
            queue,
            entries,
        } => {
            let shard = shard % shards;
            let inc = incarnation(c, queue);
            let fifo = m.kind == Kind::Fifo;
            let entries: Vec<Entry> = entries
                .into_iter()
                .map(|(len, delay, key, attrs, group)| match m.kind {
                    Kind::Plain => (len, delay, key, attrs, None),
                    Kind::Fair => (len, delay, key, attrs, group),
                    // A delay of 0 stays: the delay of an entry's own
                    // that a FIFO queue refuses.
                    Kind::Fifo => (len, delay.filter(|&d| d == 0), key, attrs, group),
                })
                .collect();
            let built: Vec<SendEntry> = entries
                .iter()
                .map(|&(len, delay, key, with_attrs, group)| SendEntry {
                    body: Bytes::from(vec![b'a' + (len % 26) as u8; len]),
                    delay: delay.map(Millis::new),
                    attributes: if with_attrs {
                        MessageAttributes::from_pairs([("k", "v")]).unwrap()
                    } else {
                        MessageAttributes::new()
                    },
                    dedup_key: key.map(|k| Bytes::from(vec![b'a' + k])),
                    group: group.map(|g| MessageGroupId::new(&group_name(g)).unwrap()),
                })
                .collect();
            let r = match c.call(shard, send_op(NAMES[queue], &built)) {
                OpResult::Sent(r) => r,
                other => panic!("{other:?}"),
            };
            assert_eq!(r.len(), built.len());
            // The engine's order: entries it handles itself in batch order,
            // then those forwarded to dedup-key owners, by owner index. A
            // FIFO queue's entries all go to its home.
            let home = owner_shard(inc, b"", shards as u16) as usize;
            let owner = |e: &SendEntry| match &e.dedup_key {
                _ if fifo => home,
                Some(k) if shards > 1 => owner_shard(inc, k, shards as u16) as usize,
                _ => shard,
            };
            let mut order: Vec<usize> = (0..built.len())
                .filter(|&i| owner(&built[i]) == shard)
                .collect();
            for o in 0..shards {
                if o != shard {
                    order.extend((0..built.len()).filter(|&i| owner(&built[i]) == o));
                }
            }
            for i in order {
                let e = &built[i];
                let (_, _, key, _, group) = entries[i];
                let size = e.body.len() + e.attributes.content_bytes();
                let got = &r[i];
                // A FIFO entry needs a group, no delay of its own, and a
                // dedup key unless its queue deduplicates by content.
                if fifo && (group.is_none() || e.delay.is_some() || (key.is_none() && queue == DLQ))
                {
                    assert_eq!(got.as_ref().unwrap_err().code(), ErrorCode::InvalidArgument);
                    continue;
                }
                if queue == Q && size > MESSAGE_BYTES_MAX {
                    assert_eq!(got.as_ref().unwrap_err().code(), ErrorCode::MessageTooLarge);
                    continue;
                }
                let dkey = match key {
                    Some(k) => Some(DKey::Key(k)),
                    None if fifo => Some(DKey::Content(e.body.clone())),
                    None => None,
                };
                if let Some(k) = &dkey {
                    if let Some((id, _)) = m.dedup[queue].get(k) {
                        let ok = got.as_ref().unwrap();
                        assert!(ok.duplicate && ok.id == *id, "duplicate of {k:?}: {ok:?}");
                        continue;
                    }
                }
                if queue == Q && m.depth(Q) >= MAX_DEPTH {
                    assert_eq!(got.as_ref().unwrap_err().code(), ErrorCode::QueueFull);
                    continue;
                }
                let ok = got.as_ref().unwrap_or_else(|e| panic!("entry {i}: {e}"));
                assert!(!ok.duplicate);
                assert!(!m.msgs.contains_key(&ok.id), "id reused");
                if fifo {
                    assert!(
                        m.last_sent[queue].is_none_or(|last| ok.id > last),
                        "a FIFO queue's ids rise with its sends: {:?} after {:?}",
                        ok.id,
                        m.last_sent[queue]
                    );
                }
                m.last_sent[queue] = Some(ok.id);
                if let Some(k) = dkey {
                    m.dedup[queue].insert(k, (ok.id, now + WINDOW_MS * NS));
                }
                let delay = u64::from(e.delay.map(Millis::get).unwrap_or(0));
                let st = if delay > 0 {
                    St::Delayed(now + delay * NS)
                } else {
                    St::Visible
                };
                m.stats[queue].sent += 1;
                *gauge(&mut m.stats[queue], st) += 1;
                m.msgs.insert(
                    ok.id,
                    MMsg {
                        queue,
                        body: e.body.clone(),
                        attributes: e.attributes.clone(),
                        st,
                        sent_ns: now,
                        sent_at_ms: c.wall_ms(),
                        retain_until: now + RETENTION_MS[queue] * NS,
                        rc: 0,
                        delivery: 0,
                        first_recv: None,
                        source: None,
                        moves: 0,
                        group,
                    },
                );
            }
        }
        Step::Receive {
            shard,
            queue,
            max,
            vis,
            bind,
        } => {
            let shard = shard % shards;
            let got = match c.call(
                shard,
                Op::Receive(ReceiveRequest {
                    queue: qn(NAMES[queue]),
                    max_messages: u16::try_from(max).expect("the model draws small maxima"),
                    visibility_timeout_ms: vis,
                    wait_ms: Some(0),
                    // The engine does not look at it: binding is the
                    // session's (the model plays it below).
                    bind_leases: bind.is_some(),
                    with_source: false,
                }),
            ) {
                OpResult::Received(g) => g,
                other => panic!("{other:?}"),
            };
            let visible = m.visible_in(queue);
            let dead_letters = queue == Q;
            let (eligible, ineligible): (Vec<_>, Vec<_>) = visible
                .iter()
                .partition(|id| !dead_letters || m.msgs[id].rc < MAX_RECEIVES);
            let fifo = m.kind == Kind::Fifo;
            if fifo {
                // Locked groups hold messages back: checked below.
                assert!(got.len() <= max as usize, "receive size");
            } else {
                assert_eq!(
                    got.len(),
                    (max as usize).min(eligible.len()),
                    "receive size"
                );
            }
            let mut seen = HashSet::new();
            for d in &got {
                assert!(seen.insert(d.id), "twice in one receive");
                assert!(eligible.contains(&d.id), "{:?} was not receivable", d.id);
            }
            // Dead-lettered by this receive: the engine's choice, adopted.
            let vs = views(c);
            let moved: Vec<MessageId> = ineligible
                .iter()
                .copied()
                .filter(|id| vs.get(id).is_some_and(|v| &*v.queue == "dlq"))
                .collect();
            if got.len() < max as usize && !fifo {
                assert_eq!(
                    moved.len(),
                    ineligible.len(),
                    "all ineligible dead-lettered"
                );
            }
            let short = got.len() < max as usize;
            if fifo {
                let delivered: Vec<MessageId> = got.iter().map(|d| d.id).collect();
                check_fifo_take(m, queue, &delivered, &moved);
            }
            for id in moved {
                m.move_to(id, DLQ, false);
            }
            let wall = c.wall_ms() - (c.now_ns() - now) / NS;
            for d in got {
                let vis_ms = u64::from(vis.map_or(VISIBILITY_MS[queue] as u32, |v| v));
                m.set_st(d.id, St::InFlight(now + vis_ms * NS));
                m.stats[queue].received += 1;
                let mm = m.msgs.get_mut(&d.id).unwrap();
                mm.rc += 1;
                mm.delivery += 1;
                let first = *mm.first_recv.get_or_insert(wall);
                assert_eq!(
                    (
                        d.receive_count,
                        d.delivery(),
                        d.sent_at_ms,
                        d.first_received_at_ms()
                    ),
                    (mm.rc, mm.delivery, mm.sent_at_ms, first)
                );
                assert_eq!(d.body, mm.body);
                assert_eq!(d.attributes, mm.attributes);
                assert_eq!(
                    d.group.as_ref().map(MessageGroupId::as_str),
                    mm.group.map(group_name).as_deref(),
                    "{:?}'s group",
                    d.id
                );
                let rec = MReceipt {
                    receipt: d.receipt,
                    queue,
                    id: d.id,
                    moves: mm.moves,
                    delivery: d.delivery(),
                };
                m.receipts.push(rec);
                if let Some(conn) = bind {
                    m.bound[conn].push(rec);
                }
            }
            if fifo && short {
                for g in m.groups_of(queue) {
                    assert!(
                        !m.unlocked(queue, g),
                        "a receive short of {max} left group {g:?} of {} able to deliver",
                        NAMES[queue]
                    );
                }
            }
        }
        Step::Disconnect { shard, conn } => {
            let bound = std::mem::take(&mut m.bound[conn]);
            for queue in [Q, DLQ] {
                let recs: Vec<MReceipt> =
                    bound.iter().copied().filter(|r| r.queue == queue).collect();
                if recs.is_empty() {
                    continue;
                }
                let got = match c.call(
                    shard % shards,
                    Op::Abandon(DeleteRequest {
                        queue: qn(NAMES[queue]),
                        receipts: recs.iter().map(|r| r.receipt).collect(),
                    }),
                ) {
                    OpResult::VisibilityChanged(r) => r,
                    other => panic!("{other:?}"),
                };
                assert_eq!(got.len(), recs.len());
                for (rec, got) in recs.iter().zip(got) {
                    let expect = expect_receipt(m, Some(*rec), queue, false);
                    assert_eq!(
                        got.map_err(|e| e.code()),
                        expect.map(|_| ()),
                        "abandon of {rec:?} on {}",
                        NAMES[queue]
                    );
                    if let Ok(id) = expect {
                        // Only a running lease is released; one that ran
                        // out (or was released) is visible already.
                        if matches!(m.msgs[&id].st, St::InFlight(_)) {
                            m.stats[queue].released += 1;
                            m.make_available(id, now);
                        }
                    }
                }
            }
        }
        Step::Delete {
            shard,
            queue,
            pick,
            forged,
        }
        | Step::ChangeVisibility {
            shard,
            queue,
            pick,
            forged,
            ..
        } => {
            let shard = shard % shards;
            let timeout = match step {
                Step::ChangeVisibility { timeout_ms, .. } => Some(timeout_ms),
                _ => None,
            };
            let rec = if m.receipts.is_empty() {
                None
            } else {
                Some(m.receipts[pick % m.receipts.len()])
            };
            let mut receipt = rec.map_or(Receipt::default(), |r| r.receipt);
            if forged {
                receipt.check ^= 1;
            }
            let expect = expect_receipt(m, rec, queue, forged);
            let op = match timeout {
                None => Op::Delete(DeleteRequest {
                    queue: qn(NAMES[queue]),
                    receipts: vec![receipt],
                }),
                Some(t) => Op::ChangeVisibility(ChangeVisibilityRequest {
                    queue: qn(NAMES[queue]),
                    entries: vec![VisibilityChange {
                        receipt,
                        visibility_timeout_ms: t,
                    }],
                }),
            };
            let got = match c.call(shard, op) {
                OpResult::Deleted(r) | OpResult::VisibilityChanged(r) => r[0].map_err(|e| e.code()),
                other => panic!("{other:?}"),
            };
            assert_eq!(
                got,
                expect.map(|_| ()),
                "receipt {rec:?} forged={forged} on {}",
                NAMES[queue]
            );
            if let Ok(id) = expect {
                match timeout {
                    None => {
                        m.remove(id);
                        m.stats[queue].deleted += 1;
                    }
                    Some(0) => {
                        if matches!(m.msgs[&id].st, St::InFlight(_)) {
                            m.stats[queue].released += 1;
                            m.make_available(id, now);
                        }
                    }
                    Some(t) => m.set_st(id, St::InFlight(now + u64::from(t) * NS)),
                }
            }
        }
        Step::Purge { shard, queue } => {
            let ids: Vec<MessageId> = m
                .msgs
                .iter()
                .filter(|(_, x)| x.queue == queue)
                .map(|(id, _)| *id)
                .collect();
            let r = c.call(
                shard % shards,
                Op::PurgeQueue {
                    queue: qn(NAMES[queue]),
                },
            );
            assert_eq!(
                r,
                OpResult::Purged {
                    messages: ids.len() as u64
                }
            );
            for id in ids {
                m.remove(id);
                m.stats[queue].purged += 1;
            }
        }
        Step::Peek { shard, queue, max } => {
            let got = match c.call(
                shard % shards,
                Op::Peek {
                    queue: qn(NAMES[queue]),
                    max_messages: u16::try_from(max).expect("the model draws small maxima"),
                },
            ) {
                OpResult::Peeked(p) => p,
                other => panic!("{other:?}"),
            };
            let visible = m.visible_in(queue);
            assert_eq!(got.len(), (max as usize).min(visible.len()));
            let mut seen = HashSet::new();
            for p in got {
                assert!(seen.insert(p.id) && visible.contains(&p.id));
                let mm = &m.msgs[&p.id];
                assert_eq!(
                    (p.receive_count, p.delivery, p.first_received_at_ms()),
                    (mm.rc, mm.delivery, mm.first_recv)
                );
            }
        }
        Step::Redrive { shard, max } => {
            let (moved, stayed) = match c.call(
                shard % shards,
                Op::Redrive {
                    queue: qn("dlq"),
                    max_messages: max,
                    to: None,
                },
            ) {
                OpResult::Redriven { moved, stayed } => (moved, stayed),
                other => panic!("{other:?}"),
            };
            let visible = m.visible_in(DLQ);
            assert!(moved + stayed <= u64::from(max));
            if moved + stayed < u64::from(max) {
                assert_eq!(
                    moved + stayed,
                    visible.len() as u64,
                    "every visible message considered"
                );
            }
            let vs = views(c);
            let back: Vec<MessageId> = visible
                .iter()
                .copied()
                .filter(|id| match vs.get(id) {
                    Some(v) => &*v.queue == "q",
                    // Moved back, then dropped at once: older than q's
                    // retention (its DLQ retention is longer).
                    None => m.msgs[id].sent_ns + RETENTION_MS[Q] * NS <= now,
                })
                .collect();
            assert_eq!(back.len() as u64, moved);
            // q's depth limit holds at every instant, so what stays in q
            // must fit in its room. A message moved back past q's retention
            // is dropped at once and gives its room back before the next
            // shard of the fan-out redrives: `moved` may exceed the room
            // by those (the engine is right; the model used to count them).
            let kept = back.iter().filter(|id| vs.contains_key(id)).count() as u64;
            let room = MAX_DEPTH.saturating_sub(m.depth(Q));
            assert!(
                kept <= room,
                "redrive overfilled q: {kept} kept, room {room}"
            );
            for id in back {
                assert_eq!(m.msgs[&id].source, Some(Q));
                m.move_to(id, Q, true);
            }
        }
    }
}

/// A FIFO queue's receive: it took (delivered, or moved to the dead-letter
/// queue) only from groups that could deliver, each group's first messages
/// in send order, and delivered them in that order.
fn check_fifo_take(m: &Model, queue: usize, delivered: &[MessageId], moved: &[MessageId]) {
    for g in m.groups_of(queue) {
        let members = m.group_members(queue, g);
        let taken: Vec<MessageId> = members
            .iter()
            .copied()
            .filter(|id| delivered.contains(id) || moved.contains(id))
            .collect();
        if taken.is_empty() {
            continue;
        }
        assert!(
            m.unlocked(queue, g),
            "group {g:?} of {} delivered while locked",
            NAMES[queue]
        );
        assert_eq!(
            taken[..],
            members[..taken.len()],
            "group {g:?} of {}: a take that is not the group's first messages",
            NAMES[queue]
        );
        let in_reply: Vec<MessageId> = delivered
            .iter()
            .copied()
            .filter(|id| m.msgs[id].group == g)
            .collect();
        assert!(
            in_reply.windows(2).all(|w| w[0] < w[1]),
            "group {g:?} out of order in the reply: {in_reply:?}"
        );
    }
}

/// What a delete, change of visibility or abandon of `rec` on `queue` must
/// answer: the message's id when the receipt is its current delivery's.
fn expect_receipt(
    m: &Model,
    rec: Option<MReceipt>,
    queue: usize,
    forged: bool,
) -> Result<MessageId, ErrorCode> {
    match rec {
        None => Err(ErrorCode::InvalidReceipt),
        Some(_) if forged => Err(ErrorCode::InvalidReceipt),
        Some(r) if r.queue != queue => Err(ErrorCode::InvalidReceipt),
        Some(r) => match m.msgs.get(&r.id) {
            None => Err(ErrorCode::Gone),
            Some(mm) if mm.queue != r.queue || mm.moves != r.moves => Err(ErrorCode::Gone),
            Some(mm) if r.delivery < mm.delivery => Err(ErrorCode::StaleReceipt),
            Some(_) => Ok(r.id),
        },
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_reference_model(
        shards in 2u16..=3,
        backoff in any::<bool>(),
        seed in any::<u64>(),
        kind in prop_oneof![Just(Kind::Plain), Just(Kind::Fair), Just(Kind::Fifo)],
        steps in prop::collection::vec(step(), 1..60),
    ) {
        run(shards, backoff, seed, kind, steps);
    }
}

#[test]
fn the_model_run_covers_a_fixed_scenario_on_one_shard_too() {
    // A hand-written sequence, so the single-shard path runs through the
    // same comparisons.
    let steps = vec![
        Step::Send {
            shard: 0,
            queue: Q,
            entries: vec![
                (3, None, Some(0), false, Some(0)),
                (4, None, Some(0), true, Some(1)),
                (2, Some(5), None, false, Some(0)),
                (5, None, None, false, Some(1)),
                (6, Some(0), None, false, Some(2)),
                (7, None, None, false, None),
            ],
        },
        Step::Receive {
            shard: 0,
            queue: Q,
            max: 100,
            vis: Some(10),
            bind: None,
        },
        Step::Advance(10),
        Step::Receive {
            shard: 0,
            queue: Q,
            max: 1,
            vis: None,
            bind: Some(0),
        },
        Step::ChangeVisibility {
            shard: 0,
            queue: Q,
            pick: 1,
            forged: false,
            timeout_ms: 0,
        },
        Step::Advance(50),
        Step::Receive {
            shard: 0,
            queue: Q,
            max: 100,
            vis: None,
            bind: Some(1),
        },
        Step::Disconnect { shard: 0, conn: 0 },
        Step::Disconnect { shard: 0, conn: 1 },
        Step::Advance(50),
        Step::Receive {
            shard: 0,
            queue: Q,
            max: 100,
            vis: None,
            bind: None,
        },
        Step::Redrive { shard: 0, max: 5 },
        Step::Peek {
            shard: 0,
            queue: Q,
            max: 5,
        },
        Step::Delete {
            shard: 0,
            queue: Q,
            pick: 0,
            forged: false,
        },
        Step::Advance(30_000),
        Step::Advance(30_000),
        Step::Purge {
            shard: 0,
            queue: DLQ,
        },
    ];
    for kind in [Kind::Plain, Kind::Fair, Kind::Fifo] {
        run(1, true, 3, kind, steps.clone());
        run(1, false, 4, kind, steps.clone());
    }
}
