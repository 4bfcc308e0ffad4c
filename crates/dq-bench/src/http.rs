//! A bare HTTP/1.1 client connection to dq-server.
//!
//! The load generator shares a small box with the server and Redis, so it must
//! spend as little CPU per request as it can: no connection pool, no TLS, no
//! per-request URL parsing. Each load task owns one [`Conn`] — a single
//! keep-alive TCP connection with `TCP_NODELAY`, driven by hyper's low-level
//! `http1` handshake — and sends its requests on it one after the other. Every
//! subcommand (push, reserve-ack, lateness, burst, deliver) builds on this
//! module; `sink` is the other side, an HTTP server (see `sink`).

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where the server is: parsed once from `--url`, shared by every connection.
#[derive(Debug)]
pub struct Target {
    /// `host:port` to connect to.
    addr: String,
    /// The `Host` header sent with every request.
    host: HeaderValue,
    /// Path prefix from the URL (empty or `/prefix` without a trailing slash).
    prefix: String,
    /// `Bearer <token>` sent with every request, when a token is given (`--token`).
    authorization: Option<HeaderValue>,
    /// The base URL and token as given, for a [`dq_client::Client`] of the same server.
    client: (String, Option<String>),
}

impl Target {
    /// Parses a base URL such as `http://127.0.0.1:6789` (only `http`; a path
    /// prefix is allowed and prepended to every request path).
    #[cfg(test)]
    pub fn parse(url: &str) -> Result<Arc<Self>> {
        Self::parse_with(url, None)
    }

    /// [`Target::parse`], with a token sent as `Authorization: Bearer` on every request.
    pub fn parse_with(url: &str, token: Option<&str>) -> Result<Arc<Self>> {
        let authorization = match token {
            Some(t) => {
                let mut v =
                    HeaderValue::from_str(&format!("Bearer {t}")).context("the token is not a valid header value")?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let uri: Uri = url.parse().with_context(|| format!("`{url}` is not a valid URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => bail!("`{url}`: only http:// is supported, not {other}://"),
            None => bail!("`{url}`: the URL needs a scheme, e.g. http://127.0.0.1:6789"),
        }
        let Some(authority) = uri.authority() else {
            bail!("`{url}`: the URL has no host");
        };
        if authority.as_str().contains('@') {
            bail!("`{url}`: user info in the URL is not supported");
        }
        let port = authority.port_u16().unwrap_or(80);
        let host = authority.host();
        let prefix = uri.path().trim_end_matches('/').to_string();
        if uri.query().is_some() {
            bail!("`{url}`: the base URL must not have a query");
        }
        Ok(Arc::new(Self {
            addr: format!("{host}:{port}"),
            host: HeaderValue::from_str(authority.as_str()).context("the URL's host is not a valid Host header")?,
            prefix,
            authorization,
            client: (url.to_string(), token.map(str::to_string)),
        }))
    }

    /// The request URI (origin form) for an API path such as `/v1/jobs`.
    pub fn uri(&self, path: &str) -> Result<Uri> {
        let full = format!("{}{}", self.prefix, path);
        full.parse()
            .with_context(|| format!("`{full}` is not a valid request path"))
    }

    /// A dq-client of the same server, with the same token.
    pub fn client(&self) -> Result<dq_client::Client> {
        let (url, token) = &self.client;
        Ok(dq_client::Client::builder(url).token(token.clone()).build()?)
    }

    /// The `host:port` this target connects to.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

/// One answer: its status and whole body.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body, read to the end (so the connection can be reused).
    pub body: Bytes,
}

impl Reply {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// A one-line description for error reports: status and (shortened) body.
    pub fn describe(&self) -> String {
        format!(
            "HTTP {}: {}",
            self.status,
            shorten(&String::from_utf8_lossy(&self.body), 500)
        )
    }
}

/// One keep-alive HTTP/1.1 connection; requests on it are sequential.
pub struct Conn {
    target: Arc<Target>,
    /// `None` after a transport failure: the next request reconnects.
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// Opens a TCP connection (with `TCP_NODELAY`) and does the HTTP/1.1
    /// handshake; the connection is driven by a spawned task.
    pub async fn connect(target: Arc<Target>) -> Result<Self> {
        let sender = Some(handshake(&target).await?);
        Ok(Self { target, sender })
    }

    /// Opens `n` connections to `target`, one after the other.
    pub async fn connect_many(target: &Arc<Target>, n: usize) -> Result<Vec<Self>> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(Self::connect(Arc::clone(target)).await?);
        }
        Ok(conns)
    }

    /// Sends `POST uri` with a JSON body and reads the whole answer.
    ///
    /// A transport failure is returned as `Err`; the connection is then
    /// re-opened by the next request (so one dropped connection does not end
    /// the task). Any status, 2xx or not, is an `Ok` [`Reply`].
    pub async fn post_json(&mut self, uri: Uri, body: Bytes) -> Result<Reply> {
        self.send(Method::POST, uri, Some(body)).await
    }

    /// Sends `GET uri` and reads the whole answer; errors as for [`Self::post_json`].
    pub async fn get(&mut self, uri: Uri) -> Result<Reply> {
        self.send(Method::GET, uri, None).await
    }

    /// Sends `PUT uri` with a JSON body and reads the whole answer; errors as for [`Self::post_json`].
    pub async fn put_json(&mut self, uri: Uri, body: Bytes) -> Result<Reply> {
        self.send(Method::PUT, uri, Some(body)).await
    }

    /// Sends `DELETE uri` and reads the whole answer; errors as for [`Self::post_json`].
    pub async fn delete(&mut self, uri: Uri) -> Result<Reply> {
        self.send(Method::DELETE, uri, None).await
    }

    /// Sends one request (a JSON body when `body` is given) and reads the answer.
    async fn send(&mut self, method: Method, uri: Uri, body: Option<Bytes>) -> Result<Reply> {
        let sender = match &mut self.sender {
            Some(s) if !s.is_closed() => s,
            slot => slot.insert(handshake(&self.target).await?),
        };
        let has_body = body.is_some();
        let body = body.unwrap_or_default();
        let len = body.len();
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        headers.insert(HOST, self.target.host.clone());
        if let Some(auth) = &self.target.authorization {
            headers.insert(hyper::header::AUTHORIZATION, auth.clone());
        }
        if has_body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        }

        let result = async {
            sender.ready().await.context("connection not ready")?;
            read_reply(sender.send_request(req).await.context("request failed")?).await
        }
        .await;
        if result.is_err() {
            // The next request starts on a fresh connection.
            self.sender = None;
        }
        result
    }
}

/// An HTTP/2 connection (prior knowledge, in clear text): requests on it run at once, each on a stream
/// of its own. Only `waiters` uses it, to hold many long polls on few connections.
#[derive(Clone)]
pub struct H2Conn {
    target: Arc<Target>,
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
}

impl H2Conn {
    /// Opens a TCP connection and does the HTTP/2 handshake; the connection is driven by a spawned task.
    pub async fn connect(target: Arc<Target>) -> Result<Self> {
        let stream = TcpStream::connect(target.addr())
            .await
            .with_context(|| format!("cannot connect to {}", target.addr()))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(stream))
                .await
                .context("HTTP/2 handshake failed")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { target, sender })
    }

    /// Sends `POST uri` with a JSON body on a new stream and reads the whole answer.
    pub async fn post_json(&mut self, uri: Uri, body: Bytes) -> Result<Reply> {
        let len = body.len();
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = Method::POST;
        // HTTP/2 carries the host in the URI's authority.
        *req.uri_mut() = format!("http://{}{}", self.target.host.to_str().unwrap_or("localhost"), uri)
            .parse()
            .context("request URI")?;
        let headers = req.headers_mut();
        if let Some(auth) = &self.target.authorization {
            headers.insert(hyper::header::AUTHORIZATION, auth.clone());
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        self.sender.ready().await.context("connection not ready")?;
        read_reply(self.sender.send_request(req).await.context("request failed")?).await
    }
}

/// An answer's status and whole body.
async fn read_reply(resp: hyper::Response<hyper::body::Incoming>) -> Result<Reply> {
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .context("reading the answer failed")?
        .to_bytes();
    Ok(Reply { status, body })
}

/// Connects and hands the connection's I/O to a background task.
async fn handshake(target: &Target) -> Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(target.addr())
        .await
        .with_context(|| format!("cannot connect to {}", target.addr()))?;
    stream.set_nodelay(true).context("setting TCP_NODELAY")?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP/1.1 handshake failed")?;
    tokio::spawn(async move {
        // Errors surface on the sender side; nothing to do with them here.
        let _ = conn.await;
    });
    Ok(sender)
}

/// Cuts `s` to at most `max` bytes (on a char boundary), marking the cut.
pub fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Percent-encodes one path segment (job ids are normally already safe).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let t = Target::parse("http://127.0.0.1:6789").unwrap();
        assert_eq!(t.addr(), "127.0.0.1:6789");
        assert_eq!(t.host, "127.0.0.1:6789");
        assert_eq!(t.uri("/v1/jobs").unwrap(), "/v1/jobs");

        let t = Target::parse("http://localhost/dq/").unwrap();
        assert_eq!(t.addr(), "localhost:80");
        assert_eq!(t.uri("/v1/reserve").unwrap(), "/dq/v1/reserve");

        for bad in [
            "https://127.0.0.1:6789",
            "127.0.0.1:6789",
            "/v1",
            "http://u@h:1",
            "http://h:1/?q=1",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn encodes_path_segments() {
        assert_eq!(encode_segment("01HZX:a-b.c_d"), "01HZX:a-b.c_d");
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn shortens_on_char_boundaries() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("aé", 2), "a…");
    }
}
