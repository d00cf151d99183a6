//! Write-ahead log replay speed: two shards (the server's layout on a
//! two-core machine) take 10,000,000 sends of 100 bytes (half each) with
//! their logs on, each shard's records appended to its log file a batch
//! (1,024 sends) per commit, as the shard loop does a turn at a time; the
//! files are synced and dropped from the page cache (`posix_fadvise`
//! `DONTNEED`). Then, as a start after a crash does: each log opened (read
//! whole, every frame checked) and replayed onto a fresh shard, a thread
//! per shard. Beside it, in the same run, the same files read back
//! plainly after they are dropped from the cache again: the disk's
//! sequential read speed the replay is held to (at least half of it).
//!
//! `cargo run --release -p sluice-benches --bin wal_bench [-- MESSAGES [FOLDER]]`
//! (FOLDER defaults to `wal-bench` in the current folder; it is removed at
//! the end).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::Bytes;
use sluice_benches::{WALL_MS, shards};
use sluice_broker::engine::section::SliceRead;
use sluice_broker::engine::shard::{LoadClock, whole_records_within};
use sluice_broker::engine::{Op, OpResult};
use sluice_broker::wal::file::{COMMIT_RECORDS_MAX, LogFile};
use sluice_protocol::{QueueName, SendEntry, SendRequest};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESSAGES_DEFAULT: usize = 10_000_000;
const SHARDS: u16 = 2;
const BATCH: usize = 1024;
const BODY_BYTES: usize = 100;
const QUEUE: &str = "held";
/// Engine time of the run.
const NOW_NS: u64 = 1 << 52;

/// Drops `path`'s pages from the page cache (after a sync), so that the
/// next read comes from the disk.
fn uncache(path: &Path) {
    let f = std::fs::File::open(path).expect("open the log");
    f.sync_all().expect("sync the log");
    // SAFETY: a valid descriptor, owned by `f` for the call; the advice
    // only drops clean cached pages.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let messages: usize = args
        .next()
        .map_or(MESSAGES_DEFAULT, |a| a.parse().expect("MESSAGES: a count"));
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "wal-bench".to_owned()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make the folder");
    let paths: Vec<PathBuf> = (0..SHARDS)
        .map(|i| dir.join(format!("shard-{i}.log")))
        .collect();
    let queue = QueueName::from_static(QUEUE);
    let mut engines = shards(SHARDS, &queue);
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    let entries: Vec<SendEntry> = (0..BATCH).map(|_| SendEntry::new(body.clone())).collect();
    let fill = Instant::now();
    let per_shard = messages / usize::from(SHARDS);
    let mut records = Vec::new();
    for (i, shard) in engines.iter_mut().enumerate() {
        shard.set_logging(true);
        let (mut log, _) = LogFile::open(&paths[i], 1).expect("open a log");
        let (mut sent, mut ticket) = (0, 1);
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
            records.clear();
            shard.take_log(&mut records);
            let mut at = 0;
            while at < records.len() {
                let k = whole_records_within(&records[at..], COMMIT_RECORDS_MAX);
                log.append(WALL_MS, &records[at..at + k])
                    .expect("append a commit");
                at += k;
            }
            sent += n;
            ticket += 1;
        }
        log.sync().expect("sync the log");
    }
    let held: u64 = engines.iter().map(|s| s.message_count()).sum();
    drop(engines);
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).expect("a log").len())
        .sum();
    let mb = bytes as f64 / 1e6;
    println!(
        "logged {held} sends of {BODY_BYTES} B over {SHARDS} shards in {:.2} s: {bytes} bytes \
         ({mb:.0} MB) of log",
        fill.elapsed().as_secs_f64()
    );

    for p in &paths {
        uncache(p);
    }
    let read = Instant::now();
    let mut read_bytes = 0;
    for p in &paths {
        read_bytes += std::fs::read(p).expect("read a log").len() as u64;
    }
    let read_s = read.elapsed().as_secs_f64();
    assert_eq!(read_bytes, bytes);
    println!(
        "plain read, from the disk: {mb:.0} MB in {read_s:.2} s = {:.0} MB/s",
        mb / read_s
    );

    for p in &paths {
        uncache(p);
    }
    let replay = Instant::now();
    let replayed = replay_all(&paths, &queue);
    let replay_s = replay.elapsed().as_secs_f64();
    assert_eq!(replayed, held);
    println!(
        "replay (open, check every frame, replay), from the disk: {replayed} messages, \
         {mb:.0} MB in {replay_s:.2} s = {:.0} MB/s, {:.2} of the plain read",
        mb / replay_s,
        read_s / replay_s
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens each log and replays it onto a fresh shard, a thread per shard,
/// as the server's start does: the messages replayed.
fn replay_all(paths: &[PathBuf], queue: &QueueName) -> u64 {
    let mut fresh = shards(SHARDS, queue);
    // One thread per shard, as the server's start.
    std::thread::scope(|scope| {
        let handles: Vec<_> = fresh
            .iter_mut()
            .zip(paths)
            .map(|(shard, p)| {
                scope.spawn(move || {
                    let (_file, recovered) = LogFile::open(p, 1).expect("open a log for replay");
                    assert!(recovered.torn.is_none());
                    let commits = recovered.commits();
                    let mut readers: Vec<SliceRead<'_>> = commits
                        .iter()
                        .map(|c| SliceRead::new(c.records, c.records_at))
                        .collect();
                    let clock = LoadClock {
                        now_ns: NOW_NS,
                        wall_ms: WALL_MS,
                        saved_wall_ms: WALL_MS,
                    };
                    let mut pairs: Vec<(&mut SliceRead<'_>, LoadClock)> =
                        readers.iter_mut().map(|r| (r, clock)).collect();
                    shard
                        .replay_commits(&mut pairs)
                        .expect("replay a log")
                        .messages()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a replay"))
            .sum()
    })
}
