//! ListDeadLetterSourceQueues: the queues whose redrive policy names a
//! dead-letter queue.
//!
//! The engine keeps each queue's redrive policy and no index of sources, so
//! the door asks it as the CLI does: a GET of the dead-letter queue (so a
//! missing one is `QueueDoesNotExist`), a LIST of the request's namespace,
//! then a GET of each queue in name order, one engine request at a time,
//! until a page is full (`MaxResults`, then `NextToken`: the last name
//! looked at) or every queue was looked at.

use std::collections::VecDeque;

use serde_json::{Value, json};
use sluice_protocol::{QueueName, Reply, Request};

use super::errors::SqsError;
use super::names::Namespace;
use super::wire::Input;
use super::{Ctx, Started};

/// Most source URLs a reply carries without `MaxResults`.
const PAGE_MAX: usize = 1000;

/// A ListDeadLetterSourceQueues call in progress.
#[derive(Debug)]
pub(crate) struct Sources {
    ns: Namespace,
    host: String,
    /// The dead-letter queue's engine name.
    dlq: QueueName,
    max: Option<usize>,
    after: Option<String>,
    /// What the engine's last reply answers.
    asked: Asked,
    /// Engine names still to look at, in name order.
    left: VecDeque<QueueName>,
    /// The sources found, by SQS name.
    found: Vec<String>,
}

#[derive(Debug)]
enum Asked {
    /// The dead-letter queue's GET.
    Dlq,
    /// The namespace's LIST.
    List,
    /// The GET of this queue.
    Queue(QueueName),
}

/// What a step gives: another engine request, or the reply.
#[derive(Debug)]
pub(crate) enum Next {
    Engine(Request),
    Done(Value),
}

/// Starts ListDeadLetterSourceQueues.
pub(crate) fn start(ctx: &Ctx<'_>, input: &Input) -> Result<Started, SqsError> {
    let (ns, _, dlq) = ctx.queue(input)?;
    let max = input.opt_int_in("MaxResults", 1, 1000)?.map(|m| m as usize);
    let after = input.opt_str("NextToken")?.map(str::to_owned);
    let (mut sources, request) = Sources::of(ns, ctx.host(), dlq, max, false);
    sources.after = after;
    Ok(Started::Engine(super::Pending::Sources(sources), request))
}

impl Sources {
    /// A walk for the sources of `dlq` in `ns`, stopping once `max` are
    /// found, and its first request: the GET of `dlq` (a missing one is
    /// `QueueDoesNotExist`), or, when the caller has just read it
    /// (`dlq_read`), the namespace's LIST.
    pub(crate) fn of(
        ns: Namespace,
        host: String,
        dlq: QueueName,
        max: Option<usize>,
        dlq_read: bool,
    ) -> (Sources, Request) {
        let (asked, request) = if dlq_read {
            let prefix = ns.engine_prefix();
            (
                Asked::List,
                Request::ListQueues {
                    prefix,
                    after: None,
                },
            )
        } else {
            (Asked::Dlq, Request::GetQueue { queue: dlq.clone() })
        };
        let sources = Sources {
            ns,
            host,
            dlq,
            max,
            after: None,
            asked,
            left: VecDeque::new(),
            found: Vec::new(),
        };
        (sources, request)
    }

    /// The engine's `reply` to the last request: the next one, or SQS's
    /// reply.
    pub(crate) fn step(&mut self, reply: Reply) -> Result<Next, SqsError> {
        match (core::mem::replace(&mut self.asked, Asked::List), reply) {
            (Asked::Dlq, Reply::Error(e)) => Err(SqsError::from_engine(&e, false)),
            (Asked::Dlq, Reply::GetQueue(_)) => {
                self.asked = Asked::List;
                Ok(Next::Engine(Request::ListQueues {
                    prefix: self.ns.engine_prefix(),
                    after: None,
                }))
            }
            (Asked::List, Reply::ListQueues { queues, .. }) => {
                let mut names: Vec<(String, QueueName)> = queues
                    .into_iter()
                    .filter(|q| *q != self.dlq)
                    .filter_map(|q| Some((self.ns.sqs_name(q.as_str())?.to_owned(), q)))
                    .filter(|(n, _)| self.after.as_ref().is_none_or(|a| n > a))
                    .collect();
                names.sort_unstable();
                self.left = names.into_iter().map(|(_, q)| q).collect();
                Ok(self.next())
            }
            (Asked::Queue(queue), Reply::GetQueue(info)) => {
                let names_it = info
                    .attributes
                    .redrive
                    .as_ref()
                    .is_some_and(|r| r.dead_letter_queue == self.dlq.as_str());
                if names_it {
                    if let Some(name) = self.ns.sqs_name(queue.as_str()) {
                        self.found.push(name.to_owned());
                    }
                }
                Ok(self.next())
            }
            // Deleted since the listing: it names nothing now.
            (Asked::Queue(_), Reply::Error(_)) => Ok(self.next()),
            (_, Reply::Error(e)) => Err(SqsError::from_engine(&e, false)),
            (_, other) => Err(SqsError::new(
                "InternalError",
                format!("unexpected engine reply {:?}", other.opcode()),
            )),
        }
    }

    /// The GET of the next queue, or the reply once the page is full or
    /// every queue was looked at.
    fn next(&mut self) -> Next {
        let full = self.found.len() >= self.max.unwrap_or(PAGE_MAX);
        match self.left.pop_front() {
            Some(queue) if !full => {
                self.asked = Asked::Queue(queue.clone());
                Next::Engine(Request::GetQueue { queue })
            }
            rest => {
                let urls: Vec<String> = self
                    .found
                    .iter()
                    .map(|n| self.ns.url(&self.host, n))
                    .collect();
                let mut out = json!({ "queueUrls": urls });
                // A page cut short says where the next begins, when the
                // caller asked for pages (as SQS does).
                if rest.is_some() && self.max.is_some() {
                    if let Some(last) = self.found.last() {
                        out["NextToken"] = Value::String(last.clone());
                    }
                }
                Next::Done(out)
            }
        }
    }
}
