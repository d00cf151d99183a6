//! `sluice-loadgen`: drives sluice or a peer broker with a workload and
//! reports throughput, latency percentiles and correctness.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

use sluice_loadgen::adapter::TargetUrl;
use sluice_loadgen::config::{RunConfig, RunSpec, Workload};
use sluice_loadgen::flags::{parse_count, parse_duration, parse_size, read_token_file};
use sluice_loadgen::report::{self, hgrm, json, markdown, svg, table};
use sluice_loadgen::run::{self, Output, PassReport};
use sluice_loadgen::slo::Slo;

/// mimalloc, as the broker's binary uses: the client side's allocations per
/// request (frames, results, replies) cost 20 fewer instructions a message
/// with it than with the system's allocator (callgrind, 2 + 2 connections,
/// batches of 64, window 1), on every target alike.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status when a pass failed (a broker error, a refused set-up).
const EXIT_FAILED: u8 = 1;
/// Exit status for bad flags (clap's own, and the checks of `RunConfig`).
const EXIT_USAGE: u8 = 2;
/// Exit status when an SLO was violated.
const EXIT_SLO: u8 = 3;
/// Exit status when messages were lost.
const EXIT_LOST: u8 = 4;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum WorkloadArg {
    /// Closed loop: producers and consumers run concurrently; send, receive,
    /// delete; messages/s end to end and send-to-receive latency.
    Throughput,
    /// Open loop at --rate; latency from each message's intended send time
    /// (coordinated omission corrected).
    Latency,
    /// Messages left undeleted (--fail-ratio of them) come back after the
    /// visibility timeout; reports how late.
    Redelivery,
}

impl From<WorkloadArg> for Workload {
    fn from(w: WorkloadArg) -> Self {
        match w {
            WorkloadArg::Throughput => Workload::Throughput,
            WorkloadArg::Latency => Workload::Latency,
            WorkloadArg::Redelivery => Workload::Redelivery,
        }
    }
}

/// Load generator for sluice and, side by side with the same workload and
/// the same measurement, Redis 7 streams, beanstalkd and NATS JetStream.
///
/// Every message body carries its sequence number and send time, so latency
/// and correctness (lost, duplicated) are measured from the body. Each run
/// prints the configuration it used, a progress line every second on stderr,
/// and a table per target and pass. Each pass also reports the load
/// generator's own CPU use and, where the system counts it (a Linux virtual
/// machine), the time the hypervisor took from the CPUs while it ran
/// ("steal"): tails the brokers did not cause.
#[derive(Debug, Parser)]
#[command(
    name = "sluice-loadgen",
    version,
    after_help = "Exit status: 0 all passes ran and met the SLO; 1 a pass failed; 2 bad flags; \
                  3 an SLO was violated; 4 messages were lost.\n\
                  Every flag but --target, --token-file and the AWS ones also reads \
                  SLUICE_LOADGEN_<FLAG> from the environment; --token-file reads SLUICE_TOKEN_FILE, \
                  as sluice-server and sluice do, and the AWS flags read AWS_ACCESS_KEY_ID, \
                  AWS_SECRET_ACCESS_KEY and AWS_REGION (or AWS_DEFAULT_REGION), as the AWS SDKs do.\n\
                  Durations (250us, 1.5s, 2m) and sizes (100, 4KiB, 1M, 1.5MiB) follow the grammar \
                  sluice-server and sluice share; counts take k, M, G (10^3, 10^6, 10^9)."
)]
struct Args {
    /// The workload to run.
    #[arg(value_enum)]
    workload: WorkloadArg,

    /// A broker to drive: sluice://HOST:PORT (or HOST:PORT), redis://HOST:PORT,
    /// beanstalkd://HOST:PORT, nats://HOST:PORT or sqs://HOST:PORT (any
    /// SQS-compatible server: sluice's SQS door, moto); sluice://A,B,C drives
    /// several sluice brokers as one, a queue on each (connection n on
    /// queue n mod brokers). Repeat to compare: every target runs the same
    /// workload, interleaved over --passes.
    #[arg(long = "target", value_name = "URL", required = true, value_parser = TargetUrl::parse)]
    targets: Vec<TargetUrl>,

    /// Passes over all targets (target A, B, C, then A, B, C again...); with
    /// more than one, the table adds a median row per target.
    #[arg(long, default_value_t = 1, env = "SLUICE_LOADGEN_PASSES")]
    passes: u32,

    /// Messages to send per target and pass (k, M, G suffixes; default
    /// 100000 when --duration is not given).
    #[arg(long, value_name = "N", value_parser = parse_count, conflicts_with = "duration",
          env = "SLUICE_LOADGEN_MESSAGES")]
    messages: Option<u64>,

    /// Send for this long per target and pass instead (e.g. 10s, 2m).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, env = "SLUICE_LOADGEN_DURATION")]
    duration: Option<Duration>,

    /// Producer threads, one connection each.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "SLUICE_LOADGEN_PRODUCERS"
    )]
    producers: usize,

    /// Consumer threads, one connection each.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "SLUICE_LOADGEN_CONSUMERS"
    )]
    consumers: usize,

    /// Body size (at least 32 bytes: sequence number and timestamps); B,
    /// KiB, MiB suffixes.
    #[arg(long, value_name = "BYTES", default_value = "100", value_parser = parse_size,
          env = "SLUICE_LOADGEN_SIZE")]
    size: usize,

    /// Largest send, receive and delete batch (1..=1024), through each
    /// broker's batch or pipeline path.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        env = "SLUICE_LOADGEN_BATCH"
    )]
    batch: usize,

    /// Closed loop: the producers wait while this many messages are sent and
    /// not yet deleted (default: 64 batches per consumer, at least 8192,
    /// for the throughput workload; 2097152 for redelivery). A small bound
    /// keeps the queue shallow, for a server whose operations slow down
    /// with its depth (moto's).
    #[arg(long, value_name = "N", value_parser = parse_count, env = "SLUICE_LOADGEN_IN_FLIGHT_MAX")]
    in_flight_max: Option<u64>,

    /// Batches in flight per connection (1..=64): each producer keeps up to
    /// N sends unanswered, each consumer up to N receives and deletes, each
    /// pipelined on its connection through the broker's own path.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "SLUICE_LOADGEN_WINDOW"
    )]
    window: usize,

    /// Read spin for every target (e.g. 50us; default off): a connection's
    /// reading thread polls its socket that long, yielding to ready threads,
    /// before it blocks in a read, trading CPU for the wake-up of a blocking
    /// read. sluice's client has this spin (`ClientConfig::with_read_spin`);
    /// the Redis, NATS and beanstalkd adapters poll the same way.
    #[arg(long, value_name = "DUR", value_parser = parse_duration,
          env = "SLUICE_LOADGEN_READ_SPIN")]
    read_spin: Option<Duration>,

    /// Connect to sluice targets with TLS, trusting the CA certificates in
    /// this PEM file.
    #[arg(long, value_name = "PATH", env = "SLUICE_LOADGEN_SLUICE_TLS_CA")]
    sluice_tls_ca: Option<PathBuf>,

    /// The name sluice's certificate must carry (default: each target's
    /// host).
    #[arg(
        long,
        value_name = "NAME",
        env = "SLUICE_LOADGEN_SLUICE_TLS_SERVER_NAME"
    )]
    sluice_tls_server_name: Option<String>,

    /// Connect to sqss:// targets (HTTPS) trusting the CA certificates in
    /// this PEM file (default: the system's, from SSL_CERT_FILE or
    /// /etc/ssl/certs/ca-certificates.crt).
    #[arg(long, value_name = "PATH", env = "SLUICE_LOADGEN_SQS_TLS_CA")]
    sqs_tls_ca: Option<PathBuf>,

    /// Messages/s over all producers, open loop: the latency workload
    /// (default 10000), and the redelivery workload when given, so leases
    /// end evenly spread instead of all at once after a burst.
    #[arg(long, value_name = "N", value_parser = parse_count, env = "SLUICE_LOADGEN_RATE")]
    rate: Option<u64>,

    /// Lease of every receive: how long a received message stays invisible
    /// (default 30s; 1s for the redelivery workload). beanstalkd rounds it up
    /// to whole seconds.
    #[arg(long, value_name = "DUR", value_parser = parse_duration,
          env = "SLUICE_LOADGEN_VISIBILITY_TIMEOUT")]
    visibility_timeout: Option<Duration>,

    /// Message groups: the sends take N group ids in turn (sluice targets;
    /// default none). On a standard queue the groups take turns (a fair
    /// queue); with --fifo each group's messages keep their order.
    #[arg(long, value_name = "N", env = "SLUICE_LOADGEN_GROUPS")]
    groups: Option<usize>,

    /// A FIFO queue (sluice targets, with --groups): each message also
    /// carries a dedup key of its own.
    #[arg(long, env = "SLUICE_LOADGEN_FIFO")]
    fifo: bool,

    /// Every message with a dedup key of its own (sluice targets): what a
    /// FIFO queue's sends carry, to measure on a standard queue too.
    #[arg(long, env = "SLUICE_LOADGEN_DEDUP_KEYS")]
    dedup_keys: bool,

    /// One noisy tenant's backlog (sluice targets; k, M, G suffixes): this
    /// many messages put in the queue before each pass's clock starts, in
    /// group "noisy" with --groups (a fair queue: the groups are the quiet
    /// tenants) and without a group otherwise (a plain queue). The
    /// consumers drain them beside the pass's own messages, which alone are
    /// measured (the backlog counts as foreign bodies).
    #[arg(long, value_name = "N", value_parser = parse_count, env = "SLUICE_LOADGEN_BACKLOG")]
    backlog: Option<u64>,

    /// Share of first deliveries left undeleted, so they come back after the
    /// visibility timeout (default 1 for redelivery, 0 otherwise).
    #[arg(long, value_name = "F", env = "SLUICE_LOADGEN_FAIL_RATIO")]
    fail_ratio: Option<f64>,

    /// File holding the auth token (sluice HELLO, Redis AUTH, NATS
    /// auth_token; beanstalkd has none); trailing line ends are ignored.
    #[arg(long, value_name = "PATH", env = "SLUICE_TOKEN_FILE")]
    token_file: Option<PathBuf>,

    /// The access key SQS targets sign with (SigV4). Without it, and without
    /// AWS_ACCESS_KEY_ID, a placeholder key is used, which a local server
    /// that checks no signature accepts.
    #[arg(long, value_name = "ID", env = "AWS_ACCESS_KEY_ID")]
    aws_access_key_id: Option<String>,

    /// The secret of --aws-access-key-id. Prefer AWS_SECRET_ACCESS_KEY: a
    /// flag's value shows in the process list.
    #[arg(
        long,
        value_name = "SECRET",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    aws_secret_access_key: Option<String>,

    /// The region SQS requests are signed for (default: AWS_REGION, else
    /// AWS_DEFAULT_REGION, else us-east-1, as the AWS SDKs and CLI look).
    #[arg(long, value_name = "REGION", env = "AWS_REGION")]
    aws_region: Option<String>,

    /// Write the results as JSON: an array with one object per target and
    /// pass.
    #[arg(long, value_name = "FILE", env = "SLUICE_LOADGEN_JSON")]
    json: Option<PathBuf>,

    /// Write HdrHistogram percentile files (.hgrm, values in ms) per target,
    /// pass and metric into this directory.
    #[arg(long, value_name = "DIR", env = "SLUICE_LOADGEN_HGRM")]
    hgrm: Option<PathBuf>,

    /// Draw an SVG percentile plot, one curve per target (send to receive;
    /// redelivery lateness for the redelivery workload).
    #[arg(long, value_name = "FILE.svg", env = "SLUICE_LOADGEN_PLOT")]
    plot: Option<PathBuf>,

    /// Write a Markdown table of each target's medians over the passes, with
    /// ratios against the first target (msgs/s and p99).
    #[arg(long, value_name = "FILE.md", env = "SLUICE_LOADGEN_MARKDOWN")]
    markdown: Option<PathBuf>,

    /// Objectives on the same metric, e.g. 'p99<2ms' or 'p50<200us,p999<=1ms,max<10ms'
    /// (p50, p90, p99, p999, max; us, ms, s); exit 3 when any target or pass
    /// violates one.
    #[arg(long, value_name = "EXPR", value_parser = Slo::parse, env = "SLUICE_LOADGEN_SLO")]
    slo: Option<Slo>,

    /// No progress line on stderr.
    #[arg(long, env = "SLUICE_LOADGEN_QUIET")]
    quiet: bool,
}

fn write_outputs(args: &Args, reports: &[PassReport], workload: Workload) -> Result<()> {
    if let Some(path) = &args.json {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        json::write(reports, &mut f).with_context(|| format!("writing {}", path.display()))?;
        f.flush()?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &args.hgrm {
        let written = hgrm::write_dir(dir, reports)
            .with_context(|| format!("writing into {}", dir.display()))?;
        println!("wrote {} .hgrm files into {}", written.len(), dir.display());
    }
    if let Some(path) = &args.plot {
        let metric = match workload {
            Workload::Redelivery => "redelivery lateness",
            _ => "send to receive",
        };
        let title = format!("{metric} by percentile ({workload} workload)");
        let plot = svg::render(&title, &report::merged_by_target(reports));
        std::fs::write(path, plot).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main_inner() -> Result<ExitCode> {
    let args = Args::parse();
    let token = match args.token_file.as_deref().map(read_token_file).transpose() {
        Ok(token) => token,
        Err(e) => return Ok(usage(&e)),
    };
    let cfg = RunConfig::new(RunSpec {
        workload: Some(args.workload.into()),
        targets: args.targets.clone(),
        passes: Some(args.passes),
        messages: args.messages,
        duration: args.duration,
        producers: Some(args.producers),
        consumers: Some(args.consumers),
        size: Some(args.size),
        batch: Some(args.batch),
        window: Some(args.window),
        in_flight_max: args.in_flight_max,
        read_spin: args.read_spin,
        sluice_tls_ca: args.sluice_tls_ca.clone(),
        sluice_tls_server_name: args.sluice_tls_server_name.clone(),
        sqs_tls_ca: args.sqs_tls_ca.clone(),
        rate: args.rate,
        visibility_timeout: args.visibility_timeout,
        fail_ratio: args.fail_ratio,
        token,
        groups: args.groups,
        fifo: args.fifo,
        dedup_keys: args.dedup_keys,
        backlog: args.backlog,
        aws_access_key_id: args.aws_access_key_id.clone(),
        aws_secret_access_key: args.aws_secret_access_key.clone(),
        aws_region: args
            .aws_region
            .clone()
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok()),
    });
    let cfg = match cfg {
        Ok(cfg) => cfg,
        Err(e) => return Ok(usage(&e)),
    };

    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    let outcomes = {
        let mut out = Output {
            config: &mut stdout,
            progress: if args.quiet { None } else { Some(&mut stderr) },
        };
        run::run(&cfg, &mut out)
    };
    println!();
    table::write_all(&mut std::io::stdout(), &outcomes, cfg.passes)?;

    let reports: Vec<PassReport> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok().cloned())
        .collect();
    write_outputs(&args, &reports, cfg.workload)?;
    if let Some(path) = &args.markdown {
        let mut text = Vec::new();
        markdown::write(&mut text, &outcomes)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }

    let mut code = 0;
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    if failed > 0 {
        eprintln!("error: {failed} pass(es) failed");
        code = EXIT_FAILED;
    }
    if let Some(slo) = &args.slo {
        for r in &reports {
            for v in slo.check(&r.primary_percentiles()) {
                eprintln!(
                    "SLO violated: {} pass {}: {} {v}",
                    r.target,
                    r.pass,
                    r.primary_name()
                );
                if code == 0 {
                    code = EXIT_SLO;
                }
            }
        }
    }
    let lost: u64 = reports.iter().map(|r| r.tally.lost).sum();
    if lost > 0 {
        eprintln!("error: {lost} message(s) lost");
        if code == 0 {
            code = EXIT_LOST;
        }
    }
    Ok(ExitCode::from(code))
}

/// A bad flag: said, and exit 2, as `--help` promises.
fn usage(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(EXIT_USAGE)
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}
