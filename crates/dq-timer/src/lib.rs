//! dq-timer: moves due jobs from the delay buckets to their ready queues, and ends expired reservations.
//!
//! - [`shard_timer`]: the loop that serves this timer's share of one shard's buckets.
//! - [`clock`]: the estimate of Redis's clock used to sleep until exactly the next due time.
//!
//! Timers coordinate only through Redis: a heartbeat script gives each live timer its fair share of
//! each shard's buckets under leases, so a timer that dies loses its buckets to the others once its
//! leases lapse (`timer.lease_ms`), and one that drains hands them over at once.

pub mod clock;
pub mod shard_timer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use dq_core::wake::{self, Wake};
use dq_core::{Queue, Settings};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::shard_timer::ShardTimer;

/// Default `/metrics` address of dq-timer.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9791";

/// Runs a timer over every shard until `shutdown`, then releases its buckets and returns.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::new(&settings)?;
    if let Err(e) = queue.check_layout().await {
        anyhow::bail!("{e}");
    }
    let (_, metrics) = dq_core::telemetry::serve_configured_metrics(
        settings.metrics.listen.as_deref(),
        DEFAULT_METRICS_LISTEN,
        shutdown.clone(),
    )
    .await?;
    let id = format!("timer-{}-{}", std::process::id(), ulid::Ulid::new());
    tracing::info!(timer = %id, shards = queue.shards().all().len(), buckets = queue.shards().buckets(), "dq-timer starting");

    let mut senders = Vec::new();
    let mut timers = Vec::new();
    for shard in queue.shards().all() {
        let (tx, rx) = mpsc::channel(4096);
        let resync = Arc::new(AtomicBool::new(false));
        senders.push((tx, resync.clone()));
        timers.push(ShardTimer::new(
            queue.clone(),
            shard.index,
            id.clone(),
            settings.timer.clone(),
            rx,
            resync,
        ));
    }
    let route = Arc::new(senders);
    let listeners = wake::listen(
        queue.shards(),
        queue.keys().timer_channel(),
        shutdown.clone(),
        Arc::new(move |w: Wake| {
            let shard = match &w {
                Wake::Message { shard, .. } | Wake::Subscribed { shard } => *shard,
            };
            let (tx, resync) = &route[shard];
            if tx.try_send(w).is_err() {
                // The loop is busy; rather than lose the wake-up, have it look at every bucket again.
                resync.store(true, Ordering::Relaxed);
            }
        }),
    );
    let tasks: Vec<_> = timers
        .into_iter()
        .map(|t| tokio::spawn(t.run(shutdown.clone())))
        .collect();
    queue
        .shards()
        .spawn_health_probe(Duration::from_secs(5), shutdown.clone());
    dq_core::systemd::ready(&shutdown);
    for t in tasks {
        t.await.context("shard timer panicked")?;
    }
    for l in listeners {
        l.abort();
    }
    let _ = metrics.await;
    tracing::info!(timer = %id, "dq-timer stopped");
    Ok(())
}
