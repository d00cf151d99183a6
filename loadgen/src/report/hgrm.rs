//! HdrHistogram's standard percentile-distribution text (`.hgrm`), as
//! Java's `outputPercentileDistribution` writes it, so the HdrHistogram
//! plotter and other tools read it. Values are written in milliseconds.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;

use crate::run::PassReport;

/// Percentile ticks per half distance to 100%, as HdrHistogram's tools use.
const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// Recorded µs to written ms.
const US_PER_MS: f64 = 1_000.0;

/// Writes the percentile distribution of `h` (recorded in µs) in ms.
pub fn write_distribution(h: &Histogram<u64>, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / US_PER_MS;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                writeln!(
                    out,
                    "{value:12.3} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                )?;
            } else {
                writeln!(out, "{value:12.3} {q:2.12} {total:10}")?;
            }
        }
    }
    let (mean, stdev) = if h.is_empty() {
        (0.0, 0.0)
    } else {
        (h.mean(), h.stdev())
    };
    writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        mean / US_PER_MS,
        stdev / US_PER_MS
    )?;
    writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max() as f64 / US_PER_MS,
        h.len()
    )?;
    let sub_buckets = (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two();
    writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_buckets
    )
}

/// The metrics of a pass that have samples, with their file-name parts.
pub fn metrics(r: &PassReport) -> Vec<(&'static str, &Histogram<u64>)> {
    let rec = &r.recorder;
    [
        ("send_to_receive", &rec.send_to_receive),
        (
            "send_to_receive_uncorrected",
            &rec.send_to_receive_uncorrected,
        ),
        ("cycle", &rec.cycle),
        ("redelivery_lateness", &rec.lateness),
    ]
    .into_iter()
    .filter(|(_, h)| !h.is_empty())
    .collect()
}

/// Writes one `.hgrm` file per target, pass and metric with samples into
/// `dir` (created if missing): `<scheme>-<host>-<port>-pass<N>-<metric>.hgrm`.
/// Returns the paths written.
pub fn write_dir(dir: &Path, reports: &[PassReport]) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        // The same target named twice in one pass gets a distinct label.
        let twins = reports[..i]
            .iter()
            .filter(|o| o.target == r.target && o.pass == r.pass)
            .count();
        let label = match twins {
            0 => r.target.label(),
            n => format!("{}-{}", r.target.label(), n + 1),
        };
        for (metric, h) in metrics(r) {
            let path = dir.join(format!("{label}-pass{}-{metric}.hgrm", r.pass));
            let mut f = io::BufWriter::new(std::fs::File::create(&path)?);
            write_distribution(h, &mut f)?;
            f.flush()?;
            written.push(path);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::new_histogram;

    #[test]
    fn the_standard_layout() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v).unwrap();
        }
        let mut out = Vec::new();
        write_distribution(&h, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        // Data lines: value, percentile, count and (but for the last) 1/(1-p).
        let data: Vec<Vec<&str>> = lines[2..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(data.len() > 20);
        let first = &data[0];
        assert_eq!(first.len(), 4);
        assert_eq!(first[1], "0.000000000000");
        let last = data.last().unwrap();
        assert_eq!(last.len(), 3, "the 100% line has no 1/(1-p) column");
        assert_eq!(
            last[0], "10.007",
            "max 10,000 us (to the histogram's precision) in ms"
        );
        assert_eq!(last[1], "1.000000000000");
        assert_eq!(last[2], "10000");
        let counts: Vec<u64> = data.iter().map(|d| d[2].parse().unwrap()).collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "cumulative counts");
        let footer: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("#["))
            .collect();
        assert_eq!(footer.len(), 3);
        // The mean is over bucket midpoints, hence not exactly 5.000.
        assert!(
            footer[0].starts_with("#[Mean    =        5.00"),
            "{}",
            footer[0]
        );
        assert!(
            footer[0].contains(", StdDeviation   =        2.88"),
            "{}",
            footer[0]
        );
        assert!(
            footer[1].ends_with("Total count    =        10000]"),
            "{}",
            footer[1]
        );
        assert!(
            footer[2].ends_with("SubBuckets     =         2048]"),
            "{}",
            footer[2]
        );
    }

    #[test]
    fn empty_histograms_still_have_header_and_footer() {
        let mut out = Vec::new();
        write_distribution(&new_histogram(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("       Value"));
        assert!(text.contains("Total count    =            0]"));
    }
}
