//! Throw-away certificates for dq-server's own HTTPS (`server.tls_cert`, `server.tls_key`): a CA, and
//! server certificates for 127.0.0.1 and localhost that it signs, made in-process with rcgen and written
//! as PEM files to a temp dir removed on drop.
//!
//! Each [`HttpsCa::issue`] makes a new key and a certificate with its own serial number and common name,
//! so a test can tell which one a server presents (by its DER) after a reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::{ClientConfig, RootCertStore};

/// A CA for HTTPS tests, with its certificate at [`HttpsCa::ca_file`].
pub struct HttpsCa {
    /// Holds the files.
    dir: tempfile::TempDir,
    /// Signs the server certificates.
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA certificate as PEM, for clients to trust.
    ca_file: PathBuf,
    /// The next serial number.
    serial: AtomicU64,
}

/// A server certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct ServerCert {
    /// The certificate (the chain: the server's own certificate alone, the CA being trusted).
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8).
    pub key_file: PathBuf,
    /// The certificate as DER, as a TLS client sees it.
    pub der: Vec<u8>,
}

impl HttpsCa {
    /// A new CA named `name`. Panics if rcgen fails.
    pub fn generate(name: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, issuer.pem()).expect("write ca.pem");
        HttpsCa {
            dir,
            issuer,
            ca_file,
            serial: AtomicU64::new(1),
        }
    }

    /// The CA's certificate (PEM).
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// The CA's certificate as PEM text.
    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A new server certificate for 127.0.0.1 and localhost, with common name `name`, written as
    /// `<name>.crt` and `<name>.key`.
    pub fn issue(&self, name: &str) -> ServerCert {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("server params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.serial_number = Some(self.serial.fetch_add(1, Ordering::Relaxed).into());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.issuer).expect("server certificate");
        let (cert_file, key_file) = (self.path(&format!("{name}.crt")), self.path(&format!("{name}.key")));
        std::fs::write(&cert_file, cert.pem()).expect("write certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        ServerCert {
            cert_file,
            key_file,
            der: cert.der().to_vec(),
        }
    }

    /// A rustls client configuration that trusts this CA alone and offers `alpn` (e.g. `[b"h2"]`), for
    /// tests that hold a connection of their own and look at what it negotiated.
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).expect("CA certificate");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// A path in the CA's temp dir, for a test's own files (a broken certificate, a copy to replace).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}
