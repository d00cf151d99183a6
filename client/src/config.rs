//! [`ClientConfig`]: where to connect, time-outs, the auth token and the
//! reconnect policy, shared by [`Client`](crate::Client) and
//! [`AsyncClient`](crate::AsyncClient).

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::tls::TlsConfig;

pub use crate::limits::{
    ADDR_DEFAULT, CONNECT_TIMEOUT_DEFAULT, READ_SPIN_MAX, RECONNECT_DELAY_INITIAL_DEFAULT,
    RECONNECT_DELAY_MAX_DEFAULT, REQUEST_TIMEOUT_DEFAULT, SESSION_TIMEOUT_MAX, SESSION_TIMEOUT_MIN,
};

/// How a client connects. Build it with the chained setters:
///
/// ```
/// use std::time::Duration;
/// use sluice_client::ClientConfig;
///
/// let config = ClientConfig::new("127.0.0.1:7171")
///     .request_timeout(Duration::from_secs(10))
///     .auth_token("s3cret")
///     .reconnect_delays(Duration::from_millis(20), Duration::from_secs(2));
/// assert_eq!(config.addr(), "127.0.0.1:7171");
/// assert_eq!(config.get_request_timeout(), Duration::from_secs(10));
/// // The token never shows in debug output.
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
pub struct ClientConfig {
    addr: String,
    connect_timeout: Duration,
    request_timeout: Duration,
    auth_token: Option<Bytes>,
    reconnect: ReconnectPolicy,
    read_spin: Duration,
    tls: Option<TlsConfig>,
    session_timeout: Option<Duration>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig::new(ADDR_DEFAULT)
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("addr", &self.addr)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("reconnect", &self.reconnect)
            .field("read_spin", &self.read_spin)
            .field("tls", &self.tls)
            .field("session_timeout", &self.session_timeout)
            .finish()
    }
}

impl ClientConfig {
    /// Defaults, connecting to `addr` (`HOST:PORT`, resolved at each
    /// connect).
    #[must_use]
    pub fn new(addr: impl Into<String>) -> ClientConfig {
        ClientConfig {
            addr: addr.into(),
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            auth_token: None,
            reconnect: ReconnectPolicy::default(),
            read_spin: Duration::ZERO,
            tls: None,
            session_timeout: None,
        }
    }

    /// Sets the address (`HOST:PORT`).
    #[must_use]
    pub fn address(mut self, addr: impl Into<String>) -> ClientConfig {
        self.addr = addr.into();
        self
    }

    /// Time to connect and complete the HELLO (default 5 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.connect_timeout = timeout;
        self
    }

    /// Time to wait for a reply (default 30 s). A receive waits this plus
    /// its long-poll wait.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.request_timeout = timeout;
        self
    }

    /// The auth token every HELLO carries (at most 1 KiB).
    #[must_use]
    pub fn auth_token(mut self, token: impl Into<Bytes>) -> ClientConfig {
        self.auth_token = Some(token.into());
        self
    }

    /// The reconnect delays: the first after a failed connect, doubling
    /// after each further failure up to `max`.
    #[must_use]
    pub fn reconnect_delays(mut self, initial: Duration, max: Duration) -> ClientConfig {
        self.reconnect = ReconnectPolicy::new(initial, max);
        self
    }

    /// How long the blocking [`Client`](crate::Client) polls the socket
    /// without sleeping before it blocks in a read (default zero: it blocks
    /// at once; capped at [`READ_SPIN_MAX`]). Between polls it yields the
    /// core to any thread that is ready to run.
    ///
    /// A blocked read costs a sleep and a wake-up, which on a virtual
    /// machine whose core goes idle can add tens of microseconds to a round
    /// trip. Spinning keeps the core busy instead: the thread that reads for
    /// the client burns CPU for up to this long every time it would sleep,
    /// so with requests back to back a client with a spin set keeps its
    /// core fully busy, and an idle one spends up to this much CPU per
    /// request. Worth it only when the client has a core to spare and
    /// replies come within the spin (a few tens of microseconds on
    /// loopback); long polls gain nothing from it.
    #[must_use]
    pub fn read_spin(mut self, spin: Duration) -> ClientConfig {
        self.read_spin = spin.min(READ_SPIN_MAX);
        self
    }

    /// Connects with TLS, trusting and presenting what `tls` says (see
    /// [`TlsConfig`]); without it the connection is plain text.
    #[must_use]
    pub fn tls(mut self, tls: TlsConfig) -> ClientConfig {
        self.tls = Some(tls);
        self
    }

    /// The TLS settings, if any.
    #[must_use]
    pub fn get_tls(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// Asks the server to close the connection once it has heard nothing
    /// from this client for `timeout` (clamped to
    /// [`SESSION_TIMEOUT_MIN`] ..= [`SESSION_TIMEOUT_MAX`]; default: none).
    /// The client then sends a PING whenever it has sent nothing for a
    /// quarter of it, from a small timer of its own (a thread for the
    /// blocking client, a task for the async one, per connection) that
    /// only looks at a timestamp while requests flow. So a client that
    /// idles, or only long-polls, keeps its connection; a process that
    /// hangs whole, or a host that vanishes without closing its TCP
    /// connections, loses it after `timeout`, and with it the leases bound
    /// to it ([`ReceiveOptions::bind_leases`](crate::ReceiveOptions::bind_leases)).
    #[must_use]
    pub fn session_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.session_timeout = Some(timeout.clamp(SESSION_TIMEOUT_MIN, SESSION_TIMEOUT_MAX));
        self
    }

    /// The session timeout asked for, if any.
    #[must_use]
    pub fn get_session_timeout(&self) -> Option<Duration> {
        self.session_timeout
    }

    /// How often the heartbeat looks for silence, when there is a session
    /// timeout.
    pub(crate) fn heartbeat_interval(&self) -> Option<Duration> {
        self.session_timeout
            .map(|t| t / crate::limits::HEARTBEAT_FRACTION)
    }

    /// The session timeout in the HELLO's unit (0: none).
    pub(crate) fn session_timeout_ms(&self) -> u32 {
        self.session_timeout.map_or(0, duration_ms)
    }

    /// The address.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The connect time-out.
    #[must_use]
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The request time-out.
    #[must_use]
    pub fn get_request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The reconnect policy.
    #[must_use]
    pub fn reconnect_policy(&self) -> ReconnectPolicy {
        self.reconnect
    }

    /// The read spin (zero when off).
    #[must_use]
    pub fn get_read_spin(&self) -> Duration {
        self.read_spin
    }

    pub(crate) fn token(&self) -> Bytes {
        self.auth_token.clone().unwrap_or_default()
    }
}

/// Exponential reconnect backoff: after `n` consecutive failed connects the
/// next attempt waits `min(initial * 2^(n-1), max)`; a successful connect
/// starts over.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::ReconnectPolicy;
///
/// let policy = ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(policy.delay(0), Duration::ZERO);
/// assert_eq!(policy.delay(1), Duration::from_millis(100));
/// assert_eq!(policy.delay(3), Duration::from_millis(400));
/// assert_eq!(policy.delay(40), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconnectPolicy {
    initial: Duration,
    max: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy::new(RECONNECT_DELAY_INITIAL_DEFAULT, RECONNECT_DELAY_MAX_DEFAULT)
    }
}

impl ReconnectPolicy {
    /// A policy starting at `initial`, capped at `max` (at least `initial`).
    #[must_use]
    pub fn new(initial: Duration, max: Duration) -> ReconnectPolicy {
        ReconnectPolicy {
            initial,
            max: max.max(initial),
        }
    }

    /// The wait before the next attempt after `failures` consecutive failed
    /// connects (0 after none).
    #[must_use]
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
        self.initial
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }
}

/// Tracks failed connects for a [`ReconnectPolicy`], against a caller-given
/// clock, so the schedule is testable.
#[derive(Debug)]
pub(crate) struct ReconnectState<I> {
    policy: ReconnectPolicy,
    failures: u32,
    last_failure: Option<I>,
}

impl<I> ReconnectState<I>
where
    I: Copy + std::ops::Add<Duration, Output = I>,
{
    pub(crate) fn new(policy: ReconnectPolicy) -> Self {
        ReconnectState {
            policy,
            failures: 0,
            last_failure: None,
        }
    }

    /// When the next attempt may start: `None` for at once.
    pub(crate) fn next_attempt_at(&self) -> Option<I> {
        self.last_failure
            .map(|at| at + self.policy.delay(self.failures))
    }

    pub(crate) fn failed(&mut self, now: I) {
        self.failures = self.failures.saturating_add(1);
        self.last_failure = Some(now);
    }

    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
        self.last_failure = None;
    }
}

/// Milliseconds of a duration for the wire, rounded up (so a tiny non-zero
/// timeout never becomes 0, which would release a message) and saturating
/// below the "queue default" marker.
pub(crate) fn duration_ms(d: Duration) -> u32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).unwrap_or(u32::MAX - 1).min(u32::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps() {
        let p = ReconnectPolicy::new(Duration::from_millis(50), Duration::from_secs(5));
        let delays: Vec<u128> = (0..10).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(delays, [0, 50, 100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(p.delay(u32::MAX), Duration::from_secs(5));
        // A cap below the start is raised to it.
        let p = ReconnectPolicy::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(p.delay(5), Duration::from_secs(2));
    }

    #[test]
    fn reconnect_state_follows_the_schedule_on_a_virtual_clock() {
        // A virtual clock: milliseconds as a Duration since an origin.
        let p = ReconnectPolicy::new(Duration::from_millis(10), Duration::from_millis(35));
        let mut s = ReconnectState::<Duration>::new(p);
        assert_eq!(s.next_attempt_at(), None, "the first attempt is immediate");
        let ms = Duration::from_millis;
        s.failed(ms(0));
        assert_eq!(s.next_attempt_at(), Some(ms(10)));
        s.failed(ms(10));
        assert_eq!(s.next_attempt_at(), Some(ms(30)));
        s.failed(ms(30));
        assert_eq!(s.next_attempt_at(), Some(ms(65)), "capped at 35");
        s.failed(ms(65));
        assert_eq!(s.next_attempt_at(), Some(ms(100)));
        s.succeeded();
        assert_eq!(s.next_attempt_at(), None);
        s.failed(ms(200));
        assert_eq!(s.next_attempt_at(), Some(ms(210)), "starts over");
    }

    #[test]
    fn durations_round_up_to_milliseconds() {
        assert_eq!(duration_ms(Duration::ZERO), 0);
        assert_eq!(duration_ms(Duration::from_nanos(1)), 1);
        assert_eq!(duration_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(duration_ms(Duration::from_micros(1500)), 2);
        assert_eq!(duration_ms(Duration::from_secs(u64::MAX)), u32::MAX - 1);
    }

    #[test]
    fn config_setters() {
        let c = ClientConfig::default()
            .address("[::1]:9")
            .connect_timeout(Duration::from_millis(300));
        assert_eq!(c.addr(), "[::1]:9");
        assert_eq!(c.get_connect_timeout(), Duration::from_millis(300));
        assert_eq!(c.get_request_timeout(), REQUEST_TIMEOUT_DEFAULT);
        assert!(c.token().is_empty());
        assert_eq!(c.get_read_spin(), Duration::ZERO, "off by default");
        let spinning = c.clone().read_spin(Duration::from_micros(50));
        assert_eq!(spinning.get_read_spin(), Duration::from_micros(50));
        let capped = c.clone().read_spin(Duration::from_secs(1));
        assert_eq!(capped.get_read_spin(), READ_SPIN_MAX);
        assert_eq!(&c.auth_token("t").token()[..], b"t");
    }
}
