//! The installation's layout in Redis: its partition count and key partitions, fixed at creation, and the
//! refusal of the layout dq used before partitions; and what a cluster must be able to do for it.

use crate::config::RedisSettings;
use crate::error::{Error, Result};
use crate::store::connection::Redis;
use crate::store::keys::Keys;
use crate::store::partition::{DEFAULT_PARTITIONS, default_key_partitions};

/// An installation's layout, as stored in `{<prefix>}:layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Partitions (field `partitions`).
    pub partitions: u32,
    /// Partitions one topic's keys are spread over (field `key_partitions`; an installation from before
    /// the field has one per partition, the placement it always had).
    pub key_partitions: u32,
}

impl Layout {
    /// The layout a new installation gets: `redis.partitions` and `redis.key_partitions`, or the defaults.
    pub fn wanted(settings: &RedisSettings) -> Result<Self> {
        let partitions = settings.partitions.unwrap_or(DEFAULT_PARTITIONS);
        let key_partitions = settings
            .key_partitions
            .unwrap_or_else(|| default_key_partitions(partitions));
        if key_partitions > partitions {
            return Err(Error::Invalid(format!(
                "redis.key_partitions is {key_partitions}, more than the {partitions} partitions of the \
                 installation being created: set it to at most {partitions}"
            )));
        }
        Ok(Layout {
            partitions,
            key_partitions,
        })
    }
}

/// The installation's layout in Redis: the stored one (whose fields must equal `redis.partitions` and
/// `redis.key_partitions` where those are set), or, for a new installation, the wanted one, stored now.
/// An old layout (`redis.shards`) is refused with the command that converts it.
pub async fn ensure(redis: &Redis, keys: &Keys, settings: &RedisSettings) -> Result<Layout> {
    let unavailable = |e: redis::RedisError| Error::Unavailable {
        partition: None,
        reason: format!("cannot read the installation's layout ({})", keys.layout()),
        source: Some(e.into()),
    };
    let mut stored = read(redis, keys).await.map_err(unavailable)?;
    if stored.0.is_none() {
        let old: bool = redis
            .query(redis::cmd("EXISTS").arg(keys.old_layout()))
            .await
            .map_err(unavailable)?;
        if old {
            return Err(Error::Invalid(format!(
                "this Redis holds dq's old layout (`{}`, from redis.shards); convert it with \
                 `dq-checker migrate --from <each old shard's URL>` before starting dq",
                keys.old_layout()
            )));
        }
        store(redis, keys, Layout::wanted(settings)?)
            .await
            .map_err(unavailable)?;
        // Another process may have created it first, with its own counts.
        stored = read(redis, keys).await.map_err(unavailable)?;
    }
    let Some(partitions) = stored.0 else {
        return Err(Error::Invalid(format!(
            "{} lost its partition count while dq read it",
            keys.layout()
        )));
    };
    let key_partitions = match stored.1 {
        Some(k) => k,
        None => {
            // Made before key partitions: its keys are where a key partition per partition puts them.
            // A new installation stores `key_partitions` before `partitions`, so this is never a race.
            let _: bool = redis
                .query(
                    redis::cmd("HSETNX")
                        .arg(keys.layout())
                        .arg("key_partitions")
                        .arg(partitions),
                )
                .await
                .map_err(unavailable)?;
            read(redis, keys).await.map_err(unavailable)?.1.unwrap_or(partitions)
        }
    };
    let fixed = |name: &str, set: u32, stored: u32, what: &str| {
        Error::Invalid(format!(
            "redis.{name} is {set}, but this installation was created with {stored} {what} (stored in {}); \
             the count is fixed for an installation's life: set redis.{name} = {stored} or leave it unset",
            keys.layout()
        ))
    };
    match (settings.partitions, settings.key_partitions) {
        (Some(c), _) if c != partitions => Err(fixed("partitions", c, partitions, "partitions")),
        (_, Some(k)) if k != key_partitions => Err(fixed("key_partitions", k, key_partitions, "key partitions")),
        _ => Ok(Layout {
            partitions,
            key_partitions,
        }),
    }
}

/// The stored `partitions` and `key_partitions`.
async fn read(redis: &Redis, keys: &Keys) -> redis::RedisResult<(Option<u32>, Option<u32>)> {
    redis
        .query(
            redis::cmd("HMGET")
                .arg(keys.layout())
                .arg("partitions")
                .arg("key_partitions"),
        )
        .await
}

/// Stores `want` where no layout is: `key_partitions` first, so a process that sees `partitions` also
/// sees the key partitions that came with it (a layout with `partitions` alone is one from before them).
async fn store(redis: &Redis, keys: &Keys, want: Layout) -> redis::RedisResult<()> {
    let _: bool = redis
        .query(
            redis::cmd("HSETNX")
                .arg(keys.layout())
                .arg("key_partitions")
                .arg(want.key_partitions),
        )
        .await?;
    let _: bool = redis
        .query(
            redis::cmd("HSETNX")
                .arg(keys.layout())
                .arg("partitions")
                .arg(want.partitions),
        )
        .await?;
    Ok(())
}

/// Stores the layout `want` for a new installation, and only then: a Redis that has a layout keeps it.
/// For `dq-checker migrate`, whose target may still hold the old layout's marker that [`ensure`] refuses:
/// with the new layout there first, the marker is not looked at.
pub(crate) async fn create(redis: &Redis, keys: &Keys, want: Layout) -> Result<()> {
    let stored = read(redis, keys).await.map_err(|e| Error::from_redis(None, e))?;
    if stored.0.is_none() {
        store(redis, keys, want).await.map_err(|e| Error::from_redis(None, e))?;
    }
    Ok(())
}

/// A cluster must have sharded pub/sub (Redis 7.0): the scripts wake processes with SPUBLISH there, and
/// on an older Redis every script that publishes would fail. Checked on one primary.
pub async fn require_sharded_pubsub(redis: &Redis) -> Result<()> {
    let unavailable = |e: redis::RedisError| Error::Unavailable {
        partition: None,
        reason: "cannot read the cluster's Redis version".into(),
        source: Some(e.into()),
    };
    let node = redis
        .primaries()
        .await
        .map_err(unavailable)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Unavailable {
            partition: None,
            reason: "the cluster lists no primary".into(),
            source: None,
        })?;
    let info: String = redis
        .query_node(&node, redis::cmd("INFO").arg("server").clone())
        .await
        .map_err(unavailable)?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(str::trim)
        .unwrap_or("unknown");
    match has_sharded_pubsub(version) {
        true => Ok(()),
        false => Err(Error::Invalid(format!(
            "redis.mode = \"cluster\" needs Redis 7.0 or later (sharded pub/sub, SPUBLISH), but {} runs {version}",
            node.name
        ))),
    }
}

/// Whether a Redis of `version` (as `INFO server` gives it) has sharded pub/sub: 7.0 or later.
fn has_sharded_pubsub(version: &str) -> bool {
    version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .is_some_and(|major| major >= 7)
}

/// Every primary must keep dq's keys: `maxmemory-policy noeviction`. Any other policy lets Redis evict
/// job records and queues when it fills up, which loses jobs silently. Refused, unless
/// `redis.allow_eviction`; then logged as an error and shown as `dq_redis_config_ok{check=
/// "maxmemory_policy"} 0`. Read from `INFO memory`, which managed Redis services allow where they refuse
/// `CONFIG GET`.
pub async fn require_noeviction(redis: &Redis, allow: bool) -> Result<()> {
    let unavailable = |e: redis::RedisError| Error::Unavailable {
        partition: None,
        reason: "cannot read Redis's maxmemory-policy".into(),
        source: Some(e.into()),
    };
    for node in redis.primaries().await.map_err(unavailable)? {
        let info: String = redis
            .query_node(&node, redis::cmd("INFO").arg("memory").clone())
            .await
            .map_err(unavailable)?;
        let policy = info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(str::trim)
            .unwrap_or("unknown");
        let ok = policy == "noeviction";
        metrics::gauge!("dq_redis_config_ok", "node" => node.name.clone(), "check" => "maxmemory_policy").set(if ok {
            1.0
        } else {
            0.0
        });
        if ok {
            continue;
        }
        let what = format!(
            "Redis {} has maxmemory-policy {policy}: it may evict dq's keys when it fills up, and evicted job \
             records and queues are lost jobs",
            node.name
        );
        if !allow {
            return Err(Error::Invalid(format!(
                "{what}; set `maxmemory-policy noeviction` (CONFIG SET and redis.conf), or set \
                 redis.allow_eviction = true to start anyway"
            )));
        }
        tracing::error!("{what}; starting anyway because redis.allow_eviction is set");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sharded_pubsub_needs_redis_7() {
        assert!(super::has_sharded_pubsub("7.0.15"));
        assert!(super::has_sharded_pubsub("7.2.4"));
        assert!(super::has_sharded_pubsub("8.0.0"));
        assert!(!super::has_sharded_pubsub("6.2.14"));
        assert!(!super::has_sharded_pubsub("unknown"));
    }
}
