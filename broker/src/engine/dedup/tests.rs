//! The dedup table against a plain map, through expiry, replacement and
//! positions past 32 bits.

use super::*;

/// A xorshift generator from `seed`: the tests' fixed pseudo-random draws.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Records `key` as a send does: probed first, for its hash.
fn ins(t: &mut DedupTable, inc: u32, key: &[u8], id: MessageId, cost: u64, until: u64) -> Recorded {
    let Probe::Absent(Some(hash)) = t.probe(inc, key, u64::MAX) else {
        panic!("{key:?} is recorded already");
    };
    t.insert(inc, key, hash, id, cost, until)
}

#[test]
fn owner_is_stable_and_in_range() {
    for shards in 1..5u16 {
        for i in 0..100u32 {
            let k = i.to_le_bytes();
            let o = owner_shard(7, &k, shards);
            assert!(o < shards);
            assert_eq!(o, owner_shard(7, &k, shards));
        }
    }
}

#[test]
fn insert_lookup_expire() {
    let mut t = DedupTable::default();
    let key = b"k";
    let r = ins(&mut t, 1, key, MessageId(5), 10, 100);
    assert_eq!(
        r,
        Recorded {
            freed: 0,
            arm_at: Some(100)
        }
    );
    assert_eq!(t.lookup(1, key, 99), Some(MessageId(5)));
    assert_eq!(t.lookup(1, key, 100), None, "the window ended");
    assert_eq!(t.lookup(2, key, 0), None);
    let r = ins(&mut t, 1, b"l", MessageId(6), 10, 150);
    assert_eq!(r.arm_at, None, "the queue's timer is armed already");
    assert_eq!(
        t.expire_due(1, 120),
        Expired {
            freed: 10,
            next_at: Some(150)
        }
    );
    assert_eq!(t.lookup(1, b"l", 120), Some(MessageId(6)));
    assert_eq!(
        t.expire_due(1, 150),
        Expired {
            freed: 10,
            next_at: None
        }
    );
    assert_eq!(t.len(), 0);
    ins(&mut t, 2, key, MessageId(7), 10, 0);
    let (_, cost) = t.remove_queue(2);
    assert_eq!(cost, 10);
    assert_eq!(t.len(), 0);
}

#[test]
fn a_window_shrunk_ends_later_entries_first_and_keeps_their_order() {
    let mut t = DedupTable::default();
    // A 100 ns window, then a 10 ns one: b ends before a.
    ins(&mut t, 1, b"a", MessageId(1), 10, 100);
    ins(&mut t, 1, b"b", MessageId(2), 10, 20);
    assert_eq!(t.lookup(1, b"b", 20), None);
    // b again, past its window: it replaces the old entry, whose
    // memory is freed, and keeps the queue's one timer.
    let r = ins(&mut t, 1, b"b", MessageId(3), 10, 60);
    assert_eq!(
        r,
        Recorded {
            freed: 10,
            arm_at: None
        }
    );
    assert_eq!(t.lookup(1, b"b", 30), Some(MessageId(3)));
    assert_eq!(
        t.expire_due(1, 100),
        Expired {
            freed: 20,
            next_at: None
        }
    );
    assert_eq!((t.len(), t.timers()), (0, 0));
}

#[test]
fn the_logs_agree_with_a_plain_map_through_expiry_and_compaction() {
    // Keys of 1 to 128 bytes over three queues, sent at a rising clock
    // with a 50-tick window, some again past their window; expiry runs
    // as the queues' timers would. A plain map of the live keys says
    // what each probe must find.
    let mut t = DedupTable::default();
    let mut model: std::collections::HashMap<(u32, Vec<u8>), (MessageId, u64)> =
        std::collections::HashMap::new();
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let mut cost_held = 0u64;
    for now in 0..20_000u64 {
        let inc = (next() % 3) as u32 + 1;
        let len = (next() % 128) as usize + 1;
        let key = vec![b'a' + (next() % 4) as u8; len];
        let want = model
            .get(&(inc, key.clone()))
            .filter(|&&(_, until)| until > now)
            .map(|&(id, _)| id);
        match t.probe(inc, &key, now) {
            Probe::Found(id) => assert_eq!(Some(id), want, "{inc} {len} at {now}"),
            Probe::Absent(Some(h)) => {
                assert_eq!(want, None, "{inc} {len} at {now}");
                let id = MessageId(u128::from(now) << 64 | u128::from(now));
                let cost = len as u64 + 96;
                let r = t.insert(inc, &key, h, id, cost, now + 50);
                cost_held += cost;
                cost_held -= r.freed;
                model.insert((inc, key), (id, now + 50));
            }
            Probe::Absent(None) => panic!("a key of {len} bytes is recordable"),
        }
        if now % 7 == 0 {
            for q in 1..=3 {
                cost_held -= t.expire_due(q, now).freed;
            }
            model.retain(|_, &mut (_, until)| until > now);
            assert_eq!(t.len(), model.len(), "at {now}");
        }
    }
    let listed = t.entries().count();
    assert_eq!(listed, t.len());
    let mut removed = 0;
    for q in 1..=3 {
        removed += t.remove_queue(q).1;
    }
    assert_eq!(removed, cost_held);
    assert_eq!((t.len(), t.logs.len(), t.by_queue.len()), (0, 0, 0));
}

#[test]
fn positions_and_key_offsets_wrap_past_32_bits() {
    // A queue whose log has seen almost 2^32 entries and key bytes:
    // its positions and offsets wrap in the 32 bits kept of them.
    let mut t = DedupTable::default();
    let i = t.log_or_new(9);
    let q = &mut t.logs[i];
    q.log.entries = BlockDeque::starting_at((1 << 32) - 2);
    q.log.arena_base = (1 << 32) - 5;
    let keys: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'a' + i; 3]).collect();
    for (i, k) in keys.iter().enumerate() {
        ins(&mut t, 9, k, MessageId(i as u128), 1, 10 + i as u64);
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(t.lookup(9, k, 0), Some(MessageId(i as u128)), "key {i}");
    }
    // The first three end, across the wrap; the rest are still found.
    assert_eq!(t.expire_due(9, 12).next_at, Some(13));
    for (i, k) in keys.iter().enumerate() {
        let want = (i >= 3).then_some(MessageId(i as u128));
        assert_eq!(t.lookup(9, k, 0), want, "key {i}");
    }
    assert_eq!(t.len(), 3);
}

#[test]
fn keys_up_to_the_longest_are_kept_whole() {
    let mut t = DedupTable::default();
    let keys: Vec<Vec<u8>> = [1, 40, 127, DEDUP_KEY_BYTES_MAX]
        .iter()
        .flat_map(|&n| [vec![b'k'; n], [vec![b'k'; n - 1], vec![b'j']].concat()])
        .collect();
    for (i, k) in keys.iter().enumerate() {
        ins(&mut t, 3, k, MessageId(i as u128 | 1 << 100), 1, 10);
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(t.lookup(3, k, 0), Some(MessageId(i as u128 | 1 << 100)));
    }
    let listed: Vec<Vec<u8>> = t.entries().map(|(_, k, _, _)| k.to_vec()).collect();
    assert_eq!(listed, keys);
    let long = vec![b'k'; DEDUP_KEY_BYTES_MAX + 1];
    assert_eq!(t.probe(3, &long, 0), Probe::Absent(None));
}

#[test]
fn entries_list_each_queue_in_order() {
    let mut t = DedupTable::default();
    for (i, k) in [b"x", b"y", b"z"].iter().enumerate() {
        ins(&mut t, 4, *k, MessageId(i as u128), 1, 10 + i as u64);
    }
    let got: Vec<(u32, Vec<u8>, u64)> =
        t.entries().map(|(q, k, _, u)| (q, k.to_vec(), u)).collect();
    assert_eq!(
        got,
        [
            (4, b"x".to_vec(), 10),
            (4, b"y".to_vec(), 11),
            (4, b"z".to_vec(), 12)
        ]
    );
}

#[test]
fn check_in_records_as_it_looks_up_and_undo_takes_back() {
    // A plain map of live keys says what each check-in must find; a
    // third of the recordings are taken back at once, as a failed send's.
    let mut t = DedupTable::default();
    let mut model: std::collections::HashMap<(u32, Vec<u8>), (MessageId, u64)> =
        std::collections::HashMap::new();
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut cost_held = 0u64;
    for now in 0..20_000u64 {
        let inc = (next() % 2) as u32 + 1;
        let key = format!("k{}", next() % 300).into_bytes();
        let want = model
            .get(&(inc, key.clone()))
            .filter(|&&(_, until)| until > now)
            .map(|&(id, _)| id);
        let id = MessageId(u128::from(now) + 1);
        // Half the check-ins come with the hash a batch computed ahead.
        let mut hashed = Vec::new();
        if next() % 2 == 0 {
            t.hash_ahead(inc, [Some(&key[..]), None].into_iter(), &mut hashed);
            assert_eq!(hashed.len(), 2);
            assert_eq!(hashed[1], None, "an entry without a key");
        }
        match t.check_in(
            inc,
            &key,
            hashed.first().copied().flatten(),
            now,
            id,
            10,
            now + 40,
        ) {
            CheckIn::Found(found) => assert_eq!(Some(found), want, "at {now}"),
            CheckIn::Recorded(r) => {
                assert_eq!(want, None, "at {now}");
                cost_held -= r.freed;
                if next() % 3 == 0 {
                    t.undo_last(inc);
                    model.remove(&(inc, key));
                } else {
                    cost_held += 10;
                    model.insert((inc, key), (id, now + 40));
                }
            }
            CheckIn::Unrecordable => panic!("a short key is recordable"),
        }
        if now % 5 == 0 {
            for q in 1..=2 {
                cost_held -= t.expire_due(q, now).freed;
            }
            model.retain(|_, &mut (_, until)| until > now);
        }
        assert_eq!(t.len(), model.len(), "at {now}");
    }
    let mut removed = 0;
    for q in 1..=2 {
        removed += t.remove_queue(q).1;
    }
    assert_eq!(removed, cost_held);
    let long = vec![b'k'; DEDUP_KEY_BYTES_MAX + 1];
    assert_eq!(
        t.check_in(1, &long, None, 0, MessageId(1), 1, 1),
        CheckIn::Unrecordable
    );
    assert!(t.logs.is_empty(), "a key never recorded leaves no log");
}

#[test]
fn undo_of_a_queue_s_only_entry_forgets_the_queue() {
    let mut t = DedupTable::default();
    assert!(matches!(
        t.check_in(5, b"k", None, 0, MessageId(1), 1, 10),
        CheckIn::Recorded(Recorded {
            freed: 0,
            arm_at: Some(10)
        })
    ));
    t.undo_last(5);
    assert_eq!((t.len(), t.logs.len(), t.by_queue.len()), (0, 0, 0));
    assert_eq!(t.lookup(5, b"k", 0), None);
}

#[test]
fn logs_are_found_after_others_go_whichever_was_used_last() {
    // Queues 1 to 4, each with keys; then queues go, each removal moving
    // the last log into the gap, with the log used last pointing
    // anywhere: every other queue's keys are still found, and check-ins
    // land in their own queue's log.
    let mut t = DedupTable::default();
    for q in 1..=4u32 {
        for k in 0..3u8 {
            ins(
                &mut t,
                q,
                &[b'a' + k, q as u8],
                MessageId(u128::from(q) * 10 + u128::from(k)),
                1,
                100,
            );
        }
    }
    for gone in [1u32, 3] {
        // Use queue 4 (the last log, which the removal moves) just before.
        assert_eq!(t.lookup(4, &[b'a', 4], 0), Some(MessageId(40)));
        let _ = t.check_in(4, b"late", None, 0, MessageId(49), 1, 100);
        t.remove_queue(gone);
        for q in (1..=4u32).filter(|&q| q != 1 && q != gone) {
            for k in 0..3u8 {
                let want = MessageId(u128::from(q) * 10 + u128::from(k));
                assert_eq!(
                    t.lookup(q, &[b'a' + k, q as u8], 0),
                    Some(want),
                    "queue {q} key {k}"
                );
            }
            assert_eq!(t.lookup(q, b"late", 0), (q == 4).then_some(MessageId(49)));
        }
        assert_eq!(t.lookup(gone, &[b'a', gone as u8], 0), None);
    }
    assert_eq!(t.logs.len(), 2);
    assert_eq!(t.by_queue.len(), 2);
    for (&inc, &i) in &t.by_queue {
        assert_eq!(t.logs[i].incarnation, inc);
    }
    // A check-in for a queue that has no log makes one, found after.
    assert!(matches!(
        t.check_in(7, b"k", None, 0, MessageId(70), 1, 100),
        CheckIn::Recorded(_)
    ));
    assert_eq!(t.lookup(7, b"k", 0), Some(MessageId(70)));
    assert_eq!(t.lookup(2, &[b'a', 2], 0), Some(MessageId(20)));
}
