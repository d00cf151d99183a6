//! Why a configuration was refused.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::Position;
use crate::server::tls::TlsError;

/// Why a configuration was refused. Each message names the setting (flag
/// and config key are the same name) or the file and says what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--durability` and `--log-dir` disagree, or `--snapshot` is given
    /// with a log.
    #[error("{0}")]
    Durability(&'static str),
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    ReadConfigFile {
        /// The file named by `--config`.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The config file is larger than [`CONFIG_FILE_BYTES_MAX`](crate::server::limits::CONFIG_FILE_BYTES_MAX).
    #[error("config file {} is larger than {max}: is it the right file?", path.display())]
    ConfigFileTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, formatted.
        max: String,
    },
    /// The config file is not valid TOML.
    #[error("config file {}, {at}: not valid TOML: {message}", path.display())]
    ConfigFileSyntax {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped.
        at: Position,
        /// The TOML parser's message.
        message: String,
    },
    /// The config file holds a key that is no setting.
    #[error(
        "config file {}, {at}: unknown key `{key}`; the keys are the flag names with underscores: {known}",
        path.display()
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key as written.
        key: String,
        /// Where the key is.
        at: Position,
        /// The keys that exist.
        known: String,
    },
    /// A config file value does not parse, or is of the wrong type.
    #[error("config file {}, {at}: bad value for `{key}`: {message}", path.display())]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Where the value is.
        at: Position,
        /// What is wrong and what would be accepted.
        message: String,
    },
    /// The auth token file could not be read.
    #[error("cannot read auth token file {} (--token-file): {source}", path.display())]
    ReadTokenFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The auth token file holds no token.
    #[error(
        "auth token file {} is empty: put the token in it, or drop --token-file",
        path.display()
    )]
    TokenFileEmpty {
        /// The file.
        path: PathBuf,
    },
    /// The auth token is too long.
    #[error("the token in {} is longer than {max} bytes", path.display())]
    TokenTooLong {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        max: usize,
    },
    /// A setting is outside its bounds.
    #[error("--{flag} is {value}: it must be at least {min} and at most {max}")]
    OutOfRange {
        /// The flag, without dashes.
        flag: &'static str,
        /// The value given, formatted.
        value: String,
        /// The smallest value allowed, formatted.
        min: String,
        /// The largest value allowed, formatted.
        max: String,
    },
    /// The HELLO frame limit is above the frame limit.
    #[error(
        "--hello-frame-bytes-max ({hello}) is larger than --frame-bytes-max ({frame}): \
         a HELLO is a frame too, lower the first or raise the second"
    )]
    HelloFrameAboveFrame {
        /// `--hello-frame-bytes-max`, formatted.
        hello: String,
        /// `--frame-bytes-max`, formatted.
        frame: String,
    },
    /// A connection could not queue one reply of the largest size.
    #[error(
        "--unsent-bytes-max ({unsent}) is smaller than --frame-bytes-max ({frame}): \
         a connection must be able to hold one reply of the largest size"
    )]
    UnsentBelowFrame {
        /// `--unsent-bytes-max`, formatted.
        unsent: String,
        /// `--frame-bytes-max`, formatted.
        frame: String,
    },
    /// The total unsent budget is below one connection's.
    #[error(
        "--unsent-bytes-total-max ({total}) is smaller than --unsent-bytes-max ({unsent}), \
         the budget of a single connection"
    )]
    UnsentTotalBelowPerConnection {
        /// `--unsent-bytes-total-max`, formatted.
        total: String,
        /// `--unsent-bytes-max`, formatted.
        unsent: String,
    },
    /// `--tls-key` without `--tls-cert`, or the other way round, or
    /// `--tls-client-ca` without them.
    #[error(
        "{given} needs {missing}: TLS takes a certificate chain and its key \
         (--tls-cert and --tls-key), and --tls-client-ca only adds client certificates to them"
    )]
    TlsIncomplete {
        /// The setting given.
        given: &'static str,
        /// The one missing.
        missing: &'static str,
    },
    /// A TLS file that cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A non-loopback listen address without a token or `--insecure`.
    #[error(
        "refusing to listen on {listen} without an auth token: anyone who can reach it could \
         read and delete every message. Give --token-file FILE, listen on a loopback \
         address (e.g. 127.0.0.1:{port}), or pass --insecure if the network is trusted"
    )]
    InsecureListen {
        /// The listen address.
        listen: SocketAddr,
        /// Its port, for the suggestion.
        port: u16,
    },
    /// The SQS credentials file could not be read or is malformed.
    #[error("cannot use the SQS credentials file {} (--sqs-credentials): {reason}", path.display())]
    SqsCredentials {
        /// The file.
        path: PathBuf,
        /// What is wrong (never a secret).
        reason: String,
    },
    /// A non-loopback SQS door without `--insecure`.
    #[error(
        "refusing to open the SQS door on {listen}: it accepts any signature, so anyone who \
         can reach it could read and delete every message. Listen on a loopback address \
         (e.g. 127.0.0.1:{port}), give --sqs-credentials so that signatures are checked, \
         or pass --insecure if the network is trusted"
    )]
    InsecureSqsListen {
        /// The SQS address.
        listen: SocketAddr,
        /// Its port, for the suggestion.
        port: u16,
    },
    /// Two listeners on one address.
    #[error("{first} and {second} are both given {addr}: each needs an address of its own")]
    SharedAddress {
        /// The first flag.
        first: &'static str,
        /// The second flag.
        second: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// The metrics endpoint and the client listener would share an address.
    #[error("--metrics-addr {addr} is the --listen address: give them different ports, or `off`")]
    MetricsOnListenAddr {
        /// The shared address.
        addr: SocketAddr,
    },
    /// `--cpus` lists fewer CPUs than there are shards.
    #[error(
        "--cpus {cpus} lists {count} CPUs for {shards} shards: list one CPU per shard, \
         lower --shards, or use --cpus auto or none"
    )]
    FewerCpusThanShards {
        /// The list as given.
        cpus: String,
        /// How many CPUs it names.
        count: usize,
        /// `--shards`.
        shards: u16,
    },
    /// The log filter does not parse.
    #[error(
        "--log `{directive}` is not a log filter: {message} \
         (examples: info, warn,sluice_broker=debug, off)"
    )]
    BadLogFilter {
        /// The filter as given.
        directive: String,
        /// The parser's message.
        message: String,
    },
}
