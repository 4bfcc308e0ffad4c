//! Which keys differ between two settings: what a reload on SIGHUP compares, to apply the keys that can
//! change live and name the ones that need a restart.
//!
//! The settings are compared as their serialized trees, so a key added to a section is compared without
//! this file knowing it. A list (`redis.urls`, `auth.tokens`) is one value: its key is named, never an
//! element, since elements hold secrets (passwords in URLs, token hashes).

use serde_json::Value;

use super::Settings;

/// The dotted keys (`redis.urls`, `checker.webhook_url`) whose values differ between `old` and `new`,
/// sorted. Names only: a key's value may be a secret.
pub fn changed_keys(old: &Settings, new: &Settings) -> Vec<String> {
    let (old, new) = (tree(old), tree(new));
    let mut changed = Vec::new();
    compare("", &old, &new, &mut changed);
    changed.sort();
    changed
}

/// The settings as a tree of values; they are plain data, so this cannot fail.
fn tree(settings: &Settings) -> Value {
    serde_json::to_value(settings).expect("settings serialize")
}

/// Adds to `changed` every leaf under `path` that differs. Tables are walked; anything else (a list, a
/// table that is now absent) is compared whole.
fn compare(path: &str, old: &Value, new: &Value, changed: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let path = join(path, key);
                compare(&path, value, b.get(key).unwrap_or(&Value::Null), changed);
            }
            for (key, value) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
                compare(&join(path, key), &Value::Null, value, changed);
            }
        }
        (a, b) if a != b => changed.push(path.to_string()),
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Scope, TokenSpec};

    #[test]
    fn equal_settings_differ_in_nothing() {
        let s = Settings::default();
        assert!(changed_keys(&s, &s.clone()).is_empty());
    }

    #[test]
    fn every_changed_key_is_named_by_its_dotted_path() {
        let old = Settings::default();
        let mut new = old.clone();
        new.log.level = "debug".into();
        new.redis.partitions = Some(64);
        new.checker.webhook_url = Some("http://alerts.internal/hook".into());
        new.egress.deny = vec!["10.0.0.0/8".into()];
        new.server.tls_cert = Some("/etc/dq/cert.pem".into());
        assert_eq!(
            changed_keys(&old, &new),
            [
                "checker.webhook_url",
                "egress.deny",
                "log.level",
                "redis.partitions",
                "server.tls_cert",
            ]
        );
        assert_eq!(
            changed_keys(&new, &old).len(),
            5,
            "a key set back to its default is a change too"
        );
    }

    #[test]
    fn lists_are_named_whole_and_secrets_never_appear() {
        let old = Settings::default();
        let mut new = old.clone();
        new.redis.urls = vec!["redis://:hunter2@10.0.0.1:6379".into()];
        new.auth.admin_token = Some("root-token".into());
        new.auth.tokens = vec![TokenSpec {
            name: "ci".into(),
            sha256: "ab".repeat(32),
            scopes: vec![Scope::Read],
            topics: None,
        }];
        new.secrets.keys = vec!["c2VjcmV0".into()];
        let changed = changed_keys(&old, &new);
        assert_eq!(
            changed,
            ["auth.admin_token", "auth.tokens", "redis.urls", "secrets.keys"]
        );
        let text = changed.join(" ");
        for secret in ["hunter2", "root-token", "abab", "c2VjcmV0", "ci"] {
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn the_file_read_is_not_a_setting() {
        let old = Settings::default();
        let mut new = old.clone();
        new.file = Some("/etc/dq/dq.toml".into());
        assert!(changed_keys(&old, &new).is_empty());
    }
}
