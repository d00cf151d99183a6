//! The fault suite's tables (one per fault, and a summary that pastes into
//! a Markdown document) and its JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::{FaultReport, MIB, Mode};

/// Bytes as MiB with one decimal.
#[must_use]
pub fn mib(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)] // display only
    let m = bytes as f64 / MIB as f64;
    format!("{m:.1} MiB")
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

fn opt_mib(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), mib)
}

/// One fault as a block of text.
#[must_use]
pub fn fault_table(r: &FaultReport) -> String {
    let m = &r.messages;
    let mut s = String::new();
    let verdict = if r.passed() { "PASS" } else { "FAIL" };
    let _ = writeln!(
        s,
        "== {} [{verdict}] {:.1} s: {}",
        r.name, r.seconds, r.description
    );
    let _ = writeln!(s, "   server: sluice-server {}", r.server_args.join(" "));
    let rows: [(&str, String); 17] = [
        ("messages sent (acknowledged)", m.sent.to_string()),
        ("sends refused (definite error)", m.refused.to_string()),
        (
            "sends with unknown outcome (shown enqueued)",
            format!("{} ({})", m.unknown_sends, m.unknown_enqueued),
        ),
        ("deliveries", m.deliveries.to_string()),
        ("duplicates delivered", m.duplicates.to_string()),
        (
            "deleted (+ unacknowledged deletes that happened)",
            format!("{} (+{})", m.deleted, m.deleted_unacknowledged),
        ),
        ("held at the end", m.held.to_string()),
        (
            "lost",
            if r.lost_checked {
                m.lost.to_string()
            } else {
                "not checked: no drain after the server stopped".to_owned()
            },
        ),
        (
            "lost within a kill's loss window (allowed: --durability batch)",
            m.lost_in_window.to_string(),
        ),
        (
            "deletes a kill undid (within its loss window)",
            m.undone_deletes.to_string(),
        ),
        (
            "oldest loss within a window, ms before its kill",
            m.oldest_loss_ms.to_string(),
        ),
        ("identity mismatches", r.identity_mismatches.to_string()),
        ("server fds before", opt(r.fds_before)),
        ("server fds after", opt(r.fds_after)),
        ("server RSS at start", opt_mib(r.start_rss_bytes)),
        ("server peak RSS (VmHWM)", opt_mib(r.peak_rss_bytes)),
        (
            "peak RSS bound",
            r.rss_bound_bytes.map_or_else(
                || "-".to_owned(),
                |b| format!("{} ({})", mib(b), r.rss_bound_rule),
            ),
        ),
    ];
    let width = rows
        .iter()
        .map(|(k, _)| k.len())
        .chain(r.facts.iter().map(|(k, _)| k.len()))
        .max()
        .unwrap_or(0);
    for (k, v) in rows
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(r.facts.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    {
        let _ = writeln!(s, "   {k:<width$}  {v}");
    }
    for v in &r.violations {
        let _ = writeln!(s, "   VIOLATION: {v}");
    }
    s
}

/// The summary: one Markdown row per fault.
#[must_use]
pub fn summary_table(reports: &[FaultReport]) -> String {
    let mut s = String::new();
    s.push_str(
        "| fault | result | seconds | sent | lost | duplicates delivered | identity mismatches \
         | fds before / after | peak RSS | RSS bound |\n",
    );
    s.push_str("|---|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
    for r in reports {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} / {} | {} | {} |",
            r.name,
            if r.passed() { "pass" } else { "FAIL" },
            r.seconds,
            r.messages.sent,
            if r.lost_checked {
                r.messages.lost.to_string()
            } else {
                "n/a".to_owned()
            },
            r.messages.duplicates,
            r.identity_mismatches,
            opt(r.fds_before),
            opt(r.fds_after),
            opt_mib(r.peak_rss_bytes),
            opt_mib(r.rss_bound_bytes),
        );
    }
    s
}

/// The JSON document of a suite run.
#[derive(Debug, Serialize)]
pub struct SuiteJson<'a> {
    /// Full or quick.
    pub mode: Mode,
    /// The server binary.
    pub server: String,
    /// Wall time of the suite, seconds.
    pub seconds: f64,
    /// Whether every fault passed.
    pub passed: bool,
    /// One report per fault.
    pub faults: &'a [FaultReport],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::ledger::Reconciled;

    fn report(violations: Vec<String>) -> FaultReport {
        FaultReport {
            name: "x".into(),
            description: "does x".into(),
            seconds: 1.5,
            server_args: vec!["--shards".into(), "2".into()],
            messages: Reconciled {
                sent: 10,
                ..Reconciled::default()
            },
            lost_checked: true,
            identity_mismatches: 0,
            fds_before: Some(12),
            fds_after: Some(12),
            peak_rss_bytes: Some(3 * MIB),
            start_rss_bytes: Some(2 * MIB),
            rss_bound_bytes: Some(100 * MIB),
            rss_bound_rule: "start + 98 MiB".into(),
            facts: vec![("kills".into(), "3".into())],
            violations,
        }
    }

    #[test]
    fn tables_show_the_figures_and_the_verdict() {
        let ok = fault_table(&report(vec![]));
        assert!(ok.contains("[PASS]") && ok.contains("kills") && ok.contains("3.0 MiB"));
        let bad = fault_table(&report(vec!["lost 1".into()]));
        assert!(bad.contains("[FAIL]") && bad.contains("VIOLATION: lost 1"));
        let sum = summary_table(&[report(vec![])]);
        assert!(
            sum.contains("| x | pass | 1.5 | 10 | 0 | 0 | 0 | 12 / 12 | 3.0 MiB | 100.0 MiB |")
        );
    }
}
