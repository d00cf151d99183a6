//! The `--json` file: an array with one object per target and pass.
//!
//! Every object has `target`, `workload`, `pass`, `sent`, `deleted`,
//! `lost`, `duplicates`, `throughput_msgs_per_s`, `send_to_receive_us` and
//! `cycle_us` (each `{count, p50, p90, p99, p999, max}`, µs) and
//! `redelivery_lateness_ms` (`{count, p50, p99, max}`, ms), plus the
//! details: deliveries, messages left and redelivered, early redeliveries,
//! rejected deletes, foreign bodies, whether the drain timed out, the active
//! time, and the configuration in force. A percentile with no samples is
//! `null`. The latency workload adds `send_to_receive_uncorrected_us`, the
//! naive figure measured from the actual send. `loadgen_cpu` is the load
//! generator's own CPU use over the pass (`{busy_s, wall_s, cpus, share}`)
//! and, where the system counts it, `host_steal_ms` the time a hypervisor
//! took from its CPUs (`{total, tick, per_cpu: [{cpu, ms}]}`, ms).

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
    pub p50: Option<u64>,
    /// 90th percentile.
    pub p90: Option<u64>,
    /// 99th percentile.
    pub p99: Option<u64>,
    /// 99.9th percentile.
    pub p999: Option<u64>,
    /// Largest.
    pub max: Option<u64>,
}

impl From<Percentiles> for LatencyUs {
    fn from(p: Percentiles) -> Self {
        let v = |x: u64| (p.count > 0).then_some(x);
        Self {
            count: p.count,
            p50: v(p.p50),
            p90: v(p.p90),
            p99: v(p.p99),
            p999: v(p.p999),
            max: v(p.max),
        }
    }
}

/// Redelivery lateness in ms; `null` without samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatenessMs {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
}

impl From<Percentiles> for LatenessMs {
    fn from(p: Percentiles) -> Self {
        let v = |us: u64| (p.count > 0).then_some(us as f64 / 1_000.0);
        Self {
            count: p.count,
            p50: v(p.p50),
            p99: v(p.p99),
            max: v(p.max),
        }
    }
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
    pub send_to_receive_us: LatencyUs,
    /// Send to first receive from the actual send (latency workload only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_to_receive_uncorrected_us: Option<LatencyUs>,
    /// Send (intended) to the delete's acknowledgement.
    pub cycle_us: LatencyUs,
    /// Receive of a redelivery minus (first receive + visibility timeout).
    pub redelivery_lateness_ms: LatenessMs,
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
    /// Seconds from the first send to the last delete.
    pub active_s: f64,
    /// The configuration in force.
    pub config: Vec<ConfigLine>,
    /// Time the hypervisor took from the machine's CPUs during the pass
    /// (absent where the system does not count it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_steal_ms: Option<StealJson>,
    /// The load generator's own CPU use during the pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loadgen_cpu: Option<CpuJson>,
}

/// The load generator's CPU use over a pass.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuJson {
    /// CPU seconds, every thread, user and system.
    pub busy_s: f64,
    /// Wall seconds.
    pub wall_s: f64,
    /// The CPUs the process may run on.
    pub cpus: usize,
    /// `busy_s / (wall_s * cpus)`.
    pub share: f64,
}

impl From<&CpuUse> for CpuJson {
    fn from(c: &CpuUse) -> Self {
        Self {
            busy_s: c.busy.as_secs_f64(),
            wall_s: c.wall.as_secs_f64(),
            cpus: c.cpus,
            share: c.share(),
        }
    }
}

/// Hypervisor steal over a pass, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StealJson {
    /// Over every CPU.
    pub total: u64,
    /// The counters' resolution (a clock tick).
    pub tick: u64,
    /// Per CPU.
    pub per_cpu: Vec<CpuStealJson>,
}

/// One CPU's steal over a pass.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuStealJson {
    /// The CPU's number.
    pub cpu: usize,
    /// Milliseconds.
    pub ms: u64,
}

impl From<&Steal> for StealJson {
    fn from(s: &Steal) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            total: ms(s.total()),
            tick: ms(s.tick),
            per_cpu: s
                .per_cpu
                .iter()
                .map(|&(cpu, d)| CpuStealJson { cpu, ms: ms(d) })
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
            send_to_receive_us: Percentiles::of(&rec.send_to_receive).into(),
            send_to_receive_uncorrected_us: (r.workload == crate::config::Workload::Latency)
                .then(|| Percentiles::of(&rec.send_to_receive_uncorrected).into()),
            cycle_us: Percentiles::of(&rec.cycle).into(),
            redelivery_lateness_ms: Percentiles::of(&rec.lateness).into(),
            deliveries: r.deliveries,
            received: r.tally.received,
            left_undeleted: r.tally.left,
            redelivered: r.tally.redelivered,
            early_redeliveries: r.early_redeliveries,
            delete_rejected: r.delete_rejected,
            corrupt: r.corrupt,
            drain_timed_out: r.drain_timed_out,
            active_s: r.active.as_secs_f64(),
            config: r
                .settings
                .iter()
                .map(|s| ConfigLine {
                    name: s.name.clone(),
                    value: s.value.clone(),
                })
                .collect(),
            host_steal_ms: r.steal.as_ref().map(StealJson::from),
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
            "send_to_receive_us",
            "cycle_us",
            "redelivery_lateness_ms",
        ] {
            assert!(o.get(key).is_some(), "missing {key}");
        }
        assert_eq!(o["target"], "redis://127.0.0.1:6379");
        assert_eq!(o["workload"], "throughput");
        assert_eq!(o["sent"], 1_000);
        assert_eq!(o["throughput_msgs_per_s"], 2_000.0);
        for key in ["p50", "p90", "p99", "p999", "max"] {
            assert!(o["send_to_receive_us"][key].is_u64(), "{key}");
            assert!(o["cycle_us"][key].is_u64(), "{key}");
        }
        assert_eq!(o["send_to_receive_us"]["p50"], 500);
        assert_eq!(o["cycle_us"]["max"], 2_000);
        for key in ["p50", "p99", "max"] {
            assert!(
                o["redelivery_lateness_ms"][key].is_null(),
                "no redeliveries: {key}"
            );
        }
        assert!(o.get("send_to_receive_uncorrected_us").is_none());
        assert!(o.get("host_steal_ms").is_none(), "not counted: left out");
        assert!(o.get("loadgen_cpu").is_none());
        assert_eq!(arr[1]["send_to_receive_us"]["p50"], 1_000);
        assert_eq!(o["config"][0]["name"], "batch");
    }

    #[test]
    fn lateness_is_in_milliseconds() {
        let r = report("redis://127.0.0.1:6379", Workload::Redelivery, 2, 1);
        let j = PassJson::from(&r);
        assert_eq!(j.pass, 2);
        assert_eq!(j.redelivery_lateness_ms.p50, Some(0.5));
        assert_eq!(j.redelivery_lateness_ms.max, Some(1.0));
    }

    #[test]
    fn steal_in_milliseconds_per_cpu_and_cpu_use() {
        let r = report("redis://127.0.0.1:6379", Workload::Latency, 2, 1);
        let mut out = Vec::new();
        write(std::slice::from_ref(&r), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let s = &v[0]["host_steal_ms"];
        assert_eq!(s["total"], 40);
        assert_eq!(s["tick"], 10);
        assert_eq!(s["per_cpu"][1]["cpu"], 1);
        assert_eq!(s["per_cpu"][1]["ms"], 40);
        assert_eq!(s["per_cpu"][0]["ms"], 0);
        let c = &v[0]["loadgen_cpu"];
        assert_eq!(c["busy_s"], 0.9);
        assert_eq!(c["wall_s"], 1.0);
        assert_eq!(c["cpus"], 1);
        assert_eq!(c["share"], 0.9);
    }
}
