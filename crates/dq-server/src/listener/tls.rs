//! HTTPS: rustls in front of the listener's connections, with the certificate chain and key read from
//! `server.tls_cert` and `server.tls_key` at start and again on SIGHUP.
//!
//! Every handshake asks [`Reloadable`] for the certificate in force, so a reload changes what new
//! connections are shown while open ones keep the session they made (a renewed certificate needs
//! neither a restart nor a dropped connection). A file that cannot be read or parsed, or a key that is
//! not the certificate's, stops start-up naming the key; on SIGHUP it is logged and the certificate in
//! force stays. The crypto is aws-lc-rs, the provider the rest of the workspace's rustls already uses.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use dq_core::config::{ConfigError, ServerSettings};
use sha2::{Digest, Sha256};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::{CryptoProvider, aws_lc_rs};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{Error as TlsError, InconsistentKeys, ServerConfig};

/// ALPN names: HTTP/2 first, so clients that speak both get it.
const H2: &[u8] = b"h2";
const HTTP1: &[u8] = b"http/1.1";

/// What the listener needs to serve HTTPS.
#[derive(Clone)]
pub struct Tls {
    /// Connections within the cap: HTTP/2 and HTTP/1.1 by ALPN.
    pub(super) acceptor: TlsAcceptor,
    /// Connections beyond the cap: HTTP/1.1 only, so that every client able to speak it is told 503
    /// `overloaded` rather than being cut off (the answer is an HTTP/1.1 one).
    pub(super) refusing: TlsAcceptor,
    /// The certificate in force, which both acceptors present.
    certificate: Arc<Reloadable>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("certificate", &self.certificate).finish()
    }
}

impl Tls {
    /// HTTPS from `server.tls_cert` and `server.tls_key`, or `None` when they are unset (plain HTTP).
    pub fn from_settings(server: &ServerSettings) -> Result<Option<Tls>, ConfigError> {
        let (Some(cert_file), Some(key_file)) = (&server.tls_cert, &server.tls_key) else {
            return Ok(None);
        };
        let provider = Arc::new(aws_lc_rs::default_provider());
        let loaded = read(cert_file, key_file, &provider)?;
        tracing::info!(cert = %cert_file.display(), sha256 = %loaded.fingerprint, "serving HTTPS");
        let certificate = Arc::new(Reloadable {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
            provider: provider.clone(),
            current: RwLock::new(Arc::new(loaded.key)),
        });
        let acceptor = |alpn: &[&[u8]]| -> Result<TlsAcceptor, ConfigError> {
            let mut config = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid("server.tls_cert", e.to_string()))?
                .with_no_client_auth()
                .with_cert_resolver(certificate.clone());
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(TlsAcceptor::from(Arc::new(config)))
        };
        Ok(Some(Tls {
            acceptor: acceptor(&[H2, HTTP1])?,
            refusing: acceptor(&[HTTP1])?,
            certificate,
        }))
    }

    /// Reads the certificate and key files again (SIGHUP): new handshakes present what they hold. On
    /// any error the certificate in force stays.
    pub fn reload(&self) {
        let c = &self.certificate;
        match read(&c.cert_file, &c.key_file, &c.provider) {
            Ok(read) => {
                *c.current.write().expect("certificate lock") = Arc::new(read.key);
                tracing::info!(
                    cert = %c.cert_file.display(),
                    key = %c.key_file.display(),
                    sha256 = %read.fingerprint,
                    "SIGHUP: TLS certificate read again; new connections are shown it"
                );
            }
            Err(e) => tracing::error!(cause = %e, "SIGHUP: cannot use the TLS files; the certificate in force stays"),
        }
    }
}

/// The certificate every new handshake is shown, replaced on reload.
#[derive(Debug)]
struct Reloadable {
    /// `server.tls_cert`, read again on reload.
    cert_file: PathBuf,
    /// `server.tls_key`, read again on reload.
    key_file: PathBuf,
    /// Parses the private key.
    provider: Arc<CryptoProvider>,
    /// The certificate chain and signing key in force.
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloadable {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("certificate lock").clone())
    }
}

/// A certificate chain and its key, read and checked.
struct Read {
    /// What rustls presents and signs with.
    key: CertifiedKey,
    /// SHA-256 of the server's own certificate, for the log: what `openssl x509 -fingerprint -sha256`
    /// shows, so an operator can tell which certificate is in force.
    fingerprint: String,
}

/// Reads the chain and the key, and checks that the key is the first certificate's.
fn read(cert_file: &Path, key_file: &Path, provider: &CryptoProvider) -> Result<Read, ConfigError> {
    let cert_pem = read_file("server.tls_cert", cert_file)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("server.tls_cert", format!("{}: {e}", cert_file.display())))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(
            "server.tls_cert",
            format!(
                "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                cert_file.display()
            ),
        ));
    };
    let fingerprint = hex::encode(Sha256::digest(leaf));
    let key_pem = read_file("server.tls_key", key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        invalid(
            "server.tls_key",
            format!(
                "{} holds no PEM private key (-----BEGIN PRIVATE KEY-----, or an RSA or EC one): {e}",
                key_file.display()
            ),
        )
    })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| invalid("server.tls_key", format!("{}: {e}", key_file.display())))?;
    let key = CertifiedKey::new(chain, signing);
    match key.keys_match() {
        Ok(()) | Err(TlsError::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(Read { key, fingerprint }),
        Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(invalid(
            "server.tls_key",
            format!(
                "{} is not the private key of the first certificate in {}",
                key_file.display(),
                cert_file.display()
            ),
        )),
        Err(e) => Err(invalid(
            "server.tls_cert",
            format!("{}: the first certificate cannot be used: {e}", cert_file.display()),
        )),
    }
}

/// The file's bytes, or an error naming `key` and the path.
fn read_file(key: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))
}

fn invalid(key: &'static str, message: String) -> ConfigError {
    ConfigError::Invalid { key, message }
}
