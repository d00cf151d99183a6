//! `sluice tail QUEUE`: receive, print and delete messages as they arrive,
//! until Ctrl-C (or `--max` messages).
//!
//! Each round is one long-poll receive, the messages printed, then one
//! delete of exactly those. Ctrl-C or SIGTERM during the long poll ends
//! `tail` at once; during printing and deleting it lets them finish. Either
//! way what was printed is deleted and nothing else is, then `tail` ends
//! with status 0.
//!
//! The leases are bound to the connection, so whatever `tail` holds without
//! having deleted it comes back as soon as it exits rather than when the
//! leases end: the batch of a long poll abandoned on Ctrl-C, the messages
//! of `--no-delete`, or those of a `tail` that died between printing and
//! deleting (a second Ctrl-C, a kill). The long poll runs on a helper
//! thread so that the main thread can stop waiting for it.
//!
//! A receive that fails in a way worth retrying (a busy broker, a lost
//! connection) is reported and tried again a second later; `tail` then ends
//! with status 1 however it stops, since a request failed.
//!
//! A closed standard output (`sluice tail q | head -3`) ends `tail` too,
//! with status 0: the message whose line could not be written, and the
//! rest of its batch, are not deleted.

use std::sync::mpsc;
use std::time::Duration;

use clap::Args;
use sluice_client::{Receipt, ReceiveOptions, ReceivedMessage};

use crate::interrupt::Interrupt;
use crate::render::{attributes_cell, body_cell};
use crate::time::rfc3339_ms;
use crate::{Failure, Outcome, print_checked, render, report};
use sluice_cli::units::{parse_ms_duration, parse_wait};

/// The most messages one receive asks for (the protocol's batch limit).
const BATCH_MAX: u16 = 1024;

/// The pause before a receive that failed in a way worth retrying (see
/// [`Error::is_retryable`](sluice_client::Error::is_retryable)) is tried again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

#[derive(Debug, Args)]
pub struct TailArgs {
    /// The queue.
    pub queue: String,
    /// Stop after this many messages [default: run until Ctrl-C].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
    /// Most messages per receive (1 .. 1024).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        value_parser = clap::value_parser!(u16).range(1..=i64::from(BATCH_MAX))
    )]
    pub batch: u16,
    /// Long-poll wait of each receive (0 .. 20s).
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_wait)]
    pub wait: Duration,
    /// Lease length [default: the queue's].
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub visibility_timeout: Option<Duration>,
    /// Print without deleting: the messages stay leased, and come back when
    /// their leases end or as soon as `tail` exits.
    #[arg(long)]
    pub no_delete: bool,
}

/// One message as a line: sent-at, id, `#` and how many times it was
/// received, attributes, body.
fn line(m: &ReceivedMessage) -> String {
    let attributes = attributes_cell(&m.attributes);
    let attributes = if attributes.is_empty() {
        String::new()
    } else {
        format!("[{attributes}]  ")
    };
    format!(
        "{}  {}  #{}  {attributes}{}\n",
        rfc3339_ms(m.sent_at_ms),
        m.id,
        m.receive_count,
        body_cell(&m.body)
    )
}

pub fn run(client: &crate::Client, a: &TailArgs, json: bool) -> Result<Outcome, Failure> {
    let interrupt = Interrupt::install()?;
    let mut outcome = Outcome::default();
    let mut printed: u64 = 0;
    while !interrupt.requested() {
        let want = match a.max {
            Some(max) if printed >= max => break,
            Some(max) => u16::try_from(max - printed).map_or(a.batch, |left| left.min(a.batch)),
            None => a.batch,
        };
        let mut options = ReceiveOptions::new(usize::from(want))
            .wait(a.wait)
            .bind_leases(true);
        options.visibility_timeout = a.visibility_timeout;
        let (reply, pending) = mpsc::channel();
        let (helper, queue) = (client.clone(), a.queue.clone());
        std::thread::spawn(move || {
            // The main thread may have stopped waiting: nothing to tell.
            let _ = reply.send(helper.receive(&queue, options));
        });
        let Some(received) = interrupt.wait_for(&pending) else {
            break;
        };
        let messages = match received {
            Ok(messages) => messages,
            // A busy broker or a lost connection: say so, and try again
            // (the client reconnects) rather than end a long-running tail.
            Err(err) if err.is_retryable() => {
                outcome.failed = true;
                report::client_error(&err, json);
                if interrupt.sleep(RETRY_PAUSE) {
                    break;
                }
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        let shown = messages
            .iter()
            .take_while(|m| {
                print_checked(&if json {
                    format!("{}\n", render::received_json(m))
                } else {
                    line(m)
                })
            })
            .count();
        let output_closed = shown < messages.len();
        printed += shown as u64;
        if !a.no_delete && shown > 0 {
            delete(client, &a.queue, &messages[..shown], json, &mut outcome)?;
        }
        if output_closed {
            break;
        }
    }
    Ok(outcome)
}

/// Deletes what was printed; reports the entries that failed.
fn delete(
    client: &crate::Client,
    queue: &str,
    messages: &[ReceivedMessage],
    json: bool,
    outcome: &mut Outcome,
) -> Result<(), Failure> {
    let receipts: Vec<Receipt> = messages.iter().map(|m| m.receipt).collect();
    for (receipt, result) in receipts.iter().zip(client.delete_batch(queue, &receipts)?) {
        if let Err(err) = result {
            outcome.failed = true;
            report::entry_error(&err, &receipt.to_hex(), json);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sluice_client::{MessageAttributes, MessageId};

    use super::*;

    #[test]
    fn a_message_is_one_line() {
        let mut m = ReceivedMessage {
            id: MessageId(1),
            receipt: Receipt {
                incarnation: 1,
                shard: 0,
                slot: 0,
                generation: 0,
                delivery: 2,
                check: 0,
            },
            receive_count: 2,
            sent_at_ms: 951_782_400_000,
            first_received_delta_ms: 0,
            attributes: MessageAttributes::new(),
            body: Bytes::from_static(b"two\nlines"),
            group: None,
        };
        assert_eq!(
            line(&m),
            format!(
                "2000-02-29T00:00:00.000Z  {}  #{}  two\\nlines\n",
                MessageId(1),
                m.receive_count
            )
        );
        m.attributes = MessageAttributes::from_pairs([("k", "v")]).unwrap();
        assert!(line(&m).contains("  [k=v]  two\\nlines\n"), "{}", line(&m));
    }
}
