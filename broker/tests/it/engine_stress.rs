//! Bounded multi-threaded stress: 2 shards on 2 threads, each sending,
//! receiving (steals across shards) and deleting (forwarded deletes), with
//! leases short enough to expire and redeliver. At the end: nothing lost,
//! every message deleted exactly once, nothing delivered after its delete,
//! and every shard's accounting exact.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use bytes::Bytes;
use sluice_broker::engine::mesh::doorbell::{self, Wake};
use sluice_broker::engine::{Op, OpResult, Registry, RegistryConfig, Shard, ShardConfig, ShardMsg};
use sluice_protocol::{
    AttributeUpdate, DeleteRequest, ErrorCode, QueueAttributesRequest, ReceiveRequest, SendEntry,
};

use crate::engine_util::{qn, send_op};

const SHARDS: usize = 2;
/// Only shard 0 produces, so shard 1's consumer must steal and forward its
/// deletes to the owner.
const PRODUCED: u64 = 3000;
const BATCH: u64 = 10;
const LOOPS_MAX: u64 = 3_000_000;

use sluice_broker::engine::mesh::doorbell::NoWake;

#[derive(Default)]
struct Log {
    /// body id -> delivery numbers seen.
    deliveries: HashMap<u64, Vec<u64>>,
    /// body id -> delivery number whose receipt deleted it.
    deleted: HashMap<u64, u64>,
    /// Deliveries whose owner was not the receiving shard (steals).
    stolen: usize,
}

fn worker(
    mut shard: Shard,
    log: Arc<Mutex<Log>>,
    deleted: Arc<AtomicUsize>,
    done: Arc<[AtomicBool; SHARDS]>,
) -> Shard {
    let me = usize::from(shard.id());
    let total = PRODUCED as usize;
    let to_send = if me == 0 { PRODUCED } else { 0 };
    let mut now_ns = 1_000_000_000u64;
    let mut next_ticket = 1u64;
    let mut sent = 0u64;
    let mut receiving = false;
    // ticket -> (body id, delivery) of each delete in flight.
    let mut deletes: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    let mut sends_in_flight = 0usize;
    let mut out = Vec::new();
    let handle = |r: (u64, OpResult),
                  receiving: &mut bool,
                  deletes: &mut HashMap<u64, Vec<(u64, u64)>>,
                  sends: &mut usize,
                  shard: &mut Shard,
                  next_ticket: &mut u64,
                  now_ns: u64,
                  wall_ms: u64| {
        let (ticket, result) = r;
        match result {
            OpResult::Sent(r) => {
                assert!(r.iter().all(Result::is_ok));
                *sends -= 1;
            }
            OpResult::Received(msgs) => {
                *receiving = false;
                if msgs.is_empty() {
                    return None;
                }
                let mut receipts = Vec::new();
                let mut keys = Vec::new();
                {
                    let mut log = log.lock().unwrap();
                    for m in &msgs {
                        let body = u64::from_le_bytes(m.body[..8].try_into().unwrap());
                        log.deliveries.entry(body).or_default().push(m.delivery());
                        if usize::from(m.receipt.shard) != me {
                            log.stolen += 1;
                        }
                        // Leave every 7th first delivery undeleted: its lease
                        // expires and another receive (maybe the other
                        // shard's) gets it again.
                        if m.delivery() == 1 && body % 7 == 0 {
                            continue;
                        }
                        receipts.push(m.receipt);
                        keys.push((body, m.delivery()));
                    }
                }
                if receipts.is_empty() {
                    return None;
                }
                let t = *next_ticket;
                *next_ticket += 1;
                deletes.insert(t, keys);
                return shard
                    .submit(
                        t,
                        Op::Delete(DeleteRequest {
                            queue: qn("q"),
                            receipts,
                        }),
                        now_ns,
                        wall_ms,
                    )
                    .map(|r| (t, r));
            }
            OpResult::Deleted(results) => {
                let keys = deletes.remove(&ticket).expect("delete ticket");
                let mut log = log.lock().unwrap();
                for ((body, delivery), r) in keys.into_iter().zip(results) {
                    match r {
                        Ok(()) => {
                            assert!(
                                log.deleted.insert(body, delivery).is_none(),
                                "deleted twice"
                            );
                            deleted.fetch_add(1, Ordering::SeqCst);
                        }
                        // Our lease expired and someone received it since.
                        Err(e) if e.code() == ErrorCode::StaleReceipt => {}
                        // ... and deleted it since, before our (forwarded)
                        // delete reached the owner: a later delivery's
                        // delete is logged already (it completed first).
                        Err(e) if e.code() == ErrorCode::Gone => assert!(
                            log.deleted.get(&body).is_some_and(|&d| d > delivery),
                            "{body}: Gone, but no later delivery deleted it"
                        ),
                        Err(e) => panic!("{body}: {e}"),
                    }
                }
            }
            other => panic!("{other:?}"),
        }
        None
    };
    for _ in 0..LOOPS_MAX {
        now_ns += 50_000;
        let wall_ms = 1_700_000_000_000 + now_ns / 1_000_000;
        if sent < to_send && sends_in_flight < 2 {
            let entries = (0..BATCH)
                .map(|i| {
                    let id = (me as u64) << 32 | (sent + i);
                    let mut body = id.to_le_bytes().to_vec();
                    body.extend_from_slice(&[0u8; 92]);
                    SendEntry {
                        body: Bytes::from(body),
                        ..Default::default()
                    }
                })
                .collect::<Vec<_>>();
            sent += BATCH;
            let t = next_ticket;
            next_ticket += 1;
            sends_in_flight += 1;
            if let Some(r) = shard.submit(t, send_op("q", &entries), now_ns, wall_ms) {
                handle(
                    (t, r),
                    &mut receiving,
                    &mut deletes,
                    &mut sends_in_flight,
                    &mut shard,
                    &mut next_ticket,
                    now_ns,
                    wall_ms,
                );
            }
        }
        if !receiving {
            receiving = true;
            let t = next_ticket;
            next_ticket += 1;
            let op = Op::Receive(ReceiveRequest {
                queue: qn("q"),
                max_messages: 16,
                visibility_timeout_ms: Some(5),
                wait_ms: Some(0),
                bind_leases: false,
                with_source: false,
            });
            let mut next = shard.submit(t, op, now_ns, wall_ms).map(|r| (t, r));
            while let Some(r) = next {
                next = handle(
                    r,
                    &mut receiving,
                    &mut deletes,
                    &mut sends_in_flight,
                    &mut shard,
                    &mut next_ticket,
                    now_ns,
                    wall_ms,
                );
            }
        }
        shard.poll(now_ns, wall_ms);
        shard.drain_completions(&mut out);
        for r in out.drain(..) {
            let mut next = Some(r);
            while let Some(r) = next {
                next = handle(
                    r,
                    &mut receiving,
                    &mut deletes,
                    &mut sends_in_flight,
                    &mut shard,
                    &mut next_ticket,
                    now_ns,
                    wall_ms,
                );
            }
        }
        if deleted.load(Ordering::SeqCst) == total
            && deletes.is_empty()
            && !receiving
            && sends_in_flight == 0
        {
            done[me].store(true, Ordering::SeqCst);
            if done.iter().all(|d| d.load(Ordering::SeqCst)) && !shard.has_outbound() {
                return shard;
            }
        }
        thread::yield_now();
    }
    panic!(
        "shard {me} did not finish: {} of {total} deleted",
        deleted.load(Ordering::SeqCst)
    );
}

#[test]
fn two_shards_on_two_threads_lose_nothing() {
    let registry = Arc::new(Registry::new(RegistryConfig {
        shards: SHARDS as u16,
        seed: 9,
        ..Default::default()
    }));
    let wakers = (0..SHARDS)
        .map(|_| Box::new(NoWake) as Box<dyn Wake>)
        .collect();
    let links = doorbell::mesh::<ShardMsg>(SHARDS, 16, wakers);
    let mut shards: Vec<Shard> = links
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            Shard::new(
                ShardConfig {
                    shard: i as u16,
                    seed: i as u64,
                },
                l,
                registry.clone(),
                1_000_000_000,
                1_700_000_000_000,
            )
        })
        .collect();
    let r = shards[0].submit(
        0,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: AttributeUpdate::default(),
        }),
        1_000_000_000,
        1_700_000_000_000,
    );
    assert!(matches!(r, Some(OpResult::QueueCreated { .. })));
    let log = Arc::new(Mutex::new(Log::default()));
    let deleted = Arc::new(AtomicUsize::new(0));
    let done = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let handles: Vec<_> = shards
        .drain(..)
        .map(|s| {
            let (log, deleted, done) = (log.clone(), deleted.clone(), done.clone());
            thread::spawn(move || worker(s, log, deleted, done))
        })
        .collect();
    let mut shards: Vec<Shard> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    let log = log.lock().unwrap();
    let total = PRODUCED;
    assert_eq!(
        log.deleted.len() as u64,
        total,
        "every message deleted exactly once"
    );
    for (body, seen) in &log.deliveries {
        let at = log.deleted[body];
        assert!(
            seen.iter().all(|&d| d <= at),
            "{body}: delivered {seen:?} after its delete at {at}"
        );
    }
    assert!(
        log.deliveries.values().any(|d| d.len() > 1),
        "some leases expired and redelivered"
    );
    let mut sum = sluice_protocol::QueueStats::default();
    for s in &mut shards {
        s.check_invariants().unwrap();
        let st = s.local_stats("q").unwrap();
        assert!(st.identity_holds());
        sum.merge(&st);
    }
    assert_eq!((sum.sent, sum.deleted), (total, total));
    assert_eq!((sum.visible, sum.delayed, sum.in_flight), (0, 0, 0));
    assert_eq!(
        sum.received,
        log.deliveries.values().map(|d| d.len() as u64).sum::<u64>()
    );
}
