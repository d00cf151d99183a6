//! The groups against a model: FIFO order and lock, fair turns, nothing
//! lost or delivered twice, empty groups idle and then forgotten.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::names::{head_of, same_bytes};
use super::{GroupIndex, GroupOrder, Groups, IDLE_GROUPS_MIN, Readiness};

/// Takes up to `max` with every message ready.
fn take(g: &mut Groups<u64>, max: usize) -> Vec<(GroupIndex, u64, u64)> {
    let mut out = Vec::new();
    g.take(max, |_| Readiness::Ready, |_| {}, &mut out, &mut Vec::new());
    out
}

/// What the model says of message `k`.
fn readiness(k: u64, dropped: &BTreeSet<u64>, later: &BTreeSet<u64>) -> Readiness {
    if dropped.contains(&k) {
        Readiness::Gone
    } else if later.contains(&k) {
        Readiness::Later
    } else {
        Readiness::Ready
    }
}

fn names(g: &Groups<u64>, taken: &[(GroupIndex, u64, u64)]) -> Vec<String> {
    taken
        .iter()
        .map(|&(i, _, _)| g.name(i).unwrap().to_owned())
        .collect()
}

#[test]
fn fifo_delivers_a_group_in_order_and_one_batch_at_a_time() {
    let mut g = Groups::new(GroupOrder::Fifo);
    for seq in 0..3 {
        g.push(b"a", seq, seq);
    }
    g.push(b"b", 3, 3);
    // Consecutive messages of "a", then "b".
    let first = take(&mut g, 2);
    assert_eq!(first.iter().map(|t| t.2).collect::<Vec<_>>(), [0, 1]);
    let second = take(&mut g, 10);
    assert_eq!(names(&g, &second), ["b"], "a is locked while 0 and 1 fly");
    assert_eq!(g.groups_in_flight(), 2);
    assert!(take(&mut g, 10).is_empty());
    // 1 comes back before 0 is settled: a stays locked; then 1 is next.
    let a = first[0].0;
    g.returned(a, 1, 1);
    assert!(take(&mut g, 10).is_empty(), "0 still flies");
    g.settled(a);
    let third = take(&mut g, 10);
    assert_eq!(third.iter().map(|t| t.2).collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn returns_in_any_order_keep_send_order() {
    let mut g = Groups::new(GroupOrder::Fifo);
    for seq in 0..4 {
        g.push(b"a", seq * 10, seq);
    }
    let taken = take(&mut g, 3);
    let a = taken[0].0;
    // Back in the reverse order of delivery.
    for &(_, seq, key) in taken.iter().rev() {
        g.returned(a, seq, key);
    }
    let again = take(&mut g, 10);
    assert_eq!(again.iter().map(|t| t.2).collect::<Vec<_>>(), [0, 1, 2, 3]);
}

#[test]
fn fair_groups_take_turns() {
    let mut g = Groups::new(GroupOrder::Fair);
    for seq in 0..100 {
        g.push(b"noisy", seq, seq);
    }
    g.push(b"quiet1", 100, 100);
    g.push(b"quiet2", 101, 101);
    let taken = take(&mut g, 4);
    assert_eq!(names(&g, &taken), ["noisy", "quiet1", "quiet2", "noisy"]);
    assert_eq!(g.groups_in_flight(), 3, "no lock, but counted");
}

#[test]
fn gone_messages_are_skipped_and_empty_groups_go_idle() {
    let mut g = Groups::new(GroupOrder::Fifo);
    g.push(b"a", 0, 0);
    g.push(b"a", 1, 1);
    g.push(b"b", 2, 2);
    let mut out = Vec::new();
    g.take(
        10,
        |k| {
            if k == 0 {
                Readiness::Gone
            } else {
                Readiness::Ready
            }
        },
        |_| {},
        &mut out,
        &mut Vec::new(),
    );
    assert_eq!(out.iter().map(|t| t.2).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(g.len(), 2);
    g.settled(out[0].0);
    assert_eq!(g.len(), 1, "nothing left of a");
    assert_eq!(g.idle_counts(), (1, 1));
    g.settled(out[1].0);
    assert!(g.is_empty() && g.groups_in_flight() == 0);
    // An idle group is found again as it was, and delivers.
    let a = g.find("a").expect("a is idle, not forgotten");
    assert_eq!(g.push(b"a", 3, 3), a);
    assert_eq!((g.len(), g.idle_counts().0), (1, 1));
    assert_eq!(take(&mut g, 10), [(a, 3, 3)]);
}

#[test]
fn idle_groups_are_bounded_by_the_busy_ones() {
    // 1,000 groups of one message each, delivered and settled one by one:
    // each goes idle, and the idle ones are kept only up to the minimum
    // (no group holds a message), the longest idle forgotten first.
    let mut g = Groups::new(GroupOrder::Fifo);
    for i in 0..1_000u64 {
        let gi = g.push(format!("g{i}").as_bytes(), i, i);
        assert_eq!(take(&mut g, 1), [(gi, i, i)]);
        g.settled(gi);
        let (idle, listed) = g.idle_counts();
        assert!(idle <= IDLE_GROUPS_MIN, "{idle} idle at {i}");
        assert!(
            listed <= 2 * idle + IDLE_GROUPS_MIN,
            "{listed} listed at {i}"
        );
    }
    assert_eq!(g.idle_counts().0, IDLE_GROUPS_MIN);
    assert_eq!(g.find("g0"), None, "idle longest: forgotten");
    assert!(g.find("g999").is_some(), "idle last: kept");
    // With a message in flight in each of 500 groups, as many idle ones
    // are kept.
    for i in 0..500u64 {
        let gi = g.push(format!("h{i}").as_bytes(), 1_000 + i, 1_000 + i);
        assert_eq!(take(&mut g, 1), [(gi, 1_000 + i, 1_000 + i)]);
    }
    for i in 0..500u64 {
        let gi = g.push(format!("k{i}").as_bytes(), 2_000 + i, 2_000 + i);
        assert_eq!(take(&mut g, 1), [(gi, 2_000 + i, 2_000 + i)]);
        g.settled(gi);
    }
    assert_eq!(g.len(), 500);
    assert_eq!(g.idle_counts().0, 500);
    // Groups flipping between idle and busy leave no pile of stale entries.
    for round in 0..2_000u64 {
        let gi = g.push(b"k499", 3_000 + round, 3_000 + round);
        assert_eq!(take(&mut g, 1), [(gi, 3_000 + round, 3_000 + round)]);
        g.settled(gi);
        assert!(g.idle_counts().1 <= 2 * g.idle_counts().0 + IDLE_GROUPS_MIN);
    }
}

#[test]
fn a_message_not_ready_holds_its_group_until_woken() {
    let mut g = Groups::new(GroupOrder::Fifo);
    g.push(b"a", 0, 0);
    g.push(b"a", 1, 1);
    g.push(b"b", 2, 2);
    let mut out = Vec::new();
    let not_yet = |k| {
        if k == 0 {
            Readiness::Later
        } else {
            Readiness::Ready
        }
    };
    g.take(10, not_yet, |_| {}, &mut out, &mut Vec::new());
    assert_eq!(
        out.iter().map(|t| t.2).collect::<Vec<_>>(),
        [2],
        "1 waits behind 0"
    );
    assert!(!g.can_deliver());
    out.clear();
    g.take(10, |_| Readiness::Ready, |_| {}, &mut out, &mut Vec::new());
    assert!(out.is_empty(), "a sleeps until woken");
    g.wake(g.find("a").unwrap());
    assert!(g.can_deliver());
    g.take(10, |_| Readiness::Ready, |_| {}, &mut out, &mut Vec::new());
    assert_eq!(out.iter().map(|t| t.2).collect::<Vec<_>>(), [0, 1]);
    // A message moved in with an earlier seq goes before the rest.
    let mut g = Groups::new(GroupOrder::Fifo);
    g.push(b"a", 5, 5);
    g.push(b"a", 3, 3);
    assert_eq!(
        take(&mut g, 10).iter().map(|t| t.2).collect::<Vec<_>>(),
        [3, 5]
    );
}

#[derive(Clone, Debug)]
enum Step {
    Push(u8),
    Take(usize),
    Return(usize),
    Settle(usize),
    Drop(usize),
    /// A waiting message cannot be delivered for now (FIFO only).
    Delay(usize),
    /// A delayed message can again, and its group is woken.
    Undelay(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..5).prop_map(Step::Push),
        2 => (1usize..6).prop_map(Step::Take),
        1 => any::<usize>().prop_map(Step::Return),
        1 => any::<usize>().prop_map(Step::Settle),
        1 => any::<usize>().prop_map(Step::Drop),
        1 => any::<usize>().prop_map(Step::Delay),
        1 => any::<usize>().prop_map(Step::Undelay),
    ]
}

/// Messages a take can deliver: per group that is not locked, its live
/// waiting messages up to the first one not ready (FIFO); every live
/// waiting message that is ready (fair).
fn ready_count(
    order: GroupOrder,
    group_of: &BTreeMap<u64, String>,
    waiting: &BTreeSet<u64>,
    flying: &BTreeMap<u64, GroupIndex>,
    dropped: &BTreeSet<u64>,
    later: &BTreeSet<u64>,
) -> usize {
    let live = waiting.iter().filter(|s| !dropped.contains(*s));
    if order == GroupOrder::Fair {
        return live.filter(|s| !later.contains(*s)).count();
    }
    let mut blocked: BTreeSet<&String> = flying.keys().map(|s| &group_of[s]).collect();
    let mut n = 0;
    for s in live {
        let name = &group_of[s];
        if blocked.contains(name) {
            continue;
        }
        if later.contains(s) {
            blocked.insert(name);
        } else {
            n += 1;
        }
    }
    n
}

/// Runs `steps` on the groups and a model, checking each take.
fn run(order: GroupOrder, steps: &[Step]) {
    let mut g = Groups::new(order);
    let mut next_seq = 0u64;
    // Model: per message (= seq) its group, and where it is.
    let mut group_of: BTreeMap<u64, String> = BTreeMap::new();
    let mut waiting: BTreeSet<u64> = BTreeSet::new();
    let mut flying: BTreeMap<u64, GroupIndex> = BTreeMap::new();
    let mut dropped: BTreeSet<u64> = BTreeSet::new();
    let mut later: BTreeSet<u64> = BTreeSet::new();
    // Fair: messages set aside by a take (not ready), until undelayed.
    let mut aside: BTreeMap<u64, GroupIndex> = BTreeMap::new();
    for s in steps {
        match *s {
            Step::Push(n) => {
                let name = format!("g{n}");
                g.push(name.as_bytes(), next_seq, next_seq);
                group_of.insert(next_seq, name);
                waiting.insert(next_seq);
                next_seq += 1;
            }
            Step::Take(max) => {
                let mut out = Vec::new();
                let mut set_aside = Vec::new();
                let mut hinted = Vec::new();
                g.take(
                    max,
                    |k| readiness(k, &dropped, &later),
                    |k| hinted.push(k),
                    &mut out,
                    &mut set_aside,
                );
                // The read-ahead names only messages its groups held:
                // waiting, or dropped and not yet met by a take.
                for k in &hinted {
                    assert!(
                        waiting.contains(k) || dropped.contains(k),
                        "{k} hinted but not in a group"
                    );
                }
                assert!(out.len() <= max);
                assert!(order == GroupOrder::Fair || set_aside.is_empty());
                for &(gi, key) in &set_aside {
                    assert!(
                        later.contains(&key) && waiting.remove(&key),
                        "{key} set aside"
                    );
                    aside.insert(key, gi);
                }
                // What was set aside was waiting before the take.
                let mut before = waiting.clone();
                before.extend(set_aside.iter().map(|&(_, k)| k));
                let ready = ready_count(order, &group_of, &before, &flying, &dropped, &later);
                assert!(
                    out.len() == max || out.len() == ready,
                    "took {} of {ready} ready, max {max}",
                    out.len()
                );
                for (i, &(gi, seq, key)) in out.iter().enumerate() {
                    assert_eq!(seq, key);
                    assert!(waiting.remove(&seq), "{seq} delivered but not waiting");
                    assert!(!dropped.contains(&seq));
                    assert_eq!(g.name(gi), Some(group_of[&seq].as_str()));
                    if order == GroupOrder::Fifo {
                        // Every earlier message of its group is settled, or
                        // delivered just before it in this take.
                        let name = &group_of[&seq];
                        let earlier_live =
                            |s: &u64| *s < seq && &group_of[s] == name && !dropped.contains(s);
                        assert!(!waiting.iter().any(earlier_live), "{seq} overtook");
                        let in_this_take: BTreeSet<u64> = out[..i].iter().map(|t| t.1).collect();
                        assert!(
                            flying
                                .keys()
                                .filter(|s| &group_of[*s] == name)
                                .all(|s| in_this_take.contains(s)),
                            "{seq} delivered while its group flies"
                        );
                    }
                    flying.insert(seq, gi);
                }
            }
            Step::Return(i) if !flying.is_empty() => {
                let (&seq, &gi) = flying.iter().nth(i % flying.len()).unwrap();
                flying.remove(&seq);
                g.returned(gi, seq, seq);
                waiting.insert(seq);
            }
            Step::Settle(i) if !flying.is_empty() => {
                let (&seq, &gi) = flying.iter().nth(i % flying.len()).unwrap();
                flying.remove(&seq);
                g.settled(gi);
            }
            Step::Drop(i) if !waiting.is_empty() => {
                // As the shard does: a waiting message that goes wakes its
                // group, which may have slept on it.
                let seq = *waiting.iter().nth(i % waiting.len()).unwrap();
                waiting.remove(&seq);
                dropped.insert(seq);
                if let Some(gi) = g.find(&group_of[&seq]) {
                    g.wake(gi);
                }
            }
            Step::Delay(i) if !waiting.is_empty() => {
                let seq = *waiting.iter().nth(i % waiting.len()).unwrap();
                later.insert(seq);
            }
            Step::Undelay(i) if !later.is_empty() => {
                let seq = *later.iter().nth(i % later.len()).unwrap();
                later.remove(&seq);
                if let Some(gi) = aside.remove(&seq) {
                    // As the shard does: a message set aside is back once
                    // it can be delivered.
                    g.returned(gi, seq, seq);
                    waiting.insert(seq);
                } else if let Some(gi) = g.find(&group_of[&seq]) {
                    g.wake(gi);
                }
            }
            Step::Return(_)
            | Step::Settle(_)
            | Step::Drop(_)
            | Step::Delay(_)
            | Step::Undelay(_) => {}
        }
        let groups_flying: BTreeSet<&String> = flying
            .keys()
            .chain(aside.keys())
            .map(|s| &group_of[s])
            .collect();
        assert_eq!(g.groups_in_flight(), groups_flying.len());
    }
    // Nothing lost: settle what flies, wake what waits, then every waiting
    // message comes out.
    for (_, gi) in std::mem::take(&mut flying) {
        g.settled(gi);
    }
    for seq in std::mem::take(&mut later) {
        if let Some(gi) = aside.remove(&seq) {
            g.returned(gi, seq, seq);
            waiting.insert(seq);
        } else if let Some(gi) = g.find(&group_of[&seq]) {
            g.wake(gi);
        }
    }
    let mut out = Vec::new();
    while !waiting.is_empty() {
        out.clear();
        g.take(
            usize::MAX,
            |k| readiness(k, &dropped, &later),
            |_| {},
            &mut out,
            &mut Vec::new(),
        );
        assert!(!out.is_empty(), "waiting {waiting:?} never delivered");
        for &(gi, seq, _) in &out {
            assert!(waiting.remove(&seq));
            g.settled(gi);
        }
    }
    out.clear();
    g.take(
        usize::MAX,
        |k| readiness(k, &dropped, &later),
        |_| {},
        &mut out,
        &mut Vec::new(),
    );
    assert!(out.is_empty());
    assert!(g.is_empty(), "every group forgotten once empty");
}

proptest! {
    #[test]
    fn fifo_groups_match_the_model(steps in proptest::collection::vec(step(), 0..120)) {
        run(GroupOrder::Fifo, &steps);
    }

    #[test]
    fn fair_groups_match_the_model(steps in proptest::collection::vec(step(), 0..120)) {
        run(GroupOrder::Fair, &steps);
    }
}

#[test]
fn a_message_pushed_in_flight_locks_its_group_until_back() {
    let mut g = Groups::new(GroupOrder::Fifo);
    let a = g.push_taken(b"a");
    g.push(b"a", 5, 5);
    assert_eq!(g.groups_in_flight(), 1);
    assert!(take(&mut g, 10).is_empty(), "a flies");
    g.returned(a, 2, 2);
    assert_eq!(
        take(&mut g, 10).iter().map(|t| t.2).collect::<Vec<_>>(),
        [2, 5]
    );
}

#[test]
fn a_message_retaken_while_waiting_locks_its_fifo_group_until_back() {
    let mut g = Groups::new(GroupOrder::Fifo);
    g.push(b"a", 0, 0);
    g.push(b"a", 1, 1);
    g.push(b"b", 2, 2);
    let first = take(&mut g, 2);
    let a = first[0].0;
    assert_eq!(first.iter().map(|t| t.2).collect::<Vec<_>>(), [0, 1]);
    // Both come back; then 1 is leased again without a take: the group
    // is offered (in the turn) but locked, so a take passes it by.
    g.returned(a, 0, 0);
    g.returned(a, 1, 1);
    g.retaken(a, 1);
    assert_eq!(g.groups_in_flight(), 1);
    let second = take(&mut g, 10);
    assert_eq!(names(&g, &second), ["b"], "a is locked while 1 flies");
    // 1 is back: 0 and then 1, in send order.
    g.returned(a, 1, 1);
    let third = take(&mut g, 10);
    assert_eq!(third.iter().map(|t| t.2).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn a_fair_message_retaken_counts_in_flight_and_comes_back() {
    let mut g = Groups::new(GroupOrder::Fair);
    g.push(b"a", 0, 0);
    g.push(b"a", 1, 1);
    let a = g.find("a").unwrap();
    g.retaken(a, 0);
    // No lock: 1 is delivered while 0 flies, and 0 is not delivered twice.
    let first = take(&mut g, 10);
    assert_eq!(first.iter().map(|t| t.2).collect::<Vec<_>>(), [1]);
    assert!(take(&mut g, 10).is_empty());
    g.returned(a, 0, 0);
    let second = take(&mut g, 10);
    assert_eq!(second.iter().map(|t| t.2).collect::<Vec<_>>(), [0]);
}

#[test]
fn names_compare_as_their_bytes() {
    let names: Vec<Vec<u8>> = (0..=12)
        .flat_map(|n| {
            let base: Vec<u8> = (0..n).map(|i| b'a' + i as u8).collect();
            // The name, and the name with each byte changed in turn.
            let mut all = vec![base.clone()];
            for i in 0..n {
                let mut v = base.clone();
                v[i] = b'Z';
                all.push(v);
            }
            all
        })
        .collect();
    for a in &names {
        for b in &names {
            assert_eq!(same_bytes(a, b), a == b, "{a:?} {b:?}");
        }
    }
}

#[test]
fn groups_are_found_by_their_whole_name() {
    // Names of 0 to 20 bytes, each also with one byte changed in turn, and
    // with a zero byte added (which the zero-padded head of a short name
    // does not tell apart): each is a group of its own, found as itself.
    let mut names: Vec<Vec<u8>> = Vec::new();
    for n in 0..=20 {
        let base: Vec<u8> = (0..n).map(|i| b'a' + i as u8).collect();
        for i in 0..n {
            let mut v = base.clone();
            v[i] = b'Z';
            names.push(v);
        }
        let mut padded = base.clone();
        padded.push(0);
        names.push(padded);
        names.push(base);
    }
    names.sort();
    names.dedup();
    let mut g: Groups<u64> = Groups::new(GroupOrder::Fifo);
    let made: Vec<GroupIndex> = names
        .iter()
        .zip(0..)
        .map(|(name, seq)| g.push(name, seq, seq))
        .collect();
    for (name, &i) in names.iter().zip(&made) {
        assert_eq!(g.lookup(g.hasher.hash(name), name), Some(i), "{name:?}");
        // Pushed again, to the same group.
        assert_eq!(g.push(name, 1_000 + u64::from(i), 0), i, "{name:?}");
    }
    let distinct: std::collections::BTreeSet<_> = made.iter().collect();
    assert_eq!(distinct.len(), names.len());
}

#[test]
fn heads_pack_a_names_first_bytes() {
    assert_eq!(head_of(b""), 0);
    assert_eq!(head_of(b"a"), 0x61);
    assert_eq!(head_of(b"ab"), 0x6261);
    assert_eq!(head_of(b"abcd"), 0x6463_6261);
    assert_eq!(head_of(b"abcdefg"), 0x0067_6665_6463_6261);
    assert_eq!(head_of(b"abcdefgh"), 0x6867_6665_6463_6261);
    assert_eq!(head_of(b"abcdefghijk"), head_of(b"abcdefgh"));
}
