//! The figures of a run, by name, with the lines printed as each is
//! measured.

use crate::pipeline::Rate;
use crate::workloads::client::ReqRate;
use crate::workloads::rtt::Latency;

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Figures of one pass, by name.
#[derive(Default)]
pub(crate) struct Table {
    pub(crate) rows: Vec<(String, Vec<f64>)>,
}

impl Table {
    pub(crate) fn push(&mut self, name: String, value: f64) {
        match self.rows.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(value),
            None => self.rows.push((name, vec![value])),
        }
    }

    pub(crate) fn median(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| median(v.clone()))
    }
}

pub(crate) fn req_line(t: &mut Table, name: String, r: ReqRate) {
    println!(
        "  {name:<34} {:>12.0} req/s   client CPU {:>6.2} us/req",
        r.per_s, r.cpu_us
    );
    t.push(format!("{name} cpu"), r.cpu_us);
    t.push(name, r.per_s);
}

pub(crate) fn rate_line(t: &mut Table, name: String, r: Rate) {
    println!(
        "  {name:<34} {:>12.0} msg/s   reads/64 msgs {:>5.2}{}",
        r.msgs_per_s,
        r.reads_per_batch,
        if r.per_receive > 0.0 {
            format!("   msgs/RECEIVE {:.1}", r.per_receive)
        } else {
            String::new()
        }
    );
    t.push(name, r.msgs_per_s);
}

pub(crate) fn lat_line(t: &mut Table, name: &str, l: Latency) {
    println!(
        "  {name:<34} p50 {:>8.2} us   p99 {:>8.2} us   p99.9 {:>8.2} us",
        l.p50, l.p99, l.p999
    );
    t.push(format!("{name} p50"), l.p50);
    t.push(format!("{name} p99"), l.p99);
    t.push(format!("{name} p99.9"), l.p999);
}
