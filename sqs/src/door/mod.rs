//! The SQS actions: one HTTP request in ([`Door::call`]), engine requests
//! in the protocol's vocabulary out ([`Step::Engine`]), their replies back
//! in ([`Call::resume`]), and SQS's reply at the end ([`Step::Done`]).

mod attempts;
#[cfg(test)]
mod attempts_door_tests;
mod body;
mod errors;
mod fifo;
#[cfg(test)]
mod fifo_tests;
mod json_in;
mod md5;
mod message_attributes;
mod messages;
mod moves;
mod names;
mod query;
#[cfg(test)]
mod query_tests;
mod queue_memo;
mod queues;
mod seconds;
mod sources;
mod tags;
#[cfg(test)]
mod tests;
mod wire;
mod xml;

use crate::sync::{Arc, AtomicU64, Ordering};

use std::borrow::Cow;
use std::cell::RefCell;

use bytes::Bytes;
use serde_json::Value;
use sluice_protocol::{QueueName, Reply, Request};

use crate::http;
use crate::sigv4::Credentials;
use body::Body;
use errors::SqsError;
pub use moves::tasks::MoveStep;
use names::Namespace;
use wire::Input;

pub use queue_memo::QueueMemo;

/// Which limits the door enforces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Limits {
    /// SQS's own: 10 entries per batch, 1 MiB messages, whole seconds.
    #[default]
    Strict,
    /// sluice's larger ones where they differ: batches up to the engine's
    /// 1,024 entries.
    Relaxed,
}

/// What every call of the door shares.
#[derive(Clone, Debug)]
pub struct DoorConfig {
    /// The account of a request whose access key is not 12 digits
    /// (`--sqs-account`).
    pub account: String,
    /// The region of a request that names none.
    pub region: String,
    /// Strict or relaxed limits.
    pub limits: Limits,
    /// The access keys whose signatures the door checks
    /// (`--sqs-credentials`); `None` accepts any signature.
    pub credentials: Option<Credentials>,
    /// The door is served over TLS: queue URLs are `https://`.
    pub tls: bool,
}

impl Default for DoorConfig {
    fn default() -> Self {
        DoorConfig {
            account: "000000000000".to_owned(),
            region: "us-east-1".to_owned(),
            limits: Limits::Strict,
            credentials: None,
            tls: false,
        }
    }
}

/// The SQS door: shared by every shard (it is cheap to clone).
#[derive(Clone, Debug)]
pub struct Door {
    inner: Arc<DoorInner>,
}

#[derive(Debug)]
struct DoorInner {
    config: DoorConfig,
    /// Calls so far, for request ids.
    calls: AtomicU64,
    /// The message-move tasks.
    tasks: moves::SharedTasks,
    /// The receives a `ReceiveRequestAttemptId` can retry.
    attempts: attempts::Shared,
}

/// What the server does next for a call.
#[derive(Debug)]
pub enum Step {
    /// Submit this request to the engine and hand its reply to
    /// [`Call::resume`].
    Engine(Request),
    /// Write this response; the call is over.
    Done(Response),
}

/// A response to write with [`http::write_response`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Headers beside `Content-Length` and `Connection` (a value fixed in
    /// the code is borrowed, not copied).
    pub headers: Vec<(&'static str, Cow<'static, str>)>,
    /// The body.
    pub body: Bytes,
    /// The SQS error code when the call failed, for metrics.
    pub error: Option<&'static str>,
    /// Deletes of a receipt handle of an older delivery that succeeded
    /// without deleting (SQS's rule), for metrics.
    pub stale_deletes: u32,
}

macro_rules! actions {
    ($($name:ident),* $(,)?) => {
        /// An SQS action, by its name in `X-Amz-Target` or `Action=`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Action {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                $name,
            )*
            /// Any other name.
            Unknown,
        }

        impl Action {
            /// Every action, `Unknown` last.
            pub const ALL: &'static [Action] = &[$(Action::$name,)* Action::Unknown];

            /// The action named `name`.
            #[must_use]
            pub fn from_name(name: &str) -> Action {
                match name {
                    $(stringify!($name) => Action::$name,)*
                    _ => Action::Unknown,
                }
            }

            /// Its name (`Unknown` for any other).
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(Action::$name => stringify!($name),)*
                    Action::Unknown => "Unknown",
                }
            }
        }
    };
}

actions! {
    CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue,
    GetQueueAttributes, SetQueueAttributes, TagQueue, UntagQueue, ListQueueTags,
    SendMessage, SendMessageBatch, ReceiveMessage, DeleteMessage, DeleteMessageBatch,
    ChangeMessageVisibility, ChangeMessageVisibilityBatch,
    ListDeadLetterSourceQueues, StartMessageMoveTask, ListMessageMoveTasks,
    CancelMessageMoveTask, AddPermission, RemovePermission,
}

/// The protocol a request came in, which its reply speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0: `X-Amz-Target: AmazonSQS.<Action>`, JSON replies.
    Json,
    /// The query protocol: `Action=...` form-encoded, XML replies.
    Query,
}

impl Protocol {
    /// The protocol of `req`: the query protocol for a request without
    /// `X-Amz-Target` that is a form post or has `Action=` in its query.
    #[must_use]
    pub fn of(req: &http::Request) -> Protocol {
        if req.header("x-amz-target").is_some() {
            return Protocol::Json;
        }
        let form = req
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
        let action_in_query = req.query().split('&').any(|p| p.starts_with("Action="));
        if form || action_in_query {
            Protocol::Query
        } else {
            Protocol::Json
        }
    }
}

/// One SQS call in progress.
#[derive(Debug)]
pub struct Call {
    action: Action,
    protocol: Protocol,
    request_id: String,
    pending: Pending,
}

/// What a call waits for.
#[derive(Debug)]
enum Pending {
    /// Nothing: the call is over.
    Over,
    /// A queue action's engine reply.
    Queue(queues::Pending),
    /// A message action's engine reply.
    Message(messages::Pending),
    /// ListDeadLetterSourceQueues's next engine reply.
    Sources(sources::Sources),
    /// A tag action's engine reply.
    Tags(tags::Pending),
    /// A message-move task action's next engine reply.
    Moves(moves::Pending),
    /// A ReceiveMessage with an attempt id: its next engine reply.
    Attempt(Box<attempts::Pending>),
}

/// What starting an action gives: an engine request and what to do with
/// its reply, or the reply at once.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // built once and moved once per call
enum Started {
    Engine(Pending, Request),
    Reply(Value, u32),
}

/// What every action of a call reads.
#[derive(Debug)]
struct Ctx<'a> {
    /// The request's namespace.
    ns: Namespace,
    /// The `Host` header, for queue URLs ([`Ctx::host`]).
    host_header: &'a str,
    /// The door's configuration.
    config: &'a DoorConfig,
    /// The door (its address), for `memo`.
    door: usize,
    /// The queue the connection's last message action named.
    memo: RefCell<&'a mut QueueMemo>,
    /// The door's message-move tasks.
    tasks: &'a moves::SharedTasks,
    /// The door's receives a `ReceiveRequestAttemptId` can retry.
    attempts: &'a attempts::Shared,
    /// When the call started (Unix ms, wall clock).
    now_ms: u64,
}

impl Ctx<'_> {
    /// The scheme and the `Host` header (`http://HOST`), for queue URLs.
    fn host(&self) -> String {
        let scheme = if self.config.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.host_header)
    }

    /// The namespace, SQS name and engine queue of `input`'s `QueueUrl`:
    /// the URL's account in the request's region.
    fn queue(&self, input: &Input) -> Result<(Namespace, String, QueueName), SqsError> {
        let url = input.str("QueueUrl")?;
        let (account, name) = names::parse_url(url)?;
        let ns = Namespace::new(
            account,
            &self.ns.region,
            &self.config.account,
            &self.config.region,
        );
        let engine = self.engine_queue(account, name)?;
        Ok((ns, name.to_owned(), engine))
    }

    /// [`Ctx::queue`] without the namespace, for a message action: the
    /// engine queue and whether it is FIFO, from the connection's memo
    /// when it names the queue named last.
    fn queue_named(&self, input: &Input) -> Result<(bool, QueueName), SqsError> {
        let url = input.str("QueueUrl")?;
        let region = &self.ns.region;
        if let Some(known) = self.memo.borrow().get(self.door, url, region) {
            return Ok(known);
        }
        let (account, name) = names::parse_url(url)?;
        let engine = self.engine_queue(account, name)?;
        let fifo = names::is_fifo_name(name);
        self.memo
            .borrow_mut()
            .put(self.door, url, region, fifo, &engine);
        Ok((fifo, engine))
    }

    /// The engine queue of the SQS queue `name` of `account` in the
    /// request's region: no such queue for a name SQS would not take.
    fn engine_queue(&self, account: &str, name: &str) -> Result<QueueName, SqsError> {
        if names::check_sqs_name(name).is_err() {
            return Err(SqsError::no_queue());
        }
        let region = &self.ns.region;
        let default = account == self.config.account && *region == self.config.region;
        names::engine_queue(account, region, default, name)
    }

    /// The engine queue of a queue ARN (`arn:aws:sqs:REGION:ACCOUNT:NAME`,
    /// its name checked), or `None` when it is no such ARN.
    fn queue_of_arn(&self, arn: &str) -> Option<QueueName> {
        let (region, account, name) = names::parse_arn(arn)?;
        let ns = Namespace::new(account, region, &self.config.account, &self.config.region);
        ns.engine_name(name).ok()
    }

    /// The largest batch.
    fn batch_max(&self) -> usize {
        match self.config.limits {
            Limits::Strict => 10,
            Limits::Relaxed => sluice_protocol::limits::BATCH_ENTRIES_MAX,
        }
    }
}

/// A UUID-shaped id from `x` (a bijective mix, so distinct inputs give
/// distinct ids): 8-4-4-4-12 lower-case hex digits.
fn uuid_text(x: u128) -> crate::hex::HexText<36> {
    let b = x.to_be_bytes();
    let mut text = [b'-'; 36];
    // Digits at 0-7, 9-12, 14-17, 19-22 and 24-35; dashes between.
    for (at, part) in [
        (0, &b[0..4]),
        (9, &b[4..6]),
        (14, &b[6..8]),
        (19, &b[8..10]),
        (24, &b[10..16]),
    ] {
        crate::hex::hex_into(&mut text[at..], part);
    }
    crate::hex::HexText::from_ascii(text)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The success response with `body` (its JSON form), in `protocol`.
fn ok_response(
    protocol: Protocol,
    action: Action,
    request_id: &str,
    body: Body,
    stale_deletes: u32,
) -> Response {
    let (content_type, body) = match protocol {
        Protocol::Json => ("application/x-amz-json-1.0", body.to_json()),
        Protocol::Query => (
            "text/xml",
            xml::reply(action, &body.into_value(), request_id).into_bytes(),
        ),
    };
    Response {
        status: 200,
        headers: vec![
            ("x-amzn-RequestId", Cow::Owned(request_id.to_owned())),
            ("Content-Type", Cow::Borrowed(content_type)),
        ],
        body: Bytes::from(body),
        error: None,
        stale_deletes,
    }
}

/// The error response for `e`, in `protocol`.
fn error_response(protocol: Protocol, request_id: &str, e: &SqsError) -> Response {
    let mut headers = vec![("x-amzn-RequestId", Cow::Owned(request_id.to_owned()))];
    let body = match protocol {
        Protocol::Json => {
            headers.push(("Content-Type", Cow::Borrowed("application/x-amz-json-1.0")));
            headers.push(("x-amzn-query-error", Cow::Owned(e.query_error())));
            serde_json::json!({ "__type": e.json_type(), "message": e.message }).to_string()
        }
        Protocol::Query => {
            headers.push(("Content-Type", Cow::Borrowed("text/xml")));
            xml::error(e, request_id)
        }
    };
    Response {
        status: e.status(),
        headers,
        body: Bytes::from(body),
        error: Some(e.name),
        stale_deletes: 0,
    }
}

impl Door {
    /// A door with `config`.
    #[must_use]
    pub fn new(config: DoorConfig) -> Door {
        Door {
            inner: Arc::new(DoorInner {
                config,
                calls: AtomicU64::new(0),
                tasks: moves::SharedTasks::default(),
                attempts: attempts::Shared::default(),
            }),
        }
    }

    /// The door's configuration.
    #[must_use]
    pub fn config(&self) -> &DoorConfig {
        &self.inner.config
    }

    /// The next due step of a message-move task at `now_unix_ms`, for the
    /// server to run on the engine and hand back to [`Door::move_done`].
    #[must_use]
    pub fn next_move(&self, now_unix_ms: u64) -> Option<MoveStep> {
        self.inner.tasks.with(|t| t.next_step(now_unix_ms))
    }

    /// The engine's `reply` to `step`'s request.
    pub fn move_done(&self, task: u64, asked: u32, reply: &Reply) {
        self.inner.tasks.with(|t| t.step_done(task, asked, reply));
    }

    /// When a message-move task's next step is due (wall clock, Unix ms),
    /// if one waits: one atomic load, cheap enough for every turn of a
    /// shard's loop.
    #[must_use]
    pub fn next_move_due_ms(&self) -> Option<u64> {
        self.inner.tasks.due_ms()
    }

    fn request_id(&self, now_unix_ms: u64) -> String {
        let n = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let hi = mix(n ^ now_unix_ms.rotate_left(32));
        uuid_text((u128::from(hi) << 64) | u128::from(mix(n))).to_string()
    }

    /// The request's namespace: with credentials, the account of the key
    /// whose signature checks out (or SQS's error); without, the signer's
    /// account and region when it is signed (any signature is accepted),
    /// else the door's.
    fn namespace(&self, req: &http::Request, now_unix_ms: u64) -> Result<Namespace, SqsError> {
        let config = &self.inner.config;
        let identity = match &config.credentials {
            Some(creds) => match crate::sigv4::verify(req, creds, now_unix_ms) {
                Ok(id) => Some(id),
                Err(e) => return Err(SqsError::new(e.code(), e.to_string())),
            },
            None => crate::sigv4::identity(req),
        };
        let (account, region) = match &identity {
            Some(id) => (
                id.account.as_deref().unwrap_or(&config.account),
                if id.region.is_empty() {
                    config.region.as_str()
                } else {
                    id.region.as_str()
                },
            ),
            None => (config.account.as_str(), config.region.as_str()),
        };
        Ok(Namespace::new(
            account,
            region,
            &config.account,
            &config.region,
        ))
    }

    /// Starts the call `req` asks for, at `now_unix_ms` (wall clock).
    #[must_use]
    pub fn call(&self, req: &http::Request, now_unix_ms: u64) -> (Call, Step) {
        self.call_remembering(req, now_unix_ms, &mut QueueMemo::default())
    }

    /// [`Door::call`] for a request of a connection whose `memo` holds the
    /// queue its last message action named (see [`QueueMemo`]); the memo
    /// belongs to the connection, and learns the queue this call names.
    #[must_use]
    pub fn call_remembering(
        &self,
        req: &http::Request,
        now_unix_ms: u64,
        memo: &mut QueueMemo,
    ) -> (Call, Step) {
        let request_id = self.request_id(now_unix_ms);
        let protocol = Protocol::of(req);
        // The action, its name and the input, or why it cannot be read.
        let (action, name, input) = match protocol {
            Protocol::Json => match req.header("x-amz-target") {
                Some(target) => (
                    target
                        .strip_prefix("AmazonSQS.")
                        .map_or(Action::Unknown, Action::from_name),
                    target.to_owned(),
                    Input::parse(&req.body),
                ),
                None => (
                    Action::Unknown,
                    String::new(),
                    Err(SqsError::new(
                        "InvalidAction",
                        "The request names no action: it needs the header X-Amz-Target: AmazonSQS.<Action> (or, in the query protocol, the parameter Action).",
                    )),
                ),
            },
            Protocol::Query => match query::read(req) {
                Ok((name, input)) => (Action::from_name(&name), name, Ok(input)),
                Err(e) => (Action::Unknown, String::new(), Err(e)),
            },
        };
        let mut call = Call {
            action,
            protocol,
            request_id,
            pending: Pending::Over,
        };
        let step = match self.start(req, &name, action, input, now_unix_ms, memo) {
            Ok(Started::Engine(pending, request)) => {
                call.pending = pending;
                Step::Engine(request)
            }
            Ok(Started::Reply(body, stale)) => Step::Done(ok_response(
                protocol,
                action,
                &call.request_id,
                Body::Value(body),
                stale,
            )),
            Err(e) => Step::Done(error_response(protocol, &call.request_id, &e)),
        };
        (call, step)
    }

    fn start(
        &self,
        req: &http::Request,
        name: &str,
        action: Action,
        input: Result<Input, SqsError>,
        now_unix_ms: u64,
        memo: &mut QueueMemo,
    ) -> Result<Started, SqsError> {
        // The signature first: an unsigned caller learns nothing of the
        // request's other faults.
        let ns = self.namespace(req, now_unix_ms)?;
        // Then what the action is (an empty name: the request names none),
        // then its input.
        let unsupported = || {
            SqsError::new(
                "InvalidAction",
                format!("The action {name} is not valid for this endpoint."),
            )
        };
        if action == Action::Unknown && !name.is_empty() {
            return Err(unsupported());
        }
        let input = input?;
        let ctx = Ctx {
            ns,
            host_header: req.header("host").unwrap_or("localhost"),
            config: &self.inner.config,
            door: Arc::as_ptr(&self.inner) as usize,
            memo: RefCell::new(memo),
            tasks: &self.inner.tasks,
            attempts: &self.inner.attempts,
            now_ms: now_unix_ms,
        };
        match action {
            Action::CreateQueue
            | Action::GetQueueUrl
            | Action::ListQueues
            | Action::DeleteQueue
            | Action::PurgeQueue
            | Action::GetQueueAttributes
            | Action::SetQueueAttributes => queues::start(&ctx, action, &input),
            Action::ReceiveMessage => attempts::start_receive(&ctx, &input),
            Action::SendMessage
            | Action::SendMessageBatch
            | Action::DeleteMessage
            | Action::DeleteMessageBatch
            | Action::ChangeMessageVisibility
            | Action::ChangeMessageVisibilityBatch => messages::start(&ctx, action, &input),
            Action::TagQueue | Action::UntagQueue | Action::ListQueueTags => {
                tags::start(&ctx, action, &input)
            }
            Action::ListDeadLetterSourceQueues => sources::start(&ctx, &input),
            Action::StartMessageMoveTask
            | Action::ListMessageMoveTasks
            | Action::CancelMessageMoveTask => moves::start(&ctx, action, &input),
            _ => Err(unsupported()),
        }
    }
}

impl Call {
    /// The action.
    #[must_use]
    pub fn action(&self) -> Action {
        self.action
    }

    /// The request id (`x-amzn-RequestId`).
    #[must_use]
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The engine's `reply` to the last [`Step::Engine`]; the next step
    /// (another engine request for a call that takes several, such as
    /// ListDeadLetterSourceQueues). A call that is over answers
    /// `InternalError`.
    pub fn resume(&mut self, reply: Reply, now_unix_ms: u64) -> Step {
        let result = match core::mem::replace(&mut self.pending, Pending::Over) {
            Pending::Over => Err(SqsError::new(
                "InternalError",
                "an engine reply to a call that is over",
            )),
            Pending::Queue(p) => p.finish(reply).map(|(v, s)| (Body::Value(v), s)),
            Pending::Message(p) => p.finish(reply),
            Pending::Tags(p) => p.finish(reply).map(|(v, s)| (Body::Value(v), s)),
            Pending::Moves(m) => match m.step(reply, now_unix_ms) {
                Ok(moves::Next::Engine(m, request)) => {
                    self.pending = Pending::Moves(m);
                    return Step::Engine(request);
                }
                Ok(moves::Next::Done(body)) => Ok((Body::Value(body), 0)),
                Err(e) => Err(e),
            },
            Pending::Attempt(a) => match a.step(reply, now_unix_ms) {
                Ok(attempts::Next::Engine(a, request)) => {
                    self.pending = Pending::Attempt(a);
                    return Step::Engine(request);
                }
                Ok(attempts::Next::Done(body)) => Ok((Body::Value(body), 0)),
                Err(e) => Err(e),
            },
            Pending::Sources(mut s) => match s.step(reply) {
                Ok(sources::Next::Engine(request)) => {
                    self.pending = Pending::Sources(s);
                    return Step::Engine(request);
                }
                Ok(sources::Next::Done(body)) => Ok((Body::Value(body), 0)),
                Err(e) => Err(e),
            },
        };
        match result {
            Ok((body, stale)) => Step::Done(ok_response(
                self.protocol,
                self.action,
                &self.request_id,
                body,
                stale,
            )),
            Err(e) => Step::Done(error_response(self.protocol, &self.request_id, &e)),
        }
    }
}
