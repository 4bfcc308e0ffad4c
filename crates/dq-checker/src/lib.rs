//! dq-checker: watches every Redis primary and raises alerts, publishes queue depths, audits consistency,
//! and converts the layout of older releases (`migrate`).
//!
//! - [`alert`]: alerts and their channels (webhook, e-mail); [`migrate`]: the conversion of the shard
//!   layout (`redis.shards`) into partitions.
//!
//! Every `checker.interval_ms` it:
//! - takes or keeps the checkers' lease (`{<prefix>}:checker`): however many checkers run, only the one
//!   that holds it sends alerts and reads the dead-job events, so each event is alerted once;
//! - PINGs each Redis primary and reads its INFO: an alert when one goes down and one when it comes back (at
//!   most one per transition), gauges for memory and role, and a warning (log and gauge) when
//!   `maxmemory-policy` is not `noeviction` or persistence is off, since either can lose jobs;
//! - takes the dead-job events the scripts recorded (each partition's `events`, moved to a pending list
//!   and forgotten only once the alert went out, so a checker that dies meanwhile loses none) and raises
//!   one alert per topic; taking an event queues the job's dead-job hook when its topic has a
//!   `callback.on_dead_url`, and the success hooks of `callback.on_success_url`, which `hooks.rs` sends on
//!   a task of its own;
//! - publishes job counts per topic and state and the age of each topic's oldest ready job, and raises a
//!   backlog alert when a topic's ready jobs pass `checker.backlog_threshold` (and a clearing one after);
//! - counts quarantined records, and alerts when there are more.
//!
//! The states last alerted (a primary down, a topic over its threshold, the quarantine's size) are kept
//! in Redis (`{<prefix>}:alerts`), so a checker that takes the lease over sends what the last one had
//! not, and nothing twice. An alert that no channel took is tried again at the next round.
//!
//! Every `checker.audit_interval_ms` it audits every partition and repairs what it finds.

pub mod alert;
mod events;
mod hooks;
pub mod migrate;
pub mod quarantine;
mod retention;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use dq_core::admin::{NodeWatch, Stats};
use dq_core::checker::audit::AuditReport;
use dq_core::egress::Egress;
use dq_core::series::Counter;
use dq_core::store::Node;
use dq_core::{Queue, Settings, State};
use tokio_util::sync::CancellationToken;

use crate::alert::{Alert, Notifier};

/// Default `/metrics` address of dq-checker.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9793";

/// Runs the audit once over every partition and repairs what it finds.
pub async fn audit(settings: &Settings) -> anyhow::Result<AuditReport> {
    let queue = Queue::connect(settings)
        .await
        .context("cannot open the queue in Redis")?;
    Ok(queue.checker().audit().await?)
}

/// What the checker remembers between rounds.
#[derive(Default)]
struct Memory {
    /// Whether this checker holds the lease (sends alerts). Kept when Redis does not answer, so the
    /// checker that was sending goes on sending while the Redis of the lease is down.
    leader: bool,
    /// The alert states last sent (see the module's doc): what an observation is compared with. Read
    /// from Redis when this checker takes the lease.
    sent: HashMap<String, String>,
    /// Config problems already warned about, per primary and check.
    warned: HashSet<(String, &'static str)>,
    /// The depths published as more than 0 last round. Counts at 0 are not in the stats (and are
    /// removed by the housekeeping), so a topic that empties is simply absent: it is published as 0 once (and its backlog alert
    /// clears), then forgotten, so topics used once and never again are not carried forever.
    depths: HashSet<(String, State)>,
    /// When the last housekeeping ran (zero counts, registry tombstones).
    pruned: Option<Instant>,
    /// When the flow keys' gauges were last read ([`FLOWS_EVERY`]): each read asks every partition.
    flows_read: Option<Instant>,
}

/// How often the flow keys' gauges (`dq_flow_keys`, `dq_flow_busiest_ready`) are read again: a read of
/// a topic asks each of its key partitions, too much for every round.
const FLOWS_EVERY: Duration = Duration::from_secs(10);

impl Memory {
    /// Whether the alert state `field` is now `state`, compared with the last one sent: `Some(before)`
    /// when an alert is due (`before` is `None` the first time), `None` when it is not. A first
    /// observation that is `quiet` (all is well) is only recorded.
    fn changed(&mut self, field: &str, state: &str, quiet: bool) -> Option<Option<String>> {
        match self.sent.get(field) {
            Some(before) if before == state => None,
            Some(before) => Some(Some(before.clone())),
            None if quiet => {
                self.sent.insert(field.to_string(), state.to_string());
                None
            }
            None => Some(None),
        }
    }
}

/// Sends an alert if this checker is the one that sends, and records its state as sent (here and in
/// Redis) when a channel took it; otherwise it is tried again at the next round.
async fn raise(queue: &Queue, notifier: &Notifier, memory: &mut Memory, field: &str, state: &str, alert: Alert) {
    if !memory.leader {
        return;
    }
    if notifier.send(alert).await {
        memory.sent.insert(field.to_string(), state.to_string());
        if let Err(e) = queue.checker().set_alert_sent(field, state).await {
            tracing::debug!(cause = %e.chain(), "cannot record an alert as sent");
        }
    }
}

/// What the checker counts, served from the start at 0.
const COUNTERS: &[Counter] = &[
    Counter::labelled(
        "dq_alerts_total",
        &[(
            "kind",
            &[
                "redis_down",
                "redis_up",
                "dead_jobs",
                "backlog",
                "backlog_cleared",
                "quarantined",
            ],
        )],
    ),
    Counter::labelled("dq_alerts_failed_total", &[("channel", &["webhook", "smtp"])]),
    Counter::labelled("dq_alert_retries_total", &[("channel", &["webhook", "smtp"])]),
    Counter::labelled("dq_audit_repairs_total", &[("kind", &["orphan_record", "dangling_id"])]),
];

/// What the checker counts per registered topic, served at 0 from the topic's registration
/// (`dq_dead_hooks_total` from its `callback.on_dead_url`, see [`dead_hooks`]).
const TOPIC_COUNTERS: &[Counter] = &[Counter::labelled(
    "dq_dead_jobs_dropped_total",
    &[("reason", &["retention", "cap"])],
)];

/// Checks until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::connect(&settings)
        .await
        .context("cannot open the queue in Redis")?;
    let (notifiers, _) = tokio::sync::watch::channel(Arc::new(Notifier::new(&settings.checker)?));
    dq_core::series::serve_from_start(COUNTERS);
    dq_core::series::serve_per_topic(TOPIC_COUNTERS);
    let (listen, metrics) = dq_core::telemetry::serve_configured_metrics(
        settings.metrics.listen.as_deref(),
        DEFAULT_METRICS_LISTEN,
        shutdown.clone(),
    )
    .await?;
    tracing::info!(metrics = %listen, partitions = queue.partitions().count(), "dq-checker starting");
    dq_core::systemd::ready(&shutdown);

    let mut interval = Duration::from_millis(settings.checker.interval_ms);
    // The audit scans every partition: it runs on its own, so health checks and alerts never wait for it.
    let audit_every = Duration::from_millis(settings.checker.audit_interval_ms);
    if !audit_every.is_zero() {
        let (queue, shutdown) = (queue.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(audit_every) => run_audit(&queue).await,
                    _ = shutdown.cancelled() => return,
                }
            }
        });
    }
    // Dead-job and success hooks go out on a task of their own, sent while this checker holds the lease.
    let leader = Arc::new(AtomicBool::new(false));
    let egress = Arc::new(Egress::new(&settings.egress, queue.egress().await));
    tokio::spawn(egress.clone().follow_nodes(queue.clone(), shutdown.clone()));
    let reload = reload(&settings, &notifiers, &egress);
    let in_force = reload.subscribe();
    reload.start(shutdown.clone())?;
    let hooks = hooks::Sender::new(
        queue.clone(),
        egress,
        settings.checker.dead_hook_backoff_ms.clone(),
        leader.clone(),
    );
    let hooks = tokio::spawn(hooks.run(interval, shutdown.clone()));
    let mut memory = Memory::default();
    let mut watch = NodeWatch::default();
    let mut retention = retention::Retention::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let me = format!("checker-{}-{}", std::process::id(), ulid::Ulid::new());
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => break,
        }
        // What a SIGHUP changed applies from the next round on; the round itself is never interrupted. The
        // alert channels are the exception: each check takes those in force when it reads what it alerts
        // on, so an alert about anything seen after a reload goes to the new channels.
        let settings = in_force.borrow().clone();
        let notifier = || notifiers.borrow().clone();
        if settings.checker.interval_ms != interval.as_millis() as u64 {
            interval = Duration::from_millis(settings.checker.interval_ms);
            tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        let lease_ms = (3 * settings.checker.interval_ms).max(3000);
        // Bounded: the Redis of the lease may be the one that is down, and the round must go on.
        let lease = tokio::time::timeout(
            interval.max(Duration::from_secs(1)),
            queue.checker().take_checker_lease(&me, lease_ms),
        );
        match lease.await.unwrap_or_else(|_| {
            Err(dq_core::Error::Indeterminate {
                partition: None,
                id: None,
                reason: "the lease did not answer in time".into(),
                source: None,
            })
        }) {
            Ok(true) if !memory.leader => {
                memory.leader = true;
                memory.pruned = None;
                // Send what the last checker to hold the lease had not.
                if let Ok(sent) = queue.checker().alerts_sent().await {
                    memory.sent = sent;
                }
                tracing::info!("this checker sends the alerts now");
            }
            Ok(true) => {}
            Ok(false) => memory.leader = false,
            Err(e) => tracing::debug!(cause = %e.chain(), "cannot reach the checkers' lease; keeping the last answer"),
        }
        metrics::gauge!("dq_checker_leader").set(if memory.leader { 1.0 } else { 0.0 });
        leader.store(memory.leader, Ordering::Relaxed);
        let primaries = queue.admin().primaries().await;
        for node in &watch.nodes(primaries.clone()) {
            let former = !primaries.contains(node);
            let up = check_node(&queue, node, former, interval, &notifier(), &mut memory).await;
            watch.saw(node, up, !former);
        }
        if memory.leader {
            events::alert_dead_jobs(&queue, &notifier()).await;
        }
        let stats = queue.admin().counts().await;
        depths(
            &queue,
            &stats,
            settings.checker.backlog_threshold,
            &notifier(),
            &mut memory,
        )
        .await;
        if memory.leader {
            retention.round(&queue, &stats, &settings.jobs, interval).await;
            let every = Duration::from_millis(settings.checker.housekeeping_interval_ms);
            housekeeping(&queue, &stats, every, &mut memory).await;
        }
        quarantine::check(&queue, &notifier(), &mut memory).await;
    }
    let _ = hooks.await;
    let _ = metrics.await;
    tracing::info!("dq-checker stopped");
    Ok(())
}

/// What SIGHUP applies without a restart: the log level, the alert channels (`notifiers`, built from
/// the new settings before anything changes, so an unusable SMTP URL leaves every part as it was), the
/// round's interval, thresholds and retention (read from the settings in force each round), and the
/// egress policy of dead-job hooks.
fn reload(
    settings: &Settings,
    notifiers: &tokio::sync::watch::Sender<Arc<Notifier>>,
    egress: &Arc<Egress>,
) -> dq_core::reload::Reload {
    let (notifiers, egress) = (notifiers.clone(), egress.clone());
    dq_core::reload::Reload::new(settings)
        .unused(&["server", "beanstalkd", "auth", "timer"])
        .part(
            "alert channels",
            &[
                "checker.webhook_url",
                "checker.smtp_url",
                "checker.mail_from",
                "checker.mail_to",
                "checker.alert_timeout_ms",
            ],
            move |s| {
                let notifier = Arc::new(Notifier::new(&s.checker).map_err(|e| format!("{e:#}"))?);
                let notifiers = notifiers.clone();
                Ok(Box::new(move || {
                    notifiers.send_replace(notifier);
                }))
            },
        )
        .follows(
            "check interval and thresholds",
            &[
                "checker.interval_ms",
                "checker.backlog_threshold",
                "checker.housekeeping_interval_ms",
                "jobs.dead_retention_ms",
                "jobs.dead_max_per_topic",
            ],
        )
        .apply("egress policy", &["egress.deny", "egress.allow"], move |s| {
            egress.set_lists(&s.egress)
        })
}

/// Probes one node (a primary, or a former one being watched until it answers; see `NodeWatch`):
/// metrics, `redis_down`/`redis_up` alerts, and on a primary (not a `former` one) its memory, role and
/// configuration. Returns whether it answered.
async fn check_node(
    queue: &Queue,
    node: &Node,
    former: bool,
    interval: Duration,
    notifier: &Notifier,
    memory: &mut Memory,
) -> bool {
    let label = node.name.clone();
    let ping = queue
        .checker()
        .ping(node, interval.clamp(Duration::from_millis(100), Duration::from_secs(1)))
        .await;
    let up = ping.is_ok();
    metrics::gauge!("dq_redis_up", "node" => label.clone()).set(if up { 1.0 } else { 0.0 });
    if let Ok(rtt) = ping {
        metrics::gauge!("dq_redis_latency_seconds", "node" => label.clone()).set(rtt.as_secs_f64());
    }
    let field = format!("redis:{label}");
    let state = if up { "up" } else { "down" };
    if memory.changed(&field, state, up).is_some() {
        let mut alert = if up {
            Alert::new("redis_up", "info", format!("Redis {label} is back"))
        } else {
            Alert::new(
                "redis_down",
                "critical",
                format!(
                    "Redis {label} is down: the jobs of its partitions are unavailable until it or a replica serves them"
                ),
            )
        };
        alert.node = Some(label.clone());
        alert.details = serde_json::json!({ "redis": label, "error": ping.err().map(|e| e.to_string()) });
        raise(queue, notifier, memory, &field, state, alert).await;
    }
    if !up || former {
        return up;
    }
    if let Ok(info) = queue.checker().info(node).await {
        let info: HashMap<&str, &str> = info.lines().filter_map(|l| l.trim_end().split_once(':')).collect();
        let number = |k: &str| info.get(k).and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = number("used_memory") {
            metrics::gauge!("dq_redis_used_memory_bytes", "node" => label.clone()).set(v);
        }
        if let Some(v) = number("maxmemory") {
            metrics::gauge!("dq_redis_maxmemory_bytes", "node" => label.clone()).set(v);
        }
        let primary = info.get("role").is_none_or(|r| *r == "master");
        metrics::gauge!("dq_redis_primary", "node" => label.clone()).set(if primary { 1.0 } else { 0.0 });
        let policy_ok = info.get("maxmemory_policy").is_none_or(|p| *p == "noeviction");
        // RDB is on when `save` has rules; AOF shows in INFO.
        let rdb = queue.checker().rdb_on(node).await.unwrap_or(true);
        let persistence_ok = rdb || info.get("aof_enabled") == Some(&"1");
        for (check, ok, why) in [
            (
                "maxmemory_policy",
                policy_ok,
                "maxmemory-policy is not noeviction: Redis may evict jobs under memory pressure",
            ),
            (
                "persistence",
                persistence_ok,
                "persistence is off (no AOF, no RDB saves): a Redis restart loses every job",
            ),
        ] {
            metrics::gauge!("dq_redis_config_ok", "node" => label.clone(), "check" => check).set(if ok {
                1.0
            } else {
                0.0
            });
            if !ok && memory.warned.insert((label.clone(), check)) {
                tracing::warn!(redis = %label, "{why}");
            } else if ok {
                memory.warned.remove(&(label.clone(), check));
            }
        }
    }
    true
}

/// Publishes depths and the oldest ready job's age per topic; raises and clears backlog alerts.
async fn depths(queue: &Queue, stats: &Stats, threshold: Option<u64>, notifier: &Notifier, memory: &mut Memory) {
    let mut depth: HashMap<(String, State), i64> = HashMap::new();
    for (topic, counts) in &stats.counts {
        for (state, n) in counts {
            *depth.entry((topic.clone(), *state)).or_default() += n;
        }
    }
    for gone in std::mem::take(&mut memory.depths) {
        depth.entry(gone).or_insert(0);
    }
    memory.depths = depth.iter().filter(|(_, n)| **n != 0).map(|(k, _)| k.clone()).collect();
    // Registered topics are always published, with their zeros; others only while they have jobs.
    let registry = match queue.admin().topics().await {
        Ok(registry) => {
            dq_core::series::registered(registry.keys());
            registry
        }
        // Unread is not empty: no topic's counters are forgotten for it.
        Err(_) => Default::default(),
    };
    for topic in registry.keys() {
        for state in [State::Delayed, State::Ready, State::Reserved, State::Dead] {
            depth.entry((topic.clone(), state)).or_insert(0);
        }
    }
    let mut ready: HashMap<String, i64> = HashMap::new();
    for ((topic, state), n) in depth {
        if state == State::Ready {
            ready.insert(topic.clone(), n);
        }
        metrics::gauge!("dq_queue_depth", "topic" => topic, "state" => state.as_str()).set(n as f64);
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as f64)
        .unwrap_or(0.0);
    let read_flows = memory.flows_read.is_none_or(|at| at.elapsed() >= FLOWS_EVERY);
    if read_flows {
        memory.flows_read = Some(Instant::now());
    }
    for (topic, n) in &ready {
        let oldest = if *n > 0 {
            queue.checker().oldest_ready(topic).await
        } else {
            None
        };
        let age = oldest.map_or(0.0, |o| ((now_ms - o) / 1000.0).max(0.0));
        metrics::gauge!("dq_oldest_ready_age_seconds", "topic" => topic.clone()).set(age);
        // Flow keys: how many have ready jobs, and the busiest one's backlog (one series per topic,
        // never one per key), every FLOWS_EVERY.
        if read_flows {
            let flows = if *n > 0 {
                queue.admin().flow_keys(topic, 1).await.ok()
            } else {
                None
            };
            let (keys, busiest) = flows.map_or((0, 0), |f| (f.keys, f.busiest.first().map_or(0, |k| k.ready)));
            metrics::gauge!("dq_flow_keys", "topic" => topic.clone()).set(keys as f64);
            metrics::gauge!("dq_flow_busiest_ready", "topic" => topic.clone()).set(busiest as f64);
        }
        // A topic's own threshold wins over checker.backlog_threshold.
        if let Some(limit) = registry.get(topic).and_then(|c| c.backlog_threshold).or(threshold) {
            let over = *n as u64 > limit;
            let field = format!("backlog:{topic}");
            let state = if over { "over" } else { "under" };
            if memory.changed(&field, state, !over).is_some() {
                let mut alert = if over {
                    let mut a = Alert::new(
                        "backlog",
                        "warning",
                        format!("topic {topic} has {n} ready jobs waiting, over the threshold of {limit}"),
                    );
                    a.details = serde_json::json!({ "ready": n, "threshold": limit, "oldest_ready_age_seconds": age });
                    a
                } else {
                    let mut a = Alert::new(
                        "backlog_cleared",
                        "info",
                        format!("topic {topic} is back under {limit} ready jobs ({n})"),
                    );
                    a.details = serde_json::json!({ "ready": n, "threshold": limit });
                    a
                };
                alert.topic = Some(topic.clone());
                raise(queue, notifier, memory, &field, state, alert).await;
            }
        }
    }
}

/// Removes what nothing needs any more, when this checker takes the lease and then every `every`:
/// counts fields at 0 (the scripts leave them, since removing them there would cost every job Redis
/// CPU; readers ignore them), and the registry's tombstones, which releases before this one wrote for
/// each deleted topic (older processes may still run during a rolling upgrade).
async fn housekeeping(queue: &Queue, stats: &Stats, every: Duration, memory: &mut Memory) {
    if memory.pruned.is_some_and(|at| at.elapsed() < every) {
        return;
    }
    memory.pruned = Some(Instant::now());
    let mut fields = 0;
    for (p, zeros) in &stats.zeros {
        match queue.checker().prune_zero_counts(*p, zeros).await {
            Ok(n) => fields += n,
            Err(e) => tracing::debug!(partition = p, cause = %e.chain(), "cannot remove zero counts"),
        }
    }
    if fields > 0 {
        tracing::debug!(fields, "removed counts fields at 0");
    }
    match queue.checker().prune_topic_tombstones().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(tombstones = n, "removed deleted topics' tombstones from the registry"),
        Err(e) => tracing::debug!(cause = %e.chain(), "cannot prune the registry's tombstones"),
    }
}

async fn run_audit(queue: &Queue) {
    match queue.checker().audit().await {
        Ok(r) => {
            metrics::counter!("dq_audit_repairs_total", "kind" => "orphan_record").increment(r.orphan_records);
            metrics::counter!("dq_audit_repairs_total", "kind" => "dangling_id").increment(r.dangling_ids);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            metrics::gauge!("dq_audit_last_run_timestamp_seconds").set(now);
            if r.orphan_records + r.dangling_ids > 0 {
                tracing::warn!(?r, "audit repaired inconsistencies");
            } else {
                tracing::info!(records = r.records, ids = r.ids, "audit found nothing to repair");
            }
        }
        Err(e) => tracing::warn!(cause = %e.chain(), "audit failed"),
    }
}
