//! Waking a sleeping shard, and the mesh of rings and doorbells between shards.
//!
//! A shard that has nothing to do sleeps in the kernel (an io_uring wait or
//! `epoll_wait`). Other shards push into its inbound rings and must wake it,
//! but a wake-up is a system call (an eventfd write or an io_uring
//! `MSG_RING`), far too dear to pay on every push. So each shard has a
//! [`Doorbell`]: a `sleeping` flag that it raises before it sleeps, and a
//! [`Wake`] hook that the server implements. A producer rings the bell after
//! pushing and makes the system call only when the flag is up.
//!
//! # Ground rules
//!
//! **Ownership.** The flag belongs to the consumer shard: only it raises the
//! flag ([`Doorbell::prepare_sleep`]) and only it lowers it after waking
//! ([`Doorbell::woke`]) or when it cancels a sleep. A producer lowers it only
//! with a `swap`, and only the producer whose `swap` saw it up calls
//! [`Wake::wake`]: one system call per sleep, however many producers push.
//!
//! **No lost wake-up (Dekker).** Two threads, each writing one location and
//! then reading the other's, with a `SeqCst` fence between the write and the
//! read:
//!
//! ```text
//! producer                          consumer
//! push: tail.store(n+1, Release)    sleeping.swap(true, Relaxed)
//! fence(SeqCst)            // F1    fence(SeqCst)               // F2
//! sleeping.load(Relaxed)            rings_are_empty()  (tail.load(Acquire))
//! ```
//!
//! The two fences are ordered one way or the other in the single total order
//! of `SeqCst` operations. If F1 comes first, the consumer's read of `tail`,
//! after F2, sees the push, the rings are not empty, and the consumer cancels
//! its sleep. If F2 comes first, the producer's read of `sleeping`, after F1,
//! sees the consumer's `true` or a later value; a later value while the
//! consumer is asleep can only be `false` written by another producer's
//! successful `swap`, which then issued the wake. So either the consumer sees
//! the item, or a wake is issued after the flag went up: the consumer never
//! sleeps with an item in one of its rings and no wake pending. (Without the
//! fences both reads may miss both writes: the store-buffer reordering that
//! x86 performs too.) The loom models below check this on these types.
//!
//! **Spurious wakes are harmless.** A producer may wake a consumer that has
//! just cancelled its sleep or woken for another reason (a timer, a socket);
//! the server's next wait then returns at once, it drains, and it goes on.
//!
//! **Back-pressure is not signalled.** The bell announces pushes, not free
//! space: a shard holding messages for a full ring must retry on its next
//! turn and must not sleep without a timeout while it holds them.

use std::fmt;

use super::ring::{self, Consumer, Producer};
use crate::sync::{Arc, AtomicBool, CachePadded, Ordering, fence};

/// How a sleeping shard is woken: the server implements it with an eventfd
/// write or an io_uring `MSG_RING` to the shard's ring.
///
/// Called on the producing shard's thread, at most once per announced sleep
/// (see [`Doorbell::after_push`]). It must make the consumer's current or next
/// wait return; it must not block.
pub trait Wake: Send + Sync {
    /// Wakes the shard this hook belongs to.
    fn wake(&self);
}

/// Wakes nobody: the hook of shards that never sleep (polled in turn by a
/// test harness or a bench, loading a snapshot, checked off-line).
#[derive(Debug)]
pub struct NoWake;

impl Wake for NoWake {
    fn wake(&self) {}
}

/// A shard's wake-up flag and hook, shared by the shard (consumer side) and
/// every shard that sends to it (producer side).
pub struct Doorbell {
    /// Raised by the consumer before it sleeps; written by different cores, so
    /// it has its own cache line.
    sleeping: CachePadded<AtomicBool>,
    waker: Box<dyn Wake>,
}

impl Doorbell {
    /// A doorbell whose wake-ups go through `waker`.
    pub fn new(waker: Box<dyn Wake>) -> Self {
        Self {
            sleeping: CachePadded::new(AtomicBool::new(false)),
            waker,
        }
    }

    /// Producer side: call after pushing one or more items into a ring this
    /// doorbell's shard consumes. Wakes the shard if it announced that it
    /// sleeps and no other producer woke it yet; returns whether it woke it.
    ///
    /// Costs a full fence and a read of a shared line; the system call only
    /// when the shard sleeps. Push a batch, then ring once.
    #[inline]
    pub fn after_push(&self) -> bool {
        // F1: orders the push's `tail` store before the `sleeping` load.
        fence(Ordering::SeqCst);
        // The load keeps the common case (shard awake) free of a read-modify-
        // write on the shared line; the swap elects a single waker per sleep.
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::Relaxed) {
            self.waker.wake();
            true
        } else {
            false
        }
    }

    /// Consumer side: announces that the shard is about to sleep, then
    /// re-checks its rings with `rings_are_empty`. Returns `true` when the
    /// shard may sleep: then any later push rings the bell, or a wake is
    /// already pending. Returns `false`, with the announcement withdrawn, when
    /// something arrived: drain and try again.
    ///
    /// `rings_are_empty` must load every inbound ring's producer counter afresh
    /// (as [`Consumer::is_empty`] does).
    #[inline]
    pub fn prepare_sleep(&self, rings_are_empty: impl FnOnce() -> bool) -> bool {
        // A swap rather than a store: as a read-modify-write it takes its place
        // in `sleeping`'s modification order after any producer's swap that came
        // before it, which the C++ model already guarantees for a plain store
        // but loom's model does not (it would report a wake-up lost through a
        // stale `false`). This path is about to sleep; the swap costs nothing.
        self.sleeping.swap(true, Ordering::Relaxed);
        // F2: orders raising the flag before the rings' `tail` loads.
        fence(Ordering::SeqCst);
        if rings_are_empty() {
            true
        } else {
            self.sleeping.store(false, Ordering::Relaxed);
            false
        }
    }

    /// Consumer side: call when the wait returns (for whatever reason), before
    /// draining, so producers stop ringing.
    #[inline]
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Whether the shard has announced a sleep that no producer has answered
    /// yet. A snapshot, for metrics and tests.
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doorbell")
            .field("sleeping", &self.is_sleeping())
            .finish_non_exhaustive()
    }
}

/// One shard's ends of the mesh: a ring to every other shard (with that
/// shard's doorbell), a ring from every other shard, and its own doorbell.
pub struct ShardLinks<T> {
    shard: usize,
    /// Indexed by destination shard; `None` at our own index.
    outbound: Box<[Option<Outbound<T>>]>,
    /// Indexed by source shard; `None` at our own index.
    inbound: Box<[Option<Consumer<T>>]>,
    doorbell: Arc<Doorbell>,
    /// Destinations pushed to with [`push`](Self::push) and not rung since.
    unrung: Vec<usize>,
}

struct Outbound<T> {
    producer: Producer<T>,
    doorbell: Arc<Doorbell>,
    unrung: bool,
}

/// Builds the full mesh for `shards` shards: one ring of `capacity` slots for
/// every ordered pair of distinct shards, so shard `i` has one outbound ring
/// to and one inbound ring from each other shard. Element `i` of the result
/// belongs to shard `i`, whose doorbell wakes through `wakers[i]`.
///
/// # Panics
///
/// If `shards` is 0, `wakers` does not hold one hook per shard, or `capacity`
/// is not a valid ring capacity (see [`ring::channel`]).
pub fn mesh<T>(shards: usize, capacity: usize, wakers: Vec<Box<dyn Wake>>) -> Vec<ShardLinks<T>> {
    assert!(shards > 0, "a mesh needs at least one shard");
    assert_eq!(wakers.len(), shards, "one wake hook per shard");
    let doorbells: Vec<Arc<Doorbell>> = wakers
        .into_iter()
        .map(|waker| Arc::new(Doorbell::new(waker)))
        .collect();
    let mut links: Vec<ShardLinks<T>> = doorbells
        .iter()
        .enumerate()
        .map(|(shard, doorbell)| ShardLinks {
            shard,
            outbound: (0..shards).map(|_| None).collect(),
            inbound: (0..shards).map(|_| None).collect(),
            doorbell: doorbell.clone(),
            unrung: Vec::with_capacity(shards),
        })
        .collect();
    for from in 0..shards {
        for to in (0..shards).filter(|&to| to != from) {
            let (producer, consumer) = ring::channel(capacity);
            links[from].outbound[to] = Some(Outbound {
                producer,
                doorbell: doorbells[to].clone(),
                unrung: false,
            });
            links[to].inbound[from] = Some(consumer);
        }
    }
    links
}

impl<T> ShardLinks<T> {
    /// This shard's index.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// How many shards the mesh joins.
    pub fn shards(&self) -> usize {
        self.outbound.len()
    }

    /// This shard's own doorbell (the server waits on the fd its [`Wake`]
    /// writes to).
    pub fn doorbell(&self) -> &Arc<Doorbell> {
        &self.doorbell
    }

    /// Sends `msg` to shard `dest` and rings its doorbell; hands `msg` back
    /// when the ring to `dest` is full.
    ///
    /// # Panics
    ///
    /// If `dest` is this shard or out of range (a routing bug).
    pub fn send(&mut self, dest: usize, msg: T) -> Result<(), T> {
        let link = self.link(dest);
        link.producer.push(msg)?;
        link.unrung = false;
        link.doorbell.after_push();
        Ok(())
    }

    /// Pushes `msg` to shard `dest` without ringing its doorbell yet: the next
    /// [`flush`](Self::flush) or [`prepare_sleep`](Self::prepare_sleep) rings
    /// it, once for all pushes since. For batches.
    ///
    /// # Panics
    ///
    /// If `dest` is this shard or out of range (a routing bug).
    pub fn push(&mut self, dest: usize, msg: T) -> Result<(), T> {
        let link = self.link(dest);
        link.producer.push(msg)?;
        if !link.unrung {
            link.unrung = true;
            self.unrung.push(dest);
        }
        Ok(())
    }

    /// Rings the doorbell of every shard pushed to since the last flush.
    pub fn flush(&mut self) {
        for dest in self.unrung.drain(..) {
            if let Some(link) = self.outbound[dest].as_mut() {
                link.unrung = false;
                link.doorbell.after_push();
            }
        }
    }

    /// Whether a send to `dest` would find its ring full now.
    ///
    /// # Panics
    ///
    /// If `dest` is this shard or out of range.
    pub fn is_full(&mut self, dest: usize) -> bool {
        self.link(dest).producer.is_full()
    }

    /// Pops what the other shards sent, passing `(source shard, message)` to
    /// `f`, and returns how many. Takes at most one ring's worth from each
    /// source, and per source in the order sent.
    pub fn drain(&mut self, mut f: impl FnMut(usize, T)) -> usize {
        let mut total = 0;
        for (from, consumer) in self.inbound.iter_mut().enumerate() {
            if let Some(consumer) = consumer {
                total += consumer.pop_batch(consumer.capacity(), |msg| f(from, msg));
            }
        }
        total
    }

    /// Whether every inbound ring is empty (loads each producer counter).
    pub fn inbound_is_empty(&self) -> bool {
        self.inbound.iter().flatten().all(Consumer::is_empty)
    }

    /// Rings what [`push`](Self::push) left unrung, then announces that this
    /// shard is about to sleep and re-checks its inbound rings. `true`: sleep
    /// (any later send wakes it); `false`: something arrived, drain first.
    /// See [`Doorbell::prepare_sleep`]. Call [`woke`](Self::woke) after the
    /// wait returns.
    pub fn prepare_sleep(&mut self) -> bool {
        self.flush();
        let inbound = &self.inbound;
        self.doorbell
            .prepare_sleep(|| inbound.iter().flatten().all(Consumer::is_empty))
    }

    /// Call when the wait returns, before draining. See [`Doorbell::woke`].
    pub fn woke(&self) {
        self.doorbell.woke();
    }

    fn link(&mut self, dest: usize) -> &mut Outbound<T> {
        let (shard, shards) = (self.shard, self.outbound.len());
        match self.outbound.get_mut(dest) {
            Some(Some(link)) => link,
            _ => panic!("shard {shard} has no link to shard {dest} (mesh of {shards})"),
        }
    }
}

impl<T> fmt::Debug for ShardLinks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardLinks")
            .field("shard", &self.shard)
            .field("shards", &self.shards())
            .field("doorbell", &self.doorbell)
            .field("unrung", &self.unrung)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::limits::LINK_CAPACITY_DEFAULT;
    use crate::sync::{AtomicUsize, model, thread};

    /// A fake eventfd: counts wakes pending (read and reset by the sleeper)
    /// and wakes ever issued.
    #[derive(Default)]
    struct Counter {
        pending: AtomicUsize,
        issued: AtomicUsize,
    }

    struct CountingWake(Arc<Counter>);

    impl Wake for CountingWake {
        fn wake(&self) {
            self.0.pending.fetch_add(1, Ordering::SeqCst);
            self.0.issued.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_mesh(shards: usize) -> (Vec<ShardLinks<usize>>, Vec<Arc<Counter>>) {
        let counters: Vec<Arc<Counter>> = (0..shards).map(|_| Arc::default()).collect();
        let wakers = counters
            .iter()
            .map(|c| Box::new(CountingWake(c.clone())) as Box<dyn Wake>)
            .collect();
        (mesh(shards, LINK_CAPACITY_DEFAULT, wakers), counters)
    }

    /// The receiving shard's loop: drain; when idle, announce sleep. A sleep
    /// has no timeout: it lasts until the senders are all done (the longest a
    /// sleep can last), and then a wake must be pending, or the shard would
    /// sleep for ever with messages in its rings.
    fn receive_all(
        links: &mut ShardLinks<usize>,
        counter: &Counter,
        expected: usize,
        mut senders: Vec<thread::JoinHandle<()>>,
    ) -> Vec<(usize, usize)> {
        let mut received = Vec::new();
        let mut announced = 0;
        while received.len() < expected {
            links.drain(|from, msg| received.push((from, msg)));
            if received.len() == expected {
                break;
            }
            announced += 1;
            if links.prepare_sleep() {
                for sender in senders.drain(..) {
                    sender.join().unwrap();
                }
                let pending = counter.pending.swap(0, Ordering::SeqCst);
                assert!(
                    pending > 0,
                    "lost wake-up: asleep with {} message(s) in flight and no wake pending",
                    expected - received.len()
                );
                links.woke();
            }
        }
        for sender in senders {
            sender.join().unwrap();
        }
        let issued = counter.issued.load(Ordering::SeqCst);
        assert!(
            issued <= announced,
            "{issued} wakes for {announced} announced sleeps: one wake per sleep at most"
        );
        received
    }

    #[test]
    fn loom_no_lost_wakeup_one_sender() {
        model(|| {
            let (mut links, counters) = counting_mesh(2);
            let mut receiver = links.pop().unwrap();
            let mut sender = links.pop().unwrap();
            let handle = thread::spawn(move || {
                for msg in 0..LINK_CAPACITY_DEFAULT {
                    sender.send(1, msg).unwrap();
                }
            });
            let received = receive_all(
                &mut receiver,
                &counters[1],
                LINK_CAPACITY_DEFAULT,
                vec![handle],
            );
            let expected: Vec<_> = (0..LINK_CAPACITY_DEFAULT).map(|m| (0, m)).collect();
            assert_eq!(received, expected);
        });
    }

    #[test]
    fn loom_no_lost_wakeup_two_senders() {
        model(|| {
            let (links, counters) = counting_mesh(3);
            let mut links = links.into_iter();
            let mut first = links.next().unwrap();
            let mut receiver = links.next().unwrap();
            let mut second = links.next().unwrap();
            let a = thread::spawn(move || first.send(1, 10).unwrap());
            // The second sender batches: push, then the doorbell rings on flush.
            let b = thread::spawn(move || {
                second.push(1, 20).unwrap();
                second.flush();
            });
            let mut received = receive_all(&mut receiver, &counters[1], 2, vec![a, b]);
            received.sort_unstable();
            assert_eq!(received, [(0, 10), (2, 20)]);
        });
    }

    #[test]
    fn prepare_sleep_cancels_when_something_arrived() {
        let (mut links, counters) = counting_mesh(2);
        links[0].send(1, 7).unwrap();
        assert!(!links[1].prepare_sleep(), "an item is waiting");
        assert!(!links[1].doorbell().is_sleeping());
        let mut got = Vec::new();
        links[1].drain(|from, msg| got.push((from, msg)));
        assert_eq!(got, [(0, 7)]);
        assert!(links[1].prepare_sleep());
        assert!(links[1].doorbell().is_sleeping());
        // The first send to a sleeper wakes it; the next ones don't repeat it.
        links[0].send(1, 8).unwrap();
        links[0].send(1, 9).unwrap();
        assert_eq!(counters[1].issued.load(Ordering::SeqCst), 1);
        assert!(!links[1].doorbell().is_sleeping());
        links[1].woke();
        assert_eq!(links[1].drain(|_, _| {}), 2);
        // An awake shard is never woken.
        links[0].send(1, 10).unwrap();
        assert_eq!(counters[1].issued.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn push_defers_the_wake_until_flush_or_sleep() {
        let (mut links, counters) = counting_mesh(3);
        assert!(links[1].prepare_sleep());
        assert!(links[2].prepare_sleep());
        links[0].push(1, 1).unwrap();
        links[0].push(2, 2).unwrap();
        links[0].push(1, 3).unwrap();
        assert_eq!(counters[1].issued.load(Ordering::SeqCst), 0);
        // Going to sleep itself rings every bell it owes.
        assert!(links[0].prepare_sleep());
        assert_eq!(counters[1].issued.load(Ordering::SeqCst), 1);
        assert_eq!(counters[2].issued.load(Ordering::SeqCst), 1);
        assert_eq!(counters[0].issued.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn full_link_hands_the_message_back() {
        let (mut links, _) = counting_mesh(2);
        for msg in 0..LINK_CAPACITY_DEFAULT {
            links[1].send(0, msg).unwrap();
        }
        assert!(links[1].is_full(0));
        assert_eq!(links[1].send(0, 99), Err(99));
        assert_eq!(links[1].push(0, 98), Err(98));
        let mut got = Vec::new();
        links[0].drain(|_, msg| got.push(msg));
        assert_eq!(got, (0..LINK_CAPACITY_DEFAULT).collect::<Vec<_>>());
        assert!(links[0].inbound_is_empty());
    }

    #[test]
    #[should_panic(expected = "no link to shard 1")]
    fn sending_to_itself_is_a_bug() {
        let (mut links, _) = counting_mesh(2);
        let _ = links[1].send(1, 0);
    }

    /// Every shard sends `PER_LINK` numbered messages to every other shard
    /// over small rings, sleeping on a condition variable (an eventfd stand-in)
    /// whenever it is idle; every message must arrive once, in order per link.
    #[cfg(not(sluice_loom))]
    #[test]
    fn stress_mesh_with_sleeping_shards() {
        // The condition variable stands in for the kernel's eventfd: test
        // scaffolding around the facade's types, not one of them.
        use std::sync::{Condvar, Mutex};

        const SHARDS: usize = 3;
        const PER_LINK: usize = 20_000;

        #[derive(Default)]
        struct EventFd {
            raised: Mutex<bool>,
            cond: Condvar,
        }
        impl EventFd {
            fn wait(&self) {
                let mut raised = self.raised.lock().unwrap();
                while !*raised {
                    raised = self.cond.wait(raised).unwrap();
                }
                *raised = false;
            }
        }
        struct EventFdWake(Arc<EventFd>);
        impl Wake for EventFdWake {
            fn wake(&self) {
                *self.0.raised.lock().unwrap() = true;
                self.0.cond.notify_one();
            }
        }

        let fds: Vec<Arc<EventFd>> = (0..SHARDS).map(|_| Arc::default()).collect();
        let wakers = fds
            .iter()
            .map(|fd| Box::new(EventFdWake(fd.clone())) as Box<dyn Wake>)
            .collect();
        let links = mesh::<(usize, usize)>(SHARDS, 8, wakers);
        let handles: Vec<_> = links
            .into_iter()
            .zip(fds)
            .map(|(mut links, fd)| {
                thread::spawn(move || {
                    let me = links.shard();
                    let mut next_to_send = [0; SHARDS];
                    let mut next_expected = [0; SHARDS];
                    let mut received = 0;
                    let mut sleeps = 0;
                    let expected = PER_LINK * (SHARDS - 1);
                    loop {
                        let mut blocked = false;
                        for dest in (0..SHARDS).filter(|&d| d != me) {
                            while next_to_send[dest] < PER_LINK {
                                let msg = (me, next_to_send[dest]);
                                if links.push(dest, msg).is_err() {
                                    blocked = true;
                                    break;
                                }
                                next_to_send[dest] += 1;
                            }
                        }
                        links.flush();
                        received += links.drain(|from, (sender, seq)| {
                            assert_eq!(from, sender);
                            assert_eq!(seq, next_expected[from], "in order, none lost");
                            next_expected[from] += 1;
                        });
                        let sent_all = next_to_send.iter().sum::<usize>() == expected;
                        if sent_all && received == expected {
                            return sleeps;
                        }
                        if blocked {
                            // Waiting for space: the bell does not announce it.
                            thread::yield_now();
                        } else if links.prepare_sleep() {
                            sleeps += 1;
                            fd.wait();
                            links.woke();
                        }
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    }
}
