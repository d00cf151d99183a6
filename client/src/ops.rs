//! The operations, independent of how they travel: each builds its
//! [`Request`] and reads its [`Reply`] into a typed result. The blocking and
//! the async client share them, so both expose the same API with the same
//! checks.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, EncodeError, HelloReply, PeekedMessage,
    QueueAttributesRequest, QueueName, Receipt, ReceiveRequest, ReceivedBatch, ReceivedMessage,
    Reply, Request, SendBatch, SendEntryRef, SendOutcome, SendRequest, ServerStatsReply,
    VisibilityChange,
};

use crate::attributes::{QueueInfo, QueueOptions};
use crate::error::{Error, Result};
use crate::fields::{wire_count, wire_ms};
use crate::limits::RECEIVE_WAIT_MAX;
use crate::message::SendEntry;

/// One request as a connection writes it into its write buffer.
pub(crate) enum Outgoing<'a> {
    /// A request built whole.
    Request(Request),
    /// A SEND written straight from its entries' views: each entry is
    /// copied once, into the write buffer, where a built [`SendRequest`]
    /// would copy it into its batch first.
    Send(QueueName, Vec<SendEntryRef<'a>>),
}

/// What a connection writes as one request frame.
pub(crate) trait OutFrame {
    /// Writes the whole frame, with request id `id`, at the end of `buf`;
    /// on an error `buf` is as it was.
    fn encode_frame(&self, id: u32, buf: &mut BytesMut) -> std::result::Result<(), EncodeError>;
}

impl OutFrame for Request {
    fn encode_frame(&self, id: u32, buf: &mut BytesMut) -> std::result::Result<(), EncodeError> {
        self.encode(id, buf)
    }
}

impl OutFrame for Outgoing<'_> {
    fn encode_frame(&self, id: u32, buf: &mut BytesMut) -> std::result::Result<(), EncodeError> {
        match self {
            Outgoing::Request(r) => r.encode(id, buf),
            Outgoing::Send(queue, views) => SendRequest::encode_views(id, queue, views, buf),
        }
    }
}

/// Writes `frames` with their request ids `ids` at the end of `buf`,
/// refusing any frame above the server's `frame_bytes_max`. On an error
/// `buf` is as it was: none of them goes out.
///
/// # Errors
/// `InvalidArgument` for a frame that cannot be encoded or is too large.
pub(crate) fn encode_frames<F: OutFrame>(
    frames: &[F],
    ids: &[u32],
    buf: &mut BytesMut,
    frame_bytes_max: u32,
) -> Result<()> {
    debug_assert_eq!(frames.len(), ids.len());
    let start = buf.len();
    for (frame, &id) in frames.iter().zip(ids) {
        let before = buf.len();
        let encoded = frame
            .encode_frame(id, buf)
            .map_err(|e| Error::InvalidArgument(e.to_string()))
            .and_then(|()| check_frame_size(buf.len() - before, frame_bytes_max));
        if let Err(err) = encoded {
            buf.truncate(start);
            return Err(err);
        }
    }
    Ok(())
}

/// What one operation sends and how it reads the answer.
pub(crate) trait Operation {
    /// The typed result.
    type Output;
    /// The request (validated locally where the client can).
    fn request(&self) -> Result<Request>;
    /// The request as the connection writes it: by default the
    /// [`request`](Self::request) built whole.
    fn outgoing(&self) -> Result<Outgoing<'_>> {
        self.request().map(Outgoing::Request)
    }
    /// How much longer than the request time-out to wait for the reply (a
    /// receive's long-poll wait).
    fn extra_wait(&self) -> Duration {
        Duration::ZERO
    }
    /// Reads the reply; an ERROR reply has already become an `Err`.
    fn output(reply: Reply) -> Result<Self::Output>;
}

/// The reply, or the error it carries.
pub(crate) fn parse<O: Operation>(reply: Result<Reply>) -> Result<O::Output> {
    match reply? {
        Reply::Error(e) => Err(e.into()),
        other => O::output(other),
    }
}

fn unexpected(reply: &Reply, wanted: &str) -> Error {
    let got = sluice_protocol::opcode::name(reply.opcode()).unwrap_or("an unknown opcode");
    Error::Protocol(format!("expected a {wanted} reply, got {got}"))
}

/// The longest any of `requests` may wait on the server beyond a normal
/// reply: a RECEIVE's wait, or the longest wait when it takes the queue's
/// default (which the client does not know).
pub(crate) fn longest_wait(requests: &[Request]) -> Duration {
    requests
        .iter()
        .map(|r| match r {
            Request::Receive(r) => r
                .wait_ms
                .map_or(RECEIVE_WAIT_MAX, |ms| Duration::from_millis(ms.into())),
            _ => Duration::ZERO,
        })
        .max()
        .unwrap_or_default()
}

/// A queue name, checked before anything is sent.
pub(crate) fn queue_name(name: &str) -> Result<QueueName> {
    QueueName::new(name).map_err(|_| {
        Error::InvalidArgument(format!(
            "queue name {name:?} is not valid ([A-Za-z0-9_.-]{{1,80}})"
        ))
    })
}

fn entry_results<T>(results: Vec<Result<T, sluice_protocol::ErrorCode>>) -> Vec<Result<T>> {
    results
        .into_iter()
        .map(|r| r.map_err(|code| Error::from_code(code, String::new())))
        .collect()
}

/// Options of a receive.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::ReceiveOptions;
///
/// let options = ReceiveOptions::new(10)
///     .visibility_timeout(Duration::from_secs(60))
///     .wait(Duration::from_secs(20));
/// assert_eq!(options.max_messages, 10);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// Most messages wanted, 1 ..= 1,024.
    pub max_messages: usize,
    /// Lease length; `None` uses the queue's visibility timeout.
    pub visibility_timeout: Option<Duration>,
    /// Long-poll wait (at most 20 s); `None` uses the queue's default wait.
    pub wait: Option<Duration>,
    /// Bind the leases to the connection: if it closes (the process dies,
    /// the connection drops, its session timeout runs out), the server
    /// releases them at once instead of waiting out their visibility
    /// timeout. Default false.
    pub bind_leases: bool,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions::new(1)
    }
}

impl ReceiveOptions {
    /// Up to `max_messages`, with the queue's visibility timeout and wait.
    #[must_use]
    pub fn new(max_messages: usize) -> ReceiveOptions {
        ReceiveOptions {
            max_messages,
            visibility_timeout: None,
            wait: None,
            bind_leases: false,
        }
    }

    /// Sets the lease length.
    #[must_use]
    pub fn visibility_timeout(mut self, timeout: Duration) -> ReceiveOptions {
        self.visibility_timeout = Some(timeout);
        self
    }

    /// Sets the long-poll wait.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> ReceiveOptions {
        self.wait = Some(wait);
        self
    }

    /// Binds the leases to the connection (see
    /// [`ReceiveOptions::bind_leases`](#structfield.bind_leases)).
    #[must_use]
    pub fn bind_leases(mut self, bind: bool) -> ReceiveOptions {
        self.bind_leases = bind;
        self
    }
}

/// The outcome of a redrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RedriveOutcome {
    /// Messages moved back to their source queues.
    pub moved: usize,
    /// Messages that stayed (their source queue is gone or full).
    pub stayed: usize,
}

fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

macro_rules! expect {
    ($reply:expr, $wanted:literal, $pat:pat => $out:expr) => {
        match $reply {
            $pat => Ok($out),
            other => Err(unexpected(&other, $wanted)),
        }
    };
}

/// HELLO with a token and a session timeout (ms, 0: none).
pub(crate) struct Hello(pub Bytes, pub u32);
impl Operation for Hello {
    type Output = HelloReply;
    fn request(&self) -> Result<Request> {
        Ok(Request::Hello(sluice_protocol::HelloRequest {
            version: sluice_protocol::limits::PROTOCOL_VERSION,
            token: self.0.clone(),
            session_timeout_ms: self.1,
        }))
    }
    fn output(reply: Reply) -> Result<HelloReply> {
        expect!(reply, "HELLO", Reply::Hello(h) => h)
    }
}

/// The manual clock after an advance ([`Client::advance_clock`](crate::Client::advance_clock)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// Manual time since the server started: every advance so far.
    pub elapsed: Duration,
    /// The time the broker stamps sent messages with now.
    pub wall: std::time::SystemTime,
}

pub(crate) struct AdvanceClock(pub Duration);
impl Operation for AdvanceClock {
    type Output = ClockReading;
    fn request(&self) -> Result<Request> {
        let by_ms = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX);
        if by_ms > sluice_protocol::limits::ADVANCE_CLOCK_MS_MAX {
            return Err(Error::InvalidArgument(format!(
                "a clock advance of {by_ms} ms is above the limit of {} ms (366 days)",
                sluice_protocol::limits::ADVANCE_CLOCK_MS_MAX
            )));
        }
        Ok(Request::AdvanceClock { by_ms })
    }
    fn output(reply: Reply) -> Result<ClockReading> {
        expect!(reply, "ADVANCE_CLOCK", Reply::AdvanceClock { elapsed_ms, wall_ms } =>
        ClockReading {
            elapsed: Duration::from_millis(elapsed_ms),
            wall: std::time::UNIX_EPOCH + Duration::from_millis(wall_ms),
        })
    }
}

pub(crate) struct Ping(pub u64);
impl Operation for Ping {
    type Output = u64;
    fn request(&self) -> Result<Request> {
        Ok(Request::Ping { nonce: self.0 })
    }
    fn output(reply: Reply) -> Result<u64> {
        expect!(reply, "PONG", Reply::Pong { nonce } => nonce)
    }
}

pub(crate) struct CreateQueue<'a>(pub &'a str, pub &'a QueueOptions);
impl Operation for CreateQueue<'_> {
    type Output = bool;
    fn request(&self) -> Result<Request> {
        Ok(Request::CreateQueue(QueueAttributesRequest {
            queue: queue_name(self.0)?,
            attributes: self.1.to_update()?,
        }))
    }
    fn output(reply: Reply) -> Result<bool> {
        expect!(reply, "CREATE_QUEUE", Reply::CreateQueue { created } => created)
    }
}

pub(crate) struct SetQueue<'a>(pub &'a str, pub &'a QueueOptions);
impl Operation for SetQueue<'_> {
    type Output = ();
    fn request(&self) -> Result<Request> {
        Ok(Request::SetQueue(QueueAttributesRequest {
            queue: queue_name(self.0)?,
            attributes: self.1.to_update()?,
        }))
    }
    fn output(reply: Reply) -> Result<()> {
        expect!(reply, "SET_QUEUE", Reply::SetQueue => ())
    }
}

pub(crate) struct DeleteQueue<'a>(pub &'a str);
impl Operation for DeleteQueue<'_> {
    type Output = ();
    fn request(&self) -> Result<Request> {
        Ok(Request::DeleteQueue {
            queue: queue_name(self.0)?,
        })
    }
    fn output(reply: Reply) -> Result<()> {
        expect!(reply, "DELETE_QUEUE", Reply::DeleteQueue => ())
    }
}

/// One `LIST_QUEUES`: the names with `prefix`, from the start or (`after`,
/// protocol version 3) one page after a name; with whether more follow.
pub(crate) struct ListQueues<'a> {
    pub prefix: &'a str,
    pub after: Option<&'a str>,
}

/// The server protocol version from which `LIST_QUEUES` comes in pages.
pub(crate) const PAGED_LIST_VERSION: u16 = 3;

impl Operation for ListQueues<'_> {
    type Output = (Vec<String>, Option<bool>);
    fn request(&self) -> Result<Request> {
        let prefix = self.prefix;
        let ok = prefix.len() <= sluice_protocol::limits::QUEUE_NAME_BYTES_MAX
            && (prefix.is_empty() || sluice_protocol::is_valid_queue_name(prefix));
        if !ok {
            return Err(Error::InvalidArgument(format!(
                "prefix {prefix:?} is not made of queue-name characters ([A-Za-z0-9_.-]{{0,80}})"
            )));
        }
        Ok(Request::ListQueues {
            prefix: prefix.to_owned(),
            after: self.after.map(str::to_owned),
        })
    }
    fn output(reply: Reply) -> Result<(Vec<String>, Option<bool>)> {
        expect!(reply, "LIST_QUEUES", Reply::ListQueues { queues, more } =>
            (queues.iter().map(|q| q.as_str().to_owned()).collect(), more))
    }
}

/// Where a paged listing goes next: the name the next page starts after,
/// or `None` when it is complete. A page that says more follow and holds
/// nothing would not move on, so it ends the walk too.
pub(crate) fn next_page(names: &[String], more: Option<bool>) -> Option<String> {
    match (more, names.last()) {
        (Some(true), Some(last)) => Some(last.clone()),
        _ => None,
    }
}

pub(crate) struct GetQueue<'a>(pub &'a str);
impl Operation for GetQueue<'_> {
    type Output = QueueInfo;
    fn request(&self) -> Result<Request> {
        Ok(Request::GetQueue {
            queue: queue_name(self.0)?,
        })
    }
    fn output(reply: Reply) -> Result<QueueInfo> {
        expect!(reply, "GET_QUEUE", Reply::GetQueue(info) => *info)
    }
}

pub(crate) struct PurgeQueue<'a>(pub &'a str);
impl Operation for PurgeQueue<'_> {
    type Output = usize;
    fn request(&self) -> Result<Request> {
        Ok(Request::PurgeQueue {
            queue: queue_name(self.0)?,
        })
    }
    fn output(reply: Reply) -> Result<usize> {
        expect!(reply, "PURGE_QUEUE", Reply::PurgeQueue { purged } => count(purged))
    }
}

/// What a SEND can carry as one entry: anything with a wire view.
pub(crate) trait WireEntry {
    /// The entry as the protocol encodes it.
    ///
    /// # Errors
    /// `InvalidArgument` for a value the protocol's fields cannot carry.
    fn wire(&self) -> Result<SendEntryRef<'_>>;
}

impl WireEntry for SendEntry {
    /// The entry's view, once its delay fits the protocol's field: a delay
    /// the builder had to cut ([`SendEntry::DELAY_CUT`]), or the field's
    /// "queue default" marker, is refused here, naming the delay. A delay
    /// that fits goes out, and the server checks its range for that entry
    /// alone.
    fn wire(&self) -> Result<SendEntryRef<'_>> {
        if self.delay.is_some_and(|d| d >= SendEntry::DELAY_CUT) {
            return Err(Error::InvalidArgument(format!(
                "delay: longer than the protocol's millisecond field carries (at most {} ms)",
                SendEntry::DELAY_CUT.get() - 1
            )));
        }
        Ok(self.as_view())
    }
}

/// A bare body, borrowed: the queue's delay, no dedup key, no attributes.
impl WireEntry for &[u8] {
    fn wire(&self) -> Result<SendEntryRef<'_>> {
        Ok(SendEntryRef {
            body: self,
            delay_ms: None,
            dedup_key: None,
            attributes: sluice_protocol::AttributesRef::default(),
            group: None,
        })
    }
}

/// An entry as the protocol's borrowed view, sent as it stands: a delay
/// from [`SendEntry::DELAY_CUT`] on (the wire's "queue default" marker
/// among them) is refused, as for a [`SendEntry`]. The group id and the
/// dedup key are checked as they are encoded.
impl WireEntry for SendEntryRef<'_> {
    fn wire(&self) -> Result<SendEntryRef<'_>> {
        if self
            .delay_ms
            .is_some_and(|d| d >= SendEntry::DELAY_CUT.get())
        {
            return Err(Error::InvalidArgument(format!(
                "delay: longer than the protocol's millisecond field carries (at most {} ms)",
                SendEntry::DELAY_CUT.get() - 1
            )));
        }
        Ok(*self)
    }
}

pub(crate) struct Send<'a, E = SendEntry>(pub &'a str, pub &'a [E]);
impl<E: WireEntry> Send<'_, E> {
    /// The queue and the entries' wire views, checked.
    fn views(&self) -> Result<(QueueName, Vec<SendEntryRef<'_>>)> {
        let queue = queue_name(self.0)?;
        let mut views = Vec::with_capacity(self.1.len());
        for entry in self.1 {
            views.push(entry.wire()?);
        }
        Ok((queue, views))
    }
}
impl<E: WireEntry> Operation for Send<'_, E> {
    type Output = Vec<Result<SendOutcome>>;
    fn request(&self) -> Result<Request> {
        let (queue, views) = self.views()?;
        let entries =
            SendBatch::from_views(views).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Ok(Request::Send(SendRequest { queue, entries }))
    }
    fn outgoing(&self) -> Result<Outgoing<'_>> {
        let (queue, views) = self.views()?;
        Ok(Outgoing::Send(queue, views))
    }
    fn output(reply: Reply) -> Result<Vec<Result<SendOutcome>>> {
        expect!(reply, "SEND", Reply::Send { results } => entry_results(results))
    }
}

pub(crate) struct Receive<'a>(pub &'a str, pub ReceiveOptions);
impl Operation for Receive<'_> {
    type Output = Vec<ReceivedMessage>;
    fn request(&self) -> Result<Request> {
        Ok(Request::Receive(ReceiveRequest {
            queue: queue_name(self.0)?,
            max_messages: wire_count(self.1.max_messages, "max messages")?,
            visibility_timeout_ms: self
                .1
                .visibility_timeout
                .map(|d| wire_ms(d, "visibility timeout"))
                .transpose()?,
            wait_ms: self.1.wait.map(|d| wire_ms(d, "wait")).transpose()?,
            bind_leases: self.1.bind_leases,
            with_source: false,
        }))
    }
    fn extra_wait(&self) -> Duration {
        // The queue's default wait is unknown here: allow for the longest.
        self.1.wait.unwrap_or(RECEIVE_WAIT_MAX)
    }
    fn output(reply: Reply) -> Result<Vec<ReceivedMessage>> {
        expect!(reply, "RECEIVE", Reply::Receive { messages } => messages.to_messages())
    }
}

/// A RECEIVE whose messages stay in the reply's wire form: iterated as
/// borrowed views, nothing shared or copied per message.
pub(crate) struct ReceiveBatch<'a>(pub &'a str, pub ReceiveOptions);
impl Operation for ReceiveBatch<'_> {
    type Output = ReceivedBatch;
    fn request(&self) -> Result<Request> {
        Receive(self.0, self.1).request()
    }
    fn extra_wait(&self) -> Duration {
        Receive(self.0, self.1).extra_wait()
    }
    fn output(reply: Reply) -> Result<ReceivedBatch> {
        expect!(reply, "RECEIVE", Reply::Receive { messages } => messages)
    }
}

pub(crate) struct Delete<'a>(pub &'a str, pub &'a [Receipt]);
impl Operation for Delete<'_> {
    type Output = Vec<Result<()>>;
    fn request(&self) -> Result<Request> {
        Ok(Request::Delete(DeleteRequest {
            queue: queue_name(self.0)?,
            receipts: self.1.to_vec(),
        }))
    }
    fn output(reply: Reply) -> Result<Vec<Result<()>>> {
        expect!(reply, "DELETE", Reply::Delete { results } => entry_results(results))
    }
}

pub(crate) struct ChangeVisibility<'a>(pub &'a str, pub &'a [(Receipt, Duration)]);
impl Operation for ChangeVisibility<'_> {
    type Output = Vec<Result<()>>;
    fn request(&self) -> Result<Request> {
        Ok(Request::ChangeVisibility(ChangeVisibilityRequest {
            queue: queue_name(self.0)?,
            entries: self
                .1
                .iter()
                .map(|&(receipt, timeout)| {
                    Ok(VisibilityChange {
                        receipt,
                        visibility_timeout_ms: wire_ms(timeout, "visibility timeout")?,
                    })
                })
                .collect::<Result<_>>()?,
        }))
    }
    fn output(reply: Reply) -> Result<Vec<Result<()>>> {
        expect!(reply, "CHANGE_VISIBILITY", Reply::ChangeVisibility { results } =>
            entry_results(results))
    }
}

/// A REDRIVE of queue `.0`, at most `.1` messages, to `.2` or (`None`)
/// back to their source queues.
pub(crate) struct Redrive<'a>(pub &'a str, pub usize, pub Option<&'a str>);
impl Operation for Redrive<'_> {
    type Output = RedriveOutcome;
    fn request(&self) -> Result<Request> {
        Ok(Request::Redrive {
            queue: queue_name(self.0)?,
            max_messages: wire_count(self.1, "max messages")?,
            to: self.2.map(queue_name).transpose()?,
        })
    }
    fn output(reply: Reply) -> Result<RedriveOutcome> {
        expect!(reply, "REDRIVE", Reply::Redrive { moved, stayed } =>
            RedriveOutcome { moved: count(moved), stayed: count(stayed) })
    }
}

/// A PEEK's messages, and whether the server left visible messages out
/// because its reply frame was full (protocol version 3; an older server
/// does not say, and `cut` is then false).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peeked {
    /// The messages, oldest first.
    pub messages: Vec<PeekedMessage>,
    /// Messages were left out to fit one reply: ask for fewer.
    pub cut: bool,
}

pub(crate) struct Peek<'a>(pub &'a str, pub usize);
impl Operation for Peek<'_> {
    type Output = Peeked;
    fn request(&self) -> Result<Request> {
        Ok(Request::Peek {
            queue: queue_name(self.0)?,
            max_messages: wire_count(self.1, "max messages")?,
        })
    }
    fn output(reply: Reply) -> Result<Peeked> {
        expect!(reply, "PEEK", Reply::Peek { messages, cut } =>
            Peeked { messages, cut: cut.unwrap_or(false) })
    }
}

pub(crate) struct ServerStats;
impl Operation for ServerStats {
    type Output = ServerStatsReply;
    fn request(&self) -> Result<Request> {
        Ok(Request::ServerStats)
    }
    fn output(reply: Reply) -> Result<ServerStatsReply> {
        expect!(reply, "SERVER_STATS", Reply::ServerStats(s) => s)
    }
}

/// The one result of a single-entry batch.
pub(crate) fn single<T>(results: Vec<Result<T>>) -> Result<T> {
    let mut results = results.into_iter();
    match (results.next(), results.next()) {
        (Some(r), None) => r,
        (first, _) => Err(Error::Protocol(format!(
            "expected 1 result, got {}",
            usize::from(first.is_some()) + 1 + results.len()
        ))),
    }
}

/// Refuses a frame above the server's limit before it is sent (the server
/// would close the connection).
pub(crate) fn check_frame_size(len: usize, frame_bytes_max: u32) -> Result<()> {
    let max = usize::try_from(frame_bytes_max).unwrap_or(usize::MAX);
    if len > max {
        return Err(Error::InvalidArgument(format!(
            "a request of {len} bytes is above the server's frame limit of {max} bytes; \
             nothing was sent"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sluice_protocol::{ErrorCode, MessageId, WireError};

    use super::*;

    #[test]
    fn the_longest_wait_allows_for_a_queue_default() {
        let receive = |wait_ms| {
            Request::Receive(sluice_protocol::ReceiveRequest {
                queue: QueueName::from_static("q"),
                max_messages: 1,
                visibility_timeout_ms: None,
                wait_ms,
                bind_leases: false,
                with_source: false,
            })
        };
        assert_eq!(longest_wait(&[Request::Ping { nonce: 1 }]), Duration::ZERO);
        assert_eq!(
            longest_wait(&[receive(Some(250)), Request::ServerStats]),
            Duration::from_millis(250)
        );
        assert_eq!(
            longest_wait(&[receive(Some(250)), receive(None)]),
            RECEIVE_WAIT_MAX
        );
    }

    #[test]
    fn a_send_goes_out_as_the_bytes_of_its_request() {
        let entries: Vec<SendEntry> = (0..20u8)
            .map(|i| {
                let entry = SendEntry::new(vec![i; usize::from(i) * 7]);
                match i % 4 {
                    1 => entry.delay(Duration::from_millis(u64::from(i) * 10)),
                    2 => entry.dedup_key(vec![b'k', i]),
                    3 => entry.attributes(
                        sluice_protocol::MessageAttributes::from_pairs([("n", i.to_string())])
                            .unwrap(),
                    ),
                    _ => entry,
                }
            })
            .collect();
        let op = Send("orders", &entries);
        let mut built = BytesMut::new();
        let mut written = BytesMut::new();
        encode_frames(&[op.request().unwrap()], &[9], &mut built, 1 << 20).unwrap();
        encode_frames(&[op.outgoing().unwrap()], &[9], &mut written, 1 << 20).unwrap();
        assert_eq!(written, built);
        assert!(matches!(op.outgoing(), Ok(Outgoing::Send(..))));
    }

    #[test]
    fn frames_that_cannot_go_out_leave_the_write_buffer_as_it_was() {
        let entries = [SendEntry::new(vec![0u8; 600])];
        let send = Send("q", &entries);
        let ops = [
            Outgoing::Request(Request::Ping { nonce: 1 }),
            send.outgoing().unwrap(),
        ];
        let mut buf = BytesMut::from(&b"queued"[..]);
        // The SEND is above a 512-byte frame limit: neither frame goes out.
        let err = encode_frames(&ops, &[1, 2], &mut buf, 512).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("frame limit of 512")),
            "{err}"
        );
        assert_eq!(&buf[..], b"queued");
        encode_frames(&ops, &[1, 2], &mut buf, 1024).unwrap();
        assert!(buf.len() > b"queued".len() + 600);
    }

    #[test]
    fn error_replies_become_errors() {
        let reply = Reply::Error(WireError::new(
            ErrorCode::QueueNotFound,
            "queue not found: q",
        ));
        let err = parse::<GetQueue>(Ok(reply)).unwrap_err();
        assert!(matches!(&err, Error::QueueNotFound(m) if m == "queue not found: q"));
    }

    #[test]
    fn a_reply_of_the_wrong_kind_is_a_protocol_violation() {
        let err = parse::<PurgeQueue>(Ok(Reply::Pong { nonce: 1 })).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Protocol: expected a PURGE_QUEUE reply, got PONG"
        );
    }

    #[test]
    fn per_entry_statuses_become_errors_in_place() {
        let reply = Reply::Send {
            results: vec![
                Ok(SendOutcome {
                    id: MessageId(7),
                    duplicate: true,
                }),
                Err(ErrorCode::QueueFull),
            ],
        };
        let results = parse::<Send>(Ok(reply)).unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].as_ref().unwrap().id, MessageId(7));
        assert!(matches!(results[1], Err(Error::QueueFull(_))));
        let reply = Reply::Delete {
            results: vec![Ok(()), Err(ErrorCode::StaleReceipt)],
        };
        let results = parse::<Delete>(Ok(reply)).unwrap();
        assert!(results[0].is_ok());
        assert!(results[1].as_ref().unwrap_err().is_lease_lost());
    }

    #[test]
    fn bad_names_fail_before_sending() {
        assert!(matches!(
            DeleteQueue("a b").request(),
            Err(Error::InvalidArgument(_))
        ));
        let list = |prefix| ListQueues {
            prefix,
            after: None,
        };
        assert!(list("").request().is_ok());
        assert!(matches!(
            list("a/").request(),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_listing_walks_pages_until_the_last() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(next_page(&names(&["a", "b"]), Some(true)), Some("b".into()));
        assert_eq!(next_page(&names(&["a", "b"]), Some(false)), None);
        // An older server's single reply, and a page that would not move on.
        assert_eq!(next_page(&names(&["a"]), None), None);
        assert_eq!(next_page(&[], Some(true)), None);
        let paged = ListQueues {
            prefix: "o",
            after: Some("ob"),
        };
        assert!(matches!(
            paged.request(),
            Ok(Request::ListQueues { ref after, .. }) if after.as_deref() == Some("ob")
        ));
    }

    #[test]
    fn receive_waits_extend_the_deadline_and_round_up() {
        let op = Receive("q", ReceiveOptions::new(3).wait(Duration::from_micros(10)));
        assert_eq!(op.extra_wait(), Duration::from_micros(10));
        let Ok(Request::Receive(r)) = op.request() else {
            panic!("a receive")
        };
        assert_eq!(r.wait_ms, Some(1));
        assert_eq!(r.visibility_timeout_ms, None);
        let op = Receive("q", ReceiveOptions::new(3));
        assert_eq!(op.extra_wait(), Duration::from_secs(20));
    }

    #[test]
    fn single_wants_exactly_one_result() {
        assert_eq!(single(vec![Ok::<u8, Error>(1)]).unwrap(), 1);
        assert!(matches!(single::<u8>(vec![]), Err(Error::Protocol(_))));
        assert!(matches!(
            single(vec![Ok::<u8, Error>(1), Ok(2)]),
            Err(Error::Protocol(m)) if m == "expected 1 result, got 2"
        ));
    }
}
