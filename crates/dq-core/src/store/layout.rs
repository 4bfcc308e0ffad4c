//! The installation's layout in Redis: its partition count, fixed at creation, and the refusal of the
//! layout dq used before partitions; and what a cluster must be able to do for it.

use crate::error::{Error, Result};
use crate::store::connection::Redis;
use crate::store::keys::Keys;
use crate::store::partition::DEFAULT_PARTITIONS;

/// The partition count of the installation in Redis: the stored one (which must equal `configured` when
/// that is set), or, for a new installation, `configured` (else the default), stored now. An old layout
/// (`redis.shards`) is refused with the command that converts it.
pub async fn ensure(redis: &Redis, keys: &Keys, configured: Option<u32>) -> Result<u32> {
    let unavailable = |e: redis::RedisError| Error::Unavailable {
        partition: None,
        reason: format!("cannot read the installation's layout ({})", keys.layout()),
        source: Some(e.into()),
    };
    let stored: Option<u32> = redis
        .query(redis::cmd("HGET").arg(keys.layout()).arg("partitions"))
        .await
        .map_err(unavailable)?;
    let count = match stored {
        Some(n) => n,
        None => {
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
            let want = configured.unwrap_or(DEFAULT_PARTITIONS);
            let _: bool = redis
                .query(redis::cmd("HSETNX").arg(keys.layout()).arg("partitions").arg(want))
                .await
                .map_err(unavailable)?;
            // Another process may have created it first, with its own count.
            redis
                .query::<Option<u32>>(redis::cmd("HGET").arg(keys.layout()).arg("partitions"))
                .await
                .map_err(unavailable)?
                .unwrap_or(want)
        }
    };
    match configured {
        Some(c) if c != count => Err(Error::Invalid(format!(
            "redis.partitions is {c}, but this installation was created with {count} partitions \
             (stored in {}); the count is fixed for an installation's life: set redis.partitions = {count} \
             or leave it unset",
            keys.layout()
        ))),
        _ => Ok(count),
    }
}

/// Stores the partition count `want` for a new installation, and only then: a Redis that has a layout
/// keeps it. For `dq-checker migrate`, whose target may still hold the old layout's marker that
/// [`ensure`] refuses: with the new layout there first, the marker is not looked at.
pub(crate) async fn create(redis: &Redis, keys: &Keys, want: u32) -> Result<()> {
    let stored: Option<u32> = redis
        .query(redis::cmd("HGET").arg(keys.layout()).arg("partitions"))
        .await
        .map_err(|e| Error::from_redis(None, e))?;
    if stored.is_none() {
        let _: bool = redis
            .query(redis::cmd("HSETNX").arg(keys.layout()).arg("partitions").arg(want))
            .await
            .map_err(|e| Error::from_redis(None, e))?;
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
