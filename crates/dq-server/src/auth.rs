//! Who may call the API: bearer tokens with scopes (`produce`, `consume`, `read`, `admin`), optionally
//! limited to topic patterns (`[auth]` in the settings).
//!
//! [`admit`] runs (from the guard middleware) before every route but `/healthz`, `/readyz`, the admin login,
//! `/openapi.json` and `/docs`: it finds the
//! token among the configured ones (by its SHA-256, compared in constant time with every key, so the
//! time taken tells nothing about which key came close) and hands the handler a [`Caller`]; each handler
//! asks the caller for the scope and topic it needs. Without any token configured the API is open, and
//! dq-server listens on loopback only (see [`check_listen`]). Tokens are never logged: a caller is known
//! by its token's name. SIGHUP reads the settings again and swaps the keys ([`Auth::reload`]).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use dq_core::config::{AuthSettings, Scope};
use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `dq_auth_refusals_total` with each reason it counts, served from the start.
pub const REFUSALS: dq_core::series::Counter = dq_core::series::Counter::labelled(
    "dq_auth_refusals_total",
    &[(
        "reason",
        &["no_token", "bad_token", "bad_login", "cross_site", "host", "read_only"],
    )],
);

use crate::error::ApiError;

/// The cookie the admin login sets: the token itself, `HttpOnly; Secure; SameSite=Strict`.
pub const COOKIE: &str = "dq_token";

/// One configured token.
#[derive(Debug)]
struct Key {
    name: String,
    hash: [u8; 32],
    scopes: Vec<Scope>,
    topics: Option<GlobSet>,
}

/// The configured tokens.
#[derive(Debug)]
pub struct Keyring {
    keys: Vec<Arc<Key>>,
    /// The caller of an open API (no token configured): every scope, every topic. Made once, so a
    /// request costs one reference count.
    open: Arc<Key>,
}

impl Keyring {
    /// The keys of `[auth]`; an error names the token whose topic pattern does not compile.
    pub fn new(settings: &AuthSettings) -> anyhow::Result<Self> {
        let mut keys = Vec::new();
        for spec in settings.keys() {
            let name = spec.name;
            let topics = match spec.topics {
                None => None,
                Some(patterns) => {
                    let mut set = GlobSetBuilder::new();
                    for p in &patterns {
                        set.add(Glob::new(p).map_err(|e| anyhow::anyhow!("auth.tokens `{name}`: pattern `{p}`: {e}"))?);
                    }
                    Some(set.build()?)
                }
            };
            keys.push(Arc::new(Key {
                name,
                hash: spec.sha256,
                scopes: spec.scopes,
                topics,
            }));
        }
        let open = Arc::new(Key {
            name: "open".into(),
            hash: [0; 32],
            scopes: vec![Scope::Admin],
            topics: None,
        });
        Ok(Keyring { keys, open })
    }

    /// No token configured: the API is open.
    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// The caller `token` makes, if it is one of the keys. Every key is compared, in constant time.
    fn find(&self, token: &str) -> Option<Caller> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.hash.ct_eq(&hash)) {
                found = Some(key);
            }
        }
        found.map(|k| Caller(k.clone()))
    }
}

/// The keys in force, swapped on SIGHUP.
#[derive(Debug)]
pub struct Auth {
    ring: RwLock<Arc<Keyring>>,
}

impl Auth {
    /// The keys of `settings`.
    pub fn new(settings: &AuthSettings) -> anyhow::Result<Self> {
        Ok(Auth {
            ring: RwLock::new(Arc::new(Keyring::new(settings)?)),
        })
    }

    fn ring(&self) -> Arc<Keyring> {
        self.ring.read().expect("auth lock").clone()
    }

    /// No token configured now: the API is open.
    pub fn is_open(&self) -> bool {
        self.ring().is_open()
    }

    /// Takes the tokens of `settings`, read again on SIGHUP; keeps the ones in force when they cannot be
    /// used.
    pub fn reload(&self, settings: &AuthSettings) {
        match Keyring::new(settings) {
            Ok(ring) => {
                let names: Vec<&str> = ring.keys.iter().map(|k| k.name.as_str()).collect();
                tracing::info!(tokens = ?names, "SIGHUP: tokens read again");
                if ring.is_open() && !self.ring().is_open() {
                    tracing::warn!("SIGHUP: the settings now have no token; the API stays closed until a restart");
                    return;
                }
                *self.ring.write().expect("auth lock") = Arc::new(ring);
            }
            Err(e) => tracing::warn!(cause = %e, "SIGHUP: cannot use the tokens; the ones in force stay"),
        }
    }
}

/// Refuses to serve an open API (no token) on anything but loopback, unless `auth.insecure`.
pub fn check_listen(settings: &AuthSettings, addr: SocketAddr) -> anyhow::Result<()> {
    if settings.enabled() || settings.insecure || addr.ip().is_loopback() {
        return Ok(());
    }
    anyhow::bail!(
        "dq-server has no API token (auth.admin_token or auth.tokens) and will not serve the open API on {addr} \
         (server.listen), where anyone who reaches it could read and delete every job: configure a token, \
         listen on a loopback address, or set auth.insecure = true (DQ__AUTH__INSECURE=true) to serve it anyway"
    )
}

/// Who is calling: the token that came with the request (its name, scopes and topics).
#[derive(Debug, Clone)]
pub struct Caller(Arc<Key>);

impl Caller {
    /// The token's name (`open` without tokens), for messages.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    fn has(&self, scope: Scope) -> bool {
        self.0.scopes.iter().any(|s| *s == scope || *s == Scope::Admin)
    }

    /// Whether the token is limited to some topics.
    pub fn limited(&self) -> bool {
        self.0.topics.is_some()
    }

    /// Whether the token may see `topic` at all (listings leave out the others).
    pub fn sees(&self, topic: &str) -> bool {
        self.0.topics.as_ref().is_none_or(|t| t.is_match(topic))
    }

    /// 403 unless the token has `scope` (or `admin`) and may touch `topic`.
    pub fn allow(&self, scope: Scope, topic: &str) -> Result<(), ApiError> {
        self.allow_scope(scope)?;
        if !self.sees(topic) {
            return Err(ApiError::forbidden(format!(
                "token `{}` may not use topic `{topic}`",
                self.name()
            )));
        }
        Ok(())
    }

    /// 403 unless the token has `scope` (or `admin`); its topics are checked by the caller, or the
    /// answer is filtered with [`Caller::sees`].
    pub fn allow_scope(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "token `{}` lacks the `{}` scope",
                self.name(),
                scope.as_str()
            )))
        }
    }

    /// 403 unless the token has `scope` for every topic (what spans all topics: metrics).
    pub fn allow_everywhere(&self, scope: Scope) -> Result<(), ApiError> {
        self.allow_scope(scope)?;
        if self.limited() {
            return Err(ApiError::forbidden(format!(
                "token `{}` is limited to some topics; this needs a token for every topic",
                self.name()
            )));
        }
        Ok(())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("a token is required"))
    }
}

/// The token a request carries: `Authorization: Bearer <token>`, else the admin login's cookie.
fn token(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, token) = v.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    login_cookie(headers)
}

/// The admin login's cookie (`dq_token`), if the request carries it.
pub(crate) fn login_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// Whether `path` is served without a token: the probes, the admin login and its files, and the API's
/// description (`/openapi.json`, Swagger UI at `/docs`), which holds no data.
pub(crate) fn public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/admin/login" | "/openapi.json" | "/docs"
    ) || path.starts_with("/admin/static/")
        || path.starts_with("/docs/")
}

/// Puts the [`Caller`] of a request's token in its extensions, or answers the refusal: 401, or for the
/// admin pages a redirect to the login. Run by [`crate::browser::guard`], the one middleware every
/// request goes through.
pub fn admit(auth: &Auth, req: &mut Request) -> Option<Response> {
    let path = req.uri().path();
    if public(path) {
        return None;
    }
    let ring = auth.ring();
    let caller = if ring.is_open() {
        Some(Caller(ring.open.clone()))
    } else {
        token(req.headers()).and_then(|t| ring.find(t))
    };
    if let Some(caller) = caller {
        req.extensions_mut().insert(caller);
        return None;
    }
    let had = token(req.headers()).is_some();
    metrics::counter!("dq_auth_refusals_total", "reason" => if had { "bad_token" } else { "no_token" }).increment(1);
    if path == "/admin" || path.starts_with("/admin/") {
        return Some(Redirect::to("/admin/login").into_response());
    }
    let mut answer = ApiError::unauthorized(if had {
        "the token is not valid"
    } else {
        "a token is required: send `Authorization: Bearer <token>`"
    })
    .into_response();
    answer
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    Some(answer)
}

/// Whether `token` is an admin token now (the admin login).
pub fn is_admin(auth: &Auth, token: &str) -> bool {
    let ring = auth.ring();
    ring.is_open() || ring.find(token).is_some_and(|c| c.has(Scope::Admin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_core::config::TokenSpec;

    fn hex_sha(t: &str) -> String {
        hex::encode(Sha256::digest(t.as_bytes()))
    }

    fn ring() -> Keyring {
        let settings = AuthSettings {
            admin_token: Some("root".into()),
            tokens: vec![TokenSpec {
                name: "orders".into(),
                sha256: hex_sha("o-secret"),
                scopes: vec![Scope::Produce, Scope::Read],
                topics: Some(vec!["orders.*".into()]),
            }],
            insecure: false,
        };
        Keyring::new(&settings).unwrap()
    }

    #[test]
    fn tokens_map_to_their_scopes_and_topics() {
        let ring = ring();
        assert!(ring.find("nope").is_none());
        let admin = ring.find("root").unwrap();
        assert!(admin.allow(Scope::Consume, "x").is_ok() && admin.allow_everywhere(Scope::Read).is_ok());
        let orders = ring.find("o-secret").unwrap();
        assert_eq!(orders.name(), "orders");
        assert!(orders.allow(Scope::Produce, "orders.close").is_ok());
        assert_eq!(orders.allow(Scope::Produce, "billing").unwrap_err().status, 403);
        assert_eq!(orders.allow(Scope::Consume, "orders.close").unwrap_err().status, 403);
        assert_eq!(orders.allow_everywhere(Scope::Read).unwrap_err().status, 403);
    }

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=b; dq_token=t1".parse().unwrap());
        assert_eq!(token(&h), Some("t1"));
        h.insert(header::AUTHORIZATION, "Bearer t2".parse().unwrap());
        assert_eq!(token(&h), Some("t2"));
        h.insert(header::AUTHORIZATION, "Basic dDI6".parse().unwrap());
        assert_eq!(token(&h), None);
    }

    #[test]
    fn an_open_api_listens_on_loopback_only() {
        let open = AuthSettings::default();
        assert!(check_listen(&open, "127.0.0.1:1".parse().unwrap()).is_ok());
        assert!(check_listen(&open, "[::1]:1".parse().unwrap()).is_ok());
        let err = check_listen(&open, "0.0.0.0:1".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("auth.insecure"), "{err}");
        let insecure = AuthSettings {
            insecure: true,
            ..AuthSettings::default()
        };
        assert!(check_listen(&insecure, "0.0.0.0:1".parse().unwrap()).is_ok());
    }
}
