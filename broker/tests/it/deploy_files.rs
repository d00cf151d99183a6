//! The files of `deploy/` name only what exists: every metric in the
//! Grafana dashboard's and the alert rules' PromQL is one a real server's
//! `/metrics` exports (histograms through their `_bucket`, `_sum` and
//! `_count` series); the systemd and Kubernetes configuration files load as
//! `sluice-server` configuration, and the flags the unit and the manifest
//! pass are flags; the Dockerfile's environment variables are settings, its
//! health check asks `/healthz`, and it builds the dependencies in a layer
//! before the sources; the seccomp profile denies by default and allows
//! io_uring. (`deploy/check-deploy.py`, run by CI as root, starts the
//! broker with each deployment's files, owners and modes.)

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use sluice_broker::server::config::{Config, IoChoice, RawArgs};
use sluice_broker::testing::{TestPki, TestServer};

/// Series Prometheus makes itself, not the broker.
const PROMETHEUS_SERIES: [&str; 1] = ["up"];

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

/// PromQL words that are not metric names: grouping, set and other
/// keywords, and the aggregation operators (`sum by (x) (...)`, where no
/// parenthesis follows the operator's name).
const KEYWORDS: [&str; 25] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// Removes what is between `open` and its matching `close` (strings are
/// already gone), keeping the brackets' place with a space.
fn strip_between(text: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        if c == open {
            depth += 1;
        } else if c == close && depth > 0 {
            depth -= 1;
            out.push(' ');
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// The metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Strings (label values, and the `{{ }}` of templates never reach here).
    let mut no_strings = String::new();
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => no_strings.push(c),
        }
    }
    // Label matchers and range selectors.
    let text = strip_between(&strip_between(&no_strings, '{', '}'), '[', ']');
    // Grouping clauses: `by (a, b)`, `without (...)`, `on (...)` and so on.
    let mut words: Vec<(String, usize)> = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':' | '$'))
            {
                i += 1;
            }
            words.push((chars[start..i].iter().collect(), i));
        } else if c.is_ascii_digit() || c == '.' {
            // A number, a duration (5m) or an exponent (1e3).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    let next_char = |end: usize| chars[end..].iter().find(|c| !c.is_whitespace()).copied();
    let mut names = BTreeSet::new();
    let mut skip_group = false;
    for (word, end) in &words {
        let lower = word.to_ascii_lowercase();
        if KEYWORDS.contains(&lower.as_str()) {
            // The parenthesised label list after a grouping keyword.
            skip_group = matches!(
                lower.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) && next_char(*end) == Some('(');
            continue;
        }
        if skip_group {
            // Inside the label list until its `)`.
            if chars[*end..]
                .iter()
                .find(|c| !c.is_whitespace())
                .is_some_and(|&c| c == ')')
            {
                skip_group = false;
            }
            continue;
        }
        if word.starts_with('$') || next_char(*end) == Some('(') {
            // A Grafana variable, or a function.
            continue;
        }
        names.insert(word.clone());
    }
    names
}

/// Every PromQL expression of the dashboard: panel targets, and the
/// metrics of `label_values(metric, label)` variables.
fn dashboard_exprs() -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(&read("grafana/sluice-dashboard.json"))
        .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(e)) = m.get("expr") {
                    out.push(e.clone());
                }
                for (k, v) in m {
                    if k != "templating" {
                        walk(v, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&json, &mut exprs);
    let vars = json["templating"]["list"].as_array().expect("templating");
    for var in vars {
        if var["type"] != "query" {
            continue;
        }
        let query = match &var["query"] {
            serde_json::Value::String(q) => q.clone(),
            other => other["query"].as_str().unwrap_or_default().to_owned(),
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| {
                panic!("variable query {query:?}: only label_values(metric, label)")
            });
        let (selector, _label) = inner.rsplit_once(',').expect("label_values(metric, label)");
        exprs.push(selector.trim().to_owned());
    }
    assert!(exprs.len() >= 10, "the dashboard's queries: {exprs:?}");
    exprs
}

/// Every `expr:` of the alert rules (one line each).
fn alert_exprs() -> Vec<String> {
    let text = read("prometheus/sluice-alerts.yml");
    let exprs: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("expr:"))
        .map(|e| {
            let e = e.trim();
            assert!(
                !e.is_empty() && !e.starts_with('|') && !e.starts_with('>'),
                "keep alert expressions on one line: {e:?}"
            );
            e.to_owned()
        })
        .collect();
    assert!(exprs.len() >= 5, "the alert rules: {exprs:?}");
    exprs
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("the response");
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    text
}

/// The series names a real server's `/metrics` exports, from its `# TYPE`
/// lines: a family exports its name, a histogram its `_bucket`, `_sum` and
/// `_count`.
fn exported() -> BTreeSet<String> {
    let server = TestServer::builder()
        .io(IoChoice::Epoll)
        .args(&["--metrics-addr", "127.0.0.1:0", "--shards", "2"])
        .start();
    let addr = server.handle().metrics_addr().expect("metrics on");
    let text = http_get(addr, "/metrics");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        } else {
            names.insert(name.to_owned());
        }
    }
    assert!(names.contains("sluice_build_info"), "{names:?}");
    names
}

#[test]
fn promql_names_are_read() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le, op) (rate(sluice_request_duration_seconds_bucket{instance=~\"$instance\", op!=\"x y\"}[$__rate_interval]))) > 0.5 and on (instance) up == 1",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["sluice_request_duration_seconds_bucket", "up"]
    );
    let names = metric_names("sum without (queue) (rate(a_total[5m] offset 1h)) / ignoring(x) b");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a_total", "b"]);
}

#[test]
fn dashboard_and_alerts_name_only_exported_metrics() {
    let exported = exported();
    let mut missing = Vec::new();
    let mut used = BTreeSet::new();
    for (file, exprs) in [
        ("grafana/sluice-dashboard.json", dashboard_exprs()),
        ("prometheus/sluice-alerts.yml", alert_exprs()),
    ] {
        for expr in exprs {
            let names = metric_names(&expr);
            assert!(!names.is_empty(), "{file}: no metric in {expr:?}");
            for name in names {
                used.insert(name.clone());
                if !exported.contains(&name) && !PROMETHEUS_SERIES.contains(&name.as_str()) {
                    missing.push(format!("{file}: {name} (in {expr})"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not exported by /metrics:\n{}\nexported: {exported:?}",
        missing.join("\n")
    );
    // What the issue asks the dashboard to show is there.
    for name in [
        "sluice_queue_messages",
        "sluice_queue_oldest_message_age_seconds",
        "sluice_queue_sent_total",
        "sluice_queue_received_total",
        "sluice_queue_deleted_total",
        "sluice_queue_dead_lettered_total",
        "sluice_lease_hold_seconds_bucket",
        "sluice_redelivery_lateness_seconds_bucket",
        "sluice_errors_total",
    ] {
        assert!(
            used.contains(name),
            "the dashboard or alerts do not show {name}"
        );
    }
}

/// An alert's label matchers on `sluice_errors_total` name real codes.
#[test]
fn alerts_match_error_codes_as_exported() {
    for expr in alert_exprs() {
        if let Some(i) = expr.find("code=\"") {
            let code: String = expr[i + 6..].chars().take_while(|&c| c != '"').collect();
            assert!(
                sluice_protocol::ErrorCode::ALL.iter().any(|c| {
                    let snake: String = c
                        .to_string()
                        .chars()
                        .enumerate()
                        .flat_map(|(i, ch)| {
                            let sep = (i > 0 && ch.is_ascii_uppercase()).then_some('_');
                            sep.into_iter().chain([ch.to_ascii_lowercase()])
                        })
                        .collect();
                    snake == code
                }),
                "{expr}: no error code {code:?}"
            );
        }
    }
}

/// The `sluice.toml` of the Kubernetes ConfigMap: the block under
/// `sluice.toml: |`, unindented.
fn configmap_toml() -> String {
    let yaml = read("kubernetes/sluice.yaml");
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "sluice.toml: |");
    lines.next().expect("a sluice.toml key in the ConfigMap");
    let block: Vec<&str> = lines
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .collect();
    let indent = block
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .expect("a non-empty sluice.toml");
    block
        .iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn load(path: &Path) -> Result<Config, String> {
    let raw = RawArgs::try_parse_from(["sluice-server", "--config", path.to_str().unwrap()])
        .map_err(|e| e.to_string())?;
    Config::from_args(raw).map_err(|e| e.to_string())
}

#[test]
fn the_configuration_files_load() {
    // systemd: as it is.
    let config = load(&deploy("systemd/sluice.toml")).expect("deploy/systemd/sluice.toml loads");
    assert_eq!(config.listen.to_string(), "127.0.0.1:7171");

    // Kubernetes: with the Secrets' files where the pod mounts them.
    let pki = TestPki::generate();
    let token = pki.dir().join("token");
    std::fs::write(
        &token,
        "a-token-of-enough-length-for-the-broker-0123456789\n",
    )
    .unwrap();
    let text = configmap_toml()
        .replace("/etc/sluice-token/token", token.to_str().unwrap())
        .replace(
            "/etc/sluice-tls/tls.crt",
            pki.server_cert().to_str().unwrap(),
        )
        .replace(
            "/etc/sluice-tls/tls.key",
            pki.server_key().to_str().unwrap(),
        );
    assert!(!text.contains("/etc/"), "a mounted path left: {text}");
    let file = pki.dir().join("sluice.toml");
    std::fs::write(&file, &text).unwrap();
    let config = load(&file).unwrap_or_else(|e| panic!("the ConfigMap's sluice.toml: {e}\n{text}"));
    assert!(config.tls.is_some(), "TLS is on");
    assert!(config.auth_token.is_some(), "the token is read");
}

#[test]
fn the_dockerfile_sets_only_settings_and_checks_healthz() {
    let dockerfile = read("docker/Dockerfile");
    let known: BTreeSet<String> = RawArgs::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let mut in_env = false;
    let mut seen = 0;
    for line in dockerfile.lines() {
        let line = line.trim();
        if line.starts_with("ENV ") {
            in_env = true;
        }
        if in_env {
            for word in line.trim_start_matches("ENV ").split_whitespace() {
                if let Some((name, _)) = word.split_once('=') {
                    assert!(known.contains(name), "Dockerfile ENV {name} is no setting");
                    seen += 1;
                }
            }
            in_env = line.ends_with('\\');
        }
    }
    assert!(
        seen >= 2,
        "the Dockerfile sets the listen and metrics addresses"
    );
    let health = dockerfile
        .lines()
        .skip_while(|l| !l.starts_with("HEALTHCHECK"))
        .take(2)
        .collect::<String>();
    assert!(health.contains("/healthz"), "{health}");
    // The flags the unit and the manifests pass exist.
    for (file, text) in [
        ("systemd/sluice.service", read("systemd/sluice.service")),
        ("kubernetes/sluice.yaml", read("kubernetes/sluice.yaml")),
    ] {
        assert!(text.contains("--config"), "{file}");
        let command_lines = text
            .lines()
            .filter(|l| l.starts_with("ExecStart=") || l.trim_start().starts_with("args:"));
        let flags: Vec<&str> = command_lines
            .flat_map(|l| {
                l.split(|c: char| c.is_whitespace() || matches!(c, '"' | ',' | '[' | ']'))
            })
            .filter_map(|w| w.strip_prefix("--"))
            .collect();
        assert!(flags.contains(&"config"), "{file}: {flags:?}");
        for flag in flags {
            assert!(
                RawArgs::command()
                    .get_arguments()
                    .any(|a| a.get_long() == Some(flag)),
                "{file}: --{flag} is no flag of sluice-server"
            );
        }
    }
}

/// `seccomp/sluice-seccomp.json`: a seccomp profile in the format of
/// Docker's default profile that refuses what it does not name and allows
/// the three io_uring calls outright.
#[test]
fn the_seccomp_profile_denies_by_default_and_allows_io_uring() {
    let text = read("seccomp/sluice-seccomp.json");
    let profile: serde_json::Value =
        serde_json::from_str(&text).expect("seccomp/sluice-seccomp.json is JSON");
    let default = profile["defaultAction"].as_str().expect("a defaultAction");
    assert!(
        matches!(
            default,
            "SCMP_ACT_ERRNO" | "SCMP_ACT_KILL" | "SCMP_ACT_KILL_PROCESS" | "SCMP_ACT_KILL_THREAD"
        ),
        "the default action {default} lets calls through"
    );
    assert!(
        profile["archMap"]
            .as_array()
            .is_some_and(|a| a.iter().any(|m| m["architecture"] == "SCMP_ARCH_X86_64")),
        "the architectures of Docker's profile"
    );
    let rules = profile["syscalls"].as_array().expect("a syscalls list");
    let names = |rule: &serde_json::Value| -> Vec<String> {
        rule["names"]
            .as_array()
            .expect("each rule names its calls")
            .iter()
            .map(|n| n.as_str().expect("a call's name").to_owned())
            .collect()
    };
    // Allowed with no condition: no argument filter, no `includes` (the
    // architecture, capability or kernel a rule may be limited to).
    let unconditional: BTreeSet<String> = rules
        .iter()
        .filter(|r| r["action"] == "SCMP_ACT_ALLOW" && r.get("args").is_none())
        .filter(|r| r.get("includes").is_none() && r.get("excludes").is_none())
        .flat_map(names)
        .collect();
    for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
        assert!(unconditional.contains(call), "{call} is not allowed");
    }
    // What any server needs, as Docker's profile allows it.
    for call in [
        "read",
        "write",
        "openat",
        "close",
        "mmap",
        "futex",
        "epoll_ctl",
        "accept4",
        "bind",
    ] {
        assert!(unconditional.contains(call), "{call} is not allowed");
    }
    // No rule depends on the container's capabilities or the kernel's
    // version: containerd reads a Localhost profile without those
    // conditions, and would allow what they limit.
    for rule in rules {
        for key in ["includes", "excludes"] {
            if let Some(cond) = rule.get(key).and_then(|c| c.as_object()) {
                let keys: Vec<&String> = cond.keys().collect();
                assert!(
                    keys.iter().all(|k| *k == "arches"),
                    "a rule limited by {keys:?}: {rule}"
                );
            }
        }
        let action = rule["action"].as_str().expect("each rule has an action");
        assert!(
            action != "SCMP_ACT_ALLOW" || !names(rule).iter().any(|n| DENIED.contains(&n.as_str())),
            "{rule} allows what Docker's profile refuses a container without capabilities"
        );
    }
}

/// Calls Docker's default profile allows only to a container with extra
/// capabilities (CAP_SYS_ADMIN, CAP_SYS_MODULE, ...): the pod drops them
/// all.
const DENIED: [&str; 12] = [
    "mount",
    "umount2",
    "unshare",
    "setns",
    "bpf",
    "init_module",
    "finit_module",
    "kexec_load",
    "reboot",
    "swapon",
    "pivot_root",
    "open_by_handle_at",
];

/// The build stage's instructions, joined across line continuations.
fn dockerfile_build_stage() -> Vec<String> {
    let text = read("docker/Dockerfile");
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (body, continues) = match line.strip_suffix('\\') {
            Some(b) => (b.trim(), true),
            None => (line, false),
        };
        if open {
            let last = out.last_mut().expect("an instruction being continued");
            last.push(' ');
            last.push_str(body);
        } else {
            out.push(body.to_owned());
        }
        open = continues;
    }
    let start = out
        .iter()
        .position(|i| i.starts_with("FROM ") && i.ends_with(" AS build"))
        .expect("a build stage");
    let end = out[start + 1..]
        .iter()
        .position(|i| i.starts_with("FROM "))
        .map_or(out.len(), |e| start + 1 + e);
    out[start..end].to_vec()
}

/// The workspace's members, from the root manifest.
fn workspace_members() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let manifest: toml::Table = std::fs::read_to_string(&root)
        .expect("the root Cargo.toml")
        .parse()
        .expect("TOML");
    manifest["workspace"]["members"]
        .as_array()
        .expect("workspace members")
        .iter()
        .map(|m| m.as_str().expect("a member's folder").to_owned())
        .collect()
}

/// The Dockerfile builds the dependencies in a layer of their own: every
/// member's manifest and the lock file are copied, with stub sources, and
/// built before the sources are copied, for the same packages as the
/// binaries (so the dependencies' features, and builds, are the same).
/// Docker is not run here: this reads the instructions.
#[test]
fn the_dockerfile_builds_dependencies_before_the_sources() {
    let stage = dockerfile_build_stage();
    let at = |pred: &dyn Fn(&str) -> bool, what: &str| {
        stage
            .iter()
            .position(|i| pred(i))
            .unwrap_or_else(|| panic!("no {what} in the build stage: {stage:#?}"))
    };
    let sources = at(
        &|i| i == "COPY . ." || i == "COPY . /src",
        "COPY of the sources",
    );
    let lock = at(
        &|i| i.starts_with("COPY ") && i.contains("Cargo.lock"),
        "COPY of Cargo.lock",
    );
    assert!(lock < sources, "Cargo.lock is copied with the sources");
    let members = workspace_members();
    let mut last_manifest = lock;
    for member in &members {
        let copy = at(
            &|i| i.starts_with("COPY ") && i.contains(&format!("{member}/Cargo.toml")),
            &format!("COPY of {member}/Cargo.toml"),
        );
        assert!(
            copy < sources,
            "{member}/Cargo.toml is copied with the sources"
        );
        last_manifest = last_manifest.max(copy);
    }
    let deps = at(
        &|i| i.starts_with("RUN ") && i.contains("cargo build"),
        "RUN cargo build",
    );
    assert!(
        last_manifest < deps && deps < sources,
        "the dependencies are built after the manifests and before the sources"
    );
    let stubs = &stage[deps];
    assert!(stubs.contains("stub-sources"), "stub sources: {stubs}");
    for member in &members {
        assert!(
            stubs.split_whitespace().any(|w| w == member),
            "{member} gets no stub sources: {stubs}"
        );
    }
    let last = stage[sources..]
        .iter()
        .find(|i| i.starts_with("RUN ") && i.contains("cargo build"))
        .expect("the binaries are built after the sources are copied");
    let packages = |run: &str| -> Vec<String> {
        let words: Vec<&str> = run.split_whitespace().collect();
        let mut p: Vec<String> = words
            .windows(2)
            .filter(|w| w[0] == "-p" || w[0] == "--package")
            .map(|w| w[1].to_owned())
            .collect();
        p.sort();
        p
    };
    assert!(!packages(stubs).is_empty(), "{stubs}");
    assert_eq!(
        packages(stubs),
        packages(last),
        "the dependency layer builds other packages than the binaries do"
    );
    for flag in ["--release", "--locked"] {
        assert!(
            stubs.contains(flag) && last.contains(flag),
            "{flag}: {stubs} / {last}"
        );
    }
}

/// `docker/stub-sources.sh` gives every target the members' manifests
/// declare the file cargo looks for, so that cargo can load the workspace
/// from the manifests alone.
#[test]
fn the_stub_sources_give_every_declared_target_a_file() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("sluice-stubs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let members = workspace_members();
    for member in &members {
        std::fs::create_dir_all(dir.join(member)).unwrap();
        std::fs::copy(
            repo.join(member).join("Cargo.toml"),
            dir.join(member).join("Cargo.toml"),
        )
        .unwrap();
    }
    let status = std::process::Command::new("sh")
        .arg(deploy("docker/stub-sources.sh"))
        .args(&members)
        .current_dir(&dir)
        .status()
        .expect("run sh");
    assert!(status.success(), "stub-sources.sh: {status}");
    let mut checked = 0;
    for member in &members {
        let manifest: toml::Table = std::fs::read_to_string(dir.join(member).join("Cargo.toml"))
            .unwrap()
            .parse()
            .expect("TOML");
        assert!(
            dir.join(member).join("src/lib.rs").exists(),
            "{member}: src/lib.rs"
        );
        for (kind, folder) in [
            ("bin", "src/bin"),
            ("test", "tests"),
            ("bench", "benches"),
            ("example", "examples"),
        ] {
            for target in manifest
                .get(kind)
                .and_then(|t| t.as_array())
                .into_iter()
                .flatten()
            {
                let file = match (target.get("path"), target.get("name")) {
                    (Some(path), _) => path.as_str().expect("a path").to_owned(),
                    (None, Some(name)) => format!("{folder}/{}.rs", name.as_str().expect("a name")),
                    (None, None) => panic!("{member}: a [[{kind}]] with neither name nor path"),
                };
                assert!(
                    dir.join(member).join(&file).is_file(),
                    "{member}: no stub for the {kind} target at {file}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 10,
        "the manifests declare the workspace's targets"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
