//! Memory per held message: RSS growth for 10,000,000 messages
//! of 100 bytes sent to one shard and never received, with mimalloc as the
//! global allocator (as in the server). Prints the growth per message minus
//! the 100 body bytes (goal: below 64), and the sizes of the per-message
//! structures, to tell where the bytes go. Then every message is received
//! (leased for 12 hours, batches of 1,024) and the growth is printed again:
//! the cost of a message in flight.
//!
//! `cargo run --release -p sluice-benches --bin engine_memory [-- MESSAGES]`

use bytes::Bytes;
use sluice_benches::{WALL_MS, shards};
use sluice_broker::engine::shard::footprint;
use sluice_broker::engine::{Op, OpResult};
use sluice_protocol::{QueueName, ReceiveRequest, SendEntry, SendRequest};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESSAGES_DEFAULT: usize = 10_000_000;
const BATCH: usize = 1024;
const BODY_BYTES: usize = 100;
const QUEUE: &str = "held";
/// The leases' length when every message is received: none ends during the
/// run.
const LEASE_MS: u32 = 12 * 3_600 * 1_000;

/// The peak resident set size in bytes (`VmHWM` of `/proc/self/status`).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM in kB")
        * 1024
}

/// Resident set size in bytes, from `/proc/self/statm` (second field, in
/// pages).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm's resident field");
    // Linux pages are 4 KiB on the machines this runs on; statm counts them.
    pages * 4096
}

fn main() {
    let messages = std::env::args()
        .nth(1)
        .map_or(MESSAGES_DEFAULT, |a| a.parse().expect("MESSAGES: a count"));
    let queue = QueueName::from_static(QUEUE);
    let mut shard = shards(1, &queue).pop().expect("one shard");
    // The bodies arrive in a receive buffer (the batch's, in wire form) that
    // goes back to the kernel: the engine copies each into its own storage.
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    let request = |n: usize| {
        let entries: Vec<SendEntry> = (0..n).map(|_| SendEntry::new(body.clone())).collect();
        SendRequest::new(queue.clone(), &entries).expect("a batch that encodes")
    };
    let full = request(BATCH);
    let batch = |i: usize| {
        Op::Send(if messages - i >= BATCH {
            full.clone()
        } else {
            request(messages - i)
        })
    };
    // Warm up allocator and engine with one batch sent and then held too.
    let before = rss_bytes();
    let mut now_ns = 1_000_000_000;
    let mut sent = 0;
    while sent < messages {
        now_ns += 1_000;
        match shard.submit(sent as u64, batch(sent), now_ns, WALL_MS) {
            Some(OpResult::Sent(r)) => {
                assert!(r.iter().all(Result::is_ok), "every send accepted");
                sent += r.len();
            }
            other => panic!("send: {other:?}"),
        }
    }
    let after = rss_bytes();
    let stats = shard.local_stats(QUEUE).expect("queue");
    assert_eq!(stats.visible, messages as u64);
    let per_message = (after - before) as f64 / messages as f64;
    println!("messages held:           {messages}");
    println!("body bytes:              {BODY_BYTES}");
    println!("RSS before / after:      {before} / {after} bytes");
    println!("RSS growth per message:  {per_message:.1} bytes");
    println!("peak RSS:                {} bytes", peak_rss_bytes());
    println!(
        "overhead per message:    {:.1} bytes (goal: below 64)",
        per_message - BODY_BYTES as f64
    );
    println!("per-message structures (bytes):");
    for (name, bytes) in footprint() {
        println!("  {name:<34} {bytes}");
    }
    // Every message leased, as a consumer group's pending entries are.
    let mut leased = 0;
    let mut ticket = messages as u64;
    while leased < messages {
        ticket += 1;
        let op = Op::Receive(ReceiveRequest {
            queue: queue.clone(),
            max_messages: BATCH as u16,
            visibility_timeout_ms: Some(LEASE_MS),
            wait_ms: Some(0),
            bind_leases: false,
            with_source: false,
        });
        match shard.submit(ticket, op, now_ns, WALL_MS) {
            Some(OpResult::Received(m)) if !m.is_empty() => {
                leased += m.len();
                shard.recycle(OpResult::Received(m));
            }
            other => panic!("receive: {other:?}"),
        }
    }
    let in_flight = rss_bytes();
    let per_leased = (in_flight - before) as f64 / messages as f64;
    println!("every message leased:    RSS {in_flight} bytes");
    println!(
        "in flight, per message:  {per_leased:.1} bytes, {:.1} over the body",
        per_leased - BODY_BYTES as f64
    );
    drop(shard);
}
