//! Snapshot save and load speed: fills two shards (the server's layout on a
//! two-core machine) with 10,000,000 messages of 100 bytes (half on each),
//! saves them to a snapshot file the way a graceful shutdown does (one
//! thread per shard, the sections' whole blocks written with `O_DIRECT`
//! where the file system allows it, `fsync`, rename, directory `fsync`),
//! then loads the file into fresh shards the way a start does (one thread
//! per shard), and reports the time and MB/s of each. Compare with the
//! disk's own sequential write speed on the same filesystem
//! (`dd if=/dev/zero of=FILE bs=1M count=2048 conv=fdatasync`).
//!
//! The save's direct writes leave the file out of the page cache, so the
//! load reads it from the disk (or whatever cache the disk has below the
//! guest); written to tmpfs, where writes are buffered, the load reads it
//! from memory.
//!
//! `cargo run --release -p sluice-benches --bin snapshot_bench [-- MESSAGES [FILE]]`
//! (FILE defaults to `snapshot-bench.snapshot` in the current folder; it is
//! removed at the end).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sluice_benches::{WALL_MS, shards};
use sluice_broker::engine::mesh::doorbell::Wake;
use sluice_broker::engine::shard::LoadClock;
use sluice_broker::engine::{Op, OpResult, RegistryConfig};
use sluice_broker::snapshot::{self, Source};
use sluice_protocol::{QueueName, SendEntry, SendRequest};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESSAGES_DEFAULT: usize = 10_000_000;
const SHARDS: u16 = 2;
const BATCH: usize = 1024;
const BODY_BYTES: usize = 100;
const QUEUE: &str = "held";
/// Engine time of the run: past any retention, as the server's clock is.
const NOW_NS: u64 = 1 << 52;

use sluice_broker::engine::mesh::doorbell::NoWake;

fn main() {
    let mut args = std::env::args().skip(1);
    let messages: usize = args
        .next()
        .map_or(MESSAGES_DEFAULT, |a| a.parse().expect("MESSAGES: a count"));
    let path = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "snapshot-bench.snapshot".to_owned()),
    );
    let queue = QueueName::from_static(QUEUE);
    let mut engines = shards(SHARDS, &queue);
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    let entries: Vec<SendEntry> = (0..BATCH).map(|_| SendEntry::new(body.clone())).collect();
    let fill = Instant::now();
    let per_shard = messages / usize::from(SHARDS);
    for (i, shard) in engines.iter_mut().enumerate() {
        let mut sent = 0;
        let mut ticket = 1;
        while sent < per_shard {
            let n = BATCH.min(per_shard - sent);
            let req = SendRequest::new(queue.clone(), &entries[..n]).expect("a batch");
            match shard.submit(ticket, Op::Send(req), NOW_NS, WALL_MS) {
                Some(OpResult::Sent(r)) => {
                    assert!(r.iter().all(Result::is_ok), "shard {i}: a send failed");
                    shard.recycle(OpResult::Sent(r));
                }
                other => panic!("send: {other:?}"),
            }
            sent += n;
            ticket += 1;
        }
    }
    let held: u64 = engines.iter().map(|s| s.message_count()).sum();
    println!(
        "filled {held} messages of {BODY_BYTES} B over {SHARDS} shards in {:.2} s",
        fill.elapsed().as_secs_f64()
    );

    let registry = engines[0].registry().clone();
    let save = Instant::now();
    let report =
        snapshot::save(&path, &registry, &mut engines, NOW_NS, WALL_MS).expect("save the snapshot");
    let save_s = save.elapsed().as_secs_f64();
    let mb = report.bytes as f64 / 1e6;
    println!(
        "save: {} bytes ({mb:.0} MB) in {save_s:.2} s = {:.0} MB/s (fsync and rename included: \
         sizing {:.2} s, writing {:.2} s, final fsync and rename {:.2} s)",
        report.bytes,
        mb / save_s,
        report.sizing.as_secs_f64(),
        report.writing.as_secs_f64(),
        report.syncing.as_secs_f64()
    );
    drop(engines);
    drop(registry);

    let load = Instant::now();
    let opened = snapshot::open(Source::File(&path)).expect("open the snapshot");
    let config = RegistryConfig {
        shards: SHARDS,
        seed: 9,
        ..RegistryConfig::default()
    };
    let registry = Arc::new(opened.registry(config).expect("the registry section"));
    let wakers = (0..SHARDS)
        .map(|_| Box::new(NoWake) as Box<dyn Wake>)
        .collect();
    let mut fresh = snapshot::fresh_shards(&registry, 1024, wakers, 9, NOW_NS, WALL_MS);
    let clock = LoadClock {
        now_ns: NOW_NS,
        wall_ms: WALL_MS,
        saved_wall_ms: WALL_MS,
    };
    let loaded = snapshot::load_shards(Source::File(&path), &opened, &mut fresh, clock)
        .expect("load the snapshot");
    let load_s = load.elapsed().as_secs_f64();
    assert_eq!(loaded.messages(), held);
    println!(
        "load: {} messages ({mb:.0} MB) in {load_s:.2} s = {:.0} MB/s",
        loaded.messages(),
        mb / load_s
    );
    let _ = std::fs::remove_file(&path);
}
