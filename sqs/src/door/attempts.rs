//! `ReceiveRequestAttemptId`: a ReceiveMessage on a FIFO queue that is
//! retried with the same attempt id within five minutes returns the same
//! messages, with the same receipt handles, and their visibility timeout
//! starts again, as SQS does for a client whose first reply was lost.
//!
//! The door remembers, for each (queue, attempt id) whose receive returned
//! messages, their receipts, the visibility timeout they were leased for
//! and the reply. A retry asks the engine to lease those receipts again
//! for that timeout (a change of visibility):
//! - if every one is still leased under its receipt, the retry answers
//!   the remembered reply;
//! - if any is not (deleted, leased again by another receive after its
//!   lease ran out, its queue gone), the retry does not fit cleanly and is
//!   a new receive, remembered in place of the old one. Those of its
//!   messages still leased stay leased, as the first receive left them.
//!
//! A DeleteMessage or ChangeMessageVisibility through the door on one of
//! a remembered receive's receipts forgets that receive: SQS serves a retry
//! only while none of its messages was changed.
//!
//! The memory is bounded: at most [`ATTEMPT_BYTES_MAX`] of remembered
//! replies (the oldest are forgotten first), each for
//! [`ATTEMPT_WINDOW_MS`].

use std::collections::{HashMap, VecDeque};
use std::sync::PoisonError;

use serde_json::Value;
use sluice_protocol::{
    ChangeVisibilityRequest, QueueName, Receipt, ReceiveRequest, Reply, Request, VisibilityChange,
};

use super::errors::SqsError;
use super::wire::Input;
use super::{Ctx, Started, messages, names};
use crate::sync::{Arc, AtomicU64, Mutex, MutexGuard, Ordering};

/// How long a receive can be retried (SQS's five minutes).
pub(crate) const ATTEMPT_WINDOW_MS: u64 = 5 * 60 * 1000;

/// The most bytes of remembered replies the door keeps.
pub(crate) const ATTEMPT_BYTES_MAX: usize = 64 << 20;

/// Most characters of an attempt id.
const ATTEMPT_ID_CHARS_MAX: usize = 128;

/// Checks a `ReceiveRequestAttemptId`: 1 to 128 letters, digits and
/// punctuation, as SQS has it.
pub(crate) fn check_attempt_id(id: &str) -> Result<(), SqsError> {
    let ok = (1..=ATTEMPT_ID_CHARS_MAX).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b.is_ascii_punctuation());
    if ok {
        Ok(())
    } else {
        Err(SqsError::invalid(
            "Value for parameter ReceiveRequestAttemptId is invalid. Reason: it must be 1 to 128 \
             characters, each a letter, a digit or punctuation.",
        ))
    }
}

/// A remembered receive.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Remembered {
    /// The receipts it delivered, in the reply's order.
    pub receipts: Vec<Receipt>,
    /// The visibility timeout they were leased for.
    pub visibility_ms: u32,
    /// Its reply.
    pub reply: Value,
}

type Key = (QueueName, String);

#[derive(Debug)]
struct Entry {
    remembered: Remembered,
    /// When the retry window ends (Unix ms).
    until_ms: u64,
    /// Which remembering this is (an entry replaced under its key gets a
    /// new one), so that `order` can skip the ones replaced.
    serial: u64,
    bytes: usize,
}

/// The remembered receives (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    map: HashMap<Key, Entry>,
    /// Which key holds each receipt remembered.
    by_receipt: HashMap<Receipt, Key>,
    /// Keys in the order they were remembered, with their serials.
    order: VecDeque<(Key, u64)>,
    bytes: usize,
    serial: u64,
}

/// The door's attempts, shared by the shards.
#[derive(Debug)]
pub(crate) struct SharedAttempts {
    attempts: Mutex<Attempts>,
    /// Receives remembered, readable without the lock: a delete or a
    /// change of visibility takes the lock only when some are. Written
    /// with the lock held, after every change.
    remembered: AtomicU64,
}

impl Default for SharedAttempts {
    fn default() -> SharedAttempts {
        SharedAttempts {
            attempts: Mutex::new(Attempts::default()),
            remembered: AtomicU64::new(0),
        }
    }
}

impl SharedAttempts {
    /// Runs `f` on the attempts, under their lock.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Attempts) -> R) -> R {
        let mut attempts: MutexGuard<'_, Attempts> =
            self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let r = f(&mut attempts);
        self.remembered
            .store(attempts.map.len() as u64, Ordering::Release);
        r
    }

    /// The messages of `receipts` were changed (deleted, or their
    /// visibility changed) through the door: the receives that delivered
    /// them are forgotten.
    pub(crate) fn changed(&self, receipts: impl IntoIterator<Item = Receipt>) {
        if self.remembered.load(Ordering::Acquire) == 0 {
            return;
        }
        self.with(|a| {
            for r in receipts {
                a.changed(&r);
            }
        });
    }
}

/// A handle on the door's attempts.
pub(crate) type Shared = Arc<SharedAttempts>;

impl Attempts {
    /// The receive remembered under (`queue`, `id`), if its window is open
    /// at `now_ms`.
    pub fn find(&mut self, queue: &QueueName, id: &str, now_ms: u64) -> Option<Remembered> {
        self.expire(now_ms);
        let key = (queue.clone(), id.to_owned());
        self.map.get(&key).map(|e| e.remembered.clone())
    }

    /// Remembers a receive under (`queue`, `id`) from `now_ms`, in place
    /// of any before. A receive that returned nothing is not remembered
    /// (and forgets the one before): its retry receives afresh.
    pub fn remember(&mut self, queue: QueueName, id: String, now_ms: u64, r: Remembered) {
        self.expire(now_ms);
        let key = (queue, id);
        self.forget(&key);
        if r.receipts.is_empty() {
            return;
        }
        let bytes = r.reply.to_string().len() + key.1.len() + 64 * r.receipts.len();
        self.serial += 1;
        for receipt in &r.receipts {
            self.by_receipt.insert(*receipt, key.clone());
        }
        self.order.push_back((key.clone(), self.serial));
        self.bytes += bytes;
        self.map.insert(
            key,
            Entry {
                remembered: r,
                until_ms: now_ms.saturating_add(ATTEMPT_WINDOW_MS),
                serial: self.serial,
                bytes,
            },
        );
        // Keys replaced or forgotten linger in the order until they reach
        // its front; past twice the live ones, they go at once.
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(k, serial)| map.get(k).is_some_and(|e| e.serial == *serial));
        }
        self.forget_oldest_while(|_, bytes| bytes > ATTEMPT_BYTES_MAX);
    }

    /// A message of `receipt` was changed (deleted, or its visibility
    /// changed): the receive that delivered it, if remembered, is forgotten.
    pub fn changed(&mut self, receipt: &Receipt) {
        if let Some(key) = self.by_receipt.get(receipt).cloned() {
            self.forget(&key);
        }
    }

    /// Receives remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    fn forget(&mut self, key: &Key) {
        if let Some(e) = self.map.remove(key) {
            self.bytes -= e.bytes;
            for receipt in &e.remembered.receipts {
                if self.by_receipt.get(receipt) == Some(key) {
                    self.by_receipt.remove(receipt);
                }
            }
        }
    }

    /// Forgets the receives whose window ended by `now_ms`: the oldest
    /// first, as they were remembered (every window is as long).
    fn expire(&mut self, now_ms: u64) {
        self.forget_oldest_while(|e, _| e.until_ms <= now_ms);
    }

    /// Forgets receives from the oldest remembered on, while `go` says so
    /// of the oldest and the bytes held.
    fn forget_oldest_while(&mut self, go: impl Fn(&Entry, usize) -> bool) {
        while let Some((key, serial)) = self.order.front() {
            match self.map.get(key) {
                Some(e) if e.serial == *serial => {
                    if !go(e, self.bytes) {
                        return;
                    }
                    let key = key.clone();
                    self.forget(&key);
                }
                // Replaced or forgotten since.
                _ => {}
            }
            self.order.pop_front();
        }
    }
}

/// A ReceiveMessage with an attempt id, on a FIFO queue, waiting for the
/// engine.
#[derive(Debug)]
pub(crate) struct Pending {
    attempts: Shared,
    id: String,
    /// The receive to make, its visibility timeout set once known.
    receive: ReceiveRequest,
    /// What turns the receive's reply into SQS's.
    reply: messages::Pending,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Asking for the queue's visibility timeout, for a receive that sets
    /// none (a retry leases for the same time again).
    Learning,
    /// Leasing a remembered receive's messages again.
    Retrying(Remembered),
    /// Receiving (afresh).
    Receiving,
}

/// What a step gives.
#[derive(Debug)]
pub(crate) enum Next {
    /// Another engine request.
    Engine(Box<Pending>, Request),
    /// SQS's reply.
    Done(Value),
}

/// Starts a ReceiveMessage: with its attempt id, on a FIFO queue, as the
/// [module docs](self) say; as a plain receive otherwise (SQS acts on an
/// attempt id on a FIFO queue only).
pub(crate) fn start_receive(ctx: &Ctx<'_>, input: &Input) -> Result<Started, SqsError> {
    let (name, request, reply) = messages::receive(ctx, input)?;
    let attempt = input.opt_str("ReceiveRequestAttemptId")?;
    if let Some(id) = attempt {
        check_attempt_id(id)?;
    }
    match attempt.filter(|_| names::is_fifo_name(&name)) {
        Some(id) => Ok(start(ctx, id, request, reply)),
        None => Ok(Started::Engine(
            super::Pending::Message(reply),
            Request::Receive(request),
        )),
    }
}

/// Starts ReceiveMessage `receive` with attempt id `id` on a FIFO queue;
/// `reply` finishes its reply.
fn start(ctx: &Ctx<'_>, id: &str, receive: ReceiveRequest, reply: messages::Pending) -> Started {
    let remembered = ctx
        .attempts
        .with(|a| a.find(&receive.queue, id, ctx.now_ms));
    let mut pending = Pending {
        attempts: ctx.attempts.clone(),
        id: id.to_owned(),
        receive,
        reply,
        stage: Stage::Receiving,
    };
    let request = match remembered {
        Some(r) => {
            let request = Request::ChangeVisibility(ChangeVisibilityRequest {
                queue: pending.receive.queue.clone(),
                entries: r
                    .receipts
                    .iter()
                    .map(|&receipt| VisibilityChange {
                        receipt,
                        visibility_timeout_ms: r.visibility_ms,
                    })
                    .collect(),
            });
            pending.stage = Stage::Retrying(r);
            request
        }
        None if pending.receive.visibility_timeout_ms.is_none() => {
            pending.stage = Stage::Learning;
            Request::GetQueue {
                queue: pending.receive.queue.clone(),
            }
        }
        None => Request::Receive(pending.receive.clone()),
    };
    Started::Engine(super::Pending::Attempt(Box::new(pending)), request)
}

impl Pending {
    /// The next step after the engine's `reply`, at `now_ms`.
    pub(crate) fn step(self: Box<Self>, reply: Reply, now_ms: u64) -> Result<Next, SqsError> {
        let mut this = *self;
        let stage = core::mem::replace(&mut this.stage, Stage::Receiving);
        match (stage, reply) {
            (_, Reply::Error(e)) => Err(SqsError::from_engine(&e, false)),
            (Stage::Learning, Reply::GetQueue(info)) => {
                this.receive.visibility_timeout_ms = Some(info.attributes.visibility_timeout.get());
                Ok(this.receiving())
            }
            (Stage::Retrying(r), Reply::ChangeVisibility { results }) => {
                if results.len() == r.receipts.len() && results.iter().all(Result::is_ok) {
                    return Ok(Next::Done(r.reply));
                }
                // Not every message is still leased under its receipt: a
                // new receive, for the first one's timeout when it set
                // none (the queue's then).
                this.receive
                    .visibility_timeout_ms
                    .get_or_insert(r.visibility_ms);
                Ok(this.receiving())
            }
            (Stage::Receiving, Reply::Receive { messages }) => {
                let receipts = messages.iter().map(|m| m.receipt).collect();
                let visibility_ms = this.receive.visibility_timeout_ms.unwrap_or(0);
                let (reply, _) = this.reply.finish(Reply::Receive { messages })?;
                let reply = reply.into_value();
                let remembered = Remembered {
                    receipts,
                    visibility_ms,
                    reply: reply.clone(),
                };
                let Pending {
                    attempts,
                    id,
                    receive,
                    ..
                } = this;
                attempts.with(|a| a.remember(receive.queue, id, now_ms, remembered));
                Ok(Next::Done(reply))
            }
            _ => Err(messages::mismatch()),
        }
    }

    fn receiving(self) -> Next {
        let request = Request::Receive(self.receive.clone());
        Next::Engine(Box::new(self), request)
    }
}

#[cfg(test)]
mod tests;
