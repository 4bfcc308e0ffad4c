//! The connection to Redis in its three shapes, behind one type: a standalone Redis, a primary that Redis
//! Sentinel names (re-resolved on failover and on READONLY), or a Redis Cluster (redis-rs's cluster-async
//! connection, which follows MOVED/ASK, retries TRYAGAIN/CLUSTERDOWN and refreshes the topology itself).
//!
//! Nothing above this module knows the shape: every script names keys of one partition, so Redis Cluster
//! routes it by its first key, and standalone and Sentinel have every partition on one primary.

mod cluster;
mod nodes;
mod primary;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;

use self::cluster::ClusterConn;
use self::primary::{LastError, PrimaryConnections, Target, client, mark, sentinel_client};
use redis::{AsyncConnectionConfig, Client, FromRedisValue, ScriptInvocation};
use tokio::sync::Mutex;

use crate::config::{RedisMode, RedisSettings, redact};
use crate::error::{Error, NOT_SENT, REFUSED_FOR_NOW, Result};

/// How often a script that met a key on a slot being moved is sent again (50 ms, doubling to 500 ms
/// between tries: about 8 s in all, longer than a slot's move takes).
const MOVING_SLOT_RETRIES: u32 = 20;

/// Waits before sending a call again that Redis refused for now (LOADING, BUSY, MASTERDOWN, READONLY
/// …): 50 ms doubling, 750 ms in all, then the refusal is the answer (503). On a cluster redis-rs
/// retries these itself.
const REFUSAL_WAITS_MS: [u64; 4] = [50, 100, 200, 400];

/// The connection to dq's Redis, whatever its shape. Cheap to clone.
#[derive(Clone)]
pub struct Redis {
    /// Shared by every clone.
    inner: Arc<Inner>,
}

struct Inner {
    /// The shape.
    mode: RedisMode,
    /// The URLs as configured, without passwords, for logs and pages.
    names: Vec<String>,
    /// How commands reach Redis.
    conn: Conn,
    /// `redis.wait_replicas` and `redis.wait_timeout_ms`.
    wait: Option<(u32, u64)>,
    /// The settings the connection was made with (for the dedicated pub/sub connections).
    settings: RedisSettings,
}

enum Conn {
    /// Standalone or Sentinel: one primary, a pool of multiplexed connections to it.
    Primary {
        /// The pool; a broken connection is dropped and the next one resolves the primary afresh.
        pool: bb8::Pool<PrimaryConnections>,
        /// Where the pool connects, for the dedicated pub/sub connections too.
        target: Arc<Target>,
        /// Why the pool's last attempt to connect failed, to say so when a caller times out waiting.
        last_error: LastError,
    },
    /// Redis Cluster: one multiplexed connection per node, made on first use, replaced if it stalls.
    Cluster(Box<ClusterConn>),
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("mode", &self.inner.mode)
            .field("urls", &self.inner.names)
            .finish()
    }
}

/// A connection to run one operation on, and how to report its outcome back.
enum Handle {
    Primary(MultiplexedConnection, Arc<AtomicBool>),
    /// The cluster connection and its generation, to report the outcome against.
    Cluster(ClusterConnection, u64),
}

impl Redis {
    /// A connection in the configured shape. Connects lazily, so Redis being down does not stop start-up.
    pub fn new(settings: &RedisSettings) -> Result<Self> {
        let bad = |e: redis::RedisError| Error::Unavailable {
            partition: None,
            reason: "cannot make a client for redis.urls".into(),
            source: Some(e.into()),
        };
        let connect = Duration::from_millis(settings.connect_timeout_ms);
        let response = Duration::from_millis(settings.response_timeout_ms);
        let certs = settings.tls_certificates().map_err(|e| Error::Invalid(e.to_string()))?;
        let conn = match settings.mode {
            RedisMode::Standalone | RedisMode::Sentinel => {
                let target = Arc::new(if settings.mode == RedisMode::Standalone {
                    Target::Url(client(&settings.urls[0], &certs).map_err(bad)?)
                } else {
                    Target::Sentinel(Mutex::new(sentinel_client(settings, &certs).map_err(bad)?))
                });
                let last_error = LastError::default();
                let manager = PrimaryConnections {
                    target: target.clone(),
                    last_error: last_error.clone(),
                    config: AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(connect))
                        .set_response_timeout(Some(response)),
                };
                let pool = bb8::Pool::builder()
                    .error_sink(Box::new(last_error.clone()))
                    .max_size(settings.pool_size)
                    .min_idle(Some(0))
                    .test_on_check_out(false)
                    .connection_timeout(connect)
                    .build_unchecked(manager);
                Conn::Primary {
                    pool,
                    target,
                    last_error,
                }
            }
            RedisMode::Cluster => {
                let client = cluster_builder(settings, certs).build().map_err(bad)?;
                // Twice the answer timeout without any answer at all, while calls time out: stalled.
                Conn::Cluster(Box::new(ClusterConn::new(client, 2 * response)))
            }
        };
        Ok(Redis {
            inner: Arc::new(Inner {
                mode: settings.mode,
                settings: settings.clone(),
                names: settings.urls.iter().map(|u| redact(u)).collect(),
                conn,
                wait: (settings.wait_replicas > 0).then_some((settings.wait_replicas, settings.wait_timeout_ms)),
            }),
        })
    }

    /// The shape.
    pub fn mode(&self) -> RedisMode {
        self.inner.mode
    }

    /// The configured URLs without passwords.
    pub fn names(&self) -> &[String] {
        &self.inner.names
    }

    async fn handle(&self) -> Result<Handle> {
        match &self.inner.conn {
            Conn::Primary { pool, last_error, .. } => loop {
                let pooled = pool.get().await.map_err(|e| match e {
                    bb8::RunError::TimedOut => Error::Unavailable {
                        partition: None,
                        reason: "no connection in time".into(),
                        source: last_error.get(),
                    },
                    bb8::RunError::User(e) => Error::Unavailable {
                        partition: None,
                        reason: "cannot connect to Redis".into(),
                        source: Some(e.into()),
                    },
                })?;
                // A broken one is dropped from the pool when `pooled` goes; take another.
                if !pooled.broken.load(Ordering::Relaxed) {
                    return Ok(Handle::Primary(pooled.conn.clone(), pooled.broken.clone()));
                }
            },
            Conn::Cluster(cluster) => {
                let (c, generation) = cluster.get().await.map_err(|e| Error::Unavailable {
                    partition: None,
                    reason: "cannot connect to the cluster".into(),
                    source: Some(e.into()),
                })?;
                Ok(Handle::Cluster(c, generation))
            }
        }
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT) whose keys are all in one partition. With
    /// `redis.wait_replicas`, a script that wrote answers only once that many replicas have the write.
    pub async fn invoke<T: FromRedisValue>(&self, script: &ScriptInvocation<'_>) -> redis::RedisResult<T> {
        if !matches!(self.inner.conn, Conn::Cluster(_)) {
            return self
                .on_primary(|mut c| async move { script.invoke_async(&mut c).await })
                .await;
        }
        let Handle::Cluster(mut c, g) = self.handle().await.map_err(to_redis)? else {
            unreachable!("a cluster gives cluster handles")
        };
        // A script that met a key already moved to another node (a slot being resharded) failed at that
        // access, before its first write (every script reads its keys first): send it again until the
        // slot has moved.
        let mut wait = Duration::from_millis(50);
        for _ in 0..MOVING_SLOT_RETRIES {
            match script.invoke_async(&mut c).await {
                Err(e) if e.to_string().contains("non local key") => {
                    tracing::debug!(error = %e, "a script met a key on a moving slot; sending it again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(500));
                }
                r => return self.saw(g, r),
            }
        }
        self.saw(g, script.invoke_async(&mut c).await)
    }

    /// Runs `call` on a connection to the primary (standalone, Sentinel). While Redis refuses it for now
    /// ([`REFUSED_FOR_NOW`]: it did not run), it is sent again after [`REFUSAL_WAITS_MS`], on a fresh
    /// connection when the old one broke (READONLY: Sentinel names the new primary).
    async fn on_primary<T, F, Fut>(&self, call: F) -> redis::RedisResult<T>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let mut waits = REFUSAL_WAITS_MS.iter();
        loop {
            let Handle::Primary(c, broken) = self.handle().await.map_err(to_redis)? else {
                unreachable!("a primary gives primary handles")
            };
            let r = mark(&broken, call(c).await);
            match (&r, waits.next()) {
                (Err(e), Some(ms)) if e.code().is_some_and(|c| REFUSED_FOR_NOW.contains(&c)) => {
                    tracing::debug!(cause = %e, "Redis refused the call for now; sending it again");
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                }
                _ => return r,
            }
        }
    }

    /// Loads a script on every primary (SCRIPT LOAD; a cluster sends it to every node).
    pub async fn load_script(&self, script: &redis::Script) -> redis::RedisResult<()> {
        let inv = script.prepare_invoke();
        match self.handle().await.map_err(to_redis)? {
            Handle::Primary(mut c, broken) => mark(&broken, inv.load_async(&mut c).await).map(drop),
            Handle::Cluster(mut c, g) => self.saw(g, inv.load_async(&mut c).await).map(drop),
        }
    }

    /// Runs one command (routed by its key on a cluster).
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        if !matches!(self.inner.conn, Conn::Cluster(_)) {
            return self
                .on_primary(|mut c| async move { cmd.query_async(&mut c).await })
                .await;
        }
        match self.handle().await.map_err(to_redis)? {
            Handle::Primary(mut c, broken) => mark(&broken, cmd.query_async(&mut c).await),
            Handle::Cluster(mut c, g) => self.saw(g, cmd.query_async(&mut c).await),
        }
    }

    /// Runs a pipeline whose keys are all in one partition.
    pub async fn pipe<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> redis::RedisResult<T> {
        if !matches!(self.inner.conn, Conn::Cluster(_)) {
            return self
                .on_primary(|mut c| async move { pipe.query_async(&mut c).await })
                .await;
        }
        match self.handle().await.map_err(to_redis)? {
            Handle::Primary(mut c, broken) => mark(&broken, pipe.query_async(&mut c).await),
            Handle::Cluster(mut c, g) => self.saw(g, pipe.query_async(&mut c).await),
        }
    }

    /// Runs one command on the primary that serves `slot` (on a cluster; the primary elsewhere): commands
    /// without a key, such as WAIT or CLUSTER COUNTKEYSINSLOT.
    pub async fn query_at<T: FromRedisValue>(&self, slot: u16, cmd: redis::Cmd) -> redis::RedisResult<T> {
        match self.handle().await.map_err(to_redis)? {
            Handle::Primary(mut c, broken) => mark(&broken, cmd.query_async(&mut c).await),
            Handle::Cluster(mut c, g) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master)));
                let v = self.saw(g, c.route_command(cmd, route).await)?;
                T::from_redis_value(v).map_err(Into::into)
            }
        }
    }

    /// Whether writes wait for replicas (`redis.wait_replicas` above 0).
    pub fn waits_for_replicas(&self) -> bool {
        self.inner.wait.is_some()
    }

    /// Waits until `redis.wait_replicas` replicas have every write made so far on the connection to the
    /// primary that serves `slot`; `Ok(None)` when durable writes are off, else how many confirmed.
    pub async fn wait_replicas(&self, slot: u16) -> redis::RedisResult<Option<(u32, u32)>> {
        let Some((want, timeout)) = self.inner.wait else {
            return Ok(None);
        };
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(want).arg(timeout);
        let got: u32 = self.query_at(slot, cmd).await?;
        Ok(Some((want, got)))
    }

    /// Every primary node's address, for health probes and per-node commands: the configured node
    /// (standalone), the primary Sentinel names now, or the cluster's primaries as the cluster reports them.
    pub async fn primaries(&self) -> redis::RedisResult<Vec<Node>> {
        match self.handle().await.map_err(to_redis)? {
            Handle::Primary(..) => Ok(vec![Node {
                name: self.primary_name(),
                addr: None,
            }]),
            Handle::Cluster(mut c, g) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let v = c
                    .route_command(
                        redis::cmd("CLUSTER").arg("NODES").clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                    )
                    .await;
                let v = self.saw(g, v)?;
                let text: String = redis::from_redis_value(v)?;
                Ok(cluster_primaries(&text))
            }
        }
    }

    /// Runs one command on one primary (INFO, CONFIG GET …).
    pub async fn query_node<T: FromRedisValue>(&self, node: &Node, cmd: redis::Cmd) -> redis::RedisResult<T> {
        match (&node.addr, self.handle().await.map_err(to_redis)?) {
            (Some((host, port)), Handle::Cluster(mut c, g)) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                redis::from_redis_value(self.saw(g, c.route_command(cmd, route).await)?).map_err(Into::into)
            }
            (_, Handle::Primary(mut c, broken)) => mark(&broken, cmd.query_async(&mut c).await),
            (None, Handle::Cluster(mut c, g)) => self.saw(g, cmd.query_async(&mut c).await),
        }
    }

    /// Every key matching `pattern`, on every primary (SCAN; a cluster is scanned node by node).
    pub async fn scan(&self, pattern: &str) -> redis::RedisResult<Vec<String>> {
        const COUNT: usize = 1000;
        let mut keys = Vec::new();
        for node in self.primaries().await? {
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(COUNT);
                let (next, batch): (u64, Vec<String>) = self.query_node(&node, cmd).await?;
                keys.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }

    fn primary_name(&self) -> String {
        match self.inner.mode {
            RedisMode::Sentinel => format!("sentinel/{}", self.inner.names.join(",")),
            _ => self.inner.names.first().cloned().unwrap_or_default(),
        }
    }

    /// PING one primary (`None`: the primary of standalone or Sentinel) with a deadline: its round trip.
    pub async fn ping(&self, node: &Node, timeout: Duration) -> redis::RedisResult<Duration> {
        let start = std::time::Instant::now();
        let ping = self.query_node::<()>(node, redis::cmd("PING"));
        match tokio::time::timeout(timeout, ping).await {
            Ok(r) => r.map(|()| start.elapsed()),
            Err(_) => Err(redis::RedisError::from((redis::ErrorKind::Io, "PING timed out"))),
        }
    }

    /// A cluster connection for sharded pub/sub (RESP3), whose messages and subscription changes go to
    /// `pushes`. redis-rs routes each SSUBSCRIBE to the node that serves its channel's slot, and
    /// subscribes again after a reconnect or a change of the slot map.
    pub async fn sharded_subscriber(
        &self,
        pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> redis::RedisResult<ClusterConnection> {
        let settings = &self.inner.settings;
        let certs = settings.tls_certificates().map_err(|e| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "TLS files", e.to_string()))
        })?;
        cluster_builder(settings, certs)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()?
            .get_async_connection()
            .await
    }

    /// A client for a classic pub/sub connection to the primary (standalone, or the one Sentinel names
    /// now). A cluster listens over sharded pub/sub instead ([`Redis::sharded_subscriber`]).
    pub async fn pubsub_client(&self) -> redis::RedisResult<Client> {
        match &self.inner.conn {
            Conn::Primary { target, .. } => target.client().await,
            Conn::Cluster(_) => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster listens over sharded pub/sub",
            ))),
        }
    }

    /// `redis.response_timeout_ms`.
    pub fn response_timeout_ms(&self) -> u64 {
        self.inner.settings.response_timeout_ms
    }
}

/// A primary node: a name for metrics and logs, and on a cluster its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `host:port` on a cluster, else the configured URL without password.
    pub name: String,
    /// Host and port on a cluster.
    pub addr: Option<(String, u16)>,
}

/// The connected primaries in a CLUSTER NODES answer.
fn cluster_primaries(text: &str) -> Vec<Node> {
    let mut out: Vec<Node> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let flags = f.get(2)?;
            // A primary that holds slots, failing ones included (their probe shows them down).
            if !flags.split(',').any(|x| x == "master") || f.len() < 9 || flags.contains("noaddr") {
                return None;
            }
            // 127.0.0.1:7000@17000[,hostname]
            let addr = f.get(1)?.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some(Node {
                name: addr.to_string(),
                addr: Some((host.to_string(), port.parse().ok()?)),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A cluster client's builder for the configured nodes, credentials, TLS and timeouts.
fn cluster_builder(
    settings: &RedisSettings,
    certs: Option<redis::TlsCertificates>,
) -> redis::cluster::ClusterClientBuilder {
    let mut builder = redis::cluster::ClusterClientBuilder::new(settings.urls.iter().map(|u| u.as_str()));
    if let Some(certs) = certs {
        builder = builder.certs(certs);
    }
    builder
        .connection_timeout(Duration::from_millis(settings.connect_timeout_ms))
        .response_timeout(Duration::from_millis(settings.response_timeout_ms))
        // A failover takes the cluster's node timeout plus an election; retry across it.
        .retries(settings.cluster_retries)
        .min_retry_wait(50)
        .max_retry_wait(500)
}

impl Redis {
    /// Reports a cluster call's outcome to the holder, which replaces a stalled connection.
    fn saw<T>(&self, generation: u64, result: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Conn::Cluster(cluster) = &self.inner.conn {
            cluster.saw(generation, &result);
        }
        result
    }
}

/// The error of a call that found no connection to be sent on: it did not run.
fn to_redis(e: Error) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "no connection",
        format!("{NOT_SENT}{}", e.chain()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_answer_gives_connected_primaries() {
        let text = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 1 3 connected
c4 127.0.0.1:7006@17006 master,fail? - 0 1 3 connected 16000
d4 127.0.0.1:7004@17004 slave a1 0 1 1 connected
e5 127.0.0.1:7005@17005,host5 master - 0 1 5 connected 10923-16383
";
        let names: Vec<String> = cluster_primaries(text).into_iter().map(|n| n.name).collect();
        assert_eq!(
            names,
            ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7005", "127.0.0.1:7006"]
        );
    }
}
