//! The engine alone, on one core (goal: at least 5,000,000 cycles/s; see
//! BENCHMARKS.md): send + receive +
//! delete cycles on one shard, in batches of 64 messages of 100 bytes, and
//! one hot queue driven on 1 shard vs 2 shards (producers on shard 0,
//! consumers on both, one thread per shard).
//!
//! `cargo bench -p sluice-benches --bench engine_cycle`; results and the
//! machine they came from are in BENCHMARKS.md.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_benches::{WALL_MS, shards};
use sluice_broker::engine::{Op, OpResult, Shard};
use sluice_protocol::{DeleteRequest, QueueName, Receipt, ReceiveRequest, SendEntry, SendRequest};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Messages per request (the figures' batches of 64).
const BATCH: usize = 64;
/// Body bytes per message.
const BODY_BYTES: usize = 100;
/// The queue every bench here uses.
fn queue() -> QueueName {
    QueueName::from_static("bench")
}

/// A send request of `BATCH` entries of `body`, in wire form, as the
/// server's decoder hands it over: [`Op::Send`] of a clone of it is what a
/// decoded SEND costs (one reference count).
fn send_request(body: &Bytes) -> SendRequest {
    let entries: Vec<SendEntry> = (0..BATCH).map(|_| SendEntry::new(body.clone())).collect();
    SendRequest::new(queue(), &entries).expect("a batch that encodes")
}

fn receive_op() -> Op {
    Op::Receive(ReceiveRequest {
        queue: queue(),
        max_messages: BATCH as u16,
        visibility_timeout_ms: None,
        wait_ms: Some(0),
        bind_leases: false,
        with_source: false,
    })
}

/// One cycle on one shard: send 64, receive 64, delete 64, each result
/// handed back to the engine once read (as the server does once it has
/// written the reply).
fn cycle(shard: &mut Shard, send: &SendRequest, ticket: &mut u64, now_ns: u64) {
    *ticket += 3;
    let sent = shard.submit(*ticket, Op::Send(send.clone()), now_ns, WALL_MS);
    assert!(matches!(&sent, Some(OpResult::Sent(r)) if r.len() == BATCH));
    shard.recycle(black_box(sent).expect("sent"));
    let mut receipts: Vec<Receipt> = Vec::with_capacity(BATCH);
    match shard.submit(*ticket + 1, receive_op(), now_ns, WALL_MS) {
        Some(OpResult::Received(m)) => {
            receipts.extend(m.iter().map(|m| m.receipt));
            shard.recycle(OpResult::Received(m));
        }
        other => panic!("receive: {other:?}"),
    }
    assert_eq!(receipts.len(), BATCH);
    let deleted = shard.submit(
        *ticket + 2,
        Op::Delete(DeleteRequest {
            queue: queue(),
            receipts,
        }),
        now_ns,
        WALL_MS,
    );
    assert!(matches!(&deleted, Some(OpResult::Deleted(r)) if r.iter().all(Result::is_ok)));
    shard.recycle(black_box(deleted).expect("deleted"));
}

fn one_shard_cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_cycle");
    group.throughput(Throughput::Elements(BATCH as u64));
    let send = send_request(&Bytes::from(vec![0x5a; BODY_BYTES]));
    let mut shard = shards(1, &queue()).pop().expect("one shard");
    let mut ticket = 0;
    // The virtual clock moves 10 µs per cycle, so timers are inserted and
    // cancelled as in a live shard and the wheel advances now and then.
    let mut now_ns = 1_000_000_000;
    group.bench_function("send_receive_delete_64x100B", |b| {
        b.iter(|| {
            now_ns += 10_000;
            cycle(&mut shard, &send, &mut ticket, now_ns);
        });
    });
    group.finish();
}

/// Drives one hot queue for `duration`: shard 0 sends batches and
/// receives + deletes; with 2 shards, shard 1 (its own thread) only
/// receives + deletes, by steals. Returns messages deleted per second.
fn hot_queue(shard_count: u16, duration: Duration) -> f64 {
    let mut all = shards(shard_count, &queue());
    let send = send_request(&Bytes::from(vec![0x5a; BODY_BYTES]));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let consumers: Vec<_> = all
        .drain(1..)
        .map(|mut shard| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut deleted = 0u64;
                let mut ticket = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let now = start.elapsed().as_nanos() as u64 + 1_000_000_000;
                    ticket += 2;
                    deleted += consume(&mut shard, ticket, now);
                    shard.poll(now, WALL_MS);
                }
                // Leave every forward and steal answered.
                let now = start.elapsed().as_nanos() as u64 + 1_000_000_000;
                shard.poll(now, WALL_MS);
                deleted
            })
        })
        .collect();
    let mut shard = all.pop().expect("shard 0");
    let mut deleted = 0u64;
    let mut ticket = 0u64;
    while start.elapsed() < duration {
        let now = start.elapsed().as_nanos() as u64 + 1_000_000_000;
        ticket += 3;
        // Keep the queue from growing without bound: send only while the
        // backlog is under a few batches.
        let backlog = shard.local_stats("bench").map_or(0, |s| s.visible);
        if backlog < 4 * BATCH as u64 {
            shard.submit(ticket, Op::Send(send.clone()), now, WALL_MS);
        }
        deleted += consume(&mut shard, ticket + 1, now);
        shard.poll(now, WALL_MS);
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        deleted += c.join().expect("consumer shard");
    }
    deleted as f64 / elapsed.as_secs_f64()
}

/// Receives up to a batch (stealing when local is empty) and deletes what it
/// got; returns how many it deleted here (forwarded deletes complete later
/// and are not counted, but their messages were counted as received here).
fn consume(shard: &mut Shard, ticket: u64, now: u64) -> u64 {
    let mut got = match shard.submit(ticket, receive_op(), now, WALL_MS) {
        Some(OpResult::Received(m)) => m,
        Some(other) => panic!("receive: {other:?}"),
        None => Vec::new(),
    };
    let mut done = Vec::new();
    shard.drain_completions(&mut done);
    for (_, r) in done {
        if let OpResult::Received(m) = r {
            got.extend(m);
        }
    }
    if got.is_empty() {
        return 0;
    }
    let n = got.len() as u64;
    let receipts = got.into_iter().map(|m| m.receipt).collect();
    let op = Op::Delete(DeleteRequest {
        queue: queue(),
        receipts,
    });
    // A delete whose receipts name another shard completes later.
    let _ = shard.submit(ticket + 1_000_000_000, op, now, WALL_MS);
    n
}

fn hot_queue_1_vs_2(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_hot_queue");
    group.sample_size(10);
    group.throughput(Throughput::Elements(1));
    for shard_count in [1u16, 2] {
        group.bench_function(format!("{shard_count}_shards_msgs_per_s"), |b| {
            b.iter_custom(|iters| {
                // Time per message, so criterion reports messages/s.
                let rate = hot_queue(shard_count, Duration::from_millis(200));
                Duration::from_secs_f64(iters as f64 / rate)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, one_shard_cycle, hot_queue_1_vs_2);
criterion_main!(benches);
