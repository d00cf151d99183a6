//! Setting the ring up: the best flags the kernel takes, the features and
//! opcodes the driver needs, the provided buffer ring, and a self-test of
//! multishot receive before the listener opens.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::{IoUring, Probe, cqueue, opcode, types};

use super::{Accept, BGID, Kind, UListener, UringDriver, decode, encode, push};
use crate::io::buf_ring::BufRing;
use crate::io::connections::Connections;
use crate::io::limits::SELF_TEST_WAIT;
use crate::io::reserve::Reserve;
use crate::io::{DriverConfig, OpenError, UringUnavailable, Waker, sys};
use crate::sync::Arc;

/// Applies one set of setup flags to a ring builder.
type SetupFlags = fn(&mut io_uring::Builder);

/// Builds the ring with the best flags the kernel accepts.
fn build_ring(entries: u32) -> io::Result<(IoUring, &'static str)> {
    let cq_entries = entries.saturating_mul(4);
    let attempts: [(&'static str, SetupFlags); 4] = [
        ("single_issuer+defer_taskrun+coop_taskrun+submit_all", |b| {
            b.setup_single_issuer()
                .setup_defer_taskrun()
                .setup_coop_taskrun()
                .setup_submit_all();
        }),
        ("single_issuer+coop_taskrun+submit_all", |b| {
            b.setup_single_issuer()
                .setup_coop_taskrun()
                .setup_submit_all();
        }),
        ("coop_taskrun+submit_all", |b| {
            b.setup_coop_taskrun().setup_submit_all();
        }),
        ("plain", |_| {}),
    ];
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for (name, flags) in attempts {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(cq_entries).setup_clamp();
        flags(&mut builder);
        match builder.build(entries) {
            Ok(ring) => return Ok((ring, name)),
            // EINVAL: a flag this kernel does not know; try fewer.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

impl UringDriver {
    pub(crate) fn open(config: &DriverConfig) -> Result<Self, OpenError> {
        let (ring, setup) = build_ring(config.ring_entries).map_err(UringUnavailable::Setup)?;
        let params = ring.params();
        if !params.is_feature_ext_arg() {
            return Err(UringUnavailable::Unsupported("IORING_FEAT_EXT_ARG (Linux 5.11)").into());
        }
        if !params.is_feature_nodrop() {
            return Err(UringUnavailable::Unsupported("IORING_FEAT_NODROP (Linux 5.5)").into());
        }
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|error| UringUnavailable::Register {
                what: "probe",
                error,
            })?;
        for (code, name) in [
            (opcode::AcceptMulti::CODE, "IORING_OP_ACCEPT"),
            (opcode::RecvMulti::CODE, "IORING_OP_RECV"),
            (opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
            (opcode::Read::CODE, "IORING_OP_READ"),
        ] {
            if !probe.is_supported(code) {
                return Err(UringUnavailable::Unsupported(name).into());
            }
        }
        let bufs = BufRing::new(config.recv_buffer_count, config.recv_buffer_bytes)
            .map_err(OpenError::Buffers)?;
        // SAFETY: the ring memory stays allocated and in place until the
        // driver's drop has reaped every operation (ground rules); `bufs`
        // moves into the driver below, which moves only the handle.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(bufs.ring_addr(), bufs.entries(), BGID, 0)
        }
        .map_err(|error| UringUnavailable::Register {
            what: "provided buffer ring",
            error,
        })?;
        let waker = Arc::new(Waker::new().map_err(OpenError::Waker)?);
        let cq_entries = ring.params().cq_entries() as usize;
        let mut driver = Self {
            ring,
            setup,
            ops: Connections::new(config.connections_max, config.refused_connections_max),
            conns: ManuallyDrop::new(Vec::new()),
            bufs: ManuallyDrop::new(bufs),
            wake_buf: ManuallyDrop::new(Box::new(0)),
            waker,
            wake_armed: false,
            listeners: Vec::new(),
            accepting: false,
            inflight: 0,
            cqes: Vec::with_capacity(cq_entries),
            reserve: Reserve::new(),
        };
        driver.self_test()?;
        for spec in config.listeners() {
            let listen_error = |error| OpenError::Listen {
                addr: spec.addr,
                error,
            };
            let fd = sys::listen(&spec.addr, config.reuse_port, config.listen_backlog, false)
                .map_err(listen_error)?;
            let addr = sys::local_addr(fd.as_raw_fd()).map_err(listen_error)?;
            driver.listeners.push(UListener {
                fd: Some(fd),
                stopping: false,
                addr,
                accept: Accept::Idle,
                shed_reply: spec.shed_reply,
            });
        }
        driver.accepting = true;
        Ok(driver)
    }

    /// Checks that multishot receive into provided buffers works (Linux
    /// 6.0), on a socket pair: one byte must arrive with `F_MORE` set, and
    /// the end of stream must end the receive.
    fn self_test(&mut self) -> Result<(), UringUnavailable> {
        let fail = |what: String| UringUnavailable::SelfTest(what);
        let (rx, tx) = sys::socketpair().map_err(|e| fail(format!("socketpair: {e}")))?;
        let entry = opcode::RecvMulti::new(types::Fd(rx.as_raw_fd()), BGID)
            .build()
            .user_data(encode(Kind::SelfTest, 0, 0));
        push(&mut self.ring, &entry).map_err(|e| fail(format!("submit: {e}")))?;
        self.inflight += 1;
        sys::write(tx.as_raw_fd(), b"x").map_err(|e| fail(format!("write: {e}")))?;
        let (res, flags) = self.self_test_wait()?;
        if res != 1 || cqueue::buffer_select(flags).is_none() {
            return Err(fail(format!(
                "receive into a provided buffer gave {}",
                describe_res(res)
            )));
        }
        if !cqueue::more(flags) {
            return Err(fail("multishot receive ended after one completion".into()));
        }
        drop(tx);
        let (res, flags) = self.self_test_wait()?;
        if res != 0 || cqueue::more(flags) {
            return Err(fail(format!(
                "end of stream gave {} (more: {})",
                describe_res(res),
                cqueue::more(flags)
            )));
        }
        Ok(())
    }

    /// Waits for the self-test receive's next completion.
    fn self_test_wait(&mut self) -> Result<(i32, u32), UringUnavailable> {
        let deadline = Instant::now() + SELF_TEST_WAIT;
        loop {
            let found = {
                let mut cq = self.ring.completion();
                cq.sync();
                cq.next().map(|c| (c.user_data(), c.result(), c.flags()))
            };
            if let Some((user_data, res, flags)) = found {
                if !cqueue::more(flags) {
                    self.inflight = self.inflight.saturating_sub(1);
                }
                if let Some(bid) = cqueue::buffer_select(flags) {
                    self.bufs.recycle(bid);
                }
                if decode(user_data).0 == Some(Kind::SelfTest) {
                    return Ok((res, flags));
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(UringUnavailable::SelfTest("no completion in time".into()));
            }
            let ts = types::Timespec::from(left);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
                Err(e) => return Err(UringUnavailable::SelfTest(format!("wait: {e}"))),
            }
        }
    }
}

fn describe_res(res: i32) -> String {
    if res < 0 {
        io::Error::from_raw_os_error(-res).to_string()
    } else {
        format!("{res} bytes")
    }
}
