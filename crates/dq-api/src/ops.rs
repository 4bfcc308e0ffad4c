//! What operators and load balancers read: stats and the probes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ErrorDetail;
use crate::topic::Counts;

/// `GET /v1/stats` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stats {
    /// Job counts per topic (that the token may see) and state, summed over the partitions that answered.
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, BTreeMap<String, i64>>))]
    pub topics: BTreeMap<String, Counts>,
    /// The shape and health of Redis.
    pub redis: RedisStats,
}

/// The shape of dq's Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    /// One Redis: `redis.urls` names it.
    #[default]
    Standalone,
    /// A primary that Redis Sentinel watches and fails over: `redis.urls` names the sentinels,
    /// `redis.sentinel_master` the primary.
    Sentinel,
    /// Redis Cluster: `redis.urls` names seed nodes.
    Cluster,
}

impl RedisMode {
    /// The name in the settings and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RedisMode::Standalone => "standalone",
            RedisMode::Sentinel => "sentinel",
            RedisMode::Cluster => "cluster",
        }
    }
}

impl std::fmt::Display for RedisMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode equals its name: `stats.redis.mode == "cluster"`.
impl PartialEq<&str> for RedisMode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Redis as `GET /v1/stats` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RedisStats {
    /// `redis.mode`.
    pub mode: RedisMode,
    /// The installation's partition count.
    pub partitions: u16,
    /// The partitions whose counts did not answer (left out of `topics`).
    pub partitions_down: Vec<u16>,
    /// Every Redis primary.
    pub nodes: Vec<Node>,
}

/// One Redis primary's health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Node {
    /// `host:port` (cluster), the URL with its password masked (standalone), `sentinel/<URLs>` (sentinel).
    pub name: String,
    /// Whether it answered PING in time.
    pub up: bool,
    /// The PING's round trip in ms; `null` when it did not answer.
    pub latency_ms: Option<f64>,
}

/// `GET /healthz` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `ok`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^ok$"))]
    pub status: String,
}

/// `GET /readyz` answer when ready.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ready {
    /// Always `ready`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^ready$"))]
    pub status: String,
    /// Every Redis primary, PINGed with a 500 ms deadline.
    pub nodes: Vec<Node>,
}

/// `GET /readyz` answer when not ready: the error, and the primaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotReady {
    /// `unavailable`: `no Redis primary answers`, or `draining`.
    pub error: ErrorDetail,
    /// Every Redis primary, PINGed with a 500 ms deadline.
    pub nodes: Vec<Node>,
}
