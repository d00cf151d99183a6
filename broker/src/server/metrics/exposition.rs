//! Prometheus text exposition format 0.0.4, written into a `String`.
//!
//! A metric family is written in one go through [`PromWriter::family`]: its
//! `# HELP` and `# TYPE` lines once, then its samples, so samples of a family
//! are always grouped as the format requires. Label values and help text are
//! escaped; histograms are written as `_bucket{le="..."}` lines (cumulative,
//! ending with `+Inf`), `_sum` and `_count`, with bounds in seconds.
//!
//! Metric and label names are the caller's constants, not input: a malformed
//! one is a programmer error caught by a debug assertion.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::histogram::{HistogramSnapshot, LATENCY_BUCKET_BOUNDS_NANOS};

/// The `# TYPE` of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Only goes up (reset on restart). Names end in `_total` by convention.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Bucketed observations with their sum and count.
    Histogram,
    /// No type given.
    Untyped,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Untyped => "untyped",
        }
    }
}

/// Writes metric families into a `String`.
///
/// ```
/// use sluice_broker::server::metrics::{MetricType, PromWriter};
///
/// let mut out = String::new();
/// let mut w = PromWriter::new(&mut out);
/// w.family("sluice_queue_messages", "Messages by state.", MetricType::Gauge)
///     .sample(&[("queue", "orders"), ("state", "visible")], 12.0)
///     .sample(&[("queue", "orders"), ("state", "in_flight")], 3.0);
/// assert!(out.contains("sluice_queue_messages{queue=\"orders\",state=\"visible\"} 12\n"));
/// ```
#[derive(Debug)]
pub struct PromWriter<'a> {
    out: &'a mut String,
    written: HashSet<String>,
    last: Option<String>,
}

/// One metric family being written; see [`PromWriter::family`].
#[derive(Debug)]
pub struct Family<'w> {
    out: &'w mut String,
    name: &'w str,
    kind: MetricType,
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    !name.starts_with("__")
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Appends `value` escaped for a label value: `\`, `"` and line feed.
fn push_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends `text` escaped for a `# HELP` line: `\` and line feed.
fn push_help(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends a sample value: `NaN`, `+Inf`, `-Inf` or a decimal.
fn push_f64(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Appends nanoseconds as exact decimal seconds: `0.00001`, `2.5`, `60`.
fn push_seconds(out: &mut String, nanos: u64) {
    let whole = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    let _ = write!(out, "{whole}");
    if frac != 0 {
        let digits = format!("{frac:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

/// Appends `{k="v",...}` with `extra` last; nothing when there are no labels.
fn push_labels(out: &mut String, labels: &[(&str, &str)], extra: Option<(&str, &str)>) {
    if labels.is_empty() && extra.is_none() {
        return;
    }
    out.push('{');
    for (i, (name, value)) in labels.iter().chain(extra.as_ref()).enumerate() {
        debug_assert!(is_label_name(name), "bad label name {name:?}");
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        push_label_value(out, value);
        out.push('"');
    }
    out.push('}');
}

impl<'a> PromWriter<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut String) -> PromWriter<'a> {
        PromWriter {
            out,
            written: HashSet::new(),
            last: None,
        }
    }

    /// Starts the family `name`: writes its `# HELP` and `# TYPE` lines,
    /// unless the family just before was this one (then its samples simply
    /// continue). Write all samples of a family before the next family: a
    /// family split around another one is a programmer error.
    pub fn family<'w>(&'w mut self, name: &'w str, help: &str, kind: MetricType) -> Family<'w> {
        debug_assert!(is_metric_name(name), "bad metric name {name:?}");
        if self.last.as_deref() != Some(name) {
            let first = self.written.insert(name.to_owned());
            debug_assert!(first, "metric family {name:?} written in two places");
            if first {
                self.out.push_str("# HELP ");
                self.out.push_str(name);
                self.out.push(' ');
                push_help(self.out, help);
                self.out.push_str("\n# TYPE ");
                self.out.push_str(name);
                self.out.push(' ');
                self.out.push_str(kind.as_str());
                self.out.push('\n');
            }
            self.last = Some(name.to_owned());
        }
        Family {
            out: self.out,
            name,
            kind,
        }
    }

    /// A family with one sample and no labels: a counter.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, help, MetricType::Counter)
            .sample_u64(&[], value);
    }

    /// A family with one sample and no labels: a gauge.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, help, MetricType::Gauge)
            .sample(&[], value);
    }
}

impl Family<'_> {
    /// Writes a sample with these labels.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        debug_assert!(
            self.kind != MetricType::Histogram,
            "use histogram() for {}",
            self.name
        );
        self.out.push_str(self.name);
        push_labels(self.out, labels, None);
        self.out.push(' ');
        push_f64(self.out, value);
        self.out.push('\n');
        self
    }

    /// Writes an integer sample exactly (an `f64` holds integers exactly
    /// only up to 2^53).
    pub fn sample_u64(&mut self, labels: &[(&str, &str)], value: u64) -> &mut Self {
        debug_assert!(
            self.kind != MetricType::Histogram,
            "use histogram() for {}",
            self.name
        );
        self.out.push_str(self.name);
        push_labels(self.out, labels, None);
        let _ = writeln!(self.out, " {value}");
        self
    }

    /// Writes one histogram with these labels: cumulative `_bucket` lines
    /// with `le` in seconds, ending with `+Inf`, then `_sum` (seconds) and
    /// `_count`.
    pub fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        snapshot: &HistogramSnapshot,
    ) -> &mut Self {
        self.histogram_buckets(
            labels,
            &LATENCY_BUCKET_BOUNDS_NANOS,
            snapshot.bucket_counts(),
            snapshot.sum_seconds(),
        )
    }

    /// Writes one histogram of any bucket layout: `bounds_nanos` are the
    /// finite upper bounds (ascending), `counts` the records in each bucket
    /// (not cumulative), one more than the bounds for the unbounded bucket;
    /// `_count` is their sum. Missing counts are taken as zero, extra ones
    /// go to the unbounded bucket.
    pub fn histogram_buckets(
        &mut self,
        labels: &[(&str, &str)],
        bounds_nanos: &[u64],
        counts: &[u64],
        sum_seconds: f64,
    ) -> &mut Self {
        debug_assert!(
            self.kind == MetricType::Histogram,
            "{} is not a histogram",
            self.name
        );
        let mut le = String::new();
        let mut running = 0u64;
        for (i, bound) in bounds_nanos.iter().enumerate() {
            running = running.saturating_add(counts.get(i).copied().unwrap_or(0));
            le.clear();
            push_seconds(&mut le, *bound);
            self.out.push_str(self.name);
            self.out.push_str("_bucket");
            push_labels(self.out, labels, Some(("le", &le)));
            let _ = writeln!(self.out, " {running}");
        }
        for &n in counts.iter().skip(bounds_nanos.len()) {
            running = running.saturating_add(n);
        }
        self.out.push_str(self.name);
        self.out.push_str("_bucket");
        push_labels(self.out, labels, Some(("le", "+Inf")));
        let _ = writeln!(self.out, " {running}");
        self.out.push_str(self.name);
        self.out.push_str("_sum");
        push_labels(self.out, labels, None);
        self.out.push(' ');
        push_f64(self.out, sum_seconds);
        self.out.push('\n');
        self.out.push_str(self.name);
        self.out.push_str("_count");
        push_labels(self.out, labels, None);
        let _ = writeln!(self.out, " {running}");
        self
    }
}

#[cfg(test)]
mod tests {
    use super::super::histogram::{LATENCY_BUCKET_BOUNDS_NANOS, LatencyHistogram};
    use super::*;
    use std::time::Duration;

    #[test]
    fn golden_exposition() {
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_micros(7));
        h.record(Duration::from_micros(150));
        h.record(Duration::from_secs(90));
        let mut out = String::new();
        let mut w = PromWriter::new(&mut out);
        w.counter(
            "sluice_connections_accepted_total",
            "Connections accepted.",
            42,
        );
        w.family(
            "sluice_queue_messages",
            "Messages in a queue\nby state.",
            MetricType::Gauge,
        )
        .sample(&[("queue", "orders"), ("state", "visible")], 12.0)
        .sample(&[("queue", "orders"), ("state", "in_flight")], 0.5);
        w.family("sluice_queue_messages", "ignored", MetricType::Gauge)
            .sample(&[("queue", "a\\b\"c\nd"), ("state", "delayed")], f64::NAN);
        w.family(
            "sluice_requests_total",
            "Requests by operation.",
            MetricType::Counter,
        )
        .sample_u64(&[("op", "send")], u64::MAX);
        w.gauge("sluice_oldest_message_age_seconds", "Age.", f64::INFINITY);
        w.family(
            "sluice_request_duration_seconds",
            "Request latency.",
            MetricType::Histogram,
        )
        .histogram(&[("op", "receive")], &h.snapshot());
        let mut want = String::from(
            "# HELP sluice_connections_accepted_total Connections accepted.\n\
             # TYPE sluice_connections_accepted_total counter\n\
             sluice_connections_accepted_total 42\n\
             # HELP sluice_queue_messages Messages in a queue\\nby state.\n\
             # TYPE sluice_queue_messages gauge\n\
             sluice_queue_messages{queue=\"orders\",state=\"visible\"} 12\n\
             sluice_queue_messages{queue=\"orders\",state=\"in_flight\"} 0.5\n\
             sluice_queue_messages{queue=\"a\\\\b\\\"c\\nd\",state=\"delayed\"} NaN\n\
             # HELP sluice_requests_total Requests by operation.\n\
             # TYPE sluice_requests_total counter\n\
             sluice_requests_total{op=\"send\"} 18446744073709551615\n\
             # HELP sluice_oldest_message_age_seconds Age.\n\
             # TYPE sluice_oldest_message_age_seconds gauge\n\
             sluice_oldest_message_age_seconds +Inf\n\
             # HELP sluice_request_duration_seconds Request latency.\n\
             # TYPE sluice_request_duration_seconds histogram\n",
        );
        let les = [
            "0.00001", "0.00002", "0.00005", "0.0001", "0.0002", "0.0005", "0.001", "0.002",
            "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50",
            "60",
        ];
        assert_eq!(les.len(), LATENCY_BUCKET_BOUNDS_NANOS.len());
        for (i, le) in les.iter().enumerate() {
            let cumulative = match i {
                0..=3 => 1,
                _ => 2,
            };
            want.push_str(&format!(
                "sluice_request_duration_seconds_bucket{{op=\"receive\",le=\"{le}\"}} {cumulative}\n"
            ));
        }
        want.push_str(
            "sluice_request_duration_seconds_bucket{op=\"receive\",le=\"+Inf\"} 3\n\
             sluice_request_duration_seconds_sum{op=\"receive\"} 90.000157\n\
             sluice_request_duration_seconds_count{op=\"receive\"} 3\n",
        );
        assert_eq!(out, want);
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        PromWriter::new(&mut out)
            .family("m", "h", MetricType::Gauge)
            .sample(
                &[(
                    "l",
                    r#"back\slash "quoted" new
line ünï"#,
                )],
                1.0,
            );
        assert_eq!(
            out,
            "# HELP m h\n# TYPE m gauge\nm{l=\"back\\\\slash \\\"quoted\\\" new\\nline ünï\"} 1\n"
        );
    }

    #[test]
    fn empty_histogram_still_has_every_line() {
        let mut out = String::new();
        PromWriter::new(&mut out)
            .family("h", "x", MetricType::Histogram)
            .histogram(&[], &HistogramSnapshot::default());
        assert!(
            out.contains("h_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"),
            "{out}"
        );
        assert_eq!(
            out.matches("h_bucket").count(),
            LATENCY_BUCKET_BOUNDS_NANOS.len() + 1
        );
    }

    #[test]
    fn seconds_are_exact() {
        for (nanos, want) in [
            (0, "0"),
            (1, "0.000000001"),
            (1_500_000_000, "1.5"),
            (60_000_000_000, "60"),
        ] {
            let mut s = String::new();
            push_seconds(&mut s, nanos);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(is_metric_name("sluice_a:b_1"));
        assert!(!is_metric_name("1abc"));
        assert!(!is_metric_name("a-b"));
        assert!(!is_metric_name(""));
        assert!(is_label_name("queue_2"));
        assert!(!is_label_name("__name"));
        assert!(!is_label_name("a:b"));
    }
}
