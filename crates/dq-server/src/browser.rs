//! What protects the API from browsers on other sites: a request that changes state (any method but
//! GET, HEAD and OPTIONS) is refused with 403 when the browser says it comes from another site
//! (`Sec-Fetch-Site: cross-site`, or an `Origin` whose host is not the one the request was sent to),
//! so a page elsewhere cannot use an operator's admin cookie (or a browser on the internal network) to
//! push, pause or delete. Clients that are not browsers send neither header and are not affected. Every
//! answer also tells browsers not to show it in a frame (`X-Frame-Options: DENY`, CSP
//! `frame-ancestors 'none'`), so the admin pages cannot be overlaid by another site (clickjacking).

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Middleware: refuses cross-site state changes, and adds the frame headers to every answer.
pub async fn guard(req: Request, next: Next) -> Response {
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let mut answer = if !safe && cross_site(req.headers()) {
        metrics::counter!("dq_auth_refusals_total", "reason" => "cross_site").increment(1);
        ApiError::forbidden("a request from another site may not change anything (Origin, Sec-Fetch-Site)")
            .into_response()
    } else {
        next.run(req).await
    };
    let headers = answer.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    answer
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
    // `Origin: null` (a sandboxed frame, a file, some redirects) is another site too.
    let Some(origin_host) = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'))
    else {
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
