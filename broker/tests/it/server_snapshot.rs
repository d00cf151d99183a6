//! Snapshots over real processes: `sluice-server --snapshot PATH` saves on
//! SIGTERM and loads at the next start; a damaged file stops the start with
//! exit 2 and is left as it was; `--check-snapshot` reports on a file.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_broker::server::config::IoChoice;
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{
    AttributeUpdate, Backoff, ChangeVisibilityRequest, ErrorCode, MessageAttributes, QueueStats,
    Receipt, RedrivePolicy, Reply, Request, SendEntry, VisibilityChange,
};

use crate::server_process::{BIN, Process, field, start_args};
use crate::server_util::{Client, name};

/// Messages in the big test, over the queues below.
const MESSAGES: usize = 100_000;
const BATCH: usize = 1000;
/// Queues that take the bulk; `poison` feeds `dlq`; `later` holds delayed
/// messages.
const BULK: [&str; 4] = ["q0", "q1", "q2", "q3"];
const ALL: [&str; 7] = ["dlq", "q0", "q1", "q2", "q3", "poison", "later"];
/// A delay that outlasts the restart, and ends within the test.
const LATER_DELAY_MS: u32 = 8_000;
/// The short leases', which end while the server is stopped.
const SHORT_LEASE_MS: u32 = 4_000;
/// Far above what any step here needs.
const PATIENCE: Duration = Duration::from_secs(60);

/// A fresh folder for one test's files.
pub(crate) fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-snap-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch folder");
    dir
}

fn start(snapshot: &Path) -> Process {
    let args = start_args(
        IoChoice::Epoll,
        &[
            "--shards",
            "2",
            "--snapshot",
            snapshot.to_str().expect("a UTF-8 path"),
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::spawn(r#"exec "$@""#, &args)
}

/// One connection on each shard (the kernel spreads connections over the
/// shards' listeners by a hash, so a few tries find both).
pub(crate) fn clients_on_both_shards(addr: std::net::SocketAddr) -> [Client; 2] {
    let mut found: [Option<Client>; 2] = [None, None];
    for _ in 0..64 {
        let mut c = Client::connect(addr);
        let h = c.hello(b"").expect("HELLO");
        assert_eq!(h.shards, 2);
        let slot = &mut found[usize::from(h.shard)];
        if slot.is_none() {
            *slot = Some(c);
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    let [a, b] = found;
    [
        a.expect("a connection on shard 0"),
        b.expect("a connection on shard 1"),
    ]
}

/// What the test knows of a message: queue, body, attributes, receive
/// count and delivery number.
#[derive(Clone, Debug, PartialEq)]
struct Known {
    queue: &'static str,
    body: Bytes,
    attributes: MessageAttributes,
    receive_count: u32,
    delivery: u64,
}

fn change_visibility(c: &mut Client, queue: &str, receipts: &[Receipt], ms: u32) {
    for chunk in receipts.chunks(BATCH) {
        let req = Request::ChangeVisibility(ChangeVisibilityRequest {
            queue: name(queue),
            entries: chunk
                .iter()
                .map(|&receipt| VisibilityChange {
                    receipt,
                    visibility_timeout_ms: ms,
                })
                .collect(),
        });
        match c.call(req) {
            Reply::ChangeVisibility { results } => {
                assert!(results.iter().all(Result::is_ok), "{results:?}");
            }
            other => panic!("CHANGE_VISIBILITY answered {other:?}"),
        }
    }
}

/// Receives every visible message of `queue` (leased for ten minutes).
fn drain(c: &mut Client, queue: &str) -> Vec<sluice_protocol::ReceivedMessage> {
    let mut out = Vec::new();
    for _ in 0..(MESSAGES / 100) {
        let got = c.receive(queue, 1000, Some(600_000), 0);
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
    panic!("{queue} never ran dry");
}

/// Sends `count` plain messages to `queue`, noting them in `known`.
fn special_send(
    known: &mut HashMap<u128, Known>,
    c: &mut Client,
    queue: &'static str,
    count: usize,
    delay: Option<u32>,
) {
    let entries: Vec<SendEntry> = (0..count)
        .map(|i| {
            let mut e = SendEntry::new(Bytes::from(format!("{queue} {i}")));
            e.delay = delay.map(Millis::new);
            e
        })
        .collect();
    for (e, r) in entries.iter().zip(c.send_entries(queue, &entries)) {
        known.insert(
            r.expect("send accepted").id.0,
            Known {
                queue,
                body: e.body.clone(),
                attributes: MessageAttributes::new(),
                receive_count: 0,
                delivery: 0,
            },
        );
    }
}

/// Notes a delivery of `m`.
fn note(known: &mut HashMap<u128, Known>, m: &sluice_protocol::ReceivedMessage) {
    let k = known.get_mut(&m.id.0).expect("a message the test sent");
    k.receive_count = m.receive_count;
    k.delivery = m.delivery();
}

pub(crate) fn wait_exit(p: &mut std::process::Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = p.try_wait().expect("wait for the server") {
            return status;
        }
        assert!(Instant::now() < deadline, "sluice-server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_restart_with_a_snapshot_keeps_every_queue_and_message() {
    let dir = scratch("restart");
    let path = dir.join("sluice.snapshot");
    let mut server = start(&path);
    let addr = server.listen_addr();
    let [mut c0, mut c1] = clients_on_both_shards(addr);

    c0.create("dlq", AttributeUpdate::default());
    c0.create(
        "q0",
        AttributeUpdate {
            dedup_window: Some(Millis::new(3_600_000)),
            ..Default::default()
        },
    );
    for q in ["q1", "q2", "q3"] {
        c0.create(
            q,
            AttributeUpdate {
                backoff: (q == "q3")
                    .then_some(Backoff {
                        base: Millis::new(100),
                        max: Millis::new(1000),
                    })
                    .into(),
                ..Default::default()
            },
        );
    }
    c0.create(
        "poison",
        AttributeUpdate {
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receives: 1,
            }),
            ..Default::default()
        },
    );
    c0.create("later", AttributeUpdate::default());

    // 100,000 messages: the bulk over four queues from both shards, with
    // attributes on some and dedup keys on q0's; then a few special ones.
    let mut known: HashMap<u128, Known> = HashMap::new();
    let mut dedup_ids: HashMap<String, u128> = HashMap::new();
    let special = 50 + 40;
    let bulk = MESSAGES - special;
    let mut sent = 0;
    let mut batch_no = 0;
    while sent < bulk {
        let queue = BULK[batch_no % BULK.len()];
        let n = BATCH.min(bulk - sent);
        let entries: Vec<SendEntry> = (sent..sent + n)
            .map(|i| {
                let mut e =
                    SendEntry::new(Bytes::from(format!("message {i} {}", "x".repeat(i % 97))));
                if i % 7 == 0 {
                    e.attributes = MessageAttributes::from_pairs([
                        ("n", i.to_string().as_str()),
                        ("kind", "seven"),
                    ])
                    .unwrap();
                }
                if queue == "q0" && i % 10 == 0 {
                    e.dedup_key = Some(Bytes::from(format!("key-{i}")));
                }
                e
            })
            .collect();
        let client = if batch_no % 2 == 0 { &mut c0 } else { &mut c1 };
        let results = client.send_entries(queue, &entries);
        for (e, r) in entries.iter().zip(results) {
            let r = r.expect("send accepted");
            assert!(!r.duplicate);
            if let Some(k) = &e.dedup_key {
                dedup_ids.insert(String::from_utf8(k.to_vec()).unwrap(), r.id.0);
            }
            known.insert(
                r.id.0,
                Known {
                    queue,
                    body: e.body.clone(),
                    attributes: e.attributes.clone(),
                    receive_count: 0,
                    delivery: 0,
                },
            );
        }
        sent += n;
        batch_no += 1;
    }
    assert!(!dedup_ids.is_empty());
    special_send(&mut known, &mut c0, "poison", 50, None);

    // Dead-lettered: received once (max_receives 1), the lease runs out,
    // the next receive moves them to dlq.
    let poisoned = c0.receive("poison", 100, Some(500), 0);
    assert_eq!(poisoned.len(), 50);
    for m in &poisoned {
        note(&mut known, m);
    }
    std::thread::sleep(Duration::from_millis(700));
    assert!(c1.receive("poison", 100, None, 0).is_empty());
    for m in &poisoned {
        known.get_mut(&m.id.0).unwrap().queue = "dlq";
    }
    // Leased for ten minutes: their receipts are used after the restart.
    let mut long = Vec::new();
    for c in [&mut c0, &mut c1] {
        long.extend(c.receive("q1", 250, Some(600_000), 0));
    }
    assert_eq!(long.len(), 500);
    // Leased for four seconds (far more than the stop and the save take):
    // the lease ends while the server is stopped.
    let mut short = Vec::new();
    for c in [&mut c0, &mut c1] {
        short.extend(c.receive("q2", 150, Some(SHORT_LEASE_MS), 0));
    }
    assert_eq!(short.len(), 300);
    for m in long.iter().chain(&short) {
        note(&mut known, m);
    }
    // Delayed past the restart.
    special_send(&mut known, &mut c1, "later", 40, Some(LATER_DELAY_MS));
    assert_eq!(known.len(), MESSAGES);

    let before: Vec<QueueStats> = ALL.iter().map(|q| c0.stats(q)).collect();
    drop((c0, c1));
    let stop_at = Instant::now();
    server.stop();
    let mode = std::fs::metadata(&path)
        .expect("a snapshot was written")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the snapshot holds the receipt key");
    // Let the short leases end while the server is down.
    std::thread::sleep(
        Duration::from_millis(u64::from(SHORT_LEASE_MS) + 500).saturating_sub(stop_at.elapsed()),
    );

    let mut server = start(&path);
    let addr = server.listen_addr();
    let loaded = server.wait_for("snapshot loaded");
    assert_eq!(
        field(&loaded, "messages="),
        MESSAGES.to_string(),
        "{loaded}"
    );
    assert_eq!(
        field(&loaded, "leases_ended_while_stopped="),
        "300",
        "{loaded}"
    );
    assert!(!path.exists(), "the loaded file is moved aside");
    let aside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("sluice.snapshot.loaded-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    let [mut c0, mut c1] = clients_on_both_shards(addr);

    // Per-queue stats: equal, but for what the time while stopped did: the
    // short leases of q2 expired (counted as redelivered, visible
    // again), and `later`'s delay may have run out.
    for (q, b) in ALL.iter().zip(&before) {
        let mut a = c0.stats(q);
        let mut b = *b;
        assert!(a.oldest_age_ms >= b.oldest_age_ms, "{q}");
        a.oldest_age_ms = 0;
        b.oldest_age_ms = 0;
        if *q == "q2" {
            b.in_flight -= 300;
            b.visible += 300;
            b.redelivered += 300;
        }
        if *q == "later" {
            assert_eq!(a.delayed + a.visible, b.delayed + b.visible);
            a.visible = b.visible;
            a.delayed = b.delayed;
        }
        assert_eq!(a, b, "queue {q}");
    }

    // A duplicate within the window is still refused, with the first id.
    let (key, id) = dedup_ids.iter().next().unwrap();
    let mut dup = SendEntry::new(Bytes::from_static(b"again"));
    dup.dedup_key = Some(Bytes::from(key.clone()));
    let r = c1.send_entries("q0", &[dup])[0].unwrap();
    assert!(r.duplicate, "{key}");
    assert_eq!(r.id.0, *id);

    // A receipt from before the restart deletes its message; the others
    // release theirs, so that every message can be received below.
    assert_eq!(c1.delete("q1", &[long[0].receipt]), vec![Ok(())]);
    known.remove(&long[0].id.0);
    assert_eq!(
        c1.delete("q1", &[long[0].receipt]),
        vec![Err(ErrorCode::Gone)]
    );
    let receipts: Vec<Receipt> = long[1..].iter().map(|m| m.receipt).collect();
    change_visibility(&mut c0, "q1", &receipts, 0);

    // Every message, received out: equal by id, body, attributes, receive
    // count and delivery number (each one more than before: this receive).
    let mut got = Vec::new();
    for q in ALL {
        if q == "later" {
            continue;
        }
        got.extend(drain(&mut c0, q).into_iter().map(|m| (q, m)));
    }
    let deadline = Instant::now() + Duration::from_millis(u64::from(LATER_DELAY_MS)) + PATIENCE;
    loop {
        got.extend(drain(&mut c1, "later").into_iter().map(|m| ("later", m)));
        if got.iter().filter(|(q, _)| *q == "later").count() == 40 {
            break;
        }
        assert!(Instant::now() < deadline, "delayed messages never came");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(got.len(), known.len());
    for (queue, m) in got {
        let k = known
            .remove(&m.id.0)
            .unwrap_or_else(|| panic!("{queue}: {:?} received twice or unknown", m.id));
        assert_eq!(k.queue, queue, "{:?}", m.id);
        assert_eq!(k.body, m.body, "{:?}", m.id);
        assert_eq!(k.attributes, m.attributes, "{:?}", m.id);
        assert_eq!(
            m.receive_count,
            k.receive_count + 1,
            "{:?} in {queue}",
            m.id
        );
        assert_eq!(m.delivery(), k.delivery + 1, "{:?} in {queue}", m.id);
    }
    assert!(known.is_empty());
    drop((c0, c1));

    // The second graceful stop writes a new file, and it checks out.
    server.stop();
    let out = Command::new(BIN)
        .arg("--check-snapshot")
        .arg(&path)
        .output()
        .expect("run --check-snapshot");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("queues: 7"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small snapshot of two shards, made by the engine.
fn small_snapshot() -> Vec<u8> {
    snapshot_of(2)
}

/// A small snapshot of `shards` shards, made by the engine: queue `jobs`
/// with 20 messages on each shard.
pub(crate) fn snapshot_of(shards: u16) -> Vec<u8> {
    use sluice_broker::engine::{Cluster, Op, RegistryConfig};
    let mut c = Cluster::new(RegistryConfig {
        shards,
        seed: 3,
        ..Default::default()
    });
    let create = Op::CreateQueue(sluice_protocol::QueueAttributesRequest {
        queue: name("jobs"),
        attributes: AttributeUpdate::default(),
    });
    let _ = c.call(0, create);
    for shard in 0..shards {
        let entries: Vec<SendEntry> = (0..20)
            .map(|i| SendEntry::new(Bytes::from(format!("job {shard}-{i}"))))
            .collect();
        let req = sluice_protocol::SendRequest::new(name("jobs"), &entries).unwrap();
        let _ = c.call(usize::from(shard), Op::Send(req));
    }
    c.shutdown();
    c.snapshot()
}

/// Starts the server on `file` (2 shards); it must refuse with exit 2, an
/// error that names the problem, and leave the file as it was. So must
/// `--check-snapshot`.
fn refused(dir: &Path, label: &str, bytes: &[u8], expect: &str) {
    let path = dir.join(format!("{label}.snapshot"));
    std::fs::write(&path, bytes).unwrap();
    let args = start_args(
        IoChoice::Epoll,
        &["--shards", "2", "--snapshot", path.to_str().unwrap()],
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
    assert_eq!(status.code(), Some(2), "{label}: {err}");
    assert!(
        err.contains(expect),
        "{label}: expected `{expect}` in:\n{err}"
    );
    assert!(err.contains("byte"), "{label}: no offset in:\n{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "{label}: the file changed"
    );
    let out = Command::new(BIN)
        .arg("--check-snapshot")
        .arg(&path)
        .output()
        .expect("run --check-snapshot");
    assert_eq!(out.status.code(), Some(2), "{label}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(expect),
        "{label}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "{label}: the file changed"
    );
}

#[test]
fn a_damaged_snapshot_stops_the_start_with_exit_2_and_stays() {
    let dir = scratch("damaged");
    let good = small_snapshot();
    // The sound file loads with the same command (and is moved aside).
    let ok = dir.join("good.snapshot");
    std::fs::write(&ok, &good).unwrap();
    let out = Command::new(BIN)
        .arg("--check-snapshot")
        .arg(&ok)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("messages: 40"));

    refused(&dir, "truncated-header", &good[..40], "truncated at byte");
    refused(
        &dir,
        "truncated",
        &good[..good.len() - 10],
        "truncated at byte",
    );
    let mut flipped = good.clone();
    let last = flipped.len() - 5;
    flipped[last] ^= 0x10;
    refused(&dir, "bit-flip", &flipped, "CRC32C");
    let mut header_flip = good.clone();
    header_flip[50] ^= 1;
    refused(&dir, "header-bit-flip", &header_flip, "corrupt header");
    let mut version = good.clone();
    version[8..12].copy_from_slice(&7u32.to_le_bytes());
    refused(&dir, "version", &version, "version 7");
    let mut limits = good.clone();
    limits[20..24].copy_from_slice(&1234u32.to_le_bytes());
    // Fix the header's checksum so the limit itself is what is refused.
    let header_len = u32::from_le_bytes(limits[12..16].try_into().unwrap()) as usize;
    let crc = sluice_broker::snapshot::crc32c::crc32c(&limits[..header_len - 4]);
    limits[header_len - 4..header_len].copy_from_slice(&crc.to_le_bytes());
    refused(&dir, "limits", &limits, "FRAME_BYTES_MAX_LIMIT = 1234");
    refused(
        &dir,
        "not-a-snapshot",
        b"hello, world: not a snapshot at all, no",
        "not a sluice snapshot",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_snapshot_for_other_shards_or_memory_is_refused_clearly() {
    let dir = scratch("fit");
    let good = small_snapshot();
    let path = dir.join("fit.snapshot");
    std::fs::write(&path, &good).unwrap();
    for (extra, expect) in [
        (["--shards", "1"], "start it with --shards 2"),
        (["--memory-max", "1KiB"], "--memory-max"),
    ] {
        let mut args = start_args(IoChoice::Epoll, &["--snapshot", path.to_str().unwrap()]);
        if extra[0] == "--memory-max" {
            args.extend(["--shards".to_owned(), "2".to_owned()]);
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let out = Command::new(BIN)
            .args(&args)
            .env_remove("SLUICE_CONFIG")
            .stdin(Stdio::null())
            .output()
            .expect("run sluice-server");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expect), "expected `{expect}` in:\n{err}");
        assert_eq!(std::fs::read(&path).unwrap(), good);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_start_that_fails_after_loading_leaves_the_file() {
    let dir = scratch("port-in-use");
    let good = small_snapshot();
    let path = dir.join("busy.snapshot");
    std::fs::write(&path, &good).unwrap();
    // A listener without SO_REUSEPORT: the server cannot bind beside it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut args = start_args(
        IoChoice::Epoll,
        &["--shards", "2", "--snapshot", path.to_str().unwrap()],
    );
    let at = args
        .iter()
        .position(|a| a == "--listen")
        .expect("start_args sets --listen");
    args[at + 1] = addr;
    let out = Command::new(BIN)
        .args(&args)
        .env_remove("SLUICE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run sluice-server");
    let err = String::from_utf8_lossy(&out.stderr);
    // A port another process listens on is found before anything is
    // loaded (exit 2, as for a bad setting); the file stays either way.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("another process listens there"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), good, "the file stays: {err}");
    drop(taken);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_snapshot_path_that_cannot_be_written_is_refused_at_start() {
    let args = start_args(
        IoChoice::Epoll,
        &["--snapshot", "/nonexistent-sluice-folder/sluice.snapshot"],
    );
    let out = Command::new(BIN)
        .args(&args)
        .env_remove("SLUICE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run sluice-server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot write a snapshot at"), "{err}");
}

/// Leases bound to a connection (RECEIVE with the bind flag) are released
/// when the shutdown drain closes the connection, before the save: they
/// come back visible, their deliveries counted, and unbound leases of the
/// same connection stay leased.
#[test]
fn bound_leases_are_released_before_the_save() {
    let dir = scratch("bound");
    let path = dir.join("bound.snapshot");
    let mut server = start(&path);
    let addr = server.listen_addr();
    let [mut c0, mut c1] = clients_on_both_shards(addr);
    c0.create("jobs", AttributeUpdate::default());
    for c in [&mut c0, &mut c1] {
        let entries: Vec<SendEntry> = (0..10)
            .map(|i| SendEntry::new(Bytes::from(format!("job {i}"))))
            .collect();
        assert!(c.send_entries("jobs", &entries).iter().all(Result::is_ok));
    }
    let bound = c0.receive_bound("jobs", 8, Some(600_000), 0);
    let unbound = c0.receive("jobs", 4, Some(600_000), 0);
    assert_eq!((bound.len(), unbound.len()), (8, 4));
    // SIGTERM with the connections still open: the drain closes them.
    server.stop();
    drop((c0, c1));

    let mut server = start(&path);
    let addr = server.listen_addr();
    let [mut c0, _c1] = clients_on_both_shards(addr);
    let s = c0.stats("jobs");
    assert_eq!((s.in_flight, s.visible, s.released), (4, 16, 8), "{s:?}");
    let again = drain(&mut c0, "jobs");
    assert_eq!(again.len(), 16);
    let was_bound: std::collections::HashSet<u128> = bound.iter().map(|m| m.id.0).collect();
    for m in &again {
        let expect = if was_bound.contains(&m.id.0) { 2 } else { 1 };
        assert_eq!(m.receive_count, expect, "{:?}", m.id);
    }
    // The unbound leases' receipts still delete.
    let receipts: Vec<Receipt> = unbound.iter().map(|m| m.receipt).collect();
    assert!(c0.delete("jobs", &receipts).iter().all(Result::is_ok));
    drop(c0);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
