//! The types of topics, dead letters, schedules and stats.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jobs::Job;

/// A topic's registration (`PUT /v1/topics/{topic}`); every field is optional, as in the API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Push delivery by dq-consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<Callback>,
    /// The retry policy.
    #[serde(default)]
    pub retry: Retry,
    /// Defaults of pushes that leave them out.
    #[serde(default)]
    pub defaults: Defaults,
    /// Whether the topic is paused.
    #[serde(default)]
    pub paused: bool,
    /// Ready jobs above which dq-checker raises a backlog alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_threshold: Option<u64>,
}

/// Where and how dq-consumer delivers a topic's jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Callback {
    /// The URL jobs are POSTed to.
    pub url: String,
    /// How long one delivery may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Deliveries in flight at once over every dq-consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Deliveries started per second at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Deliveries that may start at once after a quiet spell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Extra request headers (shown masked by dq).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// The signing key (shown as `***`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The key being rotated out (shown as `***`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<String>,
    /// Where dq-checker POSTs each job that goes dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dead_url: Option<String>,
}

/// A topic's retry policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    /// Deliveries before a job goes dead (0: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Delays after each failed delivery; the last repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<Vec<u64>>,
    /// Retries end this long after a job's first due time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<u64>,
    /// When a 2xx answer is a failure after all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// Defaults of the topic's pushes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Defaults {
    /// Time to run of a push that gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    /// Delay of a push that gives neither `delay_ms` nor `run_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

/// Jobs by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Waiting for their due time.
    #[serde(default)]
    pub delayed: u64,
    /// Due, waiting for a consumer.
    #[serde(default)]
    pub ready: u64,
    /// Held by a consumer.
    #[serde(default)]
    pub reserved: u64,
    /// In the dead list.
    #[serde(default)]
    pub dead: u64,
}

/// A topic as dq shows it: its registration (`None` for a topic with jobs but none) and its counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topic {
    /// The name.
    pub topic: String,
    /// The registration.
    pub config: Option<TopicConfig>,
    /// Its jobs by state.
    pub counts: Counts,
}

/// A page of a topic's jobs in one state (`GET /v1/topics/{topic}/jobs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// The jobs, earliest first (due time, deadline or time of death).
    pub jobs: Vec<Job>,
    /// The topic's jobs in the state over all partitions.
    pub total: u64,
    /// False when a page of delayed or reserved jobs may miss some of the topic's.
    pub complete: bool,
}

/// A page of a topic's dead list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadPage {
    /// The dead jobs, oldest death first.
    pub jobs: Vec<Job>,
    /// The topic's dead jobs over all partitions.
    pub total: u64,
}

/// A schedule's registration (`PUT /v1/schedules/{name}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleConfig {
    /// A cron pattern: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// An IANA zone; unset: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The jobs' topic.
    pub topic: String,
    /// Each job's body.
    pub body: Value,
    /// The jobs' time to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    /// The jobs' deliveries before they go dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// A paused schedule fires nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// A schedule as dq shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The name.
    pub name: String,
    /// The registration as stored.
    pub config: ScheduleConfig,
    /// The next occurrence to fire, Unix ms (`None` while paused).
    pub next_fire_at: Option<u64>,
    /// The last occurrence fired.
    pub last_fired_at: Option<u64>,
}

/// `GET /v1/stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Redis's shape and health.
    pub redis: RedisStats,
    /// Jobs by topic and state.
    pub topics: BTreeMap<String, Counts>,
}

/// Redis's shape and health, as stats shows them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedisStats {
    /// `standalone`, `sentinel` or `cluster`.
    pub mode: String,
    /// The installation's partition count.
    pub partitions: u32,
    /// Partitions whose counts could not be read.
    #[serde(default)]
    pub partitions_down: Vec<u32>,
    /// Every primary.
    pub nodes: Vec<Node>,
}

/// A Redis primary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Its address (passwords masked).
    pub name: String,
    /// Whether it answered a PING.
    pub up: bool,
    /// The PING's time.
    pub latency_ms: Option<f64>,
}
