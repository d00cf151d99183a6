//! Connections coming and going: admission against `--max-connections`
//! and `--max-connections-before-hello` (closing the oldest connection
//! without HELLO to make room), refusals, failed accepts, closes, and the
//! outcome of a HELLO's token check.

use std::io;
use std::net::SocketAddr;

use bytes::BytesMut;
use sluice_protocol::{ErrorCode, Reply};

use super::{Conn, Ending, EngineLink, Place, State};
use crate::io::{ConnId, Connections};
use crate::server::conn::ConnSession;
use crate::server::limits::ACCEPT_FAILURE_LOG_NS;
use crate::server::session::{Session, shutting_down};
use crate::server::shared::ServerState;
use crate::server::sqs_session::SqsSession;
use crate::server::transport::Transport;

impl State {
    /// The driver could not accept (out of descriptors or kernel memory):
    /// counted, and logged at most once per [`ACCEPT_FAILURE_LOG_NS`] with
    /// what happened since. The connections the shard has go on.
    pub(super) fn on_accept_failed(&mut self, error: &std::io::Error, shed: u32) {
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

    /// A connection the driver refused (it holds `--max-connections`): the
    /// ERROR frame, in plain text or, on a TLS port, inside TLS once the
    /// handshake is done (the connection is read for that).
    pub(super) fn on_refused(&mut self, io: &mut Connections, id: ConnId, peer: SocketAddr) {
        tracing::debug!(%peer, "connection refused: this shard's driver is full");
        self.stats().refused.add(1);
        let reply = too_many_connections(self.shared.config.connections_max);
        if self.shared.config.tls.is_none() {
            let mut buf = BytesMut::with_capacity(reply.encoded_len());
            if reply.encode(0, &mut buf).is_ok() {
                io.send(id, buf.freeze());
            }
            return;
        }
        let Some(transport) = self.transport(io, id, peer) else {
            return;
        };
        io.set_reading(id, true);
        let session = Session::refused(peer, &self.config, self.now_ns, &reply);
        self.install(io, id, ConnSession::Sluice(session), transport, Place::None);
    }

    /// A new connection's transport, or `None` (closed) when TLS cannot
    /// start.
    fn transport(&self, io: &mut Connections, id: ConnId, peer: SocketAddr) -> Option<Transport> {
        let tls = self.shared.config.tls.as_ref().map(|t| &t.server_config);
        match Transport::new(tls) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing connection: TLS could not start");
                io.close_now(id);
                None
            }
        }
    }

    /// Puts a new connection in its slot and hands over what its session
    /// has to say at once (a refusal and its close).
    pub(super) fn install(
        &mut self,
        io: &mut Connections,
        id: ConnId,
        session: ConnSession,
        transport: Transport,
        place: Place,
    ) {
        let idx = id.index() as usize;
        if self.conns.len() <= idx {
            self.conns.resize_with(idx + 1, || None);
        }
        self.conns[idx] = Some(Conn {
            id,
            session,
            transport,
            place,
            ending: Ending::Open,
            dirty: false,
        });
        if place == Place::BeforeHello {
            self.hello_order.push_back(id);
        }
        self.with_session(io, id, |_, _, _| {});
    }

    pub(super) fn on_accept(&mut self, io: &mut Connections, id: ConnId, peer: SocketAddr) {
        let Some(transport) = self.transport(io, id, peer) else {
            return;
        };
        let admitted = self.drain_deadline_ns.is_none() && self.shared.admit_connection();
        let before_hello = admitted && self.admit_before_hello(io);
        if admitted && !before_hello {
            self.shared.release_connection();
        }
        let counted = admitted && before_hello;
        let session = if counted {
            self.stats().accepted.add(1);
            self.stats().connections.add(1);
            tracing::debug!(%peer, conn = %id, shard = self.index, "connection accepted");
            Session::new(peer, &self.config, self.now_ns)
        } else {
            let reply = if self.drain_deadline_ns.is_some() {
                shutting_down()
            } else if admitted {
                tracing::debug!(%peer, "connection refused: --max-connections-before-hello reached");
                self.stats().refused.add(1);
                too_many_before_hello(self.shared.config.connections_before_hello_max)
            } else {
                tracing::debug!(%peer, "connection refused: --max-connections reached");
                self.stats().refused.add(1);
                too_many_connections(self.shared.config.connections_max)
            };
            Session::refused(peer, &self.config, self.now_ns, &reply)
        };
        let session = ConnSession::Sluice(session);
        let place = if counted {
            Place::BeforeHello
        } else {
            Place::None
        };
        self.install(io, id, session, transport, place);
    }

    /// A connection to the SQS door: counted in `--max-connections` (there
    /// is no HELLO), plain HTTP; over the limit or while shutting down it
    /// is answered `503` and closed.
    pub(super) fn on_accept_sqs(&mut self, io: &mut Connections, id: ConnId, peer: SocketAddr) {
        let Some(config) = self.sqs.clone() else {
            io.close_now(id);
            return;
        };
        // HTTPS with the server's certificate when it has one.
        let Some(transport) = self.transport(io, id, peer) else {
            return;
        };
        let admitted = self.drain_deadline_ns.is_none() && self.shared.admit_connection();
        let session = if admitted {
            self.stats().accepted.add(1);
            self.stats().connections.add(1);
            tracing::debug!(%peer, conn = %id, shard = self.index, "SQS connection accepted");
            SqsSession::new(peer, config, self.now_ns)
        } else {
            let why = if self.drain_deadline_ns.is_some() {
                "the server is shutting down".to_owned()
            } else {
                self.stats().refused.add(1);
                format!(
                    "the server holds its maximum of {} connections; retry later",
                    self.shared.config.connections_max
                )
            };
            SqsSession::refused(peer, config, self.now_ns, &why)
        };
        let session = ConnSession::Sqs(session);
        let place = if admitted {
            Place::Counted
        } else {
            Place::None
        };
        self.install(io, id, session, transport, place);
    }

    /// An SQS connection the driver refused (it holds its maximum): `503`.
    pub(super) fn on_refused_sqs(&mut self, io: &mut Connections, id: ConnId, peer: SocketAddr) {
        tracing::debug!(%peer, "SQS connection refused: this shard's driver is full");
        self.stats().refused.add(1);
        let Some(config) = self
            .sqs
            .clone()
            .filter(|_| self.shared.config.tls.is_some())
        else {
            io.send(id, sqs_unavailable());
            return;
        };
        // Over TLS the 503 goes out once the handshake is done.
        let Some(transport) = self.transport(io, id, peer) else {
            return;
        };
        io.set_reading(id, true);
        let why = "the server holds its maximum of connections; retry later";
        let session = SqsSession::refused(peer, config, self.now_ns, why);
        self.install(io, id, ConnSession::Sqs(session), transport, Place::None);
    }

    /// Counts a new connection before HELLO. At the limit, the connection
    /// of this shard that has waited longest for its HELLO is closed to make
    /// room, so that connections that never say HELLO cannot keep new
    /// clients out; false when this shard has none to close (the others'
    /// hold the limit).
    fn admit_before_hello(&mut self, io: &mut Connections) -> bool {
        if self.shared.admit_before_hello() {
            return true;
        }
        while let Some(old) = self.hello_order.pop_front() {
            let Some(c) = self
                .conns
                .get_mut(old.index() as usize)
                .and_then(Option::as_mut)
                .filter(|c| c.id == old && c.place == Place::BeforeHello)
            else {
                continue;
            };
            // Its places are free at once, not when the close completes.
            c.place = Place::None;
            c.ending = Ending::Refused;
            self.shared.past_hello();
            self.shared.release_connection();
            let stats = &self.shared.shards[usize::from(self.index)].stats;
            stats
                .connections
                .set(stats.connections.get().saturating_sub(1));
            stats.before_hello_evicted.add(1);
            tracing::debug!(
                peer = %c.session.peer(),
                "closing a connection without HELLO to make room (--max-connections-before-hello)"
            );
            io.close_now(old);
            return self.shared.admit_before_hello();
        }
        false
    }

    pub(super) fn on_closed(&mut self, id: ConnId, error: Option<io::Error>) {
        let idx = id.index() as usize;
        let Some(slot) = self.conns.get_mut(idx) else {
            return;
        };
        if slot.as_ref().is_none_or(|c| c.id != id) {
            return;
        }
        let Some(mut c) = slot.take() else { return };
        if let Some(e) = error {
            tracing::debug!(peer = %c.session.peer(), conn = %id, error = %e, "connection broken");
        }
        let mut link = EngineLink {
            shard: &mut self.engine,
            tickets: &mut self.tickets,
            next_ticket: &mut self.next_ticket,
            conn: id,
            time: self.engine_time,
            clock: &self.shared.clock,
        };
        c.session.on_closed(&mut link);
        if c.place == Place::BeforeHello {
            self.shared.past_hello();
        }
        if c.place == Place::Metrics {
            self.metrics_closed();
        }
        if c.place.counted() {
            self.shared.release_connection();
            let stats = self.stats();
            stats
                .connections
                .set(stats.connections.get().saturating_sub(1));
        }
    }
}

fn too_many_before_hello(max: u32) -> Reply {
    Reply::error(
        ErrorCode::TooManyConnections,
        format!("the server holds its maximum of {max} connections before HELLO; retry later"),
    )
}

/// The outcome of a HELLO's token check at `now_ns`, through the server's
/// [`AuthGuard`](super::auth_guard::AuthGuard): the delay before the
/// `Unauthorized` reply, and a rate-limited log line for a failure.
pub(super) fn auth_outcome(shared: &ServerState, peer: SocketAddr, ok: bool, now_ns: u64) -> u64 {
    let addr = peer.ip().to_canonical();
    if ok {
        shared.auth.lock().succeeded(addr);
        return 0;
    }
    let verdict = shared.auth.lock().failed(addr, now_ns);
    if let Some(unlogged) = verdict.log {
        tracing::info!(
            %peer,
            failures = verdict.failures,
            reply_delay_ms = verdict.delay_ns / 1_000_000,
            not_logged_since_last_line = unlogged,
            "HELLO refused: wrong or missing auth token (at most one such line a second; \
             an address that keeps failing has its replies delayed)"
        );
    }
    verdict.delay_ns
}

/// What a connection to the SQS door is told when it cannot be served.
pub(crate) fn sqs_unavailable() -> bytes::Bytes {
    let mut out = BytesMut::new();
    sluice_sqs::http::write_response(
        &mut out,
        503,
        &[("Content-Type", "text/plain; charset=utf-8")],
        b"the server holds its maximum of connections; retry later\n",
        true,
    );
    out.freeze()
}

fn too_many_connections(max: u32) -> Reply {
    Reply::error(
        ErrorCode::TooManyConnections,
        format!("the server holds its maximum of {max} connections; retry later"),
    )
}
