//! One shard's thread: its io driver, its engine [`Shard`] and its
//! connections' [`Session`]s, in one event loop. The sessions hold each
//! connection's protocol state (`session/`); this loop carries their
//! commands to the driver, lends them the engine, and keeps the shard's
//! clock, deadlines and shutdown.
//!
//! # A turn of the loop
//!
//! 1. Work out how long to wait: the engine's next timer, the next
//!    housekeeping tick (connection deadlines, stats publishing), a short cap
//!    while the engine holds messages for a full ring (`has_outbound`) or a
//!    connection is paused on unsent bytes, and the shutdown deadline.
//! 2. Announce the sleep on the shard's doorbell. The check that no ring has
//!    work is an engine poll that must do nothing: if it did anything, the
//!    sleep is off and the turn runs with a zero wait.
//! 3. `driver.poll`. Accepts, data and closes are handled in its callback.
//!    The clock is read when the first event arrives, or after `poll`
//!    returns: always after the wait, never from before it.
//! 4. `shard.poll(now)`: rings from other shards, due timers. Completions
//!    are routed to their sessions by ticket.
//!
//! # Two times
//!
//! The sessions' deadlines (HELLO, unfinished frames, the session timeout,
//! closing, draining) and the loop's own (housekeeping, stats, shutdown)
//! run on real time, `now_ns`. The engine runs on the server's
//! [`Clock`](super::clock::Clock): the same readings on the real clock;
//! on a manual clock, the manual time, read again for each operation
//! handed to the engine (so a RECEIVE right behind an `ADVANCE_CLOCK` on
//! the same connection sees the new time), and the engine's next timer does
//! not bound the wait (only an advance, which wakes the shard, makes it
//! due).
//! 5. Housekeeping when due, shutdown steps, resuming paused connections,
//!    then every reply written this turn goes to the driver, one send per
//!    connection.
//!
//! # Tickets
//!
//! Every request the engine does not answer at once gets a ticket from a
//! per-shard counter that never repeats, and an entry `ticket -> connection
//! id`; the session keeps the rest (request id, the queue of a RECEIVE). A
//! connection id carries its slot's generation, so a completion for a
//! connection that closed (and whose slot may hold a new connection now)
//! finds no entry, or a session that does not know the ticket, and is
//! dropped; on close the connection's tickets are also cancelled in the
//! engine. Request ids are the client's and may repeat, so they are carried,
//! not used as keys.
//!
//! # Back-pressure
//!
//! A session that must not be read (see `session/`) asks the driver to
//! stop reading it; the driver reports no event when a send completes, so
//! while any connection is paused the loop wakes every millisecond to see
//! whether it may read again.
//!
//! # Files
//!
//! - `mod.rs`: the loop, the connection as it holds it, the engine as it
//!   lends it to a session, the events, and what follows the wait;
//! - `setup.rs`: the shard's state at start (the sessions' configuration,
//!   the HELLO reply);
//! - `accept.rs`: admitting, refusing and closing connections, the cap
//!   before HELLO, the failed accepts, and a HELLO's token check;
//! - `drain.rs`: shutdown: draining the connections, then the last close;
//! - `engine_link.rs`: the engine as the loop lends it to one session;
//! - `metrics.rs`: the metrics endpoint's connections and scrapes;
//! - `moves.rs`: the SQS door's message-move tasks' steps.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::time::Duration;

use super::clock::{self, Clock, EngineTime, nanos};
use super::conn::ConnSession;
use super::limits::{DRAIN_RECHECK, OUTBOUND_RETRY, PAUSED_RECHECK, STATS_PUBLISH_INTERVAL};
use super::session::{Answer, EngineAccess, Phase, Question, SessionConfig, SessionContext};
use super::shared::{ServerState, ShardStats};
use super::sqs_session::SqsConfig;
use super::transport::{Inbound, Transport};
use crate::engine::mesh::doorbell::Doorbell;
use crate::engine::{OpResult, Shard};
use crate::io::{ConnId, Connections, Driver, Event, ListenerId};
use crate::sync::Arc;
use crate::sync::Ordering::{Acquire, Release};

mod accept;
mod commands;
mod drain;
mod engine_link;
mod log;
mod metrics;
mod moves;
mod setup;

use accept::auth_outcome;
pub(crate) use accept::sqs_unavailable;
use commands::carry_out;
use engine_link::EngineLink;
pub use log::ShardLog;
use metrics::MetricsDoor;
use moves::Mover;

/// The listener of the SQS door, beside the binary protocol's (0).
pub const SQS_LISTENER: ListenerId = ListenerId(1);

/// The listener of the metrics endpoint: after the SQS door's, if open.
#[must_use]
pub fn metrics_listener(sqs_open: bool) -> ListenerId {
    ListenerId(1 + u8::from(sqs_open))
}

/// What a shard thread is handed once every shard's driver is open.
#[derive(Debug)]
pub struct ShardStart {
    /// This shard's engine.
    pub engine: Shard,
    /// This shard's doorbell (the engine owns the rings).
    pub doorbell: Arc<Doorbell>,
    /// Everything shared.
    pub shared: Arc<ServerState>,
    /// Its write-ahead log, under `--durability batch|always`.
    pub log: Option<ShardLog>,
}

/// Runs shard `index` until shutdown completes, and hands its engine back
/// (the server saves it to the snapshot, if there is one). Errors are the
/// driver's.
pub fn run(index: u16, mut driver: Box<dyn Driver>, start: ShardStart) -> io::Result<Shard> {
    let _guard = StopOnPanic(start.shared.clone());
    let mut st = State::new(index, start);
    if let Some(log) = st.log.as_mut() {
        log.start_syncer(index, driver.waker())?;
    }
    // When the last wait ended: from then to the next turn the shard works.
    let mut wait_ended_ns: Option<u64> = None;
    loop {
        let now = clock::now_ns();
        st.count_turn(now, wait_ended_ns);
        let time = st.shared.clock.engine_time(now, clock::wall_ms());
        let mut timeout = st.wait_timeout(now, time.now_ns);
        // Spinning: within --idle-spin of the last work, poll without
        // sleeping, so the next request costs no wake-up.
        if now < st.spin_until_ns {
            timeout = Some(Duration::ZERO);
        }
        if timeout != Some(Duration::ZERO) {
            let engine = &mut st.engine;
            if !st
                .doorbell
                .prepare_sleep(|| engine.poll(time.now_ns, time.wall_ms) == 0)
            {
                timeout = Some(Duration::ZERO);
            }
        }
        st.clock_fresh = false;
        st.events = 0;
        let result = driver.poll(timeout, &mut |io, event| st.on_event(io, event));
        st.doorbell.woke();
        result?;
        st.refresh_clock();
        // The clock was read at the first event, or just now.
        wait_ended_ns = Some(st.now_ns);
        if st.events > 0 && st.idle_spin_ns > 0 {
            st.spin_until_ns = st.now_ns.saturating_add(st.idle_spin_ns);
        }
        if st.shared.shutting_down() && st.drain_deadline_ns.is_none() {
            driver.stop_accepting_except(st.metrics.as_ref().map(|m| m.listener));
            st.begin_drain(driver.connections_mut());
        }
        st.after_wait(driver.connections_mut());
        if st.exit {
            break;
        }
    }
    st.finish(driver.connections_mut());
    Ok(st.engine)
}

/// A shard that panics (a bug) stops the whole server, so that the process
/// ends and is restarted rather than run on with a shard missing.
struct StopOnPanic(Arc<ServerState>);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if crate::sync::thread::panicking() {
            tracing::error!("a shard panicked: shutting the server down");
            self.0.begin_shutdown();
        }
    }
}

/// A connection as the loop holds it.
#[derive(Debug)]
struct Conn {
    /// The driver's id (slot and generation).
    id: ConnId,
    session: ConnSession,
    /// Plain text or TLS, between the driver and the session.
    transport: Transport,
    /// The server's connection place it holds.
    place: Place,
    /// Whether it is read, or how it ends.
    ending: Ending,
    /// Whether it is in `State::dirty` (replies to hand over this turn).
    dirty: bool,
}

/// Connection `id`, if it is still the one open in its slot.
fn live_conn(conns: &mut [Option<Conn>], id: ConnId) -> Option<&mut Conn> {
    conns
        .get_mut(id.index() as usize)
        .and_then(Option::as_mut)
        .filter(|c| c.id == id)
}

/// Which of the server's connection places a connection holds: given back
/// when it closes (or sooner, when it is evicted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// None: refused at accept, or its place already given back.
    None,
    /// One of `--max-connections` and one of
    /// `--max-connections-before-hello`: a binary connection before HELLO.
    BeforeHello,
    /// One of `--max-connections`: a binary connection past HELLO, or an
    /// SQS connection.
    Counted,
    /// One of the metrics endpoint's places.
    Metrics,
}

impl Place {
    /// Whether it holds one of `--max-connections`.
    fn counted(self) -> bool {
        matches!(self, Place::BeforeHello | Place::Counted)
    }
}

/// Whether a connection's bytes still go to its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Yes (its session may itself be closing it).
    Open,
    /// Yes, and its session has closed it while its TLS handshake, which
    /// carries the last reply (a refusal), was still going on: it is closed
    /// when the handshake is done (or at the session's close deadline).
    AfterHandshake,
    /// No: its transport refused it, or it was evicted to make room; it is
    /// closing.
    Refused,
}

struct State {
    index: u16,
    shared: Arc<ServerState>,
    engine: Shard,
    doorbell: Arc<Doorbell>,
    config: SessionConfig,
    /// The SQS door's connections' settings, when the door is open.
    sqs: Option<SqsConfig>,
    /// The metrics endpoint's connections, when it is open.
    metrics: Option<MetricsDoor>,
    /// The SQS door's message-move tasks' steps this shard takes.
    mover: Option<Mover>,
    unsent_total_max: u64,
    shutdown_timeout_ns: u64,
    conns: Vec<Option<Conn>>,
    tickets: HashMap<u64, ConnId>,
    next_ticket: u64,
    completions: Vec<(u64, OpResult)>,
    /// Connections with replies to hand to the driver this turn.
    dirty: Vec<ConnId>,
    /// Connections paused for back-pressure.
    paused: Vec<ConnId>,
    /// Connections counted before HELLO, oldest first; entries of those
    /// that have since said HELLO or closed are skipped when met.
    hello_order: VecDeque<ConnId>,
    /// Connections whose `ADVANCE_CLOCK` waits for every shard to catch up.
    clock_waiters: Vec<ConnId>,
    /// Real time, read after the last wait: the sessions' and the loop's.
    now_ns: u64,
    /// The engine's time, read with `now_ns`.
    engine_time: EngineTime,
    clock_fresh: bool,
    /// Whether the server's unsent total is above its limit (this turn).
    unsent_over: bool,
    housekeeping_ns: u64,
    next_housekeeping_ns: u64,
    next_publish_ns: u64,
    published_generation: u64,
    drain_deadline_ns: Option<u64>,
    drain_started_ns: u64,
    counted_out: bool,
    exit: bool,
    /// When the last accept-failure warning was logged, and the failures
    /// (and refused connections) since, not yet logged.
    accept_failure_logged_ns: Option<u64>,
    accept_failures_unlogged: (u64, u64),
    /// `--idle-spin`, and until when this shard polls without sleeping.
    idle_spin_ns: u64,
    spin_until_ns: u64,
    /// Events the driver reported in this turn's poll.
    events: u32,
    /// Plaintext a TLS read decrypted, lent to the transports in turn.
    plaintext: Vec<u8>,
    /// The write-ahead log, under `--durability batch|always`.
    log: Option<ShardLog>,
}

impl State {
    /// Loop metrics, at the top of a turn: the turn, whether the last wait
    /// brought events, the time worked since it ended, the ring messages.
    fn count_turn(&self, now: u64, wait_ended_ns: Option<u64>) {
        let l = &self.stats().event_loop;
        l.turns.add(1);
        if self.events > 0 {
            l.turns_with_events.add(1);
        }
        if let Some(ended) = wait_ended_ns {
            l.busy_ns.add(now.saturating_sub(ended));
        }
        let (received, sent) = self.engine.ring_messages();
        l.ring_received.set(received);
        l.ring_sent.set(sent);
    }

    fn stats(&self) -> &ShardStats {
        &self.shared.shards[usize::from(self.index)].stats
    }

    fn refresh_clock(&mut self) {
        if !self.clock_fresh {
            self.now_ns = clock::now_ns().max(self.now_ns);
            let t = self.shared.clock.engine_time(self.now_ns, clock::wall_ms());
            self.engine_time = EngineTime {
                now_ns: t.now_ns.max(self.engine_time.now_ns),
                wall_ms: t.wall_ms,
            };
            self.clock_fresh = true;
        }
    }

    /// How long to wait: `now` is real time, `engine_now` the engine's.
    fn wait_timeout(&self, now: u64, engine_now: u64) -> Option<Duration> {
        let mut until = self.next_housekeeping_ns;
        if let Some(d) = self.drain_deadline_ns {
            until = until.min(d);
        }
        let mut wait = Duration::from_nanos(until.saturating_sub(now));
        if let Some(d) = self.engine.next_deadline_ns() {
            let engine_wait = match self.shared.clock {
                Clock::Real => Some(d.saturating_sub(engine_now)),
                // Manual time moves only by an advance, which wakes us.
                Clock::Manual(_) => (d <= engine_now).then_some(0),
            };
            if let Some(ns) = engine_wait {
                wait = wait.min(Duration::from_nanos(ns));
            }
        }
        if self.engine.has_outbound() {
            wait = wait.min(OUTBOUND_RETRY);
        }
        if let Some(w) = self.move_wait() {
            wait = wait.min(w);
        }
        let pending = self.engine.log_len();
        if let Some(w) = self.log.as_ref().and_then(|l| l.wait(now, pending)) {
            wait = wait.min(w);
        }
        let scraping = self.metrics.as_ref().is_some_and(|m| !m.scrapes.is_empty());
        if !self.paused.is_empty() || !self.clock_waiters.is_empty() || scraping {
            wait = wait.min(PAUSED_RECHECK);
        }
        if self.drain_deadline_ns.is_some() {
            wait = wait.min(DRAIN_RECHECK);
        }
        Some(wait)
    }

    /// Runs `f` on connection `id`'s session with the shard's context and
    /// the engine, then carries out the commands it issued. False if `id`
    /// is stale.
    fn with_session(
        &mut self,
        io: &mut Connections,
        id: ConnId,
        f: impl FnOnce(&mut ConnSession, &SessionContext<'_>, &mut dyn EngineAccess),
    ) -> bool {
        let State {
            index,
            shared,
            engine,
            config,
            conns,
            tickets,
            next_ticket,
            dirty,
            paused,
            clock_waiters,
            metrics,
            now_ns,
            engine_time,
            unsent_over,
            drain_deadline_ns,
            log,
            ..
        } = self;
        let Some(conn) = live_conn(conns, id) else {
            return false;
        };
        let cx = SessionContext {
            now_ns: *now_ns,
            draining: drain_deadline_ns.is_some(),
            unsent_over: *unsent_over,
            io_unsent: io.unsent_bytes(id),
            config,
            stats: &shared.shards[usize::from(*index)].stats,
        };
        let mut link = EngineLink {
            shard: engine,
            tickets,
            next_ticket,
            conn: id,
            time: *engine_time,
            clock: &shared.clock,
        };
        f(&mut conn.session, &cx, &mut link);
        // A session that asks the server something is answered at once, and
        // what it does then is carried out in turn.
        while let Some(question) =
            carry_out(conn, io, id, paused, log.as_mut().and_then(ShardLog::hold))
        {
            let answer = match question {
                Question::ServerStats => Answer::ServerStats(shared.server_stats()),
                Question::AdvanceClock { by_ms } => {
                    Answer::ClockAdvanced(shared.advance_clock(by_ms))
                }
                Question::AuthOutcome { ok } => {
                    Answer::AuthDelay(auth_outcome(shared, conn.session.peer(), ok, *now_ns))
                }
            };
            conn.session.on_answer(answer, &cx, &mut link);
        }
        if conn.place == Place::BeforeHello && conn.session.phase() != Phase::Hello {
            conn.place = Place::Counted;
            shared.past_hello();
        }
        if !conn.dirty && conn.session.has_output() {
            conn.dirty = true;
            dirty.push(id);
        }
        if conn.session.clock_wait().is_some() && !clock_waiters.contains(&id) {
            clock_waiters.push(id);
        }
        if let Some(m) = metrics.as_mut().filter(|_| conn.session.awaits_scrape()) {
            if !m.scrapes.contains(&id) {
                m.scrapes.push(id);
            }
        }
        true
    }

    /// Every connection's id, for a pass over them all.
    fn ids(&self) -> Vec<ConnId> {
        self.conns.iter().flatten().map(|c| c.id).collect()
    }

    // ----- events ---------------------------------------------------------

    fn on_event(&mut self, io: &mut Connections, event: Event<'_>) {
        self.refresh_clock();
        self.events = self.events.saturating_add(1);
        match event {
            Event::Accepted {
                conn,
                peer,
                listener,
            } if self.is_metrics(listener) => self.on_accept_metrics(io, conn, peer),
            Event::Refused {
                conn,
                peer,
                listener,
            } if self.is_metrics(listener) => self.on_refused_metrics(io, conn, peer),
            Event::Accepted {
                conn,
                peer,
                listener: SQS_LISTENER,
            } => self.on_accept_sqs(io, conn, peer),
            Event::Refused {
                conn,
                peer,
                listener: SQS_LISTENER,
            } => self.on_refused_sqs(io, conn, peer),
            Event::Accepted { conn, peer, .. } => self.on_accept(io, conn, peer),
            Event::Refused { conn, peer, .. } => self.on_refused(io, conn, peer),
            Event::Data { conn, bytes } => self.on_data(io, conn, bytes),
            Event::Closed { conn, error } => self.on_closed(conn, error),
            Event::Woken => {}
            Event::AcceptFailed { error, shed } => self.on_accept_failed(&error, shed),
        }
    }

    /// Bytes arrived: through the connection's transport to its session.
    fn on_data(&mut self, io: &mut Connections, id: ConnId, bytes: &[u8]) {
        let Some(conn) = self
            .conns
            .get_mut(id.index() as usize)
            .and_then(Option::as_mut)
            .filter(|c| c.id == id && c.ending != Ending::Refused)
        else {
            return;
        };
        let mut plain = core::mem::take(&mut self.plaintext);
        plain.clear();
        match conn.transport.on_data(bytes, &mut plain) {
            Inbound::Passed(bytes) => {
                self.with_session(io, id, |s, cx, engine| s.on_data(bytes, cx, engine));
            }
            Inbound::Decrypted {
                reply,
                handshake_ended,
            } => {
                if let Some(handshake) = reply {
                    io.send(id, handshake);
                }
                if !plain.is_empty() {
                    self.with_session(io, id, |s, cx, engine| s.on_data(&plain, cx, engine));
                }
                let conn = self.conns[id.index() as usize].as_mut();
                if let Some(c) =
                    conn.filter(|c| handshake_ended && c.ending == Ending::AfterHandshake)
                {
                    // The refusal went out with the handshake's end; the
                    // close is under way.
                    c.ending = Ending::Open;
                    if let Some(alert) = c.transport.close_notify() {
                        io.send(id, alert);
                    }
                    io.close(id);
                }
            }
            Inbound::Refuse { why, detail, reply } => {
                conn.ending = Ending::Refused;
                tracing::info!(
                    peer = %conn.session.peer(),
                    shard = self.index,
                    "closing connection: {detail}"
                );
                let stats = &self.shared.shards[usize::from(self.index)].stats;
                stats.transport_refused[why as usize].add(1);
                stats.closed_bad_input.add(1);
                if let Some(reply) = reply {
                    io.send(id, reply);
                }
                io.close(id);
            }
        }
    }

    // ----- after the wait -----------------------------------------------------

    fn after_wait(&mut self, io: &mut Connections) {
        let manual = if let Clock::Manual(m) = &self.shared.clock {
            // A session may have moved it during this turn.
            let t = m.now();
            self.engine_time = EngineTime {
                now_ns: t.now_ns.max(self.engine_time.now_ns),
                wall_ms: t.wall_ms,
            };
            true
        } else {
            false
        };
        self.engine
            .poll(self.engine_time.now_ns, self.engine_time.wall_ms);
        if manual {
            // What an ADVANCE_CLOCK waits for (only a manual clock moves).
            self.shared.shards[usize::from(self.index)]
                .clock_seen_ns
                .store(self.engine_time.now_ns, Release);
        }
        self.route_completions(io);
        self.run_moves();
        if !self.clock_waiters.is_empty() {
            self.answer_clock_waiters(io);
        }
        let generation = self.shared.scrape_generation.load(Acquire);
        if self.now_ns >= self.next_housekeeping_ns {
            self.housekeeping(io);
        }
        if generation > self.published_generation || self.now_ns >= self.next_publish_ns {
            self.publish_stats(generation);
        }
        self.poll_scrapes(io);
        if self.drain_deadline_ns.is_some() {
            self.drain_step(io);
        }
        self.unsent_over = self.shared.unsent_bytes() > self.unsent_total_max;
        self.resume_paused(io);
        self.flush(io);
        self.commit_log(io);
        self.stats()
            .unsent_bytes
            .set(io.unsent_bytes_total() as u64);
    }

    fn route_completions(&mut self, io: &mut Connections) {
        self.engine.drain_completions(&mut self.completions);
        if self.completions.is_empty() {
            return;
        }
        let mut done = core::mem::take(&mut self.completions);
        for (ticket, result) in done.drain(..) {
            let Some(id) = self.tickets.remove(&ticket) else {
                // A move step's, or a closed connection's.
                self.move_result(ticket, result);
                continue;
            };
            self.with_session(io, id, |s, cx, engine| {
                s.on_result(ticket, result, cx, engine);
            });
        }
        self.completions = done;
    }

    /// Answers the `ADVANCE_CLOCK`s whose time every shard has reached.
    fn answer_clock_waiters(&mut self, io: &mut Connections) {
        for id in core::mem::take(&mut self.clock_waiters) {
            let target = self
                .conns
                .get(id.index() as usize)
                .and_then(Option::as_ref)
                .filter(|c| c.id == id)
                .and_then(|c| c.session.clock_wait());
            let Some(t) = target else { continue };
            if self.shared.clock_caught_up(t) {
                // A frame served behind it may wait again: `with_session`
                // puts the connection back on the list then.
                self.with_session(io, id, |s, cx, engine| s.on_clock_caught_up(cx, engine));
            } else if !self.clock_waiters.contains(&id) {
                self.clock_waiters.push(id);
            }
        }
    }

    fn resume_paused(&mut self, io: &mut Connections) {
        if self.paused.is_empty() {
            return;
        }
        let list = core::mem::take(&mut self.paused);
        for id in list {
            let mut still = false;
            self.with_session(io, id, |s, cx, engine| {
                still = !s.resume(cx, engine) && s.is_paused();
            });
            if still && !self.paused.contains(&id) {
                self.paused.push(id);
            }
        }
    }

    fn flush(&mut self, io: &mut Connections) {
        for id in core::mem::take(&mut self.dirty) {
            self.with_session(io, id, |s, _, _| s.flush());
            if let Some(c) = self.conns[id.index() as usize].as_mut() {
                c.dirty = false;
            }
        }
    }

    /// Connection deadlines: HELLO, unfinished frames, closing flushes.
    fn housekeeping(&mut self, io: &mut Connections) {
        self.next_housekeeping_ns = self.now_ns + self.housekeeping_ns;
        for id in self.ids() {
            self.with_session(io, id, |s, cx, engine| s.tick(cx, engine));
        }
    }

    /// Publishes this shard's per-queue counters for the metrics.
    fn publish_stats(&mut self, generation: u64) {
        let names = self.shared.registry.list("");
        let snapshot: Vec<_> = names
            .into_iter()
            .filter_map(|n| {
                let groups = self.engine.local_groups_in_flight(&n).unwrap_or(0);
                self.engine.local_stats(&n).map(|s| (n, s, groups))
            })
            .collect();
        if self.stats().publish_queues(snapshot, generation) {
            self.published_generation = generation;
            self.next_publish_ns = self.now_ns + nanos(STATS_PUBLISH_INTERVAL);
        }
    }
}
