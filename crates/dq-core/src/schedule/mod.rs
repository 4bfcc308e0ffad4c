//! Schedules: a cron pattern that pushes one job per occurrence.
//!
//! - [`ScheduleRules`]: the checks of what `PUT /v1/schedules/{name}` takes (dq-api's [`ScheduleConfig`]),
//!   those of a push.
//! - [`cadence`]: when the occurrences fall, in the schedule's zone, and the missed-occurrence policy.
//! - [`job_id`]: the id of an occurrence's job, which makes firing exactly once.
//!
//! dq-timer fires them (`dq_timer::schedules`); the registry is kept by [`crate::queue::schedules`].

pub mod cadence;
#[cfg(test)]
mod tests;

pub use self::cadence::{Cadence, rfc3339};
use crate::config::{JobDefaults, Limits};
use crate::error::{Error, Result};
use crate::job::{NewJob, PushRequest, shorten, validate_topic};

pub use dq_api::schedule::ScheduleConfig;

/// What dq does with a schedule's registration: check it, and make the push of an occurrence. (A trait,
/// as `ScheduleConfig` is dq-api's: `use dq_core::schedule::ScheduleRules` where these are called.)
pub trait ScheduleRules {
    /// Checks the schedule as `name`: the name (a topic name's rule), the pattern and zone, and the job it
    /// pushes as a push is checked (topic, body size, `ttr_ms`, `max_attempts` within `limits`). Every
    /// refusal is [`Error::Invalid`] naming the field.
    fn validate(&self, name: &str, limits: &Limits) -> Result<Cadence>;

    /// The push of the occurrence at `occurrence_ms`: id [`job_id`], due at the occurrence (so one that
    /// fires late is ready at once), with the schedule's topic, body and job fields.
    fn push_request(&self, name: &str, occurrence_ms: i64) -> PushRequest;
}

impl ScheduleRules for ScheduleConfig {
    fn validate(&self, name: &str, limits: &Limits) -> Result<Cadence> {
        validate_name(name)?;
        let cadence = Cadence::parse(&self.cron, &self.timezone)?;
        let job = NewJob::from_request(self.push_request(name, 0), limits, &JobDefaults::default(), None, 0);
        match job {
            Ok(_) => Ok(cadence),
            Err(Error::TooLarge(why)) => Err(Error::Invalid(format!("`body`: {why}"))),
            Err(e) => Err(e),
        }
    }

    fn push_request(&self, name: &str, occurrence_ms: i64) -> PushRequest {
        PushRequest {
            topic: self.topic.clone(),
            body: self.body.clone(),
            id: Some(job_id(name, occurrence_ms)),
            delay_ms: None,
            run_at: Some(occurrence_ms),
            ttr_ms: self.ttr_ms,
            max_attempts: self.max_attempts,
            dedup_key: None,
            dedup_ms: None,
            max_age_ms: None,
            backoff_ms: None,
            priority: self.priority,
            coalesce_key: None,
            coalesce: None,
            flow_key: None,
            traceparent: None,
            tracestate: None,
        }
    }
}

/// Checks a schedule name: a topic name's rule, `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`.
pub fn validate_name(name: &str) -> Result<()> {
    validate_topic(name).map_err(|_| {
        Error::Invalid(format!(
            "schedule name `{}` is not valid: 1 to 128 of A-Z a-z 0-9 _ . -, starting with a letter or digit",
            shorten(name)
        ))
    })
}

/// Names longer than this are shortened in job ids (see [`job_id`]).
const ID_NAME_MAX: usize = 96;

/// The id of the job that schedule `name` pushes for its occurrence at `occurrence_ms`:
/// `<name>:<occurrence Unix ms>`. The occurrence in the id is what makes firing exactly once: every timer
/// that fires it pushes the same id, and a second push of a live id is a conflict.
///
/// A job id holds at most 128 characters, so a name longer than 96 is written as its first 80
/// characters, a dot and the 16 hex digits of its XXH3-64 hash (97 characters: no name kept whole, at
/// most 96, can be mistaken for it). Schedule names have no `:`, so the id's last `:` starts the
/// occurrence.
pub fn job_id(name: &str, occurrence_ms: i64) -> String {
    if name.len() <= ID_NAME_MAX {
        format!("{name}:{occurrence_ms}")
    } else {
        let hash = xxhash_rust::xxh3::xxh3_64(name.as_bytes());
        let head: String = name.chars().take(80).collect();
        format!("{head}.{hash:016x}:{occurrence_ms}")
    }
}
