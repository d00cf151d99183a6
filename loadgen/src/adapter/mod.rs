//! The adapter contract: one broker, the same semantics for each.
//!
//! A [`Target`] is one broker as the run sees it: it sets up a fresh queue
//! for a pass, hands out one [`Adapter`] (a connection bound to that queue)
//! per producer or consumer thread, describes its settings for the printed
//! configuration, and tears the queue down. An [`Adapter`] sends a batch,
//! receives a batch under the queue's visibility timeout, and deletes a
//! batch, each through its peer's batch or pipeline path. Every adapter is
//! blocking, one TCP connection with `TCP_NODELAY`. With one batch in flight
//! (`--window 1`, the default) the runner calls the blocking methods; with
//! more, it starts operations (`start_send`, `start_receive`,
//! `start_delete`) and finishes them in the order they started, each peer
//! pipelining them on its connection its own best way. The sluice adapter
//! is the same two traits over the native blocking client
//! (`sluice-client`); the peers' wire protocols are written by hand.

use std::fmt;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use sluice_protocol::units::parse_address;

pub mod beanstalkd;
pub mod nats;
pub mod redis;
pub mod sluice;
pub mod sqs;
mod wire;

/// How long a connection waits for a reply before giving up. Every wait the
/// adapters ask the broker for (long polls) is far shorter.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Something a broker or the network did wrong, as an adapter sees it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterError {
    /// The TCP connection could not be made.
    #[error("{peer}: cannot connect to {addr}: {source}")]
    Connect {
        /// The broker kind.
        peer: &'static str,
        /// The address tried.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// Reading or writing failed (a timeout included).
    #[error("{peer}: {source}")]
    Io {
        /// The broker kind.
        peer: &'static str,
        /// The socket error.
        source: std::io::Error,
    },
    /// The broker closed the connection.
    #[error("{peer}: connection closed by the server")]
    Closed {
        /// The broker kind.
        peer: &'static str,
    },
    /// A reply the adapter does not understand.
    #[error("{peer}: unexpected reply: {detail}")]
    Protocol {
        /// The broker kind.
        peer: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The broker answered with an error.
    #[error("{peer}: server error: {message}")]
    Server {
        /// The broker kind.
        peer: &'static str,
        /// The broker's message.
        message: String,
    },
    /// The run asks for something this adapter cannot do.
    #[error("{0}")]
    Unsupported(String),
}

/// Names one delivery, for deleting it. Which variant an adapter uses is its
/// own business; the runner only hands receipts back to the adapter that
/// made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    /// Two integers: a Redis stream entry id `ms-seq`, a beanstalkd job id
    /// (second field 0).
    Ids(u64, u64),
    /// Opaque bytes: a NATS JetStream ack subject.
    Bytes(Box<[u8]>),
    /// A sluice receipt.
    Sluice(sluice_client::Receipt),
}

/// The queue a pass runs against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// A fresh name per pass, valid for every peer (`[A-Za-z0-9_]`).
    pub name: String,
    /// How long a received message stays invisible before it comes back.
    pub visibility_timeout: Duration,
    /// The largest batch the run sends, receives or deletes.
    pub batch_max: usize,
    /// Body size in bytes.
    pub body_bytes: usize,
    /// Producer connections that will be opened.
    pub producers: usize,
    /// Consumer connections that will be opened.
    pub consumers: usize,
    /// Message groups the sends take in turn (0: none).
    pub groups: usize,
    /// A FIFO queue (with `groups`).
    pub fifo: bool,
    /// Every message with a dedup key of its own.
    pub dedup_keys: bool,
    /// A noisy tenant's backlog is put in the queue first
    /// ([`Role::Backlog`]).
    pub backlog: bool,
}

/// Refuses a queue with message groups for a peer that has none.
pub(crate) fn refuse_groups(spec: &QueueSpec, peer: &str) -> Result<(), AdapterError> {
    if spec.groups > 0 || spec.fifo || spec.dedup_keys || spec.backlog {
        return Err(AdapterError::Unsupported(format!(
            "{peer}: message groups, dedup keys and a tenant's backlog (--groups, --fifo, \
             --dedup-keys, --backlog) are sluice's"
        )));
    }
    Ok(())
}

/// What a target's `setup` left for its connections, or, before `setup`
/// ran, the error every target gives for a `connect` that came too early.
pub(crate) fn set_up<'a, T>(state: Option<&'a T>, peer: &str) -> Result<&'a T, AdapterError> {
    state.ok_or_else(|| AdapterError::Unsupported(format!("{peer}: connect before setup")))
}

/// What a connection is for; adapters set up differently for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Producer number `n`.
    Producer(usize),
    /// Consumer number `n`.
    Consumer(usize),
    /// The connection that puts a noisy tenant's backlog in the queue
    /// before the pass (`--backlog`; sluice targets).
    Backlog,
}

/// One line of the printed configuration: `name = value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// What is set.
    pub name: String,
    /// Its value, in words.
    pub value: String,
}

impl Setting {
    /// A setting line.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// One broker under test, for one pass at a time.
pub trait Target: Send + Sync {
    /// The broker kind, as in the URL scheme.
    fn kind(&self) -> &'static str;
    /// Creates the pass's queue (stream, tube, consumer group...).
    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError>;
    /// Opens a connection bound to the queue set up last.
    fn connect(&self, role: Role) -> Result<Box<dyn Adapter>, AdapterError>;
    /// The settings in force: batch and pipeline paths, peer settings,
    /// server version. Valid after `setup`.
    fn settings(&self) -> Vec<Setting>;
    /// Removes the queue and whatever it still holds.
    fn teardown(&mut self) -> Result<(), AdapterError>;
}

/// What a started operation was, once [`Adapter::finish`] finished it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// A send: the broker acknowledged every body of the batch.
    Sent,
    /// A receive: this many messages went to `on_message`.
    Received(usize),
    /// A delete: the receipts refused went to `rejected`.
    Deleted,
}

/// One connection to a broker, bound to a queue. Used by one thread.
pub trait Adapter: Send {
    /// Sends the bodies as one batch (pipelined where the peer has no batch
    /// send) and returns when the broker has acknowledged every one.
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError>;

    /// Receives up to `max` messages under the queue's visibility timeout,
    /// waiting up to about `wait` for the first one, and calls `on_message`
    /// with each body and its receipt as it is read. Returns how many.
    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError>;

    /// Deletes the deliveries named by `receipts` as one batch and returns
    /// when the broker has answered. The indices of receipts the broker
    /// refused (a lease that expired and was taken by someone else) are
    /// pushed to `rejected`; those messages were not deleted.
    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError>;

    /// Starts sending `bodies` as one batch and returns without waiting for
    /// the broker (the bodies are copied or written before it returns).
    /// [`Adapter::finish`] waits for it. Several operations may be in flight
    /// on the connection; they finish in the order they were started.
    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError>;

    /// Starts a receive of up to `max` messages, waiting up to about `wait`
    /// for the first one. The runner asks for no wait while other
    /// operations are in flight: on some peers a waiting receive holds up
    /// the whole connection.
    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError>;

    /// Starts deleting the deliveries named by `receipts` as one batch.
    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError>;

    /// Waits for the oldest operation started and not yet finished. A
    /// receive hands each message to `on_message`; a delete pushes the
    /// indices (within its own batch) of the receipts the broker refused to
    /// `rejected`.
    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError>;
}

/// The error of a `finish` with nothing started.
pub(crate) fn nothing_started(peer: &str) -> AdapterError {
    AdapterError::Unsupported(format!("{peer}: finish with no operation in flight"))
}

/// How to reach a target beyond its URL: what `--token-file`,
/// `--read-spin`, `--sluice-tls-ca` and the AWS credentials give.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The auth token for peers that have one (sluice HELLO, Redis `AUTH`,
    /// NATS `auth_token`).
    pub token: Option<String>,
    /// The read spin of every data connection.
    pub read_spin: Duration,
    /// TLS for sluice targets.
    pub sluice_tls: Option<sluice_client::tls::TlsConfig>,
    /// The key SQS targets sign with (`None`: a placeholder, which a local
    /// server that checks no signature accepts).
    pub sqs: Option<sqs::SqsCredentials>,
    /// TLS for `sqss://` targets (HTTPS).
    pub sqs_tls: Option<sluice_client::tls::TlsConfig>,
}

/// The broker kinds a target URL can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// sluice's native protocol.
    Sluice,
    /// Redis 7 streams.
    Redis,
    /// beanstalkd.
    Beanstalkd,
    /// NATS JetStream.
    Nats,
    /// An SQS-compatible server (the AWS JSON protocol): sluice's SQS
    /// door, moto's server, SQS itself.
    Sqs,
    /// The same over HTTPS.
    Sqss,
}

impl Kind {
    /// The URL scheme.
    pub fn scheme(self) -> &'static str {
        match self {
            Kind::Sluice => "sluice",
            Kind::Redis => "redis",
            Kind::Beanstalkd => "beanstalkd",
            Kind::Nats => "nats",
            Kind::Sqs => "sqs",
            Kind::Sqss => "sqss",
        }
    }

    /// The port used when the URL gives none.
    pub fn default_port(self) -> u16 {
        match self {
            Kind::Sluice => 7171,
            Kind::Redis => 6379,
            Kind::Beanstalkd => 11300,
            Kind::Nats => 4222,
            // sluice's SQS door (and ElasticMQ).
            Kind::Sqs => 9324,
            // HTTPS's.
            Kind::Sqss => 443,
        }
    }
}

/// A `--target` URL that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid target {input:?}: {reason}")]
pub struct UrlError {
    /// The URL as given.
    pub input: String,
    /// Why it was refused.
    pub reason: String,
}

/// A parsed `--target`: `SCHEME://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// The broker kind.
    pub kind: Kind,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Further brokers (sluice only: `sluice://a:1,b:2,c:3` spreads queues
    /// over them), each host and port.
    pub more: Vec<(String, u16)>,
}

impl TargetUrl {
    /// Reads `sluice://HOST:PORT`, `redis://...`, `beanstalkd://...`,
    /// `nats://...`, `sqs://...` or `sqss://...` (HTTPS); the port defaults to the peer's usual one. sluice
    /// takes several brokers, comma-separated: `sluice://a:1,b:2,c:3`, and
    /// a bare `HOST:PORT` (or `a:1,b:2`) is sluice too, as for the server
    /// and the `sluice` command.
    pub fn parse(input: &str) -> Result<TargetUrl, UrlError> {
        let err = |reason: &str| UrlError {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        // The scheme is the first broker's; sluice's further brokers may
        // carry it too (`sluice://a:1,sluice://b:2`), as `sluice --addr`
        // and the client take them.
        let first = input.split(',').next().unwrap_or_default();
        let (scheme, rest) = match first.split_once("://") {
            Some((scheme, _)) => (scheme, &input[scheme.len() + "://".len()..]),
            // HOST:PORT alone is a sluice broker, as everywhere in sluice;
            // here the port is required, as a bare name is likely a typo.
            None => {
                for one in input.split(',') {
                    parse_address(one).map_err(|e| err(&e.to_string()))?;
                }
                ("sluice", input)
            }
        };
        let kind = match scheme {
            "sluice" => Kind::Sluice,
            "redis" => Kind::Redis,
            "beanstalkd" | "beanstalk" => Kind::Beanstalkd,
            "nats" => Kind::Nats,
            "sqs" => Kind::Sqs,
            "sqss" => Kind::Sqss,
            _ => {
                return Err(err(
                    "the scheme must be sluice, redis, beanstalkd, nats, sqs or sqss",
                ));
            }
        };
        let mut brokers = Vec::new();
        for one in rest.split(',').map(str::trim) {
            let one = match kind {
                Kind::Sluice => one.strip_prefix("sluice://").unwrap_or(one),
                _ => one,
            };
            let one = one.trim_end_matches('/');
            if one.contains(['/', '@', '?']) {
                return Err(err("only HOST:PORT may follow the scheme"));
            }
            brokers.push(host_port(one, kind.default_port()).map_err(&err)?);
        }
        if brokers.len() > 1 && kind != Kind::Sluice {
            return Err(err("only sluice takes several brokers (sluice://a:1,b:2)"));
        }
        let (host, port) = brokers.remove(0);
        Ok(TargetUrl {
            kind,
            host,
            port,
            more: brokers,
        })
    }

    /// Every broker's `HOST:PORT` (IPv6 in brackets), the first first.
    pub fn addrs(&self) -> Vec<String> {
        std::iter::once((&self.host, self.port))
            .chain(self.more.iter().map(|(h, p)| (h, *p)))
            .map(|(h, p)| {
                if h.contains(':') {
                    format!("[{h}]:{p}")
                } else {
                    format!("{h}:{p}")
                }
            })
            .collect()
    }

    /// Connects a target for this URL; `token` is the auth token for peers
    /// that have one (sluice HELLO, Redis `AUTH`, NATS `auth_token`).
    pub fn open(&self, token: Option<&str>) -> Result<Box<dyn Target>, AdapterError> {
        self.open_with(token, Duration::ZERO)
    }

    /// [`TargetUrl::open`], with the read spin of every data connection
    /// (`--read-spin`: the sluice client's, and the same poll in the peers'
    /// adapters).
    pub fn open_with(
        &self,
        token: Option<&str>,
        read_spin: Duration,
    ) -> Result<Box<dyn Target>, AdapterError> {
        self.open_access(&Access {
            token: token.map(str::to_owned),
            read_spin,
            ..Access::default()
        })
    }

    /// Connects a target for this URL with `access`.
    pub fn open_access(&self, access: &Access) -> Result<Box<dyn Target>, AdapterError> {
        let token = access.token.clone();
        let read_spin = access.read_spin;
        match self.kind {
            Kind::Redis => Ok(Box::new(
                redis::RedisTarget::new(self.clone(), token).read_spin(read_spin),
            )),
            Kind::Beanstalkd => Ok(Box::new(
                beanstalkd::BeanstalkdTarget::new(self.clone()).read_spin(read_spin),
            )),
            Kind::Nats => Ok(Box::new(
                nats::NatsTarget::new(self.clone(), token).read_spin(read_spin),
            )),
            Kind::Sluice => Ok(Box::new(
                sluice::SluiceTarget::new(self.clone(), token)
                    .read_spin(read_spin)
                    .tls(access.sluice_tls.clone()),
            )),
            Kind::Sqs => Ok(Box::new(
                sqs::SqsTarget::new(self.clone(), access.sqs.clone()).read_spin(read_spin),
            )),
            Kind::Sqss => {
                let tls = access.sqs_tls.clone().ok_or_else(|| {
                    AdapterError::Unsupported(
                        "sqss:// is HTTPS: it needs a TLS configuration (--sqs-tls-ca)".into(),
                    )
                })?;
                Ok(Box::new(
                    sqs::SqsTarget::new(self.clone(), access.sqs.clone())
                        .read_spin(read_spin)
                        .tls(Some(tls)),
                ))
            }
        }
    }

    /// A short label for file names: `redis-127.0.0.1-6379`.
    pub fn label(&self) -> String {
        let host: String = self
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if self.more.is_empty() {
            format!("{}-{}-{}", self.kind.scheme(), host, self.port)
        } else {
            format!(
                "{}-{}-{}-and-{}-more",
                self.kind.scheme(),
                host,
                self.port,
                self.more.len()
            )
        }
    }

    /// Opens a TCP connection with `TCP_NODELAY` and the reply timeout set.
    pub(crate) fn tcp(&self, peer: &'static str) -> Result<TcpStream, AdapterError> {
        let addr_text = format!("{}:{}", self.host, self.port);
        let connect_err = |source| AdapterError::Connect {
            peer,
            addr: addr_text.clone(),
            source,
        };
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(connect_err)?
            .collect();
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(stream) => {
                    let io = |source| AdapterError::Io { peer, source };
                    stream.set_nodelay(true).map_err(io)?;
                    stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
                    stream.set_write_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(connect_err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
        })))
    }
}

impl fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.kind.scheme(), self.addrs().join(","))
    }
}

/// One `HOST:PORT` (`[v6]:PORT`; the port may be left out for `default`).
fn host_port(text: &str, default: u16) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed '['")?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err("expected ':' after ']'"),
        };
        (host, port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err("no host");
    }
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| "the port must be 0..65535")?,
        None => default,
    };
    if port == 0 {
        return Err("port 0 cannot be connected to");
    }
    Ok((host.to_owned(), port))
}

/// The "read spin" line of a target's settings (`--read-spin`).
fn read_spin_setting(spin: Duration) -> Setting {
    Setting::new(
        "read spin",
        if spin.is_zero() {
            "off (the default: a reply is waited for in a blocking read)".into()
        } else {
            format!(
                "{} (--read-spin: a read polls the socket that long, yielding, \
                 before it blocks)",
                sluice_protocol::units::format_duration(spin)
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_urls() {
        let t = TargetUrl::parse("redis://127.0.0.1:6380").unwrap();
        assert_eq!(
            (t.kind, t.host.as_str(), t.port),
            (Kind::Redis, "127.0.0.1", 6380)
        );
        assert_eq!(t.to_string(), "redis://127.0.0.1:6380");
        assert_eq!(t.label(), "redis-127.0.0.1-6380");
        assert_eq!(TargetUrl::parse("nats://localhost").unwrap().port, 4222);
        assert_eq!(TargetUrl::parse("sqs://localhost").unwrap().port, 9324);
        let https = TargetUrl::parse("sqss://sqs.eu-west-1.amazonaws.com").unwrap();
        assert_eq!((https.kind, https.port), (Kind::Sqss, 443));
        assert_eq!(https.to_string(), "sqss://sqs.eu-west-1.amazonaws.com:443");
        // HTTPS without a TLS configuration: no target.
        let err = https
            .open_access(&Access::default())
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("--sqs-tls-ca")),
            "{err:?}"
        );
        assert_eq!(
            TargetUrl::parse("beanstalkd://h:1/").unwrap().kind,
            Kind::Beanstalkd
        );
        let v6 = TargetUrl::parse("sluice://[::1]:7000").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 7000));
        assert_eq!(v6.to_string(), "sluice://[::1]:7000");
        let bare = TargetUrl::parse("127.0.0.1:7000").unwrap();
        assert_eq!(bare, TargetUrl::parse("sluice://127.0.0.1:7000").unwrap());
        assert_eq!(
            TargetUrl::parse("a:1,[::1]:2").unwrap(),
            TargetUrl::parse("sluice://a:1,[::1]:2").unwrap()
        );
        // Each sluice broker in either form, as `sluice --addr` takes them.
        for mixed in ["sluice://a:1,sluice://[::1]:2", "a:1, sluice://[::1]:2/"] {
            assert_eq!(
                TargetUrl::parse(mixed).unwrap(),
                TargetUrl::parse("sluice://a:1,[::1]:2").unwrap(),
                "{mixed}"
            );
        }
        for bad in [
            "127.0.0.1",
            "a:1,b",
            "",
            "kafka://h:1",
            "redis://:6379",
            "redis://h:99999",
            "redis://h:0",
            "redis://h:1/db",
            "redis://user@h:1",
        ] {
            assert!(TargetUrl::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn several_sluice_brokers() {
        let t = TargetUrl::parse("sluice://a:1,[::1]:2,c").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("a", 1));
        assert_eq!(
            t.more,
            vec![
                ("::1".to_owned(), 2),
                ("c".to_owned(), Kind::Sluice.default_port())
            ]
        );
        assert_eq!(
            t.addrs(),
            vec![
                "a:1".to_owned(),
                "[::1]:2".to_owned(),
                format!("c:{}", Kind::Sluice.default_port())
            ]
        );
        assert_eq!(
            t.to_string(),
            format!("sluice://a:1,[::1]:2,c:{}", Kind::Sluice.default_port())
        );
        assert_eq!(t.label(), "sluice-a-1-and-2-more");
        // Only sluice takes several; an empty or broken entry is refused.
        for bad in [
            "redis://a:1,b:2",
            "nats://a,b",
            "sluice://a:1,",
            "sluice://a:1,,b:2",
            "sluice://,a:1",
            "sluice://a:1,b:0",
            "sluice://a:1,[::1",
            "sluice://a:1,b:x",
            "sluice://a:1,redis://b:2",
            "redis://a:1,redis://b:2",
        ] {
            let err = TargetUrl::parse(bad);
            assert!(err.is_err(), "{bad} should be refused: {err:?}");
        }
    }
}
