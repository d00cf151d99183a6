//! Shutdown: a shard stops accepting (but for the metrics endpoint, which
//! answers until the end), gives waiting receives their empty batch, lets
//! its sessions drain until every shard is done or the shutdown timeout
//! passes, then closes what is left.

use crate::io::Connections;
use crate::server::conn::ConnSession;
use crate::sync::Ordering::{AcqRel, Acquire};

use super::State;

impl State {
    pub(super) fn begin_drain(&mut self, io: &mut Connections) {
        tracing::debug!(shard = self.index, "shard draining");
        self.drain_started_ns = self.now_ns;
        self.drain_deadline_ns = Some(self.now_ns.saturating_add(self.shutdown_timeout_ns));
        // Waiting receives get their empty batch now.
        self.engine.shutdown(self.engine_time.now_ns);
        self.route_completions(io);
        for id in self.ids() {
            self.with_session(io, id, |s, cx, engine| s.begin_drain(cx, engine));
        }
    }

    pub(super) fn drain_step(&mut self, io: &mut Connections) {
        let started = self.drain_started_ns;
        for id in self.ids() {
            self.with_session(io, id, |s, cx, engine| s.drain(started, cx, engine));
        }
        // The metrics endpoint goes on answering (`/healthz`: draining)
        // until the shards are done; its connections hold none back.
        let open = self
            .conns
            .iter()
            .flatten()
            .any(|c| !matches!(c.session, ConnSession::Metrics(_)));
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

    pub(super) fn finish(&mut self, io: &mut Connections) {
        self.close_log();
        for slot in &mut self.conns {
            if let Some(c) = slot.take() {
                io.close_now(c.id);
                if c.place.counted() {
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
