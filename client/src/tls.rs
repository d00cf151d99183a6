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
//!
//! # A self-signed certificate given as its own CA
//!
//! The server's certificate is verified by rustls's webpki verifier, with
//! one exception: a certificate byte for byte identical to one in the CA
//! file is accepted although it is marked as a CA (`basicConstraints
//! CA:TRUE`, which OpenSSL 3's `openssl req -x509` writes by default and
//! webpki refuses in a server's own certificate), as redis-cli and the NATS
//! clients accept it. Its validity period and the server's name are still
//! checked, and the handshake's signature is still verified with the
//! provider's algorithms against its key, so only the holder of that key
//! gets through. That grants nothing more than trusting the certificate
//! already did: whoever holds a trusted CA's key can sign a leaf for any
//! name, which webpki accepts.
//!
//! # Failures
//!
//! A failure that will not go away by itself (a refused certificate on
//! either side, no common TLS version or cipher suite, a port that does
//! not speak TLS) is [`Error::Tls`], which names the cause and the fix and
//! is not retryable; a broken connection stays a disconnect.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BytesMut;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    AlertDescription, CertificateError, ClientConfig as RustlsConfig, ClientConnection,
    DigitallySignedStruct, RootCertStore, SignatureScheme,
};

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

/// The rustls configuration up to its client certificate: the provider,
/// the protocol versions, and [`AnchorVerifier`] over the CA file `ca`.
fn builder(
    ca: &Path,
) -> Result<rustls::ConfigBuilder<RustlsConfig, rustls::client::WantsClientCert>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let anchors = certs("TLS CA file", ca)?;
    let mut roots = RootCertStore::empty();
    for c in &anchors {
        roots
            .add(c.clone())
            .map_err(|e| file_error("TLS CA file", ca, e))?;
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| file_error("TLS CA file", ca, e))?;
    let verifier = AnchorVerifier { webpki, anchors };
    Ok(RustlsConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier)))
}

/// rustls's webpki verifier, which also accepts a server certificate
/// identical to one of the trusted ones although it is marked as a CA (see
/// the module docs for why that is safe).
#[derive(Debug)]
struct AnchorVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The CA file's certificates, as given.
    anchors: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for AnchorVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // webpki checks the validity period before the basic
            // constraints, so a certificate refused as a CA is in its
            // period (a test holds this: an expired one stays refused).
            Err(e)
                if is_ca_used_as_end_entity(&e)
                    && self
                        .anchors
                        .iter()
                        .any(|a| a.as_ref() == end_entity.as_ref()) =>
            {
                let parsed = ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Whether webpki refused a certificate because it is a CA's.
fn is_ca_used_as_end_entity(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(CertificateError::Other(other))
            if matches!(
                other.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            )
    )
}

impl TlsConfig {
    /// Trusts the CA certificates in the PEM file `ca`, or a server's
    /// self-signed certificate itself (see the module docs).
    ///
    /// # Errors
    /// `InvalidArgument` when the file cannot be read or holds no usable
    /// certificate.
    pub fn with_ca_file(ca: impl AsRef<Path>) -> Result<TlsConfig> {
        let config = builder(ca.as_ref())?.with_no_client_auth();
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
        let config = builder(ca.as_ref())?
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

    /// The rustls configuration, for a caller that runs sessions of its
    /// own over it (the load generator's HTTPS to an SQS endpoint).
    #[must_use]
    pub fn rustls(&self) -> Arc<RustlsConfig> {
        self.rustls.clone()
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
            addr: addr.to_owned(),
            server_name: host.to_owned(),
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
    /// The address connected to and the name checked, for the errors.
    addr: String,
    server_name: String,
}

impl fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSession").finish_non_exhaustive()
    }
}

/// What an [`Error::Tls`] says about the CA certificate a server presents
/// as its own.
const CA_AS_SERVER_CERT: &str = "the server's certificate is a CA certificate \
    (basicConstraints CA:TRUE; OpenSSL 3's `openssl req -x509` makes one unless told \
    otherwise), which TLS refuses as a server's own. Make it again with `-addext \
    basicConstraints=critical,CA:FALSE`, or sign a leaf certificate with a small CA and \
    trust the CA (README.md, TLS); a client whose CA file holds exactly this certificate \
    accepts it";

/// The description of a TLS failure that will not go away by itself, with
/// its fix; `None` for the others (a broken connection, a corrupt record
/// once the session runs).
fn permanent(e: &rustls::Error, handshaking: bool, server_name: &str) -> Option<String> {
    use rustls::Error as E;
    let cert = |what: &str| format!("{what} ({e})");
    Some(match e {
        _ if is_ca_used_as_end_entity(e) => format!("{CA_AS_SERVER_CERT} ({e})"),
        E::InvalidCertificate(CertificateError::UnknownIssuer) => cert(
            "the server's certificate is not signed by a CA this client trusts: give the CA \
             that signed it, or the server's self-signed certificate itself, as the CA file \
             (the CLI's --tls-ca)",
        ),
        E::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => cert(&format!(
            "the server's certificate does not carry the name {server_name}: connect by a \
             name it carries, give that name (TlsConfig::server_name, the CLI's \
             --tls-server-name), or add this one to its subjectAltName"
        )),
        E::InvalidCertificate(_) | E::NoCertificatesPresented => {
            cert("the server's certificate was refused")
        }
        E::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
            | AlertDescription::CertificateRequired,
        ) => cert(
            "the server refused this client's certificate, or wants one: present one signed \
             by a CA of its --tls-client-ca (TlsConfig::with_client_cert, the CLI's \
             --tls-client-cert and --tls-client-key)",
        ),
        // What a plain-text sluice port answers a TLS handshake with.
        E::AlertReceived(AlertDescription::HandshakeFailure) if handshaking => cert(
            "the server refused the TLS handshake: is it a plain port? A sluice server \
             started without --tls-cert answers TLS so: connect without TLS (no TlsConfig, \
             no --tls-ca); else it shares no TLS version or cipher suite with this client",
        ),
        E::InvalidMessage(_) if handshaking => cert(
            "the server did not answer TLS: is it a plain port? Connect without TLS (no \
             TlsConfig, no --tls-ca), or check the port",
        ),
        E::PeerIncompatible(_)
        | E::AlertReceived(
            AlertDescription::ProtocolVersion | AlertDescription::InsufficientSecurity,
        ) => cert("the server shares no TLS version or cipher suite with this client"),
        _ => return None,
    })
}

impl TlsSession {
    fn lock(&self) -> MutexGuard<'_, ClientConnection> {
        poison::lock(&self.conn)
    }

    /// A TLS failure as the client's error: [`Error::Tls`] when it will not
    /// go away by itself, a lost connection otherwise.
    fn failure(&self, e: &rustls::Error, handshaking: bool) -> Error {
        match permanent(e, handshaking, &self.server_name) {
            Some(message) => Error::Tls {
                addr: self.addr.clone(),
                message,
            },
            None => Error::Disconnected(format!("TLS: {e}")),
        }
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
        let broken = |e: io::Error| Error::Disconnected(format!("TLS: {e}"));
        c.writer().write_all(plain).map_err(broken)?;
        while c.wants_write() {
            c.write_tls(out).map_err(broken)?;
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
            c.read_tls(&mut cipher)
                .map_err(|e| Error::Disconnected(format!("TLS: {e}")))?;
            if let Err(e) = c.process_new_packets() {
                return Err(self.failure(&e, c.is_handshaking()));
            }
            loop {
                match c.reader().read(&mut chunk) {
                    Ok(0) => return Ok(true),
                    Ok(n) => plain.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(Error::Disconnected(format!("TLS: {e}"))),
                }
            }
        }
        Ok(false)
    }

    /// Runs the handshake on a blocking stream (whose time-outs bound it).
    ///
    /// # Errors
    /// [`Error::Tls`] for a failure that will not go away by itself, else
    /// [`Error::Connect`] with what the socket or rustls said.
    #[cfg(feature = "blocking")]
    pub(crate) fn handshake<S: Read + Write>(&self, stream: &mut S) -> Result<()> {
        let mut c = self.lock();
        let mut step = |c: &mut ClientConnection| {
            c.complete_io(stream).map(drop).map_err(|e| {
                // rustls hands its own errors back inside the io::Error.
                let tls = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
                match tls.map(|t| self.failure(t, c.is_handshaking())) {
                    Some(err @ Error::Tls { .. }) => err,
                    _ => Error::Connect {
                        addr: self.addr.clone(),
                        source: Arc::new(e),
                    },
                }
            })
        };
        while c.is_handshaking() {
            step(&mut c)?;
        }
        while c.wants_write() {
            step(&mut c)?;
        }
        Ok(())
    }

    /// One step of a handshake driven by an async caller: feeds `cipher`
    /// in (when not empty) and returns whether it is still going on.
    #[cfg(feature = "async")]
    pub(crate) fn handshake_input(&self, mut cipher: &[u8]) -> Result<bool> {
        let mut c = self.lock();
        while !cipher.is_empty() {
            c.read_tls(&mut cipher)
                .map_err(|e| Error::Disconnected(format!("TLS: {e}")))?;
            if let Err(e) = c.process_new_packets() {
                return Err(self.failure(&e, c.is_handshaking()));
            }
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
