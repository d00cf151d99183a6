//! Service-level objectives on the command line: `--slo 'p99<2ms,max<10ms'`.
//!
//! Each objective names a statistic (`p50`, `p90`, `p99`, `p999` or `p99.9`,
//! `max`), an operator (`<` or `<=`) and a bound with a unit (`us`, `ms`,
//! `s`). They are checked against each target's primary metric: send to
//! receive for the throughput and latency workloads, redelivery lateness for
//! the redelivery workload.

use std::fmt;

use crate::flags::parse_duration;
use crate::report::format_us;
use crate::stats::Percentiles;

/// An SLO that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SLO {input:?}: {reason}")]
pub struct SloError {
    /// The objective as given.
    pub input: String,
    /// Why it was refused.
    pub reason: String,
}

/// The statistic an objective bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// Largest sample.
    Max,
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::P999 => "p999",
            Stat::Max => "max",
        }
    }

    fn read(self, p: &Percentiles) -> u64 {
        match self {
            Stat::P50 => p.p50,
            Stat::P90 => p.p90,
            Stat::P99 => p.p99,
            Stat::P999 => p.p999,
            Stat::Max => p.max,
        }
    }
}

/// One bound: `p99<2ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Objective {
    /// What is bounded.
    pub stat: Stat,
    /// The bound in microseconds.
    pub bound_us: u64,
    /// `<=` rather than `<`.
    pub inclusive: bool,
}

impl Objective {
    /// Whether a measured value meets the objective.
    pub fn holds(&self, value_us: u64) -> bool {
        if self.inclusive {
            value_us <= self.bound_us
        } else {
            value_us < self.bound_us
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.inclusive { "<=" } else { "<" };
        write!(f, "{}{}{}", self.stat.name(), op, format_us(self.bound_us))
    }
}

/// A set of objectives, all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slo {
    /// The objectives in the order given.
    pub objectives: Vec<Objective>,
}

/// An objective a measurement did not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The objective.
    pub objective: Objective,
    /// What was measured, in µs.
    pub measured_us: u64,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {} violates {}",
            self.objective.stat.name(),
            format_us(self.measured_us),
            self.objective
        )
    }
}

impl Slo {
    /// Reads a comma-separated list of objectives.
    pub fn parse(input: &str) -> Result<Slo, SloError> {
        let err = |reason: String| SloError {
            input: input.to_owned(),
            reason,
        };
        let mut objectives = Vec::new();
        for part in input.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(err("empty objective".into()));
            }
            let (lhs, inclusive, rhs) = if let Some((l, r)) = part.split_once("<=") {
                (l, true, r)
            } else if let Some((l, r)) = part.split_once('<') {
                (l, false, r)
            } else {
                return Err(err(format!("{part:?} has no '<' or '<='")));
            };
            let stat = match lhs.trim() {
                "p50" => Stat::P50,
                "p90" => Stat::P90,
                "p99" => Stat::P99,
                "p999" | "p99.9" => Stat::P999,
                "max" => Stat::Max,
                other => {
                    return Err(err(format!(
                        "unknown statistic {other:?} (p50, p90, p99, p999, max)"
                    )));
                }
            };
            let rhs = rhs.trim();
            if !(rhs.ends_with("us")
                || rhs.ends_with("µs")
                || rhs.ends_with("ms")
                || rhs.ends_with('s'))
            {
                return Err(err(format!("{rhs:?} needs a unit: us, ms or s")));
            }
            let bound = parse_duration(rhs).map_err(err)?;
            let bound_us =
                u64::try_from(bound.as_micros()).map_err(|_| err("bound too large".into()))?;
            if bound.as_nanos() % 1_000 != 0 {
                return Err(err(format!("{rhs:?} is finer than a microsecond")));
            }
            objectives.push(Objective {
                stat,
                bound_us,
                inclusive,
            });
        }
        Ok(Slo { objectives })
    }

    /// The objectives the measured percentiles violate, in the order given.
    pub fn check(&self, measured: &Percentiles) -> Vec<Violation> {
        self.objectives
            .iter()
            .filter_map(|o| {
                let value = o.stat.read(measured);
                (!o.holds(value)).then(|| Violation {
                    objective: o.clone(),
                    measured_us: value,
                })
            })
            .collect()
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, o) in self.objectives.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{o}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured() -> Percentiles {
        Percentiles {
            count: 100,
            p50: 400,
            p90: 900,
            p99: 2_500,
            p999: 8_000,
            max: 12_000,
        }
    }

    #[test]
    fn parses_every_statistic_and_unit() {
        let slo = Slo::parse("p50<500us, p90<=1ms,p99<2ms,p99.9<1s,p999<10ms,max<=0.5s").unwrap();
        let got: Vec<(Stat, u64, bool)> = slo
            .objectives
            .iter()
            .map(|o| (o.stat, o.bound_us, o.inclusive))
            .collect();
        assert_eq!(
            got,
            vec![
                (Stat::P50, 500, false),
                (Stat::P90, 1_000, true),
                (Stat::P99, 2_000, false),
                (Stat::P999, 1_000_000, false),
                (Stat::P999, 10_000, false),
                (Stat::Max, 500_000, true),
            ]
        );
        assert_eq!(Slo::parse("p99<2ms").unwrap().to_string(), "p99<2.00ms");
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "",
            "p99",
            "p99>2ms",
            "p98<2ms",
            "p99<2",
            "p99<2h",
            "p99<1.5us",
            "p99<2ms,",
            "p99<xms",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn checks_and_names_violations() {
        let slo = Slo::parse("p50<1ms,p99<2ms,max<=12ms,p999<8ms").unwrap();
        let v = slo.check(&measured());
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].objective.stat, Stat::P99);
        assert_eq!(v[0].measured_us, 2_500);
        assert_eq!(v[0].to_string(), "p99 = 2.50ms violates p99<2.00ms");
        // p999 == bound with a strict '<' is a violation; max == bound with '<=' is not.
        assert_eq!(v[1].objective.stat, Stat::P999);
        assert!(Slo::parse("p99<3ms").unwrap().check(&measured()).is_empty());
    }
}
