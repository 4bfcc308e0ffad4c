//! The job model: the checks between what a producer sends (dq-api's [`PushRequest`]) and what dq
//! stores ([`NewJob`]).

pub use dq_api::{DEFAULT_PRIORITY, Job, JobRef, PushRequest, Reservation, State};
use serde::Serialize;

use crate::coalesce::{self, Coalesced, Coalescing};
use crate::config::{JobDefaults, Limits};
use crate::error::{Error, Result};
use crate::trace::TraceContext;

/// When a job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// This many ms after the push, on Redis's clock.
    Delay(u64),
    /// At this Unix time in ms.
    At(i64),
}

/// A validated job, ready to be stored.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The producer's id, or a fresh one chosen at push.
    pub id: Option<String>,
    /// The job's kind.
    pub topic: String,
    /// The body's JSON text.
    pub body: String,
    /// When it is due.
    pub schedule: Due,
    /// Time-to-run in ms.
    pub ttr_ms: u64,
    /// Deliveries before dead (0 = unlimited).
    pub max_attempts: u32,
    /// The deduplication key and window, for a push that gives them.
    pub dedup: Option<Dedup>,
    /// Retries end this many ms after the first due time (none: they end by attempts only).
    pub max_age_ms: Option<u64>,
    /// The job's own backoff list, kept in its record.
    pub backoff_ms: Option<Vec<u64>>,
    /// Its priority, lower first (none: [`DEFAULT_PRIORITY`]): its ready queue orders it by this, then
    /// by due time. The beanstalkd protocol's `put <pri>` is this field too.
    pub priority: Option<u32>,
    /// A `last` or `merge` coalescing key: the push goes into the key's pending job, or starts one (then
    /// `id` is `None`: dq makes the job's id, and the producer's `id` is the push's own).
    pub coalesce: Option<Coalescing>,
    /// Its flow key: the job lives in the partition its topic and key hash to, where the key's queue,
    /// turn and limits are (`flow.lua`); its id is dq's.
    pub flow_key: Option<String>,
    /// A push to a fan-out topic: the jobs it makes, one per topic of the topic's `fanout` (each with
    /// `id` `None`: theirs is `<this id>~<topic>`), stored with this one in one script call or not at
    /// all; this job is then their parent, stored done ([`crate::graph`]).
    pub fanout: Vec<NewJob>,
    /// The W3C trace the job belongs to (the push's `traceparent` and `tracestate`): stored with it
    /// (record field `tc`) and handed on with each delivery. Jobs a job starts (fan-out, a callback's
    /// pushes) inherit it through this field.
    pub trace: Option<TraceContext>,
}

/// A push's deduplication: within `window_ms` of the push that made a job with `key` (in its topic),
/// another push with `key` answers with that job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedup {
    /// The producer's key, with a job id's syntax.
    pub key: String,
    /// The window in ms.
    pub window_ms: u64,
}

impl NewJob {
    /// Its priority as its record keeps it: none for the default ([`DEFAULT_PRIORITY`]), which is stored
    /// as none (`record.lua`).
    pub(crate) fn stored_priority(&self) -> Option<u32> {
        self.priority.filter(|&p| p != DEFAULT_PRIORITY)
    }

    /// Checks a push against the limits and fills in defaults (`max_age_ms`, the topic's
    /// `retry.max_age_ms`, for a push that gives none). `now_ms` (this machine's clock) is used only to
    /// bound `run_at`; the due time itself is computed by Redis.
    pub fn from_request(
        req: PushRequest,
        limits: &Limits,
        defaults: &JobDefaults,
        max_age_ms: Option<u64>,
        now_ms: i64,
    ) -> Result<Self> {
        validate_topic(&req.topic)?;
        if let Some(id) = &req.id {
            validate_new_id(id)?;
        }
        let body = req.body.get();
        if body.len() > limits.max_body_bytes {
            return Err(Error::TooLarge(format!(
                "body is {} bytes, the limit is {}",
                body.len(),
                limits.max_body_bytes
            )));
        }
        let horizon = limits.max_delay_ms;
        let schedule = match (req.delay_ms, req.run_at) {
            (Some(_), Some(_)) => {
                return Err(Error::Invalid("give either `delay_ms` or `run_at`, not both".into()));
            }
            (Some(d), None) if d < 0 => {
                return Err(Error::Invalid(format!("`delay_ms` must be 0 or more, got {d}")));
            }
            (Some(d), None) if d as u64 > horizon => {
                return Err(Error::Invalid(format!(
                    "`delay_ms` {d} is beyond the limit of {horizon} ms"
                )));
            }
            (Some(d), None) => Due::Delay(d as u64),
            (None, Some(at)) if at < 0 => {
                return Err(Error::Invalid(format!("`run_at` must be a Unix time in ms, got {at}")));
            }
            (None, Some(at)) if at > now_ms.saturating_add(horizon as i64) => {
                return Err(Error::Invalid(format!(
                    "`run_at` {at} is more than {horizon} ms from now"
                )));
            }
            (None, Some(at)) => Due::At(at),
            (None, None) => Due::Delay(0),
        };
        let ttr_ms = match req.ttr_ms {
            None => defaults.ttr_ms,
            Some(t) if t < limits.min_ttr_ms as i64 || t > limits.max_ttr_ms as i64 => {
                return Err(Error::Invalid(format!(
                    "`ttr_ms` must be between {} and {}, got {t}",
                    limits.min_ttr_ms, limits.max_ttr_ms
                )));
            }
            Some(t) => t as u64,
        };
        let max_attempts = match req.max_attempts {
            None => defaults.max_attempts,
            Some(m) if m < 0 || m > limits.max_attempts as i64 => {
                return Err(Error::Invalid(format!(
                    "`max_attempts` must be between 0 (unlimited) and {}, got {m}",
                    limits.max_attempts
                )));
            }
            Some(m) => m as u32,
        };
        let coalesced = coalesce::check(
            coalesce::Fields {
                key: req.coalesce_key,
                coalesce: req.coalesce,
                dedup: req.dedup_key.is_some() || req.dedup_ms.is_some(),
                id: req.id.as_deref(),
                due_given: req.delay_ms.is_some() || req.run_at.is_some(),
                body_len: body.len(),
            },
            limits,
        )?;
        let dedup = match (req.dedup_key, req.dedup_ms) {
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::Invalid("`dedup_key` and `dedup_ms` go together".into()));
            }
            (Some(_), Some(_)) if req.id.is_some() => {
                return Err(Error::Invalid(
                    "give either `id` (itself the idempotency key) or `dedup_key`, not both".into(),
                ));
            }
            (Some(key), Some(ms)) => {
                validate_key(&key).map_err(|_| {
                    Error::Invalid(format!(
                        "dedup_key `{}` is not valid: 1 to 128 of A-Z a-z 0-9 _ . : -",
                        shorten(&key)
                    ))
                })?;
                if ms < 1 || ms as u64 > horizon {
                    return Err(Error::Invalid(format!(
                        "`dedup_ms` must be between 1 and {horizon} (limits.max_delay_ms), got {ms}"
                    )));
                }
                Some(Dedup {
                    key,
                    window_ms: ms as u64,
                })
            }
        };
        let max_age_ms = match req.max_age_ms {
            None => max_age_ms,
            Some(a) => Some(check_max_age(a, "max_age_ms", limits)?),
        };
        if let Some(b) = &req.backoff_ms {
            check_backoff(b, "backoff_ms", limits)?;
        }
        let priority = req.priority.map(|p| check_priority(p, "priority")).transpose()?;
        let (dedup, coalesce, id) = match coalesced {
            Coalesced::None => (dedup, None, req.id),
            Coalesced::First(d) => (Some(d), None, req.id),
            // The producer's id names the push; dq makes the job's (due by the window, not `schedule`).
            Coalesced::Pending(c) => (None, Some(c), None),
        };
        if let Some(key) = &req.flow_key {
            validate_key(key).map_err(|_| {
                Error::Invalid(format!(
                    "flow_key `{}` is not valid: 1 to 128 of A-Z a-z 0-9 _ . : -",
                    shorten(key)
                ))
            })?;
        }
        let trace = TraceContext::from_fields(req.traceparent.as_deref(), req.tracestate.as_deref())?;
        Ok(NewJob {
            id,
            topic: req.topic,
            body: body.to_string(),
            schedule,
            ttr_ms,
            max_attempts,
            dedup,
            max_age_ms,
            backoff_ms: req.backoff_ms,
            priority,
            coalesce,
            flow_key: req.flow_key,
            fanout: Vec::new(),
            trace,
        })
    }
}

/// Checks a priority (`field` names it in the message): 0 ..= 2³²−1.
pub fn check_priority(p: i64, field: &str) -> Result<u32> {
    u32::try_from(p).map_err(|_| Error::Invalid(format!("`{field}` must be between 0 and {}, got {p}", u32::MAX)))
}

/// Checks a retry age (`field` names it in the message): 1 ..= `limits.max_delay_ms`.
pub fn check_max_age(ms: i64, field: &str, limits: &Limits) -> Result<u64> {
    if ms < 1 || ms as u64 > limits.max_delay_ms {
        return Err(Error::Invalid(format!(
            "`{field}` must be between 1 and {} (limits.max_delay_ms), got {ms}",
            limits.max_delay_ms
        )));
    }
    Ok(ms as u64)
}

/// Checks a backoff list (`field` names it in the message): 1 to 100 delays, each within
/// `limits.max_delay_ms`.
pub fn check_backoff(list: &[u64], field: &str, limits: &Limits) -> Result<()> {
    if list.is_empty() || list.len() > 100 {
        return Err(Error::Invalid(format!("`{field}` must hold 1 to 100 delays")));
    }
    if let Some(d) = list.iter().find(|d| **d > limits.max_delay_ms) {
        return Err(Error::Invalid(format!(
            "`{field}` has {d}, beyond the limit of {} ms",
            limits.max_delay_ms
        )));
    }
    Ok(())
}

/// Checks a topic name: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`.
pub fn validate_topic(topic: &str) -> Result<()> {
    let b = topic.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "topic `{}` is not a valid name: 1 to 128 of A-Z a-z 0-9 _ . -, starting with a letter or digit",
            shorten(topic)
        )))
    }
}

/// The separator of a derived id: a job started by another (a fan-out's child, a job an answer pushed)
/// has the id `<parent id>~<suffix>`. No id a producer gives holds it, so a derived id is never one a
/// producer chose, and the part before the first `~` (the root's id) places the whole graph in one
/// partition ([`crate::store::partition::partition_of`]), where one script writes a parent and its
/// children together.
pub const CHILD_SEPARATOR: char = '~';

/// The longest id: a root's (128 bytes) and the suffixes of the jobs it started, generation after
/// generation. A push that would make a longer one is refused, which also ends a loop of jobs that
/// start each other.
pub const MAX_ID_BYTES: usize = 512;

/// Checks a key: a producer's id, a deduplication, coalescing or flow key: `^[A-Za-z0-9_.:-]{1,128}$`.
pub fn validate_key(key: &str) -> Result<()> {
    if is_key(key) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "id `{}` is not a valid job id: 1 to 128 of A-Z a-z 0-9 _ . : -",
            shorten(key)
        )))
    }
}

fn is_key(key: &str) -> bool {
    let b = key.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}

/// Checks a job id as it is looked up: a key ([`validate_key`]), or a derived id, a key followed by
/// `~<suffix>` parts (each a key), at most [`MAX_ID_BYTES`] in all.
pub fn validate_id(id: &str) -> Result<()> {
    if id.len() <= MAX_ID_BYTES && id.split(CHILD_SEPARATOR).all(is_key) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "id `{}` is not a valid job id: 1 to 128 of A-Z a-z 0-9 _ . : -, or a job's id and `~<suffix>`              for a job it started (at most {MAX_ID_BYTES} bytes)",
            shorten(id)
        )))
    }
}

/// The id of the `suffix` child of `parent` (see [`CHILD_SEPARATOR`]).
pub fn child_id(parent: &str, suffix: &str) -> String {
    format!("{parent}{CHILD_SEPARATOR}{suffix}")
}

/// Checks that `parent` may start a job with `suffix`: the child's id stays within [`MAX_ID_BYTES`].
pub fn check_child_id(parent: &str, suffix: &str) -> Result<()> {
    if parent.len() + 1 + suffix.len() > MAX_ID_BYTES {
        return Err(Error::Invalid(format!(
            "the job `{}` cannot start jobs: their ids would pass {MAX_ID_BYTES} bytes (a chain of jobs this \
             long is usually a loop)",
            shorten(parent)
        )));
    }
    Ok(())
}

/// The parent of a derived id (the job that started it); `None` for a root.
pub fn parent_of(id: &str) -> Option<&str> {
    id.rsplit_once(CHILD_SEPARATOR).map(|(parent, _)| parent)
}

/// Ids a push may not give: they name routes (`POST /v1/jobs/batch`, `POST /v1/jobs/ack`), so a job
/// of that id could not be looked up, cancelled or rescheduled by its path, and the OpenAPI document
/// would have to describe those verbs twice.
pub const ROUTE_IDS: [&str; 2] = ["ack", "batch"];

/// Checks the id a push gives: a key ([`validate_key`]: never a derived id), and not one of
/// [`ROUTE_IDS`].
pub fn validate_new_id(id: &str) -> Result<()> {
    validate_key(id)?;
    if ROUTE_IDS.contains(&id) {
        return Err(Error::Invalid(format!(
            "id `{id}` names a route (POST /v1/jobs/{id}): give another id"
        )));
    }
    Ok(())
}

/// Keeps error messages short when the offending input is huge.
pub(crate) fn shorten(s: &str) -> String {
    if s.len() <= 64 {
        return s.to_string();
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The outcome of storing one job.
#[derive(Debug, Clone, Serialize)]
pub struct Pushed {
    /// The job's id (given or generated).
    pub id: String,
    /// `delayed` or `ready`.
    pub state: State,
    /// Due time, Unix ms.
    pub run_at: i64,
    /// The push found a job with its deduplication key inside the window: this is that job, and
    /// nothing was stored.
    pub duplicate: bool,
    /// The push went into the pending job of its coalescing key (or found its deduplication key's):
    /// this is that job.
    pub coalesced: bool,
    /// A fan-out's push: the jobs it made, one per topic of its `fanout`.
    pub children: Vec<JobRef>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> PushRequest {
        serde_json::from_str(json).unwrap()
    }

    fn check(json: &str) -> Result<NewJob> {
        NewJob::from_request(
            req(json),
            &Limits::default(),
            &JobDefaults::default(),
            None,
            1_700_000_000_000,
        )
    }

    #[test]
    fn topic_names() {
        for ok in ["a", "orders.close", "A-1_b.c", &"x".repeat(128)] {
            assert!(validate_topic(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", ".a", "_a", "a b", "a/b", "a:b", "é", &"x".repeat(129)] {
            assert!(validate_topic(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn job_ids() {
        for ok in ["a", "order:42", "01J.x-y_z", "-lead", &"1".repeat(128)] {
            assert!(validate_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a/b", "a\n", "ü", &"1".repeat(129)] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
        for route in ROUTE_IDS {
            assert!(validate_id(route).is_ok(), "{route} may still be looked up");
            assert!(validate_new_id(route).is_err(), "{route} is refused at push");
        }
        assert!(validate_new_id("acks").is_ok());
        // Derived ids: looked up, never given by a producer; each part a key, 512 bytes at most.
        for ok in [
            "a~0",
            "order:42~mail~3",
            &format!("{}~{}", "1".repeat(128), "x".repeat(128)),
        ] {
            assert!(validate_id(ok).is_ok(), "{ok}");
            assert!(validate_new_id(ok).is_err(), "{ok} is refused at push");
            assert!(validate_key(ok).is_err(), "{ok} is no key");
        }
        for bad in ["~a", "a~", "a~~b", "a~b c", &format!("a{}", "~1234567".repeat(64))] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
        assert_eq!(child_id("a~0", "mail"), "a~0~mail");
        assert!(check_child_id(&"a".repeat(510), "1").is_ok());
        assert!(check_child_id(&"a".repeat(510), "12").is_err());
        assert_eq!(parent_of("a~0~mail"), Some("a~0"));
        assert_eq!(parent_of("a"), None);
    }

    #[test]
    fn defaults_apply() {
        let j = check(r#"{"topic":"t","body":{"a":1}}"#).unwrap();
        assert_eq!(j.schedule, Due::Delay(0));
        assert_eq!(j.ttr_ms, 30_000);
        assert_eq!(j.max_attempts, 10);
        assert_eq!(j.body, r#"{"a":1}"#);
    }

    #[test]
    fn a_priority_is_kept_in_its_range() {
        assert_eq!(check(r#"{"topic":"t","body":1}"#).unwrap().priority, None);
        assert_eq!(
            check(r#"{"topic":"t","body":1,"priority":0}"#).unwrap().priority,
            Some(0)
        );
        assert_eq!(
            check(r#"{"topic":"t","body":1,"priority":4294967295}"#)
                .unwrap()
                .priority,
            Some(u32::MAX)
        );
    }

    #[test]
    fn a_dedup_key_comes_with_its_window() {
        let j = check(r#"{"topic":"t","body":1,"dedup_key":"order:42","dedup_ms":60000}"#).unwrap();
        assert_eq!(
            j.dedup,
            Some(Dedup {
                key: "order:42".into(),
                window_ms: 60_000
            })
        );
        assert_eq!(check(r#"{"topic":"t","body":1}"#).unwrap().dedup, None);
    }

    #[test]
    fn schedules() {
        assert_eq!(
            check(r#"{"topic":"t","body":1,"delay_ms":500}"#).unwrap().schedule,
            Due::Delay(500)
        );
        assert_eq!(
            check(r#"{"topic":"t","body":1,"run_at":5}"#).unwrap().schedule,
            Due::At(5)
        );
    }

    #[test]
    fn bad_pushes() {
        for (json, says) in [
            (r#"{"topic":"t","body":1,"delay_ms":-1}"#, "delay_ms"),
            (r#"{"topic":"t","body":1,"delay_ms":1,"run_at":1}"#, "not both"),
            (r#"{"topic":"t","body":1,"delay_ms":99999999999999}"#, "beyond"),
            (r#"{"topic":"t","body":1,"run_at":-5}"#, "run_at"),
            (r#"{"topic":"t","body":1,"run_at":99999999999999}"#, "from now"),
            (r#"{"topic":"t","body":1,"ttr_ms":10}"#, "ttr_ms"),
            (r#"{"topic":"t","body":1,"ttr_ms":999999999999}"#, "ttr_ms"),
            (r#"{"topic":"t","body":1,"max_attempts":-1}"#, "max_attempts"),
            (r#"{"topic":"t","body":1,"max_attempts":100000}"#, "max_attempts"),
            (r#"{"topic":"bad topic","body":1}"#, "topic"),
            (r#"{"topic":"t","body":1,"id":"a b"}"#, "id"),
            (r#"{"topic":"t","body":1,"dedup_key":"k"}"#, "go together"),
            (r#"{"topic":"t","body":1,"dedup_ms":1000}"#, "go together"),
            (
                r#"{"topic":"t","body":1,"id":"i","dedup_key":"k","dedup_ms":1000}"#,
                "not both",
            ),
            (
                r#"{"topic":"t","body":1,"dedup_key":"a b","dedup_ms":1000}"#,
                "dedup_key",
            ),
            (r#"{"topic":"t","body":1,"dedup_key":"","dedup_ms":1000}"#, "dedup_key"),
            (r#"{"topic":"t","body":1,"dedup_key":"k","dedup_ms":0}"#, "dedup_ms"),
            (r#"{"topic":"t","body":1,"dedup_key":"k","dedup_ms":-5}"#, "dedup_ms"),
            (r#"{"topic":"t","body":1,"max_age_ms":0}"#, "max_age_ms"),
            (r#"{"topic":"t","body":1,"max_age_ms":99999999999999}"#, "max_age_ms"),
            (r#"{"topic":"t","body":1,"backoff_ms":[]}"#, "backoff_ms"),
            (r#"{"topic":"t","body":1,"backoff_ms":[99999999999999]}"#, "backoff_ms"),
            (r#"{"topic":"t","body":1,"priority":-1}"#, "priority"),
            (r#"{"topic":"t","body":1,"priority":4294967296}"#, "priority"),
            (
                r#"{"topic":"t","body":1,"dedup_key":"k","dedup_ms":99999999999999}"#,
                "dedup_ms",
            ),
        ] {
            let err = check(json).unwrap_err();
            assert!(matches!(err, Error::Invalid(_)), "{json}: {err:?}");
            assert!(err.to_string().contains(says), "{json}: {err}");
        }
    }

    #[test]
    fn a_trace_context_is_checked_at_push() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(check(r#"{"topic":"t","body":1}"#).unwrap().trace, None);
        let j = check(&format!(
            r#"{{"topic":"t","body":1,"traceparent":"{tp}","tracestate":"k=v"}}"#
        ))
        .unwrap();
        let trace = j.trace.unwrap();
        assert_eq!(
            (trace.traceparent.as_str(), trace.tracestate.as_deref()),
            (tp, Some("k=v"))
        );
        for (json, says) in [
            (
                r#"{"topic":"t","body":1,"traceparent":"00-abc-def-01"}"#.to_string(),
                "`traceparent`",
            ),
            (
                r#"{"topic":"t","body":1,"tracestate":"k=v"}"#.to_string(),
                "needs a `traceparent`",
            ),
            (
                format!(r#"{{"topic":"t","body":1,"traceparent":"{tp}","tracestate":"K=v"}}"#),
                "`tracestate`",
            ),
        ] {
            let err = check(&json).unwrap_err();
            assert!(matches!(err, Error::Invalid(_)), "{json}: {err:?}");
            assert!(err.to_string().contains(says), "{json}: {err}");
        }
    }

    #[test]
    fn body_over_the_limit_is_too_large() {
        let json = format!(r#"{{"topic":"t","body":"{}"}}"#, "x".repeat(70_000));
        assert!(matches!(check(&json).unwrap_err(), Error::TooLarge(_)));
    }

    #[test]
    fn wrong_shapes_fail_to_parse() {
        for json in [
            r#"{"body":1}"#,
            r#"{"topic":"t"}"#,
            r#"{"topic":5,"body":1}"#,
            r#"{"topic":"t","body":1,"delay_ms":"5"}"#,
            r#"{"topic":"t","body":1,"dealy_ms":5}"#,
        ] {
            assert!(serde_json::from_str::<PushRequest>(json).is_err(), "{json}");
        }
    }
}
