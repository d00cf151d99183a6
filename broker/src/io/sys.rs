//! Thin, safe wrappers over the socket, eventfd and epoll system calls both
//! backends use. Every `unsafe` block here is a plain syscall on descriptors
//! and buffers the wrapper's signature makes valid.

use std::io::{self, IoSlice};
use std::mem::{self, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Turns a `-1` return into the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        // Non-negative ssize_t always fits usize.
        Ok(ret as usize)
    }
}

/// Wraps a descriptor a syscall just returned.
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = check(fd)?;
    // SAFETY: `fd` was just returned by a successful syscall that creates a
    // descriptor, so it is open and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A close-on-exec eventfd starting at 0. It is blocking: io_uring fails a
/// read of a non-blocking file with `EAGAIN` instead of waiting for it, and
/// the waker's coalescing keeps its counter far from the value at which a
/// write would block.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })
}

/// Adds 1 to an eventfd's counter.
pub(crate) fn eventfd_write(fd: RawFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    let n = unsafe { libc::write(fd, (&raw const one).cast(), mem::size_of::<u64>()) };
    check_size(n).map(drop)
}

/// Reads (and so resets) an eventfd's counter; blocks while it is 0.
pub(crate) fn eventfd_read(fd: RawFd) -> io::Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live local.
    let n = unsafe { libc::read(fd, (&raw mut value).cast(), mem::size_of::<u64>()) };
    check_size(n).map(|_| value)
}

fn set_int_opt(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(ret).map(drop)
}

/// Sets `TCP_NODELAY`.
pub(crate) fn set_nodelay(fd: RawFd) -> io::Result<()> {
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// A socket address in the kernel's layout.
struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    fn empty() -> Self {
        Self {
            // SAFETY: sockaddr_storage is plain integers; all zeroes is valid.
            storage: unsafe { mem::zeroed() },
            len: mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }

    fn from_socket_addr(addr: &SocketAddr) -> Self {
        let mut raw = Self::empty();
        match addr {
            SocketAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(v4.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for any
                // sockaddr_* type, and `sin` is fully initialised.
                unsafe {
                    (&raw mut raw.storage)
                        .cast::<libc::sockaddr_in>()
                        .write(sin)
                };
                raw.len = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe {
                    (&raw mut raw.storage)
                        .cast::<libc::sockaddr_in6>()
                        .write(sin6)
                };
                raw.len = mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            }
        }
        raw
    }

    fn to_socket_addr(&self) -> io::Result<SocketAddr> {
        let family = libc::c_int::from(self.storage.ss_family);
        if family == libc::AF_INET && self.len as usize >= mem::size_of::<libc::sockaddr_in>() {
            // SAFETY: the kernel wrote an AF_INET address of at least
            // sockaddr_in's size; storage is aligned for it.
            let sin = unsafe { &*(&raw const self.storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        } else if family == libc::AF_INET6
            && self.len as usize >= mem::size_of::<libc::sockaddr_in6>()
        {
            // SAFETY: as above, for AF_INET6.
            let sin6 = unsafe { &*(&raw const self.storage).cast::<libc::sockaddr_in6>() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected socket address family {family}"),
            ))
        }
    }
}

/// A bound, listening TCP socket.
pub(crate) fn listen(
    addr: &SocketAddr,
    reuse_port: bool,
    backlog: u32,
    nonblocking: bool,
) -> io::Result<OwnedFd> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket takes no pointers.
    let fd = owned(unsafe { libc::socket(domain, ty, 0) })?;
    set_int_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if reuse_port {
        set_int_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    let raw = RawAddr::from_socket_addr(addr);
    // SAFETY: `raw.storage` holds a valid address of `raw.len` bytes.
    let ret = unsafe { libc::bind(fd.as_raw_fd(), (&raw const raw.storage).cast(), raw.len) };
    check(ret)?;
    // The config check bounds the backlog to i32::MAX.
    let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
    // SAFETY: listen takes no pointers.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(fd)
}

/// `getsockname`.
pub(crate) fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    let mut raw = RawAddr::empty();
    // SAFETY: the kernel writes at most `raw.len` bytes into `raw.storage`
    // and updates `raw.len`.
    let ret = unsafe { libc::getsockname(fd, (&raw mut raw.storage).cast(), &mut raw.len) };
    check(ret)?;
    raw.to_socket_addr()
}

/// `getpeername`.
pub(crate) fn peer_addr(fd: RawFd) -> io::Result<SocketAddr> {
    let mut raw = RawAddr::empty();
    // SAFETY: as in `local_addr`.
    let ret = unsafe { libc::getpeername(fd, (&raw mut raw.storage).cast(), &mut raw.len) };
    check(ret)?;
    raw.to_socket_addr()
}

/// Accepts one connection as a non-blocking, close-on-exec socket.
pub(crate) fn accept(fd: RawFd) -> io::Result<(OwnedFd, SocketAddr)> {
    let mut raw = RawAddr::empty();
    // SAFETY: as in `local_addr`; the returned descriptor is wrapped at once.
    let conn = owned(unsafe {
        libc::accept4(
            fd,
            (&raw mut raw.storage).cast(),
            &mut raw.len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    let peer = raw.to_socket_addr()?;
    Ok((conn, peer))
}

/// A non-blocking `recv`.
pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    check_size(n)
}

/// A non-blocking gathering send that never raises `SIGPIPE`.
pub(crate) fn sendmsg(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; all zeroes is an empty message.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    // IoSlice is guaranteed ABI compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len();
    // SAFETY: `msg` points at `bufs.len()` live iovecs the kernel only reads.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    check_size(n)
}

/// A connected pair of Unix stream sockets (for the io_uring self-test).
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: the kernel writes two descriptors into `fds`.
    let ret = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    check(ret)?;
    // SAFETY: both were just created by a successful socketpair.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes bytes with plain `write` (the self-test's sender).
pub(crate) fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads at most `buf.len()` bytes from `buf`.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    check_size(n)
}

/// Pins the calling thread to one CPU.
pub(crate) fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= mem::size_of::<libc::cpu_set_t>() * 8 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU index too large",
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `cpu` is within the set's bits, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: passes a live cpu_set_t and its exact size; pid 0 is the
    // calling thread.
    let ret = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    check(ret).map(drop)
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), in order.
pub(crate) fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: passes a live cpu_set_t and its exact size for the kernel to
    // fill; pid 0 is the calling thread.
    let ret = unsafe { libc::sched_getaffinity(0, mem::size_of::<libc::cpu_set_t>(), &mut set) };
    check(ret)?;
    let bits = mem::size_of::<libc::cpu_set_t>() * 8;
    // SAFETY: every index is below the set's bit count.
    Ok((0..bits)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Takes an exclusive `flock(2)` on `fd` without waiting: `Ok(false)` when
/// another open file holds it.
pub(crate) fn try_lock_exclusive(fd: RawFd) -> io::Result<bool> {
    // SAFETY: flock takes no pointers.
    match check(unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The process's open-files limit (`RLIMIT_NOFILE`): (soft, hard).
pub(crate) fn open_files_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the kernel writes one rlimit into the live local.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Sets the soft open-files limit, keeping the hard one.
pub(crate) fn set_open_files_soft_limit(soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: the kernel only reads the live local.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }).map(drop)
}

/// Sets or clears `O_NONBLOCK` on a descriptor.
pub(crate) fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL takes no pointers.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: F_SETFL takes an int, no pointers.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) }).map(drop)
}

/// The memory page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

/// Clock ticks per second (`USER_HZ`), the unit of `/proc` CPU times.
pub(crate) fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes no pointers.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// `epoll_create1(EPOLL_CLOEXEC)`.
pub(crate) fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: takes no pointers.
    owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })
}

/// `epoll_ctl` with `events` and `token`.
pub(crate) fn epoll_ctl(
    epfd: RawFd,
    op: libc::c_int,
    fd: RawFd,
    events: u32,
    token: u64,
) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: `event` is a live local the kernel only reads.
    check(unsafe { libc::epoll_ctl(epfd, op, fd, &mut event) }).map(drop)
}

/// `epoll_wait` into `events`' spare capacity; returns how many arrived.
pub(crate) fn epoll_wait(
    epfd: RawFd,
    events: &mut Vec<libc::epoll_event>,
    timeout: Option<Duration>,
) -> io::Result<usize> {
    events.clear();
    let spare: &mut [MaybeUninit<libc::epoll_event>] = events.spare_capacity_mut();
    let max = libc::c_int::try_from(spare.len()).unwrap_or(libc::c_int::MAX);
    let timeout_ms = match timeout {
        None => -1,
        // Round up so a wait never ends before its deadline.
        Some(t) => {
            let ms = t.as_nanos().div_ceil(1_000_000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    };
    // SAFETY: the kernel writes at most `max` events into the spare capacity.
    let n = unsafe { libc::epoll_wait(epfd, spare.as_mut_ptr().cast(), max, timeout_ms) };
    let n = usize::try_from(check(n)?).unwrap_or(0);
    // SAFETY: the kernel initialised the first `n` (<= capacity) entries.
    unsafe { events.set_len(n) };
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for addr in [
            "127.0.0.1:7171".parse::<SocketAddr>().unwrap(),
            "[::1]:80".parse().unwrap(),
            "10.1.2.3:65535".parse().unwrap(),
        ] {
            assert_eq!(
                RawAddr::from_socket_addr(&addr).to_socket_addr().unwrap(),
                addr
            );
        }
    }

    #[test]
    fn eventfd_counts() {
        let fd = eventfd().unwrap();
        eventfd_write(fd.as_raw_fd()).unwrap();
        eventfd_write(fd.as_raw_fd()).unwrap();
        assert_eq!(eventfd_read(fd.as_raw_fd()).unwrap(), 2);
    }
}
