//! sluice itself, over the native blocking client (`sluice-client`).
//!
//! | operation | sluice |
//! |---|---|
//! | set up | `CREATE_QUEUE <name>` with the visibility timeout as the queue's |
//! | send batch | one `SEND` request carrying the whole batch |
//! | receive batch | one `RECEIVE` with max = the batch, the visibility timeout and a long-poll wait |
//! | expired leases | nothing to do: the broker's timing wheel makes them visible again |
//! | delete batch | one `DELETE` request carrying every receipt of the batch |
//! | tear down | `DELETE_QUEUE <name>` |
//!
//! `sluice://a:1,b:2,c:3` drives several brokers at once, as the sharded
//! client places queues: one queue per broker (`<name>_<k>`, each name
//! picked so that it hashes to its broker), producer and consumer `n`
//! on queue `n mod brokers`, each over a connection to that queue's
//! broker. With `--sluice-tls-ca` every connection is TLS.
//!
//! Each producer or consumer thread has its own [`Client`], so its own
//! connection, read by that thread itself (the client has no thread of its
//! own). With `--window 1` one request is in flight per connection at a
//! time, as one batch is for the peers; with more, requests are pipelined
//! (`Client::start_*`) and their replies matched by request id. A delete whose
//! receipt is from an older delivery (`StaleReceipt`: the lease ran out and
//! someone else received the message) or whose message is gone (`Gone`:
//! that someone deleted it) is counted as refused, not as an error.

use std::time::Duration;

use std::collections::VecDeque;

use bytes::Bytes;
use sluice_client::sharded::ShardedClient;
use sluice_client::tls::TlsConfig;
use sluice_client::{
    Client, ClientConfig, Error, MessageGroupId, PendingReply, QueueOptions, ReceiveOptions,
    ReceivedBatch, SendEntryRef, SendOutcome,
};

use super::wire::push_u64;
use super::{
    Adapter, AdapterError, CONNECT_TIMEOUT, Finished, QueueSpec, REPLY_TIMEOUT, Receipt, Role,
    Setting, Target, TargetUrl,
};
use sluice_protocol::AttributesRef;
use sluice_protocol::units::format_duration;

const PEER: &str = "sluice";
/// The reconnect backoff: the load generator fails a pass rather than
/// reconnect in the middle, but the client wants a policy.
const RECONNECT_DELAY_INITIAL: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(1);

/// The client's error as the runner sees it.
fn adapter_error(addr: &str, err: Error) -> AdapterError {
    match err {
        Error::Connect { source, .. } => AdapterError::Connect {
            peer: PEER,
            addr: addr.to_owned(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        Error::Io(source) => AdapterError::Io {
            peer: PEER,
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        Error::Timeout(after) => AdapterError::Io {
            peer: PEER,
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no reply within {}", format_duration(after)),
            ),
        },
        Error::Disconnected(_) | Error::Closed => AdapterError::Closed { peer: PEER },
        Error::Protocol(detail) => AdapterError::Protocol { peer: PEER, detail },
        other => AdapterError::Server {
            peer: PEER,
            message: other.to_string(),
        },
    }
}

/// The queue as one connection sees it.
#[derive(Debug, Clone)]
struct Queue {
    name: String,
    visibility: Duration,
    batch_max: usize,
    groups: usize,
    fifo: bool,
    dedup_keys: bool,
}

/// The queues of a pass, one per broker, and where each lives.
#[derive(Debug, Clone)]
struct Queues {
    /// Queue `k` and its broker's address.
    each: Vec<(String, String)>,
    visibility: Duration,
    batch_max: usize,
    groups: usize,
    fifo: bool,
    dedup_keys: bool,
}

/// A producer's message groups and keys: the sends take the group ids in
/// turn, and on a FIFO queue (or with `--dedup-keys`) each message gets a
/// dedup key of its own (the connection and a counter). A send's entries
/// are borrowed views of the bodies, the ids and the batch's keys, so that
/// a grouped send allocates nothing per message (as a plain one does not).
struct Grouped {
    ids: Vec<MessageGroupId>,
    fifo: bool,
    /// Each key's start: the connection's number and a dash.
    key_prefix: Vec<u8>,
    next: u64,
    /// The dedup keys of the batch being sent, one after another, and
    /// where each ends.
    keys: Vec<u8>,
    key_ends: Vec<usize>,
}

impl Grouped {
    fn new(groups: usize, fifo: bool, connection: usize) -> Option<Grouped> {
        (groups > 0 || fifo).then(|| Grouped {
            ids: (0..groups)
                .map(|g| MessageGroupId::new(&format!("g{g}")).expect("a valid id"))
                .collect(),
            fifo,
            key_prefix: format!("{connection}-").into_bytes(),
            next: 0,
            keys: Vec::new(),
            key_ends: Vec::new(),
        })
    }

    /// A noisy tenant's sends (`--backlog`): all in group `noisy` when the
    /// queue's messages carry groups, none otherwise.
    fn noisy(groups: usize) -> Option<Grouped> {
        (groups > 0).then(|| Grouped {
            ids: vec![MessageGroupId::new("noisy").expect("a valid id")],
            fifo: false,
            key_prefix: Vec::new(),
            next: 0,
            keys: Vec::new(),
            key_ends: Vec::new(),
        })
    }

    /// The entries of a send of `bodies`, each with its group (and key).
    fn entries<'a>(&'a mut self, bodies: &[&'a [u8]]) -> Vec<SendEntryRef<'a>> {
        let first = self.next;
        self.next += bodies.len() as u64;
        self.keys.clear();
        self.key_ends.clear();
        if self.fifo {
            for n in first..self.next {
                self.keys.extend_from_slice(&self.key_prefix);
                push_u64(&mut self.keys, n);
                self.key_ends.push(self.keys.len());
            }
        }
        let (ids, keys, key_ends) = (&self.ids, &self.keys, &self.key_ends);
        let mut key_start = 0;
        bodies
            .iter()
            .zip(first..)
            .enumerate()
            .map(|(i, (&body, n))| {
                // Below `ids.len()`, which is a usize.
                let group =
                    (!ids.is_empty()).then(|| &ids[(n % ids.len() as u64) as usize].as_bytes()[..]);
                let dedup_key = key_ends.get(i).map(|&end| {
                    let key = &keys[key_start..end];
                    key_start = end;
                    key
                });
                SendEntryRef {
                    body,
                    delay_ms: None,
                    dedup_key,
                    attributes: AttributesRef::default(),
                    group,
                }
            })
            .collect()
    }
}

impl Queues {
    /// The queue of connection `n` and its broker.
    fn of(&self, n: usize) -> (Queue, &str) {
        let (name, addr) = &self.each[n % self.each.len()];
        let q = Queue {
            name: name.clone(),
            visibility: self.visibility,
            batch_max: self.batch_max,
            groups: self.groups,
            fifo: self.fifo,
            dedup_keys: self.dedup_keys,
        };
        (q, addr)
    }
}

/// For each of `addrs`, a queue name `<base>_<j>` that the sharded client
/// places on it (the first `j` that does).
fn names_per_broker(base: &str, addrs: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<Option<String>> = vec![None; addrs.len()];
    let mut j = 0u32;
    while out.iter().any(Option::is_none) {
        let name = format!("{base}_{j}");
        let k = sluice_client::sharded::rendezvous(addrs, &name);
        out[k].get_or_insert(name);
        j += 1;
    }
    out.into_iter()
        .zip(addrs)
        .map(|(name, addr)| (name.unwrap_or_default(), addr.clone()))
        .collect()
}

/// A sluice server under test.
pub struct SluiceTarget {
    url: TargetUrl,
    token: Option<String>,
    /// The set-up client (every broker), kept for the tear-down.
    admin: Option<ShardedClient>,
    queue: Option<Queues>,
    server: Vec<Setting>,
    read_spin: Duration,
    tls: Option<TlsConfig>,
}

impl std::fmt::Debug for SluiceTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceTarget")
            .field("url", &self.url)
            .finish()
    }
}

impl SluiceTarget {
    /// A target for `url`, saying HELLO with `token` when given.
    pub fn new(url: TargetUrl, token: Option<String>) -> Self {
        Self {
            url,
            token,
            admin: None,
            queue: None,
            server: Vec::new(),
            read_spin: Duration::ZERO,
            tls: None,
        }
    }

    /// Connects with TLS (`--sluice-tls-ca`).
    #[must_use]
    pub fn tls(mut self, tls: Option<TlsConfig>) -> Self {
        self.tls = tls;
        self
    }

    /// The clients' read spin (`ClientConfig::read_spin`); zero, the
    /// client's default, unless `--read-spin` sets it.
    #[must_use]
    pub fn read_spin(mut self, spin: Duration) -> Self {
        self.read_spin = spin;
        self
    }

    /// Every broker's address, comma-separated (the sharded client's).
    fn addr(&self) -> String {
        self.url.addrs().join(",")
    }

    fn config(&self, addr: &str) -> ClientConfig {
        let mut config = ClientConfig::new(addr)
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_request_timeout(REPLY_TIMEOUT)
            .with_reconnect_delays(RECONNECT_DELAY_INITIAL, RECONNECT_DELAY_MAX)
            .with_read_spin(self.read_spin);
        if let Some(token) = &self.token {
            config = config.with_auth_token(Bytes::copy_from_slice(token.as_bytes()));
        }
        if let Some(tls) = &self.tls {
            config = config.with_tls(tls.clone());
        }
        config
    }

    fn admin(&mut self) -> Result<ShardedClient, AdapterError> {
        if let Some(c) = &self.admin {
            return Ok(c.clone());
        }
        let addr = self.addr();
        let c = ShardedClient::connect(self.config(&addr)).map_err(|e| adapter_error(&addr, e))?;
        self.admin = Some(c.clone());
        Ok(c)
    }
}

/// The visibility timeout in whole milliseconds (sluice's unit), rounded
/// up so a lease never ends before the one asked for.
fn visibility_ms(visibility: Duration) -> Result<u32, AdapterError> {
    let ms = visibility.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).ok().filter(|&ms| ms > 0).ok_or_else(|| {
        AdapterError::Unsupported(format!(
            "sluice: a visibility timeout of {} cannot be set",
            format_duration(visibility)
        ))
    })
}

impl Target for SluiceTarget {
    fn kind(&self) -> &'static str {
        PEER
    }

    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError> {
        let visibility_ms = visibility_ms(spec.visibility_timeout)?;
        let batch_max = u16::try_from(spec.batch_max).map_err(|_| {
            AdapterError::Unsupported(format!("sluice: a batch of {} entries", spec.batch_max))
        })?;
        let addrs = self.url.addrs();
        let admin = self.admin()?;
        let each = if addrs.len() == 1 {
            vec![(spec.name.clone(), addrs[0].clone())]
        } else {
            names_per_broker(&spec.name, &addrs)
        };
        for (name, addr) in &each {
            let mut options =
                QueueOptions::new().visibility_timeout(Duration::from_millis(visibility_ms.into()));
            if spec.fifo {
                options = options.fifo();
            }
            admin
                .create_queue(name, &options)
                .map_err(|e| adapter_error(addr, e))?;
        }
        let mut server = Vec::new();
        let stats = admin
            .server_stats()
            .map_err(|e| adapter_error(&self.addr(), e))?;
        if let Some(down) = stats.failed.first() {
            return Err(adapter_error(&down.addr, down.error.clone()));
        }
        for (addr, stats) in &stats.value {
            let memory = stats
                .counter("memory_max_bytes")
                .map(|b| format!(", memory max {} MiB", b >> 20))
                .unwrap_or_default();
            let tls = if self.tls.is_some() { ", TLS" } else { "" };
            server.push(Setting::new(
                "server",
                format!(
                    "{addr}: {}, {} shard(s), io {}{memory}{tls}",
                    stats.server_version, stats.shards, stats.io_backend
                ),
            ));
        }
        self.server = server;
        self.queue = Some(Queues {
            each,
            visibility: Duration::from_millis(visibility_ms.into()),
            batch_max: batch_max.into(),
            groups: spec.groups,
            fifo: spec.fifo,
            dedup_keys: spec.dedup_keys,
        });
        Ok(())
    }

    fn connect(&self, role: Role) -> Result<Box<dyn Adapter>, AdapterError> {
        let queues = super::set_up(self.queue.as_ref(), PEER)?;
        let n = match role {
            Role::Producer(n) | Role::Consumer(n) => n,
            Role::Backlog => 0,
        };
        let (queue, addr) = queues.of(n);
        let client = Client::connect(self.config(addr)).map_err(|e| adapter_error(addr, e))?;
        let grouped = match role {
            // The noisy tenant: its own group on a fair queue.
            Role::Backlog => Grouped::noisy(queue.groups),
            _ => Grouped::new(queue.groups, queue.fifo || queue.dedup_keys, n),
        };
        Ok(Box::new(SluiceAdapter {
            client,
            addr: addr.to_owned(),
            receipts: Vec::with_capacity(queue.batch_max),
            in_flight: VecDeque::new(),
            grouped,
            queue,
        }))
    }

    fn settings(&self) -> Vec<Setting> {
        let mut s = self.server.clone();
        if let Some(q) = &self.queue {
            let names: Vec<&str> = q.each.iter().map(|(n, _)| n.as_str()).collect();
            s.push(Setting::new(
                "queue",
                format!(
                    "{} (visibility timeout {} as the queue's and on every receive){}",
                    names.join(", "),
                    format_duration(q.visibility),
                    if names.len() > 1 {
                        "; one per broker, connection n on queue n mod brokers"
                    } else {
                        ""
                    }
                ),
            ));
            s.push(Setting::new(
                "client",
                "sluice-client blocking Client, one per connection, read by its own thread; \
                 requests pipelined when the window is above 1",
            ));
            s.push(super::read_spin_setting(self.read_spin));
            s.push(Setting::new("send", "one SEND request per batch"));
            if q.dedup_keys && !q.fifo {
                s.push(Setting::new(
                    "dedup keys",
                    "each message with a dedup key of its own (--dedup-keys)",
                ));
            }
            if q.groups > 0 {
                s.push(Setting::new(
                    "groups",
                    format!(
                        "{} message groups taken in turn by each producer's sends{}",
                        q.groups,
                        if q.fifo {
                            "; a FIFO queue, each message with a dedup key of its own"
                        } else {
                            " (a fair queue)"
                        }
                    ),
                ));
            }
            s.push(Setting::new(
                "receive",
                "one RECEIVE per batch, max <batch>, long-poll wait 100 ms",
            ));
            s.push(Setting::new(
                "delete",
                "one DELETE request with every receipt of the batch",
            ));
            s.push(Setting::new(
                "expired leases",
                "the broker's timer makes them visible again; the consumers do nothing",
            ));
        }
        s
    }

    fn teardown(&mut self) -> Result<(), AdapterError> {
        if let Some(q) = self.queue.take() {
            let admin = self.admin()?;
            for (name, addr) in &q.each {
                admin
                    .delete_queue(name)
                    .map_err(|e| adapter_error(addr, e))?;
            }
        }
        Ok(())
    }
}

/// A request started and not yet finished.
enum InFlight {
    Send(PendingReply<Vec<Result<SendOutcome, Error>>>, usize),
    Receive(PendingReply<ReceivedBatch>),
    Delete(PendingReply<Vec<Result<(), Error>>>, usize),
}

/// One sluice connection of a pass.
struct SluiceAdapter {
    client: Client,
    addr: String,
    queue: Queue,
    receipts: Vec<sluice_client::Receipt>,
    in_flight: VecDeque<InFlight>,
    /// The message groups of a producer's sends, if any.
    grouped: Option<Grouped>,
}

impl SluiceAdapter {
    fn err(&self, e: Error) -> AdapterError {
        adapter_error(&self.addr, e)
    }

    /// The receipts of a delete, sluice's own.
    fn fill_receipts(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        self.receipts.clear();
        for r in receipts {
            match r {
                Receipt::Sluice(r) => self.receipts.push(*r),
                _ => {
                    return Err(AdapterError::Unsupported(
                        "sluice: a receipt from another adapter".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn receive_options(&self, max: usize, wait: Duration) -> ReceiveOptions {
        ReceiveOptions::new(max.clamp(1, self.queue.batch_max.max(1)))
            .visibility_timeout(self.queue.visibility)
            .wait(wait)
    }
}

/// Checks a SEND's results: one per entry, none refused (the runner counts
/// every entry of an acknowledged batch as sent).
fn check_sent(results: Vec<Result<SendOutcome, Error>>, n: usize) -> Result<(), AdapterError> {
    if results.len() != n {
        return Err(AdapterError::Protocol {
            peer: PEER,
            detail: format!("{} results for a SEND of {n} entries", results.len()),
        });
    }
    for (i, r) in results.into_iter().enumerate() {
        if let Err(e) = r {
            return Err(AdapterError::Server {
                peer: PEER,
                message: format!("SEND entry {i}: {e}"),
            });
        }
    }
    Ok(())
}

/// Reads a DELETE's results into `rejected`.
fn check_deleted(
    results: Vec<Result<(), Error>>,
    n: usize,
    rejected: &mut Vec<usize>,
) -> Result<(), AdapterError> {
    if results.len() != n {
        return Err(AdapterError::Protocol {
            peer: PEER,
            detail: format!("{} results for a DELETE of {n} receipts", results.len()),
        });
    }
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(()) => {}
            // The lease ran out and the message went to someone else
            // (who may have deleted it since): not deleted by us.
            Err(Error::StaleReceipt(_) | Error::Gone(_)) => rejected.push(i),
            Err(e) => {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: format!("DELETE entry {i}: {e}"),
                });
            }
        }
    }
    Ok(())
}

impl Adapter for SluiceAdapter {
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        if bodies.is_empty() {
            return Ok(());
        }
        let results = match self.grouped.as_mut() {
            Some(g) => {
                let entries = g.entries(bodies);
                self.client.send_views(&self.queue.name, &entries)
            }
            None => self.client.send_bodies(&self.queue.name, bodies),
        }
        .map_err(|e| self.err(e))?;
        check_sent(results, bodies.len())
    }

    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let options = self.receive_options(max, wait);
        let messages = self
            .client
            .receive_batch(&self.queue.name, options)
            .map_err(|e| self.err(e))?;
        for m in messages.iter() {
            on_message(m.body, Receipt::Sluice(m.receipt));
        }
        Ok(messages.len())
    }

    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError> {
        if receipts.is_empty() {
            return Ok(());
        }
        self.fill_receipts(receipts)?;
        let results = self
            .client
            .delete_batch(&self.queue.name, &self.receipts)
            .map_err(|e| self.err(e))?;
        check_deleted(results, receipts.len(), rejected)
    }

    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        let pending = match self.grouped.as_mut() {
            Some(g) => {
                let entries = g.entries(bodies);
                self.client.start_send_views(&self.queue.name, &entries)
            }
            None => self.client.start_send_bodies(&self.queue.name, bodies),
        }
        .map_err(|e| self.err(e))?;
        self.in_flight
            .push_back(InFlight::Send(pending, bodies.len()));
        Ok(())
    }

    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError> {
        let options = self.receive_options(max, wait);
        let pending = self
            .client
            .start_receive_batch(&self.queue.name, options)
            .map_err(|e| self.err(e))?;
        self.in_flight.push_back(InFlight::Receive(pending));
        Ok(())
    }

    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        self.fill_receipts(receipts)?;
        let pending = self
            .client
            .start_delete_batch(&self.queue.name, &self.receipts)
            .map_err(|e| self.err(e))?;
        self.in_flight
            .push_back(InFlight::Delete(pending, receipts.len()));
        Ok(())
    }

    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError> {
        match self.in_flight.pop_front() {
            None => Err(super::nothing_started(PEER)),
            Some(InFlight::Send(pending, n)) => {
                let results = pending.wait().map_err(|e| self.err(e))?;
                check_sent(results, n)?;
                Ok(Finished::Sent)
            }
            Some(InFlight::Receive(pending)) => {
                let messages = pending.wait().map_err(|e| self.err(e))?;
                for m in messages.iter() {
                    on_message(m.body, Receipt::Sluice(m.receipt));
                }
                Ok(Finished::Received(messages.len()))
            }
            Some(InFlight::Delete(pending, n)) => {
                let results = pending.wait().map_err(|e| self.err(e))?;
                check_deleted(results, n, rejected)?;
                Ok(Finished::Deleted)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_sends_take_the_groups_in_turn_and_fifo_ones_a_key_each() {
        assert!(Grouped::new(0, false, 0).is_none());
        let mut g = Grouped::new(3, true, 7).unwrap();
        let entries = g.entries(&[b"a", b"b", b"c", b"d"]);
        let groups: Vec<&[u8]> = entries.iter().map(|e| e.group.unwrap()).collect();
        assert_eq!(groups, [&b"g0"[..], b"g1", b"g2", b"g0"]);
        let keys: Vec<&[u8]> = entries.iter().map(|e| e.dedup_key.unwrap()).collect();
        assert_eq!(keys, [&b"7-0"[..], b"7-1", b"7-2", b"7-3"]);
        assert!(entries.iter().all(|e| e.delay_ms.is_none()));
        // The counter goes on across batches, through every digit count.
        g.next = 9;
        let next = g.entries(&[b"e", b"f"]);
        let keys: Vec<&[u8]> = next.iter().map(|e| e.dedup_key.unwrap()).collect();
        assert_eq!(keys, [&b"7-9"[..], b"7-10"]);
        for n in [0, 7, 10, 99, 100, 12_345, u64::MAX] {
            let mut buf = b"x".to_vec();
            push_u64(&mut buf, n);
            assert_eq!(buf, format!("x{n}").into_bytes());
        }
        let mut fair = Grouped::new(2, false, 0).unwrap();
        assert!(fair.entries(&[b"x"])[0].dedup_key.is_none());
        let mut keyed = Grouped::new(0, true, 1).unwrap();
        let keyed = keyed.entries(&[b"x"]);
        assert!(keyed[0].group.is_none() && keyed[0].dedup_key.is_some());
    }

    #[test]
    fn visibility_rounds_up_to_whole_milliseconds() {
        assert_eq!(visibility_ms(Duration::from_secs(1)).unwrap(), 1_000);
        assert_eq!(visibility_ms(Duration::from_micros(1_500)).unwrap(), 2);
        assert_eq!(visibility_ms(Duration::from_nanos(1)).unwrap(), 1);
        assert!(visibility_ms(Duration::ZERO).is_err());
    }

    #[test]
    fn client_errors_map_to_adapter_errors() {
        let e = adapter_error("h:1", Error::Disconnected("x".into()));
        assert!(matches!(e, AdapterError::Closed { peer: "sluice" }));
        let e = adapter_error("h:1", Error::QueueNotFound("q".into()));
        match e {
            AdapterError::Server { message, .. } => assert!(message.contains("QueueNotFound")),
            other => panic!("{other:?}"),
        }
    }
}
