//! Eight consumers on a FIFO queue of 100 groups × 1,000 messages, on three
//! shards, with producers sending (and resending) while the consumers
//! take, process, delete, release, stall and die at random, on a fixed,
//! printed seed:
//!
//! - every group's messages are processed in send order: each message's
//!   first completed processing comes after that of every earlier message
//!   of its group;
//! - nothing is lost: every message is processed and deleted;
//! - every duplicate send within the dedup window is dropped.
//!
//! A consumer works through its batch in order, as a FIFO consumer must:
//! when it gives a message up (releases it, stalls on it, or dies), it
//! gives up the rest of that group's messages in the batch with it.

use std::collections::HashMap;

use bytes::Bytes;
use sluice_broker::engine::random::Rng;
use sluice_broker::engine::{Cluster, Op, OpResult, RegistryConfig};
use sluice_protocol::{
    AttributeUpdate, ChangeVisibilityRequest, DeleteRequest, MessageGroupId, QueueKind, QueueName,
    Receipt, ReceiveRequest, SendEntry, SendRequest, VisibilityChange,
};

const SEED: u64 = 0x5EED_F1F0_0000_0008;
const GROUPS: usize = 100;
const PER_GROUP: usize = 1_000;
const CONSUMERS: usize = 8;
const SHARDS: u16 = 3;
const LEASE_MS: u32 = 1_000;
/// Simulated ms per round.
const TICK_MS: u64 = 10;
/// Rounds at most (bounded: the test fails rather than loops).
const ROUNDS_MAX: usize = 60_000;

/// True with probability `per_mille` / 1000.
fn chance(rng: &mut Rng, per_mille: u64) -> bool {
    rng.below_inclusive(999) < per_mille
}

fn queue() -> QueueName {
    QueueName::from_static("work.fifo")
}

fn body(g: usize, i: usize) -> Bytes {
    Bytes::from(format!("{g}:{i}"))
}

fn parse(body: &[u8]) -> (usize, usize) {
    let s = std::str::from_utf8(body).unwrap();
    let (g, i) = s.split_once(':').unwrap();
    (g.parse().unwrap(), i.parse().unwrap())
}

fn entry(g: usize, i: usize) -> SendEntry {
    SendEntry::new(body(g, i))
        .group(MessageGroupId::new(&format!("g{g}")).unwrap())
        .dedup_key(format!("{g}/{i}"))
}

/// The consumers' shared record of what was processed.
#[derive(Default)]
struct Ledger {
    /// Per group, how many of its messages completed processing at least
    /// once (they complete in order, so this is the next one expected).
    done: Vec<usize>,
    completions: usize,
    deleted: usize,
}

/// A consumer: the shard its connection is on, and what it holds.
struct Consumer {
    shard: usize,
}

#[test]
fn eight_consumers_keep_every_group_in_order_and_lose_nothing() {
    println!("seed {SEED:#x}");
    let mut rng = Rng::new(SEED);
    let mut c = Cluster::new(RegistryConfig {
        shards: SHARDS,
        seed: 42,
        ..Default::default()
    });
    let created = c.call(
        0,
        Op::CreateQueue(sluice_protocol::QueueAttributesRequest {
            queue: queue(),
            attributes: AttributeUpdate {
                kind: Some(QueueKind::Fifo),
                ..AttributeUpdate::default()
            },
        }),
    );
    assert!(
        matches!(created, OpResult::QueueCreated { .. }),
        "{created:?}"
    );
    let consumers: Vec<Consumer> = (0..CONSUMERS)
        .map(|i| Consumer {
            shard: i % usize::from(SHARDS),
        })
        .collect();
    let mut ledger = Ledger {
        done: vec![0; GROUPS],
        ..Ledger::default()
    };
    // Producers: the next message of each group, and when each was sent.
    let mut next = vec![0usize; GROUPS];
    let mut sent_at: HashMap<(usize, usize), u64> = HashMap::new();
    let mut now_ms = 0u64;
    let (mut duplicates_sent, mut duplicates_dropped) = (0, 0);
    for round in 0..ROUNDS_MAX {
        // A producer sends the next messages of a few groups, and now and
        // then resends one it sent within the last minute.
        let mut batch = Vec::new();
        for _ in 0..20 {
            let g = rng.below_inclusive(GROUPS as u64 - 1) as usize;
            if next[g] < PER_GROUP {
                batch.push(entry(g, next[g]));
                sent_at.insert((g, next[g]), now_ms);
                next[g] += 1;
            }
        }
        let resend = chance(&mut rng, 200).then(|| {
            let g = rng.below_inclusive(GROUPS as u64 - 1) as usize;
            (next[g] > 0)
                .then(|| (g, next[g] - 1))
                .filter(|k| now_ms - sent_at[k] < 60_000)
        });
        let resent = resend.flatten();
        if let Some((g, i)) = resent {
            batch.push(entry(g, i));
        }
        if !batch.is_empty() {
            let shard = rng.below_inclusive(u64::from(SHARDS) - 1) as usize;
            let request = SendRequest::new(queue(), &batch).unwrap();
            let OpResult::Sent(results) = c.call(shard, Op::Send(request)) else {
                panic!("send refused");
            };
            for (k, r) in results.iter().enumerate() {
                let outcome = r.as_ref().expect("every send accepted");
                let is_resend = resent.is_some() && k == results.len() - 1;
                if is_resend {
                    duplicates_sent += 1;
                    duplicates_dropped += usize::from(outcome.duplicate);
                } else {
                    assert!(!outcome.duplicate, "a first send is no duplicate");
                }
            }
        }
        for consumer in &consumers {
            consume(&mut c, &mut rng, consumer, &mut ledger);
        }
        c.advance_ms(TICK_MS);
        now_ms += TICK_MS;
        if round % 2_000 == 0 {
            c.check_invariants().unwrap();
        }
        let all_sent = next.iter().all(|&n| n == PER_GROUP);
        if all_sent && ledger.deleted == GROUPS * PER_GROUP {
            println!(
                "done in {round} rounds ({now_ms} ms simulated): {} completions, \
                 {duplicates_sent} resends",
                ledger.completions
            );
            break;
        }
    }
    c.check_invariants().unwrap();
    assert!(
        ledger.done.iter().all(|&d| d == PER_GROUP),
        "every message of every group processed: {:?}",
        ledger.done.iter().filter(|&&d| d < PER_GROUP).count()
    );
    assert_eq!(ledger.deleted, GROUPS * PER_GROUP, "every message deleted");
    assert!(duplicates_sent > 100, "the run resent ({duplicates_sent})");
    assert_eq!(duplicates_dropped, duplicates_sent, "every resend dropped");
    let stats = c.stats("work.fifo").unwrap();
    assert_eq!(stats.sent, (GROUPS * PER_GROUP) as u64);
    assert_eq!((stats.visible, stats.in_flight, stats.delayed), (0, 0, 0));
}

/// What a consumer does with one message of its batch.
enum Fate {
    /// Processes it and deletes it.
    Done,
    /// Processes it, and dies before the delete (at-least-once).
    DiesAfter,
    /// Gives it up: releases it (visibility 0).
    Release,
    /// Gives it up: stalls, and its lease runs out.
    Stall,
    /// Gives it up: dies first; its connection's bound leases are released
    /// (half the time) or run out.
    Dies,
}

fn consume(c: &mut Cluster, rng: &mut Rng, consumer: &Consumer, ledger: &mut Ledger) {
    let receive = Op::Receive(ReceiveRequest {
        queue: queue(),
        max_messages: 10,
        visibility_timeout_ms: Some(LEASE_MS),
        wait_ms: Some(0),
        bind_leases: false,
        with_source: false,
    });
    let OpResult::Received(got) = c.call(consumer.shard, receive) else {
        panic!("receive refused");
    };
    let mut deletes: Vec<Receipt> = Vec::new();
    let mut releases: Vec<Receipt> = Vec::new();
    let mut abandons: Vec<Receipt> = Vec::new();
    // Groups given up in this batch: their later messages are given up too.
    let mut given_up: Vec<usize> = Vec::new();
    let mut dead = false;
    for m in &got {
        let (g, i) = parse(&m.body);
        assert_eq!(
            m.group.as_ref().map(MessageGroupId::as_str),
            Some(format!("g{g}").as_str())
        );
        if dead || given_up.contains(&g) {
            if dead {
                abandons.push(m.receipt);
            } else {
                releases.push(m.receipt);
            }
            continue;
        }
        let fate = match rng.below_inclusive(999) {
            0..=939 => Fate::Done,
            940..=959 => Fate::Release,
            960..=979 => Fate::Stall,
            980..=989 => Fate::DiesAfter,
            _ => Fate::Dies,
        };
        if matches!(fate, Fate::Done | Fate::DiesAfter) {
            // Processing completes: its first completion must come after
            // every earlier message's of its group.
            assert!(
                i <= ledger.done[g],
                "group {g}: message {i} processed before message {}",
                ledger.done[g]
            );
            if i == ledger.done[g] {
                ledger.done[g] += 1;
            }
            ledger.completions += 1;
        }
        match fate {
            Fate::Done => deletes.push(m.receipt),
            Fate::Release => {
                releases.push(m.receipt);
                given_up.push(g);
            }
            Fate::Stall => given_up.push(g),
            Fate::DiesAfter | Fate::Dies => {
                dead = true;
                abandons.push(m.receipt);
            }
        }
    }
    if !deletes.is_empty() {
        let n = deletes.len();
        let r = c.call(
            consumer.shard,
            Op::Delete(DeleteRequest {
                queue: queue(),
                receipts: deletes,
            }),
        );
        let OpResult::Deleted(results) = r else {
            panic!("delete refused: {r:?}");
        };
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        ledger.deleted += n;
    }
    if !releases.is_empty() {
        let entries = releases
            .into_iter()
            .map(|receipt| VisibilityChange {
                receipt,
                visibility_timeout_ms: 0,
            })
            .collect();
        c.call(
            consumer.shard,
            Op::ChangeVisibility(ChangeVisibilityRequest {
                queue: queue(),
                entries,
            }),
        );
    }
    // A dead consumer's leases: released with its connection half the time
    // (bound leases), left to run out otherwise.
    if !abandons.is_empty() && chance(rng, 500) {
        c.call(
            consumer.shard,
            Op::Abandon(DeleteRequest {
                queue: queue(),
                receipts: abandons,
            }),
        );
    }
}
