//! What a run leaves behind: the printed tables, the `--json` file, the
//! `.hgrm` percentile files, the `--plot` SVG and the `--markdown` medians.

pub mod hgrm;
pub mod json;
pub mod markdown;
pub mod svg;
pub mod table;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::adapter::TargetUrl;
use crate::run::PassReport;
use crate::stats::{merge_into, new_histogram};

/// Each target's primary histogram merged over its passes, in the order the
/// targets first appear: the curves of the plot.
pub fn merged_by_target(reports: &[PassReport]) -> Vec<(TargetUrl, Histogram<u64>)> {
    let mut order: Vec<TargetUrl> = Vec::new();
    let mut merged: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for r in reports {
        let key = r.target.to_string();
        if !merged.contains_key(&key) {
            order.push(r.target.clone());
        }
        let h = merged.entry(key).or_insert_with(new_histogram);
        merge_into(h, r.primary());
    }
    order
        .into_iter()
        .map(|t| {
            let h = merged.remove(&t.to_string()).unwrap_or_else(new_histogram);
            (t, h)
        })
        .collect()
}

/// Formats a duration given in microseconds for a table: `850us`, `1.25ms`,
/// `3.40s` (two decimals: a reading, not a setting to paste back).
pub fn format_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn format_us() {
        assert_eq!(super::format_us(850), "850us");
        assert_eq!(super::format_us(1_250), "1.25ms");
        assert_eq!(super::format_us(3_400_000), "3.40s");
    }
}
