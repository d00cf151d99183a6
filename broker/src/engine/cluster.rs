//! A deterministic in-process driver: N shards wired by a mesh, driven on
//! one thread in a fixed order on a virtual clock, so multi-shard behaviour
//! (forwards, steals, wake-ups, fan-out) is testable and reproducible.
//!
//! After every submit the cluster polls each shard in index order until a
//! whole round does no work: the system is then quiescent (every ring empty,
//! every reply delivered).

use crate::sync::Arc;
use std::collections::HashMap;

use sluice_protocol::QueueStats;

use super::mesh::doorbell::{self, NoWake, Wake};
use super::ops::{Op, OpResult};
use super::random::splitmix64;
use super::registry::{Registry, RegistryConfig};
use super::shard::{MessageView, Shard, ShardConfig};

use super::limits::CLUSTER_RING_CAPACITY;
/// N shards on one thread with a virtual clock.
#[derive(Debug)]
pub struct Cluster {
    shards: Vec<Shard>,
    registry: Arc<Registry>,
    now_ns: u64,
    wall_ms: u64,
    next_ticket: u64,
    results: HashMap<u64, OpResult>,
    scratch: Vec<(u64, OpResult)>,
}

impl Cluster {
    /// Builds `config.shards` shards; the clock starts at 1 s monotonic and
    /// at 1,700,000,000,000 ms wall.
    #[must_use]
    pub fn new(config: RegistryConfig) -> Cluster {
        let seed = config.seed ^ 0x5eed;
        let registry = Arc::new(Registry::new(config));
        Cluster::on_registry(registry, seed, 1_000_000_000, 1_700_000_000_000)
    }

    /// Fresh shards on `registry` (as many as its configuration says),
    /// their PRNGs seeded from `seed`, the clocks at `now_ns` and
    /// `wall_ms`; not yet settled. The snapshot's loader
    /// (`crate::snapshot`) fills them from a file.
    #[must_use]
    pub(crate) fn on_registry(
        registry: Arc<Registry>,
        mut seed: u64,
        now_ns: u64,
        wall_ms: u64,
    ) -> Cluster {
        let shards_n = registry.config().shards;
        let wakers = (0..shards_n)
            .map(|_| Box::new(NoWake) as Box<dyn Wake>)
            .collect();
        let links = doorbell::mesh(usize::from(shards_n), CLUSTER_RING_CAPACITY, wakers);
        let shards = links
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                let config = ShardConfig {
                    // At most SHARDS_MAX (1024) shards: they fit a u16.
                    shard: i as u16,
                    seed: splitmix64(&mut seed),
                };
                Shard::new(config, l, registry.clone(), now_ns, wall_ms)
            })
            .collect();
        Cluster {
            shards,
            registry,
            now_ns,
            wall_ms,
            next_ticket: 1,
            results: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Settles, then lends the registry, the shards and the clocks (monotonic
    /// ns, wall ms) to the snapshot's writer.
    pub(crate) fn settled_parts(&mut self) -> (&Registry, &mut [Shard], u64, u64) {
        self.settle();
        (&self.registry, &mut self.shards, self.now_ns, self.wall_ms)
    }

    /// The shared registry.
    #[must_use]
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Number of shards.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Whether there are no shards (never: a registry has at least one).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Virtual monotonic time, ns.
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Virtual wall time, Unix ms.
    #[must_use]
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }

    /// A shard.
    #[must_use]
    pub fn shard(&self, i: usize) -> &Shard {
        &self.shards[i]
    }

    /// A shard, mutably.
    pub fn shard_mut(&mut self, i: usize) -> &mut Shard {
        &mut self.shards[i]
    }

    /// Moves the clock forward by `ms` and lets every shard catch up.
    pub fn advance_ms(&mut self, ms: u64) {
        self.now_ns += ms * 1_000_000;
        self.wall_ms += ms;
        self.settle();
    }

    /// Submits `op` on shard `shard` and settles; returns the ticket. The
    /// result is in [`Cluster::take`] once it completed.
    pub fn submit(&mut self, shard: usize, op: Op) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let (now, wall) = (self.now_ns, self.wall_ms);
        if let Some(r) = self.shards[shard].submit(ticket, op, now, wall) {
            self.results.insert(ticket, r);
        }
        self.settle();
        ticket
    }

    /// The result of `ticket`, if it completed (taken out).
    pub fn take(&mut self, ticket: u64) -> Option<OpResult> {
        self.results.remove(&ticket)
    }

    /// Submits, settles and returns the result.
    ///
    /// # Panics
    /// When the operation did not complete (a receive that waits): use
    /// [`Cluster::submit`] and [`Cluster::take`] for those.
    pub fn call(&mut self, shard: usize, op: Op) -> OpResult {
        let t = self.submit(shard, op);
        self.take(t)
            .expect("operation did not complete; use submit/take for waiting receives")
    }

    /// Cancels a ticket on a shard (its connection went away).
    pub fn cancel(&mut self, shard: usize, ticket: u64) {
        self.shards[shard].cancel(ticket);
        self.settle();
    }

    /// Shuts every shard down (waiting receives answered at once).
    pub fn shutdown(&mut self) {
        let now = self.now_ns;
        for s in &mut self.shards {
            s.shutdown(now);
        }
        self.collect();
        self.settle();
    }

    fn collect(&mut self) {
        for s in &mut self.shards {
            s.drain_completions(&mut self.scratch);
        }
        for (t, r) in self.scratch.drain(..) {
            self.results.insert(t, r);
        }
    }

    /// Polls every shard in order until a whole round does nothing.
    pub fn settle(&mut self) {
        loop {
            let mut work = 0;
            let (now, wall) = (self.now_ns, self.wall_ms);
            for s in &mut self.shards {
                work += s.poll(now, wall);
            }
            self.collect();
            if work == 0 && !self.shards.iter().any(Shard::has_outbound) {
                return;
            }
        }
    }

    /// The shards, mutably (the snapshot's loader).
    pub(crate) fn shards_mut(&mut self) -> &mut [Shard] {
        &mut self.shards
    }

    /// Every message of every shard.
    #[must_use]
    pub fn messages(&self) -> Vec<MessageView> {
        self.shards.iter().flat_map(Shard::messages).collect()
    }

    /// A queue's counters summed over the shards (oldest age: the maximum).
    pub fn stats(&mut self, queue: &str) -> Option<QueueStats> {
        let mut total: Option<QueueStats> = None;
        for s in &mut self.shards {
            let st = s.local_stats(queue)?;
            total.get_or_insert_with(QueueStats::default).merge(&st);
        }
        total
    }

    /// Every shard's invariants, plus the cross-shard ones (see
    /// [`check_shards`]).
    pub fn check_invariants(&mut self) -> Result<(), String> {
        check_shards(&mut self.shards, &self.registry)
    }
}

/// Every shard's invariants, plus the cross-shard ones: each queue's shared
/// depth equals its messages over all shards, and the shared memory budget
/// covers what the shards account. For a settled set of shards (nothing in
/// a ring): the cluster's tests and the simulation.
pub fn check_shards(shards: &mut [Shard], registry: &Registry) -> Result<(), String> {
    for s in shards.iter() {
        s.check_invariants()?;
    }
    let (_, queues) = registry.snapshot();
    for (name, q) in queues {
        let mut held = 0;
        for s in shards.iter_mut() {
            if let Some(st) = s.local_stats(&name) {
                held += st.visible + st.delayed + st.in_flight;
            }
        }
        if q.shared.depth() != held {
            return Err(format!(
                "queue {name}: shared depth {} but shards hold {held}",
                q.shared.depth()
            ));
        }
    }
    let in_use: u64 = shards.iter().map(Shard::memory_in_use).sum();
    if registry.memory().used() < in_use {
        return Err(format!(
            "memory budget used {} below what shards hold {in_use}",
            registry.memory().used()
        ));
    }
    Ok(())
}
