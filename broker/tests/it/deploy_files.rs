//! The files of `deploy/` name only what exists: every metric in the
//! Grafana dashboard's and the alert rules' PromQL is one a real server's
//! `/metrics` exports (histograms through their `_bucket`, `_sum` and
//! `_count` series); the systemd and Kubernetes configuration files load as
//! `sluice-server` configuration; the Dockerfile's environment variables
//! are settings, and its health check asks `/healthz`.

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
        assert!(
            RawArgs::command()
                .get_arguments()
                .any(|a| a.get_long() == Some("config")),
            "--config is a flag"
        );
    }
}
