//! The SQS door against clients nobody here wrote: the pytest suite in
//! `sqs/tests/clients` drives boto3 and the aws CLI against a server this
//! test starts on free loopback ports (every action, the README's first
//! flow, MD5s against values AWS published); `sqs/tests/sigv4` checks
//! signatures with `--sqs-credentials`, `sqs/tests/tls` the door over
//! HTTPS, `sqs/tests/node` the AWS SDK for JavaScript v3, and
//! `sqs/tests/kombu` kombu's SQS transport (Celery's).
//!
//! The client suite runs twice: with current boto3 and aws CLI, which speak
//! the AWS JSON 1.0 protocol, and with botocore 1.33 and its aws CLI, which
//! speak the query protocol (form posts, XML replies).
//!
//! The clients live in virtualenvs, `target/venv-sqs` and
//! `target/venv-sqs-query` (`.ci/run` installs them from
//! `sqs/tests/clients/requirements.txt` and `requirements-query.txt`), or
//! the Pythons named by `SLUICE_SQS_PYTHON` and `SLUICE_SQS_QUERY_PYTHON`.
//! Without them the tests say so and skip, except under `CI=true`, where
//! they fail.

use std::path::PathBuf;
use std::process::Command;

use sluice_broker::server::config::IoChoice;

use crate::server_util::{CredentialsFile, start};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python with boto3, the aws CLI and pytest (JSON protocol), or
/// `None` (skip).
fn python() -> Option<PathBuf> {
    python_in("SLUICE_SQS_PYTHON", "venv-sqs", "requirements.txt")
}

/// The Python with botocore 1.33 (query protocol), or `None` (skip).
fn query_python() -> Option<PathBuf> {
    python_in(
        "SLUICE_SQS_QUERY_PYTHON",
        "venv-sqs-query",
        "requirements-query.txt",
    )
}

/// The Python named by `variable`, else `target/VENV`'s, if it has boto3,
/// pytest and awscli; else `None` (skip), or under `CI=true` a failure.
fn python_in(variable: &str, venv: &str, requirements: &str) -> Option<PathBuf> {
    let python = std::env::var_os(variable).map_or_else(
        || workspace().join(format!("target/{venv}/bin/python")),
        PathBuf::from,
    );
    let ok = Command::new(&python)
        .args(["-c", "import boto3, pytest, awscli"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{} has no boto3, pytest and awscli: under CI=true .ci/run installs them \
         (sqs/tests/clients/{requirements})",
        python.display()
    );
    eprintln!(
        "SKIP: no boto3/pytest/awscli at {} (python3 -m venv target/{venv} && \
         target/{venv}/bin/pip install -r sqs/tests/clients/{requirements})",
        python.display()
    );
    None
}

fn boto3_and_the_aws_cli_pass_the_client_suite(io: IoChoice) {
    let Some(python) = python() else { return };
    run_client_suite(io, &python, "json");
}

/// The same suite through botocore 1.33 and its aws CLI: every action over
/// the query protocol.
fn botocore_1_33_passes_the_client_suite_over_the_query_protocol(io: IoChoice) {
    let Some(python) = query_python() else { return };
    run_client_suite(io, &python, "query");
}

/// `sqs/tests/clients` with `python`'s clients, which speak `protocol`.
fn run_client_suite(io: IoChoice, python: &std::path::Path, protocol: &str) {
    let Some(server) = start(io, &["--sqs-listen", "127.0.0.1:0", "--shards", "2"]) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door is open");
    run_pytest(
        python,
        "sqs/tests/clients",
        &[
            ("SLUICE_SQS_ENDPOINT", format!("http://{sqs}")),
            ("SLUICE_SQS_PROTOCOL", protocol.to_owned()),
        ],
    );
}

/// With `--sqs-credentials`, signatures are checked (`sqs/tests/sigv4`),
/// over the JSON protocol.
fn signatures_are_checked_with_credentials(io: IoChoice) {
    let Some(python) = python() else { return };
    run_sigv4_suite(io, &python, "json");
}

/// The same over the query protocol: signed form posts and presigned GETs.
fn signatures_are_checked_over_the_query_protocol(io: IoChoice) {
    let Some(python) = query_python() else { return };
    run_sigv4_suite(io, &python, "query");
}

fn run_sigv4_suite(io: IoChoice, python: &std::path::Path, protocol: &str) {
    let credentials = CredentialsFile::new(
        &format!("sigv4-{protocol}-{io:?}"),
        "# access key, secret, account\nAKIDSLUICETEST s3cr3t-f0r-tests 111122223333\n",
    );
    let Some(server) = start(
        io,
        &[
            "--sqs-listen",
            "127.0.0.1:0",
            "--sqs-credentials",
            &credentials.path,
        ],
    ) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door is open");
    run_pytest(
        python,
        "sqs/tests/sigv4",
        &[
            ("SLUICE_SQS_ENDPOINT", format!("http://{sqs}")),
            ("SLUICE_SQS_KEY", "AKIDSLUICETEST".to_owned()),
            ("SLUICE_SQS_SECRET", "s3cr3t-f0r-tests".to_owned()),
            ("SLUICE_SQS_ACCOUNT", "111122223333".to_owned()),
        ],
    );
}

/// kombu (Celery's messaging library) round-trips over its SQS transport.
fn kombu_round_trips_over_its_sqs_transport(io: IoChoice) {
    let Some(python) = python() else { return };
    let has_kombu = Command::new(&python)
        .args(["-c", "import kombu, pycurl"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_kombu,
        "{} has no kombu: pip install -r sqs/tests/clients/requirements.txt",
        python.display()
    );
    let Some(server) = start(io, &["--sqs-listen", "127.0.0.1:0"]) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door is open");
    run_pytest(
        &python,
        "sqs/tests/kombu",
        &[("SLUICE_SQS_ENDPOINT", format!("http://{sqs}"))],
    );
}

/// With `--tls-cert`, the door is HTTPS with the binary port's certificate
/// (`sqs/tests/tls`).
fn the_door_serves_https_with_the_servers_certificate(io: IoChoice) {
    let Some(python) = python() else { return };
    let pki = sluice_broker::testing::TestPki::generate();
    let mut args: Vec<String> = vec!["--sqs-listen".into(), "127.0.0.1:0".into()];
    args.extend(pki.server_args());
    // The binary port speaks TLS too: no plain test client here.
    let Some(server) = sluice_broker::testing::TestServer::builder()
        .io(io)
        .args(&args)
        .start_or_skip()
    else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door is open");
    run_pytest(
        &python,
        "sqs/tests/tls",
        &[
            ("SLUICE_SQS_ENDPOINT", format!("https://{sqs}")),
            ("SLUICE_CA", pki.ca_pem().display().to_string()),
            ("SLUICE_BINARY", server.addr().to_string()),
        ],
    );
}

/// The AWS SDK for JavaScript v3 (`sqs/tests/node`), installed by `.ci/run`
/// into `target/node-sqs`: its folder of modules, or `None` (skip; under
/// `CI=true`, fail).
fn node_modules() -> Option<PathBuf> {
    let modules = workspace().join("target/node-sqs/node_modules");
    let node = Command::new("node").arg("--version").output();
    if node.is_ok_and(|o| o.status.success()) && modules.join("@aws-sdk/client-sqs").is_dir() {
        return Some(modules);
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "no node or no @aws-sdk/client-sqs in {}: under CI=true .ci/run installs them \
         (sqs/tests/node/package.json)",
        modules.display()
    );
    eprintln!(
        "SKIP: no node or no @aws-sdk/client-sqs in {} (mkdir -p target/node-sqs && cp \
         sqs/tests/node/package*.json target/node-sqs && cd target/node-sqs && npm ci)",
        modules.display()
    );
    None
}

/// The JavaScript SDK sends, sends a batch, receives with attributes and
/// deletes, checking every body's MD5.
fn the_javascript_sdk_passes_its_suite(io: IoChoice) {
    let Some(modules) = node_modules() else {
        return;
    };
    let Some(server) = start(io, &["--sqs-listen", "127.0.0.1:0"]) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door is open");
    let out = Command::new("node")
        .args(["--test", "sqs/tests/node/"])
        .current_dir(workspace())
        .env("SLUICE_SQS_ENDPOINT", format!("http://{sqs}"))
        .env("SLUICE_NODE_MODULES", &modules)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .output()
        .expect("run node --test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("# pass 2") && stdout.contains("# fail 0"),
        "the JavaScript SDK's suite failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs pytest on `tests` with `env`; every test must run and pass.
fn run_pytest(python: &std::path::Path, tests: &str, env: &[(&str, String)]) {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", tests])
        .current_dir(workspace())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Nothing of the machine's AWS setup is read, and nothing leaves
        // loopback.
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the client suite {tests} failed:\n{stdout}\n{stderr}"
    );
    // Every test ran: none skipped, none deselected.
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.contains(" passed") && !last.contains("skipped") && !last.contains("failed"),
        "{last}"
    );
}

crate::both_backends!(
    boto3_and_the_aws_cli_pass_the_client_suite,
    botocore_1_33_passes_the_client_suite_over_the_query_protocol,
    signatures_are_checked_with_credentials,
    signatures_are_checked_over_the_query_protocol,
    the_door_serves_https_with_the_servers_certificate,
    the_javascript_sdk_passes_its_suite,
    kombu_round_trips_over_its_sqs_transport,
);
