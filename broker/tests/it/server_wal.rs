//! The write-ahead log over real processes: `sluice-server --durability
//! always|batch --log-dir PATH` killed with SIGKILL keeps every
//! acknowledged send and delete and every queue change; a graceful stop
//! writes a checkpoint that the next log follows; a torn end is cut and
//! reported; a byte flipped inside the log stops the start with exit 2,
//! naming the byte, the files left as they were.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use sluice_broker::server::config::IoChoice;
use sluice_protocol::{
    AttributeUpdate, ErrorCode, MessageGroupId, Millis, QueueAttributesRequest, QueueKind, Reply,
    Request, SendEntry,
};

use crate::server_process::{BIN, Process, start_args};
use crate::server_snapshot::{clients_on_both_shards, scratch, wait_exit};
use crate::server_util::{Client, name};

fn start(dir: &Path, durability: &str, shards: &str) -> Process {
    start_synced_every(dir, durability, shards, "5ms")
}

fn start_synced_every(dir: &Path, durability: &str, shards: &str, interval: &str) -> Process {
    let args = start_args(
        IoChoice::Epoll,
        &[
            "--shards",
            shards,
            "--durability",
            durability,
            "--log-dir",
            dir.to_str().expect("a UTF-8 path"),
            "--log-sync-interval",
            interval,
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::spawn(r#"exec "$@""#, &args)
}

/// Every message of `queue`, received and deleted (a FIFO group's next
/// message comes once the one before is deleted): body to receive count.
fn drain(c: &mut Client, queue: &str) -> BTreeMap<Vec<u8>, u32> {
    let mut all = BTreeMap::new();
    loop {
        let got = c.receive(queue, 100, Some(60_000), 0);
        if got.is_empty() {
            return all;
        }
        let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
        assert!(c.delete(queue, &receipts).iter().all(Result::is_ok));
        for m in got {
            assert!(
                all.insert(m.body.to_vec(), m.receive_count).is_none(),
                "{queue}: {:?} twice",
                m.body
            );
        }
    }
}

fn bodies(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .collect()
}

/// Sends `bodies` in batches of 50; every one acknowledged.
fn send_all(c: &mut Client, queue: &str, bodies: &[Vec<u8>], fifo: bool) {
    for (n, chunk) in bodies.chunks(50).enumerate() {
        let entries: Vec<SendEntry> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let e = SendEntry::new(Bytes::copy_from_slice(b));
                if fifo {
                    e.group(MessageGroupId::new(&format!("g{}", (n + i) % 7)).unwrap())
                } else {
                    e
                }
            })
            .collect();
        let results = c.send_entries(queue, &entries);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
}

/// Receives up to `n` messages of `queue` and deletes them: their bodies.
fn delete_some(c: &mut Client, queue: &str, n: usize) -> Vec<Vec<u8>> {
    let mut gone = Vec::new();
    while gone.len() < n {
        let max = u16::try_from((n - gone.len()).min(100)).unwrap();
        let got = c.receive(queue, max, Some(60_000), 0);
        assert!(!got.is_empty(), "{queue}: nothing left to delete");
        let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
        assert!(c.delete(queue, &receipts).iter().all(Result::is_ok));
        gone.extend(got.into_iter().map(|m| m.body.to_vec()));
    }
    gone
}

#[test]
fn always_keeps_every_acknowledged_change_through_a_kill_9() {
    let dir = scratch("wal-always");
    let mut server = start(&dir, "always", "2");
    let [mut c0, mut c1] = clients_on_both_shards(server.listen_addr());
    c0.create("work", AttributeUpdate::default());
    c1.create(
        "orders.fifo",
        AttributeUpdate {
            kind: Some(QueueKind::Fifo),
            content_based_dedup: Some(true),
            ..AttributeUpdate::default()
        },
    );
    c0.create("gone", AttributeUpdate::default());
    // Sends from both shards: one of them forwards to the other, whose
    // sync its reply waits for.
    let work = bodies("w", 0..600);
    send_all(&mut c0, "work", &work[..300], false);
    send_all(&mut c1, "work", &work[300..], false);
    let orders = bodies("o", 0..200);
    send_all(&mut c1, "orders.fifo", &orders, true);
    send_all(&mut c0, "gone", &bodies("x", 0..20), false);
    let longer = c0.call(Request::SetQueue(QueueAttributesRequest {
        queue: name("work"),
        attributes: AttributeUpdate {
            visibility_timeout: Some(Millis::new(45_000)),
            ..AttributeUpdate::default()
        },
    }));
    assert!(matches!(longer, Reply::SetQueue), "{longer:?}");
    let deleted = delete_some(&mut c1, "work", 250);
    let deleted_orders = delete_some(&mut c0, "orders.fifo", 40);
    // Leased, not deleted: back after the crash.
    assert_eq!(c0.receive("work", 30, Some(60_000), 0).len(), 30);
    let dropped = c1.call(Request::DeleteQueue {
        queue: name("gone"),
    });
    assert!(matches!(dropped, Reply::DeleteQueue), "{dropped:?}");
    server.kill9();

    let mut server = start(&dir, "always", "2");
    let line = server.wait_for("write-ahead log replayed");
    assert!(line.contains("log_commits="), "{line}");
    let [mut c0, _c1] = clients_on_both_shards(server.listen_addr());
    let left = drain(&mut c0, "work");
    let expect: Vec<Vec<u8>> = work
        .iter()
        .filter(|b| !deleted.contains(b))
        .cloned()
        .collect();
    assert_eq!(left.keys().cloned().collect::<Vec<_>>(), {
        let mut e = expect.clone();
        e.sort();
        e
    });
    let left_orders = drain(&mut c0, "orders.fifo");
    assert_eq!(left_orders.len(), 160);
    assert!(deleted_orders.iter().all(|b| !left_orders.contains_key(b)));
    let info = |c: &mut Client, q: &str| c.call(Request::GetQueue { queue: name(q) });
    assert!(
        matches!(info(&mut c0, "gone"), Reply::Error(e) if e.code == ErrorCode::QueueNotFound),
        "the deleted queue stays deleted"
    );
    match info(&mut c0, "work") {
        Reply::GetQueue(i) => assert_eq!(i.attributes.visibility_timeout, Millis::new(45_000)),
        other => panic!("{other:?}"),
    }
    server.kill9();
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_graceful_stop_writes_a_checkpoint_that_the_next_log_follows() {
    let dir = scratch("wal-checkpoint");
    let mut server = start(&dir, "batch", "1");
    let mut c = server.client();
    c.create("work", AttributeUpdate::default());
    let first = bodies("a", 0..300);
    send_all(&mut c, "work", &first, false);
    let deleted = delete_some(&mut c, "work", 100);
    drop(c);
    server.stop();
    assert_eq!(
        names_in(&dir),
        ["checkpoint-1.snapshot", "log.lock"],
        "the checkpoint replaces generation 0's logs"
    );

    let mut server = start(&dir, "batch", "1");
    let line = server.wait_for("write-ahead log replayed");
    assert!(line.contains("checkpoint_messages=200"), "{line}");
    let mut c = server.client();
    let second = bodies("b", 0..200);
    send_all(&mut c, "work", &second, false);
    let deleted_second = delete_some(&mut c, "work", 150);
    // Past the 5ms sync interval: everything acknowledged is on disk.
    std::thread::sleep(Duration::from_millis(300));
    drop(c);
    server.kill9();

    let mut server = start(&dir, "batch", "1");
    let mut c = server.client();
    let left = drain(&mut c, "work");
    let mut expect: Vec<Vec<u8>> = first
        .iter()
        .chain(&second)
        .filter(|b| !deleted.contains(b) && !deleted_second.contains(b))
        .cloned()
        .collect();
    expect.sort();
    assert_eq!(left.into_keys().collect::<Vec<_>>(), expect);
    server.kill9();
}

/// Starts on `dir` expecting a refusal: exit 2, `expect` and a byte offset
/// in the error, every file as it was.
fn refused(dir: &Path, expect: &str) {
    let before: Vec<(String, Vec<u8>)> = names_in(dir)
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect();
    let args = start_args(
        IoChoice::Epoll,
        &[
            "--shards",
            "1",
            "--durability",
            "always",
            "--log-dir",
            dir.to_str().unwrap(),
        ],
    );
    let mut child = Command::new(BIN)
        .args(&args)
        .env_remove("SLUICE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice-server");
    let status = wait_exit(&mut child);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains(expect), "expected `{expect}` in:\n{err}");
    assert!(err.contains("byte"), "no offset in:\n{err}");
    for (n, bytes) in before {
        if n != "log.lock" {
            assert_eq!(std::fs::read(dir.join(&n)).unwrap(), bytes, "{n} changed");
        }
    }
}

#[test]
fn a_torn_end_is_cut_and_reported_and_a_flipped_byte_stops_the_start() {
    let dir = scratch("wal-torn");
    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    c.create("work", AttributeUpdate::default());
    let sent = bodies("t", 0..250);
    send_all(&mut c, "work", &sent, false);
    drop(c);
    server.kill9();
    let log = dir.join("shard-0-0.log");
    let whole = std::fs::read(&log).unwrap();

    // A commit cut short by the crash: half a frame after the last.
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[16..40]);
    std::fs::write(&log, &torn).unwrap();
    let mut server = start(&dir, "always", "1");
    let line = server.wait_for("cut short by a crash");
    assert!(line.contains(&format!("byte={}", whole.len())), "{line}");
    // What the replay rebuilt is the next generation's checkpoint.
    server.wait_for("the replayed state is the new checkpoint");
    let mut c = server.client();
    assert_eq!(c.stats("work").visible, 250);
    send_all(&mut c, "work", &bodies("u", 0..100), false);
    drop(c);
    server.kill9();
    assert!(
        !log.exists(),
        "the replayed log is removed once checkpointed"
    );
    assert!(dir.join("checkpoint-1.snapshot").exists());

    // A byte flipped in the first of the next log's two commits:
    // corruption.
    let log = dir.join("shard-0-1.log");
    let mut flipped = std::fs::read(&log).unwrap();
    flipped[100] ^= 0x40;
    std::fs::write(&log, &flipped).unwrap();
    refused(&dir, "shard-0-1.log");
}

/// Under `batch` a kill takes at most what was acknowledged within the
/// last sync interval: sends acknowledged more than an interval before it
/// are all there after it, those within it may be gone (counted here).
#[test]
fn batch_loses_at_most_the_last_interval_to_a_kill_9() {
    let dir = scratch("wal-batch-window");
    let mut server = start_synced_every(&dir, "batch", "1", "500ms");
    let mut c = server.client();
    c.create("work", AttributeUpdate::default());
    let old = bodies("old", 0..300);
    send_all(&mut c, "work", &old, false);
    // Two intervals: the loop has written and synced them.
    std::thread::sleep(Duration::from_millis(1_000));
    let recent = bodies("recent", 0..300);
    send_all(&mut c, "work", &recent, false);
    drop(c);
    server.kill9();

    let mut server = start_synced_every(&dir, "batch", "1", "500ms");
    let mut c = server.client();
    let left = drain(&mut c, "work");
    assert!(
        old.iter().all(|b| left.contains_key(b)),
        "a send older than the interval lost"
    );
    let kept = recent.iter().filter(|b| left.contains_key(*b)).count();
    eprintln!(
        "batch: of {} sends acknowledged within the interval before the kill, {} lost",
        recent.len(),
        recent.len() - kept
    );
    assert_eq!(left.len(), old.len() + kept, "only this test's messages");
    server.kill9();
}

#[test]
fn a_log_replayed_and_written_on_survives_a_second_crash() {
    let dir = scratch("wal-twice");
    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    c.create("work", AttributeUpdate::default());
    let first = bodies("a", 0..400);
    send_all(&mut c, "work", &first, false);
    let mut deleted = delete_some(&mut c, "work", 300);
    drop(c);
    server.kill9();

    // The second run reuses the slots the first one freed, and adds
    // new ones; its records follow the first run's in the same log.
    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    let second = bodies("b", 0..500);
    send_all(&mut c, "work", &second, false);
    deleted.extend(delete_some(&mut c, "work", 350));
    drop(c);
    server.kill9();

    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    let left = drain(&mut c, "work");
    let mut expect: Vec<Vec<u8>> = first
        .iter()
        .chain(&second)
        .filter(|b| !deleted.contains(b))
        .cloned()
        .collect();
    expect.sort();
    assert_eq!(left.into_keys().collect::<Vec<_>>(), expect);
    server.kill9();
}

#[test]
fn a_queue_deleted_after_the_checkpoint_goes_with_its_messages() {
    let dir = scratch("wal-deleted");
    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    for q in ["old", "kept"] {
        c.create(q, AttributeUpdate::default());
        send_all(&mut c, q, &bodies(q, 0..100), false);
    }
    drop(c);
    server.stop();

    // After the checkpoint: some of old's messages deleted and received,
    // then old deleted, made again, and sent to; a new queue used.
    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    delete_some(&mut c, "old", 10);
    assert_eq!(c.receive("old", 5, Some(60_000), 0).len(), 5);
    let dropped = c.call(Request::DeleteQueue { queue: name("old") });
    assert!(matches!(dropped, Reply::DeleteQueue), "{dropped:?}");
    c.create("old", AttributeUpdate::default());
    send_all(&mut c, "old", &bodies("again", 0..7), false);
    c.create("new", AttributeUpdate::default());
    send_all(&mut c, "new", &bodies("n", 0..3), false);
    let kept_gone = delete_some(&mut c, "kept", 20);
    drop(c);
    server.kill9();

    let mut server = start(&dir, "always", "1");
    let mut c = server.client();
    let old = drain(&mut c, "old");
    assert_eq!(old.into_keys().collect::<Vec<_>>(), {
        let mut b = bodies("again", 0..7);
        b.sort();
        b
    });
    assert_eq!(drain(&mut c, "new").len(), 3);
    let kept = drain(&mut c, "kept");
    assert_eq!(kept.len(), 80);
    assert!(kept_gone.iter().all(|b| !kept.contains_key(b)));
    server.kill9();
}

crate::both_backends!(the_log_is_written_synced_and_measured);

fn the_log_is_written_synced_and_measured(io: IoChoice) {
    let dir = scratch(&format!("wal-metrics-{io}"));
    let Some(server) = crate::server_util::start(
        io,
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--durability",
            "always",
            "--log-dir",
            dir.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let mut c = server.client();
    c.create("work", AttributeUpdate::default());
    send_all(&mut c, "work", &bodies("m", 0..120), false);
    delete_some(&mut c, "work", 30);
    let addr = server.handle().metrics_addr().expect("metrics on");
    let (status, body) = crate::server_metrics::http_get(addr, "/metrics");
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    // Three sends of 50, 50 and 20 and at least one receive and delete:
    // each a turn of its own, committed and synced.
    assert!(value("sluice_log_commits_total{") >= 5.0, "{body}");
    assert!(value("sluice_log_syncs_total{") >= 5.0, "{body}");
    // A put record is at least 43 bytes.
    assert!(value("sluice_log_bytes_total{") > 120.0 * 43.0, "{body}");
    assert!(value("sluice_log_sync_seconds_count") >= 5.0, "{body}");
    assert_eq!(value("sluice_log_failures_total{"), 0.0, "{body}");
    assert!(
        body.contains("sluice_log_replay_seconds{shard=\"0\"}"),
        "{body}"
    );
}
