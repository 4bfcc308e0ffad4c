//! Alerts and where they go: a JSON POST to `checker.webhook_url` and an e-mail over SMTP.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use dq_core::config::CheckerSettings;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde::Serialize;

/// One alert, as the webhook receives it.
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    /// `redis_down`, `redis_up`, `dead_jobs`, `backlog`, `backlog_cleared`, `quarantined`.
    pub kind: &'static str,
    /// `critical`, `warning` or `info`.
    pub severity: &'static str,
    /// One line for people (also the e-mail subject).
    pub summary: String,
    /// The Redis primary concerned (`host:port`, or the configured URL without password), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The topic concerned, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Anything else worth knowing.
    pub details: serde_json::Value,
    /// When it was raised, Unix ms.
    pub at: i64,
    /// Always `dq-checker`.
    pub source: &'static str,
}

impl Alert {
    /// A new alert raised now.
    pub fn new(kind: &'static str, severity: &'static str, summary: String) -> Alert {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Alert {
            kind,
            severity,
            summary,
            node: None,
            topic: None,
            details: serde_json::Value::Null,
            at,
            source: "dq-checker",
        }
    }
}

/// Sends alerts to the configured channels. A channel that fails is tried again, 250 ms, 500 ms and 1 s
/// later (`dq_alert_retries_total`), then counted as failed (`dq_alerts_failed_total`); an alert that no
/// channel took is tried again by the caller at the next round.
pub struct Notifier {
    /// The webhook client and URL.
    webhook: Option<(reqwest::Client, String)>,
    /// The SMTP transport, sender and recipients.
    mail: Option<(AsyncSmtpTransport<Tokio1Executor>, Mailbox, Vec<Mailbox>)>,
}

impl Notifier {
    /// Channels from the settings (none configured: alerts are only logged and counted).
    pub fn new(settings: &CheckerSettings) -> anyhow::Result<Notifier> {
        let timeout = Duration::from_millis(settings.alert_timeout_ms);
        let webhook = match &settings.webhook_url {
            Some(url) => Some((reqwest::Client::builder().timeout(timeout).build()?, url.clone())),
            None => None,
        };
        let mail = match &settings.smtp_url {
            Some(url) => {
                let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .with_context(|| "checker.smtp_url is not a usable SMTP URL")?
                    .timeout(Some(timeout))
                    .build();
                let from: Mailbox = settings
                    .mail_from
                    .parse()
                    .context("checker.mail_from is not an address")?;
                let to = settings
                    .mail_to
                    .iter()
                    .map(|a| {
                        a.parse::<Mailbox>()
                            .with_context(|| format!("checker.mail_to: `{a}` is not an address"))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Some((transport, from, to))
            }
            None => None,
        };
        Ok(Notifier { webhook, mail })
    }

    /// Logs the alert and sends it to every channel; whether one took it (with no channel configured,
    /// the log is where alerts go: true).
    pub async fn send(&self, alert: Alert) -> bool {
        tracing::warn!(kind = alert.kind, severity = alert.severity, summary = %alert.summary, "alert");
        metrics::counter!("dq_alerts_total", "kind" => alert.kind).increment(1);
        let mut tried = false;
        let mut took = false;
        if let Some((client, url)) = &self.webhook {
            tried = true;
            took |= with_retries("webhook", || async {
                client
                    .post(url)
                    .json(&alert)
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .await;
        }
        if let Some((transport, from, to)) = &self.mail {
            tried = true;
            let body = serde_json::to_string_pretty(&alert).unwrap_or_default();
            took |= with_retries("smtp", || async {
                let mut builder = Message::builder()
                    .from(from.clone())
                    .subject(format!("[dq {}] {}", alert.severity, alert.summary));
                for rcpt in to {
                    builder = builder.to(rcpt.clone());
                }
                match builder.body(format!("{}\n\n{body}\n", alert.summary)) {
                    Ok(message) => transport.send(message).await.map(drop).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await;
        }
        took || !tried
    }
}

/// Waits before sending an alert again on a channel that failed.
const RETRY_WAITS: [Duration; 3] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Sends on `channel` until it takes the alert or the retries run out; whether it took it.
async fn with_retries<F, Fut>(channel: &'static str, send: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut waits = RETRY_WAITS.iter();
    loop {
        match send().await {
            Ok(()) => return true,
            Err(e) => match waits.next() {
                Some(wait) => {
                    tracing::debug!(channel, cause = %e, "alert not sent; trying again");
                    metrics::counter!("dq_alert_retries_total", "channel" => channel).increment(1);
                    tokio::time::sleep(*wait).await;
                }
                None => {
                    let what = if channel == "smtp" { "e-mail" } else { channel };
                    tracing::error!(channel, cause = %e, "alert {what} failed");
                    metrics::counter!("dq_alerts_failed_total", "channel" => channel).increment(1);
                    return false;
                }
            },
        }
    }
}
