//! How a test's Redis nodes are secured, and so how they are reached: plaintext or TLS only, the `default` user
//! or an ACL user with a password. A [`RedisOptions`] goes to [`crate::RedisServer::start_with`],
//! [`crate::RedisCluster::start_with`] or [`crate::RedisSentinelSet::start_with`]; every node of the shape is
//! configured from it (the config directives below are shared by the three), and the harness talks to the
//! nodes (readiness checks, `conn()`, `redis-cli`) as any client of such a deployment has to.

use std::ffi::OsString;
use std::io::{Read, Seek};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::TestCerts;

/// What the nodes of a test's Redis demand of their clients. The default demands nothing: plaintext, and the
/// `default` user without a password, as `start()` has always given.
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// Serve TLS only (`port 0`: no plaintext port at all) with these certificates. Clients may present the
    /// client certificate (mutual TLS) or none (`tls-auth-clients optional`). The nodes talk TLS to each other
    /// too: replication, the cluster bus, sentinels to data nodes and to each other.
    pub tls: Option<Arc<TestCerts>>,
    /// An ACL user `(name, password)` with every right, and the `default` user switched off: every client must
    /// authenticate as this user, replicas to their primary and sentinels to every node included. Sentinels get
    /// the same user, so that one URL shape fits data nodes and sentinels alike. For a Sentinel set, neither may
    /// contain spaces, quotes or backslashes (see [`crate::RedisSentinelSet::start_with`]).
    pub user: Option<(String, String)>,
}

impl RedisOptions {
    /// These options, serving TLS only with `certs`.
    pub fn with_tls(mut self, certs: Arc<TestCerts>) -> Self {
        self.tls = Some(certs);
        self
    }

    /// These options, with the ACL user `name` whose password is `password` instead of the `default` user.
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// The URL of the node on 127.0.0.1:`port`: `redis://` or, with TLS, `rediss://`, and `name:password@`
    /// (percent-encoded) with a user. Over TLS a client also needs [`RedisOptions::tls_certificates`].
    pub fn url(&self, port: u16) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        let userinfo = match &self.user {
            Some((name, password)) => format!("{}:{}@", url_escape(name), url_escape(password)),
            None => String::new(),
        };
        format!("{scheme}://{userinfo}127.0.0.1:{port}")
    }

    /// The certificates a redis-rs client needs for these nodes (see [`TestCerts::tls_certificates`]); `None`
    /// without TLS.
    pub fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        self.tls.as_ref().map(|certs| certs.tls_certificates())
    }

    /// A client of the node on 127.0.0.1:`port`: [`RedisOptions::url`], and over TLS the test CA as its only
    /// root and the client certificate.
    pub fn client(&self, port: u16) -> redis::Client {
        let url = self.url(port);
        match self.tls_certificates() {
            Some(certs) => redis::Client::build_with_tls(url, certs),
            None => redis::Client::open(url),
        }
        .unwrap_or_else(|e| panic!("a redis client for :{port}: {e}"))
    }

    /// A connection to 127.0.0.1:`port` for the harness's own polling: quick to give up, so that a dead node
    /// reads as `None` rather than hanging a wait.
    pub(crate) fn quick_conn(&self, port: u16) -> Option<redis::Connection> {
        let conn = self
            .client(port)
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        conn.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
        Some(conn)
    }

    /// The directives every `redis-server` of a test gets for `port`: where it listens, with TLS the
    /// certificates and TLS replication, with a user the ACL and the credentials a replica gives its primary
    /// (every node gets them: any may become a replica after a failover).
    pub(crate) fn data_node(&self, port: u16) -> Directives {
        let mut directives = self.listener(port);
        if let Some((name, password)) = &self.user {
            directives
                .add("masteruser", [name.as_str()])
                .add("masterauth", [password.as_str()]);
        }
        directives
    }

    /// The directives every `redis-sentinel` of a test gets for `port`: where it listens, with TLS the
    /// certificates and TLS to the data nodes and the other sentinels (`tls-replication`), with a user the ACL.
    /// The credentials it gives the nodes of `master` are [`RedisOptions::sentinel_auth`]'s.
    pub(crate) fn sentinel(&self, port: u16) -> Directives {
        self.listener(port)
    }

    /// The directives telling a sentinel which credentials to give the data nodes of `master` (`auth-user`,
    /// `auth-pass`) and the other sentinels (`sentinel-user`, `sentinel-pass`): they must follow its
    /// `sentinel monitor <master>`.
    pub(crate) fn sentinel_auth(&self, master: &str) -> Directives {
        let mut directives = Directives::default();
        if let Some((name, password)) = &self.user {
            directives
                .add("sentinel", ["auth-user", master, name])
                .add("sentinel", ["auth-pass", master, password])
                .add("sentinel", ["sentinel-user", name])
                .add("sentinel", ["sentinel-pass", password]);
        }
        directives
    }

    /// Where a node listens and whom it lets in, for both kinds of node.
    fn listener(&self, port: u16) -> Directives {
        let mut directives = Directives::default();
        let port = port.to_string();
        match &self.tls {
            None => {
                directives.add("port", [port.as_str()]);
            }
            Some(certs) => {
                let file = |path: &Path| path.to_string_lossy().into_owned();
                directives
                    .add("port", ["0"])
                    .add("tls-port", [port.as_str()])
                    .add("tls-cert-file", [file(certs.server_cert_file())])
                    .add("tls-key-file", [file(certs.server_key_file())])
                    .add("tls-ca-cert-file", [file(certs.ca_file())])
                    .add("tls-auth-clients", ["optional"])
                    // What it presents when it is the client: of a primary, a sentinel, a cluster peer.
                    .add("tls-client-cert-file", [file(certs.client_cert_file())])
                    .add("tls-client-key-file", [file(certs.client_key_file())])
                    .add("tls-replication", ["yes"]);
            }
        }
        if let Some((name, password)) = &self.user {
            directives
                .add("user", ["default", "off"])
                .add("user", [name, "on", &format!(">{password}"), "~*", "&*", "+@all"]);
        }
        directives
    }

    /// Runs `redis-cli` with the options these nodes need ([`RedisOptions::redis_cli_args`]) and then `args`,
    /// and gives its standard output, trailing whitespace trimmed; panics if it fails or takes over 2 minutes.
    pub(crate) fn redis_cli(&self, args: &[&str]) -> String {
        let mut out = tempfile::tempfile().expect("temp file");
        let mut err = tempfile::tempfile().expect("temp file");
        let mut child = Command::new("redis-cli")
            .args(self.redis_cli_args())
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("temp file"))
            .stderr(err.try_clone().expect("temp file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run redis-cli (is it installed?): {e}"));
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for redis-cli") {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |f: &mut std::fs::File| {
            let mut s = String::new();
            f.rewind().expect("rewind temp file");
            let _ = f.read_to_string(&mut s);
            s
        };
        let (stdout, stderr) = (read(&mut out), read(&mut err));
        match status {
            Some(status) if status.success() => stdout.trim_end().to_string(),
            status => panic!(
                "redis-cli {args:?} {}\n---- stdout ----\n{stdout}\n---- stderr ----\n{stderr}",
                status.map_or("ran over 2 minutes".to_string(), |s| format!("failed: {s}"))
            ),
        }
    }

    /// The options `redis-cli` needs before its own to reach these nodes: `--tls` with the CA and the client
    /// certificate, `--user`/`--pass`.
    fn redis_cli_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if let Some(certs) = &self.tls {
            args.extend(["--tls".into(), "--cacert".into(), certs.ca_file().into()]);
            args.extend(["--cert".into(), certs.client_cert_file().into()]);
            args.extend(["--key".into(), certs.client_key_file().into()]);
        }
        if let Some((name, password)) = &self.user {
            args.extend(["--user", name, "--pass", password, "--no-auth-warning"].map(OsString::from));
        }
        args
    }
}

/// `s` fit for the user or password part of a URL: everything but unreserved characters percent-encoded.
fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Config directives for a `redis-server` or `redis-sentinel`, in order: each a name and its values, to be given
/// as command-line arguments or written as a config file.
#[derive(Debug, Default)]
pub(crate) struct Directives(Vec<(String, Vec<String>)>);

impl Directives {
    /// Adds `name values...` (a name may come more than once, as `user` does).
    pub(crate) fn add<S: AsRef<str>>(&mut self, name: &str, values: impl IntoIterator<Item = S>) -> &mut Self {
        let values = values.into_iter().map(|v| v.as_ref().to_string()).collect();
        self.0.push((name.to_string(), values));
        self
    }

    /// Adds the directives of `other` after these.
    pub(crate) fn extend(&mut self, other: Directives) -> &mut Self {
        self.0.extend(other.0);
        self
    }

    /// As command-line arguments: `--name value...` each (Redis quotes each argument when it joins them into a
    /// config line, so empty values and spaces survive).
    pub(crate) fn args(&self) -> Vec<OsString> {
        self.0
            .iter()
            .flat_map(|(name, values)| std::iter::once(format!("--{name}")).chain(values.iter().cloned()))
            .map(OsString::from)
            .collect()
    }

    /// As a config file: a line `name "value"...` each, every value double-quoted and escaped.
    pub(crate) fn file(&self) -> String {
        self.0
            .iter()
            .map(|(name, values)| {
                let quoted: String = values
                    .iter()
                    .map(|v| format!(" \"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
                    .collect();
                format!("{name}{quoted}\n")
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_directives() {
        let plain = RedisOptions::default();
        assert_eq!(plain.url(7000), "redis://127.0.0.1:7000");
        assert_eq!(plain.data_node(7000).args(), ["--port", "7000"]);
        assert!(plain.redis_cli_args().is_empty());

        let user = RedisOptions::default().with_user("dq", "p@ss word");
        assert_eq!(user.url(7000), "redis://dq:p%40ss%20word@127.0.0.1:7000");
        let file = user.data_node(7000).file();
        assert!(file.starts_with("port \"7000\"\nuser \"default\" \"off\"\n"), "{file}");
        assert!(
            file.contains("user \"dq\" \"on\" \">p@ss word\" \"~*\" \"&*\" \"+@all\"\n"),
            "{file}"
        );
        assert!(
            file.ends_with("masteruser \"dq\"\nmasterauth \"p@ss word\"\n"),
            "{file}"
        );
        assert_eq!(user.sentinel_auth("m").0.len(), 4);
        assert!(plain.sentinel_auth("m").0.is_empty());

        let mut quoted = Directives::default();
        quoted.add("save", [""]).add("x", ["a\"b\\c"]);
        assert_eq!(quoted.file(), "save \"\"\nx \"a\\\"b\\\\c\"\n");
        assert_eq!(quoted.args(), ["--save", "", "--x", "a\"b\\c"]);
    }
}
