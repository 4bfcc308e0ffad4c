//! What protects the API from browsers on other sites: a request that changes state (any method but
//! GET, HEAD and OPTIONS) is refused with 403 when the browser says it comes from another site
//! (`Sec-Fetch-Site: cross-site`, or an `Origin` whose host is not the one the request was sent to),
//! so a page elsewhere cannot use an operator's admin cookie (or a browser on the internal network) to
//! push, pause or delete. Clients that are not browsers send neither header and are not affected. Every
//! answer also tells browsers not to show it in a frame (`X-Frame-Options: DENY`, CSP
//! `frame-ancestors 'none'`), so the admin pages cannot be overlaid by another site (clickjacking).
//!
//! A request that carries a body must say it is JSON (`Content-Type: application/json`): a browser
//! sends a form or plain text to another site without asking it first (no CORS preflight), but not
//! JSON, so this closes the way cross-site forms would take.
//!
//! A request addressed to a host name that is not allowed (`server.allowed_hosts`; for an open API,
//! IP addresses and `localhost` only) is refused with 403: a page whose name an attacker rebinds to
//! 127.0.0.1 (DNS rebinding) is same-origin with itself, so only the name tells it apart.

use std::sync::Arc;

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};

use axum::body::HttpBody;
use axum::extract::Request;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use futures_util::future::{Either, Map};

use tower::{Layer, Service};

use crate::auth::Auth;
use crate::error::ApiError;

/// What the guard needs: whether the API is open now, and the allowed host names.
#[derive(Debug)]
pub struct Guard {
    /// The tokens in force.
    pub auth: Arc<Auth>,
    /// `server.allowed_hosts`, lowercase.
    pub allowed_hosts: Arc<Vec<String>>,
    /// The largest request body read (`limits`, read again on SIGHUP): a larger `Content-Length` is
    /// refused before the body is read, and a body without one is cut off there.
    pub max_body: std::sync::atomic::AtomicUsize,
    /// `server.admin_read_only`: changes that come from the admin pages are refused.
    pub admin_read_only: bool,
}

impl Guard {
    /// Whether a request addressed to `host` (a `Host` header, port included or not) may be served.
    fn allows(&self, host: Option<&str>) -> bool {
        if self.allowed_hosts.is_empty() && !self.auth.is_open() {
            return true;
        }
        let Some(host) = host else { return false };
        // `name:port`, `[::1]:port`; what is not an authority (a bare `::1`) is taken as a name.
        let name = host
            .parse::<Authority>()
            .map_or_else(|_| host.to_string(), |a| a.host().to_string());
        let name = name.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        if self.allowed_hosts.contains(&name) {
            return true;
        }
        self.allowed_hosts.is_empty() && (name == "localhost" || name.parse::<std::net::IpAddr>().is_ok())
    }
}

/// The one middleware every request goes through: refuses requests to hosts not allowed, cross-site
/// state changes, bodies not declared JSON and bodies over the limit, then admits the caller by its
/// token ([`crate::auth::admit`]), and adds the frame headers to every answer.
///
/// A tower layer rather than `axum::middleware::from_fn`: its checks need nothing asynchronous, and
/// from_fn boxes a future and clones the routes' service for every request, which showed as a few
/// percent of the push path. It wraps the whole router once (see [`crate::app`]), not each route:
/// axum clones a route's boxed service for every request, one box per layer put on the routes.
#[derive(Debug, Clone)]
pub struct GuardLayer(pub Arc<Guard>);

impl<S> Layer<S> for GuardLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: self.0.clone(),
            inner,
        }
    }
}

/// The router behind the [`GuardLayer`].
#[derive(Debug, Clone)]
pub struct Guarded<S> {
    guard: Arc<Guard>,
    inner: S,
}

/// What a refused request gets at once, or the route's answer later; both with the frame headers.
type Answer<F> = Either<
    Ready<Result<Response, Infallible>>,
    Map<F, fn(Result<Response, Infallible>) -> Result<Response, Infallible>>,
>;

impl<S, B> Service<axum::http::Request<B>> for Guarded<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    B: HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        // As the router itself would (it takes any body), before the checks read the request; limited
        // here rather than by axum's `DefaultBodyLimit`, whose limit is fixed when the router is made.
        let max = self.guard.max_body.load(std::sync::atomic::Ordering::Relaxed);
        // hyper's size hint is the `Content-Length` (read before the limit caps the hint).
        let declared = req.body().size_hint().lower();
        let mut req = req.map(|body| axum::body::Body::new(http_body_util::Limited::new(body, max)));
        match self.guard.refusal(&mut req, declared, max) {
            Some(refused) => Either::Left(ready(Ok(with_frame_headers(refused)))),
            None => Either::Right(
                self.inner
                    .call(req)
                    .map((|answer: Result<Response, Infallible>| answer.map(with_frame_headers)) as fn(_) -> _),
            ),
        }
    }
}

impl Guard {
    /// Why `req` may not reach its route, as the answer to send; `None` when it may (its [`crate::auth::Caller`]
    /// then in its extensions).
    fn refusal(&self, req: &mut Request, declared: u64, max_body: usize) -> Option<Response> {
        let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()));
        if !self.allows(host) {
            metrics::counter!("dq_auth_refusals_total", "reason" => "host").increment(1);
            return Some(
                ApiError::forbidden(
                    "this server does not answer to that host name (server.allowed_hosts; an open API answers to IP addresses and localhost only)",
                )
                .into_response(),
            );
        }
        if !safe && cross_site(req.headers()) {
            metrics::counter!("dq_auth_refusals_total", "reason" => "cross_site").increment(1);
            return Some(
                ApiError::forbidden("a request from another site may not change anything (Origin, Sec-Fetch-Site)")
                    .into_response(),
            );
        }
        if !safe && self.admin_read_only && from_admin_pages(req.headers()) && req.uri().path() != "/admin/login" {
            metrics::counter!("dq_auth_refusals_total", "reason" => "read_only").increment(1);
            return Some(
                ApiError::forbidden(
                    "the admin is read-only (server.admin_read_only): changes need a token in the Authorization header",
                )
                .into_response(),
            );
        }
        if !safe && has_body(req.headers()) && !is_json(req.headers()) && req.uri().path() != "/admin/login" {
            return Some(
                ApiError::invalid("a request body must be sent with `Content-Type: application/json`").into_response(),
            );
        }
        if declared > max_body as u64 {
            // The answer goes out before any of the body is read.
            return Some(
                ApiError::too_large(format!(
                    "the request body is larger than the limit of {} bytes",
                    max_body
                ))
                .into_response(),
            );
        }
        crate::auth::admit(&self.auth, req)
    }
}

/// Tells browsers not to show the answer in a frame, nor to guess its type.
fn with_frame_headers(mut answer: Response) -> Response {
    let headers = answer.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The admin pages set a stricter policy of their own.
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static("frame-ancestors 'none'"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    answer
}

/// Whether the request carries a body.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// Whether `Content-Type` says JSON: `application/json`, or a `+json` type, with any parameters.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Whether a request comes from the admin pages: it has no `Authorization` header and carries the
/// admin login's cookie, or a browser says it comes from this same origin (an open API has no login).
fn from_admin_pages(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::AUTHORIZATION) {
        return false;
    }
    let same_origin = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"same-origin"));
    same_origin || crate::auth::login_cookie(headers).is_some()
}

/// Whether a browser says the request comes from another site.
fn cross_site(headers: &HeaderMap) -> bool {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    // `Origin: null` (a sandboxed frame, a file, some redirects) has no authority: another site too.
    let Some(origin) = origin.to_str().ok().and_then(|o| o.parse::<Uri>().ok()) else {
        return true;
    };
    let Some(origin_host) = origin.authority().map(Authority::as_str) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    host.is_none_or(|h| !h.eq_ignore_ascii_case(origin_host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn guard(open: bool, allowed: &[&str]) -> Guard {
        let settings = dq_core::config::AuthSettings {
            admin_token: (!open).then(|| "t".to_string()),
            ..Default::default()
        };
        Guard {
            auth: Arc::new(Auth::new(&settings).unwrap()),
            allowed_hosts: Arc::new(allowed.iter().map(|s| s.to_string()).collect()),
            max_body: 1024.into(),
            admin_read_only: false,
        }
    }

    #[test]
    fn an_open_api_answers_to_addresses_and_localhost_only() {
        let open = guard(true, &[]);
        for ok in [
            "127.0.0.1:6789",
            "localhost:6789",
            "LOCALHOST",
            "[::1]:6789",
            "::1",
            "10.0.0.7",
        ] {
            assert!(open.allows(Some(ok)), "{ok}");
        }
        for refused in ["evil.example:6789", "rebound.example", "localhost.evil.example"] {
            assert!(!open.allows(Some(refused)), "{refused}");
        }
        assert!(!open.allows(None));
        let with_tokens = guard(false, &[]);
        assert!(
            with_tokens.allows(Some("dq.internal:6789")),
            "tokens: any host unless listed"
        );
        let listed = guard(false, &["dq.internal"]);
        assert!(listed.allows(Some("dq.internal:6789")) && listed.allows(Some("DQ.internal")));
        assert!(!listed.allows(Some("127.0.0.1:6789")), "a list is the whole list");
    }

    #[test]
    fn json_is_application_json_or_a_json_suffix() {
        assert!(is_json(&headers(&[("content-type", "application/json")])));
        assert!(is_json(&headers(&[(
            "content-type",
            "Application/JSON; charset=utf-8"
        )])));
        assert!(is_json(&headers(&[("content-type", "application/merge-patch+json")])));
        for not in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert!(!is_json(&headers(&[("content-type", not)])), "{not}");
        }
        assert!(!is_json(&headers(&[])));
        assert!(has_body(&headers(&[("content-length", "2")])) && !has_body(&headers(&[("content-length", "0")])));
    }

    #[test]
    fn only_browsers_that_say_another_site_are_cross_site() {
        assert!(!cross_site(&headers(&[("host", "dq:6789")])), "curl sends neither");
        assert!(!cross_site(&headers(&[
            ("host", "dq:6789"),
            ("origin", "http://dq:6789")
        ])));
        assert!(!cross_site(&headers(&[
            ("host", "dq:6789"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(cross_site(&headers(&[
            ("host", "dq:6789"),
            ("origin", "http://evil.example")
        ])));
        assert!(cross_site(&headers(&[
            ("host", "dq:6789"),
            ("origin", "http://dq:6790")
        ])));
        assert!(cross_site(&headers(&[("host", "dq:6789"), ("origin", "null")])));
        assert!(cross_site(&headers(&[
            ("host", "dq:6789"),
            ("sec-fetch-site", "cross-site")
        ])));
    }
}
