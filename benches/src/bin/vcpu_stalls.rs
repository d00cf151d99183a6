//! What the machine itself takes: one thread per CPU given spins, pinned,
//! reading the clock, and counts every gap between two readings, that is
//! every stretch in which it did not run. With nothing else running a gap
//! is an interrupt, the kernel, or the hypervisor running something else
//! on the vCPU's physical core (on a virtual machine). Beside it, the
//! hypervisor's own count of that last case (steal, from `/proc/stat`).
//!
//! The figures that a benchmark's tail cannot beat: a probe on one CPU
//! while the others idle shows the machine at rest; a probe on every CPU at
//! once shows what it takes when all its vCPUs are busy, as in a benchmark
//! with the broker on one core and the load generator on the other.
//!
//! `cargo run --release -p sluice-benches --bin vcpu_stalls -- [--cpus 0,1] [--seconds 10]`

use std::time::{Duration, Instant};

use sluice_loadgen::machine::Sample;

/// Gaps longer than these are counted (ns), each with their total.
const BOUNDS_NS: [u64; 6] = [20_000, 100_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000];

/// The gaps one spinner saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Gaps {
    /// Per bound of [`BOUNDS_NS`]: how many gaps were longer, and their total.
    over: [(u64, u64); BOUNDS_NS.len()],
    longest_ns: u64,
    spun_ns: u64,
}

impl Gaps {
    fn record(&mut self, gap_ns: u64) {
        self.longest_ns = self.longest_ns.max(gap_ns);
        for (i, &bound) in BOUNDS_NS.iter().enumerate() {
            if gap_ns > bound {
                self.over[i].0 += 1;
                self.over[i].1 += gap_ns;
            }
        }
    }
}

/// Spins on the calling thread for `length`, recording every gap longer
/// than the smallest bound.
fn spin(length: Duration) -> Gaps {
    let mut gaps = Gaps::default();
    let start = Instant::now();
    let mut last = start;
    loop {
        let now = Instant::now();
        let gap = u64::try_from((now - last).as_nanos()).unwrap_or(u64::MAX);
        if gap > BOUNDS_NS[0] {
            gaps.record(gap);
        }
        last = now;
        if now - start >= length {
            gaps.spun_ns = u64::try_from((now - start).as_nanos()).unwrap_or(u64::MAX);
            return gaps;
        }
    }
}

#[derive(Debug)]
struct Args {
    cpus: Vec<usize>,
    seconds: u64,
}

const USAGE: &str = "usage: vcpu_stalls [--cpus 0,1] [--seconds 10]\n\
Spins one pinned thread per CPU given for that long and reports every gap in its run,\n\
with the hypervisor's steal time over the same span. Default: every CPU this process may use.";

fn parse_args(args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        cpus: Vec::new(),
        seconds: 10,
    };
    let mut it = args;
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--cpus" => {
                out.cpus = value
                    .split(',')
                    .map(|c| {
                        c.trim()
                            .parse::<usize>()
                            .map_err(|e| format!("--cpus {value}: {c:?}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--seconds" => {
                out.seconds = value
                    .parse()
                    .ok()
                    .filter(|&s| (1..=3600).contains(&s))
                    .ok_or_else(|| format!("--seconds {value}: a whole number from 1 to 3600"))?;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(out)
}

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

fn main() {
    let mut args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("vcpu_stalls: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if args.cpus.is_empty() {
        args.cpus = match sluice_broker::io::allowed_cpus() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("vcpu_stalls: the CPUs this process may use: {e}");
                std::process::exit(1);
            }
        };
    }
    let length = Duration::from_secs(args.seconds);
    let before = Sample::now();
    let results: Vec<(usize, std::io::Result<Gaps>)> = std::thread::scope(|s| {
        let handles: Vec<_> = args
            .cpus
            .iter()
            .map(|&cpu| {
                (
                    cpu,
                    s.spawn(move || {
                        sluice_broker::io::pin_current_thread(cpu)?;
                        Ok(spin(length))
                    }),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(cpu, h)| (cpu, h.join().expect("a spinner does not panic")))
            .collect()
    });
    let steal = before.and_then(|b| Some(Sample::now()?.since(&b)));
    println!(
        "{} s, spinning on CPU {}",
        args.seconds,
        args.cpus
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut head = "| CPU | longest gap, ms |".to_owned();
    for b in BOUNDS_NS {
        let bound = if b >= 1_000_000 {
            format!("{} ms", b / 1_000_000)
        } else {
            format!("{} µs", b / 1_000)
        };
        head.push_str(&format!(" gaps > {bound}: count, ms |"));
    }
    head.push_str(" steal, ms |");
    println!("{head}");
    println!("|---|---:|{}---:|", "---:|".repeat(BOUNDS_NS.len()));
    let mut failed = false;
    for (cpu, r) in results {
        let gaps = match r {
            Ok(g) => g,
            Err(e) => {
                eprintln!("vcpu_stalls: pinning to CPU {cpu}: {e}");
                failed = true;
                continue;
            }
        };
        let mut row = format!("| {cpu} | {} |", ms(gaps.longest_ns));
        for (count, total) in gaps.over {
            row.push_str(&format!(" {count}, {} |", ms(total)));
        }
        let stolen = steal
            .as_ref()
            .and_then(|s| s.per_cpu.iter().find(|&&(c, _)| c == cpu))
            .map_or_else(|| "-".to_owned(), |&(_, d)| d.as_millis().to_string());
        row.push_str(&format!(" {stolen} |"));
        println!("{row}");
    }
    if let Some(s) = &steal {
        println!("steal over the run: {}", s.describe());
    }
    if failed {
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gap_counts_under_every_bound_it_passes() {
        let mut g = Gaps::default();
        g.record(50_000);
        g.record(3_000_000);
        g.record(12_000_000);
        assert_eq!(g.longest_ns, 12_000_000);
        assert_eq!(g.over[0], (3, 15_050_000), "> 20 µs: all three");
        assert_eq!(g.over[1], (2, 15_000_000), "> 100 µs");
        assert_eq!(g.over[3], (2, 15_000_000), "> 2 ms");
        assert_eq!(g.over[4], (1, 12_000_000), "> 5 ms");
        assert_eq!(g.over[5], (1, 12_000_000), "> 10 ms");
        g.record(10_000_000);
        assert_eq!(g.over[5].0, 1, "a bound is exclusive");
    }

    #[test]
    fn a_short_spin_ends_and_counts_its_time() {
        let g = spin(Duration::from_millis(20));
        assert!(g.spun_ns >= 20_000_000);
        assert!(g.over.windows(2).all(|w| w[0].0 >= w[1].0), "{g:?}");
    }

    #[test]
    fn flags_and_bad_flags() {
        let args = |v: &[&str]| parse_args(v.iter().map(|s| (*s).to_owned()));
        let a = args(&["--cpus", "1, 0", "--seconds", "3"]).unwrap();
        assert_eq!((a.cpus, a.seconds), (vec![1, 0], 3));
        assert_eq!(args(&[]).unwrap().seconds, 10);
        assert!(args(&["--cpus", "one"]).unwrap_err().contains("--cpus one"));
        assert!(args(&["--cpus", ""]).is_err());
        assert!(args(&["--seconds", "0"]).unwrap_err().contains("1 to 3600"));
        assert!(args(&["--seconds"]).unwrap_err().contains("needs a value"));
        assert!(args(&["--fast", "1"]).unwrap_err().contains("unknown flag"));
        assert_eq!(args(&["--help"]).unwrap_err(), "");
    }
}
