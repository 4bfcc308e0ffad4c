//! dq-timer: moves due jobs from the delay sets to their ready queues, and ends expired reservations.
//!
//! - [`partition_timer`]: the loop that serves this timer's share of the partitions.
//! - [`schedules`]: firing the schedules, by the timer that holds partition 0.
//! - [`waiting`]: the dq-consumer workers that wait for jobs, which promotion hands due jobs to.
//! - [`clock`]: the estimate of Redis's clock used to sleep until exactly the next due time.
//!
//! Timers coordinate only through Redis: a heartbeat script gives each live timer its fair share of the
//! partitions under leases, so a timer that dies loses its partitions to the others once its leases
//! lapse (`timer.lease_ms`), and one that drains hands them over at once.

pub mod clock;
pub mod partition_timer;
pub mod schedules;
pub mod waiting;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use dq_core::admin::topics::TopicCache;
use dq_core::series::Counter;
use dq_core::wake::{self, Wake};
use dq_core::{Queue, Settings};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::partition_timer::PartitionTimer;
use crate::schedules::ScheduleFirer;

/// Default `/metrics` address of dq-timer.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9791";

/// What a timer counts, served from the start at 0 (`dq_schedule_occurrences_fired_total` is per
/// schedule, from its first occurrence).
const COUNTERS: &[Counter] = &[
    Counter::plain("dq_jobs_promoted_total"),
    Counter::plain("dq_jobs_handed_off_total"),
    Counter::labelled("dq_jobs_expired_total", &[("outcome", &["ready", "dead"])]),
    Counter::plain("dq_jobs_dead_total"),
];

/// Runs a timer until `shutdown`, then releases its partitions and returns.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::connect(&settings)
        .await
        .context("cannot open the queue in Redis")?;
    dq_core::series::serve_from_start(COUNTERS);
    let (_, metrics) = dq_core::telemetry::serve_configured_metrics(
        settings.metrics.listen.as_deref(),
        DEFAULT_METRICS_LISTEN,
        shutdown.clone(),
    )
    .await?;
    // Only the log level changes live: batch sizes and leases are shared with the other timers' shares
    // and taken at start.
    dq_core::reload::Reload::new(&settings)
        .unused(&["server", "beanstalkd", "auth", "checker", "egress"])
        .start(shutdown.clone())?;
    let id = format!("timer-{}-{}", std::process::id(), ulid::Ulid::new());
    tracing::info!(timer = %id, partitions = queue.partitions().count(), "dq-timer starting");

    let (tx, rx) = mpsc::channel(4096);
    let resync = Arc::new(AtomicBool::new(false));
    let timer = PartitionTimer::new(queue.clone(), id.clone(), settings.timer.clone(), rx, resync.clone());
    let listener = wake::listen(
        &queue,
        dq_core::store::keys::WakeKind::Timer,
        shutdown.clone(),
        Arc::new(move |w: Wake| {
            if tx.try_send(w).is_err() {
                // The loop is busy; rather than lose the wake-up, have it look at every partition again.
                resync.store(true, Ordering::Relaxed);
            }
        }),
    );
    let topics = TopicCache::start(
        queue.clone(),
        Duration::from_millis(settings.topics.refresh_ms),
        shutdown.clone(),
    )
    .await;
    let firer = ScheduleFirer::new(queue.clone(), topics, timer.schedule_lead());
    let schedules = tokio::spawn(firer.run(shutdown.clone()));
    let task = tokio::spawn(timer.run(shutdown.clone()));
    queue.spawn_health_probe(Duration::from_secs(5), shutdown.clone());
    // Stopped once the timer loops have returned, so what they counted last reaches Redis.
    let activity_stop = CancellationToken::new();
    let activity = queue.spawn_activity_flush(activity_stop.clone());
    dq_core::systemd::ready(&shutdown);
    let timer_done = task.await.context("partition timer panicked");
    let schedules_done = schedules.await.context("schedule firer panicked");
    activity_stop.cancel();
    let _ = activity.await;
    timer_done?;
    schedules_done?;
    listener.abort();
    let _ = metrics.await;
    tracing::info!(timer = %id, "dq-timer stopped");
    Ok(())
}
