//! beanstalkd 1.12, over its text protocol written by hand.
//!
//! | operation | beanstalkd |
//! |---|---|
//! | set up | a fresh tube name; producers `use` it, consumers `watch` it and `ignore default` |
//! | send batch | one `put 0 0 <ttr> <bytes>` per message, pipelined in one write |
//! | receive batch | `reserve-with-timeout 0` pipelined up to the batch size (the window grows while every reserve finds a job and shrinks to what was found), then a blocking `reserve-with-timeout <s>` when none did |
//! | delete batch | one `delete <id>` per job, pipelined |
//! | window above 1 | the commands of several batches pipelined on the connection, their replies read in order; a blocking reserve only when nothing else is in flight |
//! | tear down | delete whatever is left in the tube (ready, delayed, buried) |
//!
//! What it cannot do like the others:
//! - There is no batch receive: a batch is a pipeline of single reserves.
//! - The visibility timeout is the job's TTR, set at `put`, in **whole
//!   seconds**: it is rounded up (a 1.5 s timeout runs as 2 s; 0 runs as
//!   1 s, beanstalkd's minimum). The printed configuration shows the TTR.
//! - A job can only be deleted by the connection that reserved it: a delete
//!   after the TTR ran out and another consumer reserved the job answers
//!   `NOT_FOUND` (reported as rejected).
//! - beanstalkd keeps the last second of a reservation as a safety margin:
//!   a reserve by a connection whose job is in its last second, when no job
//!   is ready, answers `DEADLINE_SOON` at once instead of waiting. With a
//!   TTR of 1 s every reservation is inside that margin, so a consumer that
//!   holds jobs it left undeleted polls every millisecond instead of
//!   blocking, which adds up to 1 ms of redelivery lateness.
//! - beanstalkd 1.12 returns an expired reservation to the ready queue only
//!   when the connection holding it sends something: consumers here never
//!   sit idle while holding jobs, so redeliveries are not held back.
//! - Blocking reserves wait in whole seconds, so a consumer may take up to a
//!   second to notice the end of a pass.

use std::collections::VecDeque;
use std::time::Duration;

use super::wire::{LineConn, last_len, parse_u64, push_u64, text};
use super::{
    Adapter, AdapterError, Finished, QueueSpec, Receipt, Role, Setting, Target, TargetUrl,
};

const PEER: &str = "beanstalkd";
/// How long a consumer that got `DEADLINE_SOON` waits before reserving again.
const DEADLINE_SOON_PAUSE: Duration = Duration::from_millis(1);
/// How many leftover jobs teardown deletes at most.
const TEARDOWN_JOBS_MAX: u64 = 10_000_000;
/// beanstalkd's default `-z`: the largest job it accepts.
const JOB_BYTES_DEFAULT_MAX: usize = 65_535;

/// The TTR in whole seconds for a visibility timeout: rounded up, at least 1.
pub fn ttr_seconds(visibility: Duration) -> u64 {
    let secs = visibility.as_secs() + u64::from(visibility.subsec_nanos() > 0);
    secs.max(1)
}

/// A beanstalkd server under test.
#[derive(Debug)]
pub struct BeanstalkdTarget {
    url: TargetUrl,
    tube: Option<Tube>,
    server: Vec<Setting>,
    read_spin: Duration,
}

#[derive(Debug, Clone)]
struct Tube {
    name: String,
    ttr: u64,
}

struct Conn {
    conn: LineConn,
}

impl Conn {
    fn connect(url: &TargetUrl) -> Result<Conn, AdapterError> {
        Ok(Conn {
            conn: LineConn::new(url.tcp(PEER)?, PEER),
        })
    }

    /// Sends one command line and reads the one-line reply.
    fn call(&mut self, line: &str) -> Result<String, AdapterError> {
        self.conn.wbuf.extend_from_slice(line.as_bytes());
        self.conn.wbuf.extend_from_slice(b"\r\n");
        self.conn.flush()?;
        Ok(text(self.conn.line()?))
    }

    /// Sends a command whose reply may carry a body (`OK <bytes>`,
    /// `FOUND <id> <bytes>`): returns the line and the body as text.
    fn call_with_body(&mut self, line: &str) -> Result<(String, String), AdapterError> {
        self.conn.wbuf.extend_from_slice(line.as_bytes());
        self.conn.wbuf.extend_from_slice(b"\r\n");
        self.conn.flush()?;
        let (line, body) = self.conn.frame(|l| {
            Ok(if l.starts_with(b"OK ") || l.starts_with(b"FOUND ") {
                last_len(l)
            } else {
                None
            })
        })?;
        Ok((text(line), String::from_utf8_lossy(body).into_owned()))
    }

    fn expect(&mut self, line: &str, reply_prefix: &str) -> Result<(), AdapterError> {
        let reply = self.call(line)?;
        if reply.starts_with(reply_prefix) {
            Ok(())
        } else {
            Err(AdapterError::Server {
                peer: PEER,
                message: format!("{line:?} answered {reply:?}"),
            })
        }
    }
}

impl BeanstalkdTarget {
    /// A target for `url` (beanstalkd has no authentication).
    pub fn new(url: TargetUrl) -> Self {
        Self {
            url,
            tube: None,
            server: Vec::new(),
            read_spin: Duration::ZERO,
        }
    }

    /// The read spin of the producers' and consumers' connections
    /// (`--read-spin`; zero, the default, blocks at once).
    pub fn read_spin(mut self, spin: Duration) -> Self {
        self.read_spin = spin;
        self
    }
}

impl Target for BeanstalkdTarget {
    fn kind(&self) -> &'static str {
        PEER
    }

    fn setup(&mut self, spec: &QueueSpec) -> Result<(), AdapterError> {
        super::refuse_groups(spec, "beanstalkd")?;
        let mut c = Conn::connect(&self.url)?;
        let (line, stats) = c.call_with_body("stats")?;
        if !line.starts_with("OK") {
            return Err(AdapterError::Server {
                peer: PEER,
                message: format!("stats answered {line:?}"),
            });
        }
        let stat = |name: &str| {
            stats.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(": "))
                    .map(|v| v.trim().trim_matches('"').to_owned())
            })
        };
        let mut server = Vec::new();
        if let Some(v) = stat("version") {
            server.push(Setting::new("server", format!("beanstalkd {v}")));
        }
        let job_max = stat("max-job-size")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(JOB_BYTES_DEFAULT_MAX);
        if spec.body_bytes > job_max {
            return Err(AdapterError::Unsupported(format!(
                "beanstalkd: bodies of {} bytes are over the server's max-job-size {job_max}",
                spec.body_bytes
            )));
        }
        // The binlog index stays 0 when beanstalkd runs without -b.
        if let Some(index) = stat("binlog-current-index") {
            let binlog = if index == "0" { "off (no -b)" } else { "on" };
            server.push(Setting::new("persistence", format!("binlog {binlog}")));
        }
        self.server = server;
        self.tube = Some(Tube {
            name: spec.name.clone(),
            ttr: ttr_seconds(spec.visibility_timeout),
        });
        Ok(())
    }

    fn connect(&self, role: Role) -> Result<Box<dyn Adapter>, AdapterError> {
        let tube = super::set_up(self.tube.as_ref(), PEER)?.clone();
        let mut c = Conn::connect(&self.url)?;
        c.conn = c.conn.with_read_spin(self.read_spin);
        match role {
            // A backlog is refused at setup; it would send as a producer.
            Role::Producer(_) | Role::Backlog => {
                c.expect(&format!("use {}", tube.name), "USING")?;
            }
            Role::Consumer(_) => {
                c.expect(&format!("watch {}", tube.name), "WATCHING")?;
                c.expect("ignore default", "WATCHING")?;
            }
        }
        let mut put_prefix = b"put 0 0 ".to_vec();
        push_u64(&mut put_prefix, tube.ttr);
        put_prefix.push(b' ');
        Ok(Box::new(BeanstalkdAdapter {
            conn: c.conn,
            put_prefix,
            window: 1,
            in_flight: VecDeque::new(),
        }))
    }

    fn settings(&self) -> Vec<Setting> {
        let mut s = self.server.clone();
        s.push(super::read_spin_setting(self.read_spin));
        if let Some(t) = &self.tube {
            s.push(Setting::new("tube", t.name.clone()));
            s.push(Setting::new(
                "visibility",
                format!(
                    "TTR {} s (visibility timeout rounded up to whole seconds)",
                    t.ttr
                ),
            ));
            s.push(Setting::new(
                "send",
                "put per message, one batch pipelined per write",
            ));
            s.push(Setting::new(
                "receive",
                "reserve-with-timeout 0 pipelined up to <batch>, blocking reserve-with-timeout 1 when empty",
            ));
            s.push(Setting::new("delete", "delete per job, pipelined"));
        }
        s
    }

    fn teardown(&mut self) -> Result<(), AdapterError> {
        let Some(tube) = self.tube.take() else {
            return Ok(());
        };
        let mut c = Conn::connect(&self.url)?;
        c.expect(&format!("use {}", tube.name), "USING")?;
        for peek in ["peek-ready", "peek-delayed", "peek-buried"] {
            for _ in 0..TEARDOWN_JOBS_MAX {
                let (line, _) = c.call_with_body(peek)?;
                let Some(id) = line
                    .strip_prefix("FOUND ")
                    .and_then(|r| r.split(' ').next())
                else {
                    break;
                };
                c.expect(&format!("delete {id}"), "DELETED")?;
            }
        }
        Ok(())
    }
}

/// Commands written and not yet answered, one entry per batch.
enum InFlight {
    /// `put`s.
    Put(usize),
    /// `reserve-with-timeout 0`s, the batch's most, and how long it may
    /// wait.
    Reserve(usize, usize, Duration),
    /// `delete`s.
    Delete(usize),
}

/// One beanstalkd connection of a pass.
struct BeanstalkdAdapter {
    conn: LineConn,
    /// `put 0 0 <ttr> `, ready to take the body length.
    put_prefix: Vec<u8>,
    /// How many reserves the next receive pipelines.
    window: usize,
    in_flight: VecDeque<InFlight>,
}

/// What one reserve answered.
enum Reserved {
    Job,
    TimedOut,
    DeadlineSoon,
}

impl BeanstalkdAdapter {
    fn read_reserve(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<Reserved, AdapterError> {
        let (line, body) = self.conn.frame(|l| {
            Ok(if l.starts_with(b"RESERVED ") {
                last_len(l)
            } else {
                None
            })
        })?;
        if let Some(rest) = line.strip_prefix(b"RESERVED ") {
            let id = rest
                .split(|&b| b == b' ')
                .next()
                .and_then(parse_u64)
                .ok_or_else(|| AdapterError::Protocol {
                    peer: PEER,
                    detail: format!("bad reply {:?}", text(line)),
                })?;
            on_message(body, Receipt::Ids(id, 0));
            Ok(Reserved::Job)
        } else if line == b"TIMED_OUT" {
            Ok(Reserved::TimedOut)
        } else if line == b"DEADLINE_SOON" {
            Ok(Reserved::DeadlineSoon)
        } else {
            Err(AdapterError::Server {
                peer: PEER,
                message: format!("reserve answered {:?}", text(line)),
            })
        }
    }
}

impl BeanstalkdAdapter {
    fn write_puts(&mut self, bodies: &[&[u8]]) {
        for body in bodies {
            let w = &mut self.conn.wbuf;
            w.extend_from_slice(&self.put_prefix);
            push_u64(w, body.len() as u64);
            w.extend_from_slice(b"\r\n");
            w.extend_from_slice(body);
            w.extend_from_slice(b"\r\n");
        }
    }

    fn read_puts(&mut self, n: usize) -> Result<(), AdapterError> {
        for _ in 0..n {
            let line = self.conn.line()?;
            if !line.starts_with(b"INSERTED ") {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: format!("put answered {:?}", text(line)),
                });
            }
        }
        Ok(())
    }

    /// Writes the pipelined non-blocking reserves of one receive; returns
    /// how many.
    fn write_reserves(&mut self, max: usize) -> usize {
        let window = self.window.clamp(1, max.max(1));
        for _ in 0..window {
            self.conn
                .wbuf
                .extend_from_slice(b"reserve-with-timeout 0\r\n");
        }
        window
    }

    /// Reads the replies of `window` non-blocking reserves and sizes the next
    /// window: (jobs, whether one answered `DEADLINE_SOON`).
    fn read_reserves(
        &mut self,
        window: usize,
        max: usize,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<(usize, bool), AdapterError> {
        let (mut got, mut deadline_soon) = (0, false);
        for _ in 0..window {
            match self.read_reserve(on_message)? {
                Reserved::Job => got += 1,
                Reserved::TimedOut => {}
                Reserved::DeadlineSoon => deadline_soon = true,
            }
        }
        self.window = if got == window {
            (window * 2).min(max.max(1))
        } else {
            got + 1
        };
        Ok((got, deadline_soon))
    }

    /// Nothing ready: blocks for one job, in beanstalkd's whole seconds.
    fn reserve_blocking(
        &mut self,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        self.conn.wbuf.extend_from_slice(b"reserve-with-timeout ");
        push_u64(&mut self.conn.wbuf, secs.max(1));
        self.conn.wbuf.extend_from_slice(b"\r\n");
        self.conn.flush()?;
        match self.read_reserve(on_message)? {
            Reserved::Job => Ok(1),
            Reserved::TimedOut | Reserved::DeadlineSoon => Ok(0),
        }
    }

    fn write_deletes(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        for r in receipts {
            let Receipt::Ids(id, _) = r else {
                return Err(AdapterError::Unsupported(
                    "beanstalkd: a receipt from another adapter".into(),
                ));
            };
            self.conn.wbuf.extend_from_slice(b"delete ");
            push_u64(&mut self.conn.wbuf, *id);
            self.conn.wbuf.extend_from_slice(b"\r\n");
        }
        Ok(())
    }

    fn read_deletes(&mut self, n: usize, rejected: &mut Vec<usize>) -> Result<(), AdapterError> {
        for i in 0..n {
            let line = self.conn.line()?;
            if line == b"NOT_FOUND" {
                rejected.push(i);
            } else if line != b"DELETED" {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: format!("delete answered {:?}", text(line)),
                });
            }
        }
        Ok(())
    }
}

impl Adapter for BeanstalkdAdapter {
    fn send_batch(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        self.write_puts(bodies);
        self.conn.flush()?;
        self.read_puts(bodies.len())
    }

    fn receive_batch(
        &mut self,
        max: usize,
        wait: Duration,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let window = self.write_reserves(max);
        self.conn.flush()?;
        let (got, deadline_soon) = self.read_reserves(window, max, on_message)?;
        if got > 0 {
            return Ok(got);
        }
        if deadline_soon {
            std::thread::sleep(DEADLINE_SOON_PAUSE);
            return Ok(0);
        }
        self.reserve_blocking(wait, on_message)
    }

    fn delete_batch(
        &mut self,
        receipts: &[Receipt],
        rejected: &mut Vec<usize>,
    ) -> Result<(), AdapterError> {
        self.write_deletes(receipts)?;
        self.conn.flush()?;
        self.read_deletes(receipts.len(), rejected)
    }

    fn start_send(&mut self, bodies: &[&[u8]]) -> Result<(), AdapterError> {
        self.write_puts(bodies);
        self.conn.flush()?;
        self.in_flight.push_back(InFlight::Put(bodies.len()));
        Ok(())
    }

    fn start_receive(&mut self, max: usize, wait: Duration) -> Result<(), AdapterError> {
        let window = self.write_reserves(max);
        self.conn.flush()?;
        self.in_flight
            .push_back(InFlight::Reserve(window, max, wait));
        Ok(())
    }

    fn start_delete(&mut self, receipts: &[Receipt]) -> Result<(), AdapterError> {
        self.write_deletes(receipts)?;
        self.conn.flush()?;
        self.in_flight.push_back(InFlight::Delete(receipts.len()));
        Ok(())
    }

    fn finish(
        &mut self,
        on_message: &mut dyn FnMut(&[u8], Receipt),
        rejected: &mut Vec<usize>,
    ) -> Result<Finished, AdapterError> {
        match self.in_flight.pop_front() {
            None => Err(super::nothing_started(PEER)),
            Some(InFlight::Put(n)) => {
                self.read_puts(n)?;
                Ok(Finished::Sent)
            }
            Some(InFlight::Reserve(window, max, wait)) => {
                let (got, deadline_soon) = self.read_reserves(window, max, on_message)?;
                if got > 0 || wait.is_zero() || !self.in_flight.is_empty() {
                    return Ok(Finished::Received(got));
                }
                if deadline_soon {
                    std::thread::sleep(DEADLINE_SOON_PAUSE);
                    return Ok(Finished::Received(0));
                }
                // Alone on the connection: a blocking reserve holds up nothing.
                Ok(Finished::Received(self.reserve_blocking(wait, on_message)?))
            }
            Some(InFlight::Delete(n)) => {
                self.read_deletes(n, rejected)?;
                Ok(Finished::Deleted)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttr_rounds_up_to_whole_seconds() {
        assert_eq!(ttr_seconds(Duration::ZERO), 1);
        assert_eq!(ttr_seconds(Duration::from_millis(1)), 1);
        assert_eq!(ttr_seconds(Duration::from_secs(1)), 1);
        assert_eq!(ttr_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(ttr_seconds(Duration::from_secs(30)), 30);
    }
}
