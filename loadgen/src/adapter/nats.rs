//! NATS JetStream (server 2.9+), over the NATS core text protocol written by
//! hand, with the JetStream API as JSON request/reply on top.
//!
//! | operation | NATS JetStream |
//! |---|---|
//! | set up | `$JS.API.STREAM.CREATE.<name>`: work-queue retention, memory storage, one subject; `$JS.API.CONSUMER.DURABLE.CREATE.<name>.loadgen`: durable pull consumer, explicit ack, `ack_wait` = visibility timeout, unlimited `max_ack_pending` and `max_deliver` |
//! | send batch | one `PUB <subject> <inbox>` per message, pipelined in one write, then every JetStream publish ack read |
//! | receive batch | `PUB $JS.API.CONSUMER.MSG.NEXT.<name>.loadgen <inbox>` with `{"batch":<max>,"expires":<wait>,"no_wait":true}`: the server sends what is available (up to the batch) at once, or waits up to `expires` and sends as soon as something arrives, then ends the request with a 404/408 status; the client ends it 100 ms past `expires` if no status came (nats-server 2.9 can drop a request unanswered) |
//! | delete batch | one `PUB <ack subject>` with an empty body (`+ACK`) per message, pipelined; the last one carries a reply inbox (a double ack) and its confirmation, sent after the acks before it were processed, ends the batch |
//! | tear down | `$JS.API.STREAM.DELETE.<name>` |
//! | window above 1 | publishes and acks of several batches in flight, each on reply inboxes of its own: every message the server sends is routed by its inbox to the batch it answers, and batches finish in the order they started. Pull requests go one at a time, each the usual long poll (a waiting pull holds up nothing else on a NATS connection), the next sent as soon as the one before ends: nats-server 2.9 serves several waiting pulls of one consumer poorly (a short `no_wait` pull queued behind another's gets neither messages nor a status until the client gives up on it) |
//!
//! What it cannot do like the others: an ack for a delivery that expired and
//! was delivered again still acks the message (JetStream acks by stream
//! sequence), so a late delete is never rejected; and JetStream checks
//! expired acks on its own timer, which the redelivery lateness shows.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::json;

use super::wire::{is_timeout, push_u64, text};
use super::{
    Adapter, AdapterError, Finished, QueueSpec, REPLY_TIMEOUT, Receipt, Role, Setting, Target,
    TargetUrl,
};
use sluice_protocol::units::format_duration;

mod conn;

use conn::{Msg, NatsConn, reply_number};

const PEER: &str = "nats";
/// The durable consumer every pass uses.
const DURABLE: &str = "loadgen";
/// The subscription id of each connection's inbox.
const INBOX_SID: &[u8] = b"1";
/// The shortest pull `expires` sent (the server wants a positive one).
const EXPIRES_MIN: Duration = Duration::from_millis(1);
/// How long past a pull request's `expires` the client waits for the
/// request's end before ending it itself (a server under load can answer
/// late; a status or delivery that comes after is still handled).
const PULL_GRACE: Duration = Duration::from_millis(100);
/// The long poll of a pipelined pull: the wait the runner gives a receive
/// that is alone on its connection. On NATS a waiting pull holds up nothing
/// else, so pipelined pulls always wait this long (one at a time).
const PIPELINED_PULL_WAIT: Duration = Duration::from_millis(100);

/// The stream and consumer of a pass.
#[derive(Debug, Clone)]
struct Queue {
    stream: String,
    ack_wait: Duration,
}

/// A NATS server with JetStream under test.
pub struct NatsTarget {
    url: TargetUrl,
    token: Option<String>,
    queue: Option<Queue>,
    server: Vec<Setting>,
    read_spin: Duration,
}

impl std::fmt::Debug for NatsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTarget")
            .field("url", &self.url)
            .finish()
    }
}

impl NatsTarget {
    /// A target for `url`, with `token` as `auth_token` when given.
    pub fn new(url: TargetUrl, token: Option<String>) -> Self {
        Self {
            url,
            token,
            queue: None,
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
}

impl Target for NatsTarget {
    fn kind(&self) -> &'static str {
        PEER
    }

    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError> {
        super::refuse_groups(spec, "nats")?;
        let mut c = NatsConn::connect(&self.url, self.token.as_deref())?;
        if spec.body_bytes > c.max_payload {
            return Err(AdapterError::Unsupported(format!(
                "nats: bodies of {} bytes are over the server's max_payload {}",
                spec.body_bytes, c.max_payload
            )));
        }
        let ack_wait_ns = u64::try_from(spec.visibility_timeout.as_nanos()).unwrap_or(u64::MAX);
        if ack_wait_ns == 0 {
            return Err(AdapterError::Unsupported(
                "nats: ack_wait must be positive; give a visibility timeout above 0".into(),
            ));
        }
        let stream = c.api(
            &format!("$JS.API.STREAM.CREATE.{}", spec.name),
            &json!({
                "name": spec.name, "subjects": [spec.name], "retention": "workqueue",
                "storage": "memory", "discard": "old", "num_replicas": 1,
            }),
        )?;
        c.api(
            &format!("$JS.API.CONSUMER.DURABLE.CREATE.{}.{DURABLE}", spec.name),
            &json!({
                "stream_name": spec.name,
                "config": {
                    "durable_name": DURABLE, "ack_policy": "explicit", "ack_wait": ack_wait_ns,
                    "deliver_policy": "all", "replay_policy": "instant",
                    "max_ack_pending": -1, "max_deliver": -1,
                },
            }),
        )?;
        let mut server = vec![Setting::new("server", c.server.clone())];
        server.push(Setting::new(
            "stream",
            format!(
                "{} (retention {}, storage {}, replicas {})",
                spec.name,
                stream["config"]["retention"].as_str().unwrap_or("?"),
                stream["config"]["storage"].as_str().unwrap_or("?"),
                stream["config"]["num_replicas"].as_u64().unwrap_or(1),
            ),
        ));
        self.server = server;
        self.queue = Some(Queue {
            stream: spec.name.clone(),
            ack_wait: spec.visibility_timeout,
        });
        Ok(())
    }

    fn connect(&self, _role: Role) -> Result<Box<dyn Adapter>, AdapterError> {
        let queue = super::set_up(self.queue.as_ref(), PEER)?.clone();
        let mut conn = NatsConn::connect(&self.url, self.token.as_deref())?;
        conn.conn = conn.conn.with_read_spin(self.read_spin);
        Ok(Box::new(NatsAdapter {
            inbox: conn.inbox.clone().into_bytes(),
            next_subject: format!("$JS.API.CONSUMER.MSG.NEXT.{}.{DURABLE}", queue.stream)
                .into_bytes(),
            queue,
            conn,
            reply: Vec::new(),
            stash: VecDeque::new(),
            in_flight: VecDeque::new(),
        }))
    }

    fn settings(&self) -> Vec<Setting> {
        let mut s = self.server.clone();
        s.push(super::read_spin_setting(self.read_spin));
        if let Some(q) = &self.queue {
            s.push(Setting::new(
                "consumer",
                format!(
                    "durable pull {DURABLE}, ack explicit, ack_wait {}, max_ack_pending unlimited",
                    format_duration(q.ack_wait)
                ),
            ));
            s.push(Setting::new(
                "send",
                "PUB per message with a reply inbox, one batch pipelined, every JetStream ack awaited",
            ));
            s.push(Setting::new(
                "receive",
                "CONSUMER.MSG.NEXT {batch: <batch>, expires: <= 100 ms, no_wait: true}",
            ));
            s.push(Setting::new(
                "delete",
                "+ACK per message, pipelined; the last with a reply (double ack) confirming the batch",
            ));
        }
        s
    }

    fn teardown(&mut self) -> Result<(), AdapterError> {
        if let Some(q) = self.queue.take() {
            let mut c = NatsConn::connect(&self.url, self.token.as_deref())?;
            c.api(&format!("$JS.API.STREAM.DELETE.{}", q.stream), &json!({}))?;
        }
        Ok(())
    }
}

/// A batch started and not yet finished, with what has come for it.
enum InFlight {
    /// Publishes whose acks come to the inboxes numbered `first..first + n`.
    Publish { first: u64, n: usize, acked: usize },
    /// A pull request answered on its own inbox; `sent` is false while it
    /// waits for the pull before it to end.
    Pull {
        inbox: u64,
        max: usize,
        wait: Duration,
        sent: bool,
        deadline: Instant,
        got: Vec<(Vec<u8>, Receipt)>,
        ended: bool,
    },
    /// Acks, the last confirmed on this inbox.
    Ack { inbox: u64, done: bool },
}

impl InFlight {
    fn complete(&self) -> bool {
        match self {
            InFlight::Publish { n, acked, .. } => acked >= n,
            InFlight::Pull {
                max, got, ended, ..
            } => *ended || got.len() >= *max,
            InFlight::Ack { done, .. } => *done,
        }
    }
}

/// One NATS connection of a pass.
struct NatsAdapter {
    conn: NatsConn,
    queue: Queue,
    next_subject: Vec<u8>,
    reply: Vec<u8>,
    /// Deliveries that arrived while waiting for something else (they are
    /// leased to this connection, so they are handed out next time).
    stash: VecDeque<(Vec<u8>, Receipt)>,
    /// Batches started with `start_*`, oldest first.
    in_flight: VecDeque<InFlight>,
    /// The connection's inbox prefix, for routing replies.
    inbox: Vec<u8>,
}

fn is_ack_subject(reply: Option<&[u8]>) -> bool {
    reply.is_some_and(|r| r.starts_with(b"$JS.ACK."))
}

impl NatsAdapter {
    /// Keeps a delivery that arrived while waiting for something else.
    fn stash_delivery(stash: &mut VecDeque<(Vec<u8>, Receipt)>, m: &Msg<'_>) {
        if let Some(reply) = m.reply {
            stash.push_back((m.payload.to_vec(), Receipt::Bytes(reply.into())));
        }
    }
}

impl NatsAdapter {
    /// Reads the answer to the pull request on `self.reply`: deliveries
    /// until the batch is full, a status ends the request, or `deadline`
    /// passes.
    fn read_pull(
        &mut self,
        max: usize,
        deadline: Instant,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let mut got = 0;
        while got < max {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            self.conn.conn.set_read_timeout(left)?;
            let m = match self.conn.next_msg() {
                Ok(m) => m,
                // The request's status never came: the pull is over.
                Err(e) if is_timeout(&e) => break,
                Err(e) => return Err(e),
            };
            if let Some(ack) = m.reply.filter(|r| r.starts_with(b"$JS.ACK.")) {
                on_message(m.payload, Receipt::Bytes(ack.into()));
                got += 1;
                continue;
            }
            if m.subject != self.reply.as_slice() {
                // A status for an earlier request, or a stray reply.
                continue;
            }
            match m.status {
                // No messages, or the request's time is up: the pull is over.
                Some(404 | 408) => break,
                // Idle heartbeat, or a plain message.
                Some(100) | None => continue,
                Some(code) => {
                    return Err(AdapterError::Server {
                        peer: PEER,
                        message: format!(
                            "pull request ended with status {code}: {}",
                            text(m.payload)
                        ),
                    });
                }
            }
        }
        Ok(got)
    }
}

impl NatsAdapter {
    /// Reads one message and files it with the batch it answers. Replies
    /// and statuses come on the inbox subject of their batch; a delivery
    /// comes on its stream's subject (the wildcard subscription's), so it
    /// goes to the pull in flight: one is sent at a time.
    fn route_one(&mut self) -> Result<(), AdapterError> {
        let m = self.conn.next_msg()?;
        let delivery = m.reply.filter(|r| r.starts_with(b"$JS.ACK."));
        let op = if delivery.is_some() {
            self.in_flight
                .iter_mut()
                .find(|op| matches!(op, InFlight::Pull { sent: true, .. }))
        } else {
            let number = reply_number(&self.inbox, m.subject);
            number.and_then(|k| {
                self.in_flight.iter_mut().find(|op| match op {
                    InFlight::Publish { first, n, .. } => (*first..*first + *n as u64).contains(&k),
                    InFlight::Pull { inbox, .. } | InFlight::Ack { inbox, .. } => *inbox == k,
                })
            })
        };
        match (op, delivery) {
            (Some(InFlight::Pull { got, .. }), Some(ack)) => {
                got.push((m.payload.to_vec(), Receipt::Bytes(ack.into())));
            }
            // A delivery for a pull already over: it is leased to us.
            (_, Some(ack)) => {
                self.stash
                    .push_back((m.payload.to_vec(), Receipt::Bytes(ack.into())));
            }
            (Some(InFlight::Pull { ended, .. }), None) => match m.status {
                Some(404 | 408) => *ended = true,
                Some(100) | None => {}
                Some(code) => {
                    return Err(AdapterError::Server {
                        peer: PEER,
                        message: format!(
                            "pull request ended with status {code}: {}",
                            text(m.payload)
                        ),
                    });
                }
            },
            (Some(InFlight::Publish { acked, .. }), None) => {
                if m.status == Some(503) {
                    return Err(AdapterError::Server {
                        peer: PEER,
                        message: "no responders: the stream is gone".into(),
                    });
                }
                if m.payload.windows(8).any(|w| w == b"\"error\":") {
                    return Err(AdapterError::Server {
                        peer: PEER,
                        message: text(m.payload),
                    });
                }
                *acked += 1;
            }
            (Some(InFlight::Ack { done, .. }), None) => *done = true,
            // A status or reply for a batch already over.
            (None, None) => {}
        }
        Ok(())
    }

    /// Sends the pull request of `max` messages waiting up to `wait`, on
    /// reply inbox `inbox`; returns its deadline.
    fn send_pull(
        &mut self,
        inbox: u64,
        max: usize,
        wait: Duration,
    ) -> Result<Instant, AdapterError> {
        let wait = wait.max(EXPIRES_MIN);
        let expires = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        let request = format!(r#"{{"batch":{max},"expires":{expires},"no_wait":true}}"#);
        self.reply.clear();
        self.reply.extend_from_slice(&self.inbox);
        self.reply.push(b'.');
        push_u64(&mut self.reply, inbox);
        let next = self.next_subject.clone();
        self.conn.publish(&next, &self.reply, request.as_bytes());
        self.conn.conn.flush()?;
        // As in `receive_batch`, the request's end is the client's to keep.
        Ok(Instant::now() + wait + PULL_GRACE)
    }

    /// Sends the first pull that waits for the one before it, if any.
    fn send_next_pull(&mut self) -> Result<(), AdapterError> {
        let next = self
            .in_flight
            .iter()
            .position(|op| matches!(op, InFlight::Pull { sent: false, .. }));
        let Some(i) = next else { return Ok(()) };
        let (inbox, max, wait) = match &self.in_flight[i] {
            InFlight::Pull {
                inbox, max, wait, ..
            } => (*inbox, *max, *wait),
            _ => return Ok(()),
        };
        let at = self.send_pull(inbox, max, wait)?;
        if let InFlight::Pull { sent, deadline, .. } = &mut self.in_flight[i] {
            *sent = true;
            *deadline = at;
        }
        Ok(())
    }

    /// Routes messages until the oldest batch is complete; a pull also ends
    /// at its deadline.
    fn complete_oldest(&mut self) -> Result<(), AdapterError> {
        if matches!(
            self.in_flight.front(),
            Some(InFlight::Pull { sent: false, .. })
        ) {
            self.send_next_pull()?;
        }
        loop {
            let Some(front) = self.in_flight.front_mut() else {
                return Ok(());
            };
            if front.complete() {
                return Ok(());
            }
            if let InFlight::Pull {
                deadline, ended, ..
            } = front
            {
                let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                    *ended = true;
                    return Ok(());
                };
                self.conn.conn.set_read_timeout(left)?;
                let routed = self.route_one();
                self.conn.conn.set_read_timeout(REPLY_TIMEOUT)?;
                match routed {
                    Err(e) if is_timeout(&e) => {}
                    other => other?,
                }
            } else {
                self.route_one()?;
            }
        }
    }
}

impl Adapter for NatsAdapter {
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        let subject = self.queue.stream.as_bytes();
        for body in bodies {
            self.conn.reply_subject(&mut self.reply);
            self.conn.publish(subject, &self.reply, body);
        }
        self.conn.conn.flush()?;
        let mut acked = 0;
        while acked < bodies.len() {
            let m = self.conn.next_msg()?;
            if is_ack_subject(m.reply) {
                Self::stash_delivery(&mut self.stash, &m);
                continue;
            }
            if m.status == Some(503) {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: "no responders: the stream is gone".into(),
                });
            }
            if m.payload.windows(8).any(|w| w == b"\"error\":") {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: text(m.payload),
                });
            }
            acked += 1;
        }
        Ok(())
    }

    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        if !self.stash.is_empty() {
            let mut got = 0;
            while got < max {
                let Some((body, receipt)) = self.stash.pop_front() else {
                    break;
                };
                on_message(&body, receipt);
                got += 1;
            }
            return Ok(got);
        }
        let wait = wait.max(EXPIRES_MIN);
        let expires = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        let request = format!(r#"{{"batch":{max},"expires":{expires},"no_wait":true}}"#);
        self.conn.reply_subject(&mut self.reply);
        self.conn
            .publish(&self.next_subject, &self.reply, request.as_bytes());
        self.conn.conn.flush()?;
        // The request's end is the client's to keep, as in the official
        // clients: nats-server 2.9 can drop a request that expires just as
        // a message becomes available for it without sending its 408, and
        // waiting for that status would hang.
        let deadline = Instant::now() + wait + PULL_GRACE;
        let got = self.read_pull(max, deadline, on_message);
        self.conn.conn.set_read_timeout(REPLY_TIMEOUT)?;
        got
    }

    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        _rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError> {
        // Acks from one connection reach the consumer in order and are
        // processed in order, so only the batch's last ack asks for a
        // confirmation (a double ack): its reply confirms them all.
        let Some(last) = receipts.len().checked_sub(1) else {
            return Ok(());
        };
        self.conn.reply_subject(&mut self.reply);
        for (i, r) in receipts.iter().enumerate() {
            let Receipt::Bytes(subject) = r else {
                return Err(AdapterError::Unsupported(
                    "nats: a receipt from another adapter".into(),
                ));
            };
            let reply: &[u8] = if i == last { &self.reply } else { b"" };
            self.conn.publish(subject, reply, b"");
        }
        self.conn.conn.flush()?;
        loop {
            let m = self.conn.next_msg()?;
            if is_ack_subject(m.reply) {
                Self::stash_delivery(&mut self.stash, &m);
            } else if m.subject == self.reply.as_slice() {
                return Ok(());
            }
        }
    }

    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        let subject = self.queue.stream.as_bytes().to_vec();
        let first = self.conn.next_reply;
        for body in bodies {
            self.conn.reply_subject(&mut self.reply);
            self.conn.publish(&subject, &self.reply, body);
        }
        self.conn.conn.flush()?;
        self.in_flight.push_back(InFlight::Publish {
            first,
            n: bodies.len(),
            acked: 0,
        });
        Ok(())
    }

    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError> {
        let wait = wait.max(PIPELINED_PULL_WAIT);
        let inbox = self.conn.next_reply;
        self.conn.next_reply += 1;
        let pulling = self
            .in_flight
            .iter()
            .any(|op| matches!(op, InFlight::Pull { .. }));
        let deadline = if pulling {
            // Sent when the pull before it ends.
            Instant::now()
        } else {
            self.send_pull(inbox, max, wait)?
        };
        self.in_flight.push_back(InFlight::Pull {
            inbox,
            max,
            wait,
            sent: !pulling,
            deadline,
            got: Vec::new(),
            ended: false,
        });
        Ok(())
    }

    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        let Some(last) = receipts.len().checked_sub(1) else {
            self.in_flight.push_back(InFlight::Ack {
                inbox: u64::MAX,
                done: true,
            });
            return Ok(());
        };
        let inbox = self.conn.next_reply;
        self.conn.reply_subject(&mut self.reply);
        for (i, r) in receipts.iter().enumerate() {
            let Receipt::Bytes(subject) = r else {
                return Err(AdapterError::Unsupported(
                    "nats: a receipt from another adapter".into(),
                ));
            };
            let reply = if i == last {
                self.reply.clone()
            } else {
                Vec::new()
            };
            self.conn.publish(subject, &reply, b"");
        }
        self.conn.conn.flush()?;
        self.in_flight
            .push_back(InFlight::Ack { inbox, done: false });
        Ok(())
    }

    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        _rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError> {
        self.complete_oldest()?;
        match self.in_flight.pop_front() {
            None => Err(super::nothing_started(PEER)),
            Some(InFlight::Publish { .. }) => Ok(Finished::Sent),
            Some(InFlight::Ack { .. }) => Ok(Finished::Deleted),
            Some(InFlight::Pull { max, got, .. }) => {
                // The next pull goes out now, while the caller handles these.
                self.send_next_pull()?;
                let mut n = 0;
                for (body, receipt) in got {
                    on_message(&body, receipt);
                    n += 1;
                }
                // Deliveries that came late for earlier pulls.
                while n < max {
                    let Some((body, receipt)) = self.stash.pop_front() else {
                        break;
                    };
                    on_message(&body, receipt);
                    n += 1;
                }
                Ok(Finished::Received(n))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::conn::parse_msg;
    use super::*;

    #[test]
    fn message_lines() {
        let m = parse_msg(b"MSG S1 1 $JS.ACK.S1.d.1.1.1.17.0 6", b"hello0").unwrap();
        assert_eq!(m.subject, b"S1");
        assert_eq!(m.reply, Some(&b"$JS.ACK.S1.d.1.1.1.17.0"[..]));
        assert!(is_ack_subject(m.reply));
        assert_eq!(m.payload, b"hello0");
        let m = parse_msg(b"MSG _INBOX.x.p0 1  24", b"{\"stream\":\"S1\", \"seq\":1}").unwrap();
        assert_eq!((m.subject, m.reply), (&b"_INBOX.x.p0"[..], None));
        let head = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 7\r\n\r\n";
        let line = format!("HMSG _INBOX.x.f1 1  {} {}", head.len(), head.len());
        let m = parse_msg(line.as_bytes(), head).unwrap();
        assert_eq!(m.status, Some(408));
        assert!(m.payload.is_empty());
        assert!(parse_msg(b"MSG a", b"").is_err());
        assert_eq!(reply_number(b"_INBOX.x", b"_INBOX.x.17"), Some(17));
        assert_eq!(reply_number(b"_INBOX.x", b"_INBOX.y.17"), None);
        assert_eq!(reply_number(b"_INBOX.x", b"_INBOX.x17"), None);
        assert!(parse_msg(b"HMSG a 1 99 5", b"12345").is_err());
    }
}
