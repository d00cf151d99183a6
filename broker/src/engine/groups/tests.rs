//! The groups against a model: FIFO order and lock, fair turns, nothing
//! lost or delivered twice, empty groups forgotten.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::{GroupIndex, GroupOrder, Groups};

/// Takes up to `max` with every message live.
fn take(g: &mut Groups<u64>, max: usize) -> Vec<(GroupIndex, u64, u64)> {
    let mut out = Vec::new();
    g.take(max, |_| true, &mut out);
    out
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
        g.push("a", seq, seq);
    }
    g.push("b", 3, 3);
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
        g.push("a", seq * 10, seq);
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
        g.push("noisy", seq, seq);
    }
    g.push("quiet1", 100, 100);
    g.push("quiet2", 101, 101);
    let taken = take(&mut g, 4);
    assert_eq!(names(&g, &taken), ["noisy", "quiet1", "quiet2", "noisy"]);
    assert_eq!(g.groups_in_flight(), 3, "no lock, but counted");
}

#[test]
fn gone_messages_are_skipped_and_empty_groups_forgotten() {
    let mut g = Groups::new(GroupOrder::Fifo);
    g.push("a", 0, 0);
    g.push("a", 1, 1);
    g.push("b", 2, 2);
    let mut out = Vec::new();
    g.take(10, |k| k != 0, &mut out);
    assert_eq!(out.iter().map(|t| t.2).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(g.len(), 2);
    g.settled(out[0].0);
    assert_eq!(g.find("a"), None, "nothing left of a");
    g.settled(out[1].0);
    assert!(g.is_empty() && g.groups_in_flight() == 0);
    // An index is reused once its group is gone.
    let c = g.push("c", 3, 3);
    assert!(c <= 1, "{c}");
    assert_eq!(g.name(c), Some("c"));
}

#[derive(Clone, Debug)]
enum Step {
    Push(u8),
    Take(usize),
    Return(usize),
    Settle(usize),
    Drop(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..5).prop_map(Step::Push),
        2 => (1usize..6).prop_map(Step::Take),
        1 => any::<usize>().prop_map(Step::Return),
        1 => any::<usize>().prop_map(Step::Settle),
        1 => any::<usize>().prop_map(Step::Drop),
    ]
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
    for s in steps {
        match *s {
            Step::Push(n) => {
                let name = format!("g{n}");
                g.push(&name, next_seq, next_seq);
                group_of.insert(next_seq, name);
                waiting.insert(next_seq);
                next_seq += 1;
            }
            Step::Take(max) => {
                let mut out = Vec::new();
                g.take(max, |k| !dropped.contains(&k), &mut out);
                assert!(out.len() <= max);
                let ready = waiting
                    .iter()
                    .filter(|s| !dropped.contains(*s))
                    .filter(|s| {
                        order == GroupOrder::Fair
                            || !flying.keys().any(|f| group_of[f] == group_of[*s])
                    })
                    .count();
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
                let seq = *waiting.iter().nth(i % waiting.len()).unwrap();
                waiting.remove(&seq);
                dropped.insert(seq);
            }
            Step::Return(_) | Step::Settle(_) | Step::Drop(_) => {}
        }
        let groups_flying: BTreeSet<&String> = flying.keys().map(|s| &group_of[s]).collect();
        assert_eq!(g.groups_in_flight(), groups_flying.len());
    }
    // Nothing lost: settle what flies, then every waiting message comes out.
    for (_, gi) in std::mem::take(&mut flying) {
        g.settled(gi);
    }
    let mut out = Vec::new();
    while !waiting.is_empty() {
        out.clear();
        g.take(usize::MAX, |k| !dropped.contains(&k), &mut out);
        assert!(!out.is_empty(), "waiting {waiting:?} never delivered");
        for &(gi, seq, _) in &out {
            assert!(waiting.remove(&seq));
            g.settled(gi);
        }
    }
    out.clear();
    g.take(usize::MAX, |k| !dropped.contains(&k), &mut out);
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
