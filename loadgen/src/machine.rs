//! What the machine did besides the brokers during a pass: the time a
//! hypervisor took from its CPUs, and the CPU the load generator itself
//! used.
//!
//! **Steal.** On a virtual machine the host may run something else on the
//! physical core while a vCPU has work. Linux counts that time per CPU as
//! *steal* (the eighth number of each `cpuN` line of `/proc/stat`, in clock
//! ticks, usually 10 ms). A pass whose vCPUs lost time this way has
//! latencies the brokers did not cause. Hosts do not all count it, or count
//! all of it: a zero is not proof that the host took nothing (the
//! `vcpu_stalls` benchmark measures the stalls themselves).
//!
//! **The load generator's CPU.** Each pass reports the process's CPU time
//! over the pass against the CPUs it may run on. A high share alone is not
//! saturation: with one batch in flight, each connection sends again as
//! soon as it is answered, so the share stays high at any rate, and polling
//! (`--read-spin`, an open-loop producer's last microseconds before a send)
//! counts as busy. A load generator at 100% whose rate falls short of the
//! one asked is the bound of its own run.

use std::time::{Duration, Instant};

/// Steal time per CPU, in clock ticks since boot, from `/proc/stat`'s text.
/// `None` when the text has no `cpuN` line with a steal column; a line that
/// does not parse is skipped (CPUs that went offline leave gaps, so each
/// value carries its CPU number).
pub fn parse_proc_stat(text: &str) -> Option<Vec<(usize, u64)>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(cpu) = name
            .strip_prefix("cpu")
            .filter(|n| !n.is_empty())
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        // user nice system idle iowait irq softirq steal ...
        if let Some(Ok(steal)) = fields.nth(7).map(str::parse::<u64>) {
            out.push((cpu, steal));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A reading of every CPU's steal counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    ticks: Vec<(usize, u64)>,
    ticks_per_second: u64,
}

impl Sample {
    /// Reads `/proc/stat` now; `None` where it cannot be read or has no
    /// steal column.
    pub fn now() -> Option<Sample> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        Sample::from_text(&text, rustix::param::clock_ticks_per_second())
    }

    /// A reading from `/proc/stat`'s text, its ticks being
    /// `ticks_per_second` long.
    pub fn from_text(text: &str, ticks_per_second: u64) -> Option<Sample> {
        if ticks_per_second == 0 {
            return None;
        }
        Some(Sample {
            ticks: parse_proc_stat(text)?,
            ticks_per_second,
        })
    }

    /// The steal of each CPU from `earlier` to this reading, ascending by
    /// CPU. A CPU missing from either reading is left out; a counter that
    /// went backwards counts as zero.
    pub fn since(&self, earlier: &Sample) -> Steal {
        let tick_ns = 1_000_000_000 / self.ticks_per_second;
        let mut per_cpu: Vec<(usize, Duration)> = self
            .ticks
            .iter()
            .filter_map(|&(cpu, now)| {
                let (_, then) = earlier.ticks.iter().find(|&&(c, _)| c == cpu)?;
                Some((
                    cpu,
                    Duration::from_nanos(now.saturating_sub(*then).saturating_mul(tick_ns)),
                ))
            })
            .collect();
        per_cpu.sort_unstable_by_key(|&(cpu, _)| cpu);
        Steal {
            per_cpu,
            tick: Duration::from_nanos(tick_ns),
        }
    }
}

/// The CPU time this process used, and when, for [`CpuUse`].
#[derive(Debug, Clone, Copy)]
pub struct CpuClock {
    cpu: Duration,
    at: Instant,
}

impl CpuClock {
    /// Reads the process's CPU clock (every thread, user and system time).
    pub fn now() -> Option<CpuClock> {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let cpu = Duration::new(
            u64::try_from(t.tv_sec).ok()?,
            u32::try_from(t.tv_nsec).ok()?,
        );
        Some(CpuClock {
            cpu,
            at: Instant::now(),
        })
    }

    /// The process's CPU use from `earlier` to this reading, on `cpus`
    /// CPUs (the ones it may run on).
    pub fn since(&self, earlier: &CpuClock, cpus: usize) -> CpuUse {
        CpuUse {
            busy: self.cpu.saturating_sub(earlier.cpu),
            wall: self.at.saturating_duration_since(earlier.at),
            cpus: cpus.max(1),
        }
    }
}

/// How many CPUs this process may run on (its affinity), at least 1.
pub fn allowed_cpus() -> usize {
    rustix::thread::sched_getaffinity(None).map_or(1, |set| set.count().max(1) as usize)
}

/// The load generator's CPU use over a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuUse {
    /// CPU time, every thread, user and system.
    pub busy: Duration,
    /// Wall time.
    pub wall: Duration,
    /// The CPUs the process may run on.
    pub cpus: usize,
}

impl CpuUse {
    /// `busy` over what the CPUs could give in `wall`: 1.0 is all of them.
    pub fn share(&self) -> f64 {
        let capacity = self.wall.as_secs_f64() * self.cpus as f64;
        if capacity > 0.0 {
            self.busy.as_secs_f64() / capacity
        } else {
            0.0
        }
    }

    /// One line for the pass's report.
    pub fn describe(&self) -> String {
        format!(
            "{:.2} s in {:.2} s, {:.0}% of the {} CPU{} it may use",
            self.busy.as_secs_f64(),
            self.wall.as_secs_f64(),
            self.share() * 100.0,
            self.cpus,
            if self.cpus == 1 { "" } else { "s" }
        )
    }
}

/// Steal over an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steal {
    /// Per CPU number, ascending.
    pub per_cpu: Vec<(usize, Duration)>,
    /// The counters' resolution.
    pub tick: Duration,
}

impl Steal {
    /// Over every CPU.
    pub fn total(&self) -> Duration {
        self.per_cpu.iter().map(|&(_, d)| d).sum()
    }

    /// One line for the pass's report: the total, and each CPU that lost
    /// any time.
    pub fn describe(&self) -> String {
        let ms = |d: Duration| d.as_millis();
        let mut text = format!(
            "{} ms over {} CPUs (counted in {} ms ticks)",
            ms(self.total()),
            self.per_cpu.len(),
            ms(self.tick)
        );
        let lost: Vec<String> = self
            .per_cpu
            .iter()
            .filter(|(_, d)| !d.is_zero())
            .map(|&(cpu, d)| format!("cpu{cpu} {} ms", ms(d)))
            .collect();
        if !lost.is_empty() {
            text.push_str(": ");
            text.push_str(&lost.join(", "));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 1000 2 0 3 40 0 0\n\
cpu0 60 0 30 500 1 0 2 10 0 0\n\
cpu1 40 0 20 500 1 0 1 30 0 0\n\
intr 12345 0 0\n\
ctxt 999\n";

    #[test]
    fn reads_each_cpus_steal_and_skips_the_total() {
        assert_eq!(parse_proc_stat(STAT), Some(vec![(0, 10), (1, 30)]));
    }

    #[test]
    fn bad_or_short_lines_are_skipped_and_no_steal_is_none() {
        // Too few columns (an old kernel), words, an empty CPU number.
        let text = "cpu0 1 2 3 4\ncpu1 a b c d e f g h\ncpu 1 2 3 4 5 6 7 8\ncpux 1 2 3 4 5 6 7 8\n\
cpu2 1 2 3 4 5 6 7 -8\n";
        assert_eq!(parse_proc_stat(text), None);
        assert_eq!(parse_proc_stat(""), None);
        assert_eq!(Sample::from_text(STAT, 0), None, "no tick length");
        let mixed = format!("{text}cpu3 0 0 0 0 0 0 0 7\n");
        assert_eq!(parse_proc_stat(&mixed), Some(vec![(3, 7)]));
    }

    #[test]
    fn steal_over_an_interval_per_cpu() {
        let before = Sample::from_text(STAT, 100).unwrap();
        let after = Sample::from_text(
            "cpu0 60 0 30 500 1 0 2 13 0 0\ncpu1 40 0 20 500 1 0 1 30\ncpu2 1 1 1 1 1 1 1 5\n",
            100,
        )
        .unwrap();
        let steal = after.since(&before);
        assert_eq!(
            steal.per_cpu,
            vec![(0, Duration::from_millis(30)), (1, Duration::ZERO)],
            "cpu2 came online since: left out"
        );
        assert_eq!(steal.total(), Duration::from_millis(30));
        assert_eq!(
            steal.describe(),
            "30 ms over 2 CPUs (counted in 10 ms ticks): cpu0 30 ms"
        );
        // A counter that went backwards (a reset) counts as nothing.
        assert_eq!(before.since(&after).total(), Duration::ZERO);
        // Listed out of order, reported ascending; an absurd count saturates.
        let a = Sample::from_text("cpu1 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n", 100).unwrap();
        let b = Sample::from_text(
            "cpu1 0 0 0 0 0 0 0 18446744073709551615\ncpu0 0 0 0 0 0 0 0 1\n",
            100,
        )
        .unwrap();
        let s = b.since(&a);
        assert_eq!(s.per_cpu[0], (0, Duration::from_millis(10)));
        assert_eq!(s.per_cpu[1], (1, Duration::from_nanos(u64::MAX)));
    }

    #[test]
    fn cpu_use_is_a_share_of_the_cpus_allowed() {
        let u = CpuUse {
            busy: Duration::from_millis(1_800),
            wall: Duration::from_secs(1),
            cpus: 2,
        };
        assert!((u.share() - 0.9).abs() < 1e-9);
        assert_eq!(
            u.describe(),
            "1.80 s in 1.00 s, 90% of the 2 CPUs it may use"
        );
        let idle = CpuUse {
            busy: Duration::from_millis(100),
            wall: Duration::from_secs(1),
            cpus: 1,
        };
        assert_eq!(
            idle.describe(),
            "0.10 s in 1.00 s, 10% of the 1 CPU it may use"
        );
        let none = CpuUse {
            busy: Duration::ZERO,
            wall: Duration::ZERO,
            cpus: 1,
        };
        assert_eq!(none.share(), 0.0, "no time, no share");
    }

    #[test]
    fn the_cpu_clock_counts_this_process() {
        let a = CpuClock::now().expect("a process CPU clock");
        let mut x = 0u64;
        // Work the clock must see (black_box: not folded away).
        while CpuClock::now().unwrap().cpu.saturating_sub(a.cpu) < Duration::from_millis(5) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = CpuClock::now().unwrap();
        let u = b.since(&a, allowed_cpus());
        assert!(u.busy >= Duration::from_millis(5));
        assert!(u.cpus >= 1);
    }

    #[test]
    fn this_machine_reads_or_says_it_cannot() {
        // Linux has the column since 2.6.11; elsewhere there is no file.
        if let Some(a) = Sample::now() {
            let b = Sample::now().expect("read once, read again");
            assert_eq!(b.since(&a).per_cpu.len(), a.ticks.len());
        } else {
            assert!(
                std::fs::read_to_string("/proc/stat")
                    .map_or(true, |t| parse_proc_stat(&t).is_none())
            );
        }
    }
}
