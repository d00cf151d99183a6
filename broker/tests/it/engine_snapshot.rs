//! Snapshots on the engine: a cluster saved and loaded back holds the same
//! queues and messages, receipts keep working, time passed while stopped
//! counts, and a damaged file is refused with its offset, never a panic.

use crate::engine_util::*;
use sluice_broker::engine::{Cluster, RegistryConfig};
use sluice_broker::snapshot::format::SnapshotError;
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{
    AttributeUpdate, Backoff, ErrorCode, LabelChanges, LabelsUpdate, RedrivePolicy, SendEntry,
};

const QUEUES: [&str; 4] = ["dlq", "work", "quiet", "fifo"];

fn config(shards: u16) -> RegistryConfig {
    RegistryConfig {
        shards,
        seed: 7,
        ..Default::default()
    }
}

/// A cluster with every kind of message: visible (fresh and redelivered),
/// delayed, leased (a long lease and a short one), dead-lettered, moved,
/// with attributes and dedup keys.
fn populated(shards: u16) -> (Cluster, Vec<sluice_protocol::ReceivedMessage>) {
    let mut c = cluster(shards);
    create(&mut c, "dlq", AttributeUpdate::default());
    create(
        &mut c,
        "work",
        AttributeUpdate {
            visibility_timeout: Some(Millis::new(1000)),
            dedup_window: Some(Millis::new(600_000)),
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receives: 1,
            }),
            backoff: Setting::Set(Backoff {
                base: Millis::new(100),
                max: Millis::new(400),
            }),
            labels: Some(Box::new(LabelChanges {
                tags: LabelsUpdate {
                    set: vec![("team".into(), "payments".into())],
                    remove: vec![],
                },
                annotations: LabelsUpdate {
                    set: vec![("Policy".into(), "{}".into())],
                    remove: vec![],
                },
            })),
            ..Default::default()
        },
    );
    create(&mut c, "quiet", AttributeUpdate::default());
    for i in 0..40 {
        let mut e = entry(&format!("body-{i}"));
        if i % 3 == 0 {
            e.attributes = attrs(&[("n", &i.to_string()), ("kind", "x")]);
        }
        if i % 4 == 0 {
            e.dedup_key = Some(bytes::Bytes::from(format!("key-{i}")));
        }
        if i % 5 == 0 {
            e.delay = Some(Millis::new(30_000));
        }
        let r = send_entries(&mut c, i % usize::from(shards), "work", vec![e]);
        assert!(r[0].is_ok());
    }
    for i in 0..10 {
        send(&mut c, 0, "quiet", &format!("q{i}"));
    }
    // A FIFO queue: two groups, one of them locked by a message in flight.
    create(
        &mut c,
        "fifo",
        AttributeUpdate {
            kind: Some(sluice_protocol::QueueKind::Fifo),
            ..Default::default()
        },
    );
    for i in 0..6 {
        let group = if i % 2 == 0 { "even" } else { "odd" };
        let e = entry(&format!("f{i}"))
            .group(sluice_protocol::MessageGroupId::new(group).unwrap())
            .dedup_key(format!("f{i}"));
        assert!(send_entries(&mut c, 0, "fifo", vec![e])[0].is_ok());
    }
    assert_eq!(receive_vis(&mut c, 0, "fifo", 1, Some(60_000)).len(), 1);
    // Leased for a minute: their receipts must work after the restart.
    let long = receive_vis(&mut c, 0, "work", 6, Some(60_000));
    // Received, then the lease expired: dead-lettered on the next receive
    // (max_receives 1), some of them.
    let once = receive_vis(&mut c, usize::from(shards) - 1, "work", 3, Some(1000));
    assert_eq!(once.len(), 3);
    c.advance_ms(1000);
    let _ = receive_vis(&mut c, 0, "work", 2, Some(60_000));
    // Leased for a second: expired after a restart that takes longer.
    let short = receive_vis(&mut c, 0, "work", 4, Some(1000));
    assert_eq!((long.len(), short.len()), (6, 4));
    let mut kept = long;
    kept.extend(short);
    check(&mut c);
    (c, kept)
}

/// What a message is, beside where it lies.
fn views(c: &Cluster) -> Vec<(u128, String, String, u32, u64)> {
    let mut v: Vec<_> = c
        .messages()
        .into_iter()
        .map(|m| {
            (
                m.id.0,
                m.queue.to_string(),
                format!("{:?}", m.state),
                m.receive_count,
                m.delivery,
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_loaded_cluster_holds_what_was_saved() {
    for shards in [1u16, 2] {
        let (mut c, received) = populated(shards);
        c.shutdown();
        let before = views(&c);
        let stats_before: Vec<_> = QUEUES.iter().map(|q| stats(&mut c, q)).collect();
        let attributes_before = info(&mut c, 0, "work").attributes;
        assert_eq!(attributes_before.tags.get("team"), Some("payments"));
        let file = c.snapshot();
        let (mut d, load) =
            Cluster::from_snapshot(&file, config(shards), 5_000_000_000, c.wall_ms()).unwrap();
        check(&mut d);
        assert_eq!(info(&mut d, 0, "work").attributes, attributes_before);
        assert_eq!(views(&d), before, "{shards} shard(s)");
        assert_eq!(load.messages(), before.len() as u64);
        for (q, s) in QUEUES.iter().zip(&stats_before) {
            let mut after = stats(&mut d, q);
            assert!(after.oldest_age_ms >= s.oldest_age_ms);
            after.oldest_age_ms = s.oldest_age_ms;
            assert_eq!(&after, s, "queue {q}");
        }
        // A receipt from before deletes its message (the first is leased
        // for a minute); a duplicate send within the window is refused.
        let first = &received[0];
        assert_eq!(delete_one(&mut d, 0, "work", first.receipt), Ok(()));
        assert_eq!(
            delete_one(&mut d, 0, "work", first.receipt),
            Err(ErrorCode::Gone)
        );
        let mut dup = SendEntry::new(bytes::Bytes::from_static(b"again"));
        dup.dedup_key = Some(bytes::Bytes::from_static(b"key-8"));
        let r = send_entries(&mut d, 0, "work", vec![dup])
            .remove(0)
            .unwrap();
        assert!(r.duplicate);
        check(&mut d);
    }
}

#[test]
fn labels_past_64_kib_survive() {
    let mut c = cluster(1);
    // Past the 64 KiB a version-1 file's attribute length allowed.
    let mut big = AttributeUpdate::default();
    big.annotations_mut().set = (0..4)
        .map(|i| (format!("Policy{i}"), "p".repeat(16_000)))
        .collect();
    create(&mut c, "big", big);
    let before = info(&mut c, 0, "big").attributes;
    let times = info(&mut c, 0, "big").times;
    assert!(times.is_some_and(|t| t.created_ms > 0));
    c.shutdown();
    let file = c.snapshot();
    let (mut d, _) = Cluster::from_snapshot(&file, config(1), 0, c.wall_ms()).unwrap();
    assert_eq!(info(&mut d, 0, "big").attributes, before);
    assert_eq!(info(&mut d, 0, "big").times, times);
    assert_eq!(before.annotations.text_bytes(), 4 * (7 + 16_000));
}

#[test]
fn time_while_stopped_counts_for_leases_and_delays() {
    let (mut c, received) = populated(2);
    c.shutdown();
    let file = c.snapshot();
    let before = stats(&mut c, "work");
    let (in_flight_before, redelivered_before) = (before.in_flight, before.redelivered);
    // Loaded two seconds of wall clock later: the one-second leases ended
    // while stopped, the minute-long ones did not.
    let (mut d, load) =
        Cluster::from_snapshot(&file, config(2), 9_000_000_000, c.wall_ms() + 2_000).unwrap();
    assert!(load.leases_ended >= 4, "{load:?}");
    let s = stats(&mut d, "work");
    assert_eq!(s.in_flight, in_flight_before - load.leases_ended);
    // Expired as any lease expires: counted as redelivered.
    assert_eq!(s.redelivered, redelivered_before + load.leases_ended);
    // The long lease still holds.
    assert_eq!(delete_one(&mut d, 0, "work", received[1].receipt), Ok(()));
    // Thirty seconds later the delayed messages are visible too.
    d.advance_ms(31_000);
    let s = stats(&mut d, "work");
    assert_eq!(s.delayed, 0, "{s:?}");
    check(&mut d);
}

#[test]
fn new_sends_after_a_load_get_new_ids() {
    let (mut c, _) = populated(2);
    c.shutdown();
    let file = c.snapshot();
    let (mut d, _) = Cluster::from_snapshot(&file, config(2), 5_000_000_000, c.wall_ms()).unwrap();
    let old: std::collections::HashSet<u128> = d.messages().iter().map(|m| m.id.0).collect();
    for shard in 0..2 {
        let id = send(&mut d, shard, "quiet", "new");
        assert!(!old.contains(&id.0));
    }
    create(&mut d, "fresh", AttributeUpdate::default());
    check(&mut d);
}

fn small_file() -> Vec<u8> {
    let (mut c, _) = populated(2);
    c.shutdown();
    c.snapshot()
}

fn load(file: &[u8]) -> Result<(), SnapshotError> {
    Cluster::from_snapshot(file, config(2), 5_000_000_000, 1_700_000_000_000).map(drop)
}

#[test]
fn every_truncation_is_refused_with_an_offset() {
    let file = small_file();
    for len in 0..file.len() {
        let e = load(&file[..len]).expect_err("a truncated file loads");
        let text = e.to_string();
        assert!(text.contains("byte"), "{len}: {text}");
    }
}

#[test]
fn every_bit_flip_is_refused() {
    let file = small_file();
    for i in 0..file.len() {
        for bit in [0, 3, 7] {
            let mut bad = file.clone();
            bad[i] ^= 1 << bit;
            let e = load(&bad).expect_err("a flipped bit loads");
            assert!(e.to_string().contains("byte"), "{i}.{bit}: {e}");
        }
    }
}

#[test]
fn another_version_limits_or_shard_count_is_refused() {
    let file = small_file();
    for version in [0, 4] {
        let mut other = file.clone();
        other[8] = version;
        let e = load(&other).unwrap_err();
        assert!(
            matches!(e, SnapshotError::Version { found } if found == u32::from(version)),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains(&format!("version {version} at byte 8")),
            "{e}"
        );
    }
    let mut magic = file.clone();
    magic[0] = b'X';
    assert!(matches!(load(&magic), Err(SnapshotError::BadMagic { .. })));
    let e = Cluster::from_snapshot(&file, config(1), 5_000_000_000, 1_700_000_000_000).unwrap_err();
    assert!(
        matches!(e, SnapshotError::Shards { file: 2, here: 1 }),
        "{e}"
    );
    let tight = RegistryConfig {
        memory_bytes_max: 1000,
        ..config(2)
    };
    let e = Cluster::from_snapshot(&file, tight, 5_000_000_000, 1_700_000_000_000).unwrap_err();
    assert!(matches!(e, SnapshotError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("--memory-max"), "{e}");
    let few = RegistryConfig {
        queues_max: 2,
        ..config(2)
    };
    let e = Cluster::from_snapshot(&file, few, 5_000_000_000, 1_700_000_000_000).unwrap_err();
    assert!(matches!(e, SnapshotError::TooManyQueues { .. }), "{e}");
}

/// The fuzz target's seeds (`broker/fuzz/seeds`) are snapshots this engine
/// writes and loads; `SLUICE_WRITE_FUZZ_SEEDS=1` writes them again. The
/// `v1-` and `v2-` ones were written in format versions 1 and 2 and are
/// kept as they are: a broker of today still loads them.
#[test]
fn the_fuzz_seeds_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    if std::env::var_os("SLUICE_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for shards in [1u16, 2] {
            let (mut c, _) = populated(shards);
            c.shutdown();
            std::fs::write(dir.join(format!("shards-{shards}.snapshot")), c.snapshot()).unwrap();
        }
    }
    for (shards, prefix) in [
        (1u16, ""),
        (2, ""),
        (1, "v1-"),
        (2, "v1-"),
        (1, "v2-"),
        (2, "v2-"),
    ] {
        let path = dir.join(format!("{prefix}shards-{shards}.snapshot"));
        let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let report = sluice_broker::snapshot::check(
            sluice_broker::snapshot::Source::Bytes(&file),
            1_700_000_000_000,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(report.header.shards, shards);
        assert!(report.header.messages > 40);
    }
}

/// The fuzz harness on a few thousand mutations of a real snapshot (the
/// fuzz target explores further in CI): refused or loaded, never a panic.
#[test]
fn the_fuzz_harness_takes_mutations() {
    use sluice_broker::snapshot::fuzz_harness::{fix_checksums, load};
    let file = small_file();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2000 {
        let mut bad = file.clone();
        for _ in 0..=(next() % 4) {
            let i = (next() % bad.len() as u64) as usize;
            match next() % 3 {
                0 => bad[i] ^= 1 << (next() % 8),
                1 => bad[i] = 0xff,
                _ => bad[i] = 0,
            }
        }
        load(&bad);
        if fix_checksums(&mut bad) {
            let _ = Cluster::from_snapshot(&bad, config(2), 5_000_000_000, 1_700_000_000_000);
        }
    }
}

/// The save to a file (threads, direct writes and the partial blocks
/// written after them, the header last) writes the very bytes of the
/// snapshot written in turn, and with mode 0600.
#[test]
fn a_saved_file_is_the_snapshot_byte_for_byte() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("sluice-engine-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for shards in [1u16, 2] {
        let (mut c, _) = populated(shards);
        // Enough data that the shards' sections span many blocks.
        for batch in 0..6 {
            let entries = (0..500)
                .map(|i| entry(&format!("{batch}-{i:03}-{}", "y".repeat(i % 700))))
                .collect();
            let sent = send_entries(&mut c, batch % usize::from(shards), "quiet", entries);
            assert!(sent.iter().all(Result::is_ok));
        }
        c.shutdown();
        let path = dir.join(format!("s{shards}.snapshot"));
        let report = c.save_snapshot(&path).unwrap();
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file.len() as u64, report.bytes);
        assert_eq!(file, c.snapshot(), "{shards} shard(s)");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
