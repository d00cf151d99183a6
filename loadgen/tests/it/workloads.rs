//! Each adapter against its real server, through the library.

use std::time::Duration;

use sluice_loadgen::adapter::TargetUrl;
use sluice_loadgen::config::{RunConfig, RunSpec, Workload};
use sluice_loadgen::run::{self, Output, PassReport};

use crate::peers::{self, PeerKind};
use crate::sluice::SluiceServer;

pub(crate) const MESSAGES: u64 = 2_000;

pub(crate) fn spec(url: &str, workload: Workload) -> RunSpec {
    RunSpec {
        workload: Some(workload),
        targets: vec![TargetUrl::parse(url).unwrap()],
        messages: Some(MESSAGES),
        producers: Some(2),
        consumers: Some(2),
        batch: Some(64),
        ..RunSpec::default()
    }
}

pub(crate) fn run_one(spec: RunSpec) -> PassReport {
    let cfg = RunConfig::new(spec).unwrap();
    let mut printed = Vec::new();
    let mut outcomes = {
        let mut out = Output {
            config: &mut printed,
            progress: None,
        };
        run::run(&cfg, &mut out)
    };
    println!("{}", String::from_utf8_lossy(&printed));
    assert_eq!(outcomes.len(), 1);
    let o = outcomes.remove(0);
    o.result.unwrap_or_else(|e| panic!("{}: {e}", o.target))
}

fn throughput(kind: PeerKind) {
    let Some(peer) = peers::start(kind) else {
        return;
    };
    check_throughput(&peer.url());
}

fn check_throughput(url: &str) {
    let mut s = spec(url, Workload::Throughput);
    s.visibility_timeout = Some(Duration::from_secs(1));
    let r = run_one(s);
    assert_eq!(r.tally.sent, MESSAGES);
    assert_eq!(r.tally.deleted, MESSAGES);
    assert_eq!(r.tally.lost, 0, "lost");
    assert_eq!(r.duplicates, 0, "duplicates");
    assert_eq!(r.corrupt, 0);
    assert!(!r.drain_timed_out);
    assert_eq!(r.recorder.send_to_receive.len(), MESSAGES);
    assert_eq!(r.recorder.cycle.len(), MESSAGES);
    check_machine(&r);
}

/// The pass reports the load generator's CPU use and, where the system
/// counts it, the steal of every CPU.
fn check_machine(r: &PassReport) {
    let cpu = r.cpu.expect("a process CPU clock");
    assert!(cpu.busy > Duration::ZERO, "the pass's threads used CPU");
    assert!(cpu.wall >= r.active, "the pass spans its active time");
    assert!(cpu.cpus >= 1);
    let Some(cpus) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| sluice_loadgen::machine::parse_proc_stat(&t))
    else {
        assert!(r.steal.is_none(), "nothing to count it from");
        return;
    };
    let steal = r.steal.as_ref().expect("the system counts steal");
    let counted: Vec<usize> = steal.per_cpu.iter().map(|&(cpu, _)| cpu).collect();
    let online: Vec<usize> = cpus.iter().map(|&(cpu, _)| cpu).collect();
    assert_eq!(counted, online);
    for &(cpu, d) in &steal.per_cpu {
        assert_eq!(
            d.as_nanos() % steal.tick.as_nanos(),
            0,
            "cpu{cpu}: whole ticks"
        );
    }
}

fn redelivery(kind: PeerKind) {
    let Some(peer) = peers::start(kind) else {
        return;
    };
    check_redelivery(&peer.url());
}

fn check_redelivery(url: &str) {
    let mut s = spec(url, Workload::Redelivery);
    s.visibility_timeout = Some(Duration::from_secs(1));
    s.fail_ratio = Some(0.5);
    let r = run_one(s);
    assert_eq!(r.tally.sent, MESSAGES);
    assert!(r.tally.left > 0, "some messages were left undeleted");
    assert_eq!(
        r.tally.redelivered, r.tally.left,
        "every left message came back"
    );
    assert_eq!(r.tally.deleted, MESSAGES);
    assert_eq!(r.tally.lost, 0);
    assert_eq!(r.recorder.lateness.len(), r.tally.left);
}

fn latency(kind: PeerKind) {
    let Some(peer) = peers::start(kind) else {
        return;
    };
    check_latency(&peer.url());
}

fn check_latency(url: &str) {
    let mut s = spec(url, Workload::Latency);
    s.messages = Some(1_000);
    s.rate = Some(5_000);
    let r = run_one(s);
    assert_eq!((r.tally.sent, r.tally.deleted), (1_000, 1_000));
    assert_eq!((r.tally.lost, r.duplicates), (0, 0));
    assert_eq!(r.recorder.send_to_receive_uncorrected.len(), 1_000);
}

/// Every workload with 8 batches in flight per connection, through the
/// adapter's pipelined path.
fn windowed(kind: PeerKind) {
    let Some(peer) = peers::start(kind) else {
        return;
    };
    check_window(&peer.url());
}

fn check_window(url: &str) {
    let mut s = spec(url, Workload::Throughput);
    s.window = Some(8);
    s.visibility_timeout = Some(Duration::from_secs(1));
    let r = run_one(s);
    assert!(
        r.settings
            .iter()
            .any(|x| x.value.contains("up to 8 batches"))
    );
    assert_eq!((r.tally.sent, r.tally.deleted), (MESSAGES, MESSAGES));
    assert_eq!((r.tally.lost, r.duplicates, r.corrupt), (0, 0, 0));
    assert!(!r.drain_timed_out);

    let mut s = spec(url, Workload::Redelivery);
    s.window = Some(8);
    s.visibility_timeout = Some(Duration::from_secs(1));
    s.fail_ratio = Some(0.5);
    let r = run_one(s);
    assert!(r.tally.left > 0);
    assert_eq!(
        r.tally.redelivered, r.tally.left,
        "every left message came back"
    );
    assert_eq!((r.tally.deleted, r.tally.lost), (MESSAGES, 0));

    let mut s = spec(url, Workload::Latency);
    s.window = Some(8);
    s.messages = Some(1_000);
    s.rate = Some(5_000);
    let r = run_one(s);
    assert_eq!((r.tally.sent, r.tally.deleted), (1_000, 1_000));
    assert_eq!((r.tally.lost, r.duplicates), (0, 0));
}

/// Every adapter with a read spin (`--read-spin`): its reads poll before
/// they block, and nothing else changes.
fn spinning(kind: PeerKind) {
    let Some(peer) = peers::start(kind) else {
        return;
    };
    check_read_spin(&peer.url());
}

fn check_read_spin(url: &str) {
    for (workload, window) in [(Workload::Throughput, 1), (Workload::Latency, 8)] {
        let mut s = spec(url, workload);
        s.read_spin = Some(Duration::from_micros(200));
        s.window = Some(window);
        if workload == Workload::Latency {
            s.rate = Some(5_000);
        }
        let r = run_one(s);
        assert!(
            r.settings
                .iter()
                .any(|x| x.name == "read spin" && x.value.starts_with("200us")),
            "{:?}",
            r.settings
        );
        assert_eq!((r.tally.sent, r.tally.deleted), (MESSAGES, MESSAGES));
        assert_eq!((r.tally.lost, r.duplicates, r.corrupt), (0, 0, 0));
        assert!(!r.drain_timed_out);
    }
}

#[test]
fn sluice_read_spin() {
    let server = SluiceServer::start(&[]);
    check_read_spin(&server.url());
}

#[test]
fn redis_read_spin() {
    spinning(PeerKind::Redis);
}

#[test]
fn beanstalkd_read_spin() {
    spinning(PeerKind::Beanstalkd);
}

#[test]
fn nats_read_spin() {
    spinning(PeerKind::Nats);
}

#[test]
fn sluice_window_8() {
    let server = SluiceServer::start(&[]);
    check_window(&server.url());
}

#[test]
fn redis_window_8() {
    windowed(PeerKind::Redis);
}

#[test]
fn beanstalkd_window_8() {
    windowed(PeerKind::Beanstalkd);
}

#[test]
fn nats_window_8() {
    windowed(PeerKind::Nats);
}

#[test]
fn sluice_throughput() {
    let server = SluiceServer::start(&[]);
    check_throughput(&server.url());
}

#[test]
fn sluice_redelivery() {
    let server = SluiceServer::start(&[]);
    check_redelivery(&server.url());
}

#[test]
fn sluice_latency() {
    let server = SluiceServer::start(&[]);
    check_latency(&server.url());
}

#[test]
fn redis_throughput() {
    throughput(PeerKind::Redis);
}

#[test]
fn redis_redelivery() {
    redelivery(PeerKind::Redis);
}

#[test]
fn redis_latency() {
    latency(PeerKind::Redis);
}

#[test]
fn beanstalkd_throughput() {
    throughput(PeerKind::Beanstalkd);
}

#[test]
fn beanstalkd_redelivery() {
    redelivery(PeerKind::Beanstalkd);
}

#[test]
fn beanstalkd_latency() {
    latency(PeerKind::Beanstalkd);
}

#[test]
fn nats_throughput() {
    throughput(PeerKind::Nats);
}

#[test]
fn nats_redelivery() {
    redelivery(PeerKind::Nats);
}

#[test]
fn nats_latency() {
    latency(PeerKind::Nats);
}

/// The queue is gone after a pass: a second pass gets a fresh one and the
/// first leaves nothing behind to be received by it.
#[test]
fn passes_interleave_over_targets_with_fresh_queues() {
    let Some(redis) = peers::start(PeerKind::Redis) else {
        return;
    };
    let Some(beanstalkd) = peers::start(PeerKind::Beanstalkd) else {
        return;
    };
    let cfg = RunConfig::new(RunSpec {
        workload: Some(Workload::Throughput),
        targets: vec![
            TargetUrl::parse(&redis.url()).unwrap(),
            TargetUrl::parse(&beanstalkd.url()).unwrap(),
        ],
        passes: Some(2),
        messages: Some(500),
        ..RunSpec::default()
    })
    .unwrap();
    let mut printed = Vec::new();
    let outcomes = run::run(
        &cfg,
        &mut Output {
            config: &mut printed,
            progress: None,
        },
    );
    let order: Vec<(String, u32)> = outcomes
        .iter()
        .map(|o| (o.target.to_string(), o.pass))
        .collect();
    assert_eq!(
        order,
        vec![
            (redis.url(), 1),
            (beanstalkd.url(), 1),
            (redis.url(), 2),
            (beanstalkd.url(), 2)
        ]
    );
    for o in &outcomes {
        let r = o.result.as_ref().unwrap();
        assert_eq!(
            (r.tally.deleted, r.tally.lost, r.duplicates, r.corrupt),
            (500, 0, 0, 0)
        );
    }
    let printed = String::from_utf8(printed).unwrap();
    let queues: Vec<&str> = printed
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("stream")
                .or_else(|| l.trim().strip_prefix("tube"))
        })
        .collect();
    assert_eq!(queues.len(), 4);
    let mut unique = queues.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        4,
        "a fresh queue per target and pass: {queues:?}"
    );
}

/// The token reaches the peers that have authentication; a wrong one fails
/// the pass with the server's refusal.
fn authenticated(kind: PeerKind, flags: &[&str]) {
    let Some(peer) = peers::start_with(kind, flags) else {
        return;
    };
    check_auth(&peer.url());
}

/// The server at `url` wants the token `s3cret`.
fn check_auth(url: &str) {
    let mut s = spec(url, Workload::Throughput);
    s.messages = Some(200);
    s.token = Some("s3cret".into());
    let r = run_one(s.clone());
    assert_eq!((r.tally.deleted, r.tally.lost), (200, 0));
    s.token = Some("wrong".into());
    let e = run_failure(s);
    assert!(e.contains("set-up failed"), "{e}");
}

/// The error of a run of one pass that must fail.
fn run_failure(spec: RunSpec) -> String {
    let cfg = RunConfig::new(spec).unwrap();
    let mut printed = Vec::new();
    let outcomes = run::run(
        &cfg,
        &mut Output {
            config: &mut printed,
            progress: None,
        },
    );
    match &outcomes[0].result {
        Ok(_) => panic!("the run was to fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sluice_auth() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sluice-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let server = SluiceServer::start(&["--token-file", token.to_str().unwrap()]);
    check_auth(&server.url());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn redis_auth() {
    authenticated(PeerKind::Redis, &["--requirepass", "s3cret"]);
}

#[test]
fn nats_auth() {
    authenticated(PeerKind::Nats, &["--auth", "s3cret"]);
}

#[test]
fn sluice_over_three_brokers_uses_a_queue_on_each() {
    let servers = [
        SluiceServer::start(&[]),
        SluiceServer::start(&[]),
        SluiceServer::start(&[]),
    ];
    let addrs: Vec<String> = servers
        .iter()
        .map(|s| s.url().trim_start_matches("sluice://").to_owned())
        .collect();
    let url = format!("sluice://{}", addrs.join(","));
    let mut s = spec(&url, Workload::Throughput);
    s.producers = Some(3);
    s.consumers = Some(3);
    let r = run_one(s);
    assert_eq!(r.tally.sent, MESSAGES);
    assert_eq!(r.tally.deleted, MESSAGES);
    assert_eq!((r.tally.lost, r.duplicates), (0, 0));
    // Every broker saw a third of the sends: one queue each.
    for srv in &servers {
        let c = sluice_client::Client::connect(sluice_client::ClientConfig::new(
            srv.url().trim_start_matches("sluice://"),
        ))
        .unwrap();
        let sends = c.server_stats().unwrap().counter("requests_send").unwrap();
        assert!(sends > 0, "a broker got no SEND");
    }
}

#[test]
fn sluice_over_tls() {
    let pki = sluice_broker::testing::TestPki::generate();
    let args = pki.server_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = SluiceServer::start(&args);
    let mut s = spec(&server.url(), Workload::Throughput);
    s.sluice_tls_ca = Some(pki.ca_pem());
    let r = run_one(s);
    assert_eq!(r.tally.deleted, MESSAGES);
    assert_eq!(r.tally.lost, 0);
    // Without the CA, the plain client is refused by the TLS port.
    let cfg = RunConfig::new(spec(&server.url(), Workload::Throughput)).unwrap();
    let mut printed = Vec::new();
    let outcomes = run::run(
        &cfg,
        &mut Output {
            config: &mut printed,
            progress: None,
        },
    );
    let err = outcomes[0].result.as_ref().err().map(ToString::to_string);
    assert!(err.as_deref().is_some_and(|e| e.contains("TLS")), "{err:?}");
}

/// A noisy tenant's backlog (`--backlog`): put in the queue before the
/// clock starts, drained by the consumers beside the pass's own messages
/// (counted as foreign bodies), which alone are measured. On a plain queue
/// it is all served first (it is older); on a fair one (`--groups`) it
/// takes its turns, and the pass may end before it is all drained.
#[test]
fn a_backlog_is_drained_beside_the_pass_and_left_out_of_its_measure() {
    const BACKLOG: u64 = 1_000;
    let server = SluiceServer::start(&[]);
    for groups in [None, Some(3)] {
        let mut s = spec(&server.url(), Workload::Throughput);
        s.backlog = Some(BACKLOG);
        s.groups = groups;
        let r = run_one(s);
        assert_eq!(
            (r.tally.sent, r.tally.deleted, r.tally.lost, r.duplicates),
            (MESSAGES, MESSAGES, 0, 0),
            "groups {groups:?}"
        );
        assert_eq!(r.recorder.send_to_receive.len(), MESSAGES);
        match groups {
            None => assert_eq!(r.corrupt, BACKLOG, "the backlog, all of it, first"),
            Some(_) => assert!(
                (1..=BACKLOG).contains(&r.corrupt),
                "the backlog took turns: {}",
                r.corrupt
            ),
        }
    }
}

/// A FIFO queue's pass (`--fifo --groups`), and a plain queue's with a dedup
/// key on every message (`--dedup-keys`): every message has a key of its
/// own, so none is dropped as a duplicate, and all are delivered and
/// deleted once.
#[test]
fn fifo_and_keyed_passes_deliver_every_message_once() {
    let server = SluiceServer::start(&[]);
    for (fifo, groups, keys) in [(true, Some(7), false), (false, None, true)] {
        let mut s = spec(&server.url(), Workload::Throughput);
        s.fifo = fifo;
        s.groups = groups;
        s.dedup_keys = keys;
        let r = run_one(s);
        assert_eq!(
            (r.tally.sent, r.tally.deleted, r.tally.lost, r.duplicates),
            (MESSAGES, MESSAGES, 0, 0),
            "fifo {fifo}"
        );
        assert_eq!(r.corrupt, 0);
        assert_eq!(r.recorder.send_to_receive.len(), MESSAGES);
    }
}

/// Peers without groups refuse a backlog, as they refuse groups.
#[test]
fn only_sluice_takes_a_backlog() {
    let Some(peer) = peers::start(PeerKind::Redis) else {
        return;
    };
    let mut s = spec(&peer.url(), Workload::Throughput);
    s.backlog = Some(10);
    let err = run_failure(s);
    assert!(err.contains("--backlog"), "{err}");
}
