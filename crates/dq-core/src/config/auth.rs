//! `[auth]`: who may call dq-server's API. Tokens are never stored in clear: a scoped token is its
//! SHA-256; the one admin token (`auth.admin_token`, meant for `DQ__AUTH__ADMIN_TOKEN` in the
//! environment file) is hashed when the settings are read and then forgotten.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{ConfigError, invalid};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Push, push many, reschedule and cancel jobs.
    Produce,
    /// Reserve, ack, nack and touch.
    Consume,
    /// Look up jobs, stats, topics, dead lists, metrics.
    Read,
    /// Everything, including topics, dead-list requeue and delete, and the admin pages.
    Admin,
}

impl Scope {
    /// Its name in config and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Produce => "produce",
            Scope::Consume => "consume",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }
}

/// One scoped token (`[[auth.tokens]]`).
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    /// Shown in logs and metrics, never the token.
    pub name: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// Glob patterns of the topics it may touch (`*` any run of characters, `?` one); absent: every topic.
    #[serde(default)]
    pub topics: Option<Vec<String>>,
}

impl std::fmt::Debug for TokenSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSpec")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("topics", &self.topics)
            .finish_non_exhaustive()
    }
}

/// A token as dq-server checks it: its SHA-256, not the token.
#[derive(Debug, Clone)]
pub struct KeySpec {
    /// The token's name.
    pub name: String,
    /// SHA-256 of the token.
    pub sha256: [u8; 32],
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// Glob patterns of its topics; `None`: every topic.
    pub topics: Option<Vec<String>>,
}

/// `[auth]`.
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// One token with every scope, in clear (from `DQ__AUTH__ADMIN_TOKEN`, in the environment file).
    pub admin_token: Option<String>,
    /// Scoped tokens, stored hashed.
    pub tokens: Vec<TokenSpec>,
    /// Serve without tokens on a non-loopback address (`DQ__AUTH__INSECURE`). Off: without a token
    /// dq-server refuses to listen anywhere but loopback.
    pub insecure: bool,
}

impl std::fmt::Debug for AuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSettings")
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<set>"))
            .field("tokens", &self.tokens)
            .field("insecure", &self.insecure)
            .finish()
    }
}

impl AuthSettings {
    /// Whether any token is configured (else the API is open, on loopback only unless `insecure`).
    pub fn enabled(&self) -> bool {
        self.admin_token.as_deref().is_some_and(|t| !t.is_empty()) || !self.tokens.is_empty()
    }

    /// Every token, hashed: the admin token first, named `admin`.
    pub fn keys(&self) -> Vec<KeySpec> {
        let mut keys = Vec::new();
        if let Some(t) = self.admin_token.as_deref().filter(|t| !t.is_empty()) {
            keys.push(KeySpec {
                name: "admin".to_string(),
                sha256: Sha256::digest(t.as_bytes()).into(),
                scopes: vec![Scope::Admin],
                topics: None,
            });
        }
        for t in &self.tokens {
            let mut sha256 = [0u8; 32];
            // Checked in validate.
            if hex::decode_to_slice(t.sha256.trim(), &mut sha256).is_ok() {
                keys.push(KeySpec {
                    name: t.name.clone(),
                    sha256,
                    scopes: t.scopes.clone(),
                    topics: t.topics.clone(),
                });
            }
        }
        keys
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        for t in &self.tokens {
            if t.name.trim().is_empty() {
                return Err(invalid("auth.tokens.name", "every token needs a name"));
            }
            if !names.insert(t.name.as_str()) {
                return Err(invalid("auth.tokens.name", format!("`{}` names two tokens", t.name)));
            }
            let mut hash = [0u8; 32];
            if hex::decode_to_slice(t.sha256.trim(), &mut hash).is_err() {
                return Err(invalid(
                    "auth.tokens.sha256",
                    format!(
                        "token `{}`: 64 hex digits are needed (the SHA-256 of the token, e.g. `printf %s \"$TOKEN\" | sha256sum`)",
                        t.name
                    ),
                ));
            }
            if t.scopes.is_empty() {
                return Err(invalid(
                    "auth.tokens.scopes",
                    format!("token `{}` has no scope", t.name),
                ));
            }
            if let Some(patterns) = &t.topics {
                if patterns.is_empty() {
                    return Err(invalid(
                        "auth.tokens.topics",
                        format!(
                            "token `{}`: an empty list allows no topic; leave it out for every topic",
                            t.name
                        ),
                    ));
                }
                for p in patterns {
                    globset::Glob::new(p).map_err(|e| {
                        invalid("auth.tokens.topics", format!("token `{}`: pattern `{p}`: {e}", t.name))
                    })?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, sha256: &str, scopes: &[Scope], topics: Option<&[&str]>) -> TokenSpec {
        TokenSpec {
            name: name.into(),
            sha256: sha256.into(),
            scopes: scopes.to_vec(),
            topics: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn bad_tokens_are_refused_naming_the_key() {
        let good = "a".repeat(64);
        let cases = [
            (vec![token("", &good, &[Scope::Read], None)], "auth.tokens.name"),
            (
                vec![
                    token("a", &good, &[Scope::Read], None),
                    token("a", &good, &[Scope::Read], None),
                ],
                "names two tokens",
            ),
            (vec![token("a", "abc", &[Scope::Read], None)], "auth.tokens.sha256"),
            (vec![token("a", &good, &[], None)], "auth.tokens.scopes"),
            (vec![token("a", &good, &[Scope::Read], Some(&[]))], "auth.tokens.topics"),
            (
                vec![token("a", &good, &[Scope::Read], Some(&["orders.[x"]))],
                "orders.[x",
            ),
        ];
        for (tokens, named) in cases {
            let auth = AuthSettings {
                tokens,
                ..AuthSettings::default()
            };
            let err = auth.validate().unwrap_err().to_string();
            assert!(err.contains(named), "{err}");
        }
        let ok = AuthSettings {
            admin_token: Some("root".into()),
            tokens: vec![token("a", &good, &[Scope::Produce], Some(&["orders.*"]))],
            insecure: false,
        };
        ok.validate().unwrap();
        assert!(ok.enabled());
        assert_eq!(ok.keys().len(), 2);
        assert!(!format!("{ok:?}").contains("root"), "the admin token is not printed");
    }
}
