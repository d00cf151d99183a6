//! The producers: closed loop (one batch at a time, or up to `--window`
//! in flight), and open loop on the fixed schedule of the latency workload.
//! Each stamps its bodies with the sequence number and the intended and
//! actual send times, and counts a message sent once the broker
//! acknowledged it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pass::Pass;
use crate::adapter::{Adapter, AdapterError, Finished};
use crate::body::{BodyBuf, Stamp};
use crate::config::limits;
use crate::schedule::OpenLoop;

/// How close to its next message's time an open-loop producer stops
/// sleeping and waiting for acknowledgements, and yields instead. Short:
/// a thread that yields for long has used its share of the CPU and is not
/// run again before the consumers beside it, busy with a backlog, have
/// run their slices (milliseconds), while one that sleeps is run as soon
/// as it wakes. With the timer slack at 1 ns (see [`Pass::produce_open`])
/// a sleeper wakes a few microseconds late, not the default 50.
const OPEN_LOOP_SPIN_NS: u64 = 20_000;

impl Pass<'_> {
    /// Writes the stamps of `seqs` (with their intended times) into
    /// `bodies`; returns the bodies to send.
    pub(super) fn stamp<'b>(
        &self,
        bodies: &'b mut [BodyBuf],
        seqs: &[(u64, u64)],
    ) -> Vec<&'b [u8]> {
        let sent_ns = self.clock.now_ns();
        for (body, &(seq, intended_ns)) in bodies.iter_mut().zip(seqs) {
            body.stamp(
                self.cfg.size,
                Stamp {
                    run_tag: self.run_tag,
                    seq,
                    intended_ns,
                    sent_ns,
                },
            );
        }
        self.first_send_ns.fetch_min(sent_ns, Ordering::Relaxed);
        bodies[..seqs.len()].iter().map(BodyBuf::as_slice).collect()
    }

    /// Counts `seqs` as sent once the broker acknowledged them.
    pub(super) fn acknowledged(&self, seqs: &[(u64, u64)]) {
        for &(seq, _) in seqs {
            self.tracker.mark_sent(seq);
        }
        self.sent.fetch_add(seqs.len() as u64, Ordering::AcqRel);
    }

    /// Sends `seqs` (with their intended times) as one batch.
    fn send(
        &self,
        adapter: &mut dyn Adapter,
        bodies: &mut [BodyBuf],
        seqs: &[(u64, u64)],
    ) -> Result<(), AdapterError> {
        let refs = self.stamp(bodies, seqs);
        adapter.send_batch(&refs)?;
        self.acknowledged(seqs);
        Ok(())
    }

    /// Starts sending `seqs` as one batch: the pipelined [`Pass::send`].
    fn start_send(
        &self,
        adapter: &mut dyn Adapter,
        bodies: &mut [BodyBuf],
        seqs: &[(u64, u64)],
    ) -> Result<(), AdapterError> {
        let refs = self.stamp(bodies, seqs);
        adapter.start_send(&refs)
    }

    /// Finishes the oldest send in flight, a batch of `seqs`.
    fn finish_send(
        &self,
        adapter: &mut dyn Adapter,
        seqs: &[(u64, u64)],
    ) -> Result<(), AdapterError> {
        match adapter.finish(&mut |_, _| {}, &mut Vec::new())? {
            Finished::Sent => {
                self.acknowledged(seqs);
                Ok(())
            }
            other => Err(AdapterError::Unsupported(format!(
                "a send finished as {other:?}"
            ))),
        }
    }

    /// Whether closed-loop producers must wait for consumers to catch up.
    fn backlog_full(&self) -> bool {
        let in_flight = self
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(self.settled.load(Ordering::Relaxed));
        in_flight >= self.cfg.in_flight_max.unwrap_or(limits::IN_FLIGHT_MAX)
    }

    /// A closed-loop producer: claim a batch of sequence numbers, send it,
    /// repeat; wait while too many messages are in flight.
    pub(super) fn produce_closed(&self, adapter: &mut dyn Adapter) -> Result<(), AdapterError> {
        if self.cfg.window > 1 {
            return self.produce_closed_pipelined(adapter);
        }
        let batch = self.cfg.batch as u64;
        let mut bodies = vec![BodyBuf::default(); self.cfg.batch];
        let mut seqs = Vec::with_capacity(self.cfg.batch);
        let end = self.send_end_ns();
        loop {
            if self.abort.load(Ordering::Relaxed) || end.is_some_and(|e| self.clock.now_ns() >= e) {
                return Ok(());
            }
            if self.backlog_full() {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            let first = self.next_seq.fetch_add(batch, Ordering::Relaxed);
            if first >= self.capacity {
                return Ok(());
            }
            let n = batch.min(self.capacity - first);
            let now = self.clock.now_ns();
            seqs.clear();
            seqs.extend((first..first + n).map(|seq| (seq, now)));
            self.send(adapter, &mut bodies, &seqs)?;
        }
    }

    /// The closed loop with up to `--window` sends in flight.
    fn produce_closed_pipelined(&self, adapter: &mut dyn Adapter) -> Result<(), AdapterError> {
        let batch = self.cfg.batch as u64;
        let mut bodies = vec![BodyBuf::default(); self.cfg.batch];
        let mut in_flight: VecDeque<Vec<(u64, u64)>> = VecDeque::new();
        let mut spare: Vec<Vec<(u64, u64)>> = Vec::new();
        let end = self.send_end_ns();
        let mut exhausted = false;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            exhausted |= end.is_some_and(|e| self.clock.now_ns() >= e);
            if !exhausted && in_flight.len() < self.cfg.window && !self.backlog_full() {
                let first = self.next_seq.fetch_add(batch, Ordering::Relaxed);
                if first >= self.capacity {
                    exhausted = true;
                    continue;
                }
                let n = batch.min(self.capacity - first);
                let now = self.clock.now_ns();
                let mut seqs = spare.pop().unwrap_or_default();
                seqs.clear();
                seqs.extend((first..first + n).map(|seq| (seq, now)));
                self.start_send(adapter, &mut bodies, &seqs)?;
                in_flight.push_back(seqs);
            } else if let Some(seqs) = in_flight.pop_front() {
                self.finish_send(adapter, &seqs)?;
                spare.push(seqs);
            } else if exhausted {
                return Ok(());
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// An open-loop producer on the fixed schedule: sends what is due, in
    /// batches of up to `--batch`, never waiting for the broker to catch up.
    pub(super) fn produce_open(
        &self,
        producer: usize,
        adapter: &mut dyn Adapter,
    ) -> Result<(), AdapterError> {
        let schedule = self.schedule.expect("the latency workload has a schedule");
        // Without the default 50 µs of slack, the kernel wakes this thread
        // when its next message is due. Best effort: a kernel that refuses
        // leaves the default, and the sends are only later.
        let _ = rustix::thread::set_current_timer_slack(core::num::NonZeroU64::new(1));
        let mut walk = OpenLoop::new(schedule, producer as u64, self.cfg.producers as u64);
        let mut bodies = vec![BodyBuf::default(); self.cfg.batch];
        let mut due = Vec::with_capacity(self.cfg.batch);
        let window = self.cfg.window;
        let mut in_flight: VecDeque<Vec<(u64, u64)>> = VecDeque::new();
        let mut spare: Vec<Vec<(u64, u64)>> = Vec::new();
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let Some(next) = walk.next_intended_ns() else {
                // Everything is sent: collect the acknowledgements.
                while let Some(seqs) = in_flight.pop_front() {
                    self.finish_send(adapter, &seqs)?;
                }
                return Ok(());
            };
            let now = self.clock.now_ns();
            if next <= now {
                if window == 1 {
                    walk.take_due(now, self.cfg.batch, &mut due);
                    self.note_issued(&due);
                    self.send(adapter, &mut bodies, &due)?;
                } else if in_flight.len() >= window {
                    // The window is full: wait for the oldest send.
                    let seqs = in_flight.pop_front().expect("a full window");
                    self.finish_send(adapter, &seqs)?;
                    spare.push(seqs);
                } else {
                    let mut seqs = spare.pop().unwrap_or_default();
                    walk.take_due(now, self.cfg.batch, &mut seqs);
                    self.note_issued(&seqs);
                    self.start_send(adapter, &mut bodies, &seqs)?;
                    in_flight.push_back(seqs);
                }
                continue;
            }
            let ahead = next - now;
            if ahead > OPEN_LOOP_SPIN_NS {
                if let Some(seqs) = in_flight.pop_front() {
                    // Nothing is due soon: collect an acknowledgement.
                    self.finish_send(adapter, &seqs)?;
                    spare.push(seqs);
                } else {
                    // A sleeper still wakes a few microseconds late, so the
                    // last stretch yields instead.
                    std::thread::sleep(Duration::from_nanos(ahead - OPEN_LOOP_SPIN_NS));
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Notes the sequence numbers an open-loop send hands out.
    fn note_issued(&self, due: &[(u64, u64)]) {
        let top = due.iter().map(|&(seq, _)| seq).max().unwrap_or(0);
        self.next_seq.fetch_max(top + 1, Ordering::Relaxed);
    }
}
