//! The connection to a Redis Cluster, replaced when it stops answering.
//!
//! redis-rs's cluster connection follows MOVED and ASK and refreshes its slot map by itself. During a
//! live reshard we saw it stop answering altogether: a slot refresh began and never finished, and every
//! call to every node timed out from then on (for minutes, until the process restarted). So the holder
//! watches for that shape: calls time out and no call on the connection has had any answer for a while.
//! A node that is down does not look like that (calls to the other nodes still answer), but a connection
//! that answers nothing does, and it is dropped and made afresh from the configured nodes.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::sync::Mutex;

/// The cluster connection and what it takes to replace it.
pub(super) struct ClusterConn {
    /// The client connections are made from.
    client: ClusterClient,
    /// The connection in use (made on first use) and its generation.
    current: RwLock<Option<(ClusterConnection, u64)>>,
    /// Held while a connection is being made, so only one is.
    making: Mutex<()>,
    /// Generations made so far.
    made: AtomicU64,
    /// When the current connection last answered anything, in ms since `epoch`.
    last_answer_ms: AtomicU64,
    /// The reference point of `last_answer_ms`.
    epoch: Instant,
    /// How long without any answer, while calls time out, before the connection is replaced.
    stall: Duration,
}

impl ClusterConn {
    /// A holder for connections from `client`; one that answers nothing for `stall` is replaced.
    pub(super) fn new(client: ClusterClient, stall: Duration) -> Self {
        ClusterConn {
            client,
            current: RwLock::new(None),
            making: Mutex::new(()),
            made: AtomicU64::new(0),
            last_answer_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            stall,
        }
    }

    /// The connection to use and its generation, made if there is none.
    pub(super) async fn get(&self) -> redis::RedisResult<(ClusterConnection, u64)> {
        if let Some(c) = self.current.read().expect("cluster connection lock").clone() {
            return Ok(c);
        }
        let _making = self.making.lock().await;
        if let Some(c) = self.current.read().expect("cluster connection lock").clone() {
            return Ok(c);
        }
        let conn = self.client.get_async_connection().await?;
        let generation = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        self.answered();
        *self.current.write().expect("cluster connection lock") = Some((conn.clone(), generation));
        Ok((conn, generation))
    }

    /// Notes the outcome of a call made on generation `generation`: any answer from Redis (an error
    /// reply too) shows the connection works; a timeout after `stall` without any answer replaces it.
    pub(super) fn saw<T>(&self, generation: u64, result: &redis::RedisResult<T>) {
        match result {
            Err(e) if e.is_timeout() || e.is_connection_dropped() || e.is_io_error() => {
                let silent = self
                    .now_ms()
                    .saturating_sub(self.last_answer_ms.load(Ordering::Relaxed));
                if silent < self.stall.as_millis() as u64 {
                    return;
                }
                let mut current = self.current.write().expect("cluster connection lock");
                if current.as_ref().is_some_and(|(_, g)| *g == generation) {
                    *current = None;
                    tracing::warn!(
                        silent_ms = silent,
                        "the cluster connection answered nothing while calls timed out; making a new one"
                    );
                }
            }
            _ => self.answered(),
        }
    }

    fn answered(&self) {
        self.last_answer_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}
