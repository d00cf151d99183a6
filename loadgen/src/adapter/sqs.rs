//! Any SQS-compatible server over the AWS JSON protocol, HTTP/1.1
//! keep-alive, each request signed with AWS Signature Version 4 as an AWS
//! SDK signs it: sluice's SQS door, moto's server, ElasticMQ, LocalStack,
//! or SQS itself.
//!
//! | operation | SQS action |
//! |---|---|
//! | set up | `CreateQueue` with the run's `VisibilityTimeout` (whole seconds, as SQS counts them) |
//! | send batch | one `SendMessageBatch` (at most 10 entries, SQS's limit) |
//! | receive batch | `ReceiveMessage`, `MaxNumberOfMessages` the batch, `WaitTimeSeconds` the long-poll wait rounded up to whole seconds (0 while other requests are in flight) |
//! | delete batch | one `DeleteMessageBatch`; an entry it refuses as `ReceiptHandleIsInvalid` is a receipt refused (a stale lease), any other refusal an error |
//! | window above 1 | requests pipelined on the connection (HTTP/1.1), their responses read in order |
//! | tear down | `DeleteQueue` |
//!
//! A body goes as SQS text: its binary header in base64, then its padding
//! (`sqs/json.rs`). Expired leases come back by the server's own timer; the
//! consumers do nothing.

mod http;
mod json;
mod sign;

use std::collections::VecDeque;
use std::time::Duration;

pub use sign::SqsCredentials;

use self::http::HttpConn;
use self::json::{BatchResult, Created, ErrorBody, Received};
use super::{
    Adapter, AdapterError, Finished, QueueSpec, Receipt, Role, Setting, Target, TargetUrl,
};
use sluice_protocol::units::format_duration;

const PEER: &str = "sqs";

/// Most entries of an SQS batch, and messages of a receive.
pub const BATCH_MAX: usize = 10;

/// The longest long poll SQS takes.
const WAIT_SECONDS_MAX: u64 = 20;

/// The longest visibility timeout SQS takes (12 hours).
const VISIBILITY_SECONDS_MAX: u64 = 43_200;

/// The credentials used when none are given: a local server (sluice's door
/// without `--sqs-credentials`, moto) accepts any signature.
pub const PLACEHOLDER_KEY: &str = "sluice-loadgen";

/// The queue of a pass.
#[derive(Debug, Clone)]
struct SqsQueue {
    name: String,
    url: String,
    visibility_s: u64,
}

/// An SQS-compatible server under test.
pub struct SqsTarget {
    url: TargetUrl,
    creds: SqsCredentials,
    /// Whether the credentials are the placeholder.
    placeholder: bool,
    read_spin: Duration,
    /// TLS (an `sqss://` target).
    tls: Option<sluice_client::tls::TlsConfig>,
    queue: Option<SqsQueue>,
}

impl std::fmt::Debug for SqsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsTarget")
            .field("url", &self.url)
            .field("creds", &self.creds)
            .finish_non_exhaustive()
    }
}

impl SqsTarget {
    /// A target for `url`, signing with `creds` (the placeholder
    /// [`PLACEHOLDER_KEY`] when `None`).
    pub fn new(url: TargetUrl, creds: Option<SqsCredentials>) -> Self {
        let placeholder = creds.is_none();
        Self {
            url,
            creds: creds.unwrap_or_else(|| SqsCredentials {
                access_key: PLACEHOLDER_KEY.into(),
                secret: PLACEHOLDER_KEY.into(),
                region: "us-east-1".into(),
            }),
            placeholder,
            read_spin: Duration::ZERO,
            tls: None,
            queue: None,
        }
    }

    /// HTTPS with `tls` (an `sqss://` target).
    #[must_use]
    pub fn tls(mut self, tls: Option<sluice_client::tls::TlsConfig>) -> Self {
        self.tls = tls;
        self
    }

    /// The read spin of every connection (`--read-spin`).
    #[must_use]
    pub fn read_spin(mut self, spin: Duration) -> Self {
        self.read_spin = spin;
        self
    }

    fn conn(&self) -> Result<HttpConn, AdapterError> {
        HttpConn::connect(
            &self.url,
            self.creds.clone(),
            self.read_spin,
            self.tls.clone(),
        )
    }
}

/// Sends `body` as `action` and reads the response: its body on success, a
/// server error naming SQS's code otherwise.
fn call(
    conn: &mut HttpConn,
    action: &str,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), AdapterError> {
    conn.send(action, body)?;
    check(conn.receive(out)?.status, out)
}

/// A response of status `status` and body `body`: an error unless 200.
fn check(status: u16, body: &[u8]) -> Result<(), AdapterError> {
    if status == 200 {
        Ok(())
    } else {
        Err(AdapterError::Server {
            peer: PEER,
            message: ErrorBody::describe(body, status),
        })
    }
}

fn parse<'a, T: serde::Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, AdapterError> {
    serde_json::from_slice(body).map_err(|e| AdapterError::Protocol {
        peer: PEER,
        detail: format!("{what}: {e}"),
    })
}

/// The visibility timeout in whole seconds, as SQS takes it.
fn visibility_seconds(visibility: Duration) -> Result<u64, AdapterError> {
    let s = visibility.as_secs();
    if visibility.subsec_nanos() != 0 || s > VISIBILITY_SECONDS_MAX {
        return Err(AdapterError::Unsupported(format!(
            "sqs: a visibility timeout is whole seconds up to 12 hours in SQS, not {} \
             (--visibility-timeout 1s, say)",
            format_duration(visibility)
        )));
    }
    Ok(s)
}

impl Target for SqsTarget {
    fn kind(&self) -> &'static str {
        PEER
    }

    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError> {
        super::refuse_groups(spec, PEER)?;
        let visibility_s = visibility_seconds(spec.visibility_timeout)?;
        if spec.batch_max > BATCH_MAX {
            return Err(AdapterError::Unsupported(format!(
                "sqs: a batch is at most {BATCH_MAX} entries in SQS, not {} (--batch {BATCH_MAX})",
                spec.batch_max
            )));
        }
        let mut conn = self.conn()?;
        let mut req = Vec::new();
        req.extend_from_slice(b"{\"QueueName\":");
        json::push_str(&mut req, &spec.name);
        req.extend_from_slice(b",\"Attributes\":{\"VisibilityTimeout\":\"");
        super::wire::push_u64(&mut req, visibility_s);
        req.extend_from_slice(b"\"}}");
        let mut out = Vec::new();
        call(&mut conn, "CreateQueue", &req, &mut out)?;
        let created: Created = parse(&out, "CreateQueue")?;
        self.queue = Some(SqsQueue {
            name: spec.name.clone(),
            url: created.queue_url,
            visibility_s,
        });
        Ok(())
    }

    fn connect(&self, _role: Role) -> Result<Box<dyn Adapter>, AdapterError> {
        let queue = super::set_up(self.queue.as_ref(), PEER)?.clone();
        Ok(Box::new(SqsAdapter {
            conn: self.conn()?,
            queue,
            req: Vec::with_capacity(4096),
            resp: Vec::with_capacity(8192),
            body: Vec::new(),
            in_flight: VecDeque::new(),
        }))
    }

    fn settings(&self) -> Vec<Setting> {
        let mut s = vec![Setting::new(
            "server",
            format!(
                "{}: SQS JSON protocol over HTTP/1.1 keep-alive{}, one connection per producer \
                 and consumer",
                self.url.addrs().join(","),
                if self.tls.is_some() {
                    " over TLS (HTTPS)"
                } else {
                    ""
                }
            ),
        )];
        s.push(Setting::new(
            "signing",
            if self.placeholder {
                format!(
                    "SigV4, placeholder key {PLACEHOLDER_KEY} in {} (no --aws-access-key-id or \
                     AWS_ACCESS_KEY_ID: a local server that checks no signature accepts it)",
                    self.creds.region
                )
            } else {
                format!(
                    "SigV4, access key {} in {}",
                    self.creds.access_key, self.creds.region
                )
            },
        ));
        if let Some(q) = &self.queue {
            s.push(Setting::new(
                "queue",
                format!(
                    "{} ({}), VisibilityTimeout {} s",
                    q.name, q.url, q.visibility_s
                ),
            ));
        }
        s.push(super::read_spin_setting(self.read_spin));
        s.push(Setting::new(
            "send",
            "one SendMessageBatch per batch; a body is its header in base64 and its padding, \
             --size characters (44 at least)",
        ));
        s.push(Setting::new(
            "receive",
            "ReceiveMessage, MaxNumberOfMessages <batch>, WaitTimeSeconds 1 (the 100 ms \
             long-poll wait rounded up to SQS's whole seconds)",
        ));
        s.push(Setting::new(
            "delete",
            "one DeleteMessageBatch with every receipt handle of the batch",
        ));
        s.push(Setting::new(
            "expired leases",
            "the server's timer makes them visible again; the consumers do nothing",
        ));
        s
    }

    fn teardown(&mut self) -> Result<(), AdapterError> {
        let Some(q) = self.queue.take() else {
            return Ok(());
        };
        let mut conn = self.conn()?;
        let mut req = b"{\"QueueUrl\":".to_vec();
        json::push_str(&mut req, &q.url);
        req.push(b'}');
        call(&mut conn, "DeleteQueue", &req, &mut Vec::new())
    }
}

/// A request sent whose response is not read yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send(usize),
    Receive,
    Delete,
}

/// One connection bound to the pass's queue.
struct SqsAdapter {
    conn: HttpConn,
    queue: SqsQueue,
    req: Vec<u8>,
    resp: Vec<u8>,
    /// A received body, decoded from its text.
    body: Vec<u8>,
    in_flight: VecDeque<Op>,
}

impl SqsAdapter {
    fn start(&mut self, action: &str, op: Op) -> Result<(), AdapterError> {
        self.conn.send(action, &self.req)?;
        self.in_flight.push_back(op);
        Ok(())
    }

    /// A failed entry of a batch, as a server error.
    fn refused(action: &str, failed: &json::Failed) -> AdapterError {
        AdapterError::Server {
            peer: PEER,
            message: format!(
                "{action} refused entry {}: {}: {}",
                failed.id, failed.code, failed.message
            ),
        }
    }
}

impl Adapter for SqsAdapter {
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        self.start_send(bodies)?;
        self.finish(&mut |_, _| {}, &mut Vec::new()).map(|_| ())
    }

    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        self.start_receive(max, wait)?;
        match self.finish(on_message, &mut Vec::new())? {
            Finished::Received(n) => Ok(n),
            _ => Ok(0),
        }
    }

    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError> {
        self.start_delete(receipts)?;
        self.finish(&mut |_, _| {}, rejected).map(|_| ())
    }

    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        json::start_batch(&mut self.req, &self.queue.url);
        for (i, body) in bodies.iter().enumerate() {
            json::start_entry(&mut self.req, i, "MessageBody");
            self.req.push(b'"');
            json::push_body_text(&mut self.req, body);
            self.req.extend_from_slice(b"\"}");
        }
        self.req.extend_from_slice(b"]}");
        self.start("SendMessageBatch", Op::Send(bodies.len()))
    }

    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError> {
        let wait_s = wait
            .as_nanos()
            .div_ceil(1_000_000_000)
            .min(u128::from(WAIT_SECONDS_MAX));
        self.req.clear();
        self.req.extend_from_slice(b"{\"QueueUrl\":");
        json::push_str(&mut self.req, &self.queue.url);
        self.req.extend_from_slice(b",\"MaxNumberOfMessages\":");
        super::wire::push_u64(&mut self.req, max.min(BATCH_MAX) as u64);
        self.req.extend_from_slice(b",\"WaitTimeSeconds\":");
        // At most 20.
        super::wire::push_u64(&mut self.req, wait_s as u64);
        self.req.push(b'}');
        self.start("ReceiveMessage", Op::Receive)
    }

    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        json::start_batch(&mut self.req, &self.queue.url);
        for (i, receipt) in receipts.iter().enumerate() {
            let Receipt::Bytes(handle) = receipt else {
                return Err(AdapterError::Unsupported(
                    "sqs: a receipt that is not an SQS receipt handle".into(),
                ));
            };
            json::start_entry(&mut self.req, i, "ReceiptHandle");
            json::push_str(&mut self.req, &String::from_utf8_lossy(handle));
            self.req.push(b'}');
        }
        self.req.extend_from_slice(b"]}");
        self.start("DeleteMessageBatch", Op::Delete)
    }

    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError> {
        let op = self
            .in_flight
            .pop_front()
            .ok_or_else(|| super::nothing_started(PEER))?;
        let status = self.conn.receive(&mut self.resp)?.status;
        check(status, &self.resp)?;
        match op {
            Op::Send(n) => {
                let r: BatchResult = parse(&self.resp, "SendMessageBatch")?;
                if let Some(failed) = r.failed.first() {
                    return Err(Self::refused("SendMessageBatch", failed));
                }
                if r.successful.len() != n {
                    return Err(AdapterError::Protocol {
                        peer: PEER,
                        detail: format!(
                            "SendMessageBatch answered {} of {n} entries",
                            r.successful.len()
                        ),
                    });
                }
                Ok(Finished::Sent)
            }
            Op::Receive => {
                let r: Received = parse(&self.resp, "ReceiveMessage")?;
                for m in &r.messages {
                    json::body_from_text(&m.body, &mut self.body);
                    let receipt = Receipt::Bytes(m.receipt.as_bytes().into());
                    on_message(&self.body, receipt);
                }
                Ok(Finished::Received(r.messages.len()))
            }
            Op::Delete => {
                let r: BatchResult = parse(&self.resp, "DeleteMessageBatch")?;
                for failed in &r.failed {
                    // A stale receipt (its lease ended and the message went
                    // to another consumer) is refused; anything else is an
                    // error.
                    let i = failed.id.parse::<usize>().ok();
                    match i {
                        Some(i) if failed.code.starts_with("ReceiptHandleIsInvalid") => {
                            rejected.push(i);
                        }
                        _ => return Err(Self::refused("DeleteMessageBatch", failed)),
                    }
                }
                Ok(Finished::Deleted)
            }
        }
    }
}
