//! Allocations per send + receive + delete cycle in steady state (goal: one
//! per message, its body; none per request beyond that), counted
//! by an instrumented global allocator on one shard, batches of 64 x 100 B.
//! Each result is handed back to the engine once used ([`Shard::recycle`]),
//! as the server does once it has written the reply.
//!
//! The count does not depend on the allocator, so this one binary counts
//! through the system allocator (instrumented) instead of mimalloc.
//!
//! `cargo run --release -p sluice-benches --bin engine_allocs [-- CYCLES]`
//!
//! Run under `valgrind --tool=callgrind` with two cycle counts, the
//! difference of the instruction counts over the difference of the cycles
//! is the instructions per cycle (system allocator, instrumented).

use bytes::Bytes;
use sluice_benches::{WALL_MS, shards};
use sluice_broker::engine::{Op, OpResult, Shard};
use sluice_protocol::{DeleteRequest, QueueName, Receipt, ReceiveRequest, SendEntry, SendRequest};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const BATCH: usize = 64;
const BODY_BYTES: usize = 100;
const QUEUE: &str = "allocs";
const WARM_CYCLES: u64 = 10_000;
const CYCLES_DEFAULT: u64 = 10_000;

/// Counts of one phase, per cycle.
#[derive(Default)]
struct Counts {
    send: u64,
    receive: u64,
    delete: u64,
    /// The requests themselves (the server's decoder builds them).
    requests: u64,
}

/// Uses a result answered at once (`check` reads it, as a reply is
/// written), then hands it back to the engine.
fn recycle(shard: &mut Shard, result: Option<OpResult>, check: impl FnOnce(&OpResult)) {
    let result = result.expect("answered at once");
    check(&result);
    shard.recycle(result);
}

fn main() {
    let cycles: u64 = std::env::args()
        .nth(1)
        .map_or(CYCLES_DEFAULT, |a| a.parse().expect("CYCLES: a count"));
    let queue = QueueName::from_static(QUEUE);
    let mut shard = shards(1, &queue).pop().expect("one shard");
    // A decoded SEND: its entries in wire form, one slice of the frame.
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    let entries: Vec<SendEntry> = (0..BATCH).map(|_| SendEntry::new(body.clone())).collect();
    let decoded = SendRequest::new(queue.clone(), &entries).expect("a batch that encodes");
    let mut counts = Counts::default();
    let mut now_ns = 1_000_000_000;
    for cycle in 0..WARM_CYCLES + cycles {
        let measure = cycle >= WARM_CYCLES;
        now_ns += 10_000;
        let t = cycle * 3;
        let region = Region::new(GLOBAL);
        let send = Op::Send(decoded.clone());
        let receive = Op::Receive(ReceiveRequest {
            queue: queue.clone(),
            max_messages: BATCH as u16,
            visibility_timeout_ms: None,
            wait_ms: Some(0),
            bind_leases: false,
            with_source: false,
        });
        let built = region.change().allocations as u64;
        let region = Region::new(GLOBAL);
        let sent = shard.submit(t, send, now_ns, WALL_MS);
        recycle(&mut shard, sent, |r| {
            assert!(matches!(r, OpResult::Sent(r) if r.len() == BATCH));
        });
        let after_send = region.change().allocations as u64;
        // The DELETE's receipts, as the decoder hands them over: built
        // outside the counted regions.
        let mut receipts: Vec<Receipt> = Vec::with_capacity(BATCH);
        let region = Region::new(GLOBAL);
        let got = shard.submit(t + 1, receive, now_ns, WALL_MS);
        recycle(&mut shard, got, |r| match r {
            OpResult::Received(m) => receipts.extend(m.iter().map(|m| m.receipt)),
            other => panic!("receive: {other:?}"),
        });
        let after_receive = region.change().allocations as u64;
        assert_eq!(receipts.len(), BATCH);
        let region = Region::new(GLOBAL);
        let delete = Op::Delete(DeleteRequest {
            queue: queue.clone(),
            receipts,
        });
        let built_delete = region.change().allocations as u64;
        let region = Region::new(GLOBAL);
        let deleted = shard.submit(t + 2, delete, now_ns, WALL_MS);
        recycle(&mut shard, deleted, |r| {
            assert!(matches!(r, OpResult::Deleted(r) if r.iter().all(Result::is_ok)));
        });
        let after_delete = region.change().allocations as u64;
        if measure {
            counts.requests += built + built_delete;
            counts.send += after_send;
            counts.receive += after_receive;
            counts.delete += after_delete;
        }
    }
    let per = |n: u64| n as f64 / cycles as f64;
    println!("allocations per request of {BATCH} messages (steady state, {cycles} cycles):");
    println!("  send     {:.3}", per(counts.send));
    println!("  receive  {:.3}", per(counts.receive));
    println!("  delete   {:.3}", per(counts.delete));
    println!(
        "  engine   {:.2} ({:.3} per message)",
        per(counts.send + counts.receive + counts.delete),
        per(counts.send + counts.receive + counts.delete) / BATCH as f64
    );
    println!(
        "  building the 3 requests (the server's decoder): {:.2}",
        per(counts.requests)
    );
}
