//! Topics: the checks of a topic's registration (dq-api's [`TopicConfig`]: callback, retry policy,
//! defaults, paused) against this installation's limits and egress policy, and its secrets sealed at rest.
//!
//! A topic without a callback is pulled through the API; one with a callback is delivered by
//! dq-consumer, and may name a `callback.on_dead_url` that dq-checker POSTs each job that goes dead to.
//! Registration is optional: pushing to an unregistered topic uses the global defaults.

use crate::condition::Condition;
use crate::config::Limits;
use crate::egress::Policy;
use crate::error::{Error, Result};
use crate::sealed::{SealError, Sealer};

pub use dq_api::topic::{Callback, Flow, MASK, MAX_RATE, Retry, TopicConfig, TopicDefaults, masked_url};

/// Calls `f` with every value of `cb` kept sealed at rest and its context (topic and field), which the
/// seal is bound to.
fn for_each_secret(cb: &mut Callback, topic: &str, mut f: impl FnMut(&mut String, &str)) {
    if let Some(s) = &mut cb.secret {
        f(s, &format!("{topic}\0secret"));
    }
    if let Some(s) = &mut cb.previous_secret {
        f(s, &format!("{topic}\0previous_secret"));
    }
    for (name, v) in &mut cb.headers {
        f(v, &format!("{topic}\0header\0{}", name.to_ascii_lowercase()));
    }
}

/// The highest `flow.concurrency` a topic may set.
pub const MAX_FLOW_CONCURRENCY: u32 = 1_000_000;

/// Checks a token bucket (`<section>.rate_per_s`, `<section>.burst`).
fn check_bucket(section: &str, rate_per_s: Option<f64>, burst: Option<u32>) -> Result<()> {
    let bad = |m: String| Err(Error::Invalid(m));
    if let Some(r) = rate_per_s
        && !(r > 0.0 && r <= MAX_RATE)
    {
        return bad(format!(
            "`{section}.rate_per_s` must be above 0 and at most {MAX_RATE}, got {r}"
        ));
    }
    if let Some(b) = burst {
        if rate_per_s.is_none() {
            return bad(format!("`{section}.burst` needs `{section}.rate_per_s`"));
        }
        if !(1..=MAX_RATE as u32).contains(&b) {
            return bad(format!("`{section}.burst` must be between 1 and {MAX_RATE}, got {b}"));
        }
    }
    Ok(())
}

/// Headers dq sets itself, which a topic may not override (`traceparent` and `tracestate`: a job's trace
/// context).
const RESERVED_HEADERS: [&str; 8] = [
    "content-type",
    "content-length",
    "host",
    "idempotency-key",
    "x-dq-job-id",
    "x-dq-attempt",
    "traceparent",
    "tracestate",
];

/// What dq does with a registration besides showing it: check it, keep masked values, seal its secrets.
/// (A trait, as `TopicConfig` is dq-api's: `use dq_core::topic::TopicRules` where these are called.)
pub trait TopicRules: Sized {
    /// Checks everything once, at registration: a bad topic is refused with a message naming the field.
    /// A callback URL whose host is an IP address is checked against the `egress` policy here (its
    /// spellings normalised); a host name is checked by dq-consumer on what it resolves to at connect.
    fn validate(&self, limits: &Limits, egress: &Policy) -> Result<()>;

    /// Puts back the stored values of fields sent as the API shows them masked: a `secret`,
    /// `previous_secret` or header value of `***`, and a URL equal to the stored URL masked. So a
    /// registration read with GET can be edited and sent back whole (the admin's editor does) without
    /// writing `***` over a secret. A masked value with nothing stored to keep is refused.
    fn keep_masked(&mut self, stored: Option<&Self>) -> Result<()>;

    /// The config as the registry stores it for `topic`: secrets and header values sealed.
    fn sealed(&self, topic: &str, sealer: &Sealer) -> Self;

    /// A stored config with its sealed values opened.
    fn opened(&self, topic: &str, sealer: &Sealer) -> std::result::Result<Self, SealError>;

    /// Whether a stored config holds a value sealed under an older key, or not sealed though a key is
    /// configured (to seal again: `dq-checker secrets rekey`).
    fn is_stale(&self, sealer: &Sealer) -> bool;
}

impl TopicRules for TopicConfig {
    fn validate(&self, limits: &Limits, egress: &Policy) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if let Some(flow) = &self.flow {
            if let Some(c) = flow.concurrency
                && !(1..=MAX_FLOW_CONCURRENCY).contains(&c)
            {
                return bad(format!(
                    "`flow.concurrency` must be between 1 and {MAX_FLOW_CONCURRENCY}, got {c}"
                ));
            }
            check_bucket("flow", flow.rate_per_s, flow.burst)?;
        }
        crate::graph::check_topic(self)?;
        if let Some(cb) = &self.callback {
            check_url("callback.url", &cb.url, egress)?;
            if let Some(url) = &cb.on_dead_url {
                check_url("callback.on_dead_url", url, egress)?;
            }
            if let Some(url) = &cb.on_success_url {
                check_url("callback.on_success_url", url, egress)?;
            }
            if cb.on_success_headers.len() > 32
                || cb
                    .on_success_headers
                    .iter()
                    .any(|h| h.is_empty() || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)))
            {
                return bad("`callback.on_success_headers` holds at most 32 header names (A-Z a-z 0-9 - _)".into());
            }
            if !(1..=300_000).contains(&cb.timeout_ms) {
                return bad(format!(
                    "`callback.timeout_ms` must be between 1 and 300000, got {}",
                    cb.timeout_ms
                ));
            }
            if !(1..=4096).contains(&cb.concurrency) {
                return bad(format!(
                    "`callback.concurrency` must be between 1 and 4096, got {}",
                    cb.concurrency
                ));
            }
            check_bucket("callback", cb.rate_per_s, cb.burst)?;
            for (name, value) in &cb.headers {
                let valid_name =
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
                if !valid_name || value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
                    return bad(format!("`callback.headers` has an invalid header `{name}`"));
                }
                if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
                    || name.to_ascii_lowercase().starts_with("x-dq-")
                {
                    return bad(format!("`callback.headers` may not set `{name}`: dq sets it"));
                }
            }
            if cb.secret.as_deref() == Some("") {
                return bad("`callback.secret` must not be empty".into());
            }
        }
        if let Some(m) = self.retry.max_attempts
            && m > limits.max_attempts
        {
            return bad(format!(
                "`retry.max_attempts` must be between 0 (unlimited) and {}, got {m}",
                limits.max_attempts
            ));
        }
        if let Some(b) = &self.retry.backoff_ms {
            crate::job::check_backoff(b, "retry.backoff_ms", limits)?;
        }
        if let Some(a) = self.retry.max_age_ms {
            crate::job::check_max_age(i64::try_from(a).unwrap_or(i64::MAX), "retry.max_age_ms", limits)?;
        }
        if let Some(c) = &self.retry.condition {
            Condition::parse(c).map_err(|e| Error::Invalid(format!("`retry.condition`: {e}")))?;
        }
        if let Some(t) = self.defaults.ttr_ms
            && !(limits.min_ttr_ms..=limits.max_ttr_ms).contains(&t)
        {
            return bad(format!(
                "`defaults.ttr_ms` must be between {} and {}, got {t}",
                limits.min_ttr_ms, limits.max_ttr_ms
            ));
        }
        if let Some(d) = self.defaults.delay_ms
            && d > limits.max_delay_ms
        {
            return bad(format!(
                "`defaults.delay_ms` {d} is beyond the limit of {} ms",
                limits.max_delay_ms
            ));
        }
        Ok(())
    }

    fn keep_masked(&mut self, stored: Option<&TopicConfig>) -> Result<()> {
        let Some(cb) = &mut self.callback else {
            return Ok(());
        };
        let old = stored.and_then(|s| s.callback.as_ref());
        let refuse = |field: &str| {
            Err(Error::Invalid(format!(
                "`{field}` is `***`, the mask dq shows, and there is no stored value to keep: give the value itself"
            )))
        };
        for (field, value, kept) in [
            ("callback.secret", &mut cb.secret, old.and_then(|o| o.secret.clone())),
            (
                "callback.previous_secret",
                &mut cb.previous_secret,
                old.and_then(|o| o.previous_secret.clone()),
            ),
        ] {
            if value.as_deref() == Some(MASK) {
                match kept {
                    Some(k) => *value = Some(k),
                    None => return refuse(field),
                }
            }
        }
        for (name, value) in cb.headers.iter_mut() {
            if value == MASK {
                match old.and_then(|o| o.headers.get(name)) {
                    Some(k) => value.clone_from(k),
                    None => return refuse(&format!("callback.headers.{name}")),
                }
            }
        }
        for (field, url, kept) in [
            ("callback.url", Some(&mut cb.url), old.map(|o| o.url.clone())),
            (
                "callback.on_dead_url",
                cb.on_dead_url.as_mut(),
                old.and_then(|o| o.on_dead_url.clone()),
            ),
            (
                "callback.on_success_url",
                cb.on_success_url.as_mut(),
                old.and_then(|o| o.on_success_url.clone()),
            ),
        ] {
            let Some(url) = url else { continue };
            if masked_url(url) == *url && url.contains(MASK) {
                match kept.filter(|k| masked_url(k) == *url && k != url) {
                    Some(k) => *url = k,
                    None => return refuse(field),
                }
            }
        }
        Ok(())
    }

    fn sealed(&self, topic: &str, sealer: &Sealer) -> TopicConfig {
        let mut c = self.clone();
        if let Some(cb) = &mut c.callback {
            for_each_secret(cb, topic, |v, context| *v = sealer.seal(v, context));
        }
        c
    }

    fn opened(&self, topic: &str, sealer: &Sealer) -> std::result::Result<TopicConfig, SealError> {
        let mut c = self.clone();
        let mut failed = None;
        if let Some(cb) = &mut c.callback {
            for_each_secret(cb, topic, |v, context| match sealer.open(v, context) {
                Ok(plain) => *v = plain,
                Err(e) => failed = Some(e),
            });
        }
        failed.map_or(Ok(c), Err)
    }

    fn is_stale(&self, sealer: &Sealer) -> bool {
        let mut stale = false;
        if let Some(cb) = &self.callback {
            let mut cb = cb.clone();
            for_each_secret(&mut cb, "", |v, _| stale |= sealer.is_stale(v));
        }
        stale
    }
}

/// Refuses `url` (the value of `field`) unless it is an `http` or `https` URL with a host, and, when the
/// host is an IP address, one the egress policy allows.
fn check_url(field: &str, url: &str, egress: &Policy) -> Result<()> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => match egress.check_url(&u) {
            Ok(()) => Ok(()),
            Err(refused) => Err(Error::Invalid(format!("`{field}` `{url}`: {refused}"))),
        },
        Ok(_) => Err(Error::Invalid(format!(
            "`{field}` must be an http or https URL, got `{url}`"
        ))),
        Err(e) => Err(Error::Invalid(format!("`{field}` `{url}` is not a URL: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<TopicConfig> {
        let c: TopicConfig = serde_json::from_str(json).map_err(|e| Error::Invalid(e.to_string()))?;
        c.validate(&Limits::default(), &Policy::default()).map(|_| c)
    }

    #[test]
    fn the_design_example_is_valid() {
        let c = check(
            r#"{"callback": {"url": "http://10.0.0.5:8080/hooks/order-close", "timeout_ms": 5000, "concurrency": 32,
                "secret": "s3cr3t"},
                "retry": {"max_attempts": 10, "backoff_ms": [60000, 180000, 300000],
                "condition": "{res.code} != 200 && {res.data.status} != 2"},
                "defaults": {"ttr_ms": 30000}}"#,
        )
        .unwrap();
        assert_eq!(c.callback.as_ref().unwrap().concurrency, 32);
        assert_eq!(c.redacted().callback.unwrap().secret.as_deref(), Some("***"));
        assert!(!format!("{c:?}").contains("s3cr3t"), "Debug never shows the secret");
    }

    #[test]
    fn defaults_fill_in() {
        let c = check(r#"{"callback": {"url": "https://example.com/x"}}"#).unwrap();
        let cb = c.callback.unwrap();
        assert_eq!((cb.timeout_ms, cb.concurrency), (5000, 16));
        assert_eq!(check("{}").unwrap(), TopicConfig::default());
    }

    #[test]
    fn the_burst_is_one_seconds_worth_of_the_rate_unless_given() {
        let cb = |json: &str| check(json).unwrap().callback.unwrap();
        assert_eq!(
            cb(r#"{"callback": {"url": "http://x", "rate_per_s": 50}}"#).burst_or_default(),
            50
        );
        assert_eq!(
            cb(r#"{"callback": {"url": "http://x", "rate_per_s": 0.2}}"#).burst_or_default(),
            1
        );
        assert_eq!(
            cb(r#"{"callback": {"url": "http://x", "rate_per_s": 2.5}}"#).burst_or_default(),
            3
        );
        let given = cb(r#"{"callback": {"url": "http://x", "rate_per_s": 50, "burst": 7}}"#);
        assert_eq!(given.burst_or_default(), 7);
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (json, field) in [
            (r#"{"callback": {"url": "ftp://x/y"}}"#, "callback.url"),
            (r#"{"callback": {"url": "not a url"}}"#, "callback.url"),
            (
                r#"{"callback": {"url": "http://x", "timeout_ms": 0}}"#,
                "callback.timeout_ms",
            ),
            (
                r#"{"callback": {"url": "http://x", "concurrency": 0}}"#,
                "callback.concurrency",
            ),
            (
                r#"{"callback": {"url": "http://x", "rate_per_s": 0}}"#,
                "callback.rate_per_s",
            ),
            (
                r#"{"callback": {"url": "http://x", "rate_per_s": -1.5}}"#,
                "callback.rate_per_s",
            ),
            (
                r#"{"callback": {"url": "http://x", "rate_per_s": 1e9}}"#,
                "callback.rate_per_s",
            ),
            (r#"{"callback": {"url": "http://x", "burst": 5}}"#, "callback.burst"),
            (
                r#"{"callback": {"url": "http://x", "rate_per_s": 5, "burst": 0}}"#,
                "callback.burst",
            ),
            (
                r#"{"callback": {"url": "http://x", "headers": {"X-DQ-Attempt": "1"}}}"#,
                "callback.headers",
            ),
            (
                r#"{"callback": {"url": "http://x", "headers": {"TraceParent": "1"}}}"#,
                "callback.headers",
            ),
            (
                r#"{"callback": {"url": "http://x", "headers": {"bad name": "1"}}}"#,
                "callback.headers",
            ),
            (r#"{"callback": {"url": "http://x", "secret": ""}}"#, "callback.secret"),
            (
                r#"{"callback": {"url": "http://x", "on_dead_url": "ftp://x/y"}}"#,
                "callback.on_dead_url",
            ),
            (
                r#"{"callback": {"url": "http://x", "on_dead_url": "dead"}}"#,
                "callback.on_dead_url",
            ),
            (r#"{"retry": {"max_attempts": 100000}}"#, "retry.max_attempts"),
            (r#"{"retry": {"backoff_ms": []}}"#, "retry.backoff_ms"),
            (r#"{"retry": {"backoff_ms": [99999999999999]}}"#, "retry.backoff_ms"),
            (r#"{"retry": {"max_age_ms": 0}}"#, "retry.max_age_ms"),
            (r#"{"retry": {"max_age_ms": 99999999999999}}"#, "retry.max_age_ms"),
            (r#"{"retry": {"condition": "{res.code} = 200"}}"#, "retry.condition"),
            (r#"{"defaults": {"ttr_ms": 1}}"#, "defaults.ttr_ms"),
            (r#"{"defaults": {"delay_ms": 99999999999999}}"#, "defaults.delay_ms"),
            (r#"{"calback": {}}"#, "calback"),
        ] {
            let err = check(json).unwrap_err().to_string();
            assert!(err.contains(field), "{json}: {err}");
        }
    }

    #[test]
    fn callbacks_to_refused_addresses_name_the_rule() {
        for (url, rule) in [
            ("http://169.254.169.254/latest/meta-data/", "(link-local)"),
            ("http://[::ffff:169.254.169.254]/", "(link-local)"),
            ("http://2852039166/", "(link-local)"),
            ("http://0.0.0.0:8080/", "(unspecified)"),
        ] {
            let json = format!(r#"{{"callback": {{"url": "{url}"}}}}"#);
            let err = check(&json).unwrap_err().to_string();
            assert!(err.contains("callback.url") && err.contains(rule), "{url}: {err}");
            let json = format!(r#"{{"callback": {{"url": "http://10.0.0.5/", "on_dead_url": "{url}"}}}}"#);
            let err = check(&json).unwrap_err().to_string();
            assert!(
                err.contains("callback.on_dead_url") && err.contains(rule),
                "{url}: {err}"
            );
        }
        let config: TopicConfig = serde_json::from_str(r#"{"callback": {"url": "http://127.0.0.1:6379/"}}"#).unwrap();
        let settings = crate::config::EgressSettings::default();
        let policy = Policy::new(&settings, vec!["127.0.0.1:6379".parse().unwrap()]);
        let err = config.validate(&Limits::default(), &policy).unwrap_err().to_string();
        assert!(err.contains("redis node 127.0.0.1:6379"), "{err}");
        check(r#"{"callback": {"url": "http://metadata.internal/"}}"#).expect("names are checked at connect");
    }

    #[test]
    fn masked_values_sent_back_keep_the_stored_ones() {
        let stored: TopicConfig = serde_json::from_str(
            r#"{"callback": {"url": "https://u:pw@h.example/hook", "secret": "a", "previous_secret": "b",
                             "headers": {"X-Key": "k"}, "on_dead_url": "https://h.example/dead?key=t0k"}}"#,
        )
        .unwrap();
        // What GET shows, edited (the timeout) and sent back whole.
        let mut sent = stored.redacted();
        assert_eq!(
            sent.callback.as_ref().unwrap().on_dead_url.as_deref(),
            Some("https://h.example/dead?key=***")
        );
        sent.callback.as_mut().unwrap().timeout_ms = 900;
        sent.keep_masked(Some(&stored)).unwrap();
        let cb = sent.callback.unwrap();
        assert_eq!(cb.url, "https://u:pw@h.example/hook");
        assert_eq!(cb.on_dead_url.as_deref(), Some("https://h.example/dead?key=t0k"));
        assert_eq!(
            (cb.secret.as_deref(), cb.previous_secret.as_deref()),
            (Some("a"), Some("b"))
        );
        assert_eq!(cb.headers["X-Key"], "k");
        assert_eq!(cb.timeout_ms, 900);
        // A masked value with nothing stored, or a masked URL of another host, is refused.
        for (json, against, field) in [
            (
                r#"{"callback": {"url": "http://h/", "secret": "***"}}"#,
                None,
                "callback.secret",
            ),
            (
                r#"{"callback": {"url": "http://h/", "headers": {"X-Other": "***"}}}"#,
                Some(&stored),
                "callback.headers.X-Other",
            ),
            (
                r#"{"callback": {"url": "https://u:***@elsewhere.example/hook"}}"#,
                Some(&stored),
                "callback.url",
            ),
        ] {
            let mut c: TopicConfig = serde_json::from_str(json).unwrap();
            let e = c.keep_masked(against).unwrap_err().to_string();
            assert!(e.contains(field), "{json}: {e}");
        }
        // Real values pass untouched.
        let mut c: TopicConfig =
            serde_json::from_str(r#"{"callback": {"url": "http://h/", "secret": "new"}}"#).unwrap();
        c.keep_masked(Some(&stored)).unwrap();
        assert_eq!(c.callback.unwrap().secret.as_deref(), Some("new"));
    }

    #[test]
    fn credentials_in_the_url_and_every_secret_are_masked_where_shown() {
        assert_eq!(
            masked_url("https://user:pw@hooks.example/x?a=1"),
            "https://user:***@hooks.example/x?a=***"
        );
        // Webhook URLs carry their token in the query: every value is masked, names and empty values stay.
        assert_eq!(
            masked_url("https://hooks.example.com/x?token=s3cr3t&channel=ops&flag="),
            "https://hooks.example.com/x?token=***&channel=***&flag="
        );
        assert_eq!(
            masked_url("https://hooks.example.com/x?"),
            "https://hooks.example.com/x?"
        );
        assert_eq!(
            masked_url("https://tok3n@hooks.example/x"),
            "https://***@hooks.example/x"
        );
        assert_eq!(masked_url("http://10.0.0.5:8080/hook"), "http://10.0.0.5:8080/hook");
        let c = check(
            r#"{"callback": {"url": "https://u:pw@h.example/", "secret": "a", "previous_secret": "b",
                             "headers": {"X-Key": "k"}, "on_dead_url": "https://d:pw@h.example/dead"}}"#,
        )
        .unwrap();
        let shown = serde_json::to_string(&c.redacted()).unwrap();
        for clear in ["pw@", "\"a\"", "\"b\"", "\"k\""] {
            assert!(!shown.contains(clear), "{clear} in {shown}");
        }
        let debug = format!("{c:?}");
        assert!(!debug.contains("pw@") && !debug.contains("\"b\""), "{debug}");
    }

    #[test]
    fn a_registration_is_sealed_for_its_topic_and_opens_back() {
        let sealer = Sealer::new(&[[7; 32]]);
        let c = check(
            r#"{"callback": {"url": "http://h/", "secret": "a", "previous_secret": "b", "headers": {"X-Key": "k"}}}"#,
        )
        .unwrap();
        let stored = c.sealed("orders", &sealer);
        let text = serde_json::to_string(&stored).unwrap();
        assert!(!text.contains("\"a\"") && !text.contains("\"k\""), "{text}");
        assert!(!stored.is_stale(&sealer));
        assert!(c.is_stale(&sealer), "plaintext with a key configured is stale");
        let opened = stored.opened("orders", &sealer).unwrap();
        assert_eq!(
            serde_json::to_value(&opened).unwrap(),
            serde_json::to_value(&c).unwrap()
        );
        assert!(stored.opened("payments", &sealer).is_err(), "bound to its topic");
    }
}
