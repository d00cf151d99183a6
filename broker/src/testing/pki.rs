//! Certificates for TLS tests: a leaf module (it uses nothing of the
//! broker), so that the server's own TLS tests can use it without an
//! import circle through the test server.

/// Certificates for TLS tests, made at run time (nothing is committed): a
/// CA, a server certificate it signed for `localhost` and `127.0.0.1`, a
/// client certificate it signed, and a second CA that signed nothing the
/// server presents (a client trusting only it must be refused). PEM files
/// in a fresh folder under the system's temporary folder, removed on drop.
///
/// ```
/// use sluice_broker::testing::{TestPki, TestServer};
///
/// let pki = TestPki::generate();
/// let server = TestServer::builder().args(&pki.server_args()).start();
/// assert!(pki.ca_pem().exists());
/// ```
#[derive(Debug)]
pub struct TestPki {
    dir: std::path::PathBuf,
}

impl TestPki {
    /// Makes the certificates and writes them.
    ///
    /// # Panics
    /// When a certificate cannot be made or a file written (a broken test
    /// machine).
    #[must_use]
    pub fn generate() -> TestPki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-test-pki-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).expect("a file in the temporary folder");
        };
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("a CA")
        };
        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, issuer| {
            let key = KeyPair::generate().expect("a key");
            let mut params = CertificateParams::new(names).expect("leaf params");
            params
                .distinguished_name
                .push(DnType::CommonName, "sluice test");
            params.extended_key_usages = vec![usage];
            let cert = params
                .signed_by(&key, issuer)
                .expect("a signed certificate");
            (cert.pem(), key.serialize_pem())
        };
        let trusted = ca("sluice test CA");
        let other = ca("sluice other CA");
        write("ca.pem", &trusted.pem());
        write("other-ca.pem", &other.pem());
        let (cert, key) = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            &trusted,
        );
        write("server.pem", &cert);
        write("server.key", &key);
        let (cert, key) = leaf(
            vec!["client.sluice.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &trusted,
        );
        write("client.pem", &cert);
        write("client.key", &key);
        let (cert, key) = leaf(
            vec!["client.sluice.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &other,
        );
        write("stranger.pem", &cert);
        write("stranger.key", &key);
        TestPki { dir }
    }

    /// A self-signed server certificate for `localhost` and `127.0.0.1`
    /// and its key, of the `kind` asked for, written as `NAME.pem` and
    /// `NAME.key` in [`TestPki::dir`].
    ///
    /// # Panics
    /// When the certificate cannot be made or written.
    #[must_use]
    pub fn self_signed(
        &self,
        name: &str,
        kind: SelfSigned,
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let key = KeyPair::generate().expect("a key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.is_ca = match kind {
            SelfSigned::Leaf => IsCa::ExplicitNoCa,
            SelfSigned::Ca | SelfSigned::ExpiredCa => IsCa::Ca(BasicConstraints::Unconstrained),
        };
        if kind == SelfSigned::ExpiredCa {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let cert = params.self_signed(&key).expect("a certificate");
        let (cert_path, key_path) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("a file in the temporary folder");
        std::fs::write(&key_path, key.serialize_pem()).expect("a file in the temporary folder");
        (cert_path, key_path)
    }

    /// The folder holding the files.
    #[must_use]
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The CA that signed the server's and the client's certificates.
    #[must_use]
    pub fn ca_pem(&self) -> std::path::PathBuf {
        self.dir.join("ca.pem")
    }

    /// A CA that signed neither.
    #[must_use]
    pub fn other_ca_pem(&self) -> std::path::PathBuf {
        self.dir.join("other-ca.pem")
    }

    /// The server's certificate (for `localhost` and `127.0.0.1`).
    #[must_use]
    pub fn server_cert(&self) -> std::path::PathBuf {
        self.dir.join("server.pem")
    }

    /// The server's key.
    #[must_use]
    pub fn server_key(&self) -> std::path::PathBuf {
        self.dir.join("server.key")
    }

    /// A client certificate signed by [`TestPki::ca_pem`] and its key.
    #[must_use]
    pub fn client_cert_and_key(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        (self.dir.join("client.pem"), self.dir.join("client.key"))
    }

    /// A client certificate signed by [`TestPki::other_ca_pem`] and its key.
    #[must_use]
    pub fn stranger_cert_and_key(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        (self.dir.join("stranger.pem"), self.dir.join("stranger.key"))
    }

    /// `--tls-cert` and `--tls-key` for a server.
    #[must_use]
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path_str("server.pem"),
            "--tls-key".into(),
            self.path_str("server.key"),
        ]
    }

    /// [`TestPki::server_args`] plus `--tls-client-ca`.
    #[must_use]
    pub fn server_args_with_client_ca(&self) -> Vec<String> {
        let mut args = self.server_args();
        args.extend(["--tls-client-ca".into(), self.path_str("ca.pem")]);
        args
    }

    fn path_str(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

/// Which self-signed certificate [`TestPki::self_signed`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelfSigned {
    /// A proper one: `basicConstraints CA:FALSE`.
    Leaf,
    /// Marked as a CA (`CA:TRUE`), as OpenSSL 3's `openssl req -x509`
    /// makes it by default.
    Ca,
    /// Marked as a CA, and expired in 2001.
    ExpiredCa,
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
