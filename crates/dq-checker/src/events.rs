//! The dead-job events the scripts record in each partition (`nack.lua`, `expire.lua`): read by the
//! checker that holds the lease, one alert per topic, and forgotten only once the alert went out (they
//! wait in the partition's pending list meanwhile, so a checker that dies loses none). Taking an event
//! also queues its dead-job hook when the job's topic has a `callback.on_dead_url` (see
//! [`crate::dead_hooks`]), in the same script.

use std::collections::HashMap;

use dq_core::Queue;

use crate::alert::{Alert, Notifier};

/// Events read per partition and round.
const PER_ROUND: usize = 1000;

/// Takes every partition's pending or new dead-job events and raises one alert per topic; forgets the
/// events of the partitions whose alerts all went out.
pub(crate) async fn alert_dead_jobs(queue: &Queue, notifier: &Notifier) {
    // Which topics have hooks is known before any event is taken: an event taken without it would lose
    // its hook.
    let hooked: Vec<String> = match queue.admin().topics().await {
        Ok(topics) => topics
            .into_iter()
            .filter(|(_, c)| c.callback.as_ref().is_some_and(|cb| cb.on_dead_url.is_some()))
            .map(|(topic, _)| topic)
            .collect(),
        Err(e) => {
            tracing::warn!(cause = %e.chain(), "cannot read the topic registry; dead-job events wait");
            return;
        }
    };
    let hooked = &hooked;
    let takes = queue.partitions().all().map(|p| async move {
        match queue.checker().take_events(p, PER_ROUND, hooked).await {
            Ok(events) => (p, events),
            Err(e) => {
                tracing::warn!(partition = p, cause = %e.chain(), "cannot read dead-job events");
                (p, Vec::new())
            }
        }
    });
    let taken: Vec<(u16, Vec<String>)> = futures_util::future::join_all(takes)
        .await
        .into_iter()
        .filter(|(_, e)| !e.is_empty())
        .collect();
    if taken.is_empty() {
        return;
    }
    // Per topic: its events, and the partitions they came from.
    let mut per_topic: HashMap<String, (Vec<serde_json::Value>, Vec<u16>)> = HashMap::new();
    for (p, events) in &taken {
        for e in events {
            let v = serde_json::from_str::<serde_json::Value>(e).unwrap_or_else(|_| serde_json::json!({"raw": e}));
            let topic = v["topic"].as_str().unwrap_or("?").to_string();
            let entry = per_topic.entry(topic).or_default();
            entry.0.push(v);
            if !entry.1.contains(p) {
                entry.1.push(*p);
            }
        }
    }
    let mut failed: Vec<u16> = Vec::new();
    for (topic, (jobs, partitions)) in per_topic {
        let mut alert = Alert::new(
            "dead_jobs",
            "warning",
            format!(
                "{} job(s) of topic {topic} went dead after their last attempt",
                jobs.len()
            ),
        );
        alert.topic = Some(topic);
        let sample: Vec<_> = jobs.iter().take(20).cloned().collect();
        alert.details = serde_json::json!({ "count": jobs.len(), "jobs": sample });
        if !notifier.send(alert).await {
            failed.extend(partitions);
        }
    }
    for (p, events) in taken {
        // A partition whose events went into an alert no channel took keeps them for the next round.
        if failed.contains(&p) {
            continue;
        }
        if let Err(e) = queue.checker().events_sent(p, events.len()).await {
            tracing::warn!(partition = p, cause = %e.chain(), "cannot forget sent dead-job events; they will be sent again");
        }
    }
}
