//! `[redis]`: which Redis, in which shape, and how dq talks to it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};
use crate::store::partition::MAX_PARTITIONS;

/// The shape of dq's Redis (dq-api's: `GET /v1/stats` shows it).
pub use dq_api::RedisMode;

/// Redis and how we talk to it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// Standalone, Sentinel or Cluster.
    pub mode: RedisMode,
    /// The Redis (standalone), the sentinels (sentinel) or seed nodes (cluster). `user:password@` for an
    /// ACL user and `rediss://` for TLS work in every shape.
    pub urls: Vec<String>,
    /// The name under which the sentinels know the primary.
    pub sentinel_master: String,
    /// Partitions of the installation, fixed when it is created and stored in Redis. Unset: whatever the
    /// installation has, or 256 for a new one; set: must equal the stored count, or the process refuses
    /// to start.
    pub partitions: Option<u32>,
    /// Partitions one topic's keys (flow, coalescing and deduplication keys) are spread over, fixed when
    /// the installation is created and stored beside `partitions`. Fewer means bigger batches per
    /// partition for keyed pushes, reserves and acks; more spreads one topic's keyed traffic wider on a
    /// cluster. Unset: whatever the installation has, or 16 (at most `partitions`) for a new one; set: must
    /// equal the stored count, or the process refuses to start.
    pub key_partitions: Option<u32>,
    /// Prefix of every key, so that several installations can share a Redis.
    pub prefix: String,
    /// Connections to the primary in each process's pool (standalone, Sentinel). Requests share them:
    /// redis-rs pipelines concurrent commands on one connection, so one is enough.
    pub pool_size: u32,
    /// How long to wait for a connection before answering `unavailable`.
    pub connect_timeout_ms: u64,
    /// How long to wait for a command's answer before treating the connection as broken.
    pub response_timeout_ms: u64,
    /// Cluster: how often a command is retried while the cluster moves slots or fails over (waits grow
    /// from 50 to 500 ms, so the default of 20 spans about 5 s, more than a failover takes).
    pub cluster_retries: u32,
    /// Replicas that must confirm each write (Redis WAIT) before dq answers it (0: don't wait).
    pub wait_replicas: u32,
    /// How long a write waits for `wait_replicas` confirmations before it is answered `unavailable`.
    pub wait_timeout_ms: u64,
    /// TLS (`rediss://`): a PEM file of the CA certificates to trust instead of the system's, for a
    /// Redis whose certificate a private CA signed.
    pub tls_ca_file: Option<PathBuf>,
    /// TLS: a PEM client certificate, for a Redis that asks clients for one (`tls-auth-clients yes`).
    /// Needs `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// TLS: the PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Start even when a primary's `maxmemory-policy` is not `noeviction` (Redis may then evict job
    /// records and queues: lost jobs). Off: every process refuses to start on such a Redis. On: it starts,
    /// logs an error and sets `dq_redis_config_ok{check="maxmemory_policy"}` to 0.
    pub allow_eviction: bool,
    /// The old setting, refused with a message saying what replaced it.
    #[serde(skip_serializing)]
    shards: Option<serde::de::IgnoredAny>,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            mode: RedisMode::Standalone,
            urls: vec!["redis://127.0.0.1:6379".into()],
            sentinel_master: "mymaster".into(),
            partitions: None,
            key_partitions: None,
            prefix: "dq".into(),
            pool_size: 1,
            connect_timeout_ms: 1000,
            response_timeout_ms: 2000,
            cluster_retries: 20,
            wait_replicas: 0,
            wait_timeout_ms: 1000,
            allow_eviction: false,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            shards: None,
        }
    }
}

impl RedisSettings {
    /// Checks what the types alone do not.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.shards.is_some() {
            return Err(invalid(
                "redis.shards",
                "is replaced by redis.mode and redis.urls (Redis Cluster or Sentinel for more than one Redis); \
                 data stored under redis.shards is converted by `dq-checker migrate`",
            ));
        }
        if self.urls.is_empty() {
            return Err(invalid("redis.urls", "at least one Redis URL is needed"));
        }
        if self.mode == RedisMode::Standalone && self.urls.len() > 1 {
            return Err(invalid(
                "redis.urls",
                "standalone mode takes one URL; for several Redis use redis.mode = cluster or sentinel",
            ));
        }
        for url in &self.urls {
            redis::Client::open(url.as_str())
                .map_err(|e| invalid("redis.urls", format!("`{}` is not a Redis URL: {e}", redact(url))))?;
        }
        if self.mode == RedisMode::Sentinel && self.sentinel_master.is_empty() {
            return Err(invalid("redis.sentinel_master", "must name the primary"));
        }
        if let Some(p) = self.partitions
            && !(1..=MAX_PARTITIONS).contains(&p)
        {
            return Err(invalid(
                "redis.partitions",
                format!("must be between 1 and {MAX_PARTITIONS}, got {p}"),
            ));
        }
        if let Some(k) = self.key_partitions {
            let most = self.partitions.unwrap_or(MAX_PARTITIONS);
            if !(1..=most).contains(&k) {
                return Err(invalid(
                    "redis.key_partitions",
                    format!("must be between 1 and {most} (redis.partitions or its most), got {k}"),
                ));
            }
        }
        if self.prefix.is_empty()
            || self
                .prefix
                .contains(|c: char| c.is_whitespace() || c == '{' || c == '}')
        {
            return Err(invalid("redis.prefix", "must be non-empty, without spaces or braces"));
        }
        if self.pool_size == 0 {
            return Err(invalid("redis.pool_size", "must be at least 1"));
        }
        if self.connect_timeout_ms == 0 {
            return Err(invalid("redis.connect_timeout_ms", "must be at least 1"));
        }
        if self.response_timeout_ms == 0 {
            return Err(invalid("redis.response_timeout_ms", "must be at least 1"));
        }
        if self.wait_timeout_ms == 0 {
            return Err(invalid("redis.wait_timeout_ms", "must be at least 1"));
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err(invalid(
                "redis.tls_cert_file",
                "a client certificate needs its key: set both redis.tls_cert_file and redis.tls_key_file, or neither",
            ));
        }
        if self.tls_certificates()?.is_some() && !self.urls.iter().any(|u| u.starts_with("rediss://")) {
            return Err(invalid(
                "redis.tls_ca_file",
                "TLS files are set but no URL in redis.urls uses TLS (rediss://)",
            ));
        }
        Ok(())
    }

    /// The TLS files, read: `None` when none is set (TLS, if any, trusts the system's CAs).
    pub fn tls_certificates(&self) -> Result<Option<redis::TlsCertificates>, ConfigError> {
        fn read(key: &'static str, path: &Option<PathBuf>) -> Result<Option<Vec<u8>>, ConfigError> {
            path.as_ref()
                .map(|p| std::fs::read(p).map_err(|e| invalid(key, format!("cannot read {}: {e}", p.display()))))
                .transpose()
        }
        let root_cert = read("redis.tls_ca_file", &self.tls_ca_file)?;
        let client_tls = match (
            read("redis.tls_cert_file", &self.tls_cert_file)?,
            read("redis.tls_key_file", &self.tls_key_file)?,
        ) {
            (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
            _ => None,
        };
        if root_cert.is_none() && client_tls.is_none() {
            return Ok(None);
        }
        Ok(Some(redis::TlsCertificates { client_tls, root_cert }))
    }
}

/// A Redis URL without its credentials, for logs and errors: the user info (`user:pass@`, `:pass@`)
/// and a `password` in the query (`?password=`) become `***`. A URL that does not parse keeps only what
/// comes after its last `@`, in case it held one.
pub fn redact(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return match url.rsplit_once('@') {
            Some((_, rest)) => format!("***@{rest}"),
            None => url.to_string(),
        };
    };
    if u.password().is_some() || !u.username().is_empty() {
        let _ = u.set_username("");
        let _ = u.set_password(Some("***"));
    }
    if u.query_pairs().any(|(k, _)| k.eq_ignore_ascii_case("password")) {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("password") {
                    "***".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://:secret@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(redact("rediss://dq:secret@host:6379"), "rediss://:***@host:6379");
        assert_eq!(redact("redis://dq@host:6379"), "redis://:***@host:6379");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            redact("redis://host:6379/0?password=secret&protocol=resp3"),
            "redis://host:6379/0?password=***&protocol=resp3"
        );
        assert_eq!(
            redact("redis://host:6379/?PASSWORD=secret"),
            "redis://host:6379/?PASSWORD=***"
        );
        assert_eq!(redact("not a url :secret@host"), "***@host");
        for url in [
            "redis://u:p%40ss@h:1",
            "redis://h:1?password=p%26x",
            "rediss://:s@[::1]:6380/2",
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains("p%40ss") && !shown.contains("p%26x") && !shown.contains(":s@"),
                "{shown}"
            );
        }
    }
}
