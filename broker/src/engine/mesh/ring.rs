//! A bounded single-producer single-consumer lock-free ring: the link that
//! carries messages from one shard to another.
//!
//! # Ground rules
//!
//! **Ownership.** [`channel`] returns one [`Producer`] and one [`Consumer`];
//! neither is `Clone`, and both operations that move data take `&mut self`,
//! so there is exactly one pushing thread and one popping thread at any time.
//! They share a fixed array of `capacity` slots (a power of two) and two
//! counters, each on its own cache line so the two cores never write the
//! same line:
//!
//! - `tail`: how many items were ever pushed. Written only by the producer.
//! - `head`: how many items were ever popped. Written only by the consumer.
//!
//! Both counters only grow (modulo 2^usize bits); item number `n` lives in
//! slot `n & (capacity - 1)`. The slots `head..tail` hold initialised items
//! and belong to the consumer; the slots `tail..head + capacity` are empty
//! and belong to the producer. An endpoint touches a slot only while it owns
//! it, and hands it over by moving its own counter past it.
//!
//! **Orderings.**
//!
//! - Producer: writes the item into slot `tail`, then stores `tail + 1` with
//!   **Release**. The consumer loads `tail` with **Acquire**; that pair makes
//!   the item's bytes visible before the consumer reads them.
//! - Consumer: moves the item out of slot `head`, then stores `head + 1` with
//!   **Release**. The producer loads `head` with **Acquire**; that pair orders
//!   the consumer's read of the old item before the producer's overwrite of
//!   the slot, so a slot is never reused while it is being read.
//!
//! **Cached counters.** Each endpoint keeps a private copy of the other's
//! counter and reloads the shared one only when its copy says the ring is
//! full (producer) or empty (consumer). A stale copy is always conservative:
//! the other counter only grows, so a stale `head` under-reports free space
//! and a stale `tail` under-reports items. This keeps the two cores off each
//! other's cache lines except when the ring is nearly full or nearly empty.
//!
//! **Wrap-around and reuse.** The counters are free-running and compared
//! with wrapping arithmetic: `tail - head` (mod 2^usize bits) is the number of
//! items, never more than `capacity`, and because `capacity` divides 2^usize
//! bits, `n & (capacity - 1)` stays the right slot when a counter wraps. A
//! slot is written again only after the consumer's Release of `head` past it
//! was Acquired by the producer, as above.
//!
//! **Drop.** The array is freed when the last endpoint goes away (the shared
//! part is reference counted); at that point nobody else can touch it, and the
//! items still in `head..tail` are dropped exactly once. Items that were
//! popped were moved out and are not in that range; a rejected push hands
//! its item back to the caller.
//!
//! Ring capacity is a back-pressure bound, not a buffer to grow: a full ring
//! answers `Err(item)` and the sender decides what to do.
//!
//! This is one of the few modules of the broker allowed `unsafe`: the slots are
//! `MaybeUninit` cells whose initialisation state is given by the counters.

use std::fmt;
use std::mem::MaybeUninit;

use crate::sync::{Arc, AtomicUsize, CachePadded, Ordering, UnsafeCell};

use crate::engine::limits::LINK_CAPACITY_MAX;

/// The part both endpoints share.
struct Shared<T> {
    /// Items ever popped. Written by the consumer only (Release), read by the
    /// producer (Acquire).
    head: CachePadded<AtomicUsize>,
    /// Items ever pushed. Written by the producer only (Release), read by the
    /// consumer (Acquire).
    tail: CachePadded<AtomicUsize>,
    /// `capacity` slots; slot `n & mask` holds item number `n` while
    /// `head <= n < tail`.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// `capacity - 1`.
    mask: usize,
}

// SAFETY: the slots are only reached through a `Producer` (which writes slots
// in `tail..head + capacity`) or a `Consumer` (which moves items out of slots
// in `head..tail`); those ranges are disjoint and each endpoint is used by one
// thread at a time (`&mut self`), handing slots over with Release/Acquire on
// the counters. Items move between threads, so `T: Send` is required, and
// nothing hands out `&T` to more than one thread, so `T: Sync` is not.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: sending the shared part sends the items it holds, which `T: Send`
// allows; the counters are atomics.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // The last `Arc` is going away, so both endpoints are gone and the
        // `Arc`'s own release/acquire made all their writes visible here.
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        let mut n = head;
        while n != tail {
            self.slots[n & self.mask].with_mut(|slot| {
                // SAFETY: `head <= n < tail`, so slot `n & mask` holds an
                // initialised item that was never moved out; we have exclusive
                // access (`&mut self`) and drop it exactly once, as `n` moves on.
                unsafe { (*slot).assume_init_drop() }
            });
            n = n.wrapping_add(1);
        }
    }
}

/// Creates a ring of `capacity` slots and returns its two endpoints.
///
/// # Panics
///
/// If `capacity` is not a power of two or exceeds [`LINK_CAPACITY_MAX`]; ring
/// sizes come from constants and validated configuration, so this is a
/// programmer error.
pub fn channel<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    assert!(
        capacity.is_power_of_two() && capacity <= LINK_CAPACITY_MAX,
        "ring capacity must be a power of two no larger than {LINK_CAPACITY_MAX}, got {capacity}"
    );
    let slots = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: CachePadded::new(AtomicUsize::new(0)),
        tail: CachePadded::new(AtomicUsize::new(0)),
        slots,
        mask: capacity - 1,
    });
    let producer = Producer {
        shared: shared.clone(),
        tail: 0,
        head_cache: 0,
    };
    let consumer = Consumer {
        shared,
        head: 0,
        tail_cache: 0,
    };
    (producer, consumer)
}

/// The pushing end of a ring. One per ring; move it to the producing thread.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Our own counter: equal to `shared.tail`, which only we write.
    tail: usize,
    /// The consumer's `head` as we last loaded it (never ahead of the real one).
    head_cache: usize,
}

impl<T> Producer<T> {
    /// Pushes `item`, or hands it back in `Err` when the ring is full.
    ///
    /// Pushing does not wake the consumer; see
    /// [`Doorbell`](super::doorbell::Doorbell).
    #[inline]
    pub fn push(&mut self, item: T) -> Result<(), T> {
        let capacity = self.shared.mask + 1;
        if self.tail.wrapping_sub(self.head_cache) == capacity {
            // Acquire pairs with the consumer's Release of `head`: its reads of
            // the slots it freed happen before our writes to them.
            self.head_cache = self.shared.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_cache) == capacity {
                return Err(item);
            }
        }
        self.shared.slots[self.tail & self.shared.mask].with_mut(|slot| {
            // SAFETY: `tail - head < capacity`, so slot `tail & mask` is in
            // `tail..head + capacity`: owned by the producer, holding no live
            // item (never written, or moved out by the consumer before its
            // Release of `head`, which we Acquired). Writing does not drop
            // anything and overwrites nothing live.
            unsafe { (*slot).write(item) };
        });
        self.tail = self.tail.wrapping_add(1);
        // Release pairs with the consumer's Acquire of `tail`: the item's
        // bytes are visible before the consumer sees the new count.
        self.shared.tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// The ring's capacity, in items.
    pub fn capacity(&self) -> usize {
        self.shared.mask + 1
    }

    /// Items in the ring now. Exact when the consumer is idle, otherwise an
    /// upper bound that may already be stale when it returns.
    pub fn len(&self) -> usize {
        self.tail
            .wrapping_sub(self.shared.head.load(Ordering::Acquire))
    }

    /// Whether the ring holds no items (see [`len`](Self::len) for staleness).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a push would fail now (a stale answer errs towards "full").
    pub fn is_full(&self) -> bool {
        self.len() == self.capacity()
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

/// The popping end of a ring. One per ring; move it to the consuming thread.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Our own counter: equal to `shared.head`, which only we write (except
    /// inside `pop_batch`, which publishes it when the batch ends).
    head: usize,
    /// The producer's `tail` as we last loaded it (never ahead of the real one).
    tail_cache: usize,
}

impl<T> Consumer<T> {
    /// Pops the oldest item, or `None` when the ring is empty.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.tail_cache {
            // Acquire pairs with the producer's Release of `tail`.
            self.tail_cache = self.shared.tail.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        // SAFETY: `head != tail_cache <= tail`, so item `head` is initialised
        // and ours to move out; it is published as consumed just below.
        let item = unsafe { self.take_head() };
        self.head = self.head.wrapping_add(1);
        // Release pairs with the producer's Acquire of `head`: our read of the
        // slot happens before the producer reuses it.
        self.shared.head.store(self.head, Ordering::Release);
        Some(item)
    }

    /// Pops up to `max` items, oldest first, passing each to `f`; returns how
    /// many it popped. Only items already in the ring when the call starts are
    /// taken, so the work per call is bounded by `max` and the capacity.
    ///
    /// The slots are handed back to the producer once, at the end of the batch
    /// (or when `f` panics: the items already passed to `f` are consumed, the
    /// rest stay in the ring).
    pub fn pop_batch(&mut self, max: usize, mut f: impl FnMut(T)) -> usize {
        let mut available = self.tail_cache.wrapping_sub(self.head);
        if available < max {
            // Acquire pairs with the producer's Release of `tail`.
            self.tail_cache = self.shared.tail.load(Ordering::Acquire);
            available = self.tail_cache.wrapping_sub(self.head);
        }
        let count = available.min(max);
        if count == 0 {
            return 0;
        }
        let batch = PublishHeadOnDrop { consumer: self };
        for _ in 0..count {
            // SAFETY: `head < tail_cache <= tail` for each of the `count`
            // items, so each is initialised and ours; `head` advances past it
            // before `f` can unwind, so it is never moved out twice.
            let item = unsafe { batch.consumer.take_head() };
            batch.consumer.head = batch.consumer.head.wrapping_add(1);
            f(item);
        }
        drop(batch);
        count
    }

    /// The ring's capacity, in items.
    pub fn capacity(&self) -> usize {
        self.shared.mask + 1
    }

    /// Items in the ring now. Exact when the producer is idle, otherwise a
    /// lower bound that may already be stale when it returns.
    pub fn len(&self) -> usize {
        // Acquire pairs with the producer's Release of `tail`, so a caller that
        // sees a non-empty ring and then pops finds the items.
        self.shared
            .tail
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// Whether the ring holds no items. Always loads the producer's counter;
    /// this is the re-check a shard makes before it sleeps.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves item number `head` out of its slot, leaving the slot logically
    /// empty. Does not advance or publish `head`.
    ///
    /// # Safety
    ///
    /// Item `self.head` must be initialised (`head` is before a `tail` this
    /// consumer Acquired) and must not have been moved out; the caller must
    /// advance `head` past it before anything else can read the slot.
    #[inline]
    unsafe fn take_head(&self) -> T {
        self.shared.slots[self.head & self.shared.mask].with(|slot| {
            // SAFETY: guaranteed by the caller: the slot holds an initialised
            // item that nobody else reads or writes until `head` moves past it.
            unsafe { (*slot).assume_init_read() }
        })
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

/// Publishes a batch's consumed slots when the batch ends, also on unwind.
struct PublishHeadOnDrop<'a, T> {
    consumer: &'a mut Consumer<T>,
}

impl<T> Drop for PublishHeadOnDrop<'_, T> {
    fn drop(&mut self) {
        // Release pairs with the producer's Acquire of `head`.
        self.consumer
            .shared
            .head
            .store(self.consumer.head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::limits::LINK_CAPACITY_DEFAULT;
    use crate::sync::{model, thread};

    /// Pushes `item`, yielding while the ring is full.
    fn push_spin<T>(producer: &mut Producer<T>, mut item: T) {
        loop {
            match producer.push(item) {
                Ok(()) => return,
                Err(back) => {
                    item = back;
                    thread::yield_now();
                }
            }
        }
    }

    /// Pops one item, yielding while the ring is empty.
    fn pop_spin<T>(consumer: &mut Consumer<T>) -> T {
        loop {
            if let Some(item) = consumer.pop() {
                return item;
            }
            thread::yield_now();
        }
    }

    /// Counts drops per item so a test can see "each exactly once".
    struct Tracked {
        id: usize,
        drops: Arc<Vec<AtomicUsize>>,
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.drops[self.id].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn drop_counters(n: usize) -> Arc<Vec<AtomicUsize>> {
        Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect())
    }

    #[test]
    fn loom_ring_wraps_around_in_order() {
        // Twice the capacity, so the producer reuses every slot at least once.
        const ITEMS: usize = 2 * LINK_CAPACITY_DEFAULT;
        model(|| {
            let (mut producer, mut consumer) = channel::<usize>(LINK_CAPACITY_DEFAULT);
            let pusher = thread::spawn(move || {
                for i in 0..ITEMS {
                    push_spin(&mut producer, i);
                }
            });
            for expected in 0..ITEMS {
                assert_eq!(pop_spin(&mut consumer), expected);
            }
            pusher.join().unwrap();
            assert_eq!(consumer.pop(), None);
            assert!(consumer.is_empty());
        });
    }

    #[test]
    fn loom_ring_batch_pop_wraps_around_in_order() {
        const ITEMS: usize = 2 * LINK_CAPACITY_DEFAULT;
        model(|| {
            let (mut producer, mut consumer) = channel::<usize>(LINK_CAPACITY_DEFAULT);
            let pusher = thread::spawn(move || {
                for i in 0..ITEMS {
                    push_spin(&mut producer, i);
                }
            });
            let mut received = Vec::new();
            while received.len() < ITEMS {
                if consumer.pop_batch(ITEMS, |item| received.push(item)) == 0 {
                    thread::yield_now();
                }
            }
            pusher.join().unwrap();
            assert_eq!(received, (0..ITEMS).collect::<Vec<_>>());
        });
    }

    #[test]
    fn loom_ring_full_and_empty() {
        // One more push than fits, racing a consumer that pops twice.
        const ATTEMPTS: usize = LINK_CAPACITY_DEFAULT + 1;
        model(|| {
            let (mut producer, mut consumer) = channel::<usize>(LINK_CAPACITY_DEFAULT);
            let pusher = thread::spawn(move || {
                let mut accepted = Vec::new();
                for i in 0..ATTEMPTS {
                    match producer.push(i) {
                        Ok(()) => accepted.push(i),
                        // A rejected push hands back exactly what was pushed.
                        Err(back) => assert_eq!(back, i),
                    }
                }
                // Whatever the consumer did meanwhile, the ring never holds
                // more than its capacity.
                assert!(producer.len() <= LINK_CAPACITY_DEFAULT);
                accepted
            });
            let mut received = Vec::new();
            for _ in 0..2 {
                received.extend(consumer.pop());
            }
            let accepted = pusher.join().unwrap();
            // At most one attempt can fail: at most `capacity` items are ever
            // pending at once, and the first `capacity` attempts always fit.
            assert!(accepted.len() >= LINK_CAPACITY_DEFAULT);
            while let Some(item) = consumer.pop() {
                received.push(item);
            }
            assert_eq!(received, accepted, "every accepted item, once, in order");
            assert_eq!(consumer.pop(), None);
        });
    }

    #[test]
    fn loom_ring_drops_unconsumed_items_once() {
        // Three pushes into two slots while the consumer pops one; both
        // endpoints are dropped on their own threads, in either order.
        const ITEMS: usize = LINK_CAPACITY_DEFAULT + 1;
        model(|| {
            let drops = drop_counters(ITEMS);
            let (mut producer, mut consumer) = channel::<Tracked>(LINK_CAPACITY_DEFAULT);
            let pusher_drops = drops.clone();
            let pusher = thread::spawn(move || {
                for id in 0..ITEMS {
                    // A rejected item comes back and is dropped here.
                    let _ = producer.push(Tracked {
                        id,
                        drops: pusher_drops.clone(),
                    });
                }
                drop(producer);
            });
            let popper = thread::spawn(move || {
                drop(consumer.pop());
                drop(consumer);
            });
            pusher.join().unwrap();
            popper.join().unwrap();
            for (id, count) in drops.iter().enumerate() {
                assert_eq!(count.load(Ordering::Relaxed), 1, "item {id} dropped once");
            }
        });
    }

    #[test]
    fn full_ring_rejects_and_recovers() {
        let (mut producer, mut consumer) = channel::<u32>(4);
        for i in 0..4 {
            producer.push(i).unwrap();
        }
        assert!(producer.is_full());
        assert_eq!(producer.push(99), Err(99));
        assert_eq!(consumer.len(), 4);
        assert_eq!(consumer.pop(), Some(0));
        producer.push(4).unwrap();
        assert_eq!(producer.push(5), Err(5));
        let mut got = Vec::new();
        assert_eq!(consumer.pop_batch(10, |x| got.push(x)), 4);
        assert_eq!(got, [1, 2, 3, 4]);
        assert!(consumer.is_empty());
        assert!(producer.is_empty());
        assert_eq!(consumer.pop(), None);
    }

    #[test]
    fn capacity_one_ring_works() {
        let (mut producer, mut consumer) = channel::<u8>(1);
        for i in 0..5 {
            producer.push(i).unwrap();
            assert_eq!(producer.push(100), Err(100));
            assert_eq!(consumer.pop(), Some(i));
            assert_eq!(consumer.pop(), None);
        }
    }

    #[test]
    fn pop_batch_respects_max() {
        let (mut producer, mut consumer) = channel::<u32>(8);
        for i in 0..6 {
            producer.push(i).unwrap();
        }
        let mut got = Vec::new();
        assert_eq!(consumer.pop_batch(4, |x| got.push(x)), 4);
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(consumer.pop_batch(0, |x| got.push(x)), 0);
        assert_eq!(consumer.pop_batch(4, |x| got.push(x)), 2);
        assert_eq!(consumer.pop_batch(4, |x| got.push(x)), 0);
        assert_eq!(got, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn capacity_must_be_power_of_two() {
        let _ = channel::<u8>(3);
    }

    #[cfg(not(sluice_loom))]
    #[test]
    fn panicking_batch_consumer_keeps_the_rest() {
        let drops = drop_counters(4);
        let (mut producer, mut consumer) = channel::<Tracked>(4);
        for id in 0..4 {
            assert!(
                producer
                    .push(Tracked {
                        id,
                        drops: drops.clone()
                    })
                    .is_ok()
            );
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            consumer.pop_batch(4, |item| {
                if item.id == 1 {
                    panic!("consumer failed on item 1");
                }
            });
        }));
        assert!(result.is_err());
        // Items 0 and 1 were handed out (and dropped by the unwinding closure);
        // 2 and 3 are still in the ring, in order.
        assert_eq!(consumer.len(), 2);
        assert_eq!(consumer.pop().map(|t| t.id), Some(2));
        drop(producer);
        drop(consumer);
        for (id, count) in drops.iter().enumerate() {
            assert_eq!(count.load(Ordering::Relaxed), 1, "item {id} dropped once");
        }
    }

    #[cfg(not(sluice_loom))]
    #[test]
    fn counters_wrap_around_usize() {
        // Start both counters just below the wrap point, as after 2^64 items.
        let (mut producer, mut consumer) = channel::<usize>(4);
        let start = usize::MAX - 5;
        producer.shared.head.store(start, Ordering::Relaxed);
        producer.shared.tail.store(start, Ordering::Relaxed);
        producer.tail = start;
        producer.head_cache = start;
        consumer.head = start;
        consumer.tail_cache = start;
        let mut next_pop = 0;
        for i in 0..20 {
            producer.push(i).unwrap();
            if i % 3 == 2 {
                // Keep the ring near full across the wrap.
                while producer.len() > 1 {
                    assert_eq!(consumer.pop(), Some(next_pop));
                    next_pop += 1;
                }
            }
        }
        while let Some(item) = consumer.pop() {
            assert_eq!(item, next_pop);
            next_pop += 1;
        }
        assert_eq!(next_pop, 20);
    }

    /// A producer and a consumer thread move `ITEMS` sequence numbers through
    /// a small ring; every number must arrive once, in order.
    #[cfg(not(sluice_loom))]
    #[test]
    fn stress_spsc_in_order() {
        const ITEMS: u64 = 500_000;
        let (mut producer, mut consumer) = channel::<u64>(64);
        let pusher = thread::spawn(move || {
            for i in 0..ITEMS {
                push_spin(&mut producer, i);
            }
        });
        let mut expected = 0;
        while expected < ITEMS {
            match consumer.pop() {
                Some(item) => {
                    assert_eq!(item, expected);
                    expected += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        pusher.join().unwrap();
        assert_eq!(consumer.pop(), None);
    }

    /// As above with batched pops and boxed items, so a lost or doubled item
    /// also shows up as a leak or a double free under sanitizers and Miri.
    #[cfg(not(sluice_loom))]
    #[test]
    fn stress_spsc_batches_of_boxes() {
        const ITEMS: u64 = 200_000;
        let (mut producer, mut consumer) = channel::<Box<u64>>(16);
        let pusher = thread::spawn(move || {
            for i in 0..ITEMS {
                push_spin(&mut producer, Box::new(i));
            }
        });
        let mut expected = 0;
        while expected < ITEMS {
            let popped = consumer.pop_batch(7, |item| {
                assert_eq!(*item, expected);
                expected += 1;
            });
            if popped == 0 {
                std::hint::spin_loop();
            }
        }
        pusher.join().unwrap();
    }

    /// Producer and consumer are dropped while items are in flight; every item
    /// is dropped exactly once, whichever side goes last.
    #[cfg(not(sluice_loom))]
    #[test]
    fn stress_drop_while_in_flight() {
        const ITEMS: usize = 10_000;
        for round in 0..20 {
            let drops = drop_counters(ITEMS);
            let (mut producer, mut consumer) = channel::<Tracked>(32);
            let pusher_drops = drops.clone();
            let pusher = thread::spawn(move || {
                for id in 0..ITEMS {
                    let _ = producer.push(Tracked {
                        id,
                        drops: pusher_drops.clone(),
                    });
                }
            });
            let popper = thread::spawn(move || {
                for _ in 0..round * 100 {
                    drop(consumer.pop());
                }
            });
            pusher.join().unwrap();
            popper.join().unwrap();
            for (id, count) in drops.iter().enumerate() {
                assert_eq!(count.load(Ordering::Relaxed), 1, "item {id} dropped once");
            }
        }
    }
}
