//! `sluice-chaos`: the fault suite and the soak, against a `sluice-server`
//! process it starts itself on loopback.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args as ClapArgs, Parser, Subcommand};

use sluice_loadgen::chaos::consumer::{self, ConsumeArgs};
use sluice_loadgen::chaos::report::{self, SuiteJson};
use sluice_loadgen::chaos::server::ServerSpec;
use sluice_loadgen::chaos::soak::{self, SoakSpec};
use sluice_loadgen::chaos::{Ctx, Mode, faults};
use sluice_loadgen::flags::parse_duration;

/// Exit status when a fault or the soak found a violation.
const EXIT_VIOLATION: u8 = 1;
/// Exit status when a scenario could not run (server would not start...).
const EXIT_SETUP: u8 = 3;

/// Fault suite for sluice: starts the release `sluice-server`, does faults
/// to it over real sockets (consumers killed holding leases, connection
/// churn, clients that never read, partial frames, 10,000 idle
/// connections, memory pressure, SIGTERM under load, the broker killed and
/// started again on its write-ahead log) and counts every
/// message: nothing lost, duplicates counted, the accounting identity
/// intact, descriptors back, memory bounded. Prints a table per fault and
/// exits non-zero on any violation, naming it.
///
/// `sluice-chaos soak --duration 30m` runs mixed load against one server
/// instead, sampling its memory, descriptors and counters.
#[derive(Debug, Parser)]
#[command(
    name = "sluice-chaos",
    version,
    after_help = "Exit status: 0 every check passed; 1 a violation (named in the output); \
                  2 bad flags; 3 a scenario could not run.\n\
                  Everything runs on loopback; every loop is bounded in count and time."
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    server: ServerArgs,

    /// The short form (the whole suite in under 2 minutes), as CI runs it.
    #[arg(long)]
    quick: bool,

    /// Run only these faults (comma-separated names; see --list).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    only: Vec<String>,

    /// List the faults and exit.
    #[arg(long)]
    list: bool,
}

#[derive(Debug, ClapArgs)]
struct ServerArgs {
    /// The sluice-server binary [default: sluice-server beside this
    /// executable].
    #[arg(long, value_name = "PATH", global = true)]
    server: Option<PathBuf>,

    /// Shards of the server.
    #[arg(long, default_value_t = 2, global = true)]
    shards: u16,

    /// The server's --cpus: `none` leaves its threads to the scheduler (the
    /// default: the suite's own processes share the machine), `auto` or a
    /// list pins them.
    #[arg(long, default_value = "none", global = true)]
    cpus: String,

    /// A further flag for the server (repeat it), e.g. --server-arg=--io=epoll.
    #[arg(
        long = "server-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        global = true
    )]
    server_args: Vec<String>,

    /// Also write the results as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE", global = true)]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Mixed load against one server for a given time, sampling its RSS,
    /// descriptors and counters every --sample-every; at the end RSS and
    /// descriptors must be flat after warm-up (within 5%), the server's log
    /// free of WARN and ERROR lines, and no message lost.
    Soak(SoakArgs),
    /// A consumer child process (the suite starts these itself).
    #[command(hide = true)]
    Consume(ConsumeCli),
}

#[derive(Debug, ClapArgs)]
struct SoakArgs {
    /// How long the load runs (e.g. 30m, 2h).
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    duration: Duration,
    /// Time between samples.
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    sample_every: Duration,
    /// Samples taken before this are warm-up; the first one after it is the
    /// reference for flatness.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    warmup: Duration,
    /// Messages per second the producers aim at.
    #[arg(long, default_value_t = 5_000)]
    rate: u32,
}

#[derive(Debug, ClapArgs)]
struct ConsumeCli {
    #[arg(long)]
    addr: String,
    #[arg(long)]
    queue: String,
    #[arg(long)]
    run_tag: u32,
    #[arg(long)]
    batch: u16,
    #[arg(long)]
    visibility_ms: u64,
    #[arg(long)]
    hold_max_ms: u64,
    #[arg(long)]
    leave_per_mille: u32,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice-chaos: {e:#}");
            ExitCode::from(EXIT_SETUP)
        }
    }
}

fn run(args: Args) -> Result<ExitCode> {
    if let Some(Command::Consume(c)) = &args.command {
        let a = ConsumeArgs {
            addr: c.addr.clone(),
            queue: c.queue.clone(),
            run_tag: c.run_tag,
            batch: c.batch,
            visibility: Duration::from_millis(c.visibility_ms),
            hold_max: Duration::from_millis(c.hold_max_ms),
            leave_per_mille: c.leave_per_mille,
        };
        return Ok(ExitCode::from(consumer::run_child(&a)));
    }
    if args.list {
        for f in faults::ALL {
            println!("{:<16} {}", f.name, f.description);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let binary = args
        .server
        .server
        .clone()
        .unwrap_or_else(ServerSpec::default_binary);
    if !binary.is_file() {
        bail!(
            "no server binary at {} (build it with `cargo build --release --bin sluice-server`, \
             or give --server PATH)",
            binary.display()
        );
    }
    let spec = ServerSpec {
        binary,
        shards: args.server.shards,
        cpus: args.server.cpus.clone(),
        extra: args.server.server_args.clone(),
    };
    let ctx = Ctx {
        spec,
        mode: if args.quick { Mode::Quick } else { Mode::Full },
        verbose: true,
        exe: std::env::current_exe().context("this executable's path")?,
    };
    raise_open_files();
    match args.command {
        Some(Command::Soak(s)) => run_soak(&ctx, &s, args.server.json.as_ref()),
        Some(Command::Consume(_)) => unreachable!("handled above"),
        None => run_faults(&ctx, &args.only, args.server.json.as_ref()),
    }
}

/// Raises this process's open-files limit to its hard limit: the idle
/// connections fault holds 10,000 sockets.
fn raise_open_files() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            eprintln!("sluice-chaos: cannot raise the open-files limit: {e}");
        }
    }
}

fn run_faults(ctx: &Ctx, only: &[String], json: Option<&PathBuf>) -> Result<ExitCode> {
    let mut chosen = Vec::new();
    if only.is_empty() {
        chosen.extend(faults::ALL.iter());
    } else {
        for name in only {
            let Some(f) = faults::find(name) else {
                bail!("no fault named `{name}` (see --list)");
            };
            chosen.push(f);
        }
    }
    let started = Instant::now();
    let mode = ctx.mode;
    println!(
        "sluice-chaos: {} faults, {} form, server {} --shards {} --cpus {}",
        chosen.len(),
        ctx.mode.pick("full", "quick"),
        ctx.spec.binary.display(),
        ctx.spec.shards,
        ctx.spec.cpus
    );
    let mut reports = Vec::new();
    let mut setup_failed = Vec::new();
    for f in chosen {
        eprintln!("-- {}: {}", f.name, f.description);
        match (f.run)(ctx) {
            Ok(r) => {
                println!("{}", report::fault_table(&r));
                let _ = std::io::stdout().flush();
                reports.push(r);
            }
            Err(e) => {
                println!("== {} [ERROR] could not run: {e}\n", f.name);
                setup_failed.push(f.name);
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("{}", report::summary_table(&reports));
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.name.as_str())
        .collect();
    println!(
        "sluice-chaos: {} of {} faults passed in {seconds:.1} s{}",
        reports.len() - failed.len(),
        reports.len() + setup_failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; VIOLATIONS in {}", failed.join(", "))
        }
    );
    if let Some(path) = json {
        let doc = SuiteJson {
            mode,
            server: ctx.spec.binary.display().to_string(),
            seconds,
            passed: failed.is_empty() && setup_failed.is_empty(),
            faults: &reports,
        };
        write_json(path, &doc)?;
    }
    if !failed.is_empty() {
        return Ok(ExitCode::from(EXIT_VIOLATION));
    }
    if !setup_failed.is_empty() {
        bail!("could not run: {}", setup_failed.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_soak(ctx: &Ctx, s: &SoakArgs, json: Option<&PathBuf>) -> Result<ExitCode> {
    let spec = SoakSpec {
        duration: s.duration,
        sample_every: s.sample_every,
        warmup: s.warmup,
        rate: s.rate,
    };
    let r = soak::run(ctx, &spec)?;
    println!("{}", soak::table(&r));
    if let Some(path) = json {
        write_json(path, &r)?;
    }
    if r.violations.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_VIOLATION))
    }
}

fn write_json(path: &PathBuf, doc: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(doc)?;
    if path.as_os_str() == "-" {
        println!("{text}");
    } else {
        std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
