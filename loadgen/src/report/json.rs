//! The `--json` file: an array with one object per target and pass.
//!
//! Every time is in microseconds, and every key that holds one ends in
//! `_us`. Every object has `target`, `workload`, `pass`, `sent`, `deleted`,
//! `lost`, `duplicates`, `throughput_msgs_per_s`, `send_to_receive` and
//! `cycle` (each `{count, p50_us, p90_us, p99_us, p999_us, max_us}`) and
//! `redelivery_lateness` (`{count, p50_us, p99_us, max_us}`), plus the
//! details: deliveries, messages left and redelivered, early redeliveries,
//! rejected deletes, foreign bodies, whether the drain timed out, the active
//! time (`active_us`), and the configuration in force. A percentile with no
//! samples is `null`. The latency workload adds
//! `send_to_receive_uncorrected`, the naive figure measured from the actual
//! send. `loadgen_cpu` is the load generator's own CPU use over the pass
//! (`{busy_us, wall_us, cpus, share}`) and, where the system counts it,
//! `host_steal` the time a hypervisor took from its CPUs (`{total_us,
//! tick_us, per_cpu: [{cpu, steal_us}]}`).

use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;

use crate::machine::{CpuUse, Steal};
use crate::run::PassReport;
use crate::stats::Percentiles;

/// Latency percentiles in µs; `null` without samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyUs {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: Option<u64>,
    /// 90th percentile.
    pub p90_us: Option<u64>,
    /// 99th percentile.
    pub p99_us: Option<u64>,
    /// 99.9th percentile.
    pub p999_us: Option<u64>,
    /// Largest.
    pub max_us: Option<u64>,
}

impl From<Percentiles> for LatencyUs {
    fn from(p: Percentiles) -> Self {
        let v = |x: u64| (p.count > 0).then_some(x);
        Self {
            count: p.count,
            p50_us: v(p.p50),
            p90_us: v(p.p90),
            p99_us: v(p.p99),
            p999_us: v(p.p999),
            max_us: v(p.max),
        }
    }
}

/// Redelivery lateness in µs; `null` without samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatenessUs {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: Option<u64>,
    /// 99th percentile.
    pub p99_us: Option<u64>,
    /// Largest.
    pub max_us: Option<u64>,
}

impl From<Percentiles> for LatenessUs {
    fn from(p: Percentiles) -> Self {
        let v = |us: u64| (p.count > 0).then_some(us);
        Self {
            count: p.count,
            p50_us: v(p.p50),
            p99_us: v(p.p99),
            max_us: v(p.max),
        }
    }
}

/// Whole microseconds of `d`.
fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One configuration line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConfigLine {
    /// What is set.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// One object of the array.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PassJson {
    /// The target URL.
    pub target: String,
    /// `throughput`, `latency` or `redelivery`.
    pub workload: &'static str,
    /// Pass number, from 1.
    pub pass: u32,
    /// Messages whose send was acknowledged.
    pub sent: u64,
    /// Messages deleted.
    pub deleted: u64,
    /// Messages never received (or left and never received again).
    pub lost: u64,
    /// Deliveries that should not have happened.
    pub duplicates: u64,
    /// Deleted messages per second, first send to last delete.
    pub throughput_msgs_per_s: f64,
    /// Send (intended) to first receive.
    pub send_to_receive: LatencyUs,
    /// Send to first receive from the actual send (latency workload only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_to_receive_uncorrected: Option<LatencyUs>,
    /// Send (intended) to the delete's acknowledgement.
    pub cycle: LatencyUs,
    /// Receive of a redelivery minus (first receive + visibility timeout).
    pub redelivery_lateness: LatenessUs,
    /// All deliveries.
    pub deliveries: u64,
    /// Messages received at least once.
    pub received: u64,
    /// Messages left undeleted at their first delivery.
    pub left_undeleted: u64,
    /// Of those, messages that came back.
    pub redelivered: u64,
    /// Redeliveries before the lease's end as measured here.
    pub early_redeliveries: u64,
    /// Deletes the broker refused.
    pub delete_rejected: u64,
    /// Bodies that were not this pass's messages.
    pub corrupt: u64,
    /// Consumers stopped at the drain timeout.
    pub drain_timed_out: bool,
    /// From the first send to the last delete.
    pub active_us: u64,
    /// The configuration in force.
    pub config: Vec<ConfigLine>,
    /// Time the hypervisor took from the machine's CPUs during the pass
    /// (absent where the system does not count it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_steal: Option<StealJson>,
    /// The load generator's own CPU use during the pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loadgen_cpu: Option<CpuJson>,
}

/// The load generator's CPU use over a pass.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuJson {
    /// CPU time, every thread, user and system.
    pub busy_us: u64,
    /// Wall time.
    pub wall_us: u64,
    /// The CPUs the process may run on.
    pub cpus: usize,
    /// `busy_us / (wall_us * cpus)`.
    pub share: f64,
}

impl From<&CpuUse> for CpuJson {
    fn from(c: &CpuUse) -> Self {
        Self {
            busy_us: us(c.busy),
            wall_us: us(c.wall),
            cpus: c.cpus,
            share: c.share(),
        }
    }
}

/// Hypervisor steal over a pass.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StealJson {
    /// Over every CPU.
    pub total_us: u64,
    /// The counters' resolution (a clock tick).
    pub tick_us: u64,
    /// Per CPU.
    pub per_cpu: Vec<CpuStealJson>,
}

/// One CPU's steal over a pass.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuStealJson {
    /// The CPU's number.
    pub cpu: usize,
    /// Time taken from it.
    pub steal_us: u64,
}

impl From<&Steal> for StealJson {
    fn from(s: &Steal) -> Self {
        Self {
            total_us: us(s.total()),
            tick_us: us(s.tick),
            per_cpu: s
                .per_cpu
                .iter()
                .map(|&(cpu, d)| CpuStealJson {
                    cpu,
                    steal_us: us(d),
                })
                .collect(),
        }
    }
}

impl From<&PassReport> for PassJson {
    fn from(r: &PassReport) -> Self {
        let rec = &r.recorder;
        Self {
            target: r.target.to_string(),
            workload: r.workload.name(),
            pass: r.pass,
            sent: r.tally.sent,
            deleted: r.tally.deleted,
            lost: r.tally.lost,
            duplicates: r.duplicates,
            throughput_msgs_per_s: r.throughput,
            send_to_receive: Percentiles::of(&rec.send_to_receive).into(),
            send_to_receive_uncorrected: (r.workload == crate::config::Workload::Latency)
                .then(|| Percentiles::of(&rec.send_to_receive_uncorrected).into()),
            cycle: Percentiles::of(&rec.cycle).into(),
            redelivery_lateness: Percentiles::of(&rec.lateness).into(),
            deliveries: r.deliveries,
            received: r.tally.received,
            left_undeleted: r.tally.left,
            redelivered: r.tally.redelivered,
            early_redeliveries: r.early_redeliveries,
            delete_rejected: r.delete_rejected,
            corrupt: r.corrupt,
            drain_timed_out: r.drain_timed_out,
            active_us: us(r.active),
            config: r
                .settings
                .iter()
                .map(|s| ConfigLine {
                    name: s.name.clone(),
                    value: s.value.clone(),
                })
                .collect(),
            host_steal: r.steal.as_ref().map(StealJson::from),
            loadgen_cpu: r.cpu.as_ref().map(CpuJson::from),
        }
    }
}

/// Writes the array for `reports`, pretty-printed.
pub fn write(reports: &[PassReport], out: &mut dyn Write) -> io::Result<()> {
    let all: Vec<PassJson> = reports.iter().map(PassJson::from).collect();
    serde_json::to_writer_pretty(&mut *out, &all)?;
    writeln!(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::adapter::{Setting, TargetUrl};
    use crate::config::Workload;
    use crate::stats::Recorder;
    use crate::tracker::Tally;

    pub(crate) fn report(target: &str, workload: Workload, pass: u32, scale: u64) -> PassReport {
        let mut recorder = Recorder::new();
        for v in 1..=1_000u64 {
            recorder.send_to_receive.record(v * scale).unwrap();
            recorder.cycle.record(v * scale * 2).unwrap();
        }
        if workload == Workload::Redelivery {
            for v in 1..=100u64 {
                recorder.lateness.record(v * 10).unwrap();
            }
        }
        PassReport {
            target: TargetUrl::parse(target).unwrap(),
            workload,
            pass,
            tally: Tally {
                sent: 1_000,
                received: 1_000,
                deleted: 1_000,
                left: 0,
                redelivered: 0,
                lost: 0,
            },
            deliveries: 1_000,
            duplicates: 0,
            corrupt: 0,
            delete_rejected: 0,
            early_redeliveries: 0,
            drain_timed_out: false,
            active: Duration::from_millis(500),
            throughput: 2_000.0,
            recorder,
            settings: vec![Setting::new("batch", "64")],
            steal: (pass == 2).then(|| Steal {
                per_cpu: vec![(0, Duration::ZERO), (1, Duration::from_millis(40))],
                tick: Duration::from_millis(10),
            }),
            cpu: (pass == 2).then_some(CpuUse {
                busy: Duration::from_millis(900),
                wall: Duration::from_secs(1),
                cpus: 1,
            }),
        }
    }

    /// Every key that holds a time ends in `_us`, anywhere in `v`; the keys
    /// that do not are the known counts, rates and texts.
    fn assert_times_in_microseconds(v: &serde_json::Value, path: &str) {
        const NOT_TIMES: [&str; 23] = [
            "target",
            "workload",
            "pass",
            "sent",
            "deleted",
            "lost",
            "duplicates",
            "throughput_msgs_per_s",
            "count",
            "deliveries",
            "received",
            "left_undeleted",
            "redelivered",
            "early_redeliveries",
            "delete_rejected",
            "corrupt",
            "drain_timed_out",
            "config",
            "name",
            "value",
            "cpus",
            "share",
            "cpu",
        ];
        const OBJECTS: [&str; 7] = [
            "send_to_receive",
            "send_to_receive_uncorrected",
            "cycle",
            "redelivery_lateness",
            "loadgen_cpu",
            "host_steal",
            "per_cpu",
        ];
        match v {
            serde_json::Value::Object(map) => {
                for (k, inner) in map {
                    assert!(
                        k.ends_with("_us")
                            || NOT_TIMES.contains(&k.as_str())
                            || OBJECTS.contains(&k.as_str()),
                        "{path}.{k}: a time without _us, or an unknown key"
                    );
                    assert!(
                        !k.ends_with("_ms") && (!k.ends_with("_s") || k.ends_with("_per_s")),
                        "{path}.{k}"
                    );
                    assert_times_in_microseconds(inner, &format!("{path}.{k}"));
                }
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    assert_times_in_microseconds(item, &format!("{path}[{i}]"));
                }
            }
            _ => {}
        }
    }

    #[test]
    fn the_documented_shape() {
        let reports = [
            report("redis://127.0.0.1:6379", Workload::Throughput, 1, 1),
            report("nats://127.0.0.1:4222", Workload::Throughput, 1, 2),
        ];
        let mut out = Vec::new();
        write(&reports, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let arr = v.as_array().unwrap();
        assert_eq!(arr.len(), 2);
        let o = &arr[0];
        for key in [
            "target",
            "workload",
            "sent",
            "deleted",
            "lost",
            "duplicates",
            "throughput_msgs_per_s",
            "send_to_receive",
            "cycle",
            "redelivery_lateness",
            "active_us",
        ] {
            assert!(o.get(key).is_some(), "missing {key}");
        }
        assert_eq!(o["target"], "redis://127.0.0.1:6379");
        assert_eq!(o["workload"], "throughput");
        assert_eq!(o["sent"], 1_000);
        assert_eq!(o["throughput_msgs_per_s"], 2_000.0);
        assert_eq!(o["active_us"], 500_000);
        for key in ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"] {
            assert!(o["send_to_receive"][key].is_u64(), "{key}");
            assert!(o["cycle"][key].is_u64(), "{key}");
        }
        assert_eq!(o["send_to_receive"]["p50_us"], 500);
        assert_eq!(o["cycle"]["max_us"], 2_000);
        for key in ["p50_us", "p99_us", "max_us"] {
            assert!(
                o["redelivery_lateness"][key].is_null(),
                "no redeliveries: {key}"
            );
        }
        assert!(o.get("send_to_receive_uncorrected").is_none());
        assert!(o.get("host_steal").is_none(), "not counted: left out");
        assert!(o.get("loadgen_cpu").is_none());
        assert_eq!(arr[1]["send_to_receive"]["p50_us"], 1_000);
        assert_eq!(o["config"][0]["name"], "batch");
        assert_times_in_microseconds(&v, "");
    }

    #[test]
    fn lateness_is_in_microseconds() {
        let r = report("redis://127.0.0.1:6379", Workload::Redelivery, 2, 1);
        let j = PassJson::from(&r);
        assert_eq!(j.pass, 2);
        assert_eq!(j.redelivery_lateness.p50_us, Some(500));
        assert_eq!(j.redelivery_lateness.max_us, Some(1_000));
    }

    #[test]
    fn steal_per_cpu_and_cpu_use_in_microseconds() {
        let r = report("redis://127.0.0.1:6379", Workload::Latency, 2, 1);
        let mut out = Vec::new();
        write(std::slice::from_ref(&r), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let s = &v[0]["host_steal"];
        assert_eq!(s["total_us"], 40_000);
        assert_eq!(s["tick_us"], 10_000);
        assert_eq!(s["per_cpu"][1]["cpu"], 1);
        assert_eq!(s["per_cpu"][1]["steal_us"], 40_000);
        assert_eq!(s["per_cpu"][0]["steal_us"], 0);
        let c = &v[0]["loadgen_cpu"];
        assert_eq!(c["busy_us"], 900_000);
        assert_eq!(c["wall_us"], 1_000_000);
        assert_eq!(c["cpus"], 1);
        assert_eq!(c["share"], 0.9);
        assert!(v[0]["send_to_receive_uncorrected"].get("p99_us").is_some());
        assert_times_in_microseconds(&v, "");
    }
}
