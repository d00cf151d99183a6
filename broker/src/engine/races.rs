//! loom models of the lease races, where the shards meet (a forwarded delete
//! or change of visibility against the owner's expiry and redelivery, a
//! closing connection's release of its bound leases against a forwarded
//! delete and against the owner's expiry, a steal against the owner's own
//! receive, a long-poll wake-up against a waiter leaving), on the
//! production types: two real [`Shard`]s sharing one [`Registry`], wired by
//! the real ring-and-doorbell mesh, each driven by its own thread.
//!
//! Built with `RUSTFLAGS="--cfg sluice_loom"`, every atomic and mutex those
//! types use is loom's (through [`crate::sync`]) and [`model`] explores every
//! interleaving of the two threads (up to `LOOM_MAX_PREEMPTIONS`); built
//! normally, each body runs once as an ordinary test.
//!
//! Shape of every model, kept small so loom finishes in seconds:
//! - setup on the model's main thread, before any spawn: the queue, the
//!   message(s), the receipts the race needs;
//! - the race: shard 1 on a spawned thread, shard 0 on the main thread, each
//!   doing a short fixed sequence of calls on a virtual clock (values passed
//!   in, nothing read from a clock). No spinning: whatever one thread did
//!   not see yet is delivered by
//! - the settle after the join: both shards polled on one thread until
//!   nothing moves, then the race's invariant is asserted, then
//!   `check_invariants` and the accounting identity.
//!
//! Each model names its possible outcomes; under loom it also asserts that
//! the exploration reached every one of them, so a model that stopped
//! exercising its race would fail instead of passing vacuously.

use std::collections::BTreeSet;

use bytes::Bytes;
use sluice_protocol::{
    AttributeUpdate, ChangeVisibilityRequest, DeleteRequest, ErrorCode, Millis, QueueName,
    QueueStats, Receipt, ReceiveRequest, ReceivedMessage, SendEntry, SendRequest, VisibilityChange,
};

use super::limits::LINK_CAPACITY_DEFAULT;
use super::mesh::doorbell::{self, Wake};
use super::ops::{Op, OpResult};
use super::registry::{Registry, RegistryConfig};
use super::shard::{Shard, ShardConfig};
use super::stored_message::MessageState;
use crate::sync::{Arc, AtomicBool, Ordering, model, thread};

const MS: u64 = 1_000_000;
/// Monotonic time at the start of every model.
const T0: u64 = 1_000_000_000;
const WALL_MS: u64 = 1_700_000_000_000;
const QUEUE: &str = "q";

fn queue() -> QueueName {
    QueueName::from_static(QUEUE)
}

/// Stack of every model thread. loom runs its threads as coroutines with a
/// 32 KiB stack unless told otherwise, too little for a shard's call chain
/// once a failing assertion unwinds with a backtrace (loom then hangs on
/// the overflow instead of reporting the failure).
const STACK_BYTES: usize = 4 << 20;

/// Spawns a model thread with a stack of [`STACK_BYTES`].
fn spawn<T, F>(f: F) -> thread::JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(f)
        .expect("spawn a model thread")
}

/// Runs `body` under [`model`] on a thread of its own (with a big stack);
/// the body spawns the second shard's thread itself.
fn run(body: impl Fn() + Send + Sync + 'static) {
    // std's Arc on purpose: the body outlives every run loom makes, so it
    // sits outside what loom explores.
    let body = std::sync::Arc::new(body);
    model(move || {
        let body = body.clone();
        spawn(move || body()).join().expect("model body");
    });
}

// The shards of a model poll each other; nobody sleeps (`NoWake`).
use crate::engine::mesh::doorbell::NoWake;

/// Two shards sharing a registry that holds one queue, `QUEUE`.
fn two_shards(attributes: &AttributeUpdate) -> (Shard, Shard) {
    let registry = Arc::new(Registry::new(RegistryConfig {
        shards: 2,
        seed: 7,
        ..RegistryConfig::default()
    }));
    registry.create(&queue(), attributes, 0).expect("queue");
    let wakers = vec![
        Box::new(NoWake) as Box<dyn Wake>,
        Box::new(NoWake) as Box<dyn Wake>,
    ];
    let mut links = doorbell::mesh(2, LINK_CAPACITY_DEFAULT, wakers).into_iter();
    let mut shard = |id: u16| {
        let config = ShardConfig {
            shard: id,
            seed: u64::from(id) + 1,
        };
        let links = links.next().expect("one link set per shard");
        Shard::new(config, links, registry.clone(), T0, WALL_MS)
    };
    let a = shard(0);
    let b = shard(1);
    (a, b)
}

fn send_op(body: &str) -> Op {
    let entry = SendEntry::new(Bytes::copy_from_slice(body.as_bytes()));
    Op::Send(SendRequest::new(queue(), [&entry]).expect("a one-entry batch"))
}

fn receive_op(wait_ms: u32) -> Op {
    Op::Receive(ReceiveRequest {
        queue: queue(),
        max_messages: 1,
        visibility_timeout_ms: None,
        wait_ms: Some(wait_ms),
        bind_leases: false,
        with_source: false,
    })
}

fn delete_op(receipt: Receipt) -> Op {
    Op::Delete(DeleteRequest {
        queue: queue(),
        receipts: vec![receipt],
    })
}

/// What a session submits for a bound lease when its connection closes.
fn abandon_op(receipt: Receipt) -> Op {
    Op::Abandon(DeleteRequest {
        queue: queue(),
        receipts: vec![receipt],
    })
}

/// Polls both shards at `now_ns` until a whole round does nothing.
fn settle(a: &mut Shard, b: &mut Shard, now_ns: u64) {
    loop {
        let work = a.poll(now_ns, WALL_MS) + b.poll(now_ns, WALL_MS);
        if work == 0 && !a.has_outbound() && !b.has_outbound() {
            return;
        }
    }
}

/// The result of `ticket`: `immediate` if the submit completed it, else
/// from the shard's completions (exactly once).
fn result_of(shard: &mut Shard, ticket: u64, immediate: Option<OpResult>) -> OpResult {
    let mut done = Vec::new();
    shard.drain_completions(&mut done);
    let mut found: Vec<OpResult> = done
        .into_iter()
        .filter(|(t, _)| *t == ticket)
        .map(|(_, r)| r)
        .chain(immediate)
        .collect();
    assert_eq!(found.len(), 1, "ticket {ticket} must complete exactly once");
    found.remove(0)
}

fn received(r: OpResult) -> Vec<ReceivedMessage> {
    match r {
        OpResult::Received(m) => m,
        other => panic!("receive: {other:?}"),
    }
}

/// The one entry of a single-receipt delete or change visibility.
fn receipt_result(r: OpResult) -> Result<(), ErrorCode> {
    match r {
        OpResult::Deleted(mut v) | OpResult::VisibilityChanged(mut v) if v.len() == 1 => {
            v.remove(0).map_err(|e| e.code())
        }
        other => panic!("receipt op: {other:?}"),
    }
}

fn send_one(shard: &mut Shard, ticket: u64, now_ns: u64) {
    match shard.submit(ticket, send_op("m"), now_ns, WALL_MS) {
        Some(OpResult::Sent(r)) if r.len() == 1 && r[0].is_ok() => {}
        other => panic!("send: {other:?}"),
    }
}

fn receive_now(shard: &mut Shard, ticket: u64, now_ns: u64) -> Vec<ReceivedMessage> {
    received(
        shard
            .submit(ticket, receive_op(0), now_ns, WALL_MS)
            .expect("a receive that may not wait completes on a single shard"),
    )
}

fn delete_now(
    shard: &mut Shard,
    ticket: u64,
    receipt: Receipt,
    now_ns: u64,
) -> Result<(), ErrorCode> {
    receipt_result(
        shard
            .submit(ticket, delete_op(receipt), now_ns, WALL_MS)
            .expect("a receipt of this shard completes at once"),
    )
}

/// Both shards' counters of `QUEUE`, summed; asserts the identity, each
/// shard's invariants, and that the shared depth and waiter counts agree
/// with what the shards hold.
fn check_all(a: &mut Shard, b: &mut Shard) -> QueueStats {
    a.check_invariants().expect("shard 0 invariants");
    b.check_invariants().expect("shard 1 invariants");
    let mut total = QueueStats::default();
    for s in [&mut *a, &mut *b] {
        total.merge(&s.local_stats(QUEUE).expect("queue on every shard"));
    }
    assert!(total.identity_holds(), "accounting identity: {total:?}");
    let shared = a.registry().get(QUEUE).expect("queue").shared;
    assert_eq!(
        shared.depth(),
        total.visible + total.delayed + total.in_flight,
        "shared depth"
    );
    total
}

/// Outcomes seen across the runs of one model (std types on purpose: this
/// bookkeeping sits outside what loom explores).
#[derive(Clone, Default)]
struct Outcomes(std::sync::Arc<std::sync::Mutex<(BTreeSet<&'static str>, u64)>>);

impl Outcomes {
    fn saw(&self, outcome: &'static str) {
        let mut seen = self.0.lock().expect("outcomes");
        seen.0.insert(outcome);
        seen.1 += 1;
    }

    /// Under loom, every outcome was reached; otherwise (one run) the one
    /// seen is among them.
    fn assert_reached(&self, all: &[&'static str]) {
        let (seen, runs) = self.0.lock().expect("outcomes").clone();
        eprintln!("{runs} interleavings explored, outcomes: {seen:?}");
        let all: BTreeSet<&'static str> = all.iter().copied().collect();
        assert!(!seen.is_empty() && seen.is_subset(&all), "{seen:?}");
        if cfg!(sluice_loom) {
            assert_eq!(seen, all, "the exploration must reach every outcome");
        }
    }
}

/// A consumer on shard 1 deletes (forwarded to the owner, shard 0) while the
/// owner's lease of the message expires and the owner's own consumer
/// receives it again. Exactly one wins: the delete (then nobody receives
/// the message again) or the redelivery (then the old receipt is stale and
/// the message is untouched, in flight under the new receipt only).
#[test]
fn loom_forwarded_delete_vs_expiry_and_redelivery() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let attrs = AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            ..AttributeUpdate::default()
        };
        let (mut a, mut b) = two_shards(&attrs);
        send_one(&mut a, 1, T0);
        // Shard 1's consumer gets the message by a steal: its receipt names
        // shard 0.
        let pending = b.submit(2, receive_op(0), T0, WALL_MS);
        settle(&mut a, &mut b, T0);
        let first = received(result_of(&mut b, 2, pending));
        assert_eq!(first.len(), 1);
        let r1 = first[0].receipt;
        assert_eq!(r1.shard, 0);
        let expiry = T0 + 1000 * MS;

        let consumer = spawn(move || {
            let immediate = b.submit(3, delete_op(r1), T0 + 500 * MS, WALL_MS);
            assert!(immediate.is_none(), "forwarded to the owner");
            // The reply may already be back.
            b.poll(T0 + 500 * MS, WALL_MS);
            b
        });
        a.poll(expiry - MS, WALL_MS);
        a.poll(expiry, WALL_MS);
        let again = receive_now(&mut a, 4, expiry);
        a.poll(expiry, WALL_MS);
        let mut b = consumer.join().expect("shard 1");

        settle(&mut a, &mut b, expiry);
        let delete = receipt_result(result_of(&mut b, 3, None));
        let stats = check_all(&mut a, &mut b);
        match delete {
            Ok(()) => {
                assert!(again.is_empty(), "deleted, yet delivered again");
                assert!(a.messages().is_empty());
                seen.saw(if stats.redelivered == 0 {
                    "delete before expiry"
                } else {
                    "delete after expiry, before redelivery"
                });
            }
            Err(ErrorCode::StaleReceipt) => {
                assert_eq!(again.len(), 1, "stale only once delivered again");
                let r2 = again[0].receipt;
                assert_eq!(again[0].delivery(), 2);
                assert_eq!((r2.slot, r2.generation), (r1.slot, r1.generation));
                let held = a.messages();
                assert_eq!(held.len(), 1);
                assert_eq!(held[0].state, MessageState::InFlight);
                assert_eq!(held[0].delivery, 2);
                // The old receipt stays stale; the new one holds the lease.
                assert_eq!(
                    delete_now(&mut a, 5, r1, expiry),
                    Err(ErrorCode::StaleReceipt)
                );
                assert_eq!(delete_now(&mut a, 6, r2, expiry), Ok(()));
                seen.saw("redelivery first");
            }
            Err(other) => panic!("forwarded delete: {other:?}"),
        }
        let stats = check_all(&mut a, &mut b);
        assert_eq!((stats.sent, stats.deleted), (1, 1), "{stats:?}");
        assert!(a.messages().is_empty() && b.messages().is_empty());
    });
    outcomes.assert_reached(&[
        "delete before expiry",
        "delete after expiry, before redelivery",
        "redelivery first",
    ]);
}

/// A change visibility forwarded from shard 1 against the owner's expiry
/// and redelivery. Before the redelivery it wins, after expiry included (it
/// leases the message again under the same receipt); after the redelivery
/// it is stale. Either way exactly one receipt holds a lease afterwards.
#[test]
fn loom_forwarded_change_visibility_vs_expiry() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let attrs = AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            ..AttributeUpdate::default()
        };
        let (mut a, mut b) = two_shards(&attrs);
        send_one(&mut a, 1, T0);
        let first = receive_now(&mut a, 2, T0);
        let r1 = first[0].receipt;
        let expiry = T0 + 1000 * MS;

        let consumer = spawn(move || {
            let op = Op::ChangeVisibility(ChangeVisibilityRequest {
                queue: queue(),
                entries: vec![VisibilityChange {
                    receipt: r1,
                    visibility_timeout_ms: 5000,
                }],
            });
            assert!(b.submit(3, op, T0 + 500 * MS, WALL_MS).is_none());
            b.poll(T0 + 500 * MS, WALL_MS);
            b
        });
        a.poll(expiry - MS, WALL_MS);
        a.poll(expiry, WALL_MS);
        let again = receive_now(&mut a, 4, expiry);
        a.poll(expiry, WALL_MS);
        let mut b = consumer.join().expect("shard 1");

        settle(&mut a, &mut b, expiry);
        let change = receipt_result(result_of(&mut b, 3, None));
        let stats = check_all(&mut a, &mut b);
        let held = a.messages();
        assert_eq!(held.len(), 1, "the message is neither lost nor doubled");
        assert_eq!(held[0].state, MessageState::InFlight);
        match change {
            Ok(()) => {
                assert!(again.is_empty(), "re-leased, yet delivered again");
                assert_eq!(held[0].delivery, 1);
                // The lease runs 5 s from when the owner applied it: before
                // the expiry, or at it (then it re-leased a visible message).
                let (outcome, applied) = if stats.redelivered == 0 {
                    ("change before expiry", expiry - MS)
                } else {
                    ("change after expiry, before redelivery", expiry)
                };
                assert_eq!(held[0].due_ns, Some(applied + 5000 * MS));
                assert_eq!(delete_now(&mut a, 5, r1, expiry), Ok(()));
                seen.saw(outcome);
            }
            Err(ErrorCode::StaleReceipt) => {
                assert_eq!(again.len(), 1);
                assert_eq!(held[0].delivery, 2);
                assert_eq!(held[0].due_ns, Some(expiry + 1000 * MS));
                assert_eq!(
                    delete_now(&mut a, 5, r1, expiry),
                    Err(ErrorCode::StaleReceipt)
                );
                assert_eq!(delete_now(&mut a, 6, again[0].receipt, expiry), Ok(()));
                seen.saw("redelivery first");
            }
            Err(other) => panic!("forwarded change visibility: {other:?}"),
        }
        let stats = check_all(&mut a, &mut b);
        assert_eq!((stats.sent, stats.deleted), (1, 1), "{stats:?}");
    });
    outcomes.assert_reached(&[
        "change before expiry",
        "change after expiry, before redelivery",
        "redelivery first",
    ]);
}

/// A connection on the owner (shard 0) closes holding a bound lease, so its
/// session asks its engine to release it, while a consumer on shard 1
/// deletes the same delivery (forwarded to the owner), and the owner's own
/// consumer receives right after the release. One winner: the delete (the
/// release finds the message gone), or the release (the message is
/// visible again, then deleted by the late delete if nobody received it
/// yet, or received again, when the delete is stale and the new lease
/// untouched). Never lost, never two valid leases.
#[test]
fn loom_bound_release_vs_forwarded_delete() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let attrs = AttributeUpdate {
            visibility_timeout: Some(Millis::new(60_000)),
            ..AttributeUpdate::default()
        };
        let (mut a, mut b) = two_shards(&attrs);
        send_one(&mut a, 1, T0);
        let r1 = receive_now(&mut a, 2, T0)[0].receipt;
        assert_eq!(r1.shard, 0);
        let t = T0 + 10 * MS;

        let consumer = spawn(move || {
            assert!(
                b.submit(3, delete_op(r1), t, WALL_MS).is_none(),
                "forwarded"
            );
            b.poll(t, WALL_MS);
            b
        });
        a.poll(t, WALL_MS);
        let release = receipt_result(
            a.submit(4, abandon_op(r1), t, WALL_MS)
                .expect("a receipt of this shard completes at once"),
        );
        a.poll(t, WALL_MS);
        let again = receive_now(&mut a, 5, t);
        a.poll(t, WALL_MS);
        let mut b = consumer.join().expect("shard 1");

        settle(&mut a, &mut b, t);
        let delete = receipt_result(result_of(&mut b, 3, None));
        let stats = check_all(&mut a, &mut b);
        let held = a.messages();
        match (release, delete) {
            (Err(ErrorCode::Gone), Ok(())) => {
                assert!(again.is_empty() && held.is_empty());
                assert_eq!((stats.deleted, stats.released), (1, 0));
                seen.saw("delete first");
            }
            (Ok(()), Ok(())) => {
                assert!(again.is_empty(), "deleted, yet delivered again");
                assert!(held.is_empty());
                assert_eq!((stats.deleted, stats.released), (1, 1));
                seen.saw("release, then the delete");
            }
            (Ok(()), Err(ErrorCode::StaleReceipt)) => {
                assert_eq!(again.len(), 1);
                assert_eq!(again[0].delivery(), 2);
                assert_eq!(held.len(), 1);
                assert_eq!(held[0].state, MessageState::InFlight);
                assert_eq!(held[0].delivery, 2);
                assert_eq!((stats.deleted, stats.released), (0, 1));
                // The old receipt stays stale; the new one holds the lease.
                assert_eq!(delete_now(&mut a, 6, r1, t), Err(ErrorCode::StaleReceipt));
                assert_eq!(delete_now(&mut a, 7, again[0].receipt, t), Ok(()));
                seen.saw("release, redelivery, then a stale delete");
            }
            other => panic!("release and delete: {other:?}"),
        }
        let stats = check_all(&mut a, &mut b);
        assert_eq!((stats.sent, stats.deleted), (1, 1), "{stats:?}");
        assert!(a.messages().is_empty() && b.messages().is_empty());
    });
    outcomes.assert_reached(&[
        "delete first",
        "release, then the delete",
        "release, redelivery, then a stale delete",
    ]);
}

/// A consumer on shard 1 took the owner's message by a steal and bound its
/// lease; its connection closes (the release is forwarded to the owner,
/// shard 0) while the owner's lease of it expires and the owner's own
/// consumer receives it again. Whatever the order, the owner's consumer
/// gets the message once, under the only valid lease: released at once
/// (the release came first), released by the expiry (the release then
/// finds it visible and does nothing), or redelivered (the release is
/// stale and leaves the new lease alone).
#[test]
fn loom_bound_release_vs_expiry_on_the_owner() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let attrs = AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            ..AttributeUpdate::default()
        };
        let (mut a, mut b) = two_shards(&attrs);
        send_one(&mut a, 1, T0);
        let pending = b.submit(2, receive_op(0), T0, WALL_MS);
        settle(&mut a, &mut b, T0);
        let first = received(result_of(&mut b, 2, pending));
        let r1 = first[0].receipt;
        assert_eq!(r1.shard, 0, "the owner leased it for shard 1");
        let expiry = T0 + 1000 * MS;

        let closing = spawn(move || {
            let immediate = b.submit(3, abandon_op(r1), T0 + 500 * MS, WALL_MS);
            assert!(immediate.is_none(), "forwarded to the owner");
            b.poll(T0 + 500 * MS, WALL_MS);
            b
        });
        a.poll(expiry - MS, WALL_MS);
        a.poll(expiry, WALL_MS);
        let again = receive_now(&mut a, 4, expiry);
        a.poll(expiry, WALL_MS);
        let mut b = closing.join().expect("shard 1");

        settle(&mut a, &mut b, expiry);
        let release = receipt_result(result_of(&mut b, 3, None));
        let stats = check_all(&mut a, &mut b);
        assert_eq!(
            again.len(),
            1,
            "the message is back for the owner's consumer"
        );
        assert_eq!(again[0].delivery(), 2);
        let held = a.messages();
        assert_eq!(held.len(), 1, "neither lost nor doubled");
        assert_eq!(held[0].state, MessageState::InFlight);
        assert_eq!(held[0].delivery, 2);
        assert_eq!(stats.released + stats.redelivered, 1, "{stats:?}");
        seen.saw(match (release, stats.released) {
            (Ok(()), 1) => "released before the expiry",
            (Ok(()), _) => "expired first, the release found nothing to do",
            (Err(ErrorCode::StaleReceipt), _) => "redelivered first, the release is stale",
            other => panic!("release: {other:?}"),
        });
        // One valid lease: the old receipt is stale, the new one deletes.
        assert_eq!(
            delete_now(&mut a, 5, r1, expiry),
            Err(ErrorCode::StaleReceipt)
        );
        assert_eq!(delete_now(&mut a, 6, again[0].receipt, expiry), Ok(()));
        let stats = check_all(&mut a, &mut b);
        assert_eq!((stats.sent, stats.deleted), (1, 1), "{stats:?}");
    });
    outcomes.assert_reached(&[
        "released before the expiry",
        "expired first, the release found nothing to do",
        "redelivered first, the release is stale",
    ]);
}

/// A receive on shard 1 steals from shard 0 while shard 0's own consumer
/// receives: the one message goes to exactly one of them, once.
#[test]
fn loom_steal_vs_owner_receive() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let (mut a, mut b) = two_shards(&AttributeUpdate::default());
        send_one(&mut a, 1, T0);

        let thief = spawn(move || {
            let immediate = b.submit(2, receive_op(0), T0, WALL_MS);
            b.poll(T0, WALL_MS);
            (b, immediate)
        });
        a.poll(T0, WALL_MS);
        let own = receive_now(&mut a, 3, T0);
        a.poll(T0, WALL_MS);
        let (mut b, immediate) = thief.join().expect("shard 1");
        let saw_hint = immediate.is_none();

        settle(&mut a, &mut b, T0);
        let stolen = received(result_of(&mut b, 2, immediate));
        let stats = check_all(&mut a, &mut b);
        assert_eq!(own.len() + stolen.len(), 1, "exactly one winner");
        let got = own.iter().chain(&stolen).next().expect("one message");
        assert_eq!((got.delivery(), got.receive_count), (1, 1));
        assert_eq!(got.receipt.shard, 0, "the owner leased it");
        assert_eq!(stats.received, 1);
        assert_eq!(stats.in_flight, 1);
        let held = a.messages();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].state, MessageState::InFlight);
        seen.saw(match (stolen.is_empty(), saw_hint) {
            (false, _) => "steal wins",
            (true, true) => "owner wins, steal finds nothing",
            (true, false) => "owner wins, no steal",
        });
    });
    outcomes.assert_reached(&[
        "steal wins",
        "owner wins, steal finds nothing",
        "owner wins, no steal",
    ]);
}

/// A long poll parked on shard 1 reaches its deadline while shard 0 sends
/// a message and wakes it. The receive completes exactly once: with the
/// message (then leased by the owner under it) or empty (then the message
/// is still visible, not leased to nobody). A wake-up that reached shard 1
/// before its deadline must not be lost. Afterwards no waiter is counted.
#[test]
fn loom_waiter_timeout_vs_wake() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let (mut a, mut b) = two_shards(&AttributeUpdate::default());
        let deadline = T0 + 1000 * MS;
        assert!(
            b.submit(1, receive_op(1000), T0, WALL_MS).is_none(),
            "parked"
        );
        let sent = Arc::new(AtomicBool::new(false));

        let sent_seen = sent.clone();
        let waiter = spawn(move || {
            // Whether the send (and so its wake-up) finished before this
            // shard's last turn ahead of the deadline.
            let before_deadline = sent_seen.load(Ordering::SeqCst);
            b.poll(deadline - MS, WALL_MS);
            b.poll(deadline, WALL_MS);
            (b, before_deadline)
        });
        send_one(&mut a, 2, T0);
        sent.store(true, Ordering::SeqCst);
        a.poll(T0, WALL_MS);
        let (mut b, sent_before_deadline) = waiter.join().expect("shard 1");

        settle(&mut a, &mut b, deadline);
        let got = received(result_of(&mut b, 1, None));
        check_all(&mut a, &mut b);
        let held = a.messages();
        assert_eq!(held.len(), 1);
        let shared = a.registry().get(QUEUE).expect("queue").shared;
        assert_eq!((shared.waiters(0), shared.waiters(1)), (0, 0));
        if got.is_empty() {
            assert!(!sent_before_deadline, "lost wake-up");
            assert_eq!(held[0].state, MessageState::Visible);
            assert_eq!(held[0].delivery, 0);
            seen.saw("timed out");
        } else {
            assert_eq!(got.len(), 1);
            assert_eq!(held[0].state, MessageState::InFlight);
            assert_eq!(held[0].delivery, 1);
            assert_eq!(delete_now(&mut a, 3, got[0].receipt, deadline), Ok(()));
            seen.saw("woken");
        }
    });
    outcomes.assert_reached(&["timed out", "woken"]);
}

/// A long poll parks on shard 1 while shard 0 sends (the Dekker pairing of
/// `registry.rs`: the waiter registers then reads the hints, the owner
/// publishes its hint then reads the waiter counts). Whatever the order,
/// the receive gets the message well before its deadline.
#[test]
fn loom_waiter_park_vs_send_no_lost_wakeup() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let (mut a, mut b) = two_shards(&AttributeUpdate::default());
        let waiter = spawn(move || {
            let immediate = b.submit(1, receive_op(1000), T0, WALL_MS);
            b.poll(T0, WALL_MS);
            (b, immediate)
        });
        send_one(&mut a, 2, T0);
        a.poll(T0, WALL_MS);
        let (mut b, immediate) = waiter.join().expect("shard 1");
        assert!(immediate.is_none(), "nothing local: it steals or parks");
        let shared = a.registry().get(QUEUE).expect("queue").shared;
        let parked_at_join = shared.waiters(1) == 1;

        // The clock does not move: the message must arrive before the
        // deadline, by a steal or a wake-up.
        settle(&mut a, &mut b, T0);
        let got = received(result_of(&mut b, 1, None));
        assert_eq!(got.len(), 1, "lost wake-up: the long poll still waits");
        check_all(&mut a, &mut b);
        assert_eq!((shared.waiters(0), shared.waiters(1)), (0, 0));
        let held = a.messages();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].state, MessageState::InFlight);
        assert_eq!(delete_now(&mut a, 3, got[0].receipt, T0), Ok(()));
        seen.saw(if parked_at_join {
            "parked, then woken"
        } else {
            "served before the join"
        });
    });
    outcomes.assert_reached(&["parked, then woken", "served before the join"]);
}

/// A receipt of a message whose slot was reused is forwarded to the owner
/// while the owner drops the old message (retention), accepts a new one
/// into the same slot and leases it with the same delivery number. The old
/// receipt deletes the old message or answers `Gone`; it never touches the
/// new one.
#[test]
fn loom_old_receipt_after_slot_reuse() {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    run(move || {
        let attrs = AttributeUpdate {
            retention: Some(Millis::new(60_000)),
            ..AttributeUpdate::default()
        };
        let (mut a, mut b) = two_shards(&attrs);
        send_one(&mut a, 1, T0);
        let r1 = receive_now(&mut a, 2, T0)[0].receipt;
        let later = T0 + 60_000 * MS;

        let consumer = spawn(move || {
            assert!(b.submit(3, delete_op(r1), T0, WALL_MS).is_none());
            b.poll(T0, WALL_MS);
            b
        });
        a.poll(T0, WALL_MS);
        a.poll(later, WALL_MS);
        send_one(&mut a, 4, later);
        let second = receive_now(&mut a, 5, later);
        a.poll(later, WALL_MS);
        let mut b = consumer.join().expect("shard 1");

        settle(&mut a, &mut b, later);
        let delete = receipt_result(result_of(&mut b, 3, None));
        let stats = check_all(&mut a, &mut b);
        assert_eq!(second.len(), 1);
        let r2 = second[0].receipt;
        assert_eq!(r2.slot, r1.slot, "the slot was reused");
        assert_ne!(r2.generation, r1.generation);
        assert_eq!(
            r2.delivery, r1.delivery,
            "only the generation tells them apart"
        );
        let held = a.messages();
        assert_eq!(held.len(), 1, "the new message is untouched");
        assert_eq!(held[0].state, MessageState::InFlight);
        assert_eq!(held[0].delivery, 1);
        match delete {
            Ok(()) => {
                assert_eq!((stats.deleted, stats.dropped), (1, 0));
                seen.saw("old message deleted first");
            }
            Err(ErrorCode::Gone) => {
                assert_eq!((stats.deleted, stats.dropped), (0, 1));
                seen.saw("old message dropped first");
            }
            Err(other) => panic!("old receipt: {other:?}"),
        }
        assert_eq!(delete_now(&mut a, 6, r1, later), Err(ErrorCode::Gone));
        assert_eq!(delete_now(&mut a, 7, r2, later), Ok(()));
        check_all(&mut a, &mut b);
    });
    outcomes.assert_reached(&["old message deleted first", "old message dropped first"]);
}
