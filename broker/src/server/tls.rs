//! TLS settings: the certificate chain and key the server presents, and the
//! CA that client certificates must chain to when they are required, read
//! once at start into a rustls [`ServerConfig`] (the `ring` provider; TLS
//! 1.3 and 1.2). `transport.rs` runs each connection's TLS.
//!
//! At load, the server's own certificate is put through the check a
//! client's webpki verifier makes, with the chain's last certificate as
//! the trust anchor: a certificate every client would refuse (a CA
//! certificate presented as the server's own, which OpenSSL 3's
//! `openssl req -x509` makes by default, or one out of its validity
//! period or not for TLS servers) is named in a warning at start.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;

/// The TLS side of a validated configuration.
#[derive(Clone)]
pub struct TlsSettings {
    /// `--tls-cert`: PEM certificate chain, the server's own first.
    pub cert: PathBuf,
    /// `--tls-key`: PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `--tls-client-ca`: PEM CA certificates; when set, every client must
    /// present a certificate that chains to one of them.
    pub client_ca: Option<PathBuf>,
    /// What the connections run with.
    pub server_config: Arc<ServerConfig>,
    /// Why clients will refuse the certificate, when they will (logged as
    /// a warning at start).
    pub cert_warning: Option<String>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("client_ca", &self.client_ca)
            .finish_non_exhaustive()
    }
}

/// Why the TLS files could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{setting} {}: {message}", path.display())]
pub struct TlsError {
    /// The flag whose file it is (`--tls-cert`, ...).
    pub setting: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

fn err(setting: &'static str, path: &Path, message: impl Into<String>) -> TlsError {
    TlsError {
        setting,
        path: path.to_owned(),
        message: message.into(),
    }
}

fn certs(setting: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(setting, path, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(setting, path, e.to_string()))?;
    if certs.is_empty() {
        return Err(err(
            setting,
            path,
            "no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
        ));
    }
    Ok(certs)
}

impl TlsSettings {
    /// Reads the files and builds the rustls configuration.
    ///
    /// # Errors
    /// A file that cannot be read or holds no usable certificate or key, a
    /// key that does not match the certificate, a CA file rustls refuses.
    pub fn load(cert: PathBuf, key: PathBuf, client_ca: Option<PathBuf>) -> Result<Self, TlsError> {
        let chain = certs("--tls-cert", &cert)?;
        let cert_warning = cert_warning(&chain, UnixTime::now());
        let private = PrivateKeyDer::from_pem_file(&key)
            .map_err(|e| err("--tls-key", &key, format!("no usable PEM private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| err("--tls-cert", &cert, e.to_string()))?;
        let builder = match &client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for c in certs("--tls-client-ca", ca)? {
                    roots
                        .add(c)
                        .map_err(|e| err("--tls-client-ca", ca, e.to_string()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| err("--tls-client-ca", ca, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, private)
            .map_err(|e| err("--tls-key", &key, format!("does not fit --tls-cert: {e}")))?;
        // Clients keep one long connection and never resume a session: no
        // tickets to send after each handshake.
        config.send_tls13_tickets = 0;
        Ok(TlsSettings {
            cert,
            key,
            client_ca,
            server_config: Arc::new(config),
            cert_warning,
        })
    }
}

/// Why a client would refuse the server certificate `chain` (the server's
/// own first), when it is something the file's owner can fix: the check a
/// client's webpki verifier makes at `now`, anchored at the chain's last
/// certificate. `None` when it passes, or fails only for want of the CA
/// the chain leads to (the clients have it, the file need not).
pub(crate) fn cert_warning(chain: &[CertificateDer<'_>], now: UnixTime) -> Option<String> {
    let own = chain.first()?;
    let last = chain.last()?;
    // Certificates webpki cannot even parse are rustls's to refuse.
    let cert = webpki::EndEntityCert::try_from(own).ok()?;
    let anchors = [webpki::anchor_from_trusted_cert(last).ok()?];
    let algorithms = rustls::crypto::ring::default_provider()
        .signature_verification_algorithms
        .all;
    let verified = cert.verify_for_usage(
        algorithms,
        &anchors,
        &chain[1..],
        now,
        webpki::KeyUsage::server_auth(),
        None,
        None,
    );
    let e = verified.err()?;
    Some(match e {
        webpki::Error::CaUsedAsEndEntity => "the server's certificate is a CA certificate \
            (basicConstraints CA:TRUE), which TLS clients refuse as a server's own \
            (CaUsedAsEndEntity); OpenSSL 3's `openssl req -x509` makes one unless given \
            `-addext basicConstraints=critical,CA:FALSE`. Make it again with that option, or \
            sign a leaf certificate with a small CA (README.md, TLS). Only sluice clients \
            given this very certificate as their CA file accept it"
            .to_owned(),
        webpki::Error::CertExpired { .. }
        | webpki::Error::CertNotValidYet { .. }
        | webpki::Error::InvalidCertValidity => {
            format!(
                "the server's certificate is out of its validity period ({e:?}): clients will refuse it"
            )
        }
        webpki::Error::RequiredEkuNotFoundContext(_) => {
            "the server's certificate is not for TLS servers (its extendedKeyUsage lacks \
             serverAuth): clients will refuse it"
                .to_owned()
        }
        _ => return None,
    })
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;
    use crate::testing::pki::{SelfSigned, TestPki};

    fn chain(path: &Path) -> Vec<CertificateDer<'static>> {
        certs("--tls-cert", path).unwrap()
    }

    #[test]
    fn a_ca_certificate_as_the_servers_own_is_warned_about() {
        let pki = TestPki::generate();
        let (cert, key) = pki.self_signed("ca-as-leaf", SelfSigned::Ca);
        let warning = cert_warning(&chain(&cert), UnixTime::now()).expect("a warning");
        assert!(warning.contains("CA:TRUE"), "{warning}");
        assert!(
            warning.contains("basicConstraints=critical,CA:FALSE"),
            "{warning}"
        );
        // Loading it works (the server starts) and carries the warning.
        let settings = TlsSettings::load(cert, key, None).unwrap();
        assert_eq!(settings.cert_warning.as_deref(), Some(&warning[..]));
    }

    #[test]
    fn proper_certificates_are_not_warned_about() {
        let pki = TestPki::generate();
        let (leaf, _) = pki.self_signed("leaf", SelfSigned::Leaf);
        assert_eq!(cert_warning(&chain(&leaf), UnixTime::now()), None);
        // A leaf signed by a CA the file does not hold.
        assert_eq!(
            cert_warning(&chain(&pki.server_cert()), UnixTime::now()),
            None
        );
        // The leaf and its CA.
        let mut both = chain(&pki.server_cert());
        both.extend(chain(&pki.ca_pem()));
        assert_eq!(cert_warning(&both, UnixTime::now()), None);
    }

    #[test]
    fn an_expired_certificate_is_warned_about() {
        let pki = TestPki::generate();
        let (old, _) = pki.self_signed("old", SelfSigned::ExpiredCa);
        let warning = cert_warning(&chain(&old), UnixTime::now()).expect("a warning");
        assert!(warning.contains("validity period"), "{warning}");
    }
}
