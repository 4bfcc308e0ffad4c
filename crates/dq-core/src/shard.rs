//! Shards: one connection pool per Redis in `redis.shards`, and which shard and bucket hold a job.
//!
//! Placement is a jump consistent hash of the job id, so it is stable for as long as the shard list only
//! grows at its end. Server-made ids are drawn until they land on a healthy shard, so a shard that is down
//! costs producers nothing; a producer-given id belongs to one shard and waits for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bb8_redis::RedisConnectionManager;
use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, ScriptInvocation};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::config::{RedisSettings, redact};
use crate::error::{Error, Result, is_connection_error};

/// One Redis: its pool and what we last saw of its health.
#[derive(Debug)]
pub struct Shard {
    /// Position in `redis.shards`, used in errors, logs and metrics.
    pub index: usize,
    /// The URL without password, for logs.
    pub name: String,
    /// The pool the queue operations draw from.
    pool: bb8::Pool<ShardConnections>,
    /// The client, for the dedicated pub/sub connections that do not belong in the pool.
    client: redis::Client,
    /// Whether the last operation reached Redis; flips back on the first success.
    up: AtomicBool,
}

/// bb8-redis's manager, plus a way to drop connections that broke: a multiplexed connection never
/// recovers after its socket failed, and testing each one with PING on checkout would double our round
/// trips.
///
/// A checkout only clones the multiplexed connection and gives it straight back, so concurrent requests
/// share the pool's few sockets and redis-rs pipelines them: one write and one read carry many commands,
/// for us and for Redis. The pool still owns connecting, timeouts and replacing broken sockets.
#[derive(Debug)]
struct ShardConnections {
    /// Makes connections.
    inner: RedisConnectionManager,
    /// Answer timeout set on each new connection.
    response_timeout: Duration,
}

/// A pooled connection that remembers whether it saw a connection error.
pub struct ShardConnection {
    /// The multiplexed connection.
    conn: MultiplexedConnection,
    /// Set after an I/O error by whichever clone saw it; the pool then drops this connection.
    broken: Arc<AtomicBool>,
}

impl bb8::ManageConnection for ShardConnections {
    type Connection = ShardConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<ShardConnection, redis::RedisError> {
        let mut conn = self.inner.connect().await?;
        conn.set_response_timeout(self.response_timeout);
        Ok(ShardConnection {
            conn,
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    async fn is_valid(&self, conn: &mut ShardConnection) -> Result<(), redis::RedisError> {
        self.inner.is_valid(&mut conn.conn).await
    }

    fn has_broken(&self, conn: &mut ShardConnection) -> bool {
        conn.broken.load(Ordering::Relaxed)
    }
}

impl Shard {
    fn new(index: usize, url: &str, settings: &RedisSettings) -> Result<Self> {
        let unavailable = |e: redis::RedisError| Error::Unavailable {
            shard: index,
            reason: e.to_string(),
        };
        let manager = ShardConnections {
            inner: RedisConnectionManager::new(url).map_err(unavailable)?,
            response_timeout: Duration::from_millis(settings.response_timeout_ms),
        };
        let pool = bb8::Pool::builder()
            .max_size(settings.pool_size)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .build_unchecked(manager);
        Ok(Shard {
            index,
            name: redact(url),
            pool,
            client: redis::Client::open(url).map_err(unavailable)?,
            up: AtomicBool::new(true),
        })
    }

    /// Whether the last operation on this shard reached Redis.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The client, for dedicated connections (pub/sub).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// A clone of a pooled connection; the pooled one goes straight back (see [`ShardConnections`]).
    async fn conn(&self) -> Result<(MultiplexedConnection, Arc<AtomicBool>)> {
        loop {
            let pooled = self.pool.get().await.map_err(|e| {
                self.up.store(false, Ordering::Relaxed);
                Error::Unavailable {
                    shard: self.index,
                    reason: e.to_string(),
                }
            })?;
            // A broken one is dropped from the pool when `pooled` goes; take another.
            if !pooled.broken.load(Ordering::Relaxed) {
                return Ok((pooled.conn.clone(), pooled.broken.clone()));
            }
        }
    }

    fn settle<T>(&self, broken: &AtomicBool, r: redis::RedisResult<T>) -> Result<T> {
        match r {
            Ok(v) => {
                self.up.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Err(e) => {
                if is_connection_error(&e) {
                    broken.store(true, Ordering::Relaxed);
                    self.up.store(false, Ordering::Relaxed);
                }
                Err(Error::from_redis(self.index, e))
            }
        }
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT).
    pub async fn invoke<T: FromRedisValue>(&self, script: &ScriptInvocation<'_>) -> Result<T> {
        let (mut conn, broken) = self.conn().await?;
        let r = script.invoke_async(&mut conn).await;
        self.settle(&broken, r)
    }

    /// Runs one command.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let (mut conn, broken) = self.conn().await?;
        let r = cmd.query_async(&mut conn).await;
        self.settle(&broken, r)
    }

    /// Runs a pipeline.
    pub async fn pipe<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let (mut conn, broken) = self.conn().await?;
        let r = pipe.query_async(&mut conn).await;
        self.settle(&broken, r)
    }

    /// PING with a deadline; the round trip time when it answered.
    pub async fn ping(&self, timeout: Duration) -> Result<Duration> {
        let start = std::time::Instant::now();
        match tokio::time::timeout(timeout, self.query::<String>(&redis::cmd("PING"))).await {
            Ok(Ok(_)) => Ok(start.elapsed()),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                self.up.store(false, Ordering::Relaxed);
                Err(Error::Unavailable {
                    shard: self.index,
                    reason: "PING timed out".into(),
                })
            }
        }
    }
}

/// All shards, and the placement of job ids on shards and buckets.
#[derive(Debug, Clone)]
pub struct Shards {
    /// In the order of `redis.shards`.
    list: Arc<[Shard]>,
    /// Delay buckets per shard.
    buckets: u32,
}

impl Shards {
    /// Pools for every configured shard. Connects lazily, so a shard that is down does not stop start-up.
    pub fn new(settings: &RedisSettings) -> Result<Self> {
        let list = settings
            .shards
            .iter()
            .enumerate()
            .map(|(i, url)| Shard::new(i, url, settings))
            .collect::<Result<Vec<_>>>()?;
        Ok(Shards {
            list: list.into(),
            buckets: settings.buckets,
        })
    }

    /// Every shard.
    pub fn all(&self) -> &[Shard] {
        &self.list
    }

    /// Number of delay buckets per shard.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The shard that holds job `id`.
    pub fn for_id(&self, id: &str) -> &Shard {
        &self.list[shard_of(id, self.list.len())]
    }

    /// PINGs every shard every `every` until `shutdown`, publishing `dq_redis_up{shard}` (1 or 0) and
    /// `dq_redis_latency_seconds{shard}`, so each process shows the Redis it sees.
    pub fn spawn_health_probe(&self, every: Duration, shutdown: tokio_util::sync::CancellationToken) {
        let shards = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                for shard in shards.all() {
                    let label = shard.index.to_string();
                    match shard.ping(every.min(Duration::from_secs(1))).await {
                        Ok(rtt) => {
                            metrics::gauge!("dq_redis_up", "shard" => label.clone()).set(1.0);
                            metrics::gauge!("dq_redis_latency_seconds", "shard" => label).set(rtt.as_secs_f64());
                        }
                        Err(_) => metrics::gauge!("dq_redis_up", "shard" => label).set(0.0),
                    }
                }
            }
        });
    }

    /// The delay bucket of job `id` on its shard.
    pub fn bucket_of(&self, id: &str) -> u32 {
        bucket_of(id, self.buckets)
    }
}

/// Jump consistent hash (Lamping and Veach) of the id onto `n` shards: adding a shard moves only 1/n of ids.
pub fn shard_of(id: &str, n: usize) -> usize {
    let mut key = xxh3_64(id.as_bytes());
    let (mut b, mut j) = (-1i64, 0i64);
    while j < n as i64 {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as usize
}

/// Bucket of an id, from a hash independent of the shard's so each shard's buckets fill evenly.
pub fn bucket_of(id: &str, buckets: u32) -> u32 {
    (xxh3_64_with_seed(id.as_bytes(), 0x6471) % buckets as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_stable_and_even() {
        let ids: Vec<String> = (0..20_000).map(|i| format!("job-{i}")).collect();
        let mut per = [0usize; 4];
        for id in &ids {
            let s = shard_of(id, 4);
            assert_eq!(s, shard_of(id, 4));
            per[s] += 1;
        }
        for n in per {
            assert!((4000..6000).contains(&n), "{per:?}");
        }
        assert!(ids.iter().all(|id| shard_of(id, 1) == 0));
    }

    #[test]
    fn adding_a_shard_moves_few_ids() {
        let moved = (0..10_000).filter(|i| {
            let id = format!("j{i}");
            shard_of(&id, 4) != shard_of(&id, 5)
        });
        let moved = moved.count();
        // Ideal is 1/5 of ids; a modulo hash would move about 4/5.
        assert!(moved < 2_600, "{moved}");
        for i in 0..1000 {
            let id = format!("j{i}");
            let (a, b) = (shard_of(&id, 4), shard_of(&id, 5));
            assert!(a == b || b == 4, "an id moves only to the new shard");
        }
    }

    #[test]
    fn buckets_cover_the_range() {
        let mut seen = [false; 16];
        for i in 0..1000 {
            seen[bucket_of(&format!("{i}"), 16) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(bucket_of("x", 1), 0);
    }
}
