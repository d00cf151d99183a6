//! TLS for both clients: [`TlsConfig`] says whom to trust (and which
//! certificate to present when the server asks for one); a connection's
//! `TlsSession` is rustls's sans-IO client, which the blocking and the
//! async connection drive with their own sockets: ciphertext read goes in
//! through `TlsSession::open`, frames to write come out encrypted from
//! `TlsSession::seal`. The `ring` provider; TLS 1.3 and 1.2.
//!
//! The server's name is checked against its certificate: by default the
//! host part of the address connected to (a DNS name or an IP address),
//! or the one given with [`TlsConfig::server_name`].

use std::fmt;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BytesMut;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig as RustlsConfig, ClientConnection, RootCertStore};

use crate::error::{Error, Result};
use crate::poison;

/// Plaintext read out of rustls at a time.
const PLAINTEXT_CHUNK_BYTES: usize = 16 * 1024;

/// Whom a client trusts, and what it presents, over TLS. Give it to
/// [`ClientConfig::with_tls`](crate::ClientConfig::with_tls).
///
/// ```no_run
/// # #[cfg(feature = "blocking")] {
/// use sluice_client::{ClientConfig, tls::TlsConfig};
///
/// let tls = TlsConfig::with_ca_file("ca.pem")?.server_name("broker.internal");
/// let client = sluice_client::Client::connect(ClientConfig::new("10.0.0.5:7171").with_tls(tls))?;
/// client.ping()?;
/// # }
/// # Ok::<(), sluice_client::Error>(())
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    rustls: Arc<RustlsConfig>,
    server_name: Option<String>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .field(
                "client_certificate",
                &self.rustls.client_auth_cert_resolver.has_certs(),
            )
            .finish_non_exhaustive()
    }
}

fn file_error(what: &str, path: &Path, e: impl fmt::Display) -> Error {
    Error::InvalidArgument(format!("{what} {}: {e}", path.display()))
}

fn certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(file_error(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn roots(ca: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for c in certs("TLS CA file", ca)? {
        roots.add(c).map_err(|e| file_error("TLS CA file", ca, e))?;
    }
    Ok(roots)
}

fn builder() -> Result<rustls::ConfigBuilder<RustlsConfig, rustls::WantsVerifier>> {
    RustlsConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))
}

impl TlsConfig {
    /// Trusts the CA certificates in the PEM file `ca`.
    ///
    /// # Errors
    /// `InvalidArgument` when the file cannot be read or holds no usable
    /// certificate.
    pub fn with_ca_file(ca: impl AsRef<Path>) -> Result<TlsConfig> {
        let config = builder()?
            .with_root_certificates(roots(ca.as_ref())?)
            .with_no_client_auth();
        Ok(TlsConfig::from_rustls(Arc::new(config)))
    }

    /// Trusts the CA certificates in `ca` and presents the certificate
    /// chain in `cert` with its private key `key` (all PEM), for a server
    /// started with `--tls-client-ca`.
    ///
    /// # Errors
    /// `InvalidArgument` for a file that cannot be read or used, or a key
    /// that does not fit the certificate.
    pub fn with_client_cert(
        ca: impl AsRef<Path>,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsConfig> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let chain = certs("TLS client certificate", cert)?;
        let private =
            PrivateKeyDer::from_pem_file(key).map_err(|e| file_error("TLS client key", key, e))?;
        let config = builder()?
            .with_root_certificates(roots(ca.as_ref())?)
            .with_client_auth_cert(chain, private)
            .map_err(|e| file_error("TLS client key", key, e))?;
        Ok(TlsConfig::from_rustls(Arc::new(config)))
    }

    /// A rustls configuration built by the caller (its own roots,
    /// verifier, provider).
    #[must_use]
    pub fn from_rustls(config: Arc<RustlsConfig>) -> TlsConfig {
        TlsConfig {
            rustls: config,
            server_name: None,
        }
    }

    /// The name the server's certificate must carry, instead of the host
    /// part of the address.
    #[must_use]
    pub fn server_name(mut self, name: impl Into<String>) -> TlsConfig {
        self.server_name = Some(name.into());
        self
    }

    /// Starts a session with the server at `addr` (`HOST:PORT`).
    pub(crate) fn start(&self, addr: &str) -> Result<TlsSession> {
        let host = match &self.server_name {
            Some(name) => name.as_str(),
            None => host_of(addr),
        };
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            Error::InvalidArgument(format!(
                "TLS server name {host:?} (from {addr}): {e}; give one with TlsConfig::server_name"
            ))
        })?;
        let mut conn = ClientConnection::new(Arc::clone(&self.rustls), name)
            .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?;
        // Every sealed byte is taken out at once, so rustls need not bound
        // what it holds (a batch may be far above its default 64 KiB).
        conn.set_buffer_limit(None);
        Ok(TlsSession {
            conn: Mutex::new(conn),
        })
    }
}

/// The host part of `HOST:PORT` (`[::1]:7171` gives `::1`).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// One connection's TLS state. Encrypting and decrypting take its lock in
/// turn; the connections already let one thread write and one read at a
/// time, so it is never contended for long.
pub(crate) struct TlsSession {
    conn: Mutex<ClientConnection>,
}

impl fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSession").finish_non_exhaustive()
    }
}

/// A TLS failure, as a connection error.
fn tls_error(e: impl fmt::Display) -> Error {
    Error::Disconnected(format!("TLS: {e}"))
}

impl TlsSession {
    fn lock(&self) -> MutexGuard<'_, ClientConnection> {
        poison::lock(&self.conn)
    }

    /// Whether the handshake is still going on.
    #[cfg(feature = "async")]
    pub(crate) fn is_handshaking(&self) -> bool {
        self.lock().is_handshaking()
    }

    /// Records waiting to be written (handshake, alerts), appended to
    /// `out`.
    #[cfg(feature = "async")]
    pub(crate) fn outgoing(&self, out: &mut Vec<u8>) {
        let mut c = self.lock();
        while c.wants_write() {
            if c.write_tls(out).is_err() {
                break;
            }
        }
    }

    /// Encrypts `plain` and appends the records to `out`, with whatever
    /// else rustls has to send.
    pub(crate) fn seal(&self, plain: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let mut c = self.lock();
        c.writer().write_all(plain).map_err(tls_error)?;
        while c.wants_write() {
            c.write_tls(out).map_err(tls_error)?;
        }
        Ok(())
    }

    /// Takes `cipher` read from the socket and appends the plaintext it
    /// carried to `plain`. True when the server closed the session
    /// (`close_notify`).
    ///
    /// # Errors
    /// A TLS failure (a bad record, the server's alert: an untrusted or
    /// missing client certificate shows here in TLS 1.3).
    pub(crate) fn open(&self, mut cipher: &[u8], plain: &mut BytesMut) -> Result<bool> {
        let mut c = self.lock();
        let mut chunk = [0u8; PLAINTEXT_CHUNK_BYTES];
        while !cipher.is_empty() {
            c.read_tls(&mut cipher).map_err(tls_error)?;
            c.process_new_packets().map_err(tls_error)?;
            loop {
                match c.reader().read(&mut chunk) {
                    Ok(0) => return Ok(true),
                    Ok(n) => plain.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(tls_error(e)),
                }
            }
        }
        Ok(false)
    }

    /// Runs the handshake on a blocking stream (whose time-outs bound it).
    #[cfg(feature = "blocking")]
    pub(crate) fn handshake<S: Read + Write>(&self, stream: &mut S) -> io::Result<()> {
        let mut c = self.lock();
        while c.is_handshaking() {
            c.complete_io(stream)?;
        }
        while c.wants_write() {
            c.complete_io(stream)?;
        }
        Ok(())
    }

    /// One step of a handshake driven by an async caller: feeds `cipher`
    /// in (when not empty) and returns whether it is still going on.
    #[cfg(feature = "async")]
    pub(crate) fn handshake_input(&self, mut cipher: &[u8]) -> Result<bool> {
        let mut c = self.lock();
        while !cipher.is_empty() {
            c.read_tls(&mut cipher).map_err(tls_error)?;
            c.process_new_packets().map_err(tls_error)?;
        }
        Ok(c.is_handshaking())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        assert_eq!(host_of("broker.internal:7171"), "broker.internal");
        assert_eq!(host_of("127.0.0.1:7171"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7171"), "::1");
        assert_eq!(host_of("nohost"), "nohost");
    }

    #[test]
    fn missing_files_name_themselves() {
        let err = TlsConfig::with_ca_file("/nonexistent/ca.pem").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }
}
