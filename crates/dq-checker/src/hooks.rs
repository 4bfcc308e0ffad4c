//! Hooks: for each job of a topic with a `callback.on_dead_url` that went dead, one POST of the job as
//! looked up with its attempts; for each job of a topic with a `callback.on_success_url` that was
//! delivered, one POST of the job with the callback's answer. Signed like a delivery, retried with
//! backoff (`checker.dead_hook_backoff_ms`, for both kinds).
//!
//! The hooks wait in each partition's `dead_hooks` and `success_hooks` sets: a dead-job hook queued when
//! the checker takes the death's event (see [`crate::events`]), a success hook by the ack that stored
//! the answer; so a checker that dies loses none: a hook leaves its set only once it was sent (a 2xx),
//! given up after its last try, or is not to be sent any more (its job or its topic's URL is gone). While one is being sent it is claimed for as long as the send may take; a
//! checker that dies mid-send leaves it to be tried again once the claim ends, so a hook arrives at least
//! once, and twice only across such a crash. Only the checker that holds the lease sends, on its own
//! task: a slow receiver never holds up alerts or health checks, and deliveries never wait for hooks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dq_core::admin::topics::Topics;
use dq_core::checker::{Hook, HookKind};
use dq_core::egress::{CannotCall, Egress, NameRefused};
use dq_core::topic::Callback;
use dq_core::{Error, Queue};
use futures_util::StreamExt;
use reqwest::Url;
use tokio_util::sync::CancellationToken;

/// `dq_dead_hooks_total` with each outcome it counts.
const HOOKS: dq_core::series::Counter = dq_core::series::Counter::labelled(
    "dq_dead_hooks_total",
    &[("outcome", &["sent", "failed", "given_up", "dropped"])],
);

/// `dq_success_hooks_total`, the same for success hooks.
const SUCCESS_HOOKS: dq_core::series::Counter = dq_core::series::Counter::labelled(
    "dq_success_hooks_total",
    &[("outcome", &["sent", "failed", "given_up", "dropped"])],
);

/// The metric of `kind`'s hooks: its counter's name, and its gauge of hooks waiting.
fn metric(kind: HookKind) -> (&'static str, &'static str) {
    match kind {
        HookKind::Dead => ("dq_dead_hooks_total", "dq_dead_hooks_waiting"),
        HookKind::Success => ("dq_success_hooks_total", "dq_success_hooks_waiting"),
    }
}

/// The URL a topic's callback names for `kind`'s hooks.
fn url_of(callback: &Callback, kind: HookKind) -> Option<&String> {
    match kind {
        HookKind::Dead => callback.on_dead_url.as_ref(),
        HookKind::Success => callback.on_success_url.as_ref(),
    }
}

/// Hooks taken per partition and round.
const PER_ROUND: usize = 100;

/// Hooks sent at once.
const CONCURRENCY: usize = 16;

/// Added to the longest `callback.timeout_ms` of the hooked topics to make a claim: the time from the
/// end of a send to its outcome being written.
const CLAIM_MARGIN_MS: u64 = 10_000;

/// The sender of hooks.
pub(crate) struct Sender {
    /// Where the hooks wait, and the jobs are looked up.
    queue: Queue,
    /// The HTTP clients that apply the egress policy at connect time, as dq-consumer's do.
    egress: Arc<Egress>,
    /// `checker.dead_hook_backoff_ms`: the wait after each failed try; one try more than waits.
    backoff: Vec<u64>,
    /// Whether this checker holds the lease (set by the main loop): only then does it send.
    leader: Arc<AtomicBool>,
}

/// How one try of a hook ended.
enum Try {
    /// A 2xx answer.
    Sent,
    /// Not to be sent any more (the job or the topic's `on_dead_url` is gone): why, for the log.
    Dropped(&'static str),
    /// Failed: the metric label and what happened, for the log.
    Failed(&'static str, String),
}

impl Sender {
    /// A sender that sends while `leader` is true.
    pub(crate) fn new(queue: Queue, egress: Arc<Egress>, backoff: Vec<u64>, leader: Arc<AtomicBool>) -> Sender {
        Sender {
            queue,
            egress,
            backoff,
            leader,
        }
    }

    /// Sends the due hooks every `interval` until `shutdown`. A send cut by the shutdown is tried again
    /// once its claim ends.
    pub(crate) async fn run(self, interval: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.cancelled() => return,
            }
            if !self.leader.load(Ordering::Relaxed) {
                continue;
            }
            tokio::select! {
                _ = self.round() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Takes every partition's due hooks of each kind and tries each once; publishes how many wait.
    async fn round(&self) {
        let topics = match self.queue.admin().topics().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(cause = %e.chain(), "cannot read the topic registry; hooks wait");
                return;
            }
        };
        for kind in HookKind::ALL {
            self.round_of(kind, &topics).await;
        }
    }

    /// [`Sender::round`] for the hooks of `kind`.
    async fn round_of(&self, kind: HookKind, topics: &Topics) {
        // Served at 0 for every topic with a hook, so a rule over given-up hooks has its series.
        let series = if kind == HookKind::Dead { HOOKS } else { SUCCESS_HOOKS };
        for (topic, _) in topics
            .iter()
            .filter(|(_, c)| c.callback.as_ref().is_some_and(|cb| url_of(cb, kind).is_some()))
        {
            dq_core::series::serve_for_topic(topic, &[series]);
        }
        let longest = topics
            .values()
            .filter_map(|c| c.callback.as_ref())
            .filter(|cb| url_of(cb, kind).is_some())
            .map(|cb| cb.timeout_ms)
            .max()
            .unwrap_or(0);
        let claim_ms = longest + CLAIM_MARGIN_MS;
        let mut waiting = 0;
        for p in self.queue.partitions().all() {
            let hooks = match self.queue.checker().take_hooks(kind, p, PER_ROUND, claim_ms).await {
                Ok((hooks, held)) => {
                    waiting += held;
                    hooks
                }
                Err(e) => {
                    tracing::warn!(partition = p, kind = kind.as_str(), cause = %e.chain(), "cannot take hooks");
                    continue;
                }
            };
            futures_util::stream::iter(hooks)
                .for_each_concurrent(CONCURRENCY, |hook| self.settle(kind, p, hook, topics))
                .await;
        }
        metrics::gauge!(metric(kind).1).set(waiting as f64);
    }

    /// Tries `hook` of partition `p` once and records the outcome: gone when sent, given up or dropped;
    /// else due again after its wait.
    async fn settle(&self, kind: HookKind, p: u16, hook: Hook, topics: &Topics) {
        let outcome = self.try_once(kind, p, &hook, topics).await;
        let (counter, _) = metric(kind);
        let event = kind.as_str();
        let label = match &outcome {
            Try::Sent => {
                tracing::debug!(topic = %hook.topic, id = %hook.id, event, "hook sent");
                "sent"
            }
            Try::Dropped(why) => {
                tracing::info!(topic = %hook.topic, id = %hook.id, event, "hook not sent: {why}");
                "dropped"
            }
            Try::Failed(failure, reason) => match self.backoff.get(hook.tries as usize) {
                Some(&wait) => {
                    tracing::debug!(topic = %hook.topic, id = %hook.id, event, kind = failure, %reason, tries = hook.tries + 1,
                        "hook failed; trying again in {wait} ms");
                    if let Err(e) = self.queue.checker().hook_failed(kind, p, &hook, wait).await {
                        tracing::warn!(partition = p, event, cause = %e.chain(), "cannot reschedule a hook; it is tried again when its claim ends");
                    }
                    metrics::counter!(counter, "topic" => hook.topic.clone(), "outcome" => "failed").increment(1);
                    return;
                }
                None => {
                    tracing::warn!(topic = %hook.topic, id = %hook.id, event, kind = failure, %reason, tries = hook.tries + 1,
                        "hook given up after its last try");
                    "given_up"
                }
            },
        };
        if let Err(e) = self.queue.checker().hook_done(kind, p, &hook).await {
            tracing::warn!(partition = p, event, cause = %e.chain(), "cannot forget a hook; it may be sent again");
        }
        metrics::counter!(counter, "topic" => hook.topic.clone(), "outcome" => label).increment(1);
    }

    /// One try: looks the job up and POSTs it to its topic's URL for `kind`.
    async fn try_once(&self, kind: HookKind, p: u16, hook: &Hook, topics: &Topics) -> Try {
        // A topic missing from the registry may be one whose secrets this process cannot open: tried
        // again (and given up in time) rather than dropped.
        let Some(config) = topics.get(&hook.topic) else {
            return Try::Failed("unregistered", "the topic is not in the registry".into());
        };
        let Some((callback, url)) = config.callback.as_ref().and_then(|cb| Some((cb, url_of(cb, kind)?))) else {
            return Try::Dropped("the topic has no such hook URL any more");
        };
        let job = match self.queue.producer().get(&hook.id).await {
            Ok(job) => job,
            Err(Error::NotFound(_)) => return Try::Dropped("the job is gone (deleted)"),
            Err(e) => return Try::Failed("redis_error", format!("cannot look the job up: {e}")),
        };
        let Ok(url) = Url::parse(url) else {
            return Try::Dropped("the hook URL is not a URL");
        };
        let body = match kind {
            HookKind::Dead => {
                // The job, with its attempts (`history`, newest first) as `GET /v1/jobs/{id}/attempts`
                // shows them.
                let history = match self.queue.producer().attempts(&hook.id).await {
                    Ok((_, history)) => history,
                    Err(Error::NotFound(_)) => return Try::Dropped("the job is gone (deleted)"),
                    Err(e) => return Try::Failed("redis_error", format!("cannot read the job's attempts: {e}")),
                };
                serde_json::to_vec(&DeadBody { job: &job, history })
            }
            HookKind::Success => {
                let answer = match self.queue.checker().success_answer(p, &hook.id).await {
                    Ok(Some(answer)) => answer,
                    Ok(None) => return Try::Dropped("the answer it carries is gone (kept 7 days)"),
                    Err(e) => return Try::Failed("redis_error", format!("cannot read the answer: {e}")),
                };
                let Ok(answer) = serde_json::value::RawValue::from_string(answer) else {
                    return Try::Dropped("the answer it carries is not JSON");
                };
                serde_json::to_vec(&SuccessBody { job: &job, answer })
            }
        };
        let body = body.expect("a job always serializes");
        post(&self.egress, &url, callback, kind, hook, body).await
    }
}

/// What a dead-job hook POSTs: the job as a look-up shows it, and its attempts.
#[derive(serde::Serialize)]
struct DeadBody<'a> {
    #[serde(flatten)]
    job: &'a dq_core::Job,
    history: Vec<dq_core::attempt::Attempt>,
}

/// What a success hook POSTs: the job as a look-up shows it, and the callback's answer
/// (`{status, headers, body}`).
#[derive(serde::Serialize)]
struct SuccessBody<'a> {
    #[serde(flatten)]
    job: &'a dq_core::Job,
    answer: Box<serde_json::value::RawValue>,
}

/// POSTs `body` (the job) for `hook` to `url` through `egress`, with the headers that name the job and
/// the event, signed with `callback`'s secrets.
async fn post(egress: &Egress, url: &Url, callback: &Callback, kind: HookKind, hook: &Hook, body: Vec<u8>) -> Try {
    let http = match egress.client(url) {
        Ok(http) => http,
        Err(e @ (CannotCall::Refused(_) | CannotCall::NameRefused(_))) => {
            return Try::Failed("egress_refused", e.to_string());
        }
        Err(e) => return Try::Failed("connect_error", e.to_string()),
    };
    let mut req = http
        .post(url.clone())
        .timeout(Duration::from_millis(callback.timeout_ms))
        .header("content-type", "application/json")
        .header("idempotency-key", format!("{}:{}:{}", hook.id, kind.as_str(), hook.at))
        .header("x-dq-job-id", &hook.id)
        .header("x-dq-event", kind.as_str());
    if let Some(signature) = dq_core::sign::header_now(callback, &body) {
        req = req.header("x-dq-signature", signature);
    }
    match req.body(body).send().await {
        Ok(resp) if resp.status().is_success() => Try::Sent,
        Ok(resp) => Try::Failed("http_error", format!("HTTP {}", resp.status().as_u16())),
        Err(e) if e.is_timeout() => Try::Failed("timeout", format!("no answer within {} ms", callback.timeout_ms)),
        Err(e) => match NameRefused::in_chain(&e) {
            Some(refused) => Try::Failed("egress_refused", refused.to_string()),
            // Without the URL: it may carry credentials.
            None => Try::Failed("connect_error", format!("request failed: {}", e.without_url())),
        },
    }
}
