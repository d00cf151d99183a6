//! The `sqs://` target against sluice's SQS door, in-process: every
//! workload, the pipelined path, and SigV4 signatures the door checks with
//! `--sqs-credentials`.

use std::time::Duration;

use sluice_broker::testing::TestServer;
use sluice_loadgen::adapter::TargetUrl;
use sluice_loadgen::config::{RunConfig, RunSpec, Workload};
use sluice_loadgen::run::{self, Output};

use crate::peers::{self, PeerKind};
use crate::workloads::{MESSAGES, run_one, spec};

/// The door's access key in the signed tests.
const KEY: &str = "AKIDLOADGENTEST";
const SECRET: &str = "l0adgen-s3cret";

/// A server with its SQS door open; with `--sqs-credentials` when
/// `credentials`.
struct Door {
    server: TestServer,
    _credentials: Option<CredentialsFile>,
}

struct CredentialsFile(std::path::PathBuf);

impl Drop for CredentialsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Door {
    fn start(credentials: bool) -> Door {
        let file = credentials.then(|| {
            let path = std::env::temp_dir().join(format!(
                "sluice-loadgen-sqs-creds-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&path, format!("{KEY} {SECRET} 111122223333\n")).unwrap();
            CredentialsFile(path)
        });
        let mut b = TestServer::builder().arg("--sqs-listen", "127.0.0.1:0");
        if let Some(f) = &file {
            b = b.arg("--sqs-credentials", f.0.to_str().unwrap());
        }
        Door {
            server: b.start(),
            _credentials: file,
        }
    }

    fn url(&self) -> String {
        let addr = self
            .server
            .handle()
            .sqs_addr()
            .expect("the SQS door is open");
        format!("sqs://{addr}")
    }
}

/// A run of `workload` against the door in batches of 10 (SQS's most).
fn sqs_spec(door: &Door, workload: Workload) -> RunSpec {
    let mut s = spec(&door.url(), workload);
    s.batch = Some(10);
    s.visibility_timeout = Some(Duration::from_secs(1));
    s
}

#[test]
fn throughput_through_the_sqs_door() {
    let door = Door::start(false);
    let r = run_one(sqs_spec(&door, Workload::Throughput));
    assert_eq!((r.tally.sent, r.tally.deleted), (MESSAGES, MESSAGES));
    assert_eq!((r.tally.lost, r.duplicates, r.corrupt), (0, 0, 0));
    assert_eq!(r.recorder.send_to_receive.len(), MESSAGES);
    assert!(!r.drain_timed_out);
    let settings: Vec<String> = r
        .settings
        .iter()
        .map(|s| format!("{}: {}", s.name, s.value))
        .collect();
    let settings = settings.join("\n");
    for want in [
        "SQS JSON protocol",
        "placeholder key sluice-loadgen",
        "VisibilityTimeout 1 s",
    ] {
        assert!(settings.contains(want), "{want} in {settings}");
    }
}

#[test]
fn redelivery_through_the_sqs_door() {
    let door = Door::start(false);
    let mut s = sqs_spec(&door, Workload::Redelivery);
    s.fail_ratio = Some(0.5);
    let r = run_one(s);
    assert_eq!(r.tally.sent, MESSAGES);
    assert!(r.tally.left > 0, "some messages were left undeleted");
    assert_eq!(
        r.tally.redelivered, r.tally.left,
        "every left message came back"
    );
    assert_eq!((r.tally.deleted, r.tally.lost), (MESSAGES, 0));
    assert_eq!(r.recorder.lateness.len(), r.tally.left);
}

#[test]
fn latency_and_a_window_of_8_through_the_sqs_door() {
    let door = Door::start(false);
    let mut s = sqs_spec(&door, Workload::Latency);
    s.messages = Some(1_000);
    s.rate = Some(5_000);
    let r = run_one(s);
    assert_eq!((r.tally.sent, r.tally.deleted), (1_000, 1_000));
    assert_eq!((r.tally.lost, r.duplicates), (0, 0));

    // Requests pipelined on each connection.
    let mut s = sqs_spec(&door, Workload::Throughput);
    s.window = Some(8);
    let r = run_one(s);
    assert_eq!((r.tally.sent, r.tally.deleted), (MESSAGES, MESSAGES));
    assert_eq!((r.tally.lost, r.duplicates, r.corrupt), (0, 0, 0));
}

#[test]
fn sqss_speaks_https_to_the_door_over_tls() {
    let pki = sluice_broker::testing::TestPki::generate();
    let server = TestServer::builder()
        .arg("--sqs-listen", "127.0.0.1:0")
        .args(&pki.server_args())
        .start();
    let addr = server.handle().sqs_addr().expect("the SQS door is open");
    let tls_spec = |ca: std::path::PathBuf| {
        let mut s = spec(&format!("sqss://{addr}"), Workload::Throughput);
        s.batch = Some(10);
        s.sqs_tls_ca = Some(ca);
        s
    };
    let r = run_one(tls_spec(pki.ca_pem()));
    assert_eq!((r.tally.sent, r.tally.deleted), (MESSAGES, MESSAGES));
    assert_eq!((r.tally.lost, r.duplicates, r.corrupt), (0, 0, 0));
    let settings: Vec<String> = r.settings.iter().map(|s| s.value.clone()).collect();
    assert!(
        settings.iter().any(|s| s.contains("over TLS (HTTPS)")),
        "{settings:?}"
    );
    // A CA that did not sign the door's certificate: refused, saying TLS.
    let err = pass_error(tls_spec(pki.other_ca_pem()));
    assert!(err.as_deref().is_some_and(|e| e.contains("TLS")), "{err:?}");
    // Plain HTTP to the TLS door: no pass either.
    let mut plain = spec(&format!("sqs://{addr}"), Workload::Throughput);
    plain.batch = Some(10);
    assert!(pass_error(plain).is_some());
}

/// The same target drives another SQS server: moto's (which `.ci/run`
/// installs; skipped elsewhere when it is missing). moto moves tens of
/// messages a second, so the passes are small, and its queue is kept
/// short (`--in-flight-max`), as BENCHMARKS.md runs it.
#[test]
fn the_sqs_target_drives_motos_server_too() {
    let Some(moto) = peers::start(PeerKind::Moto) else {
        return;
    };
    let small = |workload| {
        let mut s = spec(&moto.url(), workload);
        s.batch = Some(10);
        s.messages = Some(100);
        s.in_flight_max = Some(50);
        s.visibility_timeout = Some(Duration::from_secs(1));
        s
    };
    let r = run_one(small(Workload::Throughput));
    assert_eq!((r.tally.sent, r.tally.deleted), (100, 100));
    assert_eq!((r.tally.lost, r.corrupt), (0, 0));
    // Left once, every message comes back after its lease.
    let mut s = small(Workload::Redelivery);
    s.fail_ratio = Some(0.5);
    let r = run_one(s);
    assert!(r.tally.left > 0, "some messages were left undeleted");
    assert_eq!(r.tally.redelivered, r.tally.left);
    assert_eq!((r.tally.deleted, r.tally.lost), (100, 0));
}

/// One pass's outcome: its error's text, if it failed.
fn pass_error(s: RunSpec) -> Option<String> {
    let cfg = RunConfig::new(s).unwrap();
    let mut printed = Vec::new();
    let mut out = Output {
        config: &mut printed,
        progress: None,
    };
    let outcome = run::run(&cfg, &mut out).remove(0);
    outcome.result.err().map(|e| e.to_string())
}

#[test]
fn the_door_checks_the_signatures_with_credentials() {
    let door = Door::start(true);
    let signed = |key: Option<&str>, secret: Option<&str>| {
        let mut s = sqs_spec(&door, Workload::Throughput);
        s.messages = Some(200);
        s.aws_access_key_id = key.map(str::to_owned);
        s.aws_secret_access_key = secret.map(str::to_owned);
        s.aws_region = Some("eu-west-1".to_owned());
        s
    };
    let r = run_one(signed(Some(KEY), Some(SECRET)));
    assert_eq!((r.tally.deleted, r.tally.lost), (200, 0));
    assert!(
        r.settings
            .iter()
            .any(|s| s.value.contains(&format!("access key {KEY} in eu-west-1")))
    );
    // A wrong secret, an unknown key, the placeholder: refused at set-up.
    for (key, secret, code) in [
        (Some(KEY), Some("wrong"), "SignatureDoesNotMatch"),
        (Some("AKIDUNKNOWN"), Some(SECRET), "InvalidClientTokenId"),
        (None, None, "InvalidClientTokenId"),
    ] {
        let err = pass_error(signed(key, secret)).expect("refused");
        assert!(err.contains(code), "{key:?}: {err}");
    }
}

#[test]
fn what_sqs_cannot_take_is_refused_before_a_pass() {
    let door = Door::start(false);
    let mut s = sqs_spec(&door, Workload::Throughput);
    s.visibility_timeout = Some(Duration::from_millis(250));
    let err = pass_error(s).expect("refused");
    assert!(err.contains("whole seconds"), "{err}");
    let mut s = sqs_spec(&door, Workload::Throughput);
    s.batch = Some(64);
    let err = pass_error(s).expect("refused");
    assert!(err.contains("at most 10"), "{err}");
    let mut s = sqs_spec(&door, Workload::Throughput);
    s.groups = Some(4);
    assert!(pass_error(s).expect("refused").contains("sluice's"));
    // Half a key pair is a usage error.
    let mut s = sqs_spec(&door, Workload::Throughput);
    s.aws_access_key_id = Some(KEY.into());
    let err = RunConfig::new(s).unwrap_err().to_string();
    assert!(err.contains("needs its secret"), "{err}");
    assert!(TargetUrl::parse("sqs://127.0.0.1").unwrap().port == 9324);
}
