//! A shard's syncer (`--durability always`): a thread of the shard's own
//! that runs the log's `fdatasync`s, so that the shard goes on serving
//! while the disk works. The shard asks for a sync of what it has written
//! (by how many record bytes that is), and is told, and woken, when it is
//! done; it writes its next commit only after that (a log's frames are
//! synced in order, which its scan at start relies on), gathering what
//! arrives meanwhile into it: the longer a sync, the larger the next group.
//!
//! One request at a time: the shard asks again only once it has the
//! answer. The thread ends when the shard drops its syncer (after the sync
//! under way, if any).

use std::io;

use crate::sync::{mpsc, thread};

/// A sync done: how many record bytes it covers and how long it took, or
/// why it failed.
pub type Synced = Result<(u64, u64), String>;

/// What the shard asks its syncer.
#[derive(Debug)]
enum Ask {
    /// A sync covering this many record bytes.
    Sync(u64),
    /// The end.
    Stop,
}

/// The shard's end of its syncer thread.
#[derive(Debug)]
pub struct Syncer {
    requests: Option<mpsc::Sender<Ask>>,
    done: mpsc::Receiver<Synced>,
    thread: Option<thread::JoinHandle<()>>,
    /// The bytes of the sync asked for and not yet answered.
    pending: Option<u64>,
}

impl Syncer {
    /// Starts the thread: `sync` makes what was written durable, `wake`
    /// wakes the shard once a sync is done, `now_ns` times it.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(
        name: String,
        mut sync: impl FnMut() -> io::Result<()> + Send + 'static,
        wake: impl Fn() + Send + 'static,
        now_ns: fn() -> u64,
    ) -> io::Result<Syncer> {
        let (requests, asked) = mpsc::channel::<Ask>();
        let (answers, done) = mpsc::channel::<Synced>();
        let run = move || {
            while let Ok(Ask::Sync(bytes)) = asked.recv() {
                let started = now_ns();
                let result = sync()
                    .map(|()| (bytes, now_ns().saturating_sub(started)))
                    .map_err(|e| e.to_string());
                if answers.send(result).is_err() {
                    return;
                }
                wake();
            }
        };
        let thread = thread::Builder::new().name(name).spawn(run)?;
        Ok(Syncer {
            requests: Some(requests),
            done,
            thread: Some(thread),
            pending: None,
        })
    }

    /// Whether a sync is under way.
    pub fn busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Asks for a sync covering `bytes` record bytes (everything written
    /// so far); the shard asks only when none is under way.
    pub fn request(&mut self, bytes: u64) {
        debug_assert!(self.pending.is_none(), "one sync at a time");
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|r| r.send(Ask::Sync(bytes)).is_ok());
        self.pending = Some(bytes);
        if !sent {
            // The thread is gone (it cannot be, but for a panic): said as
            // a failed sync at the next poll.
            self.requests = None;
        }
    }

    /// The answer to the sync under way, once there is one.
    pub fn poll(&mut self) -> Option<Synced> {
        self.pending?;
        match self.done.try_recv() {
            Ok(r) => {
                self.pending = None;
                Some(r)
            }
            Err(std::sync::mpsc::TryRecvError::Empty) if self.requests.is_some() => None,
            Err(_) => {
                self.pending = None;
                Some(Err("the log's syncer thread is gone".to_owned()))
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // Said outright: a channel whose sender is gone does not wake its
        // receiver under loom.
        if let Some(r) = self.requests.take() {
            let _ = r.send(Ask::Stop);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

    fn now() -> u64 {
        1
    }

    #[test]
    fn a_sync_is_answered_and_wakes_the_shard() {
        let woken = std::sync::Arc::new(AtomicU32::new(0));
        let w = woken.clone();
        let mut s = Syncer::start(
            "t".into(),
            || Ok(()),
            move || {
                w.fetch_add(1, SeqCst);
            },
            now,
        )
        .unwrap();
        assert!(s.poll().is_none(), "nothing asked");
        s.request(10);
        assert!(s.busy());
        let got = loop {
            if let Some(r) = s.poll() {
                break r;
            }
            std::thread::yield_now();
        };
        assert_eq!(got, Ok((10, 0)));
        assert!(!s.busy());
        assert_eq!(woken.load(SeqCst), 1);
    }

    #[test]
    fn a_failed_sync_is_told() {
        let mut s = Syncer::start(
            "t".into(),
            || Err(io::Error::other("no space left on device")),
            || {},
            now,
        )
        .unwrap();
        s.request(5);
        let got = loop {
            if let Some(r) = s.poll() {
                break r;
            }
            std::thread::yield_now();
        };
        assert!(got.unwrap_err().contains("no space"));
    }
}

#[cfg(all(test, sluice_loom))]
mod loom_models {
    use super::*;
    use crate::sync::{Arc, AtomicU32, Ordering::SeqCst};

    fn now() -> u64 {
        0
    }

    /// The shard asks, the syncer syncs, answers and wakes; the shard sees
    /// the answer (and only after the sync ran), in every interleaving, and
    /// the drop joins the thread.
    #[test]
    fn loom_syncer_answers_after_the_sync() {
        loom::model(|| {
            let synced = Arc::new(AtomicU32::new(0));
            let woken = Arc::new(AtomicU32::new(0));
            let (s2, w2) = (synced.clone(), woken.clone());
            let mut s = Syncer::start(
                "loom".into(),
                move || {
                    s2.fetch_add(1, SeqCst);
                    Ok(())
                },
                move || {
                    w2.fetch_add(1, SeqCst);
                },
                now,
            )
            .unwrap();
            s.request(7);
            loop {
                match s.poll() {
                    Some(r) => {
                        assert_eq!(r, Ok((7, 0)));
                        assert_eq!(synced.load(SeqCst), 1);
                        break;
                    }
                    None => loom::thread::yield_now(),
                }
            }
            drop(s);
            assert_eq!(woken.load(SeqCst), 1);
        });
    }
}
