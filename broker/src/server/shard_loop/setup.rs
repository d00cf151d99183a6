//! A shard's state at start: the sessions' configuration and the HELLO
//! reply from the server's settings, the clocks read once.

use std::collections::{HashMap, VecDeque};

use sluice_protocol::limits::{BATCH_ENTRIES_MAX, PROTOCOL_VERSION, RECEIVE_WAIT_MS_MAX};
use sluice_protocol::{HelloReply, ServerLimits};

use super::metrics::MetricsDoor;
use super::moves::Mover;
use super::{ShardStart, State, metrics_listener};
use crate::server::clock::{self, nanos};
use crate::server::limits::{
    HOUSEKEEPING_MAX_NS, HOUSEKEEPING_MIN_NS, METRICS_BODY_BYTES_MAX, METRICS_EXCHANGE_TIMEOUT,
    METRICS_READ_TIMEOUT, METRICS_REQUEST_BYTES_MAX, SCRAPE_WAIT, SQS_BODY_BYTES_MAX,
    SQS_IDLE_TIMEOUT, SQS_REQUEST_TIMEOUT,
};
use crate::server::metrics::telemetry::ServerMetrics;
use crate::server::metrics_session::MetricsConfig;
use crate::server::session::SessionConfig;
use crate::server::shared::server_version;
use crate::server::sqs_session::SqsConfig;
use sluice_sqs::http::HttpLimits;

impl State {
    pub(super) fn new(index: u16, start: ShardStart) -> State {
        let c = &start.shared.config;
        let config = SessionConfig {
            frame_bytes_max: c.frame_bytes_max,
            hello_frame_bytes_max: c.hello_frame_bytes_max,
            hello_timeout_ns: nanos(c.hello_timeout),
            frame_timeout_ns: nanos(c.frame_timeout),
            in_flight_max: c.requests_in_flight_max as usize,
            unsent_max: usize::try_from(c.unsent_bytes_max).unwrap_or(usize::MAX),
            auth_token: c.auth_token.clone(),
            hello: HelloReply {
                version: PROTOCOL_VERSION,
                server_version: server_version(),
                shard: index,
                shards: u16::try_from(start.shared.shards.len()).unwrap_or(u16::MAX),
                limits: ServerLimits {
                    frame_bytes_max: c.frame_bytes_max,
                    // 1,024 fits a u16 (checked in the protocol's limits).
                    batch_entries_max: u16::try_from(BATCH_ENTRIES_MAX).unwrap_or(u16::MAX),
                    requests_in_flight_max: c.requests_in_flight_max,
                    receive_wait_ms_max: RECEIVE_WAIT_MS_MAX,
                },
            },
        };
        let housekeeping_ns = (config.hello_timeout_ns.min(config.frame_timeout_ns) / 4)
            .clamp(HOUSEKEEPING_MIN_NS, HOUSEKEEPING_MAX_NS);
        let (unsent_total_max, shutdown_timeout_ns, idle_spin) = (
            c.unsent_bytes_total_max,
            nanos(c.shutdown_timeout),
            c.idle_spin,
        );
        let sqs = start.shared.sqs_door.clone().map(|door| SqsConfig {
            door,
            http: HttpLimits {
                body_bytes_max: SQS_BODY_BYTES_MAX,
                ..HttpLimits::default()
            },
            request_timeout_ns: nanos(c.frame_timeout.min(SQS_REQUEST_TIMEOUT)),
            idle_timeout_ns: nanos(SQS_IDLE_TIMEOUT),
        });
        let metrics = c.metrics.map(|_| {
            let config = MetricsConfig {
                source: std::sync::Arc::new(ServerMetrics(start.shared.clone())),
                http: HttpLimits {
                    head_bytes_max: METRICS_REQUEST_BYTES_MAX,
                    headers_max: HttpLimits::default().headers_max,
                    body_bytes_max: METRICS_BODY_BYTES_MAX,
                },
                head_timeout_ns: nanos(METRICS_READ_TIMEOUT),
                exchange_timeout_ns: nanos(METRICS_EXCHANGE_TIMEOUT),
                scrape_wait_ns: nanos(SCRAPE_WAIT),
            };
            let listener = metrics_listener(sqs.is_some());
            MetricsDoor::new(listener, config, start.shared.shards.len())
        });
        if let Some(log) = &start.log {
            start.shared.shards[usize::from(index)]
                .stats
                .log
                .replay_ns
                .set(log.replay_ns);
        }
        let now = clock::now_ns();
        let engine_time = start.shared.clock.engine_time(now, clock::wall_ms());
        State {
            index,
            engine: start.engine,
            log: start.log,
            doorbell: start.doorbell,
            shared: start.shared,
            config,
            mover: sqs.as_ref().map(|s| Mover::new(s.door.clone())),
            sqs,
            metrics,
            unsent_total_max,
            shutdown_timeout_ns,
            conns: Vec::new(),
            tickets: HashMap::new(),
            next_ticket: 1,
            completions: Vec::new(),
            dirty: Vec::new(),
            paused: Vec::new(),
            hello_order: VecDeque::new(),
            clock_waiters: Vec::new(),
            now_ns: now,
            engine_time,
            clock_fresh: true,
            unsent_over: false,
            housekeeping_ns,
            next_housekeeping_ns: now + housekeeping_ns,
            next_publish_ns: now,
            published_generation: 0,
            drain_deadline_ns: None,
            drain_started_ns: 0,
            counted_out: false,
            plaintext: Vec::new(),
            exit: false,
            accept_failure_logged_ns: None,
            accept_failures_unlogged: (0, 0),
            idle_spin_ns: nanos(idle_spin),
            spin_until_ns: 0,
            events: 0,
        }
    }
}
