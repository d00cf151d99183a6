//! The simulated world: the shards, the clock, the clients and the
//! scheduler that picks what happens next.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sluice_protocol::{
    AttributeUpdate, Backoff, DeleteRequest, QueueAttributesRequest, QueueKind, RedrivePolicy,
};
use sluice_protocol::{Millis, Setting};

use super::oracle::{Counts, Held, Kind, Oracle, Pending};
use super::queues::{DLQ, MAX_RECEIVES, QUEUES, RETENTION_MS_MIN, SIDE, WORK, qn};
use crate::engine::cluster::check_shards;
use crate::engine::mesh::doorbell::{self, NoWake, Wake};
use crate::engine::random::{Rng, splitmix64};
use crate::engine::{Op, OpResult, Registry, RegistryConfig, Shard, ShardConfig};

mod requests;

const NS_PER_MS: u64 = 1_000_000;
/// Ring capacity between shards: small, so full rings and the overflow
/// queues behind them are exercised.
const RING_CAPACITY: usize = 4;
/// Clients (connections) at once.
const CLIENTS: usize = 6;
/// Steps between settled checkpoints (the whole-state checks).
const CHECKPOINT_EVERY: u64 = 48;
/// Steps between full internal checks of every shard.
const DEEP_CHECK_EVERY: u64 = 16;
/// Lines of history kept for a failure report.
const RECENT_MAX: usize = 400;
/// Bound receipts a client keeps (the oldest go first), so a disconnect's
/// release stays one batch per queue.
const BOUND_MAX: usize = 64;

/// One connection: its shard, its requests in flight and the receipts it
/// bound to itself.
#[derive(Debug)]
struct Client {
    shard: usize,
    tickets: Vec<u64>,
    bound: Vec<Held>,
}

pub(super) struct World {
    rng: Rng,
    shards: Vec<Shard>,
    registry: Arc<Registry>,
    start_ns: u64,
    now_ns: u64,
    wall_ms: u64,
    clients: Vec<Client>,
    pending: HashMap<u64, Pending>,
    next_ticket: u64,
    pub(super) oracle: Oracle,
    recent: VecDeque<String>,
    step: u64,
    completions: Vec<(u64, OpResult)>,
    visibility_ms: HashMap<&'static str, u64>,
    /// Whether receives may bind (see [`super::SimConfig::bound_leases`]),
    /// and the stream of those choices, apart from the scheduler's.
    bind_rng: Option<Rng>,
    /// Whether work and dlq are FIFO queues (see [`super::SimConfig::fifo`]),
    /// and the stream of the sends' groups and keys, apart from the
    /// scheduler's.
    fifo_rng: Option<Rng>,
}

impl World {
    pub(super) fn new(seed: u64, shards: u16, bound_leases: bool, fifo: bool) -> World {
        let mut rng = Rng::new(seed);
        let bind_rng = bound_leases.then(|| Rng::new(splitmix64(&mut (seed ^ 0xb0_7d))));
        let fifo_rng = fifo.then(|| Rng::new(splitmix64(&mut (seed ^ 0xf1_f0))));
        let mut derive = seed ^ 0x51_u64;
        // Tight budgets make sends meet Busy; loose ones let depth limits
        // and retention do the limiting.
        let memory = match rng.below_inclusive(3) {
            0 => 12 * 1024,
            1 => 32 * 1024,
            _ => 1 << 20,
        };
        let registry = Arc::new(Registry::new(RegistryConfig {
            shards,
            seed: splitmix64(&mut derive),
            memory_bytes_max: memory,
            ..RegistryConfig::default()
        }));
        let start_ns = 1_000_000_000;
        let wall_ms = 1_700_000_000_000;
        let wakers = (0..shards)
            .map(|_| Box::new(NoWake) as Box<dyn Wake>)
            .collect();
        let links = doorbell::mesh(usize::from(shards), RING_CAPACITY, wakers);
        let shards_v: Vec<Shard> = links
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                Shard::new(
                    ShardConfig {
                        // At most SIM_SHARDS_MAX shards.
                        shard: i as u16,
                        seed: splitmix64(&mut derive),
                    },
                    l,
                    registry.clone(),
                    start_ns,
                    wall_ms,
                )
            })
            .collect();
        let clients = (0..CLIENTS)
            .map(|i| Client {
                shard: i % usize::from(shards),
                tickets: Vec::new(),
                bound: Vec::new(),
            })
            .collect();
        let mut w = World {
            rng,
            shards: shards_v,
            registry,
            start_ns,
            now_ns: start_ns,
            wall_ms,
            clients,
            pending: HashMap::new(),
            next_ticket: 1,
            oracle: Oracle::default(),
            recent: VecDeque::new(),
            step: 0,
            completions: Vec::new(),
            visibility_ms: HashMap::new(),
            bind_rng,
            fifo_rng,
        };
        let backoff = (w.rng.below_inclusive(1) == 0).then_some(Backoff {
            base: Millis::new(3),
            max: Millis::new(40),
        });
        for q in [DLQ, WORK, SIDE] {
            w.visibility_ms.insert(q, 0);
            let attrs = w.attributes(q, backoff);
            w.visibility_ms.insert(
                q,
                u64::from(attrs.visibility_timeout.map_or(30_000, Millis::get)),
            );
            let r = w.call_settled(Op::CreateQueue(QueueAttributesRequest {
                queue: qn(q),
                attributes: attrs,
            }));
            assert!(
                matches!(r, OpResult::QueueCreated { .. }),
                "creating {q}: {r:?}"
            );
        }
        w
    }

    fn attributes(&self, queue: &str, backoff: Option<Backoff>) -> AttributeUpdate {
        let fifo = (self.fifo_rng.is_some() && queue != SIDE).then_some(QueueKind::Fifo);
        match queue {
            WORK => AttributeUpdate {
                visibility_timeout: Some(Millis::new(50)),
                retention: Some(Millis::new(60_000)),
                message_bytes_max: Some(48),
                max_depth: Some(40),
                dedup_window: Some(Millis::new(100)),
                redrive: Setting::Set(RedrivePolicy {
                    dead_letter_queue: DLQ.into(),
                    // A small constant: fits u16.
                    max_receives: MAX_RECEIVES as u16,
                }),
                backoff: backoff.into(),
                kind: fifo,
                content_based_dedup: fifo.map(|_| true),
                ..AttributeUpdate::default()
            },
            DLQ => AttributeUpdate {
                visibility_timeout: Some(Millis::new(30)),
                retention: Some(Millis::new(120_000)),
                kind: fifo,
                ..AttributeUpdate::default()
            },
            _ => AttributeUpdate {
                visibility_timeout: Some(Millis::new(20)),
                retention: Some(Millis::new(60_000)),
                dedup_window: Some(Millis::new(50)),
                ..AttributeUpdate::default()
            },
        }
    }

    /// Submits on shard 0 and settles everything (set-up only).
    fn call_settled(&mut self, op: Op) -> OpResult {
        let t = self.next_ticket;
        self.next_ticket += 1;
        let r = self.shards[0].submit(t, op, self.now_ns, self.wall_ms);
        self.settle();
        let mut out = Vec::new();
        for s in &mut self.shards {
            s.drain_completions(&mut out);
        }
        r.or_else(|| out.into_iter().find(|(x, _)| *x == t).map(|(_, r)| r))
            .expect("set-up operations complete")
    }

    pub(super) fn recent(&self) -> Vec<String> {
        self.recent.iter().cloned().collect()
    }

    pub(super) fn counts(&self) -> &Counts {
        &self.oracle.counts
    }

    pub(super) fn virtual_ms(&self) -> u64 {
        (self.now_ns - self.start_ns) / NS_PER_MS
    }

    fn note(&mut self, line: String) {
        if self.recent.len() == RECENT_MAX {
            self.recent.pop_front();
        }
        self.recent
            .push_back(format!("#{} t={}ms {line}", self.step, self.virtual_ms()));
    }

    fn pick(&mut self, n: usize) -> usize {
        // n is small: a usize fits u64 and back.
        self.rng.below_inclusive(n as u64 - 1) as usize
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.rng.below_inclusive(999) < per_mille
    }

    /// One scheduler step, then the checks.
    pub(super) fn step(&mut self) -> Result<(), String> {
        let roll = self.rng.below_inclusive(999);
        match roll {
            0..=379 => self.submit_random(),
            380..=739 => {
                let s = self.pick(self.shards.len());
                self.note(format!("poll shard {s}"));
                self.shards[s].poll(self.now_ns, self.wall_ms);
            }
            740..=914 => {
                let ms = 1 + self.rng.below_inclusive(20);
                self.advance(ms);
            }
            915..=917 => {
                // Long enough for leases, backoffs and delays; now and then
                // past retention.
                let ms = if self.chance(60) {
                    RETENTION_MS_MIN + self.rng.below_inclusive(5_000)
                } else {
                    100 + self.rng.below_inclusive(3_000)
                };
                self.advance(ms);
            }
            918..=934 => self.disconnect(),
            _ => {
                let s = self.pick(self.shards.len());
                self.note(format!("poll shard {s} until idle"));
                while self.shards[s].poll(self.now_ns, self.wall_ms) > 0 {}
            }
        }
        self.collect()?;
        if std::env::var("SLUICE_SIM_WATCH_STEPS").is_ok() {
            let views: Vec<_> = self.shards.iter().flat_map(Shard::messages).collect();
            self.oracle.watch_views(&views, self.step);
        }
        self.check_identity()?;
        if self.step % DEEP_CHECK_EVERY == 0 {
            for s in &self.shards {
                s.check_invariants()?;
            }
        }
        if self.step % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
            self.checkpoint()?;
        }
        self.step += 1;
        Ok(())
    }

    /// The end: settle, and one last whole-state check.
    pub(super) fn finish(&mut self) -> Result<(), String> {
        self.checkpoint()
    }

    fn advance(&mut self, ms: u64) {
        self.note(format!("advance {ms} ms"));
        self.now_ns += ms * NS_PER_MS;
        self.wall_ms += ms;
        self.oracle.counts.virtual_ms += ms;
    }

    /// A client goes away with its requests in flight.
    fn disconnect(&mut self) {
        let c = self.pick(self.clients.len());
        let tickets = std::mem::take(&mut self.clients[c].tickets);
        let shard = self.clients[c].shard;
        self.note(format!(
            "client {c} on shard {shard} disconnects with {} requests in flight",
            tickets.len()
        ));
        self.oracle.counts.disconnects += 1;
        for t in tickets {
            self.shards[shard].cancel(t);
            if let Some(p) = self.pending.remove(&t) {
                self.oracle.cancelled(&p, self.step);
            }
        }
        self.release_bound(c, shard);
        // It reconnects, perhaps to another shard.
        self.clients[c].shard = self.pick(self.shards.len());
    }

    /// What a closing connection's session does: its bound leases go to
    /// its shard as an abandon per queue, answered to no client (checked by
    /// the oracle all the same).
    fn release_bound(&mut self, c: usize, shard: usize) {
        let bound = std::mem::take(&mut self.clients[c].bound);
        for queue in QUEUES {
            let held: Vec<Held> = bound.iter().copied().filter(|h| h.queue == queue).collect();
            if held.is_empty() {
                continue;
            }
            let ticket = self.next_ticket;
            self.next_ticket += 1;
            self.note(format!(
                "client {c} on shard {shard} closed: releases {} bound leases of {queue} [ticket {ticket}]",
                held.len()
            ));
            let receipts = held.iter().map(|h| h.receipt).collect();
            let kind = Kind::Abandon(
                held.into_iter()
                    .map(|h| (h, self.oracle.snap(&h)))
                    .collect(),
            );
            self.oracle.submitted(&kind, self.now_ns, self.step);
            let op = Op::Abandon(DeleteRequest {
                queue: qn(queue),
                receipts,
            });
            // Nobody waits for it: not among the client's tickets.
            let pending = Pending {
                client: c,
                submitted_ns: self.now_ns,
                submitted_step: self.step,
                kind,
            };
            if let Some(result) = self.shards[shard].submit(ticket, op, self.now_ns, self.wall_ms) {
                self.completions.push((ticket, result));
            }
            self.pending.insert(ticket, pending);
        }
    }

    /// Hands every completed result to the oracle.
    fn collect(&mut self) -> Result<(), String> {
        for s in &mut self.shards {
            s.drain_completions(&mut self.completions);
        }
        let done = std::mem::take(&mut self.completions);
        for (ticket, result) in done {
            let Some(p) = self.pending.remove(&ticket) else {
                // A cancelled ticket's result is never reported.
                return Err(format!("result for unknown or cancelled ticket {ticket}"));
            };
            let client = &mut self.clients[p.client];
            client.tickets.retain(|&t| t != ticket);
            if let (
                Kind::Receive {
                    queue, bind: true, ..
                },
                OpResult::Received(msgs),
            ) = (&p.kind, &result)
            {
                // The session binds what it delivered (a result comes only
                // while the client that asked is connected).
                for m in msgs {
                    if client.bound.len() == BOUND_MAX {
                        client.bound.remove(0);
                    }
                    client.bound.push(Held {
                        queue,
                        receipt: m.receipt,
                        id: m.id,
                        delivery: m.delivery(),
                        forged: false,
                    });
                }
            }
            let summary = self
                .oracle
                .completed(&p, result, self.now_ns, self.step)
                .map_err(|e| format!("ticket {ticket}: {e}"))?;
            self.note(format!("ticket {ticket} done: {summary}"));
        }
        Ok(())
    }

    /// A queue's incarnation now (0 when it does not exist).
    fn incarnation(&self, queue: &str) -> u32 {
        self.registry
            .get(&qn(queue))
            .map_or(0, |q| q.shared.incarnation())
    }

    /// Every queue's accounting identity, on every shard, after every step.
    fn check_identity(&mut self) -> Result<(), String> {
        for (i, s) in self.shards.iter_mut().enumerate() {
            for q in QUEUES {
                let Some(st) = s.local_stats(&qn(q)) else {
                    continue;
                };
                let held = st.visible + st.delayed + st.in_flight;
                let left = st.sent + st.moved_in;
                let right =
                    held + st.deleted + st.dead_lettered + st.redriven + st.dropped + st.purged;
                if left != right {
                    return Err(format!(
                        "shard {i}, queue {q}: accounting identity broken: {st:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Polls every shard until nothing moves.
    fn settle(&mut self) {
        loop {
            let mut work = 0;
            for s in &mut self.shards {
                work += s.poll(self.now_ns, self.wall_ms);
            }
            if work == 0 && !self.shards.iter().any(Shard::has_outbound) {
                return;
            }
        }
    }

    /// Settles, then checks the whole state.
    fn checkpoint(&mut self) -> Result<(), String> {
        self.settle();
        self.collect()?;
        self.oracle.counts.checkpoints += 1;
        // Settled: every request of a connected client is answered, but
        // long polls still waiting.
        let open: std::collections::HashSet<u64> = self
            .clients
            .iter()
            .flat_map(|c| c.tickets.iter().copied())
            .collect();
        for (ticket, p) in &self.pending {
            if !matches!(p.kind, Kind::Receive { .. }) && open.contains(ticket) {
                return Err(format!(
                    "ticket {ticket} ({:?}) not answered on a settled system",
                    p.kind
                ));
            }
        }
        check_shards(&mut self.shards, &self.registry)?;
        let views: Vec<_> = self.shards.iter().flat_map(Shard::messages).collect();
        self.oracle.checkpoint(&views, self.now_ns, self.step)
    }
}
