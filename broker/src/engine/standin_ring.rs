//! TEMPORARY stand-in for the `wheel` branch's rings and mesh (same API), so
//! the engine compiles before that branch lands. Deleted at the merge.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

type Ring<T> = Arc<Mutex<VecDeque<T>>>;

/// One shard's ends of the mesh.
#[derive(Debug)]
pub struct ShardLinks<T> {
    shard: usize,
    capacity: usize,
    out: Vec<Ring<T>>,
    inbound: Vec<Ring<T>>,
}

/// Builds the mesh: one ring per ordered pair of shards.
pub fn mesh<T>(shards: usize, capacity: usize) -> Vec<ShardLinks<T>> {
    let rings: Vec<Vec<Ring<T>>> = (0..shards)
        .map(|_| {
            (0..shards)
                .map(|_| Arc::new(Mutex::new(VecDeque::new())))
                .collect()
        })
        .collect();
    (0..shards)
        .map(|s| ShardLinks {
            shard: s,
            capacity,
            out: (0..shards).map(|d| rings[s][d].clone()).collect(),
            inbound: (0..shards).map(|f| rings[f][s].clone()).collect(),
        })
        .collect()
}

impl<T> ShardLinks<T> {
    /// This shard.
    pub fn shard(&self) -> usize {
        self.shard
    }
    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.out.len()
    }
    /// Sends to `dest`; `Err` when its ring is full.
    pub fn send(&mut self, dest: usize, msg: T) -> Result<(), T> {
        let mut q = self.out[dest].lock().unwrap();
        if q.len() >= self.capacity {
            return Err(msg);
        }
        q.push_back(msg);
        Ok(())
    }
    /// Pops everything inbound.
    pub fn drain(&mut self, mut f: impl FnMut(usize, T)) -> usize {
        let mut n = 0;
        for (from, ring) in self.inbound.iter().enumerate() {
            loop {
                let m = ring.lock().unwrap().pop_front();
                match m {
                    Some(m) => {
                        n += 1;
                        f(from, m)
                    }
                    None => break,
                }
            }
        }
        n
    }
}
