//! Redis 7 streams with a consumer group, over hand-written RESP2.
//!
//! | operation | Redis |
//! |---|---|
//! | set up | `XGROUP CREATE <stream> loadgen 0 MKSTREAM` |
//! | send batch | one `XADD <stream> * d <body>` per message, all pipelined in one write |
//! | receive batch | `XREADGROUP GROUP loadgen c<n> COUNT <max> BLOCK <ms> STREAMS <stream> >` |
//! | expired leases | `XAUTOCLAIM <stream> loadgen c<n> <visibility ms> <cursor> COUNT <max>`, run by every consumer every claim interval |
//! | delete batch | `XACK <stream> loadgen <ids...>` and `XDEL <stream> <ids...>`, pipelined |
//! | window above 1 | the commands of several batches pipelined on the connection (pipeline depth), their replies read in order; `BLOCK` only when nothing else is in flight, since a blocked command holds up the connection |
//! | tear down | `DEL <stream>` |
//!
//! Redis has no lease timer: a pending entry whose idle time passed the
//! visibility timeout only becomes receivable when a consumer runs
//! `XAUTOCLAIM`. Each consumer runs one claim scan per claim interval
//! (visibility timeout / 100, between 5 ms and 1 s, staggered across
//! consumers). The pending list is ordered by entry id, not by lease end,
//! so an entry whose lease ends just after a scan's cursor passed it waits
//! for the next scan: redelivery lateness includes up to one interval, on
//! top of the scan itself (a pending list of N entries takes N / (10 x
//! batch) calls to scan). Redis times out a
//! blocked `XREADGROUP` only on its `serverCron` tick (`hz`, 10 per second by
//! default), so a `BLOCK` shorter than 100 ms can last 100 ms: while a scan
//! is due within the long-poll wait, consumers read without `BLOCK` every
//! 2 ms instead, so the scan starts on time. `XACK` on an entry
//! another consumer claimed in the meantime still succeeds (any consumer of
//! the group may acknowledge), and `XDEL` removes the entry, so a delete
//! never fails the way a stale sluice receipt does.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::wire::push_u64;
use super::{
    Adapter, AdapterError, Finished, QueueSpec, Receipt, Role, Setting, Target, TargetUrl,
};
use sluice_protocol::units::format_duration;

mod resp;

use resp::{Resp, parse_id, push_bulk, push_id_bulk};

const PEER: &str = "redis";
/// The consumer group every pass uses.
const GROUP: &str = "loadgen";
/// Bounds of the XAUTOCLAIM interval.
const CLAIM_INTERVAL_MIN: Duration = Duration::from_millis(5);
const CLAIM_INTERVAL_MAX: Duration = Duration::from_secs(1);
/// Pause between non-blocking reads while a claim scan is due soon.
const POLL_PAUSE: Duration = Duration::from_millis(2);

/// The queue as Redis sees it.
#[derive(Debug, Clone)]
struct Stream {
    key: String,
    visibility_ms: u64,
    claim_interval: Duration,
    consumers: usize,
}

/// A Redis server under test.
pub struct RedisTarget {
    url: TargetUrl,
    token: Option<String>,
    stream: Option<Stream>,
    server: Vec<Setting>,
    read_spin: Duration,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTarget")
            .field("url", &self.url)
            .finish()
    }
}

impl RedisTarget {
    /// A target for `url`, authenticating with `token` when given.
    pub fn new(url: TargetUrl, token: Option<String>) -> Self {
        Self {
            url,
            token,
            stream: None,
            server: Vec::new(),
            read_spin: Duration::ZERO,
        }
    }

    /// The read spin of the producers' and consumers' connections
    /// (`--read-spin`; zero, the default, blocks at once).
    pub fn read_spin(mut self, spin: Duration) -> Self {
        self.read_spin = spin;
        self
    }

    fn stream(&self) -> Result<&Stream, AdapterError> {
        super::set_up(self.stream.as_ref(), PEER)
    }
}

/// The XAUTOCLAIM interval for a visibility timeout.
pub fn claim_interval(visibility: Duration) -> Duration {
    (visibility / 100).clamp(CLAIM_INTERVAL_MIN, CLAIM_INTERVAL_MAX)
}

impl Target for RedisTarget {
    fn kind(&self) -> &'static str {
        PEER
    }

    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError> {
        super::refuse_groups(spec, "redis")?;
        let visibility_ms = u64::try_from(spec.visibility_timeout.as_millis()).unwrap_or(u64::MAX);
        if visibility_ms == 0 {
            return Err(AdapterError::Unsupported(
                "redis: XAUTOCLAIM needs a visibility timeout of at least 1 ms".into(),
            ));
        }
        let mut r = Resp::connect(&self.url, self.token.as_deref())?;
        r.command(&[
            b"XGROUP",
            b"CREATE",
            spec.name.as_bytes(),
            GROUP.as_bytes(),
            b"0",
            b"MKSTREAM",
        ]);
        r.conn.flush()?;
        r.expect_simple()?;
        let mut server = Vec::new();
        let info = r.call_text(&[b"INFO", b"server"])?;
        if let Some(v) = info.lines().find_map(|l| l.strip_prefix("redis_version:")) {
            server.push(Setting::new("server", format!("Redis {}", v.trim())));
        }
        // CONFIG may be renamed or forbidden; the run goes on without it.
        r.command(&[b"CONFIG", b"GET", b"save"]);
        r.command(&[b"CONFIG", b"GET", b"appendonly"]);
        r.command(&[b"CONFIG", b"GET", b"hz"]);
        r.conn.flush()?;
        let mut persistence = Vec::new();
        for _ in 0..3 {
            match r.expect_array() {
                Ok(Some(2)) => {
                    let name = String::from_utf8_lossy(r.expect_bulk()?).into_owned();
                    let value = String::from_utf8_lossy(r.expect_bulk()?).into_owned();
                    persistence.push(format!("{name}={value:?}"));
                }
                Ok(Some(n)) => {
                    for _ in 0..n {
                        r.skip()?;
                    }
                }
                Ok(None) => {}
                Err(AdapterError::Server { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if !persistence.is_empty() {
            server.push(Setting::new("config", persistence.join(" ")));
        }
        self.server = server;
        self.stream = Some(Stream {
            key: spec.name.clone(),
            visibility_ms,
            claim_interval: claim_interval(spec.visibility_timeout),
            consumers: spec.consumers.max(1),
        });
        Ok(())
    }

    fn connect(&self, role: Role) -> Result<Box<dyn Adapter>, AdapterError> {
        let stream = self.stream()?.clone();
        let mut resp = Resp::connect(&self.url, self.token.as_deref())?;
        resp.conn = resp.conn.with_read_spin(self.read_spin);
        let index = match role {
            Role::Producer(n) | Role::Consumer(n) => n,
            // Refused at setup; it would send as the first producer.
            Role::Backlog => 0,
        };
        // Stagger the consumers' claim scans over one interval.
        let offset = stream.claim_interval * (index as u32 % stream.consumers as u32 + 1)
            / stream.consumers as u32;
        Ok(Box::new(RedisAdapter {
            resp,
            consumer: format!("c{index}"),
            next_claim: Instant::now() + offset,
            claim_cursor: None,
            ids: Vec::new(),
            in_flight: VecDeque::new(),
            stream,
        }))
    }

    fn settings(&self) -> Vec<Setting> {
        let mut s = self.server.clone();
        s.push(super::read_spin_setting(self.read_spin));
        if let Some(st) = &self.stream {
            s.push(Setting::new(
                "stream",
                format!("{} (consumer group {GROUP})", st.key),
            ));
            s.push(Setting::new(
                "send",
                "XADD per message, one batch pipelined per write",
            ));
            s.push(Setting::new(
                "receive",
                "XREADGROUP COUNT <batch> BLOCK 100 ms; without BLOCK, every 2 ms, while a \
                 claim scan is due within 100 ms",
            ));
            s.push(Setting::new(
                "delete",
                "XACK + XDEL with every id of the batch, pipelined",
            ));
            s.push(Setting::new(
                "expired leases",
                format!(
                    "XAUTOCLAIM min-idle {} ms COUNT <batch>, every {} per consumer",
                    st.visibility_ms,
                    format_duration(st.claim_interval)
                ),
            ));
        }
        s
    }

    fn teardown(&mut self) -> Result<(), AdapterError> {
        if let Some(st) = self.stream.take() {
            let mut r = Resp::connect(&self.url, self.token.as_deref())?;
            r.command(&[b"DEL", st.key.as_bytes()]);
            r.conn.flush()?;
            r.expect_int()?;
        }
        Ok(())
    }
}

/// Commands written and not yet answered, one entry per batch.
enum InFlight {
    /// `XADD`s.
    Add(usize),
    /// An `XREADGROUP`: whether it blocks, and how long the batch may wait.
    Read(bool, Duration),
    /// An `XAUTOCLAIM` step.
    Claim,
    /// `XACK` and `XDEL`.
    Ack,
}

/// One Redis connection of a pass.
struct RedisAdapter {
    resp: Resp,
    stream: Stream,
    consumer: String,
    next_claim: Instant,
    /// Where the claim scan in progress resumes.
    claim_cursor: Option<(u64, u64)>,
    ids: Vec<(u64, u64)>,
    in_flight: VecDeque<InFlight>,
}

impl RedisAdapter {
    /// Writes one XAUTOCLAIM step.
    fn write_claim(&mut self, max: usize) {
        let start = self.claim_cursor.unwrap_or((0, 0));
        let mut start_text = Vec::new();
        push_u64(&mut start_text, start.0);
        start_text.push(b'-');
        push_u64(&mut start_text, start.1);
        let mut idle = Vec::new();
        push_u64(&mut idle, self.stream.visibility_ms);
        let mut count = Vec::new();
        push_u64(&mut count, max as u64);
        let key = self.stream.key.clone();
        let consumer = self.consumer.clone();
        self.resp.command(&[
            b"XAUTOCLAIM",
            key.as_bytes(),
            GROUP.as_bytes(),
            consumer.as_bytes(),
            &idle,
            &start_text,
            b"COUNT",
            &count,
        ]);
    }

    /// Reads one XAUTOCLAIM step's reply; returns the entries claimed.
    fn read_claim(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        if self.resp.expect_array()? != Some(3) {
            return Err(self
                .resp
                .conn
                .protocol("XAUTOCLAIM reply is not [cursor, entries, deleted]"));
        }
        let cursor = parse_id(self.resp.expect_bulk()?).ok_or_else(|| AdapterError::Protocol {
            peer: PEER,
            detail: "bad XAUTOCLAIM cursor".into(),
        })?;
        let n = self.resp.expect_array()?.unwrap_or(0);
        let got = self.resp.read_entries(n, on_message)?;
        // Ids of entries deleted while pending: Redis has already dropped them.
        self.resp.skip()?;
        if cursor == (0, 0) {
            self.claim_cursor = None;
            self.next_claim = Instant::now() + self.stream.claim_interval;
        } else {
            self.claim_cursor = Some(cursor);
        }
        Ok(got)
    }

    /// Whether a claim step is due.
    fn claim_due(&self) -> bool {
        self.claim_cursor.is_some() || Instant::now() >= self.next_claim
    }

    /// Writes an XREADGROUP of up to `max`, blocking up to `block_ms`.
    fn write_read(&mut self, max: usize, block_ms: Option<u64>) {
        let mut count = Vec::new();
        push_u64(&mut count, max as u64);
        let mut block = Vec::new();
        if let Some(ms) = block_ms {
            push_u64(&mut block, ms);
        }
        let key = self.stream.key.clone();
        let consumer = self.consumer.clone();
        let mut args: Vec<&[u8]> = vec![
            b"XREADGROUP",
            b"GROUP",
            GROUP.as_bytes(),
            consumer.as_bytes(),
            b"COUNT",
            &count,
        ];
        if block_ms.is_some() {
            args.extend([&b"BLOCK"[..], &block]);
        }
        args.extend([&b"STREAMS"[..], key.as_bytes(), b">"]);
        self.resp.command(&args);
    }

    /// Reads an XREADGROUP's reply; returns the entries delivered.
    fn read_read(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let mut got = 0;
        if let Some(streams) = self.resp.expect_array()? {
            for _ in 0..streams {
                if self.resp.expect_array()? != Some(2) {
                    return Err(self
                        .resp
                        .conn
                        .protocol("XREADGROUP stream is not [key, entries]"));
                }
                self.resp.expect_bulk()?;
                let n = self.resp.expect_array()?.unwrap_or(0);
                got += self.resp.read_entries(n, on_message)?;
            }
        }
        Ok(got)
    }

    /// How long a receive may BLOCK: Redis times a blocked XREADGROUP out on
    /// its serverCron tick (hz, 10 per second by default), so a short BLOCK
    /// lasts up to 100 ms; when the next claim scan is due sooner than the
    /// long-poll wait, the read does not block and the caller polls, so the
    /// scan is not delayed.
    fn block_ms(&self, wait: Duration) -> Option<u64> {
        let until_claim = self.next_claim.saturating_duration_since(Instant::now());
        (until_claim >= wait).then(|| wait.as_millis().clamp(1, 100_000) as u64)
    }

    /// A read that did not block found nothing: pause before the next poll,
    /// at most until the claim scan is due.
    fn poll_pause(&self) {
        let until_claim = self.next_claim.saturating_duration_since(Instant::now());
        std::thread::sleep(until_claim.min(POLL_PAUSE));
    }

    fn write_adds(&mut self, bodies: &[&[u8]]) {
        for body in bodies {
            let key = self.stream.key.as_bytes();
            let w = &mut self.resp.conn.wbuf;
            w.extend_from_slice(b"*5\r\n$4\r\nXADD\r\n");
            push_bulk(w, key);
            w.extend_from_slice(b"$1\r\n*\r\n$1\r\nd\r\n");
            push_bulk(w, body);
        }
    }

    fn read_adds(&mut self, n: usize) -> Result<(), AdapterError> {
        for _ in 0..n {
            self.resp.expect_bulk()?;
        }
        Ok(())
    }

    fn write_acks(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        self.ids.clear();
        for r in receipts {
            match r {
                Receipt::Ids(ms, seq) => self.ids.push((*ms, *seq)),
                Receipt::Bytes(_) | Receipt::Sluice(_) => {
                    return Err(AdapterError::Unsupported(
                        "redis: a receipt from another adapter".into(),
                    ));
                }
            }
        }
        let key = self.stream.key.as_bytes();
        let w = &mut self.resp.conn.wbuf;
        w.push(b'*');
        push_u64(w, 3 + self.ids.len() as u64);
        w.extend_from_slice(b"\r\n$4\r\nXACK\r\n");
        push_bulk(w, key);
        push_bulk(w, GROUP.as_bytes());
        for id in &self.ids {
            push_id_bulk(w, *id);
        }
        w.push(b'*');
        push_u64(w, 2 + self.ids.len() as u64);
        w.extend_from_slice(b"\r\n$4\r\nXDEL\r\n");
        push_bulk(w, key);
        for id in &self.ids {
            push_id_bulk(w, *id);
        }
        Ok(())
    }

    fn read_acks(&mut self) -> Result<(), AdapterError> {
        // XACK counts entries that were pending, XDEL entries that existed.
        // Any consumer of the group may acknowledge and XDEL removes the
        // entry, so every id is gone afterwards: none is rejected.
        self.resp.expect_int()?;
        self.resp.expect_int()?;
        Ok(())
    }
}

impl Adapter for RedisAdapter {
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        self.write_adds(bodies);
        self.resp.conn.flush()?;
        self.read_adds(bodies.len())
    }

    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        if self.claim_due() {
            self.write_claim(max);
            self.resp.conn.flush()?;
            let got = self.read_claim(on_message)?;
            if got > 0 {
                return Ok(got);
            }
        }
        let block_ms = self.block_ms(wait);
        self.write_read(max, block_ms);
        self.resp.conn.flush()?;
        let got = self.read_read(on_message)?;
        if got == 0 && block_ms.is_none() {
            self.poll_pause();
        }
        Ok(got)
    }

    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        _rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError> {
        if receipts.is_empty() {
            return Ok(());
        }
        self.write_acks(receipts)?;
        self.resp.conn.flush()?;
        self.read_acks()
    }

    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        self.write_adds(bodies);
        self.resp.conn.flush()?;
        self.in_flight.push_back(InFlight::Add(bodies.len()));
        Ok(())
    }

    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError> {
        let claiming = self
            .in_flight
            .iter()
            .any(|op| matches!(op, InFlight::Claim));
        if self.claim_due() && !claiming {
            self.write_claim(max);
            self.in_flight.push_back(InFlight::Claim);
        } else {
            // A blocked command holds up every command behind it.
            let alone = self.in_flight.is_empty();
            let block_ms = if alone && !wait.is_zero() {
                self.block_ms(wait)
            } else {
                None
            };
            self.write_read(max, block_ms);
            self.in_flight
                .push_back(InFlight::Read(block_ms.is_some(), wait));
        }
        self.resp.conn.flush()
    }

    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        self.write_acks(receipts)?;
        self.resp.conn.flush()?;
        self.in_flight.push_back(InFlight::Ack);
        Ok(())
    }

    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        _rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError> {
        match self.in_flight.pop_front() {
            None => Err(super::nothing_started(PEER)),
            Some(InFlight::Add(n)) => {
                self.read_adds(n)?;
                Ok(Finished::Sent)
            }
            Some(InFlight::Claim) => Ok(Finished::Received(self.read_claim(on_message)?)),
            Some(InFlight::Read(blocked, wait)) => {
                let got = self.read_read(on_message)?;
                if got == 0 && !blocked && !wait.is_zero() && self.in_flight.is_empty() {
                    self.poll_pause();
                }
                Ok(Finished::Received(got))
            }
            Some(InFlight::Ack) => {
                self.read_acks()?;
                Ok(Finished::Deleted)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_intervals() {
        assert_eq!(parse_id(b"1700000000000-12"), Some((1_700_000_000_000, 12)));
        assert_eq!(parse_id(b"0-0"), Some((0, 0)));
        assert_eq!(parse_id(b"12"), None);
        let mut w = Vec::new();
        push_id_bulk(&mut w, (5, 7));
        assert_eq!(w, b"$3\r\n5-7\r\n");
        let ms = Duration::from_millis;
        assert_eq!(claim_interval(Duration::from_secs(1)), ms(10));
        assert_eq!(claim_interval(ms(50)), CLAIM_INTERVAL_MIN);
        assert_eq!(claim_interval(Duration::from_secs(30)), ms(300));
        assert_eq!(claim_interval(Duration::from_secs(600)), CLAIM_INTERVAL_MAX);
    }
}
