//! Topics on the wire: a topic's registration (callback, retry policy, defaults, paused) and how the API
//! shows it, its job counts, its dead letters and the pages of its jobs.
//!
//! A topic without a callback is pulled through the API; one with a callback is delivered by
//! dq-consumer, and may name a `callback.on_dead_url` that dq-checker POSTs each job that goes dead to.
//! Registration is optional: pushing to an unregistered topic uses the global defaults. The checks of a
//! registration against the server's limits, and sealing its secrets at rest, are dq-core's
//! (`dq_core::topic`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::RawBody;
use crate::job::{Job, State};

/// A topic's registration, as `PUT /v1/topics/{topic}` takes it and `GET` returns it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// Where dq-consumer POSTs the topic's jobs; none for pull topics.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::strict::option_object"
    )]
    pub callback: Option<Callback>,
    /// Attempts, backoff and the retry condition.
    #[serde(default, deserialize_with = "crate::strict::object")]
    pub retry: Retry,
    /// Values for what a push of this topic leaves out.
    #[serde(default, deserialize_with = "crate::strict::object")]
    pub defaults: TopicDefaults,
    /// A paused topic is neither delivered nor handed out by reserve; pushes still go in.
    #[serde(default)]
    pub paused: bool,
    /// Ready jobs above which dq-checker raises a backlog alert for this topic (else
    /// `checker.backlog_threshold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_threshold: Option<u64>,
    /// Limits on each flow key of the topic (its jobs' `flow_key`), counted over every dq-consumer and
    /// every pull reserve. Keys with ready jobs take turns whether or not the topic has limits.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::strict::option_object"
    )]
    pub flow: Option<Flow>,
    /// A fan-out topic: a push to it makes one job per topic listed here (at most 32), atomically and
    /// once per push id, each with its own callback or pull consumers, retries and dead letters, and
    /// an id `<push id>~<topic>`. The push itself is kept as their parent (state `done`), which a
    /// look-up shows with its children's states. Not with `callback` or `flow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fanout: Vec<String>,
}

/// Limits on each flow key of a topic, apart (a customer's, a merchant's): a key at its concurrency,
/// out of tokens or paused by its callback waits, and the other keys go on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// Jobs of one key reserved at once (deliveries in flight, pull reservations); none for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Jobs of one key reserved per second at most (a token bucket per key); none for no rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Jobs of one key that may start at once after a quiet spell under `rate_per_s` (its bucket's
    /// size); else the rate rounded up (one second's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl Flow {
    /// The token bucket's size: `burst`, else one second's worth of `rate_per_s` (at least 1).
    pub fn burst_or_default(&self) -> u32 {
        bucket_size(self.rate_per_s, self.burst)
    }
}

/// The callback of a push topic.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Callback {
    /// `http` or `https` URL to POST each job to.
    pub url: String,
    /// How long one delivery may take, in ms.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Deliveries in flight at once, over every dq-consumer (each worker holds slots on a lease in
    /// Redis, see `limit.lua`).
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// Deliveries started per second at most, over every dq-consumer (a token bucket in Redis); none
    /// for no rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Deliveries that may start at once after a quiet spell under `rate_per_s` (the bucket's size);
    /// else the rate rounded up (one second's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Key of the `X-DQ-Signature` HMAC; never printed, and shown as `***` by the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The key being rotated out: while set, every delivery is signed with both (two `v1=` in
    /// `X-DQ-Signature`), so receivers can switch to `secret` at their own pace. Masked like `secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<String>,
    /// `http` or `https` URL that dq-checker POSTs each job of the topic that goes dead to (the job as
    /// looked up, signed like a delivery), retried with backoff; none for no hook. Checked like `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dead_url: Option<String>,
    /// `http` or `https` URL that dq-checker POSTs each job of the topic that was delivered to (the job
    /// as looked up, with the callback's `answer`: its status, the headers of `on_success_headers`,
    /// its body), signed like a delivery, retried with backoff like `on_dead_url`; none for no hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success_url: Option<String>,
    /// Names of the answer's headers a success hook carries (at most 32; matched without case).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_success_headers: Vec<String>,
    /// Glob patterns (`*` any run of characters, `?` one) of the topics the callback's answer may push
    /// to: a 2xx answer `{"dq": {"push": [job, …]}}` stores those jobs (at most 100) with the
    /// delivery's success, once, with ids `<job id>~<index>`. Empty (the default): an answer cannot
    /// push, and one that tries fails its delivery.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_push: Vec<String>,
}

/// What the API shows in place of a secret, a header value or a URL's credentials.
pub const MASK: &str = "***";

/// `url` with the credentials it carries masked, for the API, the admin pages and logs: the password
/// (`https://user:***@host/`; a user alone, often a token, as `***`) and every query value
/// (`https://hooks.example/x?token=***`: webhook URLs often carry their token there). Names of query
/// parameters stay, so the URL still says what it is. Unparsable: shown as it is (registration refuses
/// such URLs). The stored URL stays exact: deliveries go to it.
pub fn masked_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return url.to_string();
    };
    let mut changed = false;
    if u.password().is_some() {
        let _ = u.set_password(Some(MASK));
        changed = true;
    } else if !u.username().is_empty() {
        let _ = u.set_username(MASK);
        changed = true;
    }
    if u.query().is_some_and(|q| !q.is_empty()) {
        let names: Vec<(String, bool)> = u.query_pairs().map(|(k, v)| (k.into_owned(), v.is_empty())).collect();
        let mut pairs = u.query_pairs_mut();
        pairs.clear();
        for (name, empty) in names {
            pairs.append_pair(&name, if empty { "" } else { MASK });
        }
        drop(pairs);
        changed = true;
    }
    if changed { u.to_string() } else { url.to_string() }
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callback")
            .field("url", &masked_url(&self.url))
            .field("timeout_ms", &self.timeout_ms)
            .field("concurrency", &self.concurrency)
            .field("rate_per_s", &self.rate_per_s)
            .field("burst", &self.burst)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("previous_secret", &self.previous_secret.as_ref().map(|_| "***"))
            .field("on_dead_url", &self.on_dead_url.as_deref().map(masked_url))
            .field("on_success_url", &self.on_success_url.as_deref().map(masked_url))
            .field("on_success_headers", &self.on_success_headers)
            .field("allow_push", &self.allow_push)
            .finish()
    }
}

/// `callback.timeout_ms` of a registration that gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;

/// `callback.concurrency` of a registration that gives none.
pub const DEFAULT_CONCURRENCY: u32 = 16;

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_concurrency() -> u32 {
    DEFAULT_CONCURRENCY
}

/// A callback to `url` with every other field at its default (as a registration that gives only the
/// URL reads), to fill in with `..Callback::default()`.
impl Default for Callback {
    fn default() -> Self {
        Callback {
            url: String::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            concurrency: DEFAULT_CONCURRENCY,
            rate_per_s: None,
            burst: None,
            headers: BTreeMap::new(),
            secret: None,
            previous_secret: None,
            on_dead_url: None,
            on_success_url: None,
            on_success_headers: Vec::new(),
            allow_push: Vec::new(),
        }
    }
}

/// The highest `callback.rate_per_s` and `callback.burst` a topic may set.
pub const MAX_RATE: f64 = 1_000_000.0;

impl Callback {
    /// The token bucket's size: `burst`, else one second's worth of `rate_per_s` (at least 1).
    pub fn burst_or_default(&self) -> u32 {
        bucket_size(self.rate_per_s, self.burst)
    }
}

/// A topic's flow keys with ready jobs, as `GET /v1/topics/{topic}/flows` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowKeys {
    /// How many keys have ready jobs.
    pub keys: u64,
    /// The busiest of them: most ready jobs first.
    pub busiest: Vec<FlowKey>,
}

/// One flow key's jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowKey {
    /// The key.
    pub key: String,
    /// Its ready jobs: exact for a key that takes turns (its topic has limits, or it is paused); for a
    /// key of a topic without limits, read from its place in line (exact while its jobs wait their turn,
    /// one too many while the round under way has taken its job).
    pub ready: u64,
    /// Its reserved jobs (what counts against `flow.concurrency`).
    pub reserved: u64,
}

/// A token bucket's size: `burst`, else one second's worth of `rate_per_s` (at least 1).
fn bucket_size(rate_per_s: Option<f64>, burst: Option<u32>) -> u32 {
    burst.unwrap_or_else(|| rate_per_s.map_or(1, |r| r.ceil().clamp(1.0, MAX_RATE) as u32))
}

/// Retry policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Deliveries before a job goes dead (0 = unlimited); else `jobs.max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Delay after the i-th failed delivery, ms; the last repeats. Else `jobs.backoff_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
    /// Retries end this many ms after a job's first due time, however many attempts remain: written
    /// into each job at push, like `max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<u64>,
    /// When true of a 2xx answer, the delivery failed, e.g. `{res.code} != 200 && {res.data.status} != 2`
    /// (`res` is the JSON answer; `{http.status}` and `{http.body}` the HTTP status and raw body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// Push defaults of a topic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TopicDefaults {
    /// TTR of a push that gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    /// Delay of a push that gives neither `delay_ms` nor `run_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

impl TopicConfig {
    /// The config as the API shows it: the secrets, header values (often credentials) and credentials
    /// in the URL masked.
    pub fn redacted(&self) -> TopicConfig {
        let mut c = self.clone();
        if let Some(cb) = &mut c.callback {
            cb.url = masked_url(&cb.url);
            cb.on_dead_url = cb.on_dead_url.as_deref().map(masked_url);
            cb.on_success_url = cb.on_success_url.as_deref().map(masked_url);
            for s in [&mut cb.secret, &mut cb.previous_secret].into_iter().flatten() {
                *s = MASK.into();
            }
            for v in cb.headers.values_mut() {
                *v = MASK.into();
            }
        }
        c
    }

    /// Backoff list: the topic's, else `default` (`jobs.backoff_ms`).
    pub fn backoff<'a>(&'a self, default: &'a [u64]) -> &'a [u64] {
        self.retry.backoff_ms.as_deref().unwrap_or(default)
    }
}

/// Jobs of a topic by state, summed over the partitions (`done` jobs are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    // In the order of their names, as the API has always written them.
    /// In the dead list.
    #[serde(default)]
    pub dead: i64,
    /// Waiting for their due time.
    #[serde(default)]
    pub delayed: i64,
    /// Due, waiting for a consumer.
    #[serde(default)]
    pub ready: i64,
    /// Held by a consumer.
    #[serde(default)]
    pub reserved: i64,
}

impl Counts {
    /// Adds `n` jobs in `state` (`done` is not counted: nothing changes).
    pub fn add(&mut self, state: State, n: i64) {
        match state {
            State::Delayed => self.delayed += n,
            State::Ready => self.ready += n,
            State::Reserved => self.reserved += n,
            State::Dead => self.dead += n,
            State::Done => {}
        }
    }

    /// The jobs in `state` (0 for `done`, which is not counted).
    pub fn get(&self, state: State) -> i64 {
        match state {
            State::Delayed => self.delayed,
            State::Ready => self.ready,
            State::Reserved => self.reserved,
            State::Dead => self.dead,
            State::Done => 0,
        }
    }
}

/// A topic as the API shows it: its registration (`null` for an unregistered topic that has jobs) and
/// its job counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicView {
    /// The topic's name.
    pub topic: String,
    /// Its registration, secrets, header values and credentials in URLs masked (`***`); `null` for a
    /// topic that is not registered but has jobs.
    pub config: Option<TopicConfig>,
    /// Jobs by state (`delayed`, `ready`, `reserved`, `dead`; `done` jobs are not counted).
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, i64>))]
    pub counts: Counts,
}

/// `GET /v1/topics` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicList {
    /// Registered topics and topics with jobs, by name.
    pub topics: Vec<TopicView>,
}

/// `GET /v1/topics/{topic}/dead` query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct DeadQuery {
    /// Jobs to skip.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Jobs to return (1..=1000, default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A page of a topic's dead list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
pub struct DeadPage<B = RawBody> {
    /// Dead jobs, oldest death first.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Job>))]
    pub jobs: Vec<Job<B>>,
    /// Dead jobs of the topic in all.
    pub total: u64,
}

/// Body of requeue and delete of dead jobs: some ids, or none (no body, or `{}`) for all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeadIds {
    /// Which dead jobs (at most 1000); absent means all.
    #[serde(default)]
    pub ids: Option<Vec<String>>,
}

/// `POST /v1/topics/{topic}/dead/requeue` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Requeued {
    /// Jobs moved back to ready.
    pub requeued: u64,
}

/// `DELETE /v1/topics/{topic}/dead` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Deleted {
    /// Dead jobs deleted.
    pub deleted: u64,
}

/// The states a page can list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Listed {
    /// Waiting for their due time, earliest first.
    Delayed,
    /// Due, earliest due first.
    Ready,
    /// Held by a consumer, earliest deadline first.
    Reserved,
    /// In the dead list, oldest death first.
    Dead,
}

impl From<Listed> for State {
    fn from(l: Listed) -> State {
        match l {
            Listed::Delayed => State::Delayed,
            Listed::Ready => State::Ready,
            Listed::Reserved => State::Reserved,
            Listed::Dead => State::Dead,
        }
    }
}

/// `GET /v1/topics/{topic}/flows` query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct FlowsQuery {
    /// The busiest keys to show (1 ..= 100, default 10).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /v1/topics/{topic}/jobs` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct BrowseQuery {
    /// Which jobs: `delayed`, `ready`, `reserved` or `dead`.
    #[cfg_attr(feature = "openapi", param(inline))]
    pub state: Listed,
    /// Jobs to skip (0 ..= 1000000).
    #[serde(default)]
    pub offset: Option<usize>,
    /// Jobs to return (1 ..= 1000, default 50).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A page of a topic's jobs in one state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
pub struct JobPage<B = RawBody> {
    /// The jobs, by due time (ready, delayed), deadline (reserved) or time of death (dead), earliest first.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Job>))]
    pub jobs: Vec<Job<B>>,
    /// The topic's jobs in this state over all partitions (from the counts).
    pub total: u64,
    /// False when the page of delayed or reserved jobs may miss some of the topic's jobs (see the module
    /// documentation): the partitions' shared sets were read only in part.
    pub complete: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_are_masked() {
        assert_eq!(
            masked_url("https://user:pw@hooks.example/x?a=1"),
            "https://user:***@hooks.example/x?a=***"
        );
        assert_eq!(masked_url("http://10.0.0.5:8080/hook"), "http://10.0.0.5:8080/hook");
    }

    #[test]
    fn counts_are_written_as_they_always_were() {
        let mut c = Counts::default();
        c.add(State::Ready, 2);
        c.add(State::Done, 5);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"dead":0,"delayed":0,"ready":2,"reserved":0}"#
        );
    }

    #[test]
    fn a_default_callback_is_what_a_registration_of_only_its_url_reads() {
        let read: Callback = serde_json::from_str(r#"{"url": "http://h/"}"#).unwrap();
        let built = Callback {
            url: "http://h/".into(),
            ..Callback::default()
        };
        assert_eq!(read, built);
    }
}
