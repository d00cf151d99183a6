//! The SQS API of sluice, sans-IO: a second front door onto the same
//! engine as the binary protocol.
//!
//! - [`http`]: HTTP/1.1 request parsing (on `httparse`) and response
//!   writing, with limits; bytes in, a parsed request out, no sockets.
//! - [`sigv4`]: who signed a request (AWS Signature Version 4's credential
//!   scope), for the account and region a request is served in.
//! - [`Door`]: an SQS action (AWS JSON 1.0 or the query protocol) to one
//!   or more engine requests in the protocol's vocabulary
//!   ([`sluice_protocol::Request`]), and the engine's replies to SQS's
//!   reply body.
//!
//! The server wires them: it feeds bytes to [`http::parse`], the request to
//! [`Door::call`], each [`Step::Engine`] request to the engine and its
//! reply to [`Call::resume`], until a [`Step::Done`] response, which
//! [`http::write_response`] turns into bytes.

#![forbid(unsafe_code)]

pub mod http;
pub mod sigv4;

mod door;
mod hex;
mod sync;

pub use door::{Action, Call, Door, DoorConfig, Limits, MoveStep, QueueMemo, Response, Step};
