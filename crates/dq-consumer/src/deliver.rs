//! One delivery: the POST of a job to its topic's callback, and what the answer means.

use std::time::{Duration, Instant, SystemTime};

use dq_core::Reservation;
use dq_core::condition::Condition;
use dq_core::telemetry::spans::{self, JobSpan};
use dq_core::topic::Callback;
use dq_core::trace::TraceContext;
use reqwest::{StatusCode, Url};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::egress::{CannotCall, Egress, NameRefused};

/// What the consumer POSTs.
#[derive(Serialize)]
struct Envelope<'a> {
    /// The job's id (also in `Idempotency-Key` and `X-DQ-Job-Id`).
    id: &'a str,
    /// The job's topic.
    topic: &'a str,
    /// The body as the producer wrote it.
    body: &'a RawValue,
    /// Which delivery this is (also in `X-DQ-Attempt`).
    attempt: u32,
    /// The job's due time, Unix ms.
    run_at: i64,
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx, a body, and the retry condition false: ack.
    Delivered,
    /// Anything else: nack with the reason, for `last_error`.
    Failed {
        /// Metric label: `timeout`, `connect_error`, `egress_refused`, `http_error`, `too_large`,
        /// `empty`, `condition`, `push_refused` (the answer's `dq.push`, see [`crate::answer`]).
        kind: &'static str,
        /// What happened, for people.
        reason: String,
    },
}

impl Outcome {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Delivered => "ok",
            Outcome::Failed { kind, .. } => kind,
        }
    }
}

pub use dq_core::sign::signature;

/// The status, and at most `max` bytes of the answer (whole characters), as `last_error` shows them.
fn status_and_excerpt(status: StatusCode, body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(max)]);
    // A character cut at `max` shows as U+FFFD at the end: drop it.
    let text = text
        .strip_suffix('\u{FFFD}')
        .filter(|_| body.len() > max)
        .unwrap_or(&text);
    match text.trim() {
        "" => format!("HTTP {}", status.as_u16()),
        text => format!("HTTP {}: {text}", status.as_u16()),
    }
}

/// A callback's answer, read up to the cap.
enum Answer {
    /// The whole answer.
    Whole(StatusCode, Vec<u8>),
    /// Larger than `egress.max_answer_bytes`: not read further.
    TooLarge(StatusCode),
}

/// What one POST came to.
#[derive(Debug)]
pub struct Posted {
    /// How the delivery ended.
    pub outcome: Outcome,
    /// How long the request took.
    pub took: Duration,
    /// A 429 or 503 answer's `Retry-After`: the callback asks for no deliveries of the topic until then.
    pub retry_after: Option<Duration>,
    /// When the request was sent, Unix ms (the attempt's start in the job's history).
    pub started_at: i64,
    /// The answer's HTTP status, when there was one.
    pub status: Option<u16>,
    /// The first [`dq_core::attempt::ANSWER_BYTES`] of the answer (whole characters), when it was read.
    pub answer: Option<String>,
    /// The jobs a delivered answer pushes (`{"dq": {"push": [...]}}`, see [`crate::answer`]).
    pub pushes: Vec<Box<RawValue>>,
    /// For a topic with `callback.on_success_url`, a delivered answer as its success hook carries it:
    /// JSON `{status, headers, body}` (see [`HookAnswer`]).
    pub hook_answer: Option<Vec<u8>>,
    /// The trace context the callback was sent (its attempt's span's, or the job's): the jobs its
    /// answer pushes carry it.
    pub trace: Option<TraceContext>,
    /// The attempt's span (when this process exports spans) and when its answer came: open until
    /// [`Posted::end_span`], since the outcome may still change after the answer (pushes refused), and
    /// the span says the final one.
    pub span: Option<(JobSpan, std::time::SystemTime)>,
}

impl Posted {
    /// Ends the attempt's span with the answer's status and the outcome (failed when the delivery
    /// failed). Call it once the outcome is final.
    pub fn end_span(&mut self) {
        let Some((mut span, answered)) = self.span.take() else {
            return;
        };
        if let Some(status) = self.status {
            span.set(spans::HTTP_STATUS, i64::from(status));
        }
        span.set(spans::OUTCOME, self.outcome.label());
        if let Outcome::Failed { reason, .. } = &self.outcome {
            span.fail(reason.clone());
        }
        span.end_at(answered);
    }
}

/// The callback's answer as a success hook carries it (`answer` in its body).
#[derive(Serialize)]
struct HookAnswer<'a> {
    /// The HTTP status.
    status: u16,
    /// The headers `callback.on_success_headers` names that the answer had (names in lower case).
    headers: std::collections::BTreeMap<String, String>,
    /// The body as text (bytes that are not UTF-8 as U+FFFD).
    body: &'a str,
}

/// The longest pause a `Retry-After` can ask for; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// A 429 or 503 answer's `Retry-After` (seconds, or an HTTP date), capped at [`MAX_RETRY_AFTER`].
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    if !matches!(resp.status().as_u16(), 429 | 503) {
        return None;
    }
    let value = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match value.parse::<u64>() {
        Ok(s) => Duration::from_secs(s),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Reads `resp` in chunks until its end or until it passes `cap` bytes; then it is dropped unread,
/// which closes the connection, so memory stays flat whatever the callback sends.
async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
    keep: &[String],
) -> reqwest::Result<(Answer, Option<Duration>, Headers)> {
    let wait = retry_after(&resp);
    let kept = keep
        .iter()
        .filter_map(|name| {
            let value = resp.headers().get(name.as_str())?.to_str().ok()?;
            Some((name.to_ascii_lowercase(), value.to_string()))
        })
        .collect();
    Ok((read_answer(&mut resp, cap).await?, wait, kept))
}

/// Headers of an answer kept for its success hook: lower-case name → value.
type Headers = std::collections::BTreeMap<String, String>;

/// The body of [`read_capped`].
async fn read_answer(resp: &mut reqwest::Response, cap: usize) -> reqwest::Result<Answer> {
    let status = resp.status();
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Ok(Answer::TooLarge(status));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Ok(Answer::TooLarge(status));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer::Whole(status, body))
}

/// POSTs `job` to `url` (`callback.url`, parsed) through `egress` and judges the answer. Never fails:
/// every error is a failed delivery.
///
/// A job with a trace context is sent with `traceparent` (and `tracestate`): the delivery's own span's
/// when this process exports spans (`deliver <topic>`, a child of the job's context, left open in
/// [`Posted::span`] for the caller to end with the final outcome, [`Posted::end_span`]), else the
/// job's as stored.
pub async fn post(
    egress: &Egress,
    job: &Reservation,
    url: &Url,
    callback: &Callback,
    condition: Option<&Condition>,
) -> Posted {
    // Checked at push; a stored one that does not read back is sent as none.
    let trace = TraceContext::from_fields(job.traceparent.as_deref(), job.tracestate.as_deref())
        .ok()
        .flatten();
    let span = trace
        .as_ref()
        .and_then(|t| spans::delivery(&job.id, &job.topic, job.attempt, t));
    let sent = span.as_ref().map(JobSpan::context).or(trace.as_ref());
    let mut posted = send(egress, job, url, callback, condition, sent).await;
    posted.trace = sent.cloned();
    posted.span = span.map(|s| (s, std::time::SystemTime::now()));
    posted
}

/// The request of [`post`], with `trace` as the callback's `traceparent` and `tracestate`.
async fn send(
    egress: &Egress,
    job: &Reservation,
    url: &Url,
    callback: &Callback,
    condition: Option<&Condition>,
    trace: Option<&TraceContext>,
) -> Posted {
    let http = match egress.client(url) {
        Ok(http) => http,
        Err(e) => {
            let kind = match e {
                CannotCall::Client(_) => "connect_error",
                CannotCall::Refused(_) | CannotCall::NameRefused(_) => "egress_refused",
            };
            let reason = e.to_string();
            return Posted {
                outcome: Outcome::Failed { kind, reason },
                took: Duration::ZERO,
                retry_after: None,
                started_at: dq_core::clock::unix_ms(),
                status: None,
                answer: None,
                pushes: Vec::new(),
                hook_answer: None,
                trace: None,
                span: None,
            };
        }
    };
    let body = serde_json::to_vec(&Envelope {
        id: &job.id,
        topic: &job.topic,
        body: &job.body,
        attempt: job.attempt,
        run_at: job.run_at,
    })
    .expect("an envelope always serializes");
    let mut req = http
        .post(url.clone())
        .timeout(Duration::from_millis(callback.timeout_ms))
        .header("content-type", "application/json")
        .header("idempotency-key", &job.id)
        .header("x-dq-job-id", &job.id)
        .header("x-dq-attempt", job.attempt.to_string());
    if let Some(trace) = trace {
        req = req.header("traceparent", &trace.traceparent);
        if let Some(state) = &trace.tracestate {
            req = req.header("tracestate", state);
        }
    }
    for (k, v) in &callback.headers {
        req = req.header(k, v);
    }
    if let Some(signature) = dq_core::sign::header_now(callback, &body) {
        req = req.header("x-dq-signature", signature);
    }
    let started = Instant::now();
    let started_at = dq_core::clock::unix_ms();
    let keep = &callback.on_success_headers;
    let answer = async { read_capped(req.body(body).send().await?, egress.max_answer_bytes, keep).await }.await;
    let took = started.elapsed();
    let retry_after = answer.as_ref().ok().and_then(|(_, wait, _)| *wait);
    let (status, excerpt) = match &answer {
        Ok((Answer::Whole(status, bytes), _, _)) => (Some(status.as_u16()), Some(excerpt(bytes))),
        Ok((Answer::TooLarge(status), _, _)) => (Some(status.as_u16()), None),
        Err(_) => (None, None),
    };
    let mut pushes = Vec::new();
    let mut hook_answer = None;
    let outcome = match answer.map(|(answer, _, kept)| (answer, kept)) {
        Err(e) if e.is_timeout() => Outcome::Failed {
            kind: "timeout",
            reason: format!("no answer within {} ms", callback.timeout_ms),
        },
        Err(e) => match NameRefused::in_chain(&e) {
            Some(refused) => Outcome::Failed {
                kind: "egress_refused",
                reason: refused.to_string(),
            },
            None => Outcome::Failed {
                kind: "connect_error",
                // Without the URL: it may carry credentials, and last_error is readable with `read`.
                reason: format!("request failed: {}", e.without_url()),
            },
        },
        Ok((Answer::TooLarge(status), _)) => Outcome::Failed {
            kind: "too_large",
            reason: format!(
                "HTTP {}: the answer is larger than {} bytes (egress.max_answer_bytes)",
                status.as_u16(),
                egress.max_answer_bytes
            ),
        },
        Ok((Answer::Whole(status, bytes), _)) if !status.is_success() => Outcome::Failed {
            kind: "http_error",
            reason: status_and_excerpt(status, &bytes, egress.excerpt_bytes),
        },
        Ok((Answer::Whole(status, bytes), _)) if bytes.iter().all(u8::is_ascii_whitespace) => Outcome::Failed {
            kind: "empty",
            reason: format!("HTTP {} with an empty body", status.as_u16()),
        },
        Ok((Answer::Whole(status, bytes), kept)) => {
            let text = String::from_utf8_lossy(&bytes);
            let json: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
            let answer = dq_core::condition::Answer {
                status: status.as_u16(),
                body: &text,
                json: json.as_ref(),
            };
            match condition {
                Some(c) if c.eval(&answer) => Outcome::Failed {
                    kind: "condition",
                    reason: format!(
                        "retry condition `{c}` held: {}",
                        status_and_excerpt(status, &bytes, egress.excerpt_bytes)
                    ),
                },
                _ => match crate::answer::pushes(&bytes) {
                    Ok(jobs) => {
                        pushes = jobs;
                        if callback.on_success_url.is_some() {
                            let answer = HookAnswer {
                                status: status.as_u16(),
                                headers: kept,
                                body: &text,
                            };
                            hook_answer = Some(serde_json::to_vec(&answer).expect("an answer always serializes"));
                        }
                        Outcome::Delivered
                    }
                    Err(reason) => Outcome::Failed {
                        kind: "push_refused",
                        reason,
                    },
                },
            }
        }
    };
    Posted {
        outcome,
        took,
        retry_after,
        started_at,
        status,
        answer: excerpt,
        pushes,
        hook_answer,
        trace: None,
        span: None,
    }
}

/// The first [`dq_core::attempt::ANSWER_BYTES`] of an answer, as text (whole characters; an answer that
/// is not UTF-8 shows U+FFFD where it is not).
fn excerpt(body: &[u8]) -> String {
    let head = &body[..body.len().min(dq_core::attempt::ANSWER_BYTES + 3)];
    dq_core::attempt::cut(&String::from_utf8_lossy(head), dq_core::attempt::ANSWER_BYTES).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_from_429_and_503_in_seconds_or_as_a_date_and_capped() {
        let answer = |status: u16, value: &str| {
            let r = reqwest::Response::from(
                axum::http::Response::builder()
                    .status(status)
                    .header("retry-after", value)
                    .body("")
                    .unwrap(),
            );
            retry_after(&r)
        };
        assert_eq!(answer(429, "3"), Some(Duration::from_secs(3)));
        assert_eq!(answer(503, " 0 "), Some(Duration::ZERO));
        assert_eq!(answer(500, "3"), None, "only 429 and 503 ask for a pause");
        assert_eq!(answer(429, "soon"), None);
        assert_eq!(answer(429, "999999"), Some(MAX_RETRY_AFTER));
        let in_a_minute = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(62));
        let wait = answer(503, &in_a_minute).unwrap();
        assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(62),
            "{wait:?}"
        );
        let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(60));
        assert_eq!(answer(429, &past), Some(Duration::ZERO));
    }

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use dq_core::config::EgressSettings;
    use dq_core::egress::Policy;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn job() -> Reservation {
        Reservation {
            id: "j1".into(),
            topic: "t".into(),
            body: RawValue::from_string("1".into()).unwrap(),
            attempt: 1,
            receipt: "r".into(),
            deadline: 0,
            run_at: 0,
            ttr_ms: 30_000,
            flow_key: None,
            traceparent: None,
            tracestate: None,
        }
    }

    /// A server on 127.0.0.1 that answers every connection with `answer` (head and body as given),
    /// counting connections.
    async fn server(answer: &'static [u8]) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    let _ = conn.read(&mut buf).await;
                    let _ = conn.write_all(answer).await;
                });
            }
        });
        (port, count)
    }

    async fn deliver(settings: EgressSettings, url: &str) -> Outcome {
        let egress = Egress::new(&settings, Policy::new(&settings, Vec::new()));
        let callback: Callback = serde_json::from_value(serde_json::json!({"url": url})).unwrap();
        let condition = Condition::parse("{http.body} == 'retry'").unwrap();
        post(&egress, &job(), &Url::parse(url).unwrap(), &callback, Some(&condition))
            .await
            .outcome
    }

    #[tokio::test]
    async fn a_name_resolving_to_a_refused_address_fails_naming_the_rule_and_connects_nowhere() {
        let (port, connections) = server(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
        let settings = EgressSettings {
            deny: vec!["127.0.0.0/8".into(), "::1".into()],
            ..EgressSettings::default()
        };
        let outcome = deliver(settings.clone(), &format!("http://localhost:{port}/")).await;
        let Outcome::Failed { kind, reason } = &outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(*kind, "egress_refused", "{reason}");
        assert!(reason.contains("egress.deny 127.0.0.0/8"), "{reason}");
        let outcome = deliver(settings, &format!("http://127.0.0.1:{port}/")).await;
        assert_eq!(outcome.label(), "egress_refused", "{outcome:?}");
        assert_eq!(connections.load(Ordering::SeqCst), 0);
        let outcome = deliver(EgressSettings::default(), &format!("http://localhost:{port}/")).await;
        assert_eq!(outcome, Outcome::Delivered, "allowed by default");
    }

    #[tokio::test]
    async fn answers_beyond_the_cap_fail_as_too_large() {
        let settings = EgressSettings {
            max_answer_bytes: 4,
            ..EgressSettings::default()
        };
        let (port, _) = server(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n12345").await;
        let outcome = deliver(settings.clone(), &format!("http://127.0.0.1:{port}/")).await;
        assert_eq!(outcome.label(), "too_large", "{outcome:?}");
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n123\r\n3\r\n456\r\n0\r\n\r\n";
        let (port, _) = server(chunked).await;
        let outcome = deliver(settings.clone(), &format!("http://127.0.0.1:{port}/")).await;
        assert_eq!(outcome.label(), "too_large", "without a length too: {outcome:?}");
        let (port, _) = server(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n1234").await;
        let outcome = deliver(settings, &format!("http://127.0.0.1:{port}/")).await;
        assert_eq!(outcome, Outcome::Delivered, "up to the cap is read");
    }

    #[tokio::test]
    async fn last_error_keeps_only_the_configured_excerpt_and_conditions_see_the_whole_answer() {
        let (port, _) = server(b"HTTP/1.1 500 Oops\r\ncontent-length: 15\r\n\r\ninternal secret").await;
        let url = format!("http://127.0.0.1:{port}/");
        let outcome = deliver(EgressSettings::default(), &url).await;
        assert_eq!(
            outcome,
            Outcome::Failed {
                kind: "http_error",
                reason: "HTTP 500".into()
            }
        );
        let settings = EgressSettings {
            excerpt_bytes: 8,
            ..EgressSettings::default()
        };
        let Outcome::Failed { reason, .. } = deliver(settings, &url).await else {
            panic!("fails")
        };
        assert_eq!(reason, "HTTP 500: internal");
        let (port, _) = server(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nretry").await;
        let outcome = deliver(EgressSettings::default(), &format!("http://127.0.0.1:{port}/")).await;
        assert_eq!(
            outcome,
            Outcome::Failed {
                kind: "condition",
                reason: "retry condition `{http.body} == 'retry'` held: HTTP 200".into()
            }
        );
    }

    #[test]
    fn excerpts_are_as_long_as_configured_and_whole_characters() {
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        assert_eq!(status_and_excerpt(status, b"secret", 0), "HTTP 500", "none by default");
        assert_eq!(status_and_excerpt(status, b"secret", 200), "HTTP 500: secret");
        assert_eq!(status_and_excerpt(status, b"secret", 3), "HTTP 500: sec");
        assert_eq!(status_and_excerpt(status, b"  \n", 200), "HTTP 500");
        let long = "é".repeat(150);
        assert_eq!(
            status_and_excerpt(status, long.as_bytes(), 200),
            format!("HTTP 500: {}", "é".repeat(100))
        );
        assert_eq!(
            status_and_excerpt(status, long.as_bytes(), 201),
            format!("HTTP 500: {}", "é".repeat(100))
        );
        assert_eq!(
            status_and_excerpt(status, "a\u{FFFD}".as_bytes(), 200),
            "HTTP 500: a\u{FFFD}"
        );
    }
}
