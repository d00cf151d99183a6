//! One shard's thread: its io driver, its engine [`Shard`] and its
//! connections, in one event loop.
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
//!    are routed to their connections by ticket.
//! 5. Housekeeping when due, shutdown steps, resuming paused connections,
//!    then every reply encoded this turn goes to the driver.
//!
//! # Tickets
//!
//! Every request the engine does not answer at once gets a ticket from a
//! per-shard counter that never repeats, and an entry `ticket -> (connection
//! id, request id, opcode)`. A connection id carries its slot's generation,
//! so a completion for a connection that closed (and whose slot may hold a
//! new connection now) finds no entry, or an entry whose id no longer
//! matches, and is dropped; on close the connection's tickets are also
//! cancelled in the engine. Request ids are the client's and may repeat, so
//! they are carried, not used as keys.
//!
//! # Back-pressure
//!
//! A connection is not read (and the frames it has buffered are not served)
//! while it has `--requests-in-flight-max` requests unanswered, while its
//! unsent replies reach `--unsent-bytes-max`, or while it has any unsent
//! reply and the server's unsent total is above `--unsent-bytes-total-max`.
//! The driver reports no event when a send completes, so while any
//! connection is paused the loop wakes every millisecond to look.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::time::Duration;

use bytes::BytesMut;
use sluice_protocol::limits::{BATCH_ENTRIES_MAX, PROTOCOL_VERSION};
use sluice_protocol::reply::RECEIVE_REPLY_FIXED_BYTES;
use sluice_protocol::{
    ChangeVisibilityRequest, ErrorCode, Frame, HelloReply, QueueName, ReceiveReplyWriter,
    ReceivedMessage, Reply, Request, ServerLimits, VisibilityChange, WireError, opcode,
};

use super::clock;
use super::conn::{Conn, Phase};
use super::convert::{self, Route};
use super::shared::{Shared, op_slot, server_version};
use crate::engine::mesh::doorbell::Doorbell;
use crate::engine::{Op, OpResult, Shard};
use crate::io::{ConnId, Connections, Driver, Event};

/// Longest wait while the engine holds messages for a full ring.
const OUTBOUND_RETRY: Duration = Duration::from_micros(200);
/// Longest wait while a connection is paused on unsent bytes.
const PAUSED_RECHECK: Duration = Duration::from_millis(1);
/// Longest wait while shutting down (to notice the other shards finish).
const DRAIN_RECHECK: Duration = Duration::from_millis(10);
/// While shutting down, a connection with nothing in flight is closed once
/// no bytes have arrived for this long: requests the client had already
/// sent are read and answered (`ShuttingDown`) rather than left unread in
/// the socket, and its last replies are not cut off by a reset.
const DRAIN_QUIET_NS: u64 = 100_000_000;
/// Time a closing connection has to take its last replies before it is
/// closed at once (a peer that never reads would hold it forever).
const CLOSE_FLUSH_TIMEOUT_NS: u64 = 5_000_000_000;
/// Bounds of the housekeeping tick (a quarter of the shortest connection
/// timeout, within these).
const HOUSEKEEPING_MIN_NS: u64 = 5_000_000;
const HOUSEKEEPING_MAX_NS: u64 = 250_000_000;
/// At most one "out of file descriptors" warning per shard per this long;
/// the next one says how many failures it stood for.
const ACCEPT_FAILURE_LOG_NS: u64 = 10_000_000_000;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A request the engine answers later.
#[derive(Debug)]
struct Pending {
    conn: ConnId,
    request_id: u32,
    opcode: u8,
    /// The queue of a RECEIVE, to release messages a reply could not hold.
    queue: Option<QueueName>,
}

/// The limits a shard enforces, from the configuration.
#[derive(Debug, Clone, Copy)]
struct Limits {
    frame_bytes_max: u32,
    hello_frame_bytes_max: u32,
    hello_timeout_ns: u64,
    frame_timeout_ns: u64,
    in_flight_max: usize,
    unsent_max: usize,
    unsent_total_max: u64,
    shutdown_timeout_ns: u64,
}

/// What a shard thread is handed once every shard's driver is open.
#[derive(Debug)]
pub struct ShardStart {
    /// This shard's engine.
    pub engine: Shard,
    /// This shard's doorbell (the engine owns the rings).
    pub doorbell: Arc<Doorbell>,
    /// Everything shared.
    pub shared: Arc<Shared>,
}

/// Runs shard `index` until shutdown completes. Errors are the driver's.
pub fn run(index: u16, mut driver: Box<dyn Driver>, start: ShardStart) -> io::Result<()> {
    let _guard = StopOnPanic(start.shared.clone());
    let mut st = State::new(index, start);
    loop {
        let now = clock::now_ns();
        let mut timeout = st.wait_timeout(now);
        if timeout != Some(Duration::ZERO) {
            let engine = &mut st.engine;
            let wall = clock::wall_ms();
            if !st.doorbell.prepare_sleep(|| engine.poll(now, wall) == 0) {
                timeout = Some(Duration::ZERO);
            }
        }
        st.clock_fresh = false;
        let result = driver.poll(timeout, &mut |ops, event| st.on_event(ops, event));
        st.doorbell.woke();
        result?;
        st.refresh_clock();
        if st.shared.shutting_down() && st.drain_deadline_ns.is_none() {
            driver.stop_accepting();
            st.begin_drain(driver.connections_mut());
        }
        st.after_wait(driver.connections_mut());
        if st.exit {
            break;
        }
    }
    st.finish(driver.connections_mut());
    Ok(())
}

/// A shard that panics (a bug) stops the whole server, so that the process
/// ends and is restarted rather than run on with a shard missing.
struct StopOnPanic(Arc<Shared>);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("a shard panicked: shutting the server down");
            self.0.begin_shutdown();
        }
    }
}

struct State {
    index: u16,
    shared: Arc<Shared>,
    engine: Shard,
    doorbell: Arc<Doorbell>,
    limits: Limits,
    conns: Vec<Option<Conn>>,
    pending: HashMap<u64, Pending>,
    next_ticket: u64,
    completions: Vec<(u64, OpResult)>,
    /// Connections with replies in `out` to hand to the driver.
    dirty: Vec<ConnId>,
    /// Connections paused for back-pressure.
    paused: Vec<ConnId>,
    now_ns: u64,
    wall_ms: u64,
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
}

impl State {
    fn new(index: u16, start: ShardStart) -> State {
        let config = &start.shared.config;
        let limits = Limits {
            frame_bytes_max: config.frame_bytes_max,
            hello_frame_bytes_max: config.hello_frame_bytes_max,
            hello_timeout_ns: nanos(config.hello_timeout),
            frame_timeout_ns: nanos(config.frame_timeout),
            in_flight_max: config.requests_in_flight_max as usize,
            unsent_max: usize::try_from(config.unsent_bytes_max).unwrap_or(usize::MAX),
            unsent_total_max: config.unsent_bytes_total_max,
            shutdown_timeout_ns: nanos(config.shutdown_timeout),
        };
        let housekeeping_ns = (limits.hello_timeout_ns.min(limits.frame_timeout_ns) / 4)
            .clamp(HOUSEKEEPING_MIN_NS, HOUSEKEEPING_MAX_NS);
        let now = clock::now_ns();
        State {
            index,
            engine: start.engine,
            doorbell: start.doorbell,
            shared: start.shared,
            limits,
            conns: Vec::new(),
            pending: HashMap::new(),
            next_ticket: 1,
            completions: Vec::new(),
            dirty: Vec::new(),
            paused: Vec::new(),
            now_ns: now,
            wall_ms: clock::wall_ms(),
            clock_fresh: true,
            unsent_over: false,
            housekeeping_ns,
            next_housekeeping_ns: now + housekeeping_ns,
            next_publish_ns: now,
            published_generation: 0,
            drain_deadline_ns: None,
            drain_started_ns: 0,
            counted_out: false,
            exit: false,
            accept_failure_logged_ns: None,
            accept_failures_unlogged: (0, 0),
        }
    }

    fn stats(&self) -> &super::shared::ShardStats {
        &self.shared.shards[usize::from(self.index)].stats
    }

    fn refresh_clock(&mut self) {
        if !self.clock_fresh {
            self.now_ns = clock::now_ns().max(self.now_ns);
            self.wall_ms = clock::wall_ms();
            self.clock_fresh = true;
        }
    }

    fn wait_timeout(&self, now: u64) -> Option<Duration> {
        let mut until = self.next_housekeeping_ns;
        if let Some(d) = self.engine.next_deadline_ns() {
            until = until.min(d);
        }
        if let Some(d) = self.drain_deadline_ns {
            until = until.min(d);
        }
        let mut wait = Duration::from_nanos(until.saturating_sub(now));
        if self.engine.has_outbound() {
            wait = wait.min(OUTBOUND_RETRY);
        }
        if !self.paused.is_empty() {
            wait = wait.min(PAUSED_RECHECK);
        }
        if self.drain_deadline_ns.is_some() {
            wait = wait.min(DRAIN_RECHECK);
        }
        Some(wait)
    }

    // ----- events ---------------------------------------------------------

    fn on_event(&mut self, ops: &mut Connections, event: Event<'_>) {
        self.refresh_clock();
        match event {
            Event::Accepted { conn, peer } => self.on_accept(ops, conn, peer),
            Event::Refused { conn, peer } => {
                tracing::debug!(%peer, "connection refused: this shard's driver is full");
                self.stats().refused.add(1);
                let reply = too_many_connections(self.shared.config.connections_max);
                let mut buf = BytesMut::with_capacity(reply.encoded_len());
                if reply.encode(0, &mut buf).is_ok() {
                    ops.send(conn, buf.freeze());
                }
            }
            Event::Data { conn, bytes } => self.on_data(ops, conn, bytes),
            Event::Closed { conn, error } => self.on_closed(conn, error),
            Event::Woken => {}
            Event::AcceptFailed { error, shed } => self.on_accept_failed(&error, shed),
        }
    }

    /// The driver could not accept (out of descriptors or kernel memory):
    /// counted, and logged at most once per [`ACCEPT_FAILURE_LOG_NS`] with
    /// what happened since. The connections the shard has go on.
    fn on_accept_failed(&mut self, error: &std::io::Error, shed: u32) {
        self.stats().accept_failures.add(1);
        self.stats().refused.add(u64::from(shed));
        let (failures, refused) = &mut self.accept_failures_unlogged;
        *failures += 1;
        *refused += u64::from(shed);
        let due = self
            .accept_failure_logged_ns
            .is_none_or(|at| self.now_ns >= at + ACCEPT_FAILURE_LOG_NS);
        if !due {
            return;
        }
        let (failures, refused) = core::mem::take(&mut self.accept_failures_unlogged);
        self.accept_failure_logged_ns = Some(self.now_ns);
        let out_of_fds = matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        tracing::warn!(
            shard = self.index,
            %error,
            failures,
            refused,
            open = self.stats().connections.get(),
            "cannot accept connections: {}; new connections are refused with an error \
             until some close, the open ones go on (at most one such line per 10 s)",
            if out_of_fds {
                "out of file descriptors (raise the open-files limit: ulimit -n, \
                 LimitNOFILE=, or lower --max-connections)"
            } else {
                "out of kernel memory for sockets"
            }
        );
    }

    fn on_accept(&mut self, ops: &mut Connections, id: ConnId, peer: SocketAddr) {
        let idx = id.index() as usize;
        if self.conns.len() <= idx {
            self.conns.resize_with(idx + 1, || None);
        }
        let counted = self.drain_deadline_ns.is_none() && self.shared.admit_connection();
        let mut conn = Conn::new(
            id,
            peer,
            self.limits.hello_frame_bytes_max,
            self.now_ns,
            counted,
        );
        if counted {
            self.stats().accepted.add(1);
            self.stats().connections.add(1);
            tracing::debug!(%peer, conn = %id, shard = self.index, "connection accepted");
            self.conns[idx] = Some(conn);
            return;
        }
        let reply = if self.drain_deadline_ns.is_some() {
            shutting_down()
        } else {
            tracing::debug!(%peer, "connection refused: --max-connections reached");
            self.stats().refused.add(1);
            too_many_connections(self.shared.config.connections_max)
        };
        encode_into(&mut conn.out, 0, &reply);
        self.conns[idx] = Some(conn);
        self.begin_close(ops, idx, false);
    }

    fn on_data(&mut self, ops: &mut Connections, id: ConnId, bytes: &[u8]) {
        let idx = id.index() as usize;
        let now = self.now_ns;
        let Some(c) = self.conn_mut(id) else {
            return;
        };
        if c.phase == Phase::Closing {
            return;
        }
        c.inbuf.extend_from_slice(bytes);
        c.last_data_ns = now;
        self.process(ops, idx);
    }

    fn on_closed(&mut self, id: ConnId, error: Option<io::Error>) {
        let idx = id.index() as usize;
        let Some(slot) = self.conns.get_mut(idx) else {
            return;
        };
        if slot.as_ref().is_none_or(|c| c.id != id) {
            return;
        }
        let Some(c) = slot.take() else { return };
        if let Some(e) = error {
            tracing::debug!(peer = %c.peer, conn = %id, error = %e, "connection broken");
        }
        for t in &c.deferred {
            self.engine.cancel(*t);
            self.pending.remove(t);
        }
        if c.counted {
            self.shared.release_connection();
            let stats = self.stats();
            stats
                .connections
                .set(stats.connections.get().saturating_sub(1));
        }
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns
            .get_mut(id.index() as usize)
            .and_then(Option::as_mut)
            .filter(|c| c.id == id)
    }

    // ----- frames -----------------------------------------------------------

    /// Whether connection `c` must not be read: `resume` asks with the lower
    /// threshold used to let a paused connection go on.
    fn blocked(&self, ops: &Connections, c: &Conn, resume: bool) -> bool {
        let unsent = ops.unsent_bytes(c.id) + c.out.len();
        let unsent_max = if resume {
            self.limits.unsent_max / 2
        } else {
            self.limits.unsent_max
        };
        c.in_flight() >= self.limits.in_flight_max
            || unsent >= unsent_max
            || (self.unsent_over && unsent > 0)
            || (c.barrier.is_some() && c.inbuf.len() >= self.limits.frame_bytes_max as usize)
    }

    /// Serves the whole frames buffered on connection `idx`, as far as
    /// back-pressure allows.
    fn process(&mut self, ops: &mut Connections, idx: usize) {
        loop {
            let Some(c) = self.conns.get(idx).and_then(Option::as_ref) else {
                return;
            };
            if c.phase == Phase::Closing {
                return;
            }
            let behind_barrier = c.barrier.is_some();
            if self.blocked(ops, c, false) {
                let id = c.id;
                let was_paused = c.paused;
                if let Some(c) = self.conns[idx].as_mut() {
                    // The stall is ours, not the peer's.
                    c.partial_since_ns = None;
                    c.paused = true;
                }
                if !was_paused {
                    ops.set_reading(id, false);
                    self.paused.push(id);
                }
                return;
            }
            if behind_barrier {
                // Served once the earlier request is answered (see
                // `route_completions`); the bytes wait in `inbuf`.
                return;
            }
            let now = self.now_ns;
            let Some(c) = self.conns[idx].as_mut() else {
                return;
            };
            match c.decoder.decode(&mut c.inbuf) {
                Ok(Some(frame)) => {
                    c.partial_since_ns = None;
                    self.on_frame(ops, idx, frame);
                }
                Ok(None) => {
                    if c.inbuf.is_empty() {
                        c.partial_since_ns = None;
                    } else if c.partial_since_ns.is_none() {
                        c.partial_since_ns = Some(now);
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!(peer = %c.peer, error = %e, "framing lost");
                    self.protocol_error(ops, idx, 0, e.to_wire_error());
                    return;
                }
            }
        }
    }

    fn on_frame(&mut self, ops: &mut Connections, idx: usize, frame: Frame) {
        self.stats().requests[op_slot(frame.opcode)].add(1);
        let Some(c) = self.conns[idx].as_ref() else {
            return;
        };
        match c.phase {
            Phase::Closing => {}
            Phase::Hello => self.on_hello(ops, idx, frame),
            Phase::Ready if self.drain_deadline_ns.is_some() => {
                // Shutting down: nothing new starts; the connection closes
                // once what is in flight is answered and it is quiet.
                self.reply(idx, frame.request_id, &shutting_down());
            }
            Phase::Ready => match Request::decode(frame.opcode, frame.payload) {
                Err(e) => self.reply(idx, frame.request_id, &Reply::Error(e.to_wire_error())),
                Ok(request) => self.dispatch(ops, idx, frame.request_id, frame.opcode, request),
            },
        }
    }

    fn on_hello(&mut self, ops: &mut Connections, idx: usize, frame: Frame) {
        if self.drain_deadline_ns.is_some() {
            self.reply(idx, frame.request_id, &shutting_down());
            self.begin_close(ops, idx, false);
            return;
        }
        if frame.opcode != opcode::HELLO {
            let name = opcode::name(frame.opcode).unwrap_or("an unknown opcode");
            let e = WireError::new(
                ErrorCode::HelloRequired,
                format!(
                    "the first frame must be HELLO (0x01), not {name} ({:#04x})",
                    frame.opcode
                ),
            );
            return self.protocol_error(ops, idx, frame.request_id, e);
        }
        // The version is the first two bytes of every version's HELLO:
        // checked before the rest, whose layout a later version may change.
        if let Some(v) = frame.payload.first_chunk::<2>() {
            let version = u16::from_le_bytes(*v);
            if version != PROTOCOL_VERSION {
                let e = WireError::new(
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "this server speaks protocol version {PROTOCOL_VERSION}, not {version}"
                    ),
                );
                return self.protocol_error(ops, idx, frame.request_id, e);
            }
        }
        let hello = match Request::decode(frame.opcode, frame.payload) {
            Ok(Request::Hello(h)) => h,
            Ok(_) => {
                let e = WireError::new(ErrorCode::Internal, "HELLO decoded as another request");
                return self.protocol_error(ops, idx, frame.request_id, e);
            }
            Err(e) => return self.protocol_error(ops, idx, frame.request_id, e.to_wire_error()),
        };
        if let Some(token) = &self.shared.config.auth_token {
            if !token.matches(&hello.token) {
                let e = WireError::new(
                    ErrorCode::Unauthorized,
                    if hello.token.is_empty() {
                        "this server requires an auth token in HELLO"
                    } else {
                        "wrong auth token"
                    },
                );
                return self.protocol_error(ops, idx, frame.request_id, e);
            }
        }
        let reply = Reply::Hello(HelloReply {
            version: PROTOCOL_VERSION,
            server_version: server_version(),
            shard: self.index,
            shards: u16::try_from(self.shared.shards.len()).unwrap_or(u16::MAX),
            limits: ServerLimits {
                frame_bytes_max: self.limits.frame_bytes_max,
                // 1,024 fits a u16 (checked in the protocol's limits).
                batch_entries_max: u16::try_from(BATCH_ENTRIES_MAX).unwrap_or(u16::MAX),
                requests_in_flight_max: self.shared.config.requests_in_flight_max,
                receive_wait_ms_max: sluice_protocol::attributes::RECEIVE_WAIT_MS_MAX,
            },
        });
        if let Some(c) = self.conns[idx].as_mut() {
            c.phase = Phase::Ready;
            c.decoder.set_frame_bytes_max(self.limits.frame_bytes_max);
        }
        self.reply(idx, frame.request_id, &reply);
    }

    fn dispatch(
        &mut self,
        ops: &mut Connections,
        idx: usize,
        request_id: u32,
        op: u8,
        request: Request,
    ) {
        let queue = match &request {
            Request::Receive(r) => Some(r.queue.clone()),
            _ => None,
        };
        match convert::route(request) {
            Route::Engine(engine_op) => self.submit(ops, idx, request_id, op, queue, engine_op),
            Route::Ping { nonce } => self.reply(idx, request_id, &Reply::Pong { nonce }),
            Route::ServerStats => {
                let stats = Reply::ServerStats(self.shared.server_stats());
                self.reply(idx, request_id, &stats);
            }
            Route::Hello => self.reply(
                idx,
                request_id,
                &Reply::error(
                    ErrorCode::InvalidArgument,
                    "HELLO was already answered on this connection",
                ),
            ),
        }
    }

    fn submit(
        &mut self,
        ops: &mut Connections,
        idx: usize,
        request_id: u32,
        opcode: u8,
        queue: Option<QueueName>,
        op: Op,
    ) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        match self.engine.submit(ticket, op, self.now_ns, self.wall_ms) {
            Some(result) => self.answer(ops, idx, request_id, opcode, queue, result),
            None => {
                let Some(c) = self.conns[idx].as_mut() else {
                    self.engine.cancel(ticket);
                    return;
                };
                c.deferred.push(ticket);
                if opcode != sluice_protocol::opcode::RECEIVE {
                    c.barrier = Some(ticket);
                }
                self.pending.insert(
                    ticket,
                    Pending {
                        conn: c.id,
                        request_id,
                        opcode,
                        queue,
                    },
                );
            }
        }
    }

    /// Encodes the engine's answer for connection `idx`.
    fn answer(
        &mut self,
        ops: &mut Connections,
        idx: usize,
        request_id: u32,
        opcode: u8,
        queue: Option<QueueName>,
        result: OpResult,
    ) {
        let result = match result {
            OpResult::Received(messages) if opcode == sluice_protocol::opcode::RECEIVE => {
                return self.answer_receive(ops, idx, request_id, queue, messages);
            }
            other => other,
        };
        let mut reply = convert::to_reply(result);
        let dropped = reply.fit_frame(self.limits.frame_bytes_max as usize);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "a reply was above the frame limit and lost its last entries"
            );
        }
        self.reply(idx, request_id, &reply);
    }

    /// Writes a RECEIVE reply straight into the connection's output. The
    /// engine budgets a receive to fit one frame; should a message not fit
    /// anyway (or the connection be closing), it is released at once rather
    /// than left to wait out a lease nobody holds.
    fn answer_receive(
        &mut self,
        ops: &mut Connections,
        idx: usize,
        request_id: u32,
        queue: Option<QueueName>,
        messages: Vec<ReceivedMessage>,
    ) {
        let mut undelivered = Vec::new();
        let frame_bytes_max = self.limits.frame_bytes_max as usize;
        match self.conns.get_mut(idx).and_then(Option::as_mut) {
            Some(c) if c.phase != Phase::Closing => {
                // Room for the whole reply before writing it. Were the
                // buffer grown message by message, or with the replies of
                // this turn still in it, each growth would copy all it
                // holds into a new allocation (about once per four
                // 64-message replies). Rather, what is there goes to the
                // driver now, as its own buffer of the same gathered send.
                let reply_bytes = receive_reply_bytes(&messages).min(frame_bytes_max);
                let was_empty = c.out.is_empty();
                if !was_empty && c.out.capacity() - c.out.len() < reply_bytes {
                    ops.send(c.id, c.out.split().freeze());
                }
                if was_empty {
                    self.dirty.push(c.id);
                }
                c.out.reserve(reply_bytes);
                let mut w =
                    ReceiveReplyWriter::begin(&mut c.out, request_id, self.limits.frame_bytes_max);
                for m in &messages {
                    if !undelivered.is_empty() || !w.push(&mut c.out, &m.as_view()) {
                        undelivered.push(m.receipt);
                    }
                }
                w.finish(&mut c.out);
            }
            _ => undelivered.extend(messages.iter().map(|m| m.receipt)),
        }
        let Some(queue) = queue.filter(|_| !undelivered.is_empty()) else {
            return;
        };
        tracing::warn!(
            messages = undelivered.len(),
            "received messages could not be delivered; released"
        );
        let entries = undelivered
            .into_iter()
            .map(|receipt| VisibilityChange {
                receipt,
                visibility_timeout_ms: 0,
            })
            .collect();
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let op = Op::ChangeVisibility(ChangeVisibilityRequest { queue, entries });
        // The result answers no one (the ticket has no pending entry).
        let _ = self.engine.submit(ticket, op, self.now_ns, self.wall_ms);
    }

    /// Queues `reply` on connection `idx` (dropped if it is closing).
    fn reply(&mut self, idx: usize, request_id: u32, reply: &Reply) {
        let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        if c.phase == Phase::Closing {
            return;
        }
        if c.out.is_empty() {
            self.dirty.push(c.id);
        }
        encode_into(&mut c.out, request_id, reply);
    }

    /// A request that leaves the connection unusable: answer, then close.
    fn protocol_error(&mut self, ops: &mut Connections, idx: usize, request_id: u32, e: WireError) {
        if let Some(c) = self.conns[idx].as_ref() {
            tracing::debug!(peer = %c.peer, code = %e.code, message = %e.message, "closing connection");
        }
        self.reply(idx, request_id, &Reply::Error(e));
        self.begin_close(ops, idx, true);
    }

    /// Closes connection `idx` after what it has queued; its requests still
    /// in the engine are cancelled.
    fn begin_close(&mut self, ops: &mut Connections, idx: usize, bad_input: bool) {
        let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        if c.phase == Phase::Closing && c.closing_since_ns != 0 {
            return;
        }
        c.phase = Phase::Closing;
        c.closing_since_ns = self.now_ns.max(1);
        c.inbuf = BytesMut::new();
        c.partial_since_ns = None;
        if !c.out.is_empty() {
            ops.send(c.id, c.out.split().freeze());
        }
        ops.close(c.id);
        for t in c.deferred.drain(..) {
            self.engine.cancel(t);
            self.pending.remove(&t);
        }
        if bad_input {
            self.stats().closed_bad_input.add(1);
        }
    }

    // ----- after the wait -----------------------------------------------------

    fn after_wait(&mut self, ops: &mut Connections) {
        self.engine.poll(self.now_ns, self.wall_ms);
        self.route_completions(ops);
        let generation = self.shared.scrape_generation.load(Acquire);
        if self.now_ns >= self.next_housekeeping_ns {
            self.housekeeping(ops);
        }
        if generation > self.published_generation || self.now_ns >= self.next_publish_ns {
            self.publish_stats(generation);
        }
        if self.drain_deadline_ns.is_some() {
            self.drain_step(ops);
        }
        self.unsent_over = self.shared.unsent_bytes() > self.limits.unsent_total_max;
        self.resume_paused(ops);
        self.flush(ops);
        self.stats()
            .unsent_bytes
            .set(ops.unsent_bytes_total() as u64);
    }

    fn route_completions(&mut self, ops: &mut Connections) {
        self.engine.drain_completions(&mut self.completions);
        if self.completions.is_empty() {
            return;
        }
        let mut done = core::mem::take(&mut self.completions);
        for (ticket, result) in done.drain(..) {
            let Some(p) = self.pending.remove(&ticket) else {
                continue;
            };
            let idx = p.conn.index() as usize;
            let Some(c) = self.conn_mut(p.conn) else {
                continue;
            };
            if !c.take_ticket(ticket) {
                continue;
            }
            let lifted = c.barrier == Some(ticket);
            if lifted {
                c.barrier = None;
            }
            self.answer(ops, idx, p.request_id, p.opcode, p.queue, result);
            if lifted {
                // Serve what arrived behind it (a paused connection is
                // resumed by `resume_paused` instead).
                if self.conns[idx].as_ref().is_some_and(|c| !c.paused) {
                    self.process(ops, idx);
                }
            }
        }
        self.completions = done;
    }

    fn resume_paused(&mut self, ops: &mut Connections) {
        if self.paused.is_empty() {
            return;
        }
        let list = core::mem::take(&mut self.paused);
        let mut still = Vec::new();
        for id in list {
            let idx = id.index() as usize;
            let Some(c) = self.conns.get(idx).and_then(Option::as_ref) else {
                continue;
            };
            if c.id != id || !c.paused || c.phase == Phase::Closing {
                continue;
            }
            if self.blocked(ops, c, true) {
                still.push(id);
                continue;
            }
            if let Some(c) = self.conns[idx].as_mut() {
                c.paused = false;
            }
            ops.set_reading(id, true);
            self.process(ops, idx);
        }
        self.paused.append(&mut still);
    }

    fn flush(&mut self, ops: &mut Connections) {
        for id in core::mem::take(&mut self.dirty) {
            let Some(c) = self.conn_mut(id) else {
                continue;
            };
            if !c.out.is_empty() {
                let bytes = c.out.split().freeze();
                ops.send(id, bytes);
            }
        }
    }

    /// Connection deadlines: HELLO, unfinished frames, closing flushes.
    fn housekeeping(&mut self, ops: &mut Connections) {
        let now = self.now_ns;
        self.next_housekeeping_ns = now + self.housekeeping_ns;
        let l = self.limits;
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_ref() else {
                continue;
            };
            let (id, peer) = (c.id, c.peer);
            match c.phase {
                Phase::Closing => {
                    if now.saturating_sub(c.closing_since_ns) >= CLOSE_FLUSH_TIMEOUT_NS {
                        ops.close_now(id);
                    }
                }
                Phase::Hello if now.saturating_sub(c.accepted_ns) >= l.hello_timeout_ns => {
                    tracing::debug!(%peer, "closing connection: no HELLO in time");
                    self.begin_close(ops, idx, true);
                }
                _ => {
                    if c.partial_since_ns
                        .is_some_and(|t| now.saturating_sub(t) >= l.frame_timeout_ns)
                    {
                        tracing::debug!(%peer, "closing connection: a frame was left unfinished");
                        self.begin_close(ops, idx, true);
                    }
                }
            }
        }
    }

    /// Publishes this shard's per-queue counters for the metrics.
    fn publish_stats(&mut self, generation: u64) {
        let names = self.shared.registry.list("");
        let snapshot: Vec<_> = names
            .into_iter()
            .filter_map(|n| self.engine.local_stats(&n).map(|s| (n, s)))
            .collect();
        if self.stats().publish_queues(snapshot, generation) {
            self.published_generation = generation;
            self.next_publish_ns = self.now_ns + nanos(super::shared::STATS_PUBLISH_INTERVAL);
        }
    }

    // ----- shutdown -------------------------------------------------------------

    fn begin_drain(&mut self, ops: &mut Connections) {
        tracing::debug!(shard = self.index, "shard draining");
        self.drain_started_ns = self.now_ns;
        self.drain_deadline_ns = Some(self.now_ns.saturating_add(self.limits.shutdown_timeout_ns));
        // Waiting receives get their empty batch now.
        self.engine.shutdown(self.now_ns);
        self.route_completions(ops);
        for idx in 0..self.conns.len() {
            if let Some(c) = self.conns[idx].as_ref() {
                if c.phase == Phase::Hello {
                    self.reply(idx, 0, &shutting_down());
                    self.begin_close(ops, idx, false);
                }
            }
        }
    }

    fn drain_step(&mut self, ops: &mut Connections) {
        let drain_started = self.drain_started_ns;
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_ref() else {
                continue;
            };
            let quiet_since = c.last_data_ns.max(drain_started);
            if c.phase != Phase::Closing
                && c.deferred.is_empty()
                && self.now_ns.saturating_sub(quiet_since) >= DRAIN_QUIET_NS
            {
                self.reply(idx, 0, &shutting_down());
                self.begin_close(ops, idx, false);
            }
        }
        let open = self.conns.iter().any(Option::is_some);
        if !open && !self.counted_out {
            self.counted_out = true;
            self.shared.shards_running.fetch_sub(1, AcqRel);
            self.shared.wake_all();
        }
        let all_done = self.counted_out && self.shared.shards_running.load(Acquire) == 0;
        let late = self.drain_deadline_ns.is_some_and(|d| self.now_ns >= d);
        if all_done || late {
            if late && open {
                tracing::warn!(
                    shard = self.index,
                    "shutdown timeout: closing the connections still open"
                );
            }
            self.exit = true;
        }
    }

    fn finish(&mut self, ops: &mut Connections) {
        for slot in &mut self.conns {
            if let Some(c) = slot.take() {
                ops.close_now(c.id);
                if c.counted {
                    self.shared.release_connection();
                }
            }
        }
        if !self.counted_out {
            self.counted_out = true;
            self.shared.shards_running.fetch_sub(1, AcqRel);
            self.shared.wake_all();
        }
        self.stats().connections.set(0);
        tracing::debug!(shard = self.index, "shard stopped");
    }
}

fn encode_into(out: &mut BytesMut, request_id: u32, reply: &Reply) {
    if reply.encode(request_id, out).is_err() {
        // Only a value too long for its wire field fails, and `out` is left
        // as it was: say so instead.
        let e = Reply::error(ErrorCode::Internal, "the reply could not be encoded");
        let _ = e.encode(request_id, out);
    }
}

/// Bytes of the RECEIVE reply frame holding `messages`.
fn receive_reply_bytes(messages: &[ReceivedMessage]) -> usize {
    messages.iter().fold(RECEIVE_REPLY_FIXED_BYTES, |n, m| {
        n.saturating_add(m.encoded_len())
    })
}

fn too_many_connections(max: u32) -> Reply {
    Reply::error(
        ErrorCode::TooManyConnections,
        format!("the server holds its maximum of {max} connections; retry later"),
    )
}

fn shutting_down() -> Reply {
    Reply::error(ErrorCode::ShuttingDown, "the server is shutting down")
}
