//! A Markdown table of each target's medians over its passes, with ratios
//! against the first target: what `benches/compare.sh` puts into
//! BENCHMARKS.md.

use std::io::{self, Write};

use crate::report::format_us;
use crate::run::{PassOutcome, PassReport};
use crate::stats::Percentiles;

/// One target's medians.
struct Row {
    name: String,
    ok: usize,
    passes: usize,
    rate: f64,
    p: Percentiles,
    lost: u64,
    duplicates: u64,
}

fn rows(outcomes: &[PassOutcome]) -> Vec<Row> {
    let mut names: Vec<String> = Vec::new();
    for o in outcomes {
        let name = o.target.to_string();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mine: Vec<&PassOutcome> = outcomes
                .iter()
                .filter(|o| o.target.to_string() == name)
                .collect();
            let ok: Vec<&PassReport> = mine.iter().filter_map(|o| o.result.as_ref().ok()).collect();
            let mut rates: Vec<f64> = ok.iter().map(|r| r.throughput).collect();
            rates.sort_by(f64::total_cmp);
            let p = Percentiles::median_of(
                &ok.iter()
                    .map(|r| r.primary_percentiles())
                    .collect::<Vec<_>>(),
            );
            Row {
                name,
                ok: ok.len(),
                passes: mine.len(),
                rate: rates.get(rates.len() / 2).copied().unwrap_or(0.0),
                p,
                lost: ok.iter().map(|r| r.tally.lost).sum(),
                duplicates: ok.iter().map(|r| r.duplicates).sum(),
            }
        })
        .collect()
}

fn ratio(num: f64, den: f64) -> String {
    if den > 0.0 && num > 0.0 {
        format!("{:.2}x", num / den)
    } else {
        "-".into()
    }
}

/// Writes the table: one row per target, in the order they first appear;
/// the ratios compare the first target with each other one
/// (first's msgs/s / this one's, this one's p99 / first's).
pub fn write(out: &mut dyn Write, outcomes: &[PassOutcome]) -> io::Result<()> {
    let rows = rows(outcomes);
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let metric = outcomes
        .iter()
        .find_map(|o| o.result.as_ref().ok())
        .map_or("latency", PassReport::primary_name);
    let short = first.name.split("://").next().unwrap_or("first");
    writeln!(
        out,
        "| target | passes ok | msgs/s (median) | {short} ÷ target, msgs/s | {metric} p50 | p99 | p99.9 | max | target ÷ {short}, p99 | lost | duplicates |"
    )?;
    writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    for (i, r) in rows.iter().enumerate() {
        let (rate_ratio, p99_ratio) = if i == 0 {
            ("(reference)".to_owned(), "(reference)".to_owned())
        } else {
            (
                ratio(first.rate, r.rate),
                ratio(r.p.p99 as f64, first.p.p99 as f64),
            )
        };
        let lat = |us: u64| {
            if r.ok == 0 {
                "-".to_owned()
            } else {
                format_us(us)
            }
        };
        writeln!(
            out,
            "| `{}` | {}/{} | {:.0} | {rate_ratio} | {} | {} | {} | {} | {p99_ratio} | {} | {} |",
            r.name,
            r.ok,
            r.passes,
            r.rate,
            lat(r.p.p50),
            lat(r.p.p99),
            lat(r.p.p999),
            lat(r.p.max),
            r.lost,
            r.duplicates
        )?;
    }
    machine_notes(out, outcomes, &rows)
}

/// Below the table, where the system counted them: the time the
/// hypervisor took from the machine's CPUs in each pass, and the load
/// generator's own CPU use, so that a reader can tell a broker's tail from
/// the host's or the load generator's.
fn machine_notes(out: &mut dyn Write, outcomes: &[PassOutcome], rows: &[Row]) -> io::Result<()> {
    let reports: Vec<&PassReport> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok())
        .collect();
    let per_target = |value: &dyn Fn(&PassReport) -> Option<String>| -> String {
        rows.iter()
            .map(|Row { name, .. }| {
                let per_pass: Vec<String> = reports
                    .iter()
                    .filter(|r| r.target.to_string() == *name)
                    .map(|r| value(r).unwrap_or_else(|| "-".to_owned()))
                    .collect();
                if per_pass.is_empty() {
                    format!("`{name}` no pass ended")
                } else {
                    format!("`{name}` {}", per_pass.join(", "))
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    if let Some(tick) = reports
        .iter()
        .find_map(|r| r.steal.as_ref())
        .map(|s| s.tick)
    {
        writeln!(out)?;
        writeln!(
            out,
            "Hypervisor steal per pass, all CPUs, ms (in {} ms ticks): {}.",
            tick.as_millis(),
            per_target(&|r| r.steal.as_ref().map(|s| s.total().as_millis().to_string()))
        )?;
    }
    if reports.iter().any(|r| r.cpu.is_some()) {
        writeln!(out)?;
        writeln!(
            out,
            "Load generator CPU per pass, % of the CPUs it may use: {}.",
            per_target(&|r| r.cpu.as_ref().map(|c| format!("{:.0}", c.share() * 100.0)))
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Workload;
    use crate::report::json::tests::report;
    use crate::run::RunError;

    #[test]
    fn medians_and_ratios_against_the_first_target() {
        let mut outcomes = Vec::new();
        for pass in 1..=3 {
            for (url, scale) in [
                ("sluice://127.0.0.1:7171", 1),
                ("redis://127.0.0.1:6379", 4),
            ] {
                let mut r = report(url, Workload::Throughput, pass, scale);
                r.throughput = 8_000.0 / scale as f64;
                outcomes.push(PassOutcome {
                    target: r.target.clone(),
                    pass,
                    result: Ok(r),
                });
            }
        }
        outcomes.push(PassOutcome {
            target: crate::adapter::TargetUrl::parse("nats://127.0.0.1:4222").unwrap(),
            pass: 1,
            result: Err(RunError::Panicked("consumer 0".into())),
        });
        let mut out = Vec::new();
        write(&mut out, &outcomes).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 9, "{text}");
        assert!(lines[0].contains("sluice ÷ target"), "{text}");
        assert!(lines[2].starts_with("| `sluice://127.0.0.1:7171` | 3/3 |"));
        assert!(lines[2].contains("(reference)"));
        let redis = lines[3];
        assert!(
            redis.starts_with("| `redis://127.0.0.1:6379` | 3/3 |"),
            "{redis}"
        );
        assert!(
            redis.contains("| 2000 | 4.00x |"),
            "a quarter of the rate: {redis}"
        );
        assert!(redis.contains("| 4.00x | 0 | 0 |"), "4x the p99: {redis}");
        assert!(lines[4].starts_with("| `nats://127.0.0.1:4222` | 0/1 | 0 | - |"));
        assert_eq!(lines[5], "");
        assert_eq!(
            lines[6],
            "Hypervisor steal per pass, all CPUs, ms (in 10 ms ticks): \
             `sluice://127.0.0.1:7171` -, 40, -; `redis://127.0.0.1:6379` -, 40, -; \
             `nats://127.0.0.1:4222` no pass ended."
        );
        assert_eq!(lines[7], "");
        assert_eq!(
            lines[8],
            "Load generator CPU per pass, % of the CPUs it may use: \
             `sluice://127.0.0.1:7171` -, 90, -; `redis://127.0.0.1:6379` -, 90, -; \
             `nats://127.0.0.1:4222` no pass ended."
        );
    }

    #[test]
    fn no_notes_where_nothing_was_counted() {
        let r = report("sluice://127.0.0.1:7171", Workload::Throughput, 1, 1);
        assert!(r.steal.is_none() && r.cpu.is_none());
        let outcomes = [PassOutcome {
            target: r.target.clone(),
            pass: 1,
            result: Ok(r),
        }];
        let mut out = Vec::new();
        write(&mut out, &outcomes).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(!text.contains("steal") && !text.contains("CPU"), "{text}");
    }
}
