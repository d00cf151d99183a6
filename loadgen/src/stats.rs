//! Latency recording: HdrHistograms in microseconds, one set per consumer
//! thread, merged at the end (and once a second for the progress line).

use hdrhistogram::Histogram;

/// Highest value a histogram holds without resizing: one hour in µs. Larger
/// values still record (the histograms resize), they just cost memory.
pub const HISTOGRAM_HIGH_US: u64 = 3_600_000_000;
/// Significant decimal digits kept by every histogram: values are exact to
/// 0.1% of their magnitude.
pub const HISTOGRAM_SIGFIG: u8 = 3;

/// A fresh histogram of microseconds, 1 µs to one hour at 3 significant
/// digits, growing past that if it must.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy the crate's preconditions
    // (low >= 1, high >= 2 * low, sigfig <= 5), so creation cannot fail.
    let mut h = Histogram::new_with_bounds(1, HISTOGRAM_HIGH_US, HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid");
    h.auto(true);
    h
}

/// Nanoseconds to whole microseconds, rounding down.
pub fn ns_to_us(ns: u64) -> u64 {
    ns / 1_000
}

/// Records `samples` (nanoseconds) into `h` in microseconds, emptying
/// `samples`. A run of samples with the same microsecond value is one
/// record of that many: the messages of one batch were stamped with one
/// send time and those of one receive share its receive time, so in a
/// batched workload runs are long and this saves most of the records.
pub fn record_ns(h: &mut Histogram<u64>, samples: &mut Vec<u64>) {
    let mut run: Option<(u64, u64)> = None;
    for us in samples.drain(..).map(ns_to_us) {
        match &mut run {
            Some((value, count)) if *value == us => *count += 1,
            _ => {
                if let Some((value, count)) = run.replace((us, 1)) {
                    h.saturating_record_n(value, count);
                }
            }
        }
    }
    if let Some((value, count)) = run {
        h.saturating_record_n(value, count);
    }
}

/// Everything one consumer thread measures.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Send to first receive, from the intended send time (equal to the
    /// actual send time outside the latency workload).
    pub send_to_receive: Histogram<u64>,
    /// Send to first receive, from the actual send time: the naive figure,
    /// kept for the latency workload to show what coordinated omission hides.
    pub send_to_receive_uncorrected: Histogram<u64>,
    /// Intended send to the delete's acknowledgement, for messages deleted
    /// at their first delivery.
    pub cycle: Histogram<u64>,
    /// Redelivery lateness: receive time of the redelivery minus the end of
    /// the first lease (first receive time + visibility timeout).
    pub lateness: Histogram<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// Empty histograms.
    pub fn new() -> Self {
        Self {
            send_to_receive: new_histogram(),
            send_to_receive_uncorrected: new_histogram(),
            cycle: new_histogram(),
            lateness: new_histogram(),
        }
    }

    /// Adds another recorder's samples to this one.
    pub fn merge(&mut self, other: &Recorder) {
        merge_into(&mut self.send_to_receive, &other.send_to_receive);
        merge_into(
            &mut self.send_to_receive_uncorrected,
            &other.send_to_receive_uncorrected,
        );
        merge_into(&mut self.cycle, &other.cycle);
        merge_into(&mut self.lateness, &other.lateness);
    }
}

/// Adds `src` into `dst`. Both auto-resize, so the addition cannot fail for
/// lack of range; the crate's only other failure is a value that does not
/// fit, which resizing rules out.
pub fn merge_into(dst: &mut Histogram<u64>, src: &Histogram<u64>) {
    dst.add(src)
        .expect("auto-resizing histograms accept every value");
}

/// The percentiles reported for one metric, in the histogram's unit (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample (exact to the histogram's precision).
    pub max: u64,
}

impl Percentiles {
    /// Reads the percentiles out of a histogram; all zero when it is empty.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }

    /// The median of each field over several sets (the upper median for an
    /// even number), for the summary row of a multi-pass comparison.
    pub fn median_of(sets: &[Percentiles]) -> Self {
        let pick = |f: fn(&Percentiles) -> u64| -> u64 {
            let mut v: Vec<u64> = sets.iter().map(f).collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or(0)
        };
        Self {
            count: pick(|p| p.count),
            p50: pick(|p| p.p50),
            p90: pick(|p| p.p90),
            p99: pick(|p| p.p99),
            p999: pick(|p| p.p999),
            max: pick(|p| p.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50, 500);
        assert_eq!(p.p90, 900);
        assert_eq!(p.p99, 990);
        assert_eq!(p.p999, 999);
        assert_eq!(p.max, 1000);
    }

    #[test]
    fn merged_histograms_equal_one_histogram_of_everything() {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        let mut all = new_histogram();
        for v in 0..5000u64 {
            let value = (v * 7919) % 100_000;
            if v % 3 == 0 {
                a.send_to_receive.record(value).unwrap();
            } else {
                b.send_to_receive.record(value).unwrap();
            }
            all.record(value).unwrap();
        }
        b.lateness.record(1234).unwrap();
        a.merge(&b);
        assert_eq!(a.send_to_receive.len(), 5000);
        assert_eq!(Percentiles::of(&a.send_to_receive), Percentiles::of(&all));
        assert_eq!(a.lateness.len(), 1);
        assert_eq!(a.cycle.len(), 0);
    }

    #[test]
    fn samples_recorded_in_runs_equal_samples_recorded_one_by_one() {
        // Runs of equal microseconds (a batch), values that differ only
        // below a microsecond, a value seen again after others, and zero.
        let mut samples: Vec<u64> = Vec::new();
        for (ns, n) in [(12_000, 64), (12_400, 3), (13_999, 5), (0, 2), (12_000, 1)] {
            samples.extend(std::iter::repeat_n(ns, n));
        }
        samples.extend((0..500u64).map(|v| (v * 7919) % 100_000_000));
        let mut one_by_one = new_histogram();
        for &ns in &samples {
            one_by_one.saturating_record(ns_to_us(ns));
        }
        let mut runs = new_histogram();
        let mut drained = samples.clone();
        record_ns(&mut runs, &mut drained);
        assert!(drained.is_empty());
        assert_eq!(runs.len(), samples.len() as u64);
        assert_eq!(runs, one_by_one);
        assert_eq!(runs.count_at(12), 68);
        assert_eq!(runs.count_at(13), 5);
        // Nothing to record leaves the histogram as it was.
        record_ns(&mut runs, &mut Vec::new());
        assert_eq!(runs, one_by_one);
    }

    #[test]
    fn values_past_the_top_still_record() {
        let mut h = new_histogram();
        h.record(HISTOGRAM_HIGH_US * 4).unwrap();
        let mut merged = new_histogram();
        merge_into(&mut merged, &h);
        assert!(merged.max() >= HISTOGRAM_HIGH_US * 4 - HISTOGRAM_HIGH_US * 4 / 1000);
    }

    #[test]
    fn empty_histograms_read_as_zero_and_medians_pick_the_middle() {
        assert_eq!(Percentiles::of(&new_histogram()), Percentiles::default());
        let sets = [10, 30, 20].map(|v| Percentiles {
            count: v,
            p50: v,
            p90: v,
            p99: v,
            p999: v,
            max: v,
        });
        assert_eq!(Percentiles::median_of(&sets).p99, 20);
        assert_eq!(Percentiles::median_of(&[]).p99, 0);
    }
}
