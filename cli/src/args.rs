//! The command line, as clap reads it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

use sluice_cli::units::{
    parse_addrs, parse_attr, parse_backoff, parse_bytes, parse_ms_duration, parse_wait,
};

/// The heading of the flags that say where and how to connect.
pub const CONNECTION: &str = "Connection";

/// Command-line client for the sluice message broker.
///
/// Durations are written 0, 250ms, 1.5s, 2m, 1h30m (units ns, us, ms, s, m,
/// h, d), sizes 1048576, 256KiB, 1M, 1.5MiB: the grammar every sluice tool
/// shares (README, "Durations, sizes and addresses").
/// Message ids print as 32 hex digits, receipts as 52.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Command-line client for the sluice message broker",
    after_help = "Durations: 0, 250ms, 1.5s, 2m, 1h30m (units ns, us, ms, s, m, h, d; the broker counts whole ms). Sizes: 1048576, 256KiB, 1M, 1.5MiB. Addresses: HOST:PORT or sluice://HOST:PORT. Ids print as 32 hex digits, receipts as 52."
)]
pub struct Cli {
    /// Broker address, HOST:PORT or sluice://HOST:PORT; several, comma-separated, for queues spread over
    /// brokers (each queue lives on the one its name, or its {tag}, hashes
    /// to: give every client the same list).
    #[arg(
        long,
        env = "SLUICE_ADDR",
        help_heading = CONNECTION,
        default_value = sluice_client::config::ADDR_DEFAULT,
        value_name = "HOST:PORT[,HOST:PORT...]",
        value_parser = parse_addrs,
        global = true
    )]
    pub addr: String,

    /// File holding the auth token (trailing newlines are ignored).
    #[arg(
        long,
        env = "SLUICE_TOKEN_FILE",
        value_name = "PATH",
        global = true,
        help_heading = CONNECTION
    )]
    pub token_file: Option<PathBuf>,

    /// Connect with TLS, trusting the CA certificates in this PEM file.
    #[arg(
        long,
        env = "SLUICE_TLS_CA",
        value_name = "PATH",
        global = true,
        help_heading = CONNECTION
    )]
    pub tls_ca: Option<PathBuf>,

    /// The name the server's certificate must carry [default: the host of
    /// each address].
    #[arg(
        long,
        env = "SLUICE_TLS_SERVER_NAME",
        help_heading = CONNECTION,
        value_name = "NAME",
        global = true
    )]
    pub tls_server_name: Option<String>,

    /// PEM certificate chain to present, for a server that requires client
    /// certificates (with --tls-client-key and --tls-ca).
    #[arg(
        long,
        env = "SLUICE_TLS_CLIENT_CERT",
        help_heading = CONNECTION,
        value_name = "PATH",
        global = true
    )]
    pub tls_client_cert: Option<PathBuf>,

    /// PEM private key of --tls-client-cert.
    #[arg(
        long,
        env = "SLUICE_TLS_CLIENT_KEY",
        help_heading = CONNECTION,
        value_name = "PATH",
        global = true
    )]
    pub tls_client_key: Option<PathBuf>,

    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, change, list, show, purge and delete queues.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Send a message (the body from standard input when BODY is absent).
    Send(SendArgs),
    /// Receive (lease) messages.
    Recv(RecvArgs),
    /// Read visible messages without leasing them; on a dead-letter queue
    /// with their SOURCE, the queue whose redrive policy names it (all of
    /// them, comma-separated, when several do).
    Peek(PeekArgs),
    /// Delete received messages by receipt.
    Delete(DeleteArgs),
    /// Change a message's visibility timeout; 0 releases the message.
    Visibility(VisibilityArgs),
    /// Move messages of a dead-letter queue back to their source queues
    /// (refused on a queue that no queue names as its dead-letter queue).
    Redrive(RedriveArgs),
    /// Show the server's statistics.
    Stats,
    /// Move the clock of a server started with `--clock manual` (tests).
    AdvanceClock(AdvanceClockArgs),
    /// Receive, print and delete messages as they arrive, until Ctrl-C.
    Tail(crate::tail::TailArgs),
    /// Round-trip times of PINGs to the brokers, in microseconds.
    Ping(crate::ping::PingArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
    /// Print the man page (or write one per subcommand into a directory).
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct AdvanceClockArgs {
    /// How far, e.g. 30s (whole milliseconds; 0 reads the clock).
    #[arg(value_name = "DUR", value_parser = parse_ms_duration)]
    pub by: Duration,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create a queue (idempotent when the attributes match).
    Create(CreateArgs),
    /// Change a queue's attributes.
    Set(SetArgs),
    /// List queues with their depths (visible, in flight, delayed) and the
    /// age of their oldest message, optionally those whose names start
    /// with PREFIX.
    List {
        /// Only queues whose names start with this.
        prefix: Option<String>,
    },
    /// Show a queue's attributes and stats.
    Show {
        /// The queue.
        name: String,
    },
    /// Remove every message of a queue.
    Purge {
        /// The queue.
        name: String,
    },
    /// Delete a queue and its messages.
    Delete {
        /// The queue.
        name: String,
    },
}

/// Queue attributes, as flags.
#[derive(Debug, Args)]
pub struct AttributeFlags {
    /// Lease length of a receive that does not set one (0 .. 12h).
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub visibility_timeout: Option<Duration>,
    /// Delivery delay of a send that does not set one (0 .. 15m).
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub delay: Option<Duration>,
    /// Age since the send at which an undeleted message is dropped (60s .. 14d).
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub retention: Option<Duration>,
    /// Default long-poll wait of a receive (0 .. 20s).
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub wait: Option<Duration>,
    /// Largest body plus attributes (1024, 256KiB, 1MiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_message_size: Option<u64>,
    /// Dead-letter queue (with --max-receives).
    #[arg(long, value_name = "QUEUE", requires = "max_receives")]
    pub dead_letter: Option<String>,
    /// Deliveries before a message is dead-lettered (1 .. 1000; with --dead-letter).
    #[arg(long, value_name = "N", requires = "dead_letter")]
    pub max_receives: Option<u16>,
    /// Most messages held (visible + delayed + in flight).
    #[arg(long, value_name = "N")]
    pub max_depth: Option<u64>,
    /// How long a dedup key suppresses repeats (0 .. 1h).
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub dedup_window: Option<Duration>,
    /// Retry backoff after a release or an expired lease, as BASE:MAX (100ms:1m).
    #[arg(long, value_name = "BASE:MAX", value_parser = parse_backoff)]
    pub backoff: Option<(Duration, Duration)>,
    /// A tag, KEY=VALUE (repeatable; at most 50 on a queue).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_attr)]
    pub tag: Vec<(String, String)>,
    /// A FIFO queue: deduplicate a send without a dedup key by the SHA-256 of
    /// its body.
    #[arg(long)]
    pub content_based_dedup: bool,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The queue.
    pub name: String,
    /// A FIFO queue: each message group's messages in send order, one batch
    /// of a group in flight at a time, every send deduplicated (sends then
    /// need --group, and --dedup-id unless --content-based-dedup). Set at
    /// creation only.
    #[arg(long)]
    pub fifo: bool,
    #[command(flatten)]
    pub attributes: AttributeFlags,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The queue.
    pub name: String,
    #[command(flatten)]
    pub attributes: AttributeFlags,
    /// Remove the dead-letter policy.
    #[arg(long, conflicts_with = "dead_letter")]
    pub no_dead_letter: bool,
    /// Remove the retry backoff.
    #[arg(long, conflicts_with = "backoff")]
    pub no_backoff: bool,
    /// Stop deduplicating a FIFO queue's sends by content.
    #[arg(long, conflicts_with = "content_based_dedup")]
    pub no_content_based_dedup: bool,
    /// Remove a tag (repeatable; removed before --tag sets any).
    #[arg(long, value_name = "KEY")]
    pub untag: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The queue.
    pub queue: String,
    /// The body; read from standard input when absent.
    pub body: Option<String>,
    /// Delivery delay [default: the queue's].
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub delay: Option<Duration>,
    /// Dedup key: a repeat within the queue's dedup window is not enqueued
    /// (a FIFO queue's deduplication id).
    #[arg(long, visible_alias = "dedup-id", value_name = "KEY")]
    pub dedup_key: Option<String>,
    /// Message group (1 to 128 of '!' to '~'): its place in its group's order
    /// on a FIFO queue.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// A message attribute (repeatable).
    #[arg(long = "attr", value_name = "K=V", value_parser = parse_attr)]
    pub attrs: Vec<(String, String)>,
    /// Send the message this many times (at least 1).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
}

#[derive(Debug, Args)]
pub struct RecvArgs {
    /// The queue.
    pub queue: String,
    /// Most messages to receive (1 .. 1024).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max: u16,
    /// Lease length [default: the queue's].
    #[arg(long, value_name = "DUR", value_parser = parse_ms_duration)]
    pub visibility_timeout: Option<Duration>,
    /// Long-poll wait, 0 .. 20s [default: the queue's].
    #[arg(long, value_name = "DUR", value_parser = parse_wait)]
    pub wait: Option<Duration>,
    /// Delete the messages once printed.
    #[arg(long)]
    pub delete: bool,
    /// Bind the leases to this connection: what is not deleted is released
    /// as soon as `sluice` exits, however it ends (with --delete, a message
    /// received by a `sluice` killed before deleting it comes back at once).
    #[arg(long)]
    pub bind: bool,
}

#[derive(Debug, Args)]
pub struct PeekArgs {
    /// The queue.
    pub queue: String,
    /// Most messages to show (1 .. 1024).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max: u16,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The queue the messages were received from.
    pub queue: String,
    /// Receipts (52 hex digits each).
    #[arg(required = true)]
    pub receipts: Vec<String>,
}

#[derive(Debug, Args)]
pub struct VisibilityArgs {
    /// The queue the message was received from.
    pub queue: String,
    /// The receipt (52 hex digits).
    pub receipt: String,
    /// The lease now ends this long from now; 0 releases the message.
    #[arg(value_parser = parse_ms_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// The dead-letter queue.
    pub queue: String,
    /// Most messages to move, at least 1 [default: all].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// Move them to this queue instead of back to the queues they were
    /// dead-lettered from (on the same broker).
    #[arg(long, value_name = "QUEUE")]
    pub to: Option<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write sluice.1 and one page per subcommand (sluice-queue-create.1,
    /// ...) into this directory, made if need be, instead of printing
    /// sluice.1.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}
