//! The final tables: per target and pass, the message accounting, the
//! throughput and the latency percentiles; with several passes, a median
//! row per target.

use std::io::{self, Write};

use crate::config::Workload;
use crate::report::format_us;
use crate::run::{PassOutcome, PassReport};
use crate::stats::Percentiles;

fn latency_row(out: &mut dyn Write, name: &str, p: &Percentiles) -> io::Result<()> {
    if p.count == 0 {
        return writeln!(out, "    {name:<26} {:>9}", "-");
    }
    writeln!(
        out,
        "    {name:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        format_us(p.p50),
        format_us(p.p90),
        format_us(p.p99),
        format_us(p.p999),
        format_us(p.max),
        p.count
    )
}

/// Writes the detailed block of one pass.
pub fn write_pass(out: &mut dyn Write, r: &PassReport) -> io::Result<()> {
    let t = &r.tally;
    writeln!(
        out,
        "{}  pass {}  ({} workload)",
        r.target, r.pass, r.workload
    )?;
    writeln!(
        out,
        "  sent {}  deleted {}  lost {}  duplicates {}  (deliveries {}, deletes rejected {}, foreign bodies {})",
        t.sent, t.deleted, t.lost, r.duplicates, r.deliveries, r.delete_rejected, r.corrupt
    )?;
    if r.workload == Workload::Redelivery || t.left > 0 {
        writeln!(
            out,
            "  left undeleted {}  came back {}  early {}",
            t.left, t.redelivered, r.early_redeliveries
        )?;
    }
    if r.drain_timed_out {
        writeln!(
            out,
            "  the drain timed out before every message was deleted"
        )?;
    }
    writeln!(
        out,
        "  throughput {:.0} messages/s ({} deleted in {:.3} s, first send to last delete)",
        r.throughput,
        t.deleted,
        r.active.as_secs_f64()
    )?;
    if let Some(steal) = &r.steal {
        writeln!(
            out,
            "  hypervisor steal during the pass: {}",
            steal.describe()
        )?;
    }
    if let Some(cpu) = &r.cpu {
        writeln!(out, "  load generator CPU: {}", cpu.describe())?;
    }
    writeln!(
        out,
        "    {:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "latency", "p50", "p90", "p99", "p99.9", "max", "samples"
    )?;
    let rec = &r.recorder;
    let from = if r.workload == Workload::Latency {
        " (intended)"
    } else {
        ""
    };
    latency_row(
        out,
        &format!("send to receive{from}"),
        &Percentiles::of(&rec.send_to_receive),
    )?;
    if r.workload == Workload::Latency {
        latency_row(
            out,
            "send to receive (naive)",
            &Percentiles::of(&rec.send_to_receive_uncorrected),
        )?;
    }
    latency_row(out, &format!("cycle{from}"), &Percentiles::of(&rec.cycle))?;
    if r.workload == Workload::Redelivery || !rec.lateness.is_empty() {
        latency_row(out, "redelivery lateness", &Percentiles::of(&rec.lateness))?;
    }
    writeln!(out)
}

/// Writes every pass's block, then a one-line-per-pass comparison with a
/// median row per target when there are several passes.
pub fn write_all(out: &mut dyn Write, outcomes: &[PassOutcome], passes: u32) -> io::Result<()> {
    for o in outcomes {
        match &o.result {
            Ok(r) => write_pass(out, r)?,
            Err(e) => writeln!(out, "{}  pass {}  FAILED: {e}\n", o.target, o.pass)?,
        }
    }
    let Some(first) = outcomes.iter().find_map(|o| o.result.as_ref().ok()) else {
        return Ok(());
    };
    let metric = first.primary_name();
    writeln!(
        out,
        "summary ({} workload; latency = {metric})",
        first.workload
    )?;
    writeln!(
        out,
        "{:<36} {:>6} {:>12} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "target", "pass", "msgs/s", "lost", "dups", "p50", "p99", "p99.9", "max"
    )?;
    let mut targets: Vec<String> = Vec::new();
    for o in outcomes {
        let name = o.target.to_string();
        if !targets.contains(&name) {
            targets.push(name);
        }
    }
    for name in &targets {
        let mine: Vec<&PassReport> = outcomes
            .iter()
            .filter(|o| o.target.to_string() == *name)
            .filter_map(|o| o.result.as_ref().ok())
            .collect();
        for r in &mine {
            let p = r.primary_percentiles();
            writeln!(
                out,
                "{name:<36} {:>6} {:>12.0} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}",
                r.pass,
                r.throughput,
                r.tally.lost,
                r.duplicates,
                format_us(p.p50),
                format_us(p.p99),
                format_us(p.p999),
                format_us(p.max)
            )?;
        }
        if passes > 1 && !mine.is_empty() {
            let mut rates: Vec<f64> = mine.iter().map(|r| r.throughput).collect();
            rates.sort_by(f64::total_cmp);
            let p = Percentiles::median_of(
                &mine
                    .iter()
                    .map(|r| r.primary_percentiles())
                    .collect::<Vec<_>>(),
            );
            writeln!(
                out,
                "{name:<36} {:>6} {:>12.0} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}",
                "median",
                rates[rates.len() / 2],
                "",
                "",
                format_us(p.p50),
                format_us(p.p99),
                format_us(p.p999),
                format_us(p.max)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json::tests::report;
    use crate::run::RunError;

    #[test]
    fn blocks_summary_and_medians() {
        let outcomes: Vec<PassOutcome> = [(1, 1), (2, 3), (3, 2)]
            .into_iter()
            .map(|(pass, scale)| {
                let r = report("redis://127.0.0.1:6379", Workload::Throughput, pass, scale);
                PassOutcome {
                    target: r.target.clone(),
                    pass,
                    result: Ok(r),
                }
            })
            .chain(std::iter::once(PassOutcome {
                target: crate::adapter::TargetUrl::parse("sluice://127.0.0.1:7171").unwrap(),
                pass: 1,
                result: Err(RunError::Panicked("consumer 0".into())),
            }))
            .collect();
        let mut out = Vec::new();
        write_all(&mut out, &outcomes, 3).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("redis://127.0.0.1:6379  pass 2  (throughput workload)"),
            "{text}"
        );
        assert!(text.contains("sluice://127.0.0.1:7171  pass 1  FAILED: consumer 0 panicked"));
        let median = text
            .lines()
            .find(|l| l.contains("median"))
            .expect("a median row");
        // p50 of the three passes: 500, 1500, 1000 us -> median 1.00ms.
        assert!(median.contains("1.00ms"), "{median}");
        let summary_rows = text
            .lines()
            .filter(|l| l.starts_with("redis://127.0.0.1:6379 ") && !l.contains("workload"))
            .count();
        assert_eq!(summary_rows, 4, "three passes and the median");
    }
}
