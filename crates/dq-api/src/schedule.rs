//! Schedules on the wire: a cron pattern that pushes one job per occurrence, as registered and as the API
//! shows it. When the occurrences fall and the checks of a registration are dq-core's (`dq_core::schedule`).

use serde::{Deserialize, Serialize};

use crate::RawBody;

/// A schedule's registration, as `PUT /v1/schedules/{name}` takes it and `GET` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig<B = RawBody> {
    /// The cron pattern: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone the pattern's times are read in.
    #[serde(default = "utc")]
    pub timezone: String,
    /// The topic of the jobs it pushes.
    pub topic: String,
    /// The body of each job, kept as the producer wrote it.
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub body: B,
    /// Each job's time-to-run in ms (else the topic's default, then `jobs.ttr_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<i64>,
    /// Each job's deliveries before dead (else the topic's, then `jobs.max_attempts`; 0 = unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i64>,
    /// Each job's priority (0 ..= 4294967295, lower is more urgent; else 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// A paused schedule fires nothing; on resume it goes on from its next occurrence.
    #[serde(default)]
    pub paused: bool,
}

/// The zone of a schedule that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

fn utc() -> String {
    DEFAULT_TIMEZONE.into()
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
pub struct ScheduleView<B = RawBody> {
    /// Its name.
    pub name: String,
    /// Its registration.
    #[cfg_attr(feature = "openapi", schema(value_type = ScheduleConfig))]
    pub config: ScheduleConfig<B>,
    /// When it fires next, Unix ms (Redis's clock): at once when an occurrence was missed; `null` while
    /// paused.
    pub next_fire_at: Option<i64>,
    /// The last occurrence it fired, Unix ms.
    pub last_fired_at: Option<i64>,
}

/// `GET /v1/schedules` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(bound = ""))]
pub struct ScheduleList<B = RawBody> {
    /// The schedules the caller may see, by name.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<ScheduleView>))]
    pub schedules: Vec<ScheduleView<B>>,
}
