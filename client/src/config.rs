//! [`ClientConfig`]: where to connect, time-outs, the auth token and the
//! reconnect policy, shared by [`Client`](crate::Client) and
//! [`AsyncClient`](crate::AsyncClient).

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use sluice_protocol::units::{parse_address, parse_duration};

use crate::error::{Error, Result};
#[cfg(feature = "tls")]
use crate::tls::TlsConfig;
use crate::tls::TlsSession;

pub use crate::limits::{
    ADDR_DEFAULT, CONNECT_TIMEOUT_DEFAULT, READ_SPIN_MAX, RECONNECT_DELAY_INITIAL_DEFAULT,
    RECONNECT_DELAY_MAX_DEFAULT, REQUEST_TIMEOUT_DEFAULT, SESSION_TIMEOUT_MAX, SESSION_TIMEOUT_MIN,
};

/// How a client connects. Build it with the `with_*` setters; the getters
/// have the plain names:
///
/// ```
/// use std::time::Duration;
/// use sluice_client::ClientConfig;
///
/// let config = ClientConfig::new("127.0.0.1:7171")
///     .with_request_timeout(Duration::from_secs(10))
///     .with_auth_token("s3cret")
///     .with_reconnect_delays(Duration::from_millis(20), Duration::from_secs(2));
/// assert_eq!(config.addr(), "127.0.0.1:7171");
/// assert_eq!(config.request_timeout(), Duration::from_secs(10));
/// // The token never shows in debug output.
/// assert!(!format!("{config:?}").contains("s3cret"));
///
/// // A URL, or `HOST:PORT`, parses into a configuration with defaults.
/// let config: ClientConfig = "sluice://broker-1:7000".parse()?;
/// assert_eq!(config.addr(), "broker-1:7000");
/// # Ok::<(), sluice_client::Error>(())
/// ```
#[derive(Clone)]
pub struct ClientConfig {
    /// `HOST:PORT` (comma-separated for the sharded clients) when the
    /// address given parsed; the text as given otherwise, with `addr_error`.
    addr: String,
    /// Why the address given is not one, reported by the first connect.
    addr_error: Option<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
    auth_token: Option<Bytes>,
    reconnect: ReconnectPolicy,
    read_spin: Duration,
    #[cfg(feature = "tls")]
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
        let mut d = f.debug_struct("ClientConfig");
        d.field("addr", &self.addr)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("reconnect", &self.reconnect)
            .field("read_spin", &self.read_spin);
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls);
        d.field("session_timeout", &self.session_timeout).finish()
    }
}

/// The environment variables [`ClientConfig::from_env`] reads.
pub mod env {
    /// The broker's address: `HOST:PORT` or `sluice://HOST[:PORT]`; for the
    /// sharded clients, several separated by commas.
    pub const ADDR: &str = "SLUICE_ADDR";
    /// A file holding the auth token (one trailing newline is dropped).
    pub const TOKEN_FILE: &str = "SLUICE_TOKEN_FILE";
    /// Time to connect and complete the HELLO (`5s`, `500ms`, ...).
    pub const CONNECT_TIMEOUT: &str = "SLUICE_CONNECT_TIMEOUT";
    /// Time to wait for a reply (`30s`, ...).
    pub const REQUEST_TIMEOUT: &str = "SLUICE_REQUEST_TIMEOUT";
    /// The session timeout asked of the server (`10s`, ...).
    pub const SESSION_TIMEOUT: &str = "SLUICE_SESSION_TIMEOUT";
    /// A PEM file of CA certificates to trust: connect with TLS (feature
    /// `tls`).
    pub const TLS_CA: &str = "SLUICE_TLS_CA";
    /// The name the server's certificate must carry, when it is not the
    /// host of the address (feature `tls`).
    pub const TLS_SERVER_NAME: &str = "SLUICE_TLS_SERVER_NAME";
}

/// The address list `list` with each entry (`HOST:PORT` or
/// `sluice://HOST[:PORT]`) as `HOST:PORT`, comma-separated again.
fn parse_addr_list(list: &str) -> std::result::Result<String, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        out.push(parse_address(part).map_err(|e| e.to_string())?);
    }
    if out.is_empty() {
        return Err(format!("no address in {list:?}"));
    }
    Ok(out.join(","))
}

impl std::str::FromStr for ClientConfig {
    type Err = Error;

    /// As [`ClientConfig::from_url`].
    fn from_str(url: &str) -> Result<ClientConfig> {
        ClientConfig::from_url(url)
    }
}

/// An address as given, as `HOST:PORT` (comma-separated), or as given with
/// why it is not one.
fn normalize_addr(given: String) -> (String, Option<String>) {
    match parse_addr_list(&given) {
        Ok(addr) => (addr, None),
        Err(why) => (given, Some(why)),
    }
}

impl ClientConfig {
    /// Defaults, connecting to `addr`: `HOST:PORT` or `sluice://HOST[:PORT]`
    /// (several, comma-separated, for the sharded clients), resolved at each
    /// connect. An address that is neither is reported by the connect, as
    /// [`Error::InvalidArgument`]; [`ClientConfig::from_url`] reports it at
    /// once.
    ///
    /// ```
    /// use sluice_client::ClientConfig;
    /// assert_eq!(ClientConfig::new("sluice://broker-1").addr(), "broker-1:7171");
    /// assert_eq!(ClientConfig::new("127.0.0.1:7000").addr(), "127.0.0.1:7000");
    /// ```
    #[must_use]
    pub fn new(addr: impl Into<String>) -> ClientConfig {
        let (addr, addr_error) = normalize_addr(addr.into());
        ClientConfig {
            addr,
            addr_error,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            auth_token: None,
            reconnect: ReconnectPolicy::default(),
            read_spin: Duration::ZERO,
            #[cfg(feature = "tls")]
            tls: None,
            session_timeout: None,
        }
    }

    /// Defaults, connecting to the broker `url` names: `sluice://HOST:PORT`
    /// (the port defaults to 7171) or plain `HOST:PORT`; several separated
    /// by commas for the sharded clients. Also `url.parse()`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong with the address.
    pub fn from_url(url: &str) -> Result<ClientConfig> {
        let config = ClientConfig::new(url);
        config.check_addr()?;
        Ok(config)
    }

    /// A configuration from the environment: every variable of [`env`](mod@env)
    /// that is set overrides the default (an unset or empty one leaves
    /// it). Durations take the units of the command line (`250ms`, `10s`,
    /// `1m30s`).
    ///
    /// | Variable | Sets |
    /// |---|---|
    /// | `SLUICE_ADDR` | the address (`HOST:PORT`, `sluice://HOST[:PORT]`, comma-separated list) |
    /// | `SLUICE_TOKEN_FILE` | the auth token, read from the file |
    /// | `SLUICE_CONNECT_TIMEOUT` | [`with_connect_timeout`](ClientConfig::with_connect_timeout) |
    /// | `SLUICE_REQUEST_TIMEOUT` | [`with_request_timeout`](ClientConfig::with_request_timeout) |
    /// | `SLUICE_SESSION_TIMEOUT` | [`with_session_timeout`](ClientConfig::with_session_timeout) |
    /// | `SLUICE_TLS_CA` | TLS, trusting that CA file (feature `tls`) |
    /// | `SLUICE_TLS_SERVER_NAME` | the TLS server name (feature `tls`) |
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the variable whose value is wrong
    /// (or whose file cannot be read).
    pub fn from_env() -> Result<ClientConfig> {
        ClientConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// [`ClientConfig::from_env`] with the variables `var` gives.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<ClientConfig> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let bad =
            |name: &str, why: &dyn fmt::Display| Error::InvalidArgument(format!("{name}: {why}"));
        let duration = |name: &str| -> Result<Option<Duration>> {
            get(name)
                .map(|v| parse_duration(v.trim()).map_err(|e| bad(name, &e)))
                .transpose()
        };
        let mut config = ClientConfig::default();
        if let Some(addr) = get(env::ADDR) {
            config = config.with_addr(addr);
            if let Some(why) = &config.addr_error {
                return Err(bad(env::ADDR, why));
            }
        }
        if let Some(path) = get(env::TOKEN_FILE) {
            let mut token = std::fs::read(&path)
                .map_err(|e| bad(env::TOKEN_FILE, &format_args!("{path}: {e}")))?;
            if token.last() == Some(&b'\n') {
                token.pop();
                if token.last() == Some(&b'\r') {
                    token.pop();
                }
            }
            config = config.with_auth_token(token);
        }
        if let Some(d) = duration(env::CONNECT_TIMEOUT)? {
            config = config.with_connect_timeout(d);
        }
        if let Some(d) = duration(env::REQUEST_TIMEOUT)? {
            config = config.with_request_timeout(d);
        }
        if let Some(d) = duration(env::SESSION_TIMEOUT)? {
            config = config.with_session_timeout(d);
        }
        #[cfg(feature = "tls")]
        if let Some(ca) = get(env::TLS_CA) {
            let mut tls = TlsConfig::with_ca_file(&ca).map_err(|e| bad(env::TLS_CA, &e))?;
            if let Some(name) = get(env::TLS_SERVER_NAME) {
                tls = tls.server_name(name);
            }
            config = config.with_tls(tls);
        }
        #[cfg(not(feature = "tls"))]
        if get(env::TLS_CA).is_some() {
            return Err(bad(
                env::TLS_CA,
                &"this client was built without TLS (feature `tls`)",
            ));
        }
        Ok(config)
    }

    /// Sets the address, in either form [`ClientConfig::new`] takes.
    #[must_use]
    pub fn with_addr(mut self, addr: impl Into<String>) -> ClientConfig {
        (self.addr, self.addr_error) = normalize_addr(addr.into());
        self
    }

    /// Time to connect and complete the HELLO (default 5 s).
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.connect_timeout = timeout;
        self
    }

    /// Time to wait for a reply (default 30 s). A receive waits this plus
    /// its long-poll wait.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.request_timeout = timeout;
        self
    }

    /// The auth token every HELLO carries (at most 1 KiB).
    #[must_use]
    pub fn with_auth_token(mut self, token: impl Into<Bytes>) -> ClientConfig {
        self.auth_token = Some(token.into());
        self
    }

    /// The reconnect delays: the first after a failed connect, doubling
    /// after each further failure up to `max`.
    #[must_use]
    pub fn with_reconnect_delays(mut self, initial: Duration, max: Duration) -> ClientConfig {
        self.reconnect = ReconnectPolicy::new(initial, max);
        self
    }

    /// How long the blocking `Client` polls the socket
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
    pub fn with_read_spin(mut self, spin: Duration) -> ClientConfig {
        self.read_spin = spin.min(READ_SPIN_MAX);
        self
    }

    /// Connects with TLS, trusting and presenting what `tls` says (see
    /// [`TlsConfig`]); without it the connection is plain text.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn with_tls(mut self, tls: TlsConfig) -> ClientConfig {
        self.tls = Some(tls);
        self
    }

    /// The TLS settings, if any.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// A TLS session for a connection to `addr`, when TLS is configured.
    #[cfg(feature = "tls")]
    pub(crate) fn tls_session(&self, addr: &str) -> Result<Option<TlsSession>> {
        self.tls.as_ref().map(|t| t.start(addr)).transpose()
    }

    /// No TLS without the `tls` feature.
    #[cfg(not(feature = "tls"))]
    #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
    pub(crate) fn tls_session(&self, _addr: &str) -> Result<Option<TlsSession>> {
        Ok(None)
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
    /// to it (`ReceiveOptions::bind_leases`).
    #[must_use]
    pub fn with_session_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.session_timeout = Some(timeout.clamp(SESSION_TIMEOUT_MIN, SESSION_TIMEOUT_MAX));
        self
    }

    /// The session timeout asked for, if any.
    #[must_use]
    pub fn session_timeout(&self) -> Option<Duration> {
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

    /// The address: `HOST:PORT` (comma-separated for the sharded
    /// clients), or the text given when it is not an address.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `InvalidArgument` when the address given is not one.
    pub(crate) fn check_addr(&self) -> Result<()> {
        match &self.addr_error {
            Some(why) => Err(Error::InvalidArgument(format!("broker address: {why}"))),
            None => Ok(()),
        }
    }

    /// The one broker's address a single client connects to.
    ///
    /// # Errors
    /// `InvalidArgument` when the address given is not one, or names
    /// several brokers (which only the sharded clients take).
    pub(crate) fn connect_addr(&self) -> Result<&str> {
        self.check_addr()?;
        if self.addr.contains(',') {
            return Err(Error::InvalidArgument(format!(
                "broker address {} names several brokers: connect to them with the sharded \
                 client (sluice_client::sharded)",
                self.addr
            )));
        }
        Ok(&self.addr)
    }

    /// The connect time-out.
    #[must_use]
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The request time-out.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The reconnect policy.
    #[must_use]
    pub fn reconnect_policy(&self) -> ReconnectPolicy {
        self.reconnect
    }

    /// The read spin (zero when off).
    #[must_use]
    pub fn read_spin(&self) -> Duration {
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
    pub fn delay(&self, failures: usize) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doublings = u32::try_from(failures - 1).unwrap_or(u32::MAX);
        let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
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
    failures: usize,
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
        assert_eq!(p.delay(usize::MAX), Duration::from_secs(5));
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
            .with_addr("[::1]:9")
            .with_connect_timeout(Duration::from_millis(300));
        assert_eq!(c.addr(), "[::1]:9");
        assert_eq!(c.connect_timeout(), Duration::from_millis(300));
        assert_eq!(c.request_timeout(), REQUEST_TIMEOUT_DEFAULT);
        assert!(c.token().is_empty());
        assert_eq!(c.read_spin(), Duration::ZERO, "off by default");
        let spinning = c.clone().with_read_spin(Duration::from_micros(50));
        assert_eq!(spinning.read_spin(), Duration::from_micros(50));
        let capped = c.clone().with_read_spin(Duration::from_secs(1));
        assert_eq!(capped.read_spin(), READ_SPIN_MAX);
        assert_eq!(&c.with_auth_token("t").token()[..], b"t");
    }

    #[test]
    fn urls_and_address_lists_parse() {
        let c = ClientConfig::from_url("sluice://broker-1").unwrap();
        assert_eq!(c.addr(), "broker-1:7171");
        let c: ClientConfig = "10.0.0.1:7000, sluice://10.0.0.2:7001/".parse().unwrap();
        assert_eq!(c.addr(), "10.0.0.1:7000,10.0.0.2:7001");
        for bad in ["redis://h:1", "h", "", " , "] {
            let err = ClientConfig::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
        }
    }

    #[test]
    fn new_and_with_addr_take_either_form_and_keep_what_is_wrong() {
        assert_eq!(ClientConfig::new("sluice://h:7000").addr(), "h:7000");
        assert_eq!(ClientConfig::new("sluice://h/").addr(), "h:7171");
        assert_eq!(
            ClientConfig::new("[::1]:9").connect_addr().unwrap(),
            "[::1]:9"
        );
        let c = ClientConfig::default().with_addr("sluice://a:1, b:2");
        assert_eq!(c.addr(), "a:1,b:2");
        assert!(c.check_addr().is_ok());
        let err = c.connect_addr().unwrap_err();
        assert!(err.to_string().contains("several brokers"), "{err}");
        for bad in ["redis://h:1", "h", "sluice://h:x"] {
            let c = ClientConfig::new(bad);
            assert_eq!(c.addr(), bad, "kept as given");
            let err = c.connect_addr().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
            assert!(
                err.to_string()
                    .contains("expected HOST:PORT or sluice://HOST:PORT"),
                "{bad}: {err}"
            );
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_environment_overrides_the_defaults() {
        let c = ClientConfig::from_vars(vars(&[])).unwrap();
        assert_eq!(c.addr(), ADDR_DEFAULT);
        assert_eq!(c.request_timeout(), REQUEST_TIMEOUT_DEFAULT);
        assert_eq!(c.session_timeout(), None);

        let dir = std::env::temp_dir().join(format!("sluice-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let c = ClientConfig::from_vars(vars(&[
            (env::ADDR, "sluice://broker:7000"),
            (env::TOKEN_FILE, token.to_str().unwrap()),
            (env::CONNECT_TIMEOUT, "250ms"),
            (env::REQUEST_TIMEOUT, "1m30s"),
            (env::SESSION_TIMEOUT, "10s"),
            (env::TLS_SERVER_NAME, "ignored-without-a-ca"),
        ]))
        .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.addr(), "broker:7000");
        assert_eq!(&c.token()[..], b"s3cret", "the newline is dropped");
        assert_eq!(c.connect_timeout(), Duration::from_millis(250));
        assert_eq!(c.request_timeout(), Duration::from_secs(90));
        assert_eq!(c.session_timeout(), Some(Duration::from_secs(10)));
    }

    #[test]
    fn environment_errors_name_the_variable() {
        let cases = [
            (env::ADDR, "redis://h:1"),
            (env::TOKEN_FILE, "/nonexistent/sluice-token"),
            (env::CONNECT_TIMEOUT, "10"),
            (env::REQUEST_TIMEOUT, "soon"),
            (env::SESSION_TIMEOUT, "-1s"),
            (env::TLS_CA, "/nonexistent/ca.pem"),
        ];
        for (name, value) in cases {
            let err = ClientConfig::from_vars(vars(&[(name, value)])).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{name}: {err}");
            assert!(err.to_string().contains(name), "{name}: {err}");
        }
    }
}
