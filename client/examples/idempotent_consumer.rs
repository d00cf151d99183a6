//! An order-charging consumer that stays correct under at-least-once
//! delivery.
//!
//! sluice may deliver a message more than once: here the first consumer
//! crashes in the middle of its handler (after charging the card, before
//! recording the charge), its lease runs out and a second consumer receives
//! the same order with receive count 2. Two things keep the customer from
//! being charged twice:
//!
//! 1. a claim table keyed by order id (a database's unique constraint in
//!    real life), fenced by the delivery number: a later delivery may take
//!    over an unfinished claim, an earlier one can no longer record
//!    anything;
//! 2. an idempotency key on the charge (the order id): the payment provider
//!    answers a repeated key with the first charge instead of charging
//!    again.
//!
//! Run a server, then this example:
//!
//! ```sh
//! cargo run -p sluice-broker --bin sluice-server &
//! cargo run -p sluice-client --example idempotent_consumer -- --addr 127.0.0.1:7171
//! ```
//!
//! It prints what happened and exits non-zero if the order was charged
//! twice (or never).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use sluice_client::consumer::{Consumer, ConsumerConfig, Delivery};
use sluice_client::{AsyncClient, ClientConfig, QueueOptions};
use tokio::sync::mpsc;

/// Demonstrates an idempotent consumer surviving a crash mid-handler.
#[derive(Debug, Parser)]
struct Args {
    /// Broker address.
    #[arg(long, default_value = "127.0.0.1:7171")]
    addr: String,
}

/// The claim table: one row per order, as a unique constraint would keep.
#[derive(Debug, Default)]
struct Claims {
    rows: Mutex<HashMap<String, Claim>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Claim {
    /// Being handled by the delivery with this number.
    InProgress { delivery: u64 },
    /// Done: charged with this charge id.
    Charged { charge_id: String },
}

/// What a claim attempt found.
#[derive(Debug, PartialEq, Eq)]
enum ClaimOutcome {
    /// This delivery owns the order now (new, or taken over from an
    /// earlier delivery that never finished).
    Owned { took_over_from: Option<u64> },
    /// The order was charged already: nothing to do but delete.
    AlreadyCharged { charge_id: String },
    /// A later delivery owns it: this one is stale.
    Stale,
}

impl Claims {
    /// `INSERT ... ON CONFLICT (order_id) DO UPDATE SET delivery = $new
    /// WHERE state = 'in_progress' AND delivery < $new`, in one step.
    fn claim(&self, order: &str, delivery: u64) -> ClaimOutcome {
        let mut rows = self.rows.lock().expect("claims lock");
        match rows.get(order).cloned() {
            None => {
                rows.insert(order.to_owned(), Claim::InProgress { delivery });
                ClaimOutcome::Owned {
                    took_over_from: None,
                }
            }
            Some(Claim::Charged { charge_id }) => ClaimOutcome::AlreadyCharged { charge_id },
            Some(Claim::InProgress { delivery: older }) if older < delivery => {
                rows.insert(order.to_owned(), Claim::InProgress { delivery });
                ClaimOutcome::Owned {
                    took_over_from: Some(older),
                }
            }
            Some(Claim::InProgress { .. }) => ClaimOutcome::Stale,
        }
    }

    /// `UPDATE ... SET state = 'charged' WHERE order_id = $1 AND delivery =
    /// $2`: only the delivery that owns the claim may record the charge.
    fn record_charge(&self, order: &str, delivery: u64, charge_id: &str) -> bool {
        let mut rows = self.rows.lock().expect("claims lock");
        if rows.get(order) != Some(&Claim::InProgress { delivery }) {
            return false;
        }
        rows.insert(
            order.to_owned(),
            Claim::Charged {
                charge_id: charge_id.to_owned(),
            },
        );
        true
    }
}

/// A payment provider that honours idempotency keys.
#[derive(Debug, Default)]
struct PaymentProvider {
    by_key: Mutex<HashMap<String, String>>,
    /// Every charge actually made: (order, amount in cents).
    charges: Mutex<Vec<(String, u64)>>,
}

impl PaymentProvider {
    /// Charges once per idempotency key; a repeat returns the first charge.
    fn charge(&self, idempotency_key: &str, order: &str, cents: u64) -> String {
        let mut by_key = self.by_key.lock().expect("provider lock");
        if let Some(id) = by_key.get(idempotency_key) {
            return id.clone();
        }
        let mut charges = self.charges.lock().expect("provider lock");
        charges.push((order.to_owned(), cents));
        let id = format!("ch_{}", charges.len());
        by_key.insert(idempotency_key.to_owned(), id.clone());
        id
    }

    fn charges_for(&self, order: &str) -> usize {
        let charges = self.charges.lock().expect("provider lock");
        charges.iter().filter(|(o, _)| o == order).count()
    }
}

/// What a handler reports to `main`.
#[derive(Debug)]
enum Event {
    /// The first consumer charged and is about to "crash".
    ChargedThenCrashing { receive_count: u32 },
    /// A delivery finished the order.
    Finished {
        receive_count: u32,
        charge_id: String,
        took_over_from: Option<u64>,
    },
}

struct Shop {
    claims: Claims,
    provider: PaymentProvider,
}

/// The handler: claim, charge with an idempotency key, record, and (on the
/// first consumer) crash between the charge and the record.
async fn handle(
    shop: Arc<Shop>,
    events: mpsc::UnboundedSender<Event>,
    crash: bool,
    delivery: Delivery,
) -> Result<(), String> {
    let message = &delivery.message;
    let body = std::str::from_utf8(&message.body).map_err(|e| e.to_string())?;
    let (order, cents) = body.split_once(':').ok_or("expected ORDER:CENTS")?;
    let cents: u64 = cents.parse().map_err(|_| "bad amount")?;
    let fence = message.delivery();

    let took_over_from = match shop.claims.claim(order, fence) {
        ClaimOutcome::Owned { took_over_from } => took_over_from,
        ClaimOutcome::AlreadyCharged { charge_id } => {
            let _ = events.send(Event::Finished {
                receive_count: message.receive_count,
                charge_id,
                took_over_from: None,
            });
            return Ok(());
        }
        ClaimOutcome::Stale => return Err(format!("delivery {fence} is stale for {order}")),
    };
    if delivery.lease.is_lost() {
        return Err("lease lost before charging".into());
    }
    let charge_id = shop.provider.charge(order, order, cents);
    if crash {
        // The process dies here: the card is charged, nothing recorded, the
        // message neither deleted nor released.
        let _ = events.send(Event::ChargedThenCrashing {
            receive_count: message.receive_count,
        });
        std::future::pending::<()>().await;
    }
    if !shop.claims.record_charge(order, fence, &charge_id) {
        return Err(format!("lost the claim on {order} before recording"));
    }
    let _ = events.send(Event::Finished {
        receive_count: message.receive_count,
        charge_id,
        took_over_from,
    });
    Ok(())
}

fn start_consumer(
    client: AsyncClient,
    queue: &str,
    shop: &Arc<Shop>,
    events: &mpsc::UnboundedSender<Event>,
    crash: bool,
) -> sluice_client::consumer::ConsumerHandle {
    let shop = Arc::clone(shop);
    let events = events.clone();
    let config = ConsumerConfig::new(queue)
        .concurrency(1)
        .visibility_timeout(Duration::from_secs(1))
        .poll_wait(Duration::from_millis(500));
    Consumer::start(client, config, move |delivery: Delivery| {
        handle(Arc::clone(&shop), events.clone(), crash, delivery)
    })
}

async fn next_event(events: &mut mpsc::UnboundedReceiver<Event>) -> Result<Event, String> {
    tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .map_err(|_| "no progress within 30 s".to_owned())?
        .ok_or_else(|| "the consumers stopped".to_owned())
}

async fn run(args: Args) -> Result<bool, String> {
    let client = AsyncClient::connect(ClientConfig::new(args.addr.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let queue = format!("orders.demo-{}", std::process::id());
    let attrs = QueueOptions::new().visibility_timeout(Duration::from_millis(1_000));
    client
        .create_queue(&queue, &attrs)
        .await
        .map_err(|e| e.to_string())?;
    let order = "order-42";
    client
        .send(&queue, format!("{order}:1999"))
        .await
        .map_err(|e| e.to_string())?;
    println!("sent {order} to {queue}");

    let shop = Arc::new(Shop {
        claims: Claims::default(),
        provider: PaymentProvider::default(),
    });
    let (tx, mut events) = mpsc::unbounded_channel();

    let first = start_consumer(client.clone(), &queue, &shop, &tx, true);
    match next_event(&mut events).await? {
        Event::ChargedThenCrashing { receive_count } => {
            println!(
                "consumer 1: claimed and charged {order} (receive count {receive_count}), then crashed before recording it"
            );
        }
        other => return Err(format!("unexpected {other:?}")),
    }
    first.abort();

    let second = start_consumer(client.clone(), &queue, &shop, &tx, false);
    let outcome = match next_event(&mut events).await? {
        Event::Finished {
            receive_count,
            charge_id,
            took_over_from,
        } => {
            println!(
                "consumer 2: received {order} again (receive count {receive_count}), took over the claim of delivery {}, charge {charge_id} (the provider answered the idempotency key with the first charge)",
                took_over_from.map_or_else(|| "none".to_owned(), |d| d.to_string())
            );
            receive_count
        }
        other => return Err(format!("unexpected {other:?}")),
    };
    let stats = second.stop(Duration::from_secs(5)).await;
    let info = client.queue_info(&queue).await.map_err(|e| e.to_string())?;
    client
        .delete_queue(&queue)
        .await
        .map_err(|e| e.to_string())?;

    let charges = shop.provider.charges_for(order);
    println!(
        "queue: {} deleted, {} redelivered; consumer 2 deleted {}",
        info.stats.deleted, info.stats.redelivered, stats.deleted
    );
    if outcome < 2 {
        return Err(format!(
            "expected a redelivery, got receive count {outcome}"
        ));
    }
    match charges {
        1 => {
            println!("{order} was charged once");
            Ok(true)
        }
        n => {
            println!("{order} was charged {n} times");
            Ok(false)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("idempotent_consumer: {e}");
            ExitCode::from(2)
        }
    }
}
