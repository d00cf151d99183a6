//! Helpers for the server tests: an in-process server on 127.0.0.1 port 0,
//! and a small blocking client that speaks raw frames with the protocol
//! crate (pipelining included).
//!
//! Every test body takes the io backend and runs once per backend through
//! [`both_backends!`]. Where io_uring is unavailable the uring run prints a
//! skip line, and fails when `CI=true`.

#![allow(dead_code, reason = "each test module uses a different part")]

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_broker::server::ServerHandle;
use sluice_broker::server::config::{Config, IoChoice};
use sluice_broker::testing;
use sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT;
use sluice_protocol::{
    AttributeUpdate, ErrorCode, Frame, FrameDecoder, HelloReply, HelloRequest, QueueName,
    QueueStats, Receipt, ReceiveRequest, ReceivedMessage, Reply, Request, SendEntry, SendOutcome,
    SendRequest, ServerStatsReply, WireError,
};

/// How long any single read waits before the test fails: far above what
/// anything here needs.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs each named test body `fn(IoChoice)` once on io_uring and once on
/// epoll, as `<name>::uring` and `<name>::epoll`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn uring() {
                    super::$name(sluice_broker::server::config::IoChoice::Uring);
                }
                #[test]
                fn epoll() {
                    super::$name(sluice_broker::server::config::IoChoice::Epoll);
                }
            }
        )*
    };
}

/// A configuration for a test server (`sluice_broker::testing`'s defaults:
/// loopback port 0, metrics off, one shard), the given backend, then `args`
/// (which may override those).
pub fn config(io: IoChoice, args: &[&str]) -> Config {
    testing::TestServer::builder().io(io).args(args).config()
}

/// An in-process server (`sluice_broker::testing`), with raw-frame clients.
pub struct TestServer {
    pub server: testing::TestServer,
    pub addr: SocketAddr,
    pub io: IoChoice,
}

impl TestServer {
    /// The running server.
    pub fn handle(&self) -> &ServerHandle {
        self.server.handle()
    }

    /// A connected client that completed HELLO.
    pub fn client(&self) -> Client {
        let mut c = Client::connect(self.addr);
        c.hello(b"").expect("HELLO accepted");
        c
    }

    /// A client that completed HELLO, or `None` if the server refused it.
    pub fn try_client(&self) -> Option<Client> {
        let mut c = Client::connect(self.addr);
        c.hello(b"").ok().map(|_| c)
    }

    /// Shuts the server down and waits for it.
    pub fn stop(&mut self) {
        self.server.stop();
    }
}

/// Starts a server with [`config`]`(io, args)` and checks, through
/// SERVER_STATS, that it runs on that backend. `None` (after a skip line)
/// when io_uring was asked for and is unavailable, unless `CI=true`, where
/// that fails the test.
pub fn start(io: IoChoice, args: &[&str]) -> Option<TestServer> {
    let server = testing::TestServer::builder()
        .io(io)
        .args(args)
        .start_or_skip()?;
    let server = TestServer {
        addr: server.addr(),
        io,
        server,
    };
    let stats = server.client().server_stats();
    let expected = match io {
        IoChoice::Uring => "io_uring",
        IoChoice::Epoll => "epoll",
        IoChoice::Auto => stats.io_backend.as_str(),
    };
    assert_eq!(stats.io_backend, expected, "SERVER_STATS names the backend");
    Some(server)
}

/// A blocking client speaking raw frames.
pub struct Client {
    pub stream: TcpStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    next_id: u32,
    /// Replies read while waiting for another one, by request id.
    early: HashMap<u32, Reply>,
}

impl Client {
    /// Connects (no HELLO yet).
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect to the test server");
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: BytesMut::new(),
            decoder: FrameDecoder::new(FRAME_BYTES_MAX_LIMIT),
            next_id: 1,
            early: HashMap::new(),
        }
    }

    /// Sends HELLO with `token`; the HELLO reply, or the ERROR (an ERROR
    /// with request id 0, such as `TooManyConnections`, counts; so does the
    /// server closing first, as `Internal`).
    pub fn hello(&mut self, token: &[u8]) -> Result<HelloReply, WireError> {
        self.hello_with(HelloRequest {
            version: 1,
            token: Bytes::copy_from_slice(token),
            session_timeout_ms: 0,
        })
    }

    /// Sends a HELLO of protocol `version` without a token; panics unless it
    /// is accepted at that version.
    pub fn hello_version(&mut self, version: u16) {
        let reply = self
            .hello_with(HelloRequest {
                version,
                token: Bytes::new(),
                session_timeout_ms: 0,
            })
            .expect("HELLO accepted");
        assert_eq!(reply.version, version);
    }

    /// GET_QUEUE of `queue`, read as raw bytes: the attribute block's
    /// present mask (a version's decoder would refuse a bit it does not
    /// know, so a test of what an older client receives reads the bits).
    pub fn get_queue_present_mask(&mut self, queue: &str) -> u16 {
        self.send(&Request::GetQueue { queue: name(queue) });
        let frame = self.read_frame().expect("a GET_QUEUE reply");
        assert_eq!(
            frame.opcode,
            sluice_protocol::frame::opcode::GET_QUEUE_REPLY
        );
        // The attribute block follows the queue name (u8 length, then bytes).
        let payload = &frame.payload[..];
        let at = 1 + usize::from(payload[0]);
        u16::from_le_bytes([payload[at], payload[at + 1]])
    }

    /// Sends this HELLO; as [`Client::hello`].
    pub fn hello_with(&mut self, hello: HelloRequest) -> Result<HelloReply, WireError> {
        let id = self.send(&Request::Hello(hello));
        let Some(f) = self.read_frame() else {
            return Err(WireError::new(
                ErrorCode::Internal,
                "closed before the HELLO reply",
            ));
        };
        let got = f.request_id;
        match Reply::decode(f.opcode, f.payload).expect("reply decodes") {
            Reply::Hello(h) if got == id => Ok(h),
            Reply::Error(e) if got == id || got == 0 => Err(e),
            other => panic!("HELLO answered {other:?} (request id {got})"),
        }
    }

    /// Writes raw bytes.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to the server");
    }

    /// Sends `request` without waiting; returns its request id.
    pub fn send(&mut self, request: &Request) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = BytesMut::new();
        request.encode(id, &mut out).expect("request encodes");
        self.write_raw(&out);
        id
    }

    /// The next frame, or `None` at the end of the stream.
    pub fn read_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = self.decoder.decode(&mut self.buf).expect("server framing") {
                return Some(f);
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
                // A signal meant for another test of this process (write_all
                // retries these itself).
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("read from the server: {e}"),
            }
        }
    }

    /// The next reply and its request id; panics at the end of the stream.
    pub fn read_reply(&mut self) -> (u32, Reply) {
        let f = self
            .read_frame()
            .expect("a reply, not the end of the stream");
        let reply = Reply::decode(f.opcode, f.payload).expect("reply decodes");
        (f.request_id, reply)
    }

    /// The reply to request `id` (keeping others that come first).
    pub fn wait(&mut self, id: u32) -> Reply {
        if let Some(r) = self.early.remove(&id) {
            return r;
        }
        for _ in 0..100_000 {
            let (got, reply) = self.read_reply();
            if got == id {
                return reply;
            }
            self.early.insert(got, reply);
        }
        panic!("no reply to request {id}");
    }

    /// Sends `request` and waits for its reply.
    pub fn call(&mut self, request: Request) -> Reply {
        let id = self.send(&request);
        self.wait(id)
    }

    /// Reads until the server closes the connection; the frames it sent
    /// first. Panics if the server keeps it open past [`READ_TIMEOUT`].
    pub fn read_until_closed(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        for _ in 0..100_000 {
            match self.read_frame() {
                Some(f) => frames.push(f),
                None => return frames,
            }
        }
        panic!("the server kept sending");
    }

    /// PING round trip.
    pub fn ping(&mut self) {
        match self.call(Request::Ping { nonce: 42 }) {
            Reply::Pong { nonce: 42 } => {}
            other => panic!("PING answered {other:?}"),
        }
    }

    /// SERVER_STATS.
    pub fn server_stats(&mut self) -> ServerStatsReply {
        match self.call(Request::ServerStats) {
            Reply::ServerStats(s) => s,
            other => panic!("SERVER_STATS answered {other:?}"),
        }
    }

    /// Creates `queue` with `attributes`.
    pub fn create(&mut self, queue: &str, attributes: AttributeUpdate) {
        match self.call(Request::CreateQueue(
            sluice_protocol::QueueAttributesRequest {
                queue: name(queue),
                attributes,
            },
        )) {
            Reply::CreateQueue { .. } => {}
            other => panic!("CREATE_QUEUE {queue} answered {other:?}"),
        }
    }

    /// Sends entries; per-entry results.
    pub fn send_entries(
        &mut self,
        queue: &str,
        entries: &[SendEntry],
    ) -> Vec<Result<SendOutcome, ErrorCode>> {
        let req = SendRequest::new(name(queue), entries).expect("send request");
        match self.call(Request::Send(req)) {
            Reply::Send { results } => results,
            other => panic!("SEND answered {other:?}"),
        }
    }

    /// Sends one body; its outcome.
    pub fn send_body(&mut self, queue: &str, body: &str) -> SendOutcome {
        let r = self.send_entries(
            queue,
            &[SendEntry::new(Bytes::copy_from_slice(body.as_bytes()))],
        );
        r[0].expect("send accepted")
    }

    /// A RECEIVE request.
    pub fn receive_request(
        queue: &str,
        max: u16,
        visibility_timeout_ms: Option<u32>,
        wait_ms: u32,
    ) -> Request {
        Request::Receive(ReceiveRequest {
            queue: name(queue),
            max_messages: max,
            visibility_timeout_ms,
            wait_ms: Some(wait_ms),
            bind_leases: false,
            with_source: false,
        })
    }

    /// Receives binding the leases to the connection; the messages.
    pub fn receive_bound(
        &mut self,
        queue: &str,
        max: u16,
        visibility_timeout_ms: Option<u32>,
        wait_ms: u32,
    ) -> Vec<ReceivedMessage> {
        let mut request = Self::receive_request(queue, max, visibility_timeout_ms, wait_ms);
        if let Request::Receive(r) = &mut request {
            r.bind_leases = true;
        }
        match self.call(request) {
            Reply::Receive { messages } => messages.to_messages(),
            other => panic!("RECEIVE answered {other:?}"),
        }
    }

    /// A counter of SERVER_STATS (0 when absent).
    pub fn server_counter(&mut self, name: &str) -> u64 {
        self.server_stats()
            .counters
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.value)
    }

    /// Receives; the messages (panics on an error).
    pub fn receive(
        &mut self,
        queue: &str,
        max: u16,
        visibility_timeout_ms: Option<u32>,
        wait_ms: u32,
    ) -> Vec<ReceivedMessage> {
        match self.call(Self::receive_request(
            queue,
            max,
            visibility_timeout_ms,
            wait_ms,
        )) {
            Reply::Receive { messages } => messages.to_messages(),
            other => panic!("RECEIVE answered {other:?}"),
        }
    }

    /// Deletes by receipts; per-entry results.
    pub fn delete(&mut self, queue: &str, receipts: &[Receipt]) -> Vec<Result<(), ErrorCode>> {
        match self.call(Request::Delete(sluice_protocol::DeleteRequest {
            queue: name(queue),
            receipts: receipts.to_vec(),
        })) {
            Reply::Delete { results } => results,
            other => panic!("DELETE answered {other:?}"),
        }
    }

    /// GET_QUEUE's counters.
    pub fn stats(&mut self, queue: &str) -> QueueStats {
        match self.call(Request::GetQueue { queue: name(queue) }) {
            Reply::GetQueue(info) => info.stats,
            other => panic!("GET_QUEUE answered {other:?}"),
        }
    }
}

/// A queue name.
pub fn name(s: &str) -> QueueName {
    QueueName::new(s).expect("valid queue name")
}

/// The ERROR frame's code and message, if `frame` is one.
pub fn error_of(frame: &Frame) -> Option<WireError> {
    match Reply::decode(frame.opcode, frame.payload.clone()) {
        Ok(Reply::Error(e)) => Some(e),
        _ => None,
    }
}

/// Polls `f` every 10 ms until it returns `Some`, for at most `limit`.
pub fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The resident set size of this process, bytes (from /proc/self/status).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS line")
}

/// Default attributes (every one takes the queue default).
pub fn attrs() -> AttributeUpdate {
    AttributeUpdate::default()
}

/// A `--sqs-credentials` file in a folder of its own, removed on drop.
pub struct CredentialsFile {
    dir: std::path::PathBuf,
    /// Its path, as the flag takes it.
    pub path: String,
}

impl CredentialsFile {
    /// A file holding `text`, named after `tag` (the test, the backend).
    pub fn new(tag: &str, text: &str) -> CredentialsFile {
        let dir = std::env::temp_dir().join(format!("sluice-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let file = dir.join("credentials");
        std::fs::write(&file, text).expect("the credentials file");
        CredentialsFile {
            path: file.display().to_string(),
            dir,
        }
    }
}

impl Drop for CredentialsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
