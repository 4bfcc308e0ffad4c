//! One delivery: the POST of a job to its topic's callback, and what the answer means.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_core::Reservation;
use dq_core::condition::{Answer, Condition};
use dq_core::topic::Callback;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::Sha256;

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
        /// Metric label: `timeout`, `connect_error`, `http_error`, `empty`, `condition`.
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

/// `X-DQ-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature(secret: &str, unix_s: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(unix_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={unix_s},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Answer text shown in `last_error`, cut short.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// POSTs `job` to `callback` and judges the answer. Never fails: every error is a failed delivery.
pub async fn post(
    http: &reqwest::Client,
    job: &Reservation,
    callback: &Callback,
    condition: Option<&Condition>,
) -> (Outcome, Duration) {
    let body = serde_json::to_vec(&Envelope {
        id: &job.id,
        topic: &job.topic,
        body: &job.body,
        attempt: job.attempt,
        run_at: job.run_at,
    })
    .expect("an envelope always serializes");
    let mut req = http
        .post(&callback.url)
        .timeout(Duration::from_millis(callback.timeout_ms))
        .header("content-type", "application/json")
        .header("idempotency-key", &job.id)
        .header("x-dq-job-id", &job.id)
        .header("x-dq-attempt", job.attempt.to_string());
    for (k, v) in &callback.headers {
        req = req.header(k, v);
    }
    if let Some(secret) = &callback.secret {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        req = req.header("x-dq-signature", signature(secret, now, &body));
    }
    let started = Instant::now();
    let answer = async {
        let resp = req.body(body).send().await?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        Ok::<_, reqwest::Error>((status, bytes))
    }
    .await;
    let took = started.elapsed();
    let outcome = match answer {
        Err(e) if e.is_timeout() => Outcome::Failed {
            kind: "timeout",
            reason: format!("no answer within {} ms", callback.timeout_ms),
        },
        Err(e) => Outcome::Failed {
            kind: "connect_error",
            reason: format!("request failed: {e}"),
        },
        Ok((status, bytes)) if !status.is_success() => Outcome::Failed {
            kind: "http_error",
            reason: format!("HTTP {}: {}", status.as_u16(), excerpt(&bytes)),
        },
        Ok((status, bytes)) if bytes.iter().all(u8::is_ascii_whitespace) => Outcome::Failed {
            kind: "empty",
            reason: format!("HTTP {} with an empty body", status.as_u16()),
        },
        Ok((status, bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            let data: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
            let answer = Answer {
                code: status.as_u16(),
                body: &text,
                data: data.as_ref(),
            };
            match condition {
                Some(c) if c.eval(&answer) => Outcome::Failed {
                    kind: "condition",
                    reason: format!(
                        "retry condition `{c}` held: HTTP {} {}",
                        status.as_u16(),
                        excerpt(&bytes)
                    ),
                },
                _ => Outcome::Delivered,
            }
        }
    };
    (outcome, took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_known_hmac() {
        // The header signs "<t>.<body>"; and the HMAC itself is the standard one (Wikipedia's example).
        let sig = signature("s3cr3t", 1_700_000_000, br#"{"id":"a"}"#);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cr3t").unwrap();
        mac.update(br#"1700000000.{"id":"a"}"#);
        assert_eq!(
            sig,
            format!("t=1700000000,v1={}", hex::encode(mac.finalize().into_bytes()))
        );
        let known = Hmac::<Sha256>::new_from_slice(b"key")
            .unwrap()
            .chain_update(b"The quick brown fox jumps over the lazy dog")
            .finalize()
            .into_bytes();
        assert_eq!(
            hex::encode(known),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }

    #[test]
    fn excerpts_are_short_and_whole_characters() {
        assert_eq!(excerpt(b"ok"), "ok");
        assert_eq!(excerpt("é".repeat(150).as_bytes()).len(), 200);
    }
}
