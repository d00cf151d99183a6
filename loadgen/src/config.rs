//! The run's configuration: raw settings from the command line
//! ([`RunSpec`]) become a validated [`RunConfig`] once, with every limit
//! checked here and named in [`limits`].

use std::fmt;
use std::time::Duration;

use crate::adapter::sqs::SqsCredentials;
use crate::adapter::{Kind, TargetUrl};
use crate::body::HEADER_BYTES;
use sluice_protocol::units::format_duration;

/// Every bound the load generator enforces, in one place.
pub mod limits {
    use std::time::Duration;

    /// Largest batch: the most any peer takes in one request (sluice's is
    /// 1,024 entries).
    pub const BATCH_MAX: usize = 1_024;
    /// Most producer threads.
    pub const PRODUCERS_MAX: usize = 256;
    /// Most consumer threads.
    pub const CONSUMERS_MAX: usize = 256;
    /// Largest body: 1 MiB, NATS's default `max_payload`.
    pub const BODY_BYTES_MAX: usize = 1 << 20;
    /// Most messages in one pass (the tracker keeps a byte for each).
    pub const MESSAGES_MAX: u64 = 1 << 32;
    /// Most passes.
    pub const PASSES_MAX: u32 = 100;
    /// Most batches in flight per connection (`--window`).
    pub const WINDOW_MAX: usize = 64;
    /// Longest `--read-spin` (the sluice client's own cap, for every target).
    pub const READ_SPIN_MAX: Duration = sluice_client::config::READ_SPIN_MAX;
    /// Most targets.
    pub const TARGETS_MAX: usize = 16;
    /// Highest open-loop rate, messages/s.
    pub const RATE_MAX: u64 = 100_000_000;
    /// Longest visibility timeout (sluice's own limit).
    pub const VISIBILITY_TIMEOUT_MAX: Duration = Duration::from_secs(12 * 3600);
    /// Longest `--duration`.
    pub const DURATION_MAX: Duration = Duration::from_secs(24 * 3600);
    /// Messages sent and not yet deleted beyond which closed-loop producers
    /// wait (throughput and redelivery workloads), so the broker's backlog
    /// stays bounded. The open-loop latency workload never waits: that
    /// would be coordinated omission. The redelivery workload uses this
    /// bound (room for a million leases in flight).
    pub const IN_FLIGHT_MAX: u64 = 1 << 21;
    /// The throughput workload's window: enough backlog to keep every
    /// consumer busy (this many batches per consumer, at least
    /// [`IN_FLIGHT_THROUGHPUT_MIN`] messages), small enough that
    /// send-to-receive latency measures a saturated broker rather than how
    /// long the producers ran ahead.
    pub const IN_FLIGHT_BATCHES_PER_CONSUMER: u64 = 64;
    /// The smallest throughput window.
    pub const IN_FLIGHT_THROUGHPUT_MIN: u64 = 8_192;
    /// How long consumers keep going after the producers stop, beyond twice
    /// the visibility timeout when messages are left undeleted.
    pub const DRAIN_BASE: Duration = Duration::from_secs(10);
    /// How long consumers keep receiving after the last message is deleted,
    /// to catch late duplicates.
    pub const LINGER: Duration = Duration::from_millis(250);
    /// Most message groups (`--groups`).
    pub const GROUPS_MAX: usize = 100_000;
    /// The longest a receive waits for a first message (the long poll).
    pub const RECEIVE_WAIT: Duration = Duration::from_millis(100);
}

/// The three workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Closed loop: send, receive, delete as fast as they go.
    Throughput,
    /// Open loop at a fixed rate; latency from the intended send time.
    Latency,
    /// Messages left undeleted; how late they come back.
    Redelivery,
}

impl Workload {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Throughput => "throughput",
            Workload::Latency => "latency",
            Workload::Redelivery => "redelivery",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What ends the sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// This many messages per pass.
    Messages(u64),
    /// Sending stops after this long.
    Duration(Duration),
}

/// The settings as given; `None` means the default.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// The workload.
    pub workload: Option<Workload>,
    /// `--target`, in order.
    pub targets: Vec<TargetUrl>,
    /// `--passes`.
    pub passes: Option<u32>,
    /// `--messages`.
    pub messages: Option<u64>,
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--producers`.
    pub producers: Option<usize>,
    /// `--consumers`.
    pub consumers: Option<usize>,
    /// `--size`.
    pub size: Option<usize>,
    /// `--batch`.
    pub batch: Option<usize>,
    /// `--window`.
    pub window: Option<usize>,
    /// `--in-flight-max`.
    pub in_flight_max: Option<u64>,
    /// `--rate`.
    pub rate: Option<u64>,
    /// `--visibility-timeout`.
    pub visibility_timeout: Option<Duration>,
    /// `--fail-ratio`.
    pub fail_ratio: Option<f64>,
    /// The token read from `--token-file`.
    pub token: Option<String>,
    /// `--read-spin`.
    pub read_spin: Option<Duration>,
    /// `--sluice-tls-ca`.
    pub sluice_tls_ca: Option<std::path::PathBuf>,
    /// `--sluice-tls-server-name`.
    pub sluice_tls_server_name: Option<String>,
    /// `--sqs-tls-ca`.
    pub sqs_tls_ca: Option<std::path::PathBuf>,
    /// `--groups`.
    pub groups: Option<usize>,
    /// `--fifo`.
    pub fifo: bool,
    /// `--dedup-keys`.
    pub dedup_keys: bool,
    /// `--backlog`.
    pub backlog: Option<u64>,
    /// `--aws-access-key-id` (or `AWS_ACCESS_KEY_ID`).
    pub aws_access_key_id: Option<String>,
    /// `--aws-secret-access-key` (or `AWS_SECRET_ACCESS_KEY`).
    pub aws_secret_access_key: Option<String>,
    /// `--aws-region` (or `AWS_REGION`).
    pub aws_region: Option<String>,
}

/// A setting that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The workload.
    pub workload: Workload,
    /// The brokers, in the order they run within a pass.
    pub targets: Vec<TargetUrl>,
    /// Passes over all targets, interleaved.
    pub passes: u32,
    /// What ends the sending.
    pub bound: Bound,
    /// Producer threads (one connection each).
    pub producers: usize,
    /// Consumer threads (one connection each).
    pub consumers: usize,
    /// Body size in bytes.
    pub size: usize,
    /// Largest send, receive and delete batch.
    pub batch: usize,
    /// Batches in flight per connection: sends per producer, receives and
    /// deletes per consumer.
    pub window: usize,
    /// Open-loop rate in messages/s: always for the latency workload, when
    /// asked for the redelivery workload.
    pub rate: Option<u64>,
    /// Visibility timeout (lease) of every receive.
    pub visibility_timeout: Duration,
    /// Share of first deliveries left undeleted.
    pub fail_ratio: f64,
    /// Auth token for the peers that have one.
    pub token: Option<String>,
    /// How long consumers may keep going after the producers stop.
    pub drain_timeout: Duration,
    /// Closed-loop producers wait while this many messages are sent and not
    /// yet deleted; `None` for the open loop.
    pub in_flight_max: Option<u64>,
    /// How long every data connection's reads poll before they block: the
    /// sluice client's read spin, and the same poll in the peers' adapters
    /// (zero: off, the default).
    pub read_spin: Duration,
    /// TLS for sluice targets (`--sluice-tls-ca`).
    pub sluice_tls: Option<sluice_client::tls::TlsConfig>,
    /// The key SQS targets sign with (`None`: the placeholder).
    pub sqs: Option<SqsCredentials>,
    /// TLS for `sqss://` targets: `--sqs-tls-ca`, or the system's CA
    /// certificates.
    pub sqs_tls: Option<sluice_client::tls::TlsConfig>,
    /// Message groups the sends take in turn (0: none).
    pub groups: usize,
    /// A FIFO queue (sluice targets; with `groups`).
    pub fifo: bool,
    /// Every message with a dedup key of its own (sluice targets): what a
    /// FIFO queue's sends carry, on any queue.
    pub dedup_keys: bool,
    /// Messages of one noisy tenant put in the queue before the pass's
    /// clock starts (sluice targets): group `noisy` with `groups`, no group
    /// without. The consumers delete them as bodies not of the pass.
    pub backlog: u64,
}

/// The largest `--backlog`: the messages sit in the broker's memory.
pub const BACKLOG_MAX: u64 = 100_000_000;

/// `--messages` when neither it nor `--duration` is given.
pub const DEFAULT_MESSAGES: u64 = 100_000;
/// `--rate` for the latency workload when not given.
pub const DEFAULT_RATE: u64 = 10_000;
/// `--batch` when not given.
pub const DEFAULT_BATCH: usize = 64;
/// `--window` when not given: one batch in flight per connection.
pub const DEFAULT_WINDOW: usize = 1;
/// `--size` when not given (the 100-byte payloads of the benchmarks).
pub const DEFAULT_SIZE: usize = 100;

impl RunConfig {
    /// Validates raw settings.
    pub fn new(spec: RunSpec) -> Result<RunConfig, ConfigError> {
        use limits::*;
        let fail = |m: String| Err(ConfigError(m));
        let workload = spec.workload.unwrap_or(Workload::Throughput);
        if spec.targets.is_empty() {
            return fail("give at least one --target".into());
        }
        if spec.targets.len() > TARGETS_MAX {
            return fail(format!("at most {TARGETS_MAX} targets"));
        }
        let passes = spec.passes.unwrap_or(1);
        if !(1..=PASSES_MAX).contains(&passes) {
            return fail(format!("--passes must be 1..={PASSES_MAX}"));
        }
        let bound = check_bound(spec.messages, spec.duration)?;
        let producers = spec.producers.unwrap_or(1);
        if !(1..=PRODUCERS_MAX).contains(&producers) {
            return fail(format!("--producers must be 1..={PRODUCERS_MAX}"));
        }
        let consumers = spec.consumers.unwrap_or(1);
        if !(1..=CONSUMERS_MAX).contains(&consumers) {
            return fail(format!("--consumers must be 1..={CONSUMERS_MAX}"));
        }
        let size = spec.size.unwrap_or(DEFAULT_SIZE);
        if !(HEADER_BYTES..=BODY_BYTES_MAX).contains(&size) {
            return fail(format!(
                "--size must be {HEADER_BYTES}..={BODY_BYTES_MAX} bytes (the body carries a \
                 {HEADER_BYTES}-byte header: sequence number and timestamps)"
            ));
        }
        let batch = spec.batch.unwrap_or(DEFAULT_BATCH);
        if !(1..=BATCH_MAX).contains(&batch) {
            return fail(format!("--batch must be 1..={BATCH_MAX}"));
        }
        let window = spec.window.unwrap_or(DEFAULT_WINDOW);
        if !(1..=WINDOW_MAX).contains(&window) {
            return fail(format!("--window must be 1..={WINDOW_MAX}"));
        }
        let rate = check_rate(workload, spec.rate, bound)?;
        let (visibility_timeout, fail_ratio) =
            check_lease(workload, spec.visibility_timeout, spec.fail_ratio)?;
        let drain_timeout = if fail_ratio > 0.0 {
            // Leases rounded up to whole seconds (beanstalkd) end within
            // visibility + 1 s; twice that leaves room for a slow broker.
            DRAIN_BASE + (visibility_timeout + Duration::from_secs(1)) * 2
        } else {
            DRAIN_BASE
        };
        let in_flight_max = check_in_flight(
            spec.in_flight_max,
            in_flight_max(workload, rate, batch, consumers),
            batch,
        )?;
        let read_spin = spec.read_spin.unwrap_or(Duration::ZERO);
        if read_spin > READ_SPIN_MAX {
            return fail(format!(
                "--read-spin must be at most {}",
                format_duration(READ_SPIN_MAX)
            ));
        }
        let sluice_tls = check_sluice_tls(spec.sluice_tls_ca, spec.sluice_tls_server_name)?;
        let sqs_tls = check_sqs_tls(spec.sqs_tls_ca, &spec.targets)?;
        let sqs = check_sqs_credentials(
            spec.aws_access_key_id,
            spec.aws_secret_access_key,
            spec.aws_region,
        )?;
        let groups = spec.groups.unwrap_or(0);
        if groups > GROUPS_MAX {
            return fail(format!("--groups must be at most {GROUPS_MAX}"));
        }
        if spec.fifo && groups == 0 {
            return fail("--fifo needs --groups: a FIFO queue's messages carry a group".into());
        }
        let backlog = spec.backlog.unwrap_or(0);
        if backlog > BACKLOG_MAX {
            return fail(format!("--backlog must be at most {BACKLOG_MAX}"));
        }
        if backlog > 0 && spec.fifo {
            return fail(
                "--backlog is one tenant's backlog on a standard queue (a fair queue with \
                 --groups, a plain one without); not with --fifo"
                    .into(),
            );
        }
        Ok(RunConfig {
            backlog,
            groups,
            fifo: spec.fifo,
            dedup_keys: spec.dedup_keys,
            in_flight_max,
            read_spin,
            sluice_tls,
            sqs,
            sqs_tls,
            workload,
            targets: spec.targets,
            passes,
            bound,
            producers,
            consumers,
            size,
            batch,
            window,
            rate,
            visibility_timeout,
            fail_ratio,
            token: spec.token,
            drain_timeout,
        })
    }

    /// The upper bound on sequence numbers in a pass.
    pub fn capacity(&self) -> u64 {
        match (self.bound, self.rate) {
            (Bound::Messages(n), _) => n,
            (Bound::Duration(d), Some(rate)) => {
                let n = d.as_nanos() * u128::from(rate) / 1_000_000_000;
                u64::try_from(n)
                    .unwrap_or(limits::MESSAGES_MAX)
                    .min(limits::MESSAGES_MAX)
            }
            (Bound::Duration(_), None) => limits::MESSAGES_MAX,
        }
    }

    /// One line describing the workload, for the printed configuration.
    pub fn describe(&self) -> String {
        let bound = match self.bound {
            Bound::Messages(n) => format!("{n} messages"),
            Bound::Duration(d) => format!("{} of sending", format_duration(d)),
        };
        let mut s = format!(
            "{} workload: {bound}, {} B bodies, batch {}, window {}, {} producer(s), {} \
             consumer(s), visibility timeout {}, fail ratio {}, drain timeout {}",
            self.workload,
            self.size,
            self.batch,
            self.window,
            self.producers,
            self.consumers,
            format_duration(self.visibility_timeout),
            self.fail_ratio,
            format_duration(self.drain_timeout),
        );
        if let Some(rate) = self.rate {
            s.push_str(&format!(", open loop at {rate} messages/s"));
        }
        if let Some(window) = self.in_flight_max {
            s.push_str(&format!(", producers wait while {window} are in flight"));
        }
        s
    }
}

/// `--messages` or `--duration` (not both; neither: [`DEFAULT_MESSAGES`]).
fn check_bound(messages: Option<u64>, duration: Option<Duration>) -> Result<Bound, ConfigError> {
    use limits::*;
    let fail = |m: String| Err(ConfigError(m));
    let bound = match (messages, duration) {
        (Some(_), Some(_)) => return fail("give --messages or --duration, not both".into()),
        (Some(n), None) => {
            if !(1..=MESSAGES_MAX).contains(&n) {
                return fail(format!("--messages must be 1..={MESSAGES_MAX}"));
            }
            Bound::Messages(n)
        }
        (None, Some(d)) => {
            if d.is_zero() || d > DURATION_MAX {
                return fail(format!(
                    "--duration must be above 0 and at most {}",
                    format_duration(DURATION_MAX)
                ));
            }
            Bound::Duration(d)
        }
        (None, None) => Bound::Messages(DEFAULT_MESSAGES),
    };
    Ok(bound)
}

/// `--rate`, by workload, and what it schedules within `--duration`.
fn check_rate(
    workload: Workload,
    rate: Option<u64>,
    bound: Bound,
) -> Result<Option<u64>, ConfigError> {
    use limits::*;
    let fail = |m: String| Err(ConfigError(m));
    let rate = match (workload, rate) {
        (Workload::Latency, r) => Some(r.unwrap_or(DEFAULT_RATE)),
        // Paced sends make the leases end evenly spread, as they would
        // in service, instead of all at once after a burst.
        (Workload::Redelivery, r) => r,
        (Workload::Throughput, Some(_)) => {
            return fail(
                "--rate applies to the latency and redelivery workloads (throughput is closed loop)"
                    .into(),
            );
        }
        (Workload::Throughput, None) => None,
    };
    if rate.is_some_and(|r| !(1..=RATE_MAX).contains(&r)) {
        return fail(format!("--rate must be 1..={RATE_MAX}"));
    }
    if let (Some(rate), Bound::Duration(d)) = (rate, bound) {
        let n = d.as_secs_f64() * rate as f64;
        if n > MESSAGES_MAX as f64 {
            return fail(format!(
                "--rate x --duration exceeds {MESSAGES_MAX} messages"
            ));
        }
        if n < 1.0 {
            return fail("--rate x --duration schedules no message".into());
        }
    }
    Ok(rate)
}

/// `--visibility-timeout` and `--fail-ratio`, with their defaults by
/// workload.
fn check_lease(
    workload: Workload,
    visibility_timeout: Option<Duration>,
    fail_ratio: Option<f64>,
) -> Result<(Duration, f64), ConfigError> {
    use limits::*;
    let fail = |m: String| Err(ConfigError(m));
    let visibility_timeout = visibility_timeout.unwrap_or(match workload {
        Workload::Redelivery => Duration::from_secs(1),
        _ => Duration::from_secs(30),
    });
    if visibility_timeout.is_zero() || visibility_timeout > VISIBILITY_TIMEOUT_MAX {
        return fail(format!(
            "--visibility-timeout must be above 0 and at most {}",
            format_duration(VISIBILITY_TIMEOUT_MAX)
        ));
    }
    let fail_ratio = fail_ratio.unwrap_or(match workload {
        Workload::Redelivery => 1.0,
        _ => 0.0,
    });
    if !(0.0..=1.0).contains(&fail_ratio) {
        return fail("--fail-ratio must be within 0..=1".into());
    }
    if workload == Workload::Redelivery && fail_ratio == 0.0 {
        return fail("the redelivery workload needs a --fail-ratio above 0".into());
    }
    Ok((visibility_timeout, fail_ratio))
}

/// `--in-flight-max` (`given`) against the workload's own bound
/// (`default`; `None` for the open loop, which it cannot bound).
fn check_in_flight(
    given: Option<u64>,
    default: Option<u64>,
    batch: usize,
) -> Result<Option<u64>, ConfigError> {
    let fail = |m: String| Err(ConfigError(m));
    match (given, default) {
        (None, default) => Ok(default),
        (Some(_), None) => fail(
            "--in-flight-max bounds the closed loop: not with --rate or the latency workload"
                .into(),
        ),
        (Some(n), Some(_)) if n < batch as u64 || n > limits::IN_FLIGHT_MAX => fail(format!(
            "--in-flight-max must be at least --batch ({batch}) and at most {}",
            limits::IN_FLIGHT_MAX
        )),
        (Some(n), Some(_)) => Ok(Some(n)),
    }
}

/// The closed loop's bound on messages sent and not yet deleted.
fn in_flight_max(
    workload: Workload,
    rate: Option<u64>,
    batch: usize,
    consumers: usize,
) -> Option<u64> {
    use limits::*;
    match workload {
        _ if rate.is_some() => None,
        Workload::Latency => None,
        Workload::Redelivery => Some(IN_FLIGHT_MAX),
        Workload::Throughput => Some(
            (IN_FLIGHT_BATCHES_PER_CONSUMER * batch as u64 * consumers as u64)
                .clamp(IN_FLIGHT_THROUGHPUT_MIN, IN_FLIGHT_MAX),
        ),
    }
}

/// TLS for sluice targets, from `--sluice-tls-ca` and
/// `--sluice-tls-server-name`.
fn check_sluice_tls(
    ca: Option<std::path::PathBuf>,
    server_name: Option<String>,
) -> Result<Option<sluice_client::tls::TlsConfig>, ConfigError> {
    let fail = |m: String| Err(ConfigError(m));
    let sluice_tls = match (ca, server_name) {
        (None, None) => None,
        (None, Some(_)) => {
            return fail("--sluice-tls-server-name needs --sluice-tls-ca".into());
        }
        (Some(ca), name) => {
            let tls = sluice_client::tls::TlsConfig::with_ca_file(&ca)
                .map_err(|e| ConfigError(format!("--sluice-tls-ca: {e}")))?;
            Some(match name {
                Some(name) => tls.server_name(name),
                None => tls,
            })
        }
    };
    Ok(sluice_tls)
}

/// Where Debian, Fedora and Alpine keep the system's CA certificates, in
/// one PEM file (`SSL_CERT_FILE` first, as OpenSSL reads it).
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// TLS for `sqss://` targets: trusting the CA certificates of
/// `--sqs-tls-ca`, or, for an `sqss://` target without it, the system's.
fn check_sqs_tls(
    ca: Option<std::path::PathBuf>,
    targets: &[TargetUrl],
) -> Result<Option<sluice_client::tls::TlsConfig>, ConfigError> {
    let load = |ca: &std::path::Path, flag: &str| {
        sluice_client::tls::TlsConfig::with_ca_file(ca)
            .map(Some)
            .map_err(|e| ConfigError(format!("{flag}: {e}")))
    };
    if let Some(ca) = ca {
        return load(&ca, "--sqs-tls-ca");
    }
    if !targets.iter().any(|t| t.kind == Kind::Sqss) {
        return Ok(None);
    }
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(SYSTEM_CA_FILES.iter().map(std::path::PathBuf::from))
        .find(|p| p.is_file());
    match system {
        Some(file) => load(
            &file,
            &format!("the system's CA certificates ({})", file.display()),
        ),
        None => Err(ConfigError(format!(
            "sqss:// needs CA certificates to trust: --sqs-tls-ca FILE (none in SSL_CERT_FILE \
             or {})",
            SYSTEM_CA_FILES.join(", ")
        ))),
    }
}

/// The key SQS targets sign with: an access key and its secret, both or
/// neither (then `None`, the placeholder), in `region` (`us-east-1` when
/// not given).
fn check_sqs_credentials(
    key: Option<String>,
    secret: Option<String>,
    region: Option<String>,
) -> Result<Option<SqsCredentials>, ConfigError> {
    let fail = |m: String| Err(ConfigError(m));
    let region = region.unwrap_or_else(|| "us-east-1".to_owned());
    if region.is_empty()
        || !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return fail(format!(
            "--aws-region must be a region name such as us-east-1, not {region:?}"
        ));
    }
    match (key, secret) {
        (None, None) => Ok(None),
        (Some(access_key), Some(secret)) if !access_key.is_empty() && !secret.is_empty() => {
            Ok(Some(SqsCredentials {
                access_key,
                secret,
                region,
            }))
        }
        _ => fail(
            "an AWS access key needs its secret: --aws-access-key-id and              --aws-secret-access-key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), both              non-empty, or neither"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RunSpec {
        RunSpec {
            targets: vec![TargetUrl::parse("redis://127.0.0.1:6379").unwrap()],
            ..RunSpec::default()
        }
    }

    #[test]
    fn fifo_needs_groups_and_groups_are_bounded() {
        let fifo = RunConfig::new(RunSpec {
            fifo: true,
            ..spec()
        });
        assert!(fifo.unwrap_err().0.contains("--groups"));
        let many = RunConfig::new(RunSpec {
            groups: Some(limits::GROUPS_MAX + 1),
            ..spec()
        });
        assert!(many.unwrap_err().0.contains("--groups"));
        let c = RunConfig::new(RunSpec {
            groups: Some(1_000),
            fifo: true,
            ..spec()
        })
        .unwrap();
        assert_eq!((c.groups, c.fifo), (1_000, true));
        assert_eq!(RunConfig::new(spec()).unwrap().groups, 0);
    }

    #[test]
    fn a_backlog_is_bounded_and_not_for_fifo() {
        let c = RunConfig::new(RunSpec {
            backlog: Some(1_000_000),
            groups: Some(99),
            ..spec()
        })
        .unwrap();
        assert_eq!((c.backlog, c.groups), (1_000_000, 99));
        let fifo = RunConfig::new(RunSpec {
            backlog: Some(10),
            groups: Some(2),
            fifo: true,
            ..spec()
        });
        assert!(fifo.unwrap_err().0.contains("--fifo"));
        let huge = RunConfig::new(RunSpec {
            backlog: Some(BACKLOG_MAX + 1),
            ..spec()
        });
        assert!(huge.unwrap_err().0.contains("--backlog"));
        assert_eq!(RunConfig::new(spec()).unwrap().backlog, 0);
    }

    #[test]
    fn the_closed_loop_can_be_bounded_tighter() {
        let c = RunConfig::new(RunSpec {
            in_flight_max: Some(100),
            batch: Some(10),
            ..spec()
        })
        .unwrap();
        assert_eq!(c.in_flight_max, Some(100));
        assert!(
            c.describe()
                .contains("producers wait while 100 are in flight")
        );
        for (n, workload, rate, says) in [
            (5, Workload::Throughput, None, "at least --batch"),
            (
                limits::IN_FLIGHT_MAX + 1,
                Workload::Redelivery,
                None,
                "at most",
            ),
            (100, Workload::Latency, Some(1_000), "not with --rate"),
            (100, Workload::Redelivery, Some(1_000), "not with --rate"),
        ] {
            let err = RunConfig::new(RunSpec {
                in_flight_max: Some(n),
                batch: Some(10),
                workload: Some(workload),
                rate,
                ..spec()
            })
            .unwrap_err();
            assert!(err.0.contains(says), "{n}: {err}");
        }
    }

    #[test]
    fn defaults_per_workload() {
        let c = RunConfig::new(spec()).unwrap();
        assert_eq!(c.workload, Workload::Throughput);
        assert_eq!(c.bound, Bound::Messages(DEFAULT_MESSAGES));
        assert_eq!(
            (c.batch, c.size, c.fail_ratio),
            (DEFAULT_BATCH, DEFAULT_SIZE, 0.0)
        );
        assert_eq!(c.window, 1, "one batch in flight by default");
        assert_eq!(c.read_spin, Duration::ZERO, "the client's default");
        assert_eq!(c.visibility_timeout, Duration::from_secs(30));
        assert_eq!(c.drain_timeout, limits::DRAIN_BASE);
        assert_eq!(c.in_flight_max, Some(limits::IN_FLIGHT_THROUGHPUT_MIN));
        let wide = RunConfig::new(RunSpec {
            batch: Some(256),
            consumers: Some(4),
            ..spec()
        })
        .unwrap();
        assert_eq!(wide.in_flight_max, Some(64 * 256 * 4));
        let r = RunConfig::new(RunSpec {
            workload: Some(Workload::Redelivery),
            ..spec()
        })
        .unwrap();
        assert_eq!(
            (r.fail_ratio, r.visibility_timeout),
            (1.0, Duration::from_secs(1))
        );
        assert_eq!(r.drain_timeout, limits::DRAIN_BASE + Duration::from_secs(4));
        assert_eq!(
            (r.rate, r.in_flight_max),
            (None, Some(limits::IN_FLIGHT_MAX))
        );
        let paced = RunConfig::new(RunSpec {
            workload: Some(Workload::Redelivery),
            rate: Some(1_000),
            ..spec()
        })
        .unwrap();
        assert_eq!((paced.rate, paced.in_flight_max), (Some(1_000), None));
        let l = RunConfig::new(RunSpec {
            workload: Some(Workload::Latency),
            duration: Some(Duration::from_secs(2)),
            ..spec()
        })
        .unwrap();
        assert_eq!(l.rate, Some(DEFAULT_RATE));
        assert_eq!(l.in_flight_max, None);
        assert_eq!(l.capacity(), 2 * DEFAULT_RATE);
        assert!(l.describe().contains("open loop at 10000 messages/s"));
    }

    #[test]
    fn refuses_what_cannot_run() {
        let cases: Vec<(RunSpec, &str)> = vec![
            (
                RunSpec {
                    targets: vec![],
                    ..spec()
                },
                "--target",
            ),
            (
                RunSpec {
                    messages: Some(5),
                    duration: Some(Duration::from_secs(1)),
                    ..spec()
                },
                "not both",
            ),
            (
                RunSpec {
                    size: Some(HEADER_BYTES - 1),
                    ..spec()
                },
                "--size",
            ),
            (
                RunSpec {
                    batch: Some(0),
                    ..spec()
                },
                "--batch",
            ),
            (
                RunSpec {
                    batch: Some(limits::BATCH_MAX + 1),
                    ..spec()
                },
                "--batch",
            ),
            (
                RunSpec {
                    rate: Some(5),
                    ..spec()
                },
                "throughput is closed loop",
            ),
            (
                RunSpec {
                    window: Some(0),
                    ..spec()
                },
                "--window",
            ),
            (
                RunSpec {
                    read_spin: Some(Duration::from_secs(1)),
                    ..spec()
                },
                "--read-spin",
            ),
            (
                RunSpec {
                    sluice_tls_server_name: Some("broker".into()),
                    ..spec()
                },
                "--sluice-tls-server-name needs --sluice-tls-ca",
            ),
            (
                RunSpec {
                    sluice_tls_ca: Some("/nonexistent/sluice-ca.pem".into()),
                    ..spec()
                },
                "--sluice-tls-ca",
            ),
            (
                RunSpec {
                    sqs_tls_ca: Some("/nonexistent/sqs-ca.pem".into()),
                    ..spec()
                },
                "--sqs-tls-ca",
            ),
            (
                RunSpec {
                    window: Some(limits::WINDOW_MAX + 1),
                    ..spec()
                },
                "--window",
            ),
            (
                RunSpec {
                    fail_ratio: Some(1.5),
                    ..spec()
                },
                "--fail-ratio",
            ),
            (
                RunSpec {
                    visibility_timeout: Some(Duration::ZERO),
                    ..spec()
                },
                "--visibility-timeout",
            ),
            (
                RunSpec {
                    workload: Some(Workload::Redelivery),
                    fail_ratio: Some(0.0),
                    ..spec()
                },
                "above 0",
            ),
            (
                RunSpec {
                    passes: Some(0),
                    ..spec()
                },
                "--passes",
            ),
            (
                RunSpec {
                    producers: Some(0),
                    ..spec()
                },
                "--producers",
            ),
            (
                RunSpec {
                    workload: Some(Workload::Latency),
                    rate: Some(1),
                    duration: Some(Duration::from_millis(10)),
                    ..spec()
                },
                "no message",
            ),
        ];
        for (s, needle) in cases {
            let err = RunConfig::new(s).unwrap_err();
            assert!(err.0.contains(needle), "{err} should mention {needle}");
        }
    }
}
