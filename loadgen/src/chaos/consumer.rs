//! Consumers as child processes (`sluice-chaos consume`), so that SIGKILL
//! can take one down while it holds leases, as a crash would.
//!
//! The child receives, "works" a random while holding the leases, and
//! deletes most of what it got (it leaves some to run out). It reports
//! every step on its standard output, one line each, before the step's
//! effect can matter:
//!
//! | line | when |
//! |---|---|
//! | `R <seq> <delivery>` | a delivery (written before anything is deleted) |
//! | `X <seq>` | a delete is about to be sent |
//! | `D <seq> <delivery>` | the delete was acknowledged |
//! | `L <seq>` | the delete found the lease lost (`StaleReceipt`, `Gone`) |
//! | `F <delivery>` | a delivery whose body is not one of this run's |
//! | `E <what>` | a request failed |
//!
//! A child killed between `X` and `D` leaves the delete's outcome unknown;
//! the parent then marks it so, and the reconciliation settles it. A line
//! cut short by the kill is ignored (its step had not happened yet, or is
//! an unknown-outcome delete).
//!
//! The child stops, after its current batch, when its standard input
//! closes.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::Rng;
use sluice_client::ReceiveOptions;

use super::ChaosError;
use super::ledger::{Ledger, delete_outcome_unknown};
use super::workload;
use crate::body;

/// What a consumer child does.
#[derive(Debug, Clone)]
pub struct ConsumeArgs {
    /// Server address.
    pub addr: String,
    /// Queue.
    pub queue: String,
    /// The ledger's run tag, to recognise bodies.
    pub run_tag: u32,
    /// Messages per receive.
    pub batch: u16,
    /// Lease length.
    pub visibility: Duration,
    /// Longest hold of a batch before deleting it.
    pub hold_max: Duration,
    /// Share of messages left undeleted, per mille.
    pub leave_per_mille: u32,
}

impl ConsumeArgs {
    /// The command-line arguments of `sluice-chaos consume`.
    #[must_use]
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "consume".into(),
            "--addr".into(),
            self.addr.clone(),
            "--queue".into(),
            self.queue.clone(),
            "--run-tag".into(),
            self.run_tag.to_string(),
            "--batch".into(),
            self.batch.to_string(),
            "--visibility-ms".into(),
            self.visibility.as_millis().to_string(),
            "--hold-max-ms".into(),
            self.hold_max.as_millis().to_string(),
            "--leave-per-mille".into(),
            self.leave_per_mille.to_string(),
        ]
    }
}

/// The child's main loop; returns its exit status.
#[must_use]
pub fn run_child(args: &ConsumeArgs) -> u8 {
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = Arc::clone(&stop);
    // Standard input closing (the parent's "finish") stops the loop.
    let _ = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            watcher.store(true, Relaxed);
        });
    let mut out = std::io::stdout().lock();
    let mut emit = |text: &str| -> bool {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_ok()
    };
    let c = match workload::client(&args.addr) {
        Ok(c) => c,
        Err(e) => {
            emit(&format!("E connect {e}\n"));
            return 1;
        }
    };
    let mut rng = rand::rng();
    let options = ReceiveOptions::new(args.batch.into())
        .visibility_timeout(args.visibility)
        .wait(Duration::from_millis(200));
    let mut line = String::new();
    while !stop.load(Relaxed) {
        let got = match c.receive(&args.queue, options) {
            Ok(got) => got,
            Err(e) => {
                if !emit(&format!("E receive {}\n", e.name())) {
                    return 1;
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if got.is_empty() {
            continue;
        }
        line.clear();
        let mut keep = Vec::new();
        for m in &got {
            match body::read_stamp(&m.body) {
                Ok(s) if s.run_tag == args.run_tag => {
                    let _ = writeln!(line, "R {} {}", s.seq, m.delivery());
                    if rng.random_range(0..1000) >= args.leave_per_mille {
                        keep.push((s.seq, m.delivery(), m.receipt));
                    }
                }
                _ => {
                    let _ = writeln!(line, "F {}", m.delivery());
                }
            }
        }
        if !emit(&line) {
            return 1;
        }
        // Work, holding the leases: this is where a kill hits.
        let hold_ms = u64::try_from(args.hold_max.as_millis()).unwrap_or(u64::MAX);
        std::thread::sleep(Duration::from_millis(rng.random_range(0..=hold_ms)));
        if keep.is_empty() {
            continue;
        }
        line.clear();
        for (seq, _, _) in &keep {
            let _ = writeln!(line, "X {seq}");
        }
        if !emit(&line) {
            return 1;
        }
        let receipts: Vec<_> = keep.iter().map(|k| k.2).collect();
        line.clear();
        match c.delete_batch(&args.queue, &receipts) {
            Ok(results) => {
                for (r, (seq, delivery, _)) in results.iter().zip(&keep) {
                    match r {
                        Ok(()) => {
                            let _ = writeln!(line, "D {seq} {delivery}");
                        }
                        Err(e) if e.is_lease_lost() => {
                            let _ = writeln!(line, "L {seq}");
                        }
                        Err(e) => {
                            let _ = writeln!(line, "E delete-entry {}", e.name());
                        }
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(line, "E delete {}", e.name());
                if !delete_outcome_unknown(&e) {
                    // Answered with an error: nothing was deleted.
                    for (seq, _, _) in &keep {
                        let _ = writeln!(line, "L {seq}");
                    }
                }
            }
        }
        if !emit(&line) {
            return 1;
        }
    }
    0
}

/// What the parent learned from its children, besides the ledger.
#[derive(Debug, Default)]
pub struct ChildTally {
    /// `E` lines, by text.
    pub errors: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl ChildTally {
    fn error(&self, what: &str) {
        let mut m = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        *m.entry(what.to_owned()).or_default() += 1;
    }
}

/// A running consumer child and the thread reading its reports.
#[derive(Debug)]
pub struct ConsumerChild {
    child: Child,
    stdin: Option<ChildStdin>,
    reader: Option<JoinHandle<()>>,
    started: Instant,
}

impl ConsumerChild {
    /// Starts `exe consume ...` and a thread feeding its reports into
    /// `ledger`.
    ///
    /// # Errors
    /// The process or the thread could not start.
    pub fn spawn(
        exe: &Path,
        args: &ConsumeArgs,
        ledger: &Arc<Ledger>,
        tally: &Arc<ChildTally>,
    ) -> Result<ConsumerChild, ChaosError> {
        let mut child = Command::new(exe)
            .args(args.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| ChaosError::Setup(format!("consumer child {}: {e}", exe.display())))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| ChaosError::Setup("consumer stdout".into()))?;
        let stdin = child.stdin.take();
        let (ledger, tally) = (Arc::clone(ledger), Arc::clone(tally));
        let reader = workload::spawn("chaos-child-reader", move || {
            read_reports(stdout, &ledger, &tally);
        })?;
        Ok(ConsumerChild {
            child,
            stdin,
            reader: Some(reader),
            started: Instant::now(),
        })
    }

    /// How long it has run.
    #[must_use]
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// SIGKILL, then waits for the process and its reports to end.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// Asks the child to finish (closes its standard input) and waits up to
    /// `limit`; kills it after that. Whether it exited on its own with
    /// status 0.
    pub fn finish(mut self, limit: Duration) -> bool {
        drop(self.stdin.take());
        let deadline = Instant::now() + limit;
        let clean = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break false;
                }
            }
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        clean
    }
}

impl Drop for ConsumerChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Feeds a child's report lines into the ledger until its output ends;
/// deletes announced but never answered then have an unknown outcome.
fn read_reports(out: impl Read, ledger: &Ledger, tally: &ChildTally) {
    let mut pending: HashSet<u64> = HashSet::new();
    let mut reader = BufReader::new(out);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match reader.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // A line cut short by a kill has no newline: its step never
        // happened (or is a delete of unknown outcome, already pending).
        if raw.last() != Some(&b'\n') {
            break;
        }
        let line = String::from_utf8_lossy(&raw[..raw.len() - 1]).into_owned();
        apply(&line, ledger, tally, &mut pending);
    }
    ledger.delete_unknown(pending);
}

fn apply(line: &str, ledger: &Ledger, tally: &ChildTally, pending: &mut HashSet<u64>) {
    let mut words = line.split_whitespace();
    let kind = words.next().unwrap_or("");
    let a: Option<u64> = words.next().and_then(|w| w.parse().ok());
    let b: Option<u64> = words.next().and_then(|w| w.parse().ok());
    match (kind, a, b) {
        ("R", Some(seq), Some(delivery)) => {
            ledger.delivered_seqs([(Some(seq), delivery)]);
        }
        ("F", Some(delivery), _) => {
            ledger.delivered_seqs([(None, delivery)]);
        }
        ("X", Some(seq), _) => {
            pending.insert(seq);
        }
        ("D", Some(seq), Some(delivery)) => {
            pending.remove(&seq);
            ledger.deleted([(seq, delivery)]);
        }
        ("L", Some(seq), _) => {
            pending.remove(&seq);
        }
        ("E", _, _) => tally.error(line.trim_start_matches("E ")),
        _ => ledger.violation(format!("a consumer child wrote `{line}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::ledger::SendFate;

    #[test]
    fn reports_feed_the_ledger_and_cut_lines_are_dropped() {
        let ledger = Ledger::new(32);
        let (first, _) = ledger.issue(3);
        ledger.sent(first, &[SendFate::Acked; 3]);
        let tally = ChildTally::default();
        // 0 deleted; 1 announced and never answered (killed); 2 delivered,
        // then a line cut short by the kill.
        let text = "R 0 1\nR 1 1\nR 2 1\nX 0\nX 1\nD 0 1\nE receive Io\nD 2 1";
        read_reports(text.as_bytes(), &ledger, &tally);
        ledger.held([2]);
        let r = ledger.reconcile(None, true);
        assert_eq!(
            (r.deleted, r.deleted_unacknowledged, r.held, r.lost),
            (1, 1, 1, 0)
        );
        assert_eq!(r.violation_count, 0, "{:?}", r.violations);
        assert_eq!(tally.errors.lock().unwrap().get("receive Io"), Some(&1));
    }

    #[test]
    fn arguments_round_trip_through_the_command_line() {
        let a = ConsumeArgs {
            addr: "127.0.0.1:1".into(),
            queue: "q".into(),
            run_tag: 7,
            batch: 8,
            visibility: Duration::from_millis(1500),
            hold_max: Duration::from_millis(30),
            leave_per_mille: 100,
        };
        let args = a.to_args();
        assert_eq!(args[0], "consume");
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--visibility-ms" && w[1] == "1500")
        );
    }
}
