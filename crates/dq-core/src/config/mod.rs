//! Settings for every dq binary: one TOML file with a section per concern, every key overridable from the
//! environment as `DQ__SECTION__KEY` (lists comma-separated), defaults that run against one local Redis.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod auth;
mod diff;
mod egress;
mod redis;
mod secrets;
mod telemetry;
pub use self::auth::{AuthSettings, KeySpec, Scope, TokenSpec};
pub use self::diff::changed_keys;
pub use self::egress::EgressSettings;
pub use self::redis::{RedisMode, RedisSettings, redact};
pub use self::secrets::SecretsSettings;
pub use self::telemetry::{TelemetrySettings, traces_url};

/// A configuration that cannot be used; the message names the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file or environment could not be read or did not fit the settings' shape.
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    /// A key has a value outside what dq accepts.
    #[error("configuration key `{key}`: {message}")]
    Invalid {
        /// Dotted key, e.g. `redis.shards`.
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
}

/// A refusal of `key`'s value, with what is wrong with it.
fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// All settings. Each binary reads the sections it needs. `Serialize` is for comparing two of them
/// ([`changed_keys`], on SIGHUP), never for showing them: they hold secrets.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where the jobs live.
    pub redis: RedisSettings,
    /// dq-server's HTTP listener.
    pub server: ServerSettings,
    /// Bounds on what producers and consumers may ask for.
    pub limits: Limits,
    /// Values a job gets when its push does not say.
    pub jobs: JobDefaults,
    /// Where the binaries without an HTTP API serve `/metrics`.
    pub metrics: MetricsSettings,
    /// How long a draining process may take to finish what it holds.
    pub shutdown: ShutdownSettings,
    /// dq-timer's batch sizes and bucket leases.
    pub timer: TimerSettings,
    /// How processes follow the topic registry.
    pub topics: TopicSettings,
    /// dq-checker: health checks, alerts, depths, audit.
    pub checker: CheckerSettings,
    /// Log format and level.
    pub log: LogSettings,
    /// Who may call dq-server's API.
    pub auth: AuthSettings,
    /// Where callbacks may go, and how much of their answers dq-consumer reads.
    pub egress: EgressSettings,
    /// The keys that seal callback secrets and header values in Redis.
    pub secrets: SecretsSettings,
    /// dq-server's beanstalkd protocol listener.
    pub beanstalkd: BeanstalkdSettings,
    /// Where every binary exports its spans (none: no spans).
    pub telemetry: TelemetrySettings,
    /// The file these settings were read from, if any: read again on SIGHUP ([`crate::reload`]).
    #[serde(skip)]
    pub file: Option<std::path::PathBuf>,
}

/// dq-server's beanstalkd protocol listener (docs/beanstalkd.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BeanstalkdSettings {
    /// Address to listen on for the protocol; none (the default) serves no protocol.
    pub listen: Option<String>,
    /// Largest job body a `put` may carry, in bytes (beanstalkd's `-z`, 65,535 by default).
    pub max_job_size: usize,
    /// The protocol has no authentication: a listen address that is not loopback is refused unless this
    /// says the network in front of it decides who connects.
    pub allow_remote: bool,
    /// Most protocol connections at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for BeanstalkdSettings {
    fn default() -> Self {
        Self {
            listen: None,
            max_job_size: 65_535,
            allow_remote: false,
            max_connections: 10_000,
        }
    }
}

/// dq-server's listener.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address the HTTP API binds.
    pub listen: String,
    /// Host names requests may be addressed to (the `Host` header, without its port). Empty: any, when
    /// tokens are configured; IP addresses and `localhost` only, when the API is open (a page that
    /// rebinds its own name to 127.0.0.1 cannot drive an open API from a browser).
    pub allowed_hosts: Vec<String>,
    /// Time a connection has to send a complete request head, counted from its opening or from its
    /// previous answer: idle keep-alive connections and slow senders are closed after it.
    pub header_timeout_ms: u64,
    /// Connections served at once; one more gets a 503 and is closed.
    pub max_connections: usize,
    /// Long-poll reserves waiting at once; one more gets a 503 at once.
    pub max_long_polls: usize,
    /// The admin pages show no controls, and dq-server refuses every change that comes from them (a
    /// request authenticated by the admin login's cookie, or a browser's same-origin request): for a
    /// view of production that cannot be clicked into a change. Tokens in `Authorization` still work.
    pub admin_read_only: bool,
    /// PEM file of the certificate chain dq-server presents, its own certificate first: with `tls_key`
    /// the API is served over HTTPS (docs/security.md). Read at start and again on SIGHUP, so a renewed
    /// certificate needs no restart.
    pub tls_cert: Option<PathBuf>,
    /// PEM file of `tls_cert`'s private key.
    pub tls_key: Option<PathBuf>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:6789".into(),
            allowed_hosts: Vec::new(),
            header_timeout_ms: 30_000,
            max_connections: 16_384,
            max_long_polls: 10_000,
            admin_read_only: false,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// Limits on requests. Anything outside them is refused with a 4xx before reaching Redis.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest job body (its JSON text), in bytes.
    pub max_body_bytes: usize,
    /// Largest delay, and farthest `run_at` in the future, in ms.
    pub max_delay_ms: u64,
    /// Shortest TTR a job may ask for, in ms.
    pub min_ttr_ms: u64,
    /// Longest TTR a job may ask for, in ms.
    pub max_ttr_ms: u64,
    /// Most jobs in one push-many request.
    pub max_batch: usize,
    /// Largest `max_attempts` a job may ask for (0, unlimited, is always allowed).
    pub max_attempts: u32,
    /// Most jobs one reserve may ask for.
    pub max_reserve_count: usize,
    /// Longest long poll of a reserve, in ms.
    pub max_reserve_timeout_ms: u64,
    /// Most topics one reserve may name.
    pub max_reserve_topics: usize,
    /// Longest `error` text kept with a nack, in bytes.
    pub max_error_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 * 1024,
            max_delay_ms: 366 * 24 * 3600 * 1000,
            min_ttr_ms: 1000,
            max_ttr_ms: 24 * 3600 * 1000,
            max_batch: 1000,
            max_attempts: 1000,
            max_reserve_count: 100,
            max_reserve_timeout_ms: 30_000,
            max_reserve_topics: 32,
            max_error_bytes: 4096,
        }
    }
}

impl Limits {
    /// Largest request body the API accepts: a full batch of the largest jobs is refused as too large
    /// anyway, so this bounds memory per request rather than job size.
    pub fn max_request_bytes(&self) -> usize {
        (self.max_body_bytes + 1024).max(8 * 1024 * 1024)
    }
}

/// Defaults for what a push does not say.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobDefaults {
    /// TTR of a job whose push does not give one, in ms.
    pub ttr_ms: u64,
    /// Deliveries before a job goes dead (0 = unlimited).
    pub max_attempts: u32,
    /// Delays after failed deliveries, in ms: the i-th after the i-th failure, the last one repeats.
    pub backoff_ms: Vec<u64>,
    /// How long an acked job's record stays for lookups, in ms (0 = delete at once).
    pub done_retention_ms: u64,
    /// How long a dead job is kept, in ms from its death (0 = until requeued or deleted). Enforced by
    /// the dq-checker that holds the lease.
    pub dead_retention_ms: u64,
    /// Most dead jobs kept per topic, over all partitions; past it the oldest deaths go first (0 = no
    /// cap). Enforced by the dq-checker that holds the lease.
    pub dead_max_per_topic: u64,
    /// Keep each job's delivery attempts (the newest 20, with the job): `GET /v1/jobs/{id}/attempts`.
    pub attempt_history: bool,
}

impl Default for JobDefaults {
    fn default() -> Self {
        Self {
            ttr_ms: 30_000,
            max_attempts: 10,
            // The schedule operators know: 1, 3, 5, 7 … minutes (2n - 1).
            backoff_ms: (1..=9).map(|n| (2 * n - 1) * 60_000).collect(),
            done_retention_ms: 3_600_000,
            // Thirty days: long enough to notice, fix the cause and requeue.
            dead_retention_ms: 30 * 24 * 3_600_000,
            dead_max_per_topic: 10_000,
            attempt_history: true,
        }
    }
}

/// Metrics listener of the binaries that have no HTTP API of their own.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Address serving `/metrics`; each binary has its own default port.
    pub listen: Option<String>,
}

/// Draining.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownSettings {
    /// How long a draining process may take to finish in-flight work before handing it back, in ms.
    pub grace_ms: u64,
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        Self { grace_ms: 30_000 }
    }
}

/// dq-timer.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimerSettings {
    /// Most jobs one promotion or expiry script moves, so that one call never holds Redis long.
    pub batch_size: u32,
    /// How long a timer's claim on a bucket lasts without renewal: the bound on takeover after a crash.
    pub lease_ms: u64,
    /// How often a timer renews its claims and rebalances buckets among the live timers.
    pub renew_ms: u64,
}

impl Default for TimerSettings {
    fn default() -> Self {
        Self {
            batch_size: 1000,
            lease_ms: 1500,
            renew_ms: 250,
        }
    }
}

/// The topic registry as every process follows it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicSettings {
    /// How often a process re-reads the registry: the bound on how long a registration change takes to
    /// reach every dq-server and dq-consumer.
    pub refresh_ms: u64,
}

impl Default for TopicSettings {
    fn default() -> Self {
        Self { refresh_ms: 1000 }
    }
}

/// dq-checker.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckerSettings {
    /// How often every partition is checked and queue depths are published, in ms.
    pub interval_ms: u64,
    /// Where alerts are POSTed as JSON; none for no webhook.
    pub webhook_url: Option<String>,
    /// SMTP server for alert e-mail, e.g. `smtp://mail.internal:25` or `smtps://user:pass@host:465`.
    pub smtp_url: Option<String>,
    /// Sender of alert e-mail.
    pub mail_from: String,
    /// Recipients of alert e-mail.
    pub mail_to: Vec<String>,
    /// Ready jobs of one topic above which a backlog alert goes out, for topics whose registration sets no
    /// `backlog_threshold` of their own (none: no backlog alerts for them).
    pub backlog_threshold: Option<u64>,
    /// How often the consistency audit runs, in ms (0: only on demand, `dq-checker audit`).
    pub audit_interval_ms: u64,
    /// How often the checker that holds the lease removes what nothing needs any more: counts fields
    /// at 0 and the registry's tombstones of older releases, in ms.
    pub housekeeping_interval_ms: u64,
    /// How long one alert delivery (webhook or mail) may take, in ms.
    pub alert_timeout_ms: u64,
    /// Waits between the tries of a dead-job or success hook (`callback.on_dead_url`, `on_success_url`), in
    /// ms: the i-th after the i-th failed try; after the last, the hook is given up. One try more than
    /// there are waits.
    pub dead_hook_backoff_ms: Vec<u64>,
}

impl Default for CheckerSettings {
    fn default() -> Self {
        Self {
            interval_ms: 1000,
            webhook_url: None,
            smtp_url: None,
            mail_from: "dq-checker@localhost".into(),
            mail_to: Vec::new(),
            backlog_threshold: None,
            audit_interval_ms: 600_000,
            housekeeping_interval_ms: 600_000,
            alert_timeout_ms: 5000,
            // 11 tries over about an hour: 5 s, 15 s, 30 s, 1, 2, 5, 10 minutes, then every 15 minutes.
            dead_hook_backoff_ms: vec![
                5_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 900_000, 900_000,
            ],
        }
    }
}

/// Logging.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// `text` for people, `json` for log pipelines.
    pub format: String,
    /// A tracing filter, e.g. `info` or `dq_server=debug,info`; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: "text".into(),
            level: "info".into(),
        }
    }
}

impl Settings {
    /// Reads the file at `path` (if any), then `DQ__*` environment variables, then checks every value.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(path, std::env::vars())
    }

    /// Like [`Settings::load`] with the environment given, so tests need not touch the process's own.
    pub fn load_from(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(path) = path {
            builder = builder.add_source(config::File::from(path).required(true));
        }
        let env: config::Map<String, String> = env.into_iter().filter(|(k, _)| k.starts_with("DQ__")).collect();
        builder = builder.add_source(
            config::Environment::with_prefix("DQ")
                .prefix_separator("__")
                .separator("__")
                .list_separator(",")
                .with_list_parse_key("redis.urls")
                .with_list_parse_key("jobs.backoff_ms")
                .with_list_parse_key("checker.mail_to")
                .with_list_parse_key("checker.dead_hook_backoff_ms")
                .with_list_parse_key("server.allowed_hosts")
                .with_list_parse_key("egress.deny")
                .with_list_parse_key("egress.allow")
                .with_list_parse_key("secrets.keys")
                .try_parsing(true)
                .source(Some(env)),
        );
        let mut settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        settings.file = path.map(Path::to_path_buf);
        Ok(settings)
    }

    /// Checks what the types alone do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.redis.validate()?;
        self.auth.validate()?;
        self.egress.validate()?;
        self.secrets.validate()?;
        self.telemetry.validate()?;
        self.server
            .listen
            .parse::<SocketAddr>()
            .map_err(|e| invalid("server.listen", format!("`{}`: {e}", self.server.listen)))?;
        // The files are read by dq-server at start and on SIGHUP, not here: a certificate being replaced
        // must not stop a reload of the tokens, which reads these settings again.
        if self.server.tls_cert.is_some() != self.server.tls_key.is_some() {
            let (key, other) = match self.server.tls_cert {
                Some(_) => ("server.tls_key", "server.tls_cert"),
                None => ("server.tls_cert", "server.tls_key"),
            };
            return Err(invalid(
                key,
                format!("HTTPS needs the certificate and its key: {other} is set, {key} is not (set both, or neither)"),
            ));
        }
        if let Some(listen) = &self.beanstalkd.listen {
            let addr = listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("beanstalkd.listen", format!("`{listen}`: {e}")))?;
            if !addr.ip().is_loopback() && !self.beanstalkd.allow_remote {
                return Err(invalid(
                    "beanstalkd.listen",
                    format!(
                        "`{listen}` is not a loopback address and the beanstalkd protocol has no authentication: \
                         set beanstalkd.allow_remote = true once a firewall or network policy decides who may connect"
                    ),
                ));
            }
        }
        if !(1..=16 * 1024 * 1024).contains(&self.beanstalkd.max_job_size) {
            return Err(invalid("beanstalkd.max_job_size", "must be between 1 and 16777216"));
        }
        if self.beanstalkd.max_connections == 0 {
            return Err(invalid("beanstalkd.max_connections", "must be at least 1"));
        }
        if let Some(listen) = &self.metrics.listen {
            listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("metrics.listen", format!("`{listen}`: {e}")))?;
        }
        if self.limits.min_ttr_ms == 0 || self.limits.min_ttr_ms > self.limits.max_ttr_ms {
            return Err(invalid(
                "limits.min_ttr_ms",
                "must be at least 1 and at most limits.max_ttr_ms",
            ));
        }
        if !(self.limits.min_ttr_ms..=self.limits.max_ttr_ms).contains(&self.jobs.ttr_ms) {
            return Err(invalid(
                "jobs.ttr_ms",
                "must lie within limits.min_ttr_ms ..= limits.max_ttr_ms",
            ));
        }
        if self.jobs.backoff_ms.is_empty() {
            return Err(invalid("jobs.backoff_ms", "needs at least one delay"));
        }
        for (key, value) in [
            ("server.max_connections", self.server.max_connections),
            ("server.max_long_polls", self.server.max_long_polls),
            ("server.header_timeout_ms", self.server.header_timeout_ms as usize),
            ("limits.max_batch", self.limits.max_batch),
            ("limits.max_reserve_count", self.limits.max_reserve_count),
            ("limits.max_reserve_topics", self.limits.max_reserve_topics),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        // A batch's sorted-set adds are unpacked onto Lua's stack, which holds about 8000 values.
        if self.limits.max_batch > 2000 {
            return Err(invalid("limits.max_batch", "must be at most 2000"));
        }
        if self.jobs.max_attempts > self.limits.max_attempts {
            return Err(invalid("jobs.max_attempts", "must not exceed limits.max_attempts"));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&self.log.level) {
            return Err(invalid("log.level", format!("`{}`: {e}", self.log.level)));
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(invalid("log.format", "must be `text` or `json`"));
        }
        // Scripts unpack a batch onto Lua's stack, which holds about 8000 values.
        if !(1..=5000).contains(&self.timer.batch_size) {
            return Err(invalid("timer.batch_size", "must be between 1 and 5000"));
        }
        if self.checker.interval_ms == 0 {
            return Err(invalid("checker.interval_ms", "must be at least 1"));
        }
        if self.checker.alert_timeout_ms == 0 {
            return Err(invalid("checker.alert_timeout_ms", "must be at least 1"));
        }
        if self.checker.dead_hook_backoff_ms.is_empty() || self.checker.dead_hook_backoff_ms.len() > 100 {
            return Err(invalid(
                "checker.dead_hook_backoff_ms",
                "needs between 1 and 100 delays",
            ));
        }
        if let Some(url) = &self.checker.webhook_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid("checker.webhook_url", format!("`{url}` is not an http(s) URL")));
        }
        if self.checker.smtp_url.is_some() && self.checker.mail_to.is_empty() {
            return Err(invalid(
                "checker.mail_to",
                "needs at least one recipient when checker.smtp_url is set",
            ));
        }
        if self.topics.refresh_ms == 0 {
            return Err(invalid("topics.refresh_ms", "must be at least 1"));
        }
        if self.timer.renew_ms == 0 {
            return Err(invalid("timer.renew_ms", "must be at least 1"));
        }
        if self.timer.lease_ms <= self.timer.renew_ms {
            return Err(invalid("timer.lease_ms", "must be above timer.renew_ms"));
        }
        // An excerpt goes into last_error, which holds at most what a nack's error may.
        if self.egress.excerpt_bytes > self.limits.max_error_bytes {
            return Err(invalid(
                "egress.excerpt_bytes",
                "must not exceed limits.max_error_bytes",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_without_file_or_env() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(s.redis.urls, vec!["redis://127.0.0.1:6379"]);
        assert_eq!(s.redis.mode, RedisMode::Standalone);
        assert_eq!(s.redis.partitions, None);
        assert_eq!(s.redis.key_partitions, None);
        assert_eq!(s.server.listen, "127.0.0.1:6789");
        assert_eq!(s.shutdown.grace_ms, 30_000);
        assert_eq!(s.jobs.backoff_ms[..4], [60_000, 180_000, 300_000, 420_000]);
        assert_eq!(s.jobs.max_attempts, 10);
        assert_eq!(s.telemetry.otlp_endpoint, None, "no spans by default");
        let s = Settings::load_from(None, env(&[("DQ__TELEMETRY__OTLP_ENDPOINT", "http://127.0.0.1:4318")])).unwrap();
        assert_eq!(s.telemetry.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
    }

    #[test]
    fn env_overrides_with_comma_separated_urls() {
        let s = Settings::load_from(
            None,
            env(&[
                ("DQ__REDIS__MODE", "cluster"),
                ("DQ__REDIS__URLS", "redis://127.0.0.1:7001,redis://127.0.0.1:7002"),
                ("DQ__REDIS__PARTITIONS", "1024"),
                ("DQ__SERVER__LISTEN", "0.0.0.0:9000"),
                ("DQ__SHUTDOWN__GRACE_MS", "5000"),
                ("OTHER", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(s.redis.urls, vec!["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]);
        assert_eq!(s.redis.mode, RedisMode::Cluster);
        assert_eq!(s.redis.partitions, Some(1024));
        assert_eq!(s.server.listen, "0.0.0.0:9000");
        assert_eq!(s.shutdown.grace_ms, 5000);
    }

    #[test]
    fn egress_lists_are_comma_separated_in_the_environment() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert!(s.egress.deny.is_empty() && s.egress.allow.is_empty());
        assert_eq!((s.egress.max_answer_bytes, s.egress.excerpt_bytes), (65_536, 0));
        let s = Settings::load_from(
            None,
            env(&[
                ("DQ__EGRESS__DENY", "10.0.0.0/8,fd00::/8"),
                ("DQ__EGRESS__ALLOW", "10.1.0.0/16"),
                ("DQ__EGRESS__EXCERPT_BYTES", "200"),
            ]),
        )
        .unwrap();
        assert_eq!(s.egress.deny, ["10.0.0.0/8", "fd00::/8"]);
        assert_eq!(s.egress.allow, ["10.1.0.0/16"]);
        assert_eq!(s.egress.excerpt_bytes, 200);
    }

    #[test]
    fn dead_hook_waits_are_a_comma_separated_list_of_one_to_a_hundred() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(s.checker.dead_hook_backoff_ms.len(), 10, "11 tries");
        let total: u64 = s.checker.dead_hook_backoff_ms.iter().sum();
        assert!((3_000_000..=4_500_000).contains(&total), "about an hour: {total} ms");
        let s = Settings::load_from(None, env(&[("DQ__CHECKER__DEAD_HOOK_BACKOFF_MS", "200,500")])).unwrap();
        assert_eq!(s.checker.dead_hook_backoff_ms, [200, 500]);
        let many = vec!["1"; 101].join(",");
        let err = Settings::load_from(None, env(&[("DQ__CHECKER__DEAD_HOOK_BACKOFF_MS", &many)])).unwrap_err();
        assert!(err.to_string().contains("checker.dead_hook_backoff_ms"), "{err}");
    }

    #[test]
    fn file_then_env() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7000\"\n[jobs]\nttr_ms = 5000\n").unwrap();
        let s = Settings::load_from(Some(&path), env(&[("DQ__JOBS__TTR_MS", "6000")])).unwrap();
        assert_eq!(s.server.listen, "127.0.0.1:7000");
        assert_eq!(s.jobs.ttr_ms, 6000);
    }

    #[test]
    fn key_partitions_are_at_most_the_partitions() {
        let both = |p: &str, k: &str| {
            Settings::load_from(
                None,
                env(&[("DQ__REDIS__PARTITIONS", p), ("DQ__REDIS__KEY_PARTITIONS", k)]),
            )
        };
        assert_eq!(both("64", "64").unwrap().redis.key_partitions, Some(64));
        let err = both("64", "65").unwrap_err().to_string();
        assert!(
            err.contains("redis.key_partitions") && err.contains("between 1 and 64"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            ("DQ__SERVER__LISTEN", "not an address", "server.listen"),
            ("DQ__REDIS__URLS", "http://x", "redis.urls"),
            ("DQ__REDIS__PARTITIONS", "0", "redis.partitions"),
            ("DQ__REDIS__PARTITIONS", "5000", "redis.partitions"),
            ("DQ__REDIS__KEY_PARTITIONS", "0", "redis.key_partitions"),
            ("DQ__REDIS__KEY_PARTITIONS", "5000", "redis.key_partitions"),
            ("DQ__REDIS__MODE", "ring", "mode"),
            ("DQ__REDIS__SHARDS", "redis://x", "redis.shards"),
            ("DQ__REDIS__WAIT_TIMEOUT_MS", "0", "redis.wait_timeout_ms"),
            ("DQ__LOG__FORMAT", "xml", "log.format"),
            ("DQ__LOG__LEVEL", "dq_core=loud", "log.level"),
            ("DQ__SHUTDOWN__GRACE_MS", "soon", "grace_ms"),
            ("DQ__SERVER__LISTN", "x", "listn"),
            ("DQ__LIMITS__MAX_RESERVE_COUNT", "0", "limits.max_reserve_count"),
            ("DQ__TIMER__BATCH_SIZE", "9000", "timer.batch_size"),
            ("DQ__TIMER__RENEW_MS", "5000", "timer.lease_ms"),
            ("DQ__REDIS__CONNECT_TIMEOUT_MS", "0", "redis.connect_timeout_ms"),
            ("DQ__EGRESS__DENY", "10.0.0.0/8,10.0.0.0/33", "egress.deny"),
            ("DQ__EGRESS__ALLOW", "intranet", "egress.allow"),
            ("DQ__EGRESS__MAX_ANSWER_BYTES", "0", "egress.max_answer_bytes"),
            ("DQ__EGRESS__EXCERPT_BYTES", "5000", "egress.excerpt_bytes"),
            ("DQ__BEANSTALKD__LISTEN", "localhost", "beanstalkd.listen"),
            ("DQ__BEANSTALKD__LISTEN", "0.0.0.0:11300", "beanstalkd.allow_remote"),
            ("DQ__BEANSTALKD__MAX_JOB_SIZE", "0", "beanstalkd.max_job_size"),
            ("DQ__BEANSTALKD__MAX_CONNECTIONS", "0", "beanstalkd.max_connections"),
            ("DQ__SERVER__TLS_CERT", "/etc/dq/cert.pem", "server.tls_key"),
            ("DQ__SERVER__TLS_KEY", "/etc/dq/key.pem", "server.tls_cert"),
            (
                "DQ__TELEMETRY__OTLP_ENDPOINT",
                "localhost:4318",
                "telemetry.otlp_endpoint",
            ),
        ];
        for (k, v, named) in cases {
            let err = Settings::load_from(None, env(&[(k, v)])).unwrap_err().to_string();
            assert!(err.contains(named), "{k}={v}: {err}");
        }
    }

    #[test]
    fn https_takes_the_certificate_and_its_key_together() {
        let both = [
            ("DQ__SERVER__TLS_CERT", "/etc/dq/cert.pem"),
            ("DQ__SERVER__TLS_KEY", "/etc/dq/key.pem"),
        ];
        let s = Settings::load_from(None, env(&both)).unwrap();
        assert_eq!(s.server.tls_cert.as_deref(), Some(Path::new("/etc/dq/cert.pem")));
        assert_eq!(s.server.tls_key.as_deref(), Some(Path::new("/etc/dq/key.pem")));
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert!(s.server.tls_cert.is_none() && s.server.tls_key.is_none());
    }

    #[test]
    fn the_beanstalkd_protocol_is_served_off_loopback_only_when_allowed() {
        let open = [
            ("DQ__BEANSTALKD__LISTEN", "0.0.0.0:11300"),
            ("DQ__BEANSTALKD__ALLOW_REMOTE", "true"),
        ];
        let s = Settings::load_from(None, env(&open)).unwrap();
        assert_eq!(s.beanstalkd.listen.as_deref(), Some("0.0.0.0:11300"));
        let s = Settings::load_from(None, env(&[("DQ__BEANSTALKD__LISTEN", "[::1]:11300")])).unwrap();
        assert!(!s.beanstalkd.allow_remote && s.beanstalkd.max_job_size == 65_535);
        assert_eq!(Settings::load_from(None, env(&[])).unwrap().beanstalkd.listen, None);
    }

    #[test]
    fn tls_files_are_checked_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, "not read as PEM until a connection is made").unwrap();
        let pem = pem.to_str().unwrap().to_string();
        let tls_url = ("DQ__REDIS__URLS", "rediss://127.0.0.1:6380".to_string());
        let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
            (
                vec![tls_url.clone(), ("DQ__REDIS__TLS_CERT_FILE", pem.clone())],
                "redis.tls_cert_file",
            ),
            (
                vec![
                    tls_url.clone(),
                    ("DQ__REDIS__TLS_CA_FILE", "/nonexistent/ca.pem".into()),
                ],
                "cannot read",
            ),
            (
                vec![("DQ__REDIS__TLS_CA_FILE", pem.clone())],
                "no URL in redis.urls uses TLS",
            ),
        ];
        for (vars, named) in cases {
            let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let err = Settings::load_from(None, env(&vars)).unwrap_err().to_string();
            assert!(err.contains(named), "{vars:?}: {err}");
        }
        let ok = Settings::load_from(
            None,
            env(&[(tls_url.0, tls_url.1.as_str()), ("DQ__REDIS__TLS_CA_FILE", &pem)]),
        );
        let certs = ok.unwrap().redis.tls_certificates().unwrap().unwrap();
        assert!(certs.root_cert.is_some() && certs.client_tls.is_none());
    }

    #[test]
    fn the_shipped_example_is_the_defaults() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/dq.toml"));
        let mut from_file = Settings::load_from(Some(path), env(&[])).unwrap();
        assert_eq!(from_file.file.as_deref(), Some(path), "remembered, for SIGHUP");
        from_file.file = None;
        let defaults = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = Settings::load_from(Some(Path::new("/nonexistent/dq.toml")), env(&[])).unwrap_err();
        assert!(err.to_string().contains("dq.toml"), "{err}");
    }
}
