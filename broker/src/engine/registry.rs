//! Queue metadata shared by every shard.
//!
//! # Ground rules
//!
//! - Admin operations (create, set, delete, list) take the registry's mutex,
//!   change the map, then bump `epoch` with `Release`. The send / receive /
//!   delete path never takes the mutex: each shard compares `epoch` (an
//!   `Acquire` load) with the epoch of its last snapshot at the start of every
//!   call, and only when it moved does it take the mutex to catch up: the
//!   registry remembers which queue each of the last
//!   [`REGISTRY_CHANGES_KEPT`] changes touched, so a shard copies those
//!   queues alone ([`Registry::changes_since`]); one further behind copies
//!   them all. So a create costs the same at 100,000 queues as at 10.
//! - [`QueueShared`] holds what the shards must agree on at once: the
//!   queue's depth across shards (max depth) as one atomic that a send
//!   reserves with `fetch_add` and undoes when over the limit; a per-shard
//!   *visible hint* (how many messages that shard's partition has visible,
//!   written by the owner only, read by would-be stealers); and a per-shard
//!   *waiter count* (long-poll receives waiting on that shard).
//! - Lost wake-ups are excluded by a Dekker pairing of `SeqCst` fences: a
//!   shard that parks a waiter first increments its waiter count, then
//!   issues a `SeqCst` fence, then reads every other shard's hint
//!   ([`QueueShared::add_waiter`]); an owner that makes messages visible
//!   first stores its hint, then issues a `SeqCst` fence, then reads every
//!   other shard's waiter count ([`QueueShared::waiting_shards`]). The two
//!   fences are ordered in the single total order of `SeqCst` operations,
//!   and the read after the later one sees the write before the earlier one,
//!   so either the waiter steals or the owner wakes it. The accesses
//!   themselves are `Relaxed`: the fences carry the ordering. (Fences, not
//!   `SeqCst` accesses, also because loom models `SeqCst` fences exactly but
//!   `SeqCst` loads and stores only as acquire/release, and then reports
//!   this pairing as a lost wake-up; the model `loom_waiter_park_vs_send_*`
//!   in `races.rs` checks it.)
//! - Hints are advisory: a steal may find nothing (the owner's own consumers
//!   got there first) and that is fine; no message is ever *lost* through a
//!   stale hint, only a steal wasted.
//! - The memory budget is one atomic counter of bytes; shards reserve from
//!   it in chunks (see [`super::memory`]).

use sluice_protocol::limits::FRAME_BYTES_MAX_DEFAULT;
use sluice_protocol::{AttributeUpdate, QueueAttributes, QueueName, QueueTimes};
use std::collections::{BTreeMap, HashMap, VecDeque};

mod journal;
mod mismatch;
mod saved;
pub use journal::{QueueChange, RegistryJournal};
use mismatch::queue_exists;

use super::error::EngineError;
use super::limits::{PARTITIONS_MAX, QUEUES_MAX_DEFAULT, REGISTRY_CHANGES_KEPT, SHARDS_MAX};
use super::memory::MemoryBudget;
use super::random::splitmix64;
use super::receipt_mac::ReceiptKey;
use crate::sync::{Arc, AtomicUsize, CachePadded, Mutex, MutexGuard, Ordering, fence};

/// How the registry (and so the whole engine) is set up.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// Number of shards (1 ..= [`SHARDS_MAX`]).
    pub shards: u16,
    /// Seed of the run: the receipt key and the message id prefix derive
    /// from it. The server draws it from the OS at start, so a receipt of an
    /// earlier run fails the check and ids never repeat across runs.
    pub seed: u64,
    /// Memory budget for messages, bytes (bodies, attributes, per-message
    /// state, dedup entries).
    pub memory_bytes_max: u64,
    /// Maximum number of queues (at most [`PARTITIONS_MAX`]).
    pub queues_max: usize,
    /// Largest frame: bounds max message size and a receive's reply.
    pub frame_bytes_max: u32,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            shards: 1,
            seed: 0,
            memory_bytes_max: u64::MAX,
            queues_max: QUEUES_MAX_DEFAULT,
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
        }
    }
}

/// What the shards share about one queue incarnation.
#[derive(Debug)]
pub struct QueueShared {
    name: QueueName,
    incarnation: u32,
    /// Messages held (visible + delayed + in flight) over all shards.
    depth: AtomicUsize,
    /// Per shard: messages visible in its partition (advisory).
    visible: Box<[CachePadded<AtomicUsize>]>,
    /// Per shard: long-poll receives waiting on it.
    waiters: Box<[CachePadded<AtomicUsize>]>,
}

impl QueueShared {
    fn new(name: QueueName, incarnation: u32, shards: u16) -> QueueShared {
        let per_shard = || {
            (0..shards)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect::<Vec<_>>()
                .into_boxed_slice()
        };
        QueueShared {
            name,
            incarnation,
            depth: AtomicUsize::new(0),
            visible: per_shard(),
            waiters: per_shard(),
        }
    }

    /// The queue's name.
    #[must_use]
    pub fn name(&self) -> &QueueName {
        &self.name
    }

    /// The incarnation.
    #[must_use]
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Reserves room for one message under `max_depth`; false when full.
    pub fn try_reserve_depth(&self, max_depth: Option<u64>) -> bool {
        let before = self.depth.fetch_add(1, Ordering::Relaxed) as u64;
        match max_depth {
            Some(max) if before >= max => {
                self.depth.fetch_sub(1, Ordering::Relaxed);
                false
            }
            _ => true,
        }
    }

    /// Reserves room for `n` messages of a queue without a max depth at
    /// once (a send's batch); the room not taken goes back by
    /// [`QueueShared::release_depth_n`].
    pub fn add_depth_n(&self, n: usize) {
        self.depth.fetch_add(n, Ordering::Relaxed);
    }

    /// Gives back the room of `n` messages.
    pub fn release_depth_n(&self, n: usize) {
        self.depth.fetch_sub(n, Ordering::Relaxed);
    }

    /// Counts a message in without a limit (dead-lettering never refuses).
    pub fn add_depth(&self) {
        self.depth.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a message out.
    pub fn release_depth(&self) {
        self.depth.fetch_sub(1, Ordering::Relaxed);
    }

    /// Messages held over all shards.
    #[must_use]
    pub fn depth(&self) -> u64 {
        self.depth.load(Ordering::Relaxed) as u64
    }

    /// Stores shard `shard`'s visible count (owner only). Advisory; see the
    /// module's ground rules for how it pairs with the waiter counts.
    pub fn store_visible_hint(&self, shard: u16, visible: u64) {
        let v = usize::try_from(visible).unwrap_or(usize::MAX);
        self.visible[usize::from(shard)].store(v, Ordering::Relaxed);
    }

    /// Shard `shard`'s visible count, as last published.
    #[must_use]
    pub fn visible_hint(&self, shard: u16) -> u64 {
        self.visible[usize::from(shard)].load(Ordering::Relaxed) as u64
    }

    /// The owner side of the Dekker pairing, after it stored a non-zero
    /// hint: a `SeqCst` fence, then every shard but `me` that has waiters
    /// parked on this queue (each one must be woken).
    pub fn waiting_shards(&self, me: u16) -> impl Iterator<Item = u16> + '_ {
        fence(Ordering::SeqCst);
        self.waiters
            .iter()
            .enumerate()
            // At most SHARDS_MAX (1024) shards: they fit a u16.
            .map(|(s, w)| (s as u16, w))
            .filter(move |&(s, w)| s != me && w.load(Ordering::Relaxed) > 0)
            .map(|(s, _)| s)
    }

    /// The waiter side of the Dekker pairing: one more waiter parked on
    /// `shard`, then a `SeqCst` fence. The caller reads the other shards'
    /// hints next.
    pub fn add_waiter(&self, shard: u16) {
        self.waiters[usize::from(shard)].fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// One waiter fewer on `shard` (an owner may still wake it: a spurious
    /// wake-up, harmless).
    pub fn remove_waiter(&self, shard: u16) {
        self.waiters[usize::from(shard)].fetch_sub(1, Ordering::Relaxed);
    }

    /// Waiters parked on `shard`, as last counted.
    #[must_use]
    pub fn waiters(&self, shard: u16) -> u64 {
        self.waiters[usize::from(shard)].load(Ordering::Relaxed) as u64
    }
}

/// One queue as a snapshot carries it.
#[derive(Clone, Debug)]
pub struct QueueEntry {
    /// Current attributes.
    pub attributes: QueueAttributes,
    /// When it was created and last changed.
    pub times: QueueTimes,
    /// Shared state of this incarnation.
    pub shared: Arc<QueueShared>,
}

/// The registry's state as a snapshot holds it.
#[derive(Clone, Debug)]
pub struct RestoredRegistry {
    /// The receipt key's halves.
    pub key: (u64, u64),
    /// The message id prefix.
    pub run_prefix: u64,
    /// The incarnation the next queue created gets.
    pub next_incarnation: u32,
    /// Every queue: name, attributes, incarnation, times.
    pub queues: Vec<(QueueName, QueueAttributes, u32, QueueTimes)>,
}

#[derive(Debug, Default)]
struct Inner {
    queues: BTreeMap<QueueName, QueueEntry>,
    next_incarnation: u32,
    /// The last changes: the epoch each one moved to, and its queue.
    changes: VecDeque<(u64, QueueName)>,
    /// `changes` holds every change after this epoch.
    changes_from: u64,
    /// How many queues name each dead-letter queue, so that a delete need
    /// not look through every queue.
    dead_letter_uses: HashMap<String, u32>,
    /// Where changes are recorded before they are made (the write-ahead
    /// log), if anywhere.
    journal: Option<Box<dyn RegistryJournal>>,
}

impl Inner {
    /// Counts `attrs`'s dead-letter queue as used once more (`by` 1) or
    /// once less (`by` -1).
    fn count_dead_letter(&mut self, attrs: &QueueAttributes, by: i32) {
        let Some(r) = &attrs.redrive else { return };
        let n = self
            .dead_letter_uses
            .entry(r.dead_letter_queue.clone())
            .or_insert(0);
        *n = n.saturating_add_signed(by);
        if *n == 0 {
            self.dead_letter_uses.remove(&r.dead_letter_queue);
        }
    }
}

/// What a shard must apply to catch up with the registry.
#[derive(Debug)]
pub enum RegistryChanges {
    /// Too far behind: the epoch and every queue.
    Full(u64, Vec<(QueueName, QueueEntry)>),
    /// The epoch, and each queue changed since (once, in name order) as it
    /// is now: `None` when it was deleted.
    Delta(u64, Vec<(QueueName, Option<QueueEntry>)>),
}

/// Queue metadata shared across shards; see the module docs.
#[derive(Debug)]
pub struct Registry {
    config: RegistryConfig,
    key: ReceiptKey,
    run_prefix: u64,
    epoch: AtomicUsize,
    inner: Mutex<Inner>,
    memory: MemoryBudget,
}

impl Registry {
    /// A registry with no queues.
    ///
    /// # Panics
    /// When `config.shards` is 0 or above [`SHARDS_MAX`], or
    /// `config.queues_max` above [`PARTITIONS_MAX`] (configuration bugs the
    /// server's flag parsing rules out).
    #[must_use]
    pub fn new(config: RegistryConfig) -> Registry {
        assert!(
            (1..=SHARDS_MAX).contains(&usize::from(config.shards)),
            "shards must be 1 ..= SHARDS_MAX"
        );
        assert!(
            config.queues_max <= PARTITIONS_MAX,
            "queues_max must be at most PARTITIONS_MAX"
        );
        let mut st = config.seed;
        let key = ReceiptKey::new(splitmix64(&mut st), splitmix64(&mut st));
        let run_prefix = splitmix64(&mut st);
        Registry {
            memory: MemoryBudget::new(config.memory_bytes_max),
            config,
            key,
            run_prefix,
            epoch: AtomicUsize::new(1),
            inner: Mutex::new(Inner {
                queues: BTreeMap::new(),
                next_incarnation: 1,
                changes: VecDeque::new(),
                changes_from: 1,
                dead_letter_uses: HashMap::new(),
                journal: None,
            }),
        }
    }

    /// When `name` was created and last changed.
    #[must_use]
    pub fn times(&self, name: &QueueName) -> Option<QueueTimes> {
        self.lock().queues.get(name).map(|q| q.times)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// The run's receipt key.
    #[must_use]
    pub fn receipt_key(&self) -> &ReceiptKey {
        &self.key
    }

    /// The run's id prefix (high 64 bits of every message id).
    #[must_use]
    pub fn run_prefix(&self) -> u64 {
        self.run_prefix
    }

    /// The memory budget shared by the shards.
    #[must_use]
    pub fn memory(&self) -> &MemoryBudget {
        &self.memory
    }

    /// The metadata epoch: it moves after every change.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire) as u64
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the map consistent (every
        // mutation is a single insert/remove), so the facade's lock ignores
        // poisoning.
        self.inner.lock()
    }

    /// Records a change of `name` (under the lock) and moves the epoch.
    fn bump(&self, inner: &mut Inner, name: &QueueName) {
        let epoch = self.epoch.fetch_add(1, Ordering::Release) as u64 + 1;
        inner.changes.push_back((epoch, name.clone()));
        while inner.changes.len() > REGISTRY_CHANGES_KEPT {
            if let Some((e, _)) = inner.changes.pop_front() {
                inner.changes_from = e;
            }
        }
    }

    /// What a shard that last caught up at `epoch` must apply: the queues
    /// changed since, or every queue when the registry no longer remembers
    /// that far back.
    #[must_use]
    pub fn changes_since(&self, epoch: u64) -> RegistryChanges {
        let inner = self.lock();
        // Read under the lock: no change can slip between the two.
        let now = self.epoch.load(Ordering::Acquire) as u64;
        if epoch < inner.changes_from {
            let queues = inner
                .queues
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            return RegistryChanges::Full(now, queues);
        }
        let first = inner.changes.partition_point(|(e, _)| *e <= epoch);
        let mut names: Vec<&QueueName> = inner.changes.range(first..).map(|(_, n)| n).collect();
        names.sort_unstable();
        names.dedup();
        let changed = names
            .into_iter()
            .map(|n| (n.clone(), inner.queues.get(n).cloned()))
            .collect();
        RegistryChanges::Delta(now, changed)
    }

    /// The current epoch and every queue.
    #[must_use]
    pub fn snapshot(&self) -> (u64, Vec<(QueueName, QueueEntry)>) {
        let inner = self.lock();
        // Read under the lock: no change can slip between the two.
        let epoch = self.epoch.load(Ordering::Acquire) as u64;
        let queues = inner
            .queues
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (epoch, queues)
    }

    /// One queue.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<QueueEntry> {
        self.lock().queues.get(name).cloned()
    }

    fn check_dead_letter(
        queues: &BTreeMap<QueueName, QueueEntry>,
        name: &QueueName,
        attrs: &QueueAttributes,
    ) -> Result<(), EngineError> {
        let Some(r) = &attrs.redrive else {
            return Ok(());
        };
        let dlq = r.dead_letter_queue.as_str();
        if dlq == name.as_str() {
            return Err(EngineError::OwnDeadLetterQueue(name.clone()));
        }
        let Some(target) = queues.get(dlq) else {
            return Err(EngineError::DeadLetterQueueNotFound(dlq.to_owned()));
        };
        // A FIFO queue's dead letters keep their groups, and a standard
        // queue's have none to keep: both queues are of one kind.
        if target.attributes.kind != attrs.kind {
            return Err(EngineError::DeadLetterKind {
                queue: name.clone(),
                dead_letter_queue: dlq.to_owned(),
            });
        }
        // Follow the chain from the dead-letter queue: reaching `name` again
        // would close a cycle. The chain is at most as long as the map.
        let mut at = dlq;
        for _ in 0..=queues.len() {
            let Some(next) = queues
                .get(at)
                .and_then(|q| q.attributes.redrive.as_ref())
                .map(|r| r.dead_letter_queue.as_str())
            else {
                return Ok(());
            };
            if next == name.as_str() {
                return Err(EngineError::DeadLetterCycle {
                    queue: name.clone(),
                    dead_letter_queue: dlq.to_owned(),
                });
            }
            at = next;
        }
        Ok(())
    }

    /// Creates a queue; `Ok((incarnation, created))`. Idempotent when the
    /// resulting attributes equal the existing queue's; its tags and
    /// annotations are not compared, and stay as they are.
    ///
    /// # Errors
    /// An attribute out of range, a policy cleared, another queue of that
    /// name, the queue limit, or a dead-letter queue that does not qualify.
    pub fn create(
        &self,
        name: &QueueName,
        update: &AttributeUpdate,
        wall_ms: u64,
    ) -> Result<(u32, bool), EngineError> {
        if update.redrive.is_clear() || update.backoff.is_clear() {
            return Err(EngineError::ClearOnCreate);
        }
        let mut attrs = update
            .apply_to(&QueueAttributes::default(), self.config.frame_bytes_max)
            .map_err(EngineError::Attributes)?;
        let mut inner = self.lock();
        if let Some(existing) = inner.queues.get(name) {
            // Labels are neither compared nor changed by a create.
            attrs.tags.clone_from(&existing.attributes.tags);
            attrs
                .annotations
                .clone_from(&existing.attributes.annotations);
            return if existing.attributes == attrs {
                Ok((existing.shared.incarnation, false))
            } else {
                Err(queue_exists(name, &existing.attributes, &attrs))
            };
        }
        if inner.queues.len() >= self.config.queues_max {
            return Err(EngineError::TooManyQueues(self.config.queues_max));
        }
        Self::check_dead_letter(&inner.queues, name, &attrs)?;
        let incarnation = inner.next_incarnation;
        let next = incarnation
            .checked_add(1)
            .ok_or(EngineError::IncarnationsExhausted)?;
        let times = QueueTimes {
            created_ms: wall_ms,
            modified_ms: wall_ms,
        };
        inner.journal(QueueChange::Put {
            name,
            attributes: &attrs,
            incarnation,
            times,
        })?;
        inner.next_incarnation = next;
        let shared = Arc::new(QueueShared::new(
            name.clone(),
            incarnation,
            self.config.shards,
        ));
        inner.count_dead_letter(&attrs, 1);
        inner.queues.insert(
            name.clone(),
            QueueEntry {
                attributes: attrs,
                times,
                shared,
            },
        );
        self.bump(&mut inner, name);
        Ok((incarnation, true))
    }

    /// Changes attributes of a queue.
    ///
    /// # Errors
    /// No such queue, an attribute out of range, or a dead-letter queue that
    /// does not qualify.
    pub fn set(
        &self,
        name: &QueueName,
        update: &AttributeUpdate,
        wall_ms: u64,
    ) -> Result<(), EngineError> {
        let mut inner = self.lock();
        let Some(existing) = inner.queues.get(name) else {
            return Err(EngineError::QueueNotFound(name.clone()));
        };
        if update.kind.is_some_and(|k| k != existing.attributes.kind) {
            return Err(EngineError::KindIsFixed(name.clone()));
        }
        let attrs = update
            .apply_to(&existing.attributes, self.config.frame_bytes_max)
            .map_err(EngineError::Attributes)?;
        Self::check_dead_letter(&inner.queues, name, &attrs)?;
        let (incarnation, created_ms) = (existing.shared.incarnation, existing.times.created_ms);
        inner.journal(QueueChange::Put {
            name,
            attributes: &attrs,
            incarnation,
            times: QueueTimes {
                created_ms,
                modified_ms: wall_ms,
            },
        })?;
        inner.count_dead_letter(&attrs, 1);
        if let Some(q) = inner.queues.get_mut(name) {
            q.times.modified_ms = wall_ms;
            let old = core::mem::replace(&mut q.attributes, attrs);
            inner.count_dead_letter(&old, -1);
        }
        self.bump(&mut inner, name);
        Ok(())
    }

    /// Removes a queue; refused while another queue names it as its
    /// dead-letter queue. Returns the removed incarnation.
    ///
    /// # Errors
    /// No such queue, or another queue names it as its dead-letter queue.
    pub fn delete(&self, name: &QueueName) -> Result<u32, EngineError> {
        let mut inner = self.lock();
        if !inner.queues.contains_key(name) {
            return Err(EngineError::QueueNotFound(name.clone()));
        }
        // Only when some queue names it is that queue looked for (the
        // error names it); a delete costs the same however many queues.
        // (A queue never names itself: `check_dead_letter` refuses it.)
        if inner.dead_letter_uses.contains_key(name.as_str()) {
            if let Some((user, _)) = inner.queues.iter().find(|(n, q)| {
                *n != name
                    && q.attributes
                        .redrive
                        .as_ref()
                        .is_some_and(|r| r.dead_letter_queue == name.as_str())
            }) {
                return Err(EngineError::DeadLetterQueueInUse {
                    queue: name.clone(),
                    user: user.clone(),
                });
            }
        }
        if let Some(q) = inner.queues.get(name) {
            let incarnation = q.shared.incarnation;
            inner.journal(QueueChange::Deleted { name, incarnation })?;
        }
        let removed = inner
            .queues
            .remove(name)
            .map(|q| (q.shared.incarnation, q.attributes));
        if let Some((_, attrs)) = &removed {
            inner.count_dead_letter(attrs, -1);
        }
        let removed = removed.map(|(incarnation, _)| incarnation);
        self.bump(&mut inner, name);
        removed.ok_or_else(|| EngineError::QueueNotFound(name.clone()))
    }

    /// One page of the names starting with `prefix` that sort after
    /// `after` ("" from the first): as many as one LIST_QUEUES reply frame
    /// holds, and whether more follow.
    #[must_use]
    pub fn list_page(&self, prefix: &str, after: &str) -> (Vec<QueueName>, bool) {
        // The reply frame's header, count and `more` byte.
        let mut room = (self.config.frame_bytes_max as usize).saturating_sub(32);
        let inner = self.lock();
        let start = if after.is_empty() || after < prefix {
            core::ops::Bound::Included(prefix)
        } else {
            core::ops::Bound::Excluded(after)
        };
        let mut names = Vec::new();
        for (name, _) in inner
            .queues
            .range::<str, _>((start, core::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
        {
            let bytes = 1 + name.as_str().len();
            if bytes > room {
                return (names, true);
            }
            room -= bytes;
            names.push(name.clone());
        }
        (names, false)
    }

    /// Names starting with `prefix`, sorted.
    #[must_use]
    pub fn list(&self, prefix: &str) -> Vec<QueueName> {
        self.lock()
            .queues
            .range::<str, _>((
                core::ops::Bound::Included(prefix),
                core::ops::Bound::Unbounded,
            ))
            .take_while(|(n, _)| n.starts_with(prefix))
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::{ErrorCode, Millis, RedrivePolicy, Setting};

    fn dlq(name: &str) -> AttributeUpdate {
        AttributeUpdate {
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: name.into(),
                max_receives: 3,
            }),
            ..Default::default()
        }
    }

    fn q(name: &'static str) -> QueueName {
        QueueName::from_static(name)
    }

    #[test]
    fn create_is_idempotent_and_bumps_epoch() {
        let r = Registry::new(RegistryConfig::default());
        let e0 = r.epoch();
        let (inc, created) = r.create(&q("a"), &AttributeUpdate::default(), 0).unwrap();
        assert!(created);
        assert!(r.epoch() > e0);
        assert_eq!(
            r.create(&q("a"), &AttributeUpdate::default(), 0).unwrap(),
            (inc, false)
        );
        let other = AttributeUpdate {
            delay: Some(Millis::new(5)),
            message_bytes_max: Some(1024),
            ..Default::default()
        };
        let err = r.create(&q("a"), &other, 0).unwrap_err();
        assert_eq!(err.code(), ErrorCode::QueueExists);
        assert_eq!(
            err.to_string(),
            "queue a exists with other attributes: delay 0s (this create: 5ms), \
             max_message_size 256KiB (this create: 1KiB)"
        );
    }

    #[test]
    fn dead_letter_rules() {
        let r = Registry::new(RegistryConfig::default());
        assert!(r.create(&q("a"), &dlq("nope"), 0).is_err());
        assert!(r.create(&q("a"), &dlq("a"), 0).is_err());
        r.create(&q("a"), &AttributeUpdate::default(), 0).unwrap();
        r.create(&q("b"), &dlq("a"), 0).unwrap();
        // a -> b would close a cycle b -> a -> b.
        let e = r.set(&q("a"), &dlq("b"), 0).unwrap_err();
        assert!(e.to_string().contains("cycle"), "{e}");
        let e = r.delete(&q("a")).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(e.to_string().contains("queue b"), "{e}");
        r.delete(&q("b")).unwrap();
        r.delete(&q("a")).unwrap();
        assert_eq!(
            r.delete(&q("a")).unwrap_err().code(),
            ErrorCode::QueueNotFound
        );
    }

    #[test]
    fn list_by_prefix_and_queue_limit() {
        let r = Registry::new(RegistryConfig {
            queues_max: 3,
            ..Default::default()
        });
        for n in ["ab", "abc", "b"] {
            r.create(&q(n), &AttributeUpdate::default(), 0).unwrap();
        }
        assert_eq!(r.list("ab"), vec!["ab", "abc"]);
        assert_eq!(r.list(""), vec!["ab", "abc", "b"]);
        let e = r
            .create(&q("c"), &AttributeUpdate::default(), 0)
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
    }

    #[test]
    fn depth_reservation_respects_the_limit() {
        let q = QueueShared::new(q("q"), 1, 2);
        assert!(q.try_reserve_depth(Some(2)));
        assert!(q.try_reserve_depth(Some(2)));
        assert!(!q.try_reserve_depth(Some(2)));
        assert_eq!(q.depth(), 2);
        q.release_depth();
        assert!(q.try_reserve_depth(Some(2)));
        // A batch's room at once, and what it did not take given back.
        q.add_depth_n(64);
        q.release_depth_n(60);
        assert_eq!(q.depth(), 6);
    }

    fn delta(c: RegistryChanges) -> (u64, Vec<(String, Option<u32>)>) {
        match c {
            RegistryChanges::Delta(e, v) => (
                e,
                v.into_iter()
                    .map(|(n, q)| (n.as_str().to_owned(), q.map(|q| q.shared.incarnation)))
                    .collect(),
            ),
            RegistryChanges::Full(..) => panic!("a delta was expected"),
        }
    }

    #[test]
    fn a_shard_catches_up_on_the_queues_changed_since_its_epoch() {
        let r = Registry::new(RegistryConfig::default());
        let start = r.epoch();
        let none = AttributeUpdate::default();
        let (a, _) = r.create(&q("a"), &none, 0).unwrap();
        let mid = r.epoch();
        r.create(&q("b"), &none, 0).unwrap();
        r.set(
            &q("a"),
            &AttributeUpdate {
                delay: Some(Millis::new(5)),
                ..none.clone()
            },
            0,
        )
        .unwrap();
        r.delete(&q("b")).unwrap();
        let (a2, _) = {
            r.delete(&q("a")).unwrap();
            r.create(&q("a"), &none, 0).unwrap()
        };
        assert_ne!(a, a2);
        let (now, changed) = delta(r.changes_since(start));
        assert_eq!(now, r.epoch());
        // Each queue once, as it is now: b deleted, a made again.
        assert_eq!(
            changed,
            [("a".to_owned(), Some(a2)), ("b".to_owned(), None)]
        );
        let (_, changed) = delta(r.changes_since(mid));
        assert_eq!(
            changed,
            [("a".to_owned(), Some(a2)), ("b".to_owned(), None)]
        );
        let (_, changed) = delta(r.changes_since(r.epoch()));
        assert!(changed.is_empty());
    }

    #[test]
    fn a_shard_too_far_behind_copies_every_queue() {
        let r = Registry::new(RegistryConfig {
            queues_max: 2 * REGISTRY_CHANGES_KEPT,
            ..RegistryConfig::default()
        });
        let start = r.epoch();
        for i in 0..=REGISTRY_CHANGES_KEPT {
            let name = QueueName::new(&format!("q{i}")).unwrap();
            r.create(&name, &AttributeUpdate::default(), 0).unwrap();
        }
        match r.changes_since(start) {
            RegistryChanges::Full(e, all) => {
                assert_eq!(e, r.epoch());
                assert_eq!(all.len(), REGISTRY_CHANGES_KEPT + 1);
            }
            RegistryChanges::Delta(..) => panic!("the oldest change is forgotten"),
        }
        let (_, changed) = delta(r.changes_since(start + 1));
        assert_eq!(changed.len(), REGISTRY_CHANGES_KEPT);
        // A restored registry's queues are all new to any shard.
        let restored = Registry::restored(
            RegistryConfig::default(),
            RestoredRegistry {
                key: (1, 2),
                run_prefix: 3,
                next_incarnation: 2,
                queues: vec![(q("x"), QueueAttributes::default(), 1, QueueTimes::default())],
            },
        )
        .unwrap();
        assert!(
            matches!(restored.changes_since(0), RegistryChanges::Full(_, all) if all.len() == 1)
        );
        assert!(
            matches!(restored.changes_since(restored.epoch()), RegistryChanges::Delta(_, v) if v.is_empty())
        );
    }

    #[test]
    fn a_dead_letter_queue_is_deletable_once_no_queue_names_it() {
        let r = Registry::new(RegistryConfig::default());
        let none = AttributeUpdate::default();
        r.create(&q("d1"), &none, 0).unwrap();
        r.create(&q("d2"), &none, 0).unwrap();
        r.create(&q("a"), &dlq("d1"), 0).unwrap();
        r.create(&q("b"), &dlq("d1"), 0).unwrap();
        let refused = |n| {
            matches!(
                r.delete(&q(n)),
                Err(EngineError::DeadLetterQueueInUse { .. })
            )
        };
        assert!(refused("d1"));
        // a moves to d2; b still names d1.
        r.set(&q("a"), &dlq("d2"), 0).unwrap();
        assert!(refused("d1") && refused("d2"));
        r.delete(&q("b")).unwrap();
        r.delete(&q("d1")).unwrap();
        r.set(
            &q("a"),
            &AttributeUpdate {
                redrive: Setting::Clear,
                ..none.clone()
            },
            0,
        )
        .unwrap();
        r.delete(&q("d2")).unwrap();
        assert!(r.lock().dead_letter_uses.is_empty());
        // Restored from a snapshot, the uses are counted again.
        let attrs = QueueAttributes {
            redrive: Some(RedrivePolicy {
                dead_letter_queue: "x".into(),
                max_receives: 3,
            }),
            ..QueueAttributes::default()
        };
        let restored = Registry::restored(
            RegistryConfig::default(),
            RestoredRegistry {
                key: (1, 2),
                run_prefix: 3,
                next_incarnation: 3,
                queues: vec![
                    (q("x"), QueueAttributes::default(), 1, QueueTimes::default()),
                    (q("y"), attrs, 2, QueueTimes::default()),
                ],
            },
        )
        .unwrap();
        assert!(matches!(
            restored.delete(&q("x")),
            Err(EngineError::DeadLetterQueueInUse { .. })
        ));
        restored.delete(&q("y")).unwrap();
        restored.delete(&q("x")).unwrap();
    }
}
