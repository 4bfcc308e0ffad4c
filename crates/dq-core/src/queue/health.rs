//! The health probe every process runs: its view of each Redis primary, as metrics.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Queue;
use crate::admin::NodeWatch;

impl Queue {
    /// PINGs every primary every `every` until `shutdown`, publishing `dq_redis_up{node}` (1 or 0) and
    /// `dq_redis_latency_seconds{node}`, so each process shows the Redis it sees.
    pub fn spawn_health_probe(&self, every: Duration, shutdown: CancellationToken) {
        let admin = self.admin().clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut watch = NodeWatch::default();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                let primaries = admin.primaries().await;
                let nodes = watch.nodes(primaries.clone());
                for node in admin.ping_nodes(nodes.clone(), every.min(Duration::from_secs(1))).await {
                    if let Some(n) = nodes.iter().find(|n| n.name == node.name) {
                        watch.saw(n, node.up, primaries.contains(n));
                    }
                    match node.latency {
                        Some(rtt) => {
                            metrics::gauge!("dq_redis_up", "node" => node.name.clone()).set(1.0);
                            metrics::gauge!("dq_redis_latency_seconds", "node" => node.name).set(rtt.as_secs_f64());
                        }
                        None => metrics::gauge!("dq_redis_up", "node" => node.name).set(0.0),
                    }
                }
            }
        });
    }
}
