//! TLS settings: the certificate chain and key the server presents, and the
//! CA that client certificates must chain to when they are required, read
//! once at start into a rustls [`ServerConfig`] (the `ring` provider; TLS
//! 1.3 and 1.2). `transport.rs` runs each connection's TLS.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
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
        })
    }
}
