//! A session's first frame: HELLO, with the protocol version, the auth
//! token (a peer that keeps failing waits for its `Unauthorized`, see
//! `auth_guard.rs`) and the session timeout it asks for.

use bytes::BytesMut;
use sluice_protocol::limits::{
    PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, SESSION_TIMEOUT_MS_MAX, SESSION_TIMEOUT_MS_MIN,
};
use sluice_protocol::{ErrorCode, Frame, HelloRequest, Reply, Request, WireError, opcode};

use super::{Asked, EngineAccess, Phase, Session, SessionContext, shutting_down};

impl Session {
    pub(super) fn on_hello(
        &mut self,
        frame: Frame,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        if cx.draining {
            self.reply(frame.request_id, &shutting_down(), cx.stats);
            self.begin_close(cx.now_ns, engine);
            return;
        }
        if frame.opcode != opcode::HELLO {
            let name = opcode::name(frame.opcode).unwrap_or("an unknown opcode");
            let e = WireError::new(
                ErrorCode::HelloRequired,
                format!(
                    "the first frame must be HELLO (0x01), not {name} ({:#04x})",
                    frame.opcode
                ),
            );
            return self.protocol_error(frame.request_id, e, cx, engine);
        }
        // The version is the first two bytes of every version's HELLO:
        // checked before the rest, whose layout a later version may change.
        if let Some(v) = frame.payload.first_chunk::<2>() {
            let version = u16::from_le_bytes(*v);
            if !(PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION).contains(&version) {
                let e = WireError::new(
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "this server speaks protocol versions {PROTOCOL_VERSION_MIN} to \
                         {PROTOCOL_VERSION}, not {version}"
                    ),
                );
                return self.protocol_error(frame.request_id, e, cx, engine);
            }
        }
        let hello = match Request::decode(frame.opcode, frame.flags, frame.payload) {
            Ok(Request::Hello(h)) => h,
            Ok(_) => {
                let e = WireError::new(ErrorCode::Internal, "HELLO decoded as another request");
                return self.protocol_error(frame.request_id, e, cx, engine);
            }
            Err(e) => return self.protocol_error(frame.request_id, e.to_wire_error(), cx, engine),
        };
        if let Some(token) = &cx.config.auth_token {
            let ok = token.matches(&hello.token);
            let request_id = frame.request_id;
            self.ask(Asked::Auth {
                request_id,
                hello,
                ok,
            });
            return;
        }
        self.accept_hello(frame.request_id, &hello, cx, engine);
    }

    /// The server counted a HELLO's token check: a wrong token is answered
    /// `Unauthorized`, held `delay_ns` first (a peer that keeps failing is
    /// slowed down).
    pub(super) fn on_auth_outcome(
        &mut self,
        request_id: u32,
        hello: HelloRequest,
        ok: bool,
        delay_ns: u64,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        if ok {
            return self.accept_hello(request_id, &hello, cx, engine);
        }
        let e = WireError::new(
            ErrorCode::Unauthorized,
            if hello.token.is_empty() {
                "this server requires an auth token in HELLO"
            } else {
                "wrong auth token"
            },
        );
        if delay_ns == 0 {
            return self.protocol_error(request_id, e, cx, engine);
        }
        // Held: nothing more is read, and the reply and close come at the
        // first tick after the delay.
        self.inbuf = BytesMut::new();
        self.partial_since_ns = None;
        self.held = Some((cx.now_ns.saturating_add(delay_ns), request_id, e));
    }

    /// A HELLO whose token is good (or not needed): its session timeout is
    /// checked and the session becomes ready.
    fn accept_hello(
        &mut self,
        request_id: u32,
        hello: &HelloRequest,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        let timeout_ms = hello.session_timeout_ms;
        if timeout_ms != 0
            && !(SESSION_TIMEOUT_MS_MIN..=SESSION_TIMEOUT_MS_MAX).contains(&timeout_ms)
        {
            let e = WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "session_timeout_ms {timeout_ms} is out of range: 0 (none) or \
                     {SESSION_TIMEOUT_MS_MIN} to {SESSION_TIMEOUT_MS_MAX}"
                ),
            );
            return self.protocol_error(request_id, e, cx, engine);
        }
        self.session_timeout_ns = (timeout_ms != 0).then(|| u64::from(timeout_ms) * 1_000_000);
        self.version = hello.version;
        self.phase = Phase::Ready;
        self.decoder.set_frame_bytes_max(cx.config.frame_bytes_max);
        let mut reply = cx.config.hello.clone();
        // The version the client asked for: a version-1 client gets the
        // version-1 protocol.
        reply.version = hello.version;
        self.reply(request_id, &Reply::Hello(reply), cx.stats);
    }
}
