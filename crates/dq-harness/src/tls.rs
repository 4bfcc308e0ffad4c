//! Throw-away TLS certificates for a test's Redis nodes: a CA of their own, a server certificate for 127.0.0.1
//! and localhost, and a client certificate for mutual TLS, all made by the `openssl` command line in a temp dir.
//!
//! They follow the rules rustls (through webpki) enforces and OpenSSL (Redis's side) checks, so that a failing
//! handshake in a test means the code under test is wrong, not the certificates: X.509 v3; the CA with
//! `basicConstraints=critical,CA:TRUE` and `keyUsage=keyCertSign`; leaves with `CA:FALSE`, a `subjectAltName`
//! (webpki ignores the common name) and the `extendedKeyUsage` of their side. Keys are EC P-256, in PKCS#8 PEM.
//! One [`TestCerts`] serves every node of a set (Redis nodes present the client certificate to each other).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How long the certificates are valid: long enough for any test run, short enough to be obviously for tests.
const VALID_DAYS: &str = "3";

/// The `openssl` config: the distinguished name is given on the command line, the extensions are chosen per
/// certificate by section.
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = dq test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:dq-test-client
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A CA, a server certificate and a client certificate it signed, as PEM files in a temp dir removed on drop.
#[derive(Debug)]
pub struct TestCerts {
    /// Holds the files.
    dir: tempfile::TempDir,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl TestCerts {
    /// Generates a fresh CA and the two certificates it signs. Panics if `openssl` is missing or fails.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("openssl.cnf"), OPENSSL_CONFIG).expect("write openssl.cnf");
        let new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        openssl(
            dir.path(),
            &[
                &["req", "-x509", "-new"][..],
                &new_key,
                &["-keyout", "ca.key", "-out", "ca.crt", "-days", VALID_DAYS, "-sha256"],
                &["-subj", "/CN=dq test CA", "-config", "openssl.cnf", "-extensions", "ca"],
            ]
            .concat(),
        );
        for (leaf, name) in [("server", "/CN=localhost"), ("client", "/CN=dq-test-client")] {
            let (key, csr, cert) = (format!("{leaf}.key"), format!("{leaf}.csr"), format!("{leaf}.crt"));
            openssl(
                dir.path(),
                &[
                    &["req", "-new"][..],
                    &new_key,
                    &["-keyout", &key, "-out", &csr, "-subj", name, "-config", "openssl.cnf"],
                ]
                .concat(),
            );
            // `-CAcreateserial` starts the CA's serial file at a random number, then counts up: no two
            // certificates of one issuer share a serial (a verifier would take them for the same).
            openssl(
                dir.path(),
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAserial",
                    "ca.srl",
                    "-CAcreateserial",
                    "-days",
                    VALID_DAYS,
                    "-sha256",
                    "-extfile",
                    "openssl.cnf",
                    "-extensions",
                    leaf,
                    "-out",
                    &cert,
                ],
            );
        }
        TestCerts {
            ca: path("ca.crt"),
            server_cert: path("server.crt"),
            server_key: path("server.key"),
            client_cert: path("client.crt"),
            client_key: path("client.key"),
            dir,
        }
    }

    /// The CA certificate (PEM): the one root a client of the test nodes should trust.
    pub fn ca_file(&self) -> &Path {
        &self.ca
    }

    /// The server certificate (PEM), for 127.0.0.1 and localhost.
    pub fn server_cert_file(&self) -> &Path {
        &self.server_cert
    }

    /// The server certificate's key (PEM, PKCS#8).
    pub fn server_key_file(&self) -> &Path {
        &self.server_key
    }

    /// The client certificate (PEM), for mutual TLS.
    pub fn client_cert_file(&self) -> &Path {
        &self.client_cert
    }

    /// The client certificate's key (PEM, PKCS#8).
    pub fn client_key_file(&self) -> &Path {
        &self.client_key
    }

    /// The dir holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What a redis-rs client (`Client::build_with_tls`, `ClusterClientBuilder::certs`) needs to reach the test
    /// nodes: the CA as the only root, and the client certificate.
    pub fn tls_certificates(&self) -> redis::TlsCertificates {
        let read = |path: &Path| std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read(&self.client_cert),
                client_key: read(&self.client_key),
            }),
            root_cert: Some(read(&self.ca)),
        }
    }
}

/// Runs `openssl args` in `dir`, panicking with its output if it cannot run or fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the openssl command line tool, which makes the test TLS certificates \
                 (install it: apt-get install openssl): {e}"
            )
        });
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}\n---- stdout ----\n{}\n---- stderr ----\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
