use std::path::PathBuf;

use super::{FILE_HEAD_BYTES, LogFile, OpenError};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-wal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A log of three commits, each synced before the next is written (as
/// `always` writes); its path.
fn three(name: &str) -> PathBuf {
    three_synced(name, true)
}

/// A log of three commits, each synced (`each`) or all at the end (as
/// `batch` may write); its path.
fn three_synced(name: &str, each: bool) -> PathBuf {
    let path = dir(name).join("shard-0.log");
    let (mut log, rec) = LogFile::open(&path, 100).unwrap();
    assert!(rec.created && rec.commits().is_empty() && log.is_empty());
    for (i, records) in [&b"one"[..], b"", b"three"].iter().enumerate() {
        assert_eq!(
            log.append(1_000 + i as u64, records).unwrap(),
            100 + i as u64
        );
        if each {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
    path
}

#[test]
fn a_bad_frame_no_later_frame_says_was_synced_is_a_torn_end() {
    // Written as batch may: the three frames, then one sync. A crash of
    // the machine may keep the later frames and lose the first: not
    // corruption, a torn end at the first, the later ones dropped.
    let path = three_synced("unsynced", false);
    let whole = std::fs::read(&path).unwrap();
    let first = LogFile::open(&path, 0).unwrap().1.commits()[0].offset as usize;
    let mut bad = whole.clone();
    bad[first + 30] ^= 0x40;
    std::fs::write(&path, &bad).unwrap();
    let (log, rec) = LogFile::open(&path, 0).unwrap();
    assert_eq!(rec.torn.map(|t| t.0), Some(first as u64));
    assert!(rec.commits().is_empty());
    assert_eq!(log.len(), first as u64);
    assert_eq!(std::fs::read(&path).unwrap(), whole[..first]);
    // Synced one by one, the same byte is corruption (the test below).
}

#[test]
fn commits_come_back_in_order_and_appends_follow_them() {
    let path = three("order");
    let (mut log, rec) = LogFile::open(&path, 0).unwrap();
    assert!(!rec.created && rec.torn.is_none());
    let commits = rec.commits();
    let got: Vec<_> = commits
        .iter()
        .map(|c| (c.seq, c.wall_ms, c.records))
        .collect();
    assert_eq!(
        got,
        [
            (100, 1_000, &b"one"[..]),
            (101, 1_001, b""),
            (102, 1_002, b"three")
        ]
    );
    let bytes = std::fs::read(&path).unwrap();
    let c = commits[2];
    assert_eq!(&bytes[c.records_at as usize..][..5], b"three");
    assert_eq!(log.next_seq(), 103);
    assert_eq!(log.append(2_000, b"four").unwrap(), 103);
    log.sync().unwrap();
    let (_, rec) = LogFile::open(&path, 0).unwrap();
    assert_eq!(rec.commits().len(), 4);
    assert_eq!(rec.commits()[3].records, b"four");
}

#[test]
fn a_torn_end_is_cut_and_said() {
    let path = three("torn");
    let whole = std::fs::read(&path).unwrap();
    // Every cut inside the last frame, and garbage after the end.
    let last = LogFile::open(&path, 0).unwrap().1.commits()[2].offset as usize;
    let mut tails: Vec<Vec<u8>> = (last + 1..whole.len())
        .map(|cut| whole[..cut].to_vec())
        .collect();
    let mut garbage = whole.clone();
    garbage.extend_from_slice(b"SWLF\x05\0\0\0junk");
    tails.push(garbage);
    for bytes in tails {
        std::fs::write(&path, &bytes).unwrap();
        let (mut log, rec) = LogFile::open(&path, 0).unwrap();
        let (offset, _) = rec.torn.expect("a torn end");
        let expect = if bytes.len() < whole.len() { 2 } else { 3 };
        assert_eq!(rec.commits().len(), expect);
        assert_eq!(offset, log.len());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), log.len(), "cut");
        // The next commit follows the last good one, in sequence.
        let seq = log.append(9, b"next").unwrap();
        assert_eq!(seq, 100 + expect as u64);
        log.sync().unwrap();
        let (_, rec) = LogFile::open(&path, 0).unwrap();
        assert!(rec.torn.is_none());
        assert_eq!(rec.commits().last().unwrap().records, b"next");
    }
}

#[test]
fn corruption_before_the_end_is_refused_and_the_file_left_alone() {
    let path = three("corrupt");
    let whole = std::fs::read(&path).unwrap();
    let first = LogFile::open(&path, 0).unwrap().1.commits()[0].offset as usize;
    for i in first..first + 20 {
        let mut bad = whole.clone();
        bad[i] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        match LogFile::open(&path, 0) {
            Err(OpenError::Corrupt { source, .. }) => {
                assert_eq!(source.offset, first as u64, "byte {i}");
            }
            other => panic!("byte {i}: {other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bad, "untouched");
    }
}

#[test]
fn a_file_that_is_no_log_is_refused() {
    let d = dir("head");
    for (name, bytes) in [
        ("short", &b"SWLH"[..]),
        ("magic", &[0u8; FILE_HEAD_BYTES][..]),
        ("version", b"SWLH\x01\0\0\0\0\0\0\0\0\0\0\0"),
    ] {
        let path = d.join(name);
        std::fs::write(&path, bytes).unwrap();
        let e = LogFile::open(&path, 0).unwrap_err();
        assert!(matches!(e, OpenError::Head { .. }), "{name}: {e}");
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
    let e = LogFile::open(&d.join("missing/shard-0.log"), 0).unwrap_err();
    assert!(matches!(e, OpenError::Io { .. }), "{e}");
}

#[test]
fn a_new_files_folder_is_synced_bare_names_included() {
    let d = dir("folder");
    super::sync_folder(&d.join("shard-0.log")).unwrap();
    super::sync_folder(std::path::Path::new("shard-0.log")).unwrap();
    let e = super::sync_folder(&d.join("missing/shard-0.log")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}
