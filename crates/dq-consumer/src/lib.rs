//! dq-consumer: delivers the ready jobs of every topic that has a callback, by HTTP POST.
//!
//! - [`deliver`]: one POST and what its answer means (2xx, a body, and the retry condition false).
//! - [`egress`]: where callbacks may go: HTTP clients whose resolver applies the egress policy at
//!   connect time, and the Redis nodes it keeps callbacks away from.
//! - [`limiter`]: a worker's share of its topic's limits over every consumer (slots, rate, pauses asked
//!   by the callback), kept in Redis.
//! - [`plan`]: a topic's registration prepared for delivery, which its worker and limiter follow.
//! - [`worker`]: one topic's loop: reserve as many jobs as the limits and free delivery slots allow,
//!   deliver each, ack or nack it.
//!
//! This module follows the topic registry and keeps one worker per deliverable topic. SIGHUP reads the
//! configuration again and applies the egress policy's lists and the log level ([`dq_core::reload`]). On SIGTERM,
//! SIGINT or SIGUSR2 it stops reserving, lets deliveries in flight finish within `shutdown.grace_ms`
//! (acking or retrying them by their outcome), hands back the ones still running after that for
//! immediate redelivery, and returns.

pub mod answer;
pub mod deliver;
pub mod egress;
pub mod limiter;
pub mod plan;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use dq_core::admin::TopicCache;
use dq_core::{Queue, Settings};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::egress::Egress;
use crate::plan::Plan;
use crate::worker::{Shared, TopicWorker};

/// Default `/metrics` address of dq-consumer.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9792";

/// A running topic worker, as the supervisor holds it.
struct Running {
    /// Sends the worker its topic's new plan when the registration changes.
    plan: watch::Sender<Arc<Plan>>,
    /// Stops the worker's reserving (deliveries in flight go on).
    stop: CancellationToken,
    /// The worker's loop.
    task: tokio::task::JoinHandle<()>,
}

/// Delivers until `shutdown`, then drains.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::connect(&settings)
        .await
        .context("cannot open the queue in Redis")?;
    // The metrics listener and the registry refresher keep going through the drain; `background` ends them.
    let background = CancellationToken::new();
    dq_core::series::serve_from_start(dq_core::series::QUEUE);
    let (listen, metrics) = dq_core::telemetry::serve_configured_metrics(
        settings.metrics.listen.as_deref(),
        DEFAULT_METRICS_LISTEN,
        background.clone(),
    )
    .await?;
    let egress = Arc::new(Egress::new(&settings.egress, queue.egress().await));
    tracing::info!(nodes = ?egress.policy().redis_nodes(), "Redis nodes refused to callbacks");
    tokio::spawn(egress.clone().follow_nodes(queue.clone(), background.clone()));
    let reload = reload(&settings, &egress);
    let in_force = reload.subscribe();
    reload.start(background.clone())?;
    let listener = dq_core::wake::follow_ready(&queue, background.clone());
    let refresh = Duration::from_millis(settings.topics.refresh_ms);
    let topics = TopicCache::start(queue.clone(), refresh, background.clone()).await;
    let shared = Arc::new(Shared {
        queue: queue.clone(),
        egress,
        tracker: TaskTracker::new(),
        release_now: CancellationToken::new(),
        backoff_default: settings.jobs.backoff_ms.clone(),
        process_id: ulid::Ulid::new().to_string(),
        consumer_name: consumer_name(),
        handoffs: Default::default(),
        topics: topics.clone(),
    });
    let handoffs = listen_handoffs(&shared, background.clone());
    tracing::info!(metrics = %listen, "dq-consumer starting");

    let mut running: HashMap<String, Running> = HashMap::new();
    queue.spawn_health_probe(Duration::from_secs(5), shutdown.clone());
    // Ends with `background`, after the drain settled the last deliveries.
    let activity = queue.spawn_activity_flush(background.clone());
    dq_core::systemd::ready(&shutdown);
    loop {
        reconcile(&shared, &topics, &mut running);
        tokio::select! {
            _ = tokio::time::sleep(refresh) => {}
            _ = shutdown.cancelled() => break,
        }
    }

    // Drain: stop reserving, let deliveries finish, release what is still running at the grace period.
    tracing::info!(in_flight = shared.tracker.len(), "draining");
    for (_, w) in running.drain() {
        w.stop.cancel();
        let _ = w.task.await;
    }
    shared.tracker.close();
    let grace = Duration::from_millis(in_force.borrow().shutdown.grace_ms);
    if tokio::time::timeout(grace, shared.tracker.wait()).await.is_err() {
        tracing::warn!(
            in_flight = shared.tracker.len(),
            "grace period over: handing back deliveries still running"
        );
        shared.release_now.cancel();
        shared.tracker.wait().await;
    }
    background.cancel();
    let _ = activity.await;
    listener.abort();
    handoffs.abort();
    let _ = metrics.await;
    tracing::info!("dq-consumer stopped");
    Ok(())
}

/// What SIGHUP applies without a restart: the log level, the egress policy's lists, and the grace period
/// of a drain to come. (The sections of dq-server, dq-timer and dq-checker are theirs.)
fn reload(settings: &Settings, egress: &Arc<Egress>) -> dq_core::reload::Reload {
    let egress = egress.clone();
    dq_core::reload::Reload::new(settings)
        .unused(&["server", "beanstalkd", "auth", "checker", "timer"])
        .apply("egress policy", &["egress.deny", "egress.allow"], move |s| {
            egress.set_lists(&s.egress)
        })
        .follows("drain grace period", &["shutdown.grace_ms"])
}

/// This process's name in the attempts it records: `<host>:<pid>` (the kernel's host name).
fn consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    format!(
        "{}:{}",
        if host.is_empty() { "localhost" } else { host },
        std::process::id()
    )
}

/// Listens on this process's hand-off channels (see `dq_core::reservations::handoff`) and gives what comes to
/// the topics' workers.
fn listen_handoffs(shared: &Arc<Shared>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    let to = shared.clone();
    dq_core::wake::listen_handoffs(&shared.queue, &shared.process_id, shutdown, move |jobs| to.handed(jobs))
}

/// Starts a worker for each topic that has a callback and is not paused, updates the plan of the others,
/// and stops workers whose topic went away, lost its callback, or was paused.
fn reconcile(shared: &Arc<Shared>, topics: &TopicCache, running: &mut HashMap<String, Running>) {
    let registry = topics.snapshot();
    running.retain(|topic, w| {
        let keep = registry.get(topic).is_some_and(|c| c.callback.is_some() && !c.paused);
        if !keep {
            tracing::info!(%topic, "stopping delivery");
            w.stop.cancel();
        }
        keep
    });
    for (topic, config) in registry.iter() {
        if config.callback.is_none() || config.paused {
            continue;
        }
        let plan = match Plan::new(config) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                tracing::error!(%topic, cause = %e, "cannot deliver this topic");
                continue;
            }
        };
        match running.get(topic) {
            Some(w) if w.plan.borrow().config == *config => {}
            Some(w) => {
                tracing::info!(%topic, "registration changed");
                w.plan.send_replace(plan);
            }
            None => {
                tracing::info!(%topic, url = %config.callback.as_ref().map(|c| dq_core::topic::masked_url(&c.url)).unwrap_or_default(), "delivering");
                let (tx, rx) = watch::channel(plan);
                let stop = CancellationToken::new();
                let worker = TopicWorker::new(topic.clone(), shared.clone(), rx, stop.clone());
                running.insert(
                    topic.clone(),
                    Running {
                        plan: tx,
                        stop,
                        task: tokio::spawn(worker.run()),
                    },
                );
            }
        }
    }
}
