//! Schedules fired by real dq-timer processes: two racing, then kill -9 of the one that fires.

mod common;

use std::time::Duration;

use common::{lease_holders, metric_sum, queue, start};
use dq_core::State;
use dq_core::schedule::ScheduleConfig;
use dq_harness::{RedisServer, eventually};

/// The occurrences (Unix ms) of schedule `name` that have a job, read from the job keys, sorted.
fn occurrences(redis: &RedisServer, name: &str) -> Vec<i64> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("dq:*:job:{name}:*"))
        .query(&mut redis.conn())
        .unwrap();
    let mut at: Vec<i64> = keys
        .iter()
        .map(|k| k.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    at.sort();
    at
}

/// Which timer process holds partition 0 (and so fires the schedules): its pid, from its timer id
/// `timer-<pid>-<ulid>`.
fn schedule_leader(redis: &RedisServer) -> Option<u32> {
    let holder: Option<String> = redis::cmd("HGET")
        .arg("{dq}:leases")
        .arg(0)
        .query(&mut redis.conn())
        .unwrap();
    holder?.split('-').nth(1)?.parse().ok()
}

#[tokio::test]
async fn every_second_one_job_per_occurrence_across_a_kill() {
    let redis = RedisServer::start();
    let mut timers = vec![start("dq-timer", &[&redis]).await, start("dq-timer", &[&redis]).await];
    eventually(Duration::from_secs(30), "two timers share the partitions", || async {
        lease_holders(&redis).len() == 2
    })
    .await;
    let q = queue(&[&redis]).await;
    let config: ScheduleConfig = serde_json::from_value(serde_json::json!({
        "cron": "* * * * * *", "topic": "tick", "body": {"from": "schedule"}
    }))
    .unwrap();
    q.admin().put_schedule("every", &config, true).await.unwrap();

    eventually(Duration::from_secs(60), "5 occurrences fired", || async {
        occurrences(&redis, "every").len() >= 5
    })
    .await;
    let leader = schedule_leader(&redis).expect("a timer holds partition 0");
    let i = timers
        .iter()
        .position(|t| t.process.pid() == leader)
        .expect("the leader is one of ours");
    let mut killed = timers.remove(i);
    // The kill lands between these two readings of Redis's clock.
    let killed_at = q.redis_now_ms().await.unwrap();
    killed.process.signal("KILL");
    killed.process.wait(Duration::from_secs(10)).expect("killed");
    let dead_at = q.redis_now_ms().await.unwrap();
    let survivor = &timers[0];
    eventually(Duration::from_secs(60), "the survivor fires 5 occurrences", || async {
        occurrences(&redis, "every")
            .iter()
            .filter(|at| **at > killed_at)
            .count()
            >= 5
    })
    .await;
    assert_eq!(schedule_leader(&redis), Some(survivor.process.pid()));

    let seen = occurrences(&redis, "every");
    assert!(seen.iter().all(|at| at % 1000 == 0), "whole seconds: {seen:?}");
    // Consecutive seconds, but for at most one gap: the takeover, which fires only the latest occurrence
    // it missed. It spans the kill.
    let gaps: Vec<(i64, i64)> = seen
        .windows(2)
        .filter(|w| w[1] - w[0] != 1000)
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(gaps.len() <= 1, "gaps {gaps:?} in {seen:?}");
    for (from, to) in &gaps {
        assert!(
            *from <= dead_at && killed_at < *to,
            "the gap {from}..{to} spans the kill ({killed_at}..{dead_at})"
        );
    }
    // Each occurrence is one job, due at the occurrence, with the schedule's topic and body.
    for at in &seen {
        let job = q.producer().get(&format!("every:{at}")).await.unwrap();
        assert_eq!((job.topic.as_str(), job.run_at), ("tick", *at));
        assert_eq!(job.body.get(), r#"{"from":"schedule"}"#);
        assert_eq!(job.state, State::Ready);
    }
    let counts = q.admin().counts().await.counts;
    let ready: i64 = counts
        .get("tick")
        .and_then(|c| c.get(&State::Ready))
        .copied()
        .unwrap_or(0);
    assert!(ready as usize >= seen.len(), "one ready job per occurrence seen");

    let fired = metric_sum(survivor.port, "dq_schedule_occurrences_fired_total").await;
    assert!(fired >= 5.0, "the survivor counts what it fired: {fired}");
    assert!(metric_sum(survivor.port, "dq_schedule_fire_lateness_seconds_count").await >= 5.0);
    assert!(metric_sum(survivor.port, "dq_schedule_next_fire_timestamp_seconds").await > 1.7e9);
}

#[tokio::test]
async fn a_paused_schedule_fires_nothing_and_resumes_without_catch_up() {
    let redis = RedisServer::start();
    let _timer = start("dq-timer", &[&redis]).await;
    let q = queue(&[&redis]).await;
    let mut config: ScheduleConfig = serde_json::from_value(serde_json::json!({
        "cron": "* * * * * *", "topic": "tock", "body": 1
    }))
    .unwrap();
    q.admin().put_schedule("p", &config, true).await.unwrap();
    eventually(Duration::from_secs(60), "2 occurrences fired", || async {
        occurrences(&redis, "p").len() >= 2
    })
    .await;
    config.paused = true;
    q.admin().put_schedule("p", &config, false).await.unwrap();
    let paused_at = q.redis_now_ms().await.unwrap();
    // The firing timer reads the schedules every second; at most the occurrence in flight fires after.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let while_paused = occurrences(&redis, "p");
    assert!(
        while_paused.iter().filter(|at| **at > paused_at + 1000).count() == 0,
        "nothing fires while paused: {while_paused:?} (paused at {paused_at})"
    );
    config.paused = false;
    let resumed = q.admin().put_schedule("p", &config, true).await.unwrap();
    eventually(Duration::from_secs(60), "fires again after resume", || async {
        occurrences(&redis, "p").iter().any(|at| *at > resumed)
    })
    .await;
    let after: Vec<i64> = occurrences(&redis, "p")
        .into_iter()
        .filter(|at| *at > paused_at + 1000)
        .collect();
    assert!(
        after.iter().all(|at| *at > resumed),
        "nothing that fell while paused: {after:?} (resumed at {resumed})"
    );
}
