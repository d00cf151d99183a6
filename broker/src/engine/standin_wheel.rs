//! TEMPORARY stand-in for the `wheel` branch's timing wheel (same API), so
//! the engine compiles before that branch lands. Deleted at the merge.

use std::collections::{BTreeMap, HashMap};

const TICK_NS: u64 = 1_000_000;

/// Names an inserted timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId(u64);

/// Timers with 1 ms ticks; nothing fires early.
#[derive(Debug)]
pub struct TimerWheel<T> {
    now_tick: u64,
    next_id: u64,
    by_tick: BTreeMap<(u64, u64), T>,
    ticks: HashMap<u64, u64>,
}

impl<T> TimerWheel<T> {
    /// An empty wheel at `now_ns`.
    pub fn new(now_ns: u64) -> Self {
        TimerWheel {
            now_tick: now_ns / TICK_NS,
            next_id: 0,
            by_tick: BTreeMap::new(),
            ticks: HashMap::new(),
        }
    }
    /// Adds a timer firing at the first tick at or after `deadline_ns`.
    pub fn insert(&mut self, deadline_ns: u64, value: T) -> TimerId {
        let tick = deadline_ns.div_ceil(TICK_NS).max(self.now_tick);
        let id = self.next_id;
        self.next_id += 1;
        self.by_tick.insert((tick, id), value);
        self.ticks.insert(id, tick);
        TimerId(id)
    }
    /// Removes a timer.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let tick = self.ticks.remove(&id.0)?;
        self.by_tick.remove(&(tick, id.0))
    }
    /// Fires every timer due at `now_ns`.
    pub fn advance(&mut self, now_ns: u64, mut fire: impl FnMut(TimerId, T)) {
        let now_tick = now_ns / TICK_NS;
        self.now_tick = self.now_tick.max(now_tick);
        while let Some(entry) = self.by_tick.first_entry() {
            if entry.key().0 > now_tick {
                break;
            }
            let ((_, id), v) = entry.remove_entry();
            self.ticks.remove(&id);
            fire(TimerId(id), v);
        }
    }
    /// Earliest deadline (tick-rounded).
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.by_tick.keys().next().map(|(t, _)| t * TICK_NS)
    }
    /// Timers held.
    pub fn len(&self) -> usize {
        self.ticks.len()
    }
    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.ticks.is_empty()
    }
}
