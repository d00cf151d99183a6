//! The metrics endpoint's connections on a shard: admitting them within
//! this shard's share of [`METRICS_CONNECTIONS_MAX`] (closing the oldest
//! one still reading its request to make room, so that connections that
//! never finish a request cannot keep a scraper out), and carrying their
//! scrapes on until every shard has published its counters.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::{Place, State};
use crate::io::{ConnId, Connections, ListenerId};
use crate::server::conn::ConnSession;
use crate::server::limits::METRICS_CONNECTIONS_MAX;
use crate::server::metrics_session::{MetricsConfig, MetricsSession};
use crate::server::transport::Transport;

/// A shard's side of the metrics endpoint.
#[derive(Debug)]
pub(super) struct MetricsDoor {
    /// The endpoint's listener.
    pub(super) listener: ListenerId,
    /// What every metrics connection shares.
    pub(super) config: MetricsConfig,
    /// This shard's share of [`METRICS_CONNECTIONS_MAX`].
    pub(super) max: usize,
    /// The connections admitted, oldest first (entries of closed ones are
    /// dropped when met).
    pub(super) order: VecDeque<ConnId>,
    /// Connections admitted and not yet closed.
    pub(super) open: usize,
    /// Connections waiting for a scrape.
    pub(super) scrapes: Vec<ConnId>,
}

impl MetricsDoor {
    /// The endpoint on `listener`, for one of `shards` shards.
    pub(super) fn new(listener: ListenerId, config: MetricsConfig, shards: usize) -> MetricsDoor {
        MetricsDoor {
            listener,
            config,
            max: (METRICS_CONNECTIONS_MAX / shards.max(1)).max(1),
            order: VecDeque::new(),
            open: 0,
            scrapes: Vec::new(),
        }
    }
}

impl State {
    /// Whether `listener` is the metrics endpoint's.
    pub(super) fn is_metrics(&self, listener: ListenerId) -> bool {
        self.metrics
            .as_ref()
            .is_some_and(|m| m.listener == listener)
    }

    /// A connection to the metrics endpoint: admitted (making room if need
    /// be), or answered `503` and closed when every place is taken by
    /// connections being served.
    pub(super) fn on_accept_metrics(&mut self, io: &mut Connections, id: ConnId, peer: SocketAddr) {
        let Some(config) = self.metrics.as_ref().map(|m| m.config.clone()) else {
            io.close_now(id);
            return;
        };
        let session = if self.admit_metrics(io) {
            tracing::debug!(%peer, conn = %id, shard = self.index, "metrics connection accepted");
            MetricsSession::new(peer, config, self.now_ns)
        } else {
            tracing::debug!(%peer, "metrics connection refused: every place is being served");
            MetricsSession::refused(
                peer,
                config,
                self.now_ns,
                "the metrics endpoint is serving its maximum of connections; retry later",
            )
        };
        let admitted = session.is_reading();
        self.install(
            io,
            id,
            ConnSession::Metrics(session),
            Transport::plain(),
            Place::None,
        );
        if let (true, Some(m)) = (admitted, self.metrics.as_mut()) {
            m.order.push_back(id);
            m.open += 1;
            if let Some(c) = self.conns[id.index() as usize].as_mut() {
                c.place = Place::Metrics;
            }
        }
    }

    /// A metrics connection the driver refused (it holds its maximum):
    /// `503`.
    pub(super) fn on_refused_metrics(
        &mut self,
        io: &mut Connections,
        id: ConnId,
        peer: SocketAddr,
    ) {
        tracing::debug!(%peer, "metrics connection refused: this shard's driver is full");
        io.send(id, super::sqs_unavailable());
    }

    /// Room for one more metrics connection: true when there is a place,
    /// or once the oldest connection still reading its request is closed
    /// to make one; false when every place holds a connection being
    /// served.
    fn admit_metrics(&mut self, io: &mut Connections) -> bool {
        let Some(m) = self.metrics.as_mut() else {
            return false;
        };
        if m.open < m.max {
            return true;
        }
        let mut kept = VecDeque::with_capacity(m.order.len());
        let mut evicted = false;
        while let Some(old) = m.order.pop_front() {
            let conn = self
                .conns
                .get_mut(old.index() as usize)
                .and_then(Option::as_mut)
                .filter(|c| c.id == old && c.place == Place::Metrics);
            let Some(c) = conn else { continue };
            match &mut c.session {
                ConnSession::Metrics(s) if !evicted && s.is_reading() => {
                    tracing::debug!(
                        peer = %s.peer(),
                        "closing a metrics connection without a request to make room"
                    );
                    s.evict(self.now_ns);
                    c.place = Place::None;
                    m.open -= 1;
                    evicted = true;
                    io.close_now(old);
                }
                _ => kept.push_back(old),
            }
        }
        m.order = kept;
        evicted
    }

    /// Answers the scrapes whose counters are in (or whose wait is over).
    pub(super) fn poll_scrapes(&mut self, io: &mut Connections) {
        let Some(m) = self.metrics.as_mut() else {
            return;
        };
        if m.scrapes.is_empty() {
            return;
        }
        let mut waiting = core::mem::take(&mut m.scrapes);
        let now = self.now_ns;
        waiting.retain(|&id| {
            let mut still = false;
            self.with_session(io, id, |s, _, _| {
                if let ConnSession::Metrics(s) = s {
                    still = !s.poll_scrape(now);
                }
            });
            still
        });
        if let Some(m) = self.metrics.as_mut() {
            m.scrapes.append(&mut waiting);
        }
    }

    /// A metrics connection closed: its place is free.
    pub(super) fn metrics_closed(&mut self) {
        if let Some(m) = self.metrics.as_mut() {
            m.open = m.open.saturating_sub(1);
        }
    }
}
