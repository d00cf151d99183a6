//! `sluice`: the command-line client. See `sluice --help`.

mod args;
mod dead_letter;
mod interrupt;
mod meta;
mod ping;
mod render;
mod report;
mod tail;
mod time;

use std::io::{Read, Write};
use std::process::ExitCode;

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_cli::units::{self, duration_ms};
use sluice_client::sharded::{BrokerFailure, ShardedClient as Client};
use sluice_client::tls::TlsConfig;
use sluice_client::{
    AttributeUpdate, Backoff, ClientConfig, Error, MessageAttributes, MessageGroupId, Millis,
    QueueOptions, Receipt, ReceiveOptions, RedrivePolicy, SendEntry, Setting,
};

use crate::args::{AttributeFlags, Cli, Command, QueueCommand};
use crate::report::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};

/// What a command leaves behind: whether every part of it succeeded.
#[derive(Debug, Default)]
struct Outcome {
    failed: bool,
}

/// Why the command could not run at all.
#[derive(Debug)]
enum Failure {
    /// A client or server error: its own line starts with its name.
    Client(Error),
    /// A usage problem found after parsing (a bad token file, stdin).
    Usage(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Client(e)
    }
}

fn main() -> ExitCode {
    let cli = match meta::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let result = match &cli.command {
        Command::Completions(a) => Ok(meta::completions(a)),
        Command::Man(a) => meta::man(a),
        _ => run(&cli),
    };
    match result {
        Ok(Outcome { failed: false }) => ExitCode::from(EXIT_OK),
        Ok(Outcome { failed: true }) => ExitCode::from(EXIT_FAILED),
        Err(Failure::Client(err)) => {
            report::client_error(&err, cli.json);
            ExitCode::from(EXIT_FAILED)
        }
        Err(Failure::Usage(message)) => {
            report::usage_error(&message, cli.json);
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn read_token(path: &std::path::Path) -> Result<Vec<u8>, Failure> {
    let mut bytes = std::fs::read(path)
        .map_err(|e| Failure::Usage(format!("reading the token file {}: {e}", path.display())))?;
    while bytes.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
        bytes.pop();
    }
    Ok(bytes)
}

/// A TLS file that cannot be read or used is a usage error, like an
/// unreadable token file: nothing was sent.
fn tls_file_error(err: Error) -> Failure {
    Failure::Usage(err.to_string())
}

fn tls(cli: &Cli) -> Result<Option<TlsConfig>, Failure> {
    let tls = match (&cli.tls_ca, &cli.tls_client_cert, &cli.tls_client_key) {
        (None, None, None) => {
            if cli.tls_server_name.is_some() {
                return Err(Failure::Usage("--tls-server-name needs --tls-ca".into()));
            }
            return Ok(None);
        }
        (Some(ca), None, None) => TlsConfig::with_ca_file(ca).map_err(tls_file_error)?,
        (Some(ca), Some(cert), Some(key)) => {
            TlsConfig::with_client_cert(ca, cert, key).map_err(tls_file_error)?
        }
        _ => {
            return Err(Failure::Usage(
                "a client certificate takes --tls-client-cert, --tls-client-key and --tls-ca"
                    .into(),
            ));
        }
    };
    Ok(Some(match &cli.tls_server_name {
        Some(name) => tls.server_name(name.clone()),
        None => tls,
    }))
}

fn connect(cli: &Cli) -> Result<Client, Failure> {
    let mut config = ClientConfig::new(cli.addr.clone());
    if let Some(path) = &cli.token_file {
        config = config.with_auth_token(read_token(path)?);
    }
    if let Some(tls) = tls(cli)? {
        config = config.with_tls(tls);
    }
    Ok(Client::connect(config)?)
}

/// Reports brokers that did not answer a request to every broker; true
/// when there were some.
fn report_failed(failed: &[BrokerFailure], json: bool) -> bool {
    for f in failed {
        report::broker_error(&f.addr, &f.error, json);
    }
    !failed.is_empty()
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`sluice ... | head`) is not worth a panic.
    let _ = out.write_all(text.as_bytes());
}

/// Like [`print()`], but says whether the text reached standard output:
/// false once the reader is gone, for commands that must not act on what
/// nobody saw.
fn print_checked(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

fn print_json(value: &Value) {
    print(&format!("{value}\n"));
}

fn run(cli: &Cli) -> Result<Outcome, Failure> {
    let client = connect(cli)?;
    let json = cli.json;
    match &cli.command {
        Command::Queue(q) => queue(&client, q, json),
        Command::Send(a) => send(&client, a, json),
        Command::Recv(a) => recv(&client, a, json),
        Command::Peek(a) => dead_letter::peek(&client, a, json),
        Command::Delete(a) => delete(&client, &a.queue, &a.receipts, json),
        Command::Visibility(a) => {
            let Some(receipt) = Receipt::from_hex(&a.receipt) else {
                report::entry_error(&bad_receipt(), &a.receipt, json);
                return Ok(Outcome { failed: true });
            };
            // A usage error is found before anything is sent.
            let ms = duration_ms(a.timeout, "timeout").map_err(Failure::Usage)?;
            client.change_visibility(&a.queue, receipt, a.timeout)?;
            if json {
                print_json(&json!({"receipt": a.receipt, "visibility_timeout_ms": ms}));
            } else if ms == 0 {
                print(&format!("released {}\n", a.receipt));
            } else {
                print(&format!(
                    "{} visible again in {}\n",
                    a.receipt,
                    units::format_ms(ms.into())
                ));
            }
            Ok(Outcome::default())
        }
        Command::AdvanceClock(a) => {
            let merged = client.advance_clock(a.by)?;
            let single = client.addrs().count() == 1;
            let reading = |r: &sluice_client::ClockReading| {
                let elapsed_ms = u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX);
                (elapsed_ms, unix_ms(r.wall))
            };
            if json && single {
                for (_, r) in &merged.value {
                    let (elapsed_ms, wall_ms) = reading(r);
                    print_json(&clock_json(elapsed_ms, wall_ms));
                }
            } else if json {
                let by_broker: serde_json::Map<String, Value> = merged
                    .value
                    .iter()
                    .map(|(addr, r)| {
                        let (elapsed_ms, wall_ms) = reading(r);
                        (addr.clone(), clock_json(elapsed_ms, wall_ms))
                    })
                    .collect();
                print_json(&Value::Object(by_broker));
            } else {
                for (addr, r) in &merged.value {
                    let (elapsed_ms, wall_ms) = reading(r);
                    let on = if single {
                        String::new()
                    } else {
                        format!("{addr}: ")
                    };
                    print(&format!(
                        "{on}the clock stands {} after the server's start (wall clock {})\n",
                        units::format_ms(elapsed_ms),
                        time::rfc3339_ms(wall_ms),
                    ));
                }
            }
            Ok(Outcome {
                failed: report_failed(&merged.failed, json),
            })
        }
        Command::Tail(a) => tail::run(&client, a, json),
        Command::Ping(a) => ping::run(&client, a, json),
        Command::Completions(_) | Command::Man(_) => {
            unreachable!("main runs these without connecting")
        }
        Command::Redrive(a) => dead_letter::redrive(&client, a, json),
        Command::Stats => {
            let merged = client.server_stats()?;
            let single = client.addrs().count() == 1;
            if json && single {
                for (_, s) in &merged.value {
                    print_json(&render::server_stats_json(s));
                }
            } else if json {
                let by_broker: serde_json::Map<String, Value> = merged
                    .value
                    .iter()
                    .map(|(addr, s)| (addr.clone(), render::server_stats_json(s)))
                    .collect();
                print_json(&Value::Object(by_broker));
            } else {
                for (addr, s) in &merged.value {
                    if !single {
                        print(&format!("broker {addr}\n"));
                    }
                    print(&render::server_stats_table(s));
                }
            }
            Ok(Outcome {
                failed: report_failed(&merged.failed, json),
            })
        }
    }
}

fn clock_json(elapsed_ms: u64, wall_ms: u64) -> Value {
    json!({"elapsed_ms": elapsed_ms, "wall": time::rfc3339_ms(wall_ms), "wall_ms": wall_ms})
}

/// The queue options the flags describe.
fn attribute_update(f: &AttributeFlags) -> Result<AttributeUpdate, Failure> {
    // The broker counts these in whole milliseconds: a flag with a remainder
    // is a usage error here rather than rounded by the client.
    let whole = |d: Option<std::time::Duration>, what: &str| {
        d.map(|d| duration_ms(d, what).map(Millis::new))
            .transpose()
            .map_err(Failure::Usage)
    };
    let message_bytes_max = f
        .max_message_size
        .map(|b| {
            u32::try_from(b)
                .map_err(|_| Failure::Usage(format!("--max-message-size {b} is too large")))
        })
        .transpose()?;
    let backoff = match f.backoff {
        Some((base, max)) => Setting::Set(Backoff::new(
            Millis::new(duration_ms(base, "backoff base").map_err(Failure::Usage)?),
            Millis::new(duration_ms(max, "backoff max").map_err(Failure::Usage)?),
        )),
        None => Setting::Keep,
    };
    let mut update = AttributeUpdate {
        visibility_timeout: whole(f.visibility_timeout, "visibility timeout")?,
        delay: whole(f.delay, "delay")?,
        retention: whole(f.retention, "retention")?,
        message_bytes_max,
        receive_wait: whole(f.wait, "wait")?,
        redrive: match (&f.dead_letter, f.max_receives) {
            (Some(q), Some(n)) => Setting::Set(RedrivePolicy::new(q.clone(), n)),
            _ => Setting::Keep,
        },
        max_depth: f.max_depth,
        dedup_window: whole(f.dedup_window, "dedup window")?,
        backoff,
        ..AttributeUpdate::default()
    };
    if !f.tag.is_empty() {
        update.tags_mut().set.clone_from(&f.tag);
    }
    if f.content_based_dedup {
        update.content_based_dedup = Some(true);
    }
    Ok(update)
}

fn queue(client: &Client, command: &QueueCommand, json: bool) -> Result<Outcome, Failure> {
    match command {
        QueueCommand::Create(a) => {
            let mut options = QueueOptions::from(attribute_update(&a.attributes)?);
            if a.fifo {
                options = options.fifo();
            }
            let created = client.create_queue(&a.name, &options)?;
            if json {
                print_json(&json!({"name": a.name, "created": created}));
            } else if created {
                print(&format!("created queue {}\n", a.name));
            } else {
                print(&format!(
                    "queue {} exists already with these attributes\n",
                    a.name
                ));
            }
        }
        QueueCommand::Set(a) => {
            let mut update = attribute_update(&a.attributes)?;
            if a.no_dead_letter {
                update.redrive = Setting::Clear;
            }
            if a.no_backoff {
                update.backoff = Setting::Clear;
            }
            if a.no_content_based_dedup {
                update.content_based_dedup = Some(false);
            }
            if !a.untag.is_empty() {
                update.tags_mut().remove.clone_from(&a.untag);
            }
            client.set_queue(&a.name, &QueueOptions::from(update))?;
            if json {
                print_json(&json!({"name": a.name, "updated": true}));
            } else {
                print(&format!("updated queue {}\n", a.name));
            }
        }
        QueueCommand::List { prefix } => {
            let merged = client.queue_stats(prefix.as_deref().unwrap_or(""))?;
            let failed = report_failed(&merged.failed, json);
            if json {
                print_json(&render::queue_list_json(&merged.value));
            } else {
                print(&render::queue_list_table(&merged.value));
            }
            return Ok(Outcome { failed });
        }
        QueueCommand::Show { name } => {
            let info = client.queue_info(name)?;
            if json {
                print_json(&render::queue_json(&info));
            } else {
                print(&render::queue_table(&info));
            }
        }
        QueueCommand::Purge { name } => {
            let purged = client.purge_queue(name)?;
            if json {
                print_json(&json!({"name": name, "purged": purged}));
            } else {
                print(&format!("purged {purged} messages from {name}\n"));
            }
        }
        QueueCommand::Delete { name } => {
            client.delete_queue(name)?;
            if json {
                print_json(&json!({"name": name, "deleted": true}));
            } else {
                print(&format!("deleted queue {name}\n"));
            }
        }
    }
    Ok(Outcome::default())
}

fn send(client: &Client, a: &args::SendArgs, json: bool) -> Result<Outcome, Failure> {
    let body = match &a.body {
        Some(b) => Bytes::from(b.clone().into_bytes()),
        None => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map_err(|e| {
                Failure::Usage(format!("reading the body from standard input: {e}"))
            })?;
            Bytes::from(buf)
        }
    };
    let attributes = MessageAttributes::from_pairs(a.attrs.iter().map(|(k, v)| (k, v)))
        .map_err(|e| Failure::Client(e.into()))?;
    let mut entry = SendEntry::new(body).attributes(attributes);
    if let Some(delay) = a.delay {
        // A delay the protocol's field cannot carry is refused by name when
        // the entry is sent.
        entry = entry.delay(delay);
    }
    if let Some(key) = &a.dedup_key {
        entry = entry.dedup_key(key.clone().into_bytes());
    }
    if let Some(group) = &a.group {
        let group = MessageGroupId::new(group)
            .map_err(|e| Failure::Usage(format!("--group {group:?}: {e}")))?;
        entry = entry.group(group);
    }
    // Batches within the server's limits: 1,024 entries and the frame size.
    let frame_max = client
        .client_for(&a.queue)
        .server_info()
        .map_or(1 << 20, |h| h.limits.frame_bytes_max as usize);
    let per_frame = (frame_max.saturating_sub(512) / entry.encoded_len().max(1)).max(1);
    let per_batch = per_frame.min(sluice_protocol_batch_max());
    let mut left = a.count as usize;
    let mut outcome = Outcome::default();
    let mut table = render::Table::new(&["ID", "DUPLICATE"]);
    while left > 0 {
        let n = left.min(per_batch);
        left -= n;
        let batch = vec![entry.clone(); n];
        for result in client.send_batch(&a.queue, &batch)? {
            match result {
                Ok(sent) if json => {
                    print_json(&json!({"id": sent.id.to_string(), "duplicate": sent.duplicate}));
                }
                Ok(sent) => table.row(vec![sent.id.to_string(), sent.duplicate.to_string()]),
                Err(err) => {
                    outcome.failed = true;
                    report::entry_error(&err, &a.queue, json);
                }
            }
        }
    }
    if !json {
        print(&table.render());
    }
    Ok(outcome)
}

/// Milliseconds since the Unix epoch, as the JSON output shows times.
fn unix_ms(t: std::time::SystemTime) -> u64 {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn sluice_protocol_batch_max() -> usize {
    1024
}

fn recv(client: &Client, a: &args::RecvArgs, json: bool) -> Result<Outcome, Failure> {
    let mut options = ReceiveOptions::new(a.max.into()).bind_leases(a.bind);
    options.visibility_timeout = a.visibility_timeout;
    options.wait = a.wait;
    let messages = client.receive(&a.queue, options)?;
    if json {
        print_json(&Value::Array(
            messages.iter().map(render::received_json).collect(),
        ));
    } else {
        print(&render::received_table(&messages));
    }
    let mut outcome = Outcome::default();
    if a.delete && !messages.is_empty() {
        let receipts: Vec<Receipt> = messages.iter().map(|m| m.receipt).collect();
        for (m, result) in messages
            .iter()
            .zip(client.delete_batch(&a.queue, &receipts)?)
        {
            if let Err(err) = result {
                outcome.failed = true;
                report::entry_error(&err, &m.receipt.to_hex(), json);
            }
        }
    }
    Ok(outcome)
}

fn bad_receipt() -> Error {
    Error::InvalidReceipt("not a receipt: expected 52 hex digits".into())
}

fn delete(
    client: &Client,
    queue: &str,
    receipts: &[String],
    json: bool,
) -> Result<Outcome, Failure> {
    let mut outcome = Outcome::default();
    let mut parsed = Vec::new();
    for text in receipts {
        match Receipt::from_hex(text) {
            Some(r) => parsed.push((text, r)),
            None => {
                outcome.failed = true;
                report::entry_error(&bad_receipt(), text, json);
            }
        }
    }
    for chunk in parsed.chunks(sluice_protocol_batch_max()) {
        let batch: Vec<Receipt> = chunk.iter().map(|(_, r)| *r).collect();
        let results = client.delete_batch(queue, &batch)?;
        for ((text, _), result) in chunk.iter().zip(results) {
            match result {
                Ok(()) if json => print_json(&json!({"receipt": text, "deleted": true})),
                Ok(()) => print(&format!("deleted {text}\n")),
                Err(err) => {
                    outcome.failed = true;
                    report::entry_error(&err, text, json);
                }
            }
        }
    }
    Ok(outcome)
}
