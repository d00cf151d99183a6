//! `sluice ping`: round-trip times of PINGs to every broker, one line per
//! reply and a summary (min, mean, p50, p99, max in microseconds), like
//! `redis-cli --latency` and ping(8).

use std::time::Duration;

use clap::Args;
use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};

use crate::interrupt::Interrupt;
use crate::{Failure, Outcome, print, print_checked, print_json, render, report};
use sluice_cli::units::parse_duration;

/// Round trips above this are recorded as this (a minute: far beyond any
/// request time-out).
const RTT_US_MAX: u64 = 60_000_000;

#[derive(Debug, Args)]
pub struct PingArgs {
    /// PINGs to send to each broker; 0 sends until Ctrl-C.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub count: u64,
    /// Pause between rounds of PINGs.
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = parse_duration)]
    pub interval: Duration,
}

/// One broker's replies.
#[derive(Debug)]
struct Rtts {
    sent: u64,
    lost: u64,
    sum_us: u64,
    histogram: Histogram<u64>,
}

impl Rtts {
    fn new() -> Rtts {
        Rtts {
            sent: 0,
            lost: 0,
            sum_us: 0,
            // Three significant digits up to RTT_US_MAX: a fixed size, so
            // `--count 0` can run for days in bounded memory.
            histogram: Histogram::new_with_bounds(1, RTT_US_MAX, 3)
                .expect("constant bounds are valid"),
        }
    }

    fn record(&mut self, rtt: Duration) -> u64 {
        let us = u64::try_from(rtt.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, RTT_US_MAX);
        self.histogram.saturating_record(us);
        self.sum_us = self.sum_us.saturating_add(us);
        us
    }

    fn received(&self) -> u64 {
        self.histogram.len()
    }

    /// (min, mean, p50, p99, max) in microseconds, when there was a reply.
    fn summary(&self) -> Option<[u64; 5]> {
        let n = self.received();
        (n > 0).then(|| {
            let h = &self.histogram;
            [
                h.min(),
                self.sum_us / n,
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.max(),
            ]
        })
    }

    fn json(&self, addr: &str) -> Value {
        let mut o = Map::new();
        o.insert("broker".into(), json!(addr));
        o.insert("sent".into(), json!(self.sent));
        o.insert("received".into(), json!(self.received()));
        o.insert("lost".into(), json!(self.lost));
        let summary = self.summary();
        for (i, key) in ["min_us", "avg_us", "p50_us", "p99_us", "max_us"]
            .into_iter()
            .enumerate()
        {
            o.insert(key.into(), json!(summary.map(|s| s[i])));
        }
        Value::Object(o)
    }
}

pub fn run(client: &crate::Client, a: &PingArgs, json: bool) -> Result<Outcome, Failure> {
    let interrupt = Interrupt::install()?;
    let brokers: Vec<(&str, &sluice_client::Client)> = client.brokers().collect();
    let mut rtts: Vec<Rtts> = brokers.iter().map(|_| Rtts::new()).collect();
    let mut seq: u64 = 0;
    // Also ends when standard output is closed (`| head`).
    'rounds: while (a.count == 0 || seq < a.count) && !interrupt.requested() {
        if seq > 0 && interrupt.sleep(a.interval) {
            break;
        }
        seq += 1;
        for ((addr, broker), r) in brokers.iter().zip(&mut rtts) {
            r.sent += 1;
            match broker.ping() {
                Ok(rtt) => {
                    let us = r.record(rtt);
                    if !json && !print_checked(&format!("{addr}  seq={seq}  rtt={us}us\n")) {
                        break 'rounds;
                    }
                }
                Err(err) => {
                    r.lost += 1;
                    report::broker_error(addr, &err, json);
                }
            }
        }
    }
    if json {
        if let [r] = rtts.as_slice() {
            print_json(&r.json(brokers[0].0));
        } else {
            let by_broker: Map<String, Value> = brokers
                .iter()
                .zip(&rtts)
                .map(|((addr, _), r)| ((*addr).to_owned(), r.json(addr)))
                .collect();
            print_json(&Value::Object(by_broker));
        }
    } else {
        let mut t = render::Table::new(&[
            "BROKER", "SENT", "LOST", "MIN_US", "AVG_US", "P50_US", "P99_US", "MAX_US",
        ]);
        for ((addr, _), r) in brokers.iter().zip(&rtts) {
            let mut row = vec![(*addr).to_owned(), r.sent.to_string(), r.lost.to_string()];
            match r.summary() {
                Some(s) => row.extend(s.iter().map(u64::to_string)),
                None => row.extend(std::iter::repeat_n("-".to_owned(), 5)),
            }
            t.row(row);
        }
        print(&format!("\n{}", t.render()));
    }
    Ok(Outcome {
        failed: rtts.iter().any(|r| r.lost > 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_known_samples() {
        let mut r = Rtts::new();
        assert_eq!(r.summary(), None);
        assert_eq!(r.json("a")["min_us"], Value::Null);
        for us in [100, 200, 300, 400, 10_000] {
            r.sent += 1;
            r.record(Duration::from_micros(us));
        }
        r.sent += 1;
        r.lost += 1;
        let [min, avg, p50, p99, max] = r.summary().unwrap();
        assert_eq!((min, avg, p50), (100, 2_200, 300));
        // Three significant digits: the histogram's bucket of 10,000.
        assert!((9_990..=10_010).contains(&p99), "{p99}");
        assert!((9_990..=10_010).contains(&max), "{max}");
        let v = r.json("127.0.0.1:7171");
        assert_eq!(v["broker"], "127.0.0.1:7171");
        assert_eq!(
            (v["sent"].as_u64(), v["received"].as_u64()),
            (Some(6), Some(5))
        );
        assert_eq!(v["lost"], 1);
        // Out-of-range samples are clamped, not lost.
        r.record(Duration::ZERO);
        r.record(Duration::from_secs(3_600));
        assert_eq!(r.received(), 7);
    }
}
