//! Queues spread over several brokers: [`ShardedClient`] (blocking) and
//! [`AsyncShardedClient`] (tokio), with the operations of the single
//! clients.
//!
//! Each queue lives on one broker. The client places a queue by
//! **rendezvous hashing** of its hash key: for every broker it hashes the
//! broker's address with the key and picks the broker whose hash is
//! highest ([`rendezvous`]). The hash key is the name's `{tag}` when it has
//! one and the whole name otherwise ([`sluice_protocol::name::hash_key`]),
//! so `{orders}` and `{orders}.dlq` share a broker. Adding a broker moves
//! only the queues that now hash to it (about `1/n` of them); removing one
//! moves only its own. No broker knows of the others: placement is the
//! clients', so every client must be given the same list of addresses
//! (the order does not matter).
//!
//! - An operation on a queue goes to its broker alone. A broker that is
//!   down fails only its own queues (with [`Error::Connect`]); each
//!   broker has its own connection and reconnects on its own.
//! - Dead-lettering and redrive happen inside one broker, so a queue whose
//!   redrive policy names a dead-letter queue placed on another broker is
//!   refused before anything is sent, with an error saying to give both
//!   names the same tag.
//! - [`list_queues`](ShardedClient::list_queues),
//!   [`server_stats`](ShardedClient::server_stats) and
//!   [`ping`](ShardedClient::ping) ask every broker and merge what they
//!   answer; a broker that does not answer is reported in
//!   [`Merged::failed`] rather than failing the whole call.
//!
//! ```no_run
//! # #[cfg(feature = "blocking")] {
//! use sluice_client::sharded::ShardedClient;
//! use sluice_client::{ClientConfig, QueueOptions, RedrivePolicy};
//!
//! // One address per broker, comma-separated (the CLI's `--addr a,b,c`).
//! let client = ShardedClient::connect(ClientConfig::new("10.0.0.1:7171,10.0.0.2:7171"))?;
//! client.create_queue("{orders}.dlq", &QueueOptions::new())?;
//! let options = QueueOptions::new().redrive(RedrivePolicy::new("{orders}.dlq", 5));
//! client.create_queue("{orders}", &options)?;
//! client.send("{orders}", "order 42")?;
//! assert_eq!(client.broker_of("{orders}"), client.broker_of("{orders}.dlq"));
//! # }
//! # Ok::<(), sluice_client::Error>(())
//! ```

use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use siphasher::sip::SipHasher13;
use sluice_protocol::name::hash_key;
use sluice_protocol::{PeekedMessage, Receipt, ReceivedMessage, SendOutcome, ServerStatsReply};

#[cfg(feature = "async")]
use crate::AsyncClient;
#[cfg(feature = "blocking")]
use crate::Client;
use crate::attributes::{QueueInfo, QueueOptions, Setting};
use crate::config::ClientConfig;
use crate::error::{Error, Result};
use crate::message::SendEntry;
use crate::ops::{ClockReading, ReceiveOptions, RedriveOutcome};

/// The broker `key` goes to among `addrs`: the index of the address whose
/// hash with `key` is highest (SipHash-1-3, zero key, over the address's
/// bytes, a `0xFF` byte, and the key's bytes; the lower index wins a tie).
///
/// ```
/// use sluice_client::sharded::rendezvous;
/// let three = ["a:1", "b:1", "c:1"];
/// let four = ["a:1", "b:1", "c:1", "d:1"];
/// let (before, after) = (rendezvous(&three, "orders"), rendezvous(&four, "orders"));
/// // A fourth broker takes a key or leaves it where it was.
/// assert!(after == before || after == 3);
/// ```
///
/// # Panics
/// When `addrs` is empty.
#[must_use]
pub fn rendezvous<S: AsRef<str>>(addrs: &[S], key: &str) -> usize {
    assert!(!addrs.is_empty(), "rendezvous over no broker");
    pick(addrs.iter().map(AsRef::as_ref), key)
}

/// The index of the highest-scoring address (0 for none).
fn pick<'a>(addrs: impl Iterator<Item = &'a str>, key: &str) -> usize {
    let mut best = (0, 0u64);
    for (i, addr) in addrs.enumerate() {
        let s = score(addr, key);
        if i == 0 || s > best.1 {
            best = (i, s);
        }
    }
    best.0
}

fn score(addr: &str, key: &str) -> u64 {
    let mut h = SipHasher13::new();
    h.write(addr.as_bytes());
    h.write(&[0xFF]);
    h.write(key.as_bytes());
    h.finish()
}

/// The addresses in a comma-separated list, each `HOST:PORT` or
/// `sluice://HOST[:PORT]` and given back as `HOST:PORT`, trimmed, empty
/// ones skipped.
///
/// # Errors
/// `InvalidArgument` when the list names no address, one twice, or
/// something that is not an address.
pub fn parse_addrs(list: &str) -> Result<Vec<String>> {
    let addrs: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| {
            sluice_protocol::units::parse_address(a)
                .map_err(|e| Error::InvalidArgument(format!("broker address: {e}")))
        })
        .collect::<Result<_>>()?;
    if addrs.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "no broker address in {list:?}"
        )));
    }
    for (i, a) in addrs.iter().enumerate() {
        if addrs[..i].contains(a) {
            return Err(Error::InvalidArgument(format!(
                "broker address {a} is listed twice"
            )));
        }
    }
    Ok(addrs)
}

/// A broker that failed a request sent to every broker.
#[derive(Debug, Clone)]
pub struct BrokerFailure {
    /// Its address.
    pub addr: String,
    /// What went wrong.
    pub error: Error,
}

/// What the brokers answered to a request sent to each, merged, and those
/// that failed.
#[derive(Debug, Clone)]
pub struct Merged<T> {
    /// The merged answers of the brokers that answered.
    pub value: T,
    /// The brokers that did not answer.
    pub failed: Vec<BrokerFailure>,
}

/// Queues over several brokers, one client per broker. See the module
/// docs; [`ShardedClient`] and [`AsyncShardedClient`] are the two kinds.
/// Cheap to clone: clones share the brokers' connections.
#[derive(Debug)]
pub struct Sharded<C> {
    brokers: Arc<[(String, C)]>,
}

impl<C> Clone for Sharded<C> {
    fn clone(&self) -> Self {
        Sharded {
            brokers: Arc::clone(&self.brokers),
        }
    }
}

/// The blocking sharded client.
#[cfg(feature = "blocking")]
pub type ShardedClient = Sharded<Client>;
/// The async (tokio) sharded client.
#[cfg(feature = "async")]
pub type AsyncShardedClient = Sharded<AsyncClient>;

impl<C> Sharded<C> {
    fn build(config: &ClientConfig, client: impl Fn(ClientConfig) -> C) -> Result<Sharded<C>> {
        config.check_addr()?;
        let addrs = parse_addrs(config.addr())?;
        let brokers = addrs
            .into_iter()
            .map(|addr| {
                let c = client(config.clone().with_addr(addr.clone()));
                (addr, c)
            })
            .collect();
        Ok(Sharded { brokers })
    }

    /// The brokers' addresses, in the order given.
    pub fn addrs(&self) -> impl Iterator<Item = &str> {
        self.brokers.iter().map(|(a, _)| a.as_str())
    }

    /// The index (among [`addrs`](Self::addrs)) of the broker that holds
    /// `queue`.
    #[must_use]
    pub fn broker_of(&self, queue: &str) -> usize {
        pick(self.addrs(), hash_key(queue))
    }

    /// The address of the broker that holds `queue`.
    #[must_use]
    pub fn addr_of(&self, queue: &str) -> &str {
        &self.brokers[self.broker_of(queue)].0
    }

    /// The single-broker client of the broker that holds `queue`, for what
    /// this client does not cover (pipelined `start_*` calls, raw requests).
    #[must_use]
    pub fn client_for(&self, queue: &str) -> &C {
        &self.brokers[self.broker_of(queue)].1
    }

    /// Every broker's address and client.
    pub fn brokers(&self) -> impl Iterator<Item = (&str, &C)> {
        self.brokers.iter().map(|(a, c)| (a.as_str(), c))
    }

    /// Refuses a redrive policy whose dead-letter queue is placed on
    /// another broker than `queue`.
    fn check_redrive(&self, queue: &str, options: &QueueOptions) -> Result<()> {
        let Setting::Set(redrive) = &options.update().redrive else {
            return Ok(());
        };
        let dlq = redrive.dead_letter_queue.as_str();
        let (here, there) = (self.broker_of(queue), self.broker_of(dlq));
        if here == there {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "queue {queue} is placed on broker {} but its dead-letter queue {dlq} on {}: \
             dead-lettering never crosses brokers; give both names the same tag, \
             e.g. {{{tag}}} and {{{tag}}}.dlq",
            self.brokers[here].0,
            self.brokers[there].0,
            tag = hash_key(queue),
        )))
    }
}

/// Collects per-broker results into a [`Merged`]; fails only when every
/// broker failed (with the first broker's error).
fn merge<T, V>(
    results: Vec<(String, Result<T>)>,
    init: V,
    mut fold: impl FnMut(&mut V, &str, T),
) -> Result<Merged<V>> {
    let mut value = init;
    let mut failed = Vec::new();
    let answered = results.iter().filter(|(_, r)| r.is_ok()).count();
    for (addr, r) in results {
        match r {
            Ok(t) => fold(&mut value, &addr, t),
            Err(error) => failed.push(BrokerFailure { addr, error }),
        }
    }
    if answered == 0 {
        if let Some(first) = failed.into_iter().next() {
            return Err(first.error);
        }
        return Ok(Merged {
            value,
            failed: Vec::new(),
        });
    }
    Ok(Merged { value, failed })
}

/// The operations, written once for both kinds: `$($aw)*` is `.await` for
/// the async client and nothing for the blocking one.
macro_rules! sharded_ops {
    ($client:ty, $($async_:ident)?, [$($aw:tt)*]) => {
        impl Sharded<$client> {
            /// Checks every broker: the round-trip time of a PING to each.
            pub $($async_)? fn ping(&self) -> Vec<(String, Result<Duration>)> {
                let mut out = Vec::with_capacity(self.brokers.len());
                for (addr, c) in self.brokers.iter() {
                    out.push((addr.clone(), c.ping() $($aw)*));
                }
                out
            }

            /// Creates a queue on its broker (see the single client's
            /// `create_queue`).
            ///
            /// # Errors
            /// As the single client's, and `InvalidArgument` when the
            /// redrive policy names a dead-letter queue placed on another
            /// broker (give both names the same `{tag}`).
            pub $($async_)? fn create_queue(&self, queue: &str, options: &QueueOptions) -> Result<bool> {
                self.check_redrive(queue, options)?;
                self.client_for(queue).create_queue(queue, options) $($aw)*
            }

            /// Changes a queue's attributes on its broker.
            ///
            /// # Errors
            /// As [`create_queue`](Self::create_queue).
            pub $($async_)? fn set_queue(&self, queue: &str, options: &QueueOptions) -> Result<()> {
                self.check_redrive(queue, options)?;
                self.client_for(queue).set_queue(queue, options) $($aw)*
            }

            /// Deletes a queue and its messages.
            ///
            /// # Errors
            /// As the single client's; `Connect` when its broker is down.
            pub $($async_)? fn delete_queue(&self, queue: &str) -> Result<()> {
                self.client_for(queue).delete_queue(queue) $($aw)*
            }

            /// The names of the queues starting with `prefix` on every
            /// broker, sorted; brokers that did not answer are in
            /// [`Merged::failed`].
            ///
            /// # Errors
            /// Only when no broker answered.
            pub $($async_)? fn list_queues(&self, prefix: &str) -> Result<Merged<Vec<String>>> {
                let mut results = Vec::with_capacity(self.brokers.len());
                for (addr, c) in self.brokers.iter() {
                    results.push((addr.clone(), c.list_queues(prefix) $($aw)*));
                }
                let mut merged = merge(results, Vec::new(), |all, _, names| all.extend(names))?;
                merged.value.sort_unstable();
                Ok(merged)
            }

            /// A queue's attributes and counters, from its broker.
            ///
            /// # Errors
            /// `QueueNotFound`; `Connect` when its broker is down.
            pub $($async_)? fn queue_info(&self, queue: &str) -> Result<QueueInfo> {
                self.client_for(queue).queue_info(queue) $($aw)*
            }

            /// Removes every message of a queue; returns how many.
            ///
            /// # Errors
            /// `QueueNotFound`; `Connect` when its broker is down.
            pub $($async_)? fn purge_queue(&self, queue: &str) -> Result<usize> {
                self.client_for(queue).purge_queue(queue) $($aw)*
            }

            /// Sends one message with just a body.
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn send(&self, queue: &str, body: impl Into<Bytes>) -> Result<SendOutcome> {
                self.client_for(queue).send(queue, body) $($aw)*
            }

            /// Sends one message with options.
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn send_entry(&self, queue: &str, entry: SendEntry) -> Result<SendOutcome> {
                self.client_for(queue).send_entry(queue, entry) $($aw)*
            }

            /// Sends up to 1,024 messages in one request.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn send_batch(&self, queue: &str, entries: &[SendEntry]) -> Result<Vec<Result<SendOutcome>>> {
                self.client_for(queue).send_batch(queue, entries) $($aw)*
            }

            /// Receives (leases) messages of a queue from its broker.
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn receive(&self, queue: &str, options: ReceiveOptions) -> Result<Vec<ReceivedMessage>> {
                self.client_for(queue).receive(queue, options) $($aw)*
            }

            /// Deletes one delivered message.
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn delete(&self, queue: &str, receipt: Receipt) -> Result<()> {
                self.client_for(queue).delete(queue, receipt) $($aw)*
            }

            /// Deletes up to 1,024 delivered messages.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn delete_batch(&self, queue: &str, receipts: &[Receipt]) -> Result<Vec<Result<()>>> {
                self.client_for(queue).delete_batch(queue, receipts) $($aw)*
            }

            /// Ends a lease `timeout` from now; zero releases the message.
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn change_visibility(&self, queue: &str, receipt: Receipt, timeout: Duration) -> Result<()> {
                self.client_for(queue).change_visibility(queue, receipt, timeout) $($aw)*
            }

            /// Changes up to 1,024 leases.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn change_visibility_batch(&self, queue: &str, changes: &[(Receipt, Duration)]) -> Result<Vec<Result<()>>> {
                self.client_for(queue).change_visibility_batch(queue, changes) $($aw)*
            }

            /// Moves messages of a dead-letter queue back to their queues
            /// (on the same broker: see the module docs).
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn redrive(&self, queue: &str, max_messages: usize) -> Result<RedriveOutcome> {
                self.client_for(queue).redrive(queue, max_messages) $($aw)*
            }

            /// Moves messages of `queue` to `to`, which must be on the
            /// same broker (else `InvalidArgument`: a redrive never
            /// crosses brokers).
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn redrive_to(&self, queue: &str, to: &str, max_messages: usize) -> Result<RedriveOutcome> {
                if self.broker_of(queue) != self.broker_of(to) {
                    return Err(Error::InvalidArgument(format!(
                        "{queue} and {to} live on different brokers: a redrive moves messages within one broker"
                    )));
                }
                self.client_for(queue).redrive_to(queue, to, max_messages) $($aw)*
            }

            /// Reads visible messages without leasing them.
            ///
            /// # Errors
            /// As the single client's.
            pub $($async_)? fn peek(&self, queue: &str, max_messages: usize) -> Result<Vec<PeekedMessage>> {
                self.client_for(queue).peek(queue, max_messages) $($aw)*
            }

            /// Every broker's `SERVER_STATS`, by address; brokers that did
            /// not answer are in [`Merged::failed`].
            ///
            /// # Errors
            /// Only when no broker answered.
            pub $($async_)? fn server_stats(&self) -> Result<Merged<Vec<(String, ServerStatsReply)>>> {
                let mut results = Vec::with_capacity(self.brokers.len());
                for (addr, c) in self.brokers.iter() {
                    results.push((addr.clone(), c.server_stats() $($aw)*));
                }
                merge(results, Vec::new(), |all, addr, s| all.push((addr.to_owned(), s)))
            }

            /// Moves every broker's manual clock (`--clock manual`) by `by`,
            /// as the single client's `advance_clock` does: each broker's
            /// reading; brokers that refused or did not answer are in
            /// [`Merged::failed`].
            ///
            /// # Errors
            /// Only when no broker answered (for instance `Unsupported`
            /// from brokers on the real clock).
            pub $($async_)? fn advance_clock(&self, by: Duration) -> Result<Merged<Vec<(String, ClockReading)>>> {
                let mut results = Vec::with_capacity(self.brokers.len());
                for (addr, c) in self.brokers.iter() {
                    results.push((addr.clone(), c.advance_clock(by) $($aw)*));
                }
                merge(results, Vec::new(), |all, addr, r| all.push((addr.to_owned(), r)))
            }

            /// The attributes and counters of every queue starting with
            /// `prefix`, from every broker, sorted by name; brokers that did
            /// not answer (or lost a queue between listing and asking) are
            /// in [`Merged::failed`].
            ///
            /// # Errors
            /// Only when no broker answered.
            pub $($async_)? fn queue_stats(&self, prefix: &str) -> Result<Merged<Vec<QueueInfo>>> {
                let listed = self.list_queues(prefix) $($aw)*?;
                let mut failed = listed.failed;
                let mut infos = Vec::with_capacity(listed.value.len());
                for name in &listed.value {
                    match self.queue_info(name) $($aw)* {
                        Ok(info) => infos.push(info),
                        Err(error) => failed.push(BrokerFailure {
                            addr: self.addr_of(name).to_owned(),
                            error,
                        }),
                    }
                }
                Ok(Merged { value: infos, failed })
            }
        }
    };
}

#[cfg(feature = "blocking")]
sharded_ops!(Client, , []);
#[cfg(feature = "async")]
sharded_ops!(AsyncClient, async, [.await]);

#[cfg(feature = "blocking")]
impl ShardedClient {
    /// A handle on the queue `name`, on the broker it is placed on (see
    /// [`Client::queue`]). Its `create` and `update` go to that broker
    /// without the check of [`create_queue`](ShardedClient::create_queue)
    /// that a dead-letter queue shares it.
    #[must_use]
    pub fn queue(&self, name: impl Into<Arc<str>>) -> crate::Queue {
        let name = name.into();
        self.client_for(&name).queue(name)
    }

    /// A client for the brokers `config.addr()` lists, comma-separated
    /// (`"a:7171,b:7171,c:7171"`); every other setting applies to each
    /// broker. It connects to each now; a broker that cannot be reached is
    /// logged and tried again by the first request for one of its queues.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty list or an address listed twice; the
    /// first broker's error when none can be reached.
    pub fn connect(config: ClientConfig) -> Result<ShardedClient> {
        let client = Sharded::build(&config, Client::unconnected)?;
        let pings = client.ping();
        connected(&client, pings)?;
        Ok(client)
    }
}

#[cfg(feature = "async")]
impl AsyncShardedClient {
    /// A handle on the queue `name`, on the broker it is placed on (see
    /// [`AsyncClient::queue`]); as [`ShardedClient::queue`].
    #[must_use]
    pub fn queue(&self, name: impl Into<Arc<str>>) -> crate::AsyncQueue {
        let name = name.into();
        self.client_for(&name).queue(name)
    }

    /// As [`ShardedClient::connect`], for the async client.
    ///
    /// # Errors
    /// As [`ShardedClient::connect`].
    pub async fn connect(config: ClientConfig) -> Result<AsyncShardedClient> {
        let client = Sharded::build(&config, AsyncClient::unconnected)?;
        let pings = client.ping().await;
        connected(&client, pings)?;
        Ok(client)
    }
}

/// Logs the brokers that could not be reached; an error when none could.
fn connected<C>(client: &Sharded<C>, pings: Vec<(String, Result<Duration>)>) -> Result<()> {
    let mut first = None;
    let mut reached = 0;
    for (addr, r) in pings {
        match r {
            Ok(_) => reached += 1,
            Err(error) => {
                tracing::warn!(%addr, %error, "sluice sharded client: broker unreachable; its queues fail until it is back");
                first.get_or_insert(error);
            }
        }
    }
    match first {
        Some(e) if reached == 0 => Err(e),
        _ => {
            tracing::debug!(
                brokers = client.brokers.len(),
                reached,
                "sluice sharded client connected"
            );
            Ok(())
        }
    }
}

#[cfg(all(test, feature = "blocking"))]
mod tests {
    use super::*;

    #[test]
    fn placement_spreads_keys_and_a_new_broker_takes_only_its_share() {
        let three = ["10.0.0.1:7171", "10.0.0.2:7171", "10.0.0.3:7171"];
        let four = [
            "10.0.0.1:7171",
            "10.0.0.2:7171",
            "10.0.0.3:7171",
            "10.0.0.4:7171",
        ];
        let mut counts = [0usize; 3];
        let mut moved = 0;
        for i in 0..3000 {
            let key = format!("queue-{i}");
            let before = rendezvous(&three, &key);
            counts[before] += 1;
            let after = rendezvous(&four, &key);
            if after != before {
                assert_eq!(after, 3, "{key} moved between old brokers");
                moved += 1;
            }
        }
        for c in counts {
            assert!((800..=1200).contains(&c), "{counts:?}");
        }
        assert!((600..=900).contains(&moved), "{moved}");
        // The order of the list does not matter.
        let shuffled = [three[2], three[0], three[1]];
        for i in 0..100 {
            let key = format!("q{i}");
            assert_eq!(
                three[rendezvous(&three, &key)],
                shuffled[rendezvous(&shuffled, &key)]
            );
        }
    }

    #[test]
    fn addresses_are_parsed_and_checked() {
        assert_eq!(parse_addrs(" a:1, b:2 ,,").unwrap(), ["a:1", "b:2"]);
        assert!(matches!(parse_addrs(" , "), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            parse_addrs("a:1,a:1"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_dead_letter_queue_on_another_broker_is_refused_before_sending() {
        let config = ClientConfig::new("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3");
        let client = Sharded::build(&config, Client::unconnected).unwrap();
        // Two untagged names on different brokers.
        let (a, b) = (0..)
            .map(|i| (format!("a{i}"), format!("a{i}.dlq")))
            .find(|(a, b)| client.broker_of(a) != client.broker_of(b))
            .unwrap();
        let update = QueueOptions::new().redrive(crate::RedrivePolicy::new(b.clone(), 3));
        let err = client.create_queue(&a, &update).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("same tag")),
            "{err}"
        );
        let err = client.set_queue(&a, &update).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
        assert_eq!(client.broker_of("{x}"), client.broker_of("{x}.dlq"));
    }
}
