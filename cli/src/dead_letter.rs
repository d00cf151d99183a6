//! The commands that treat a queue as a dead-letter queue: `redrive`, which
//! is refused on a queue that no queue names as its dead-letter queue (as
//! the AWS CLI's `start-message-move-task` is), and `peek`, which shows the
//! source queue of the messages of a dead-letter queue.
//!
//! Both learn a queue's sources from the redrive policies of the queues on
//! its broker (dead-lettering never crosses brokers): one LIST_QUEUES and a
//! GET_QUEUE per queue there. The broker keeps each dead-lettered message's
//! source itself, for `redrive`, but does not report it per message; so a
//! dead-letter queue that several queues name shows all of them.

use serde_json::{Value, json};
use sluice_client::{Client, Error, PeekedMessage};

use crate::args::{PeekArgs, RedriveArgs};
use crate::{Failure, Outcome, print, print_json, render};

/// What the queues on `dlq`'s broker say of it: `None` when it is not
/// among them (the request itself then says `QueueNotFound`), else the
/// queues whose redrive policy names it, sorted.
fn sources(broker: &Client, dlq: &str) -> Result<Option<Vec<String>>, Error> {
    let names = broker.list_queues("")?;
    if !names.iter().any(|n| n == dlq) {
        return Ok(None);
    }
    let mut sources = Vec::new();
    for name in names.iter().filter(|n| *n != dlq) {
        match broker.queue_info(name) {
            Ok(info) => {
                let names_it = info
                    .attributes
                    .redrive
                    .as_ref()
                    .is_some_and(|r| r.dead_letter_queue == dlq);
                if names_it {
                    sources.push(info.queue.as_str().to_owned());
                }
            }
            // Deleted since the listing: it names nothing now.
            Err(Error::QueueNotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    sources.sort_unstable();
    Ok(Some(sources))
}

pub fn redrive(client: &crate::Client, a: &RedriveArgs, json: bool) -> Result<Outcome, Failure> {
    let broker = client.client_for(&a.queue);
    if sources(broker, &a.queue)?.is_some_and(|s| s.is_empty()) {
        return Err(Failure::Client(Error::InvalidArgument(format!(
            "{q} is no queue's dead-letter queue (no queue names it in its redrive policy), \
             so redrive has nowhere to move its messages: redrive the queue that another \
             names with --dead-letter",
            q = a.queue
        ))));
    }
    // All: as many as the wire's field holds.
    let max = usize::try_from(a.max.unwrap_or(u32::MAX)).unwrap_or(usize::MAX);
    let r = match &a.to {
        Some(to) => client.redrive_to(&a.queue, to, max)?,
        None => client.redrive(&a.queue, max)?,
    };
    if json {
        print_json(&json!({"moved": r.moved, "stayed": r.stayed}));
    } else {
        print(&format!("moved {}, stayed {}\n", r.moved, r.stayed));
    }
    Ok(Outcome::default())
}

pub fn peek(client: &crate::Client, a: &PeekArgs, json: bool) -> Result<Outcome, Failure> {
    let peeked = client
        .client_for(&a.queue)
        .peek_checked(&a.queue, a.max.into())?;
    let messages = peeked.messages;
    if peeked.cut {
        // Said, not hidden: the reply holds what fits one frame.
        eprintln!(
            "sluice: {} messages shown; more visible messages did not fit one reply: \
             ask for fewer with --max",
            messages.len()
        );
    }
    // Only messages moved in from another queue have a source to show:
    // none when nothing ever was (the queue's `moved_in`), which spares the
    // look at every queue's policy. A queue deleted since the peek has none.
    let broker = client.client_for(&a.queue);
    let moved_in = |q: &str| match broker.queue_info(q) {
        Ok(info) => Ok(info.stats.moved_in > 0),
        Err(Error::QueueNotFound(_)) => Ok(false),
        Err(e) => Err(e),
    };
    let sources = if !messages.is_empty() && moved_in(&a.queue)? {
        sources(broker, &a.queue)?.unwrap_or_default()
    } else {
        Vec::new()
    };
    if json {
        print_json(&Value::Array(
            messages.iter().map(|m| peeked_json(m, &sources)).collect(),
        ));
    } else {
        print(&render::peeked_table(&messages, &sources));
    }
    Ok(Outcome::default())
}

/// A peeked message in JSON; on a dead-letter queue with its
/// `source_queues`.
fn peeked_json(m: &PeekedMessage, sources: &[String]) -> Value {
    let mut v = render::peeked_json(m);
    if let (false, Some(o)) = (sources.is_empty(), v.as_object_mut()) {
        o.insert("source_queues".into(), json!(sources));
    }
    v
}
