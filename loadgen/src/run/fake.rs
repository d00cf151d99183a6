//! An in-memory broker for the runner's tests, with leases that expire on
//! the real clock, and two faults on request: it can lose one message (accept
//! its send and never store it) and duplicate one (store it twice).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::adapter::{Adapter, AdapterError, Finished, QueueSpec, Receipt, Role, Setting, Target};
use crate::body::read_stamp;

#[derive(Default)]
struct Queue {
    ready: VecDeque<(u64, Vec<u8>)>,
    leased: HashMap<u64, (Instant, Vec<u8>)>,
    next_id: u64,
    visibility: Duration,
}

/// Faults to inject, by sequence number.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    pub(crate) lose_seq: Option<u64>,
    pub(crate) duplicate_seq: Option<u64>,
}

pub(crate) struct FakeTarget {
    queue: Arc<Mutex<Queue>>,
    faults: Faults,
}

impl FakeTarget {
    pub(crate) fn new(faults: Faults) -> Self {
        Self {
            queue: Arc::default(),
            faults,
        }
    }
}

impl Target for FakeTarget {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError> {
        let mut q = self.queue.lock().unwrap();
        *q = Queue::default();
        q.visibility = spec.visibility_timeout;
        Ok(())
    }

    fn connect(&self, _role: Role) -> Result<Box<dyn Adapter>, AdapterError> {
        Ok(Box::new(FakeAdapter {
            queue: Arc::clone(&self.queue),
            faults: self.faults,
            done: VecDeque::new(),
        }))
    }

    fn settings(&self) -> Vec<Setting> {
        vec![Setting::new("broker", "in-memory fake")]
    }

    fn teardown(&mut self) -> Result<(), AdapterError> {
        *self.queue.lock().unwrap() = Queue::default();
        Ok(())
    }
}

/// An operation started: the fake does it at once and keeps the outcome
/// for `finish`.
enum Done {
    Sent,
    Received(Vec<(Vec<u8>, Receipt)>),
    Deleted(Vec<usize>),
}

struct FakeAdapter {
    queue: Arc<Mutex<Queue>>,
    faults: Faults,
    done: VecDeque<Done>,
}

impl Adapter for FakeAdapter {
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        let mut q = self.queue.lock().unwrap();
        for body in bodies {
            let seq = read_stamp(body).map(|s| s.seq).ok();
            if seq.is_some() && seq == self.faults.lose_seq {
                continue;
            }
            let copies = if seq.is_some() && seq == self.faults.duplicate_seq {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let id = q.next_id;
                q.next_id += 1;
                q.ready.push_back((id, body.to_vec()));
            }
        }
        Ok(())
    }

    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let mut taken = Vec::new();
        {
            let mut q = self.queue.lock().unwrap();
            let now = Instant::now();
            let expired: Vec<u64> = q
                .leased
                .iter()
                .filter(|(_, (deadline, _))| *deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                if let Some((_, body)) = q.leased.remove(&id) {
                    q.ready.push_front((id, body));
                }
            }
            let deadline = now + q.visibility;
            while taken.len() < max {
                let Some((id, body)) = q.ready.pop_front() else {
                    break;
                };
                q.leased.insert(id, (deadline, body.clone()));
                taken.push((id, body));
            }
        }
        if taken.is_empty() {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        }
        for (id, body) in &taken {
            on_message(body, Receipt::Ids(*id, 0));
        }
        Ok(taken.len())
    }

    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError> {
        let mut q = self.queue.lock().unwrap();
        for (i, r) in receipts.iter().enumerate() {
            let Receipt::Ids(id, _) = r else {
                return Err(AdapterError::Unsupported("fake: foreign receipt".into()));
            };
            if q.leased.remove(id).is_none() {
                rejected.push(i);
            }
        }
        Ok(())
    }

    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        self.send_batch(bodies)?;
        self.done.push_back(Done::Sent);
        Ok(())
    }

    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError> {
        let mut got = Vec::new();
        self.receive_batch(max, wait, &mut |body, r| got.push((body.to_vec(), r)))?;
        self.done.push_back(Done::Received(got));
        Ok(())
    }

    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        let mut rejected = Vec::new();
        self.delete_batch(receipts, &mut rejected)?;
        self.done.push_back(Done::Deleted(rejected));
        Ok(())
    }

    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError> {
        match self.done.pop_front() {
            None => Err(crate::adapter::nothing_started("fake")),
            Some(Done::Sent) => Ok(Finished::Sent),
            Some(Done::Received(got)) => {
                for (body, r) in &got {
                    on_message(body, r.clone());
                }
                Ok(Finished::Received(got.len()))
            }
            Some(Done::Deleted(refused)) => {
                rejected.extend(refused);
                Ok(Finished::Deleted)
            }
        }
    }
}
