//! The harness of the log records' fuzz target (`broker/fuzz`,
//! `wal_replay`): arbitrary bytes replayed as a commit's records onto a
//! shard that holds a standard and a FIFO queue. A replay must refuse what
//! it cannot apply, never panic, and leave a shard whose invariants hold
//! when it succeeds. Always compiled, so the target is one line and the
//! harness is built and tested with the library.

use bytes::Bytes;
use sluice_protocol::{
    AttributeUpdate, MessageGroupId, QueueAttributesRequest, QueueKind, QueueName, SendEntry,
    SendRequest,
};

use crate::engine::section::SliceRead;
use crate::engine::shard::LoadClock;
use crate::engine::{Cluster, Op, OpResult, RegistryConfig};

/// The queues the replay's shard holds: a standard one and a FIFO one.
pub const QUEUES: [(&str, QueueKind); 2] =
    [("work", QueueKind::Standard), ("fifo", QueueKind::Fifo)];

/// A cluster of one shard with [`QUEUES`], as every input meets it.
///
/// # Panics
/// When the queues cannot be made (a bug).
#[must_use]
pub fn cluster() -> Cluster {
    let mut c = Cluster::new(RegistryConfig {
        shards: 1,
        seed: 1,
        ..Default::default()
    });
    for (name, kind) in QUEUES {
        let r = c.call(
            0,
            Op::CreateQueue(QueueAttributesRequest {
                queue: QueueName::new(name).expect("a valid name"),
                attributes: AttributeUpdate {
                    kind: Some(kind),
                    ..Default::default()
                },
            }),
        );
        assert!(matches!(r, OpResult::QueueCreated { .. }), "{r:?}");
    }
    c
}

/// Replays `data` as records onto a fresh [`cluster`]'s shard.
///
/// # Panics
/// When a replay that succeeded leaves the shard's invariants broken.
pub fn replay(data: &[u8]) {
    let mut c = cluster();
    let clock = LoadClock {
        now_ns: c.now_ns(),
        wall_ms: c.wall_ms(),
        saved_wall_ms: c.wall_ms(),
    };
    if c.shard_mut(0)
        .replay_log(&mut SliceRead::new(data, 0), clock)
        .is_ok()
    {
        if let Err(e) = c.check_invariants() {
            panic!("a replay that succeeded left the shard broken: {e}");
        }
    }
}

/// The records a [`cluster`] writes as it takes sends to both queues (the
/// FIFO queue's in two groups, with dedup keys) and a delete: the fuzz
/// target's seed.
///
/// # Panics
/// When the cluster refuses an operation (a bug).
#[must_use]
pub fn seed_log() -> Vec<u8> {
    let mut c = cluster();
    c.shard_mut(0).set_logging(true);
    for (queue, group) in [("work", None), ("fifo", Some("a")), ("fifo", Some("b"))] {
        let entries: Vec<SendEntry> = (0..3)
            .map(|i| {
                let mut e = SendEntry::new(Bytes::from(format!("{queue}-{i}")));
                if let Some(g) = group {
                    e.group = Some(MessageGroupId::new(g).expect("a valid group"));
                    e.dedup_key = Some(Bytes::from(format!("{g}{i}")));
                }
                e
            })
            .collect();
        let name = QueueName::new(queue).expect("a valid name");
        let op = Op::Send(SendRequest::new(name, &entries).expect("a batch"));
        assert!(matches!(c.call(0, op), OpResult::Sent(r) if r.iter().all(Result::is_ok)));
    }
    let got = match c.call(
        0,
        Op::Receive(sluice_protocol::ReceiveRequest {
            queue: QueueName::new("work").expect("a valid name"),
            max_messages: 1,
            visibility_timeout_ms: None,
            wait_ms: Some(0),
            bind_leases: false,
            with_source: false,
        }),
    ) {
        OpResult::Received(m) => m,
        other => panic!("{other:?}"),
    };
    let op = Op::Delete(sluice_protocol::DeleteRequest {
        queue: QueueName::new("work").expect("a valid name"),
        receipts: got.iter().map(|m| m.receipt).collect(),
    });
    assert!(matches!(c.call(0, op), OpResult::Deleted(r) if r.iter().all(Result::is_ok)));
    let mut log = Vec::new();
    c.shard_mut(0).take_log(&mut log);
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuzz_seed_replays_whole() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds-wal-replay/sends-and-a-delete.log");
        if std::env::var_os("SLUICE_WRITE_FUZZ_SEEDS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, seed_log()).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap();
        let mut c = cluster();
        let clock = LoadClock {
            now_ns: c.now_ns(),
            wall_ms: c.wall_ms(),
            saved_wall_ms: c.wall_ms(),
        };
        let load = c
            .shard_mut(0)
            .replay_log(&mut SliceRead::new(&on_disk, 0), clock)
            .unwrap();
        assert_eq!(load.messages(), 9, "nine sends");
        c.check_invariants().unwrap();
        assert_eq!(c.messages().len(), 8, "one deleted");
        // The seed is what the cluster writes today, times aside.
        assert_eq!(on_disk.len(), seed_log().len());
    }

    /// Inputs the fuzzer found that broke the harness once, kept beside
    /// the seed (so CI's runs start from them too).
    #[test]
    fn the_fuzzers_findings_stay_fixed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds-wal-replay");
        let mut found = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("regress-")
            {
                replay(&std::fs::read(&path).unwrap());
                found += 1;
            }
        }
        assert!(found >= 1);
    }

    #[test]
    fn the_harness_takes_good_cut_and_changed_logs() {
        let good = seed_log();
        replay(&good);
        replay(&[]);
        for cut in [1, good.len() / 2, good.len() - 1] {
            replay(&good[..cut]);
        }
        for i in (0..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[i] ^= 0x55;
            replay(&bad);
        }
    }
}
