//! dq-timer as real processes: several racing, kill -9 and takeover, drain on signals.

mod common;

use std::time::Duration;

use common::{drain_exactly, job, lease_holders, metric_sum, queue, start};
use dq_harness::{RedisServer, eventually};

#[tokio::test]
async fn three_timer_processes_promote_each_job_once() {
    let redis = RedisServer::start();
    let timers = [
        start("dq-timer", &[&redis]).await,
        start("dq-timer", &[&redis]).await,
        start("dq-timer", &[&redis]).await,
    ];
    eventually(Duration::from_secs(30), "three timers share the partitions", || async {
        lease_holders(&redis).len() == 3
    })
    .await;
    let q = queue(&[&redis]).await;
    let n = 10_000;
    let jobs: Vec<_> = (0..n)
        .map(|i| {
            job(
                &q,
                serde_json::json!({"topic": "race", "body": i, "delay_ms": 200 + i % 1000}),
            )
        })
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    drain_exactly(&q, "race", n, Duration::from_secs(120)).await;
    let mut promoted = 0.0;
    for t in &timers {
        promoted += metric_sum(t.port, "dq_jobs_promoted_total").await;
    }
    assert_eq!(
        promoted as usize, n,
        "the timers' promotion counts add up to the jobs, once each"
    );
}

#[tokio::test]
async fn a_killed_timer_is_taken_over_and_nothing_is_lost() {
    let redis = RedisServer::start();
    let mut a = start("dq-timer", &[&redis]).await;
    let b = start("dq-timer", &[&redis]).await;
    eventually(
        Duration::from_secs(30),
        "two timers hold 128 partitions each",
        || async {
            let h = lease_holders(&redis);
            h.len() == 2 && h.values().all(|n| *n == 128)
        },
    )
    .await;
    let q = queue(&[&redis]).await;
    let n = 3000;
    let jobs: Vec<_> = (0..n)
        .map(|i| {
            job(
                &q,
                serde_json::json!({"topic": "kill", "body": i, "delay_ms": 500 + i % 2000}),
            )
        })
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    a.process.signal("KILL");
    a.process.wait(Duration::from_secs(10)).expect("killed");
    eventually(
        Duration::from_secs(30),
        "the survivor holds all 256 partitions",
        || async {
            let h = lease_holders(&redis);
            h.len() == 1 && h.values().all(|n| *n == 256)
        },
    )
    .await;
    drain_exactly(&q, "kill", n, Duration::from_secs(120)).await;
    assert!(metric_sum(b.port, "dq_timer_partitions_owned").await == 256.0);
}

#[tokio::test]
async fn timers_exit_0_on_sigterm_sigint_and_sigusr2_and_hand_over_at_once() {
    let redis = RedisServer::start();
    let q = queue(&[&redis]).await;
    let keeper = start("dq-timer", &[&redis]).await;
    for sig in ["TERM", "INT", "USR2"] {
        let mut t = start("dq-timer", &[&redis]).await;
        eventually(Duration::from_secs(30), "the new timer holds a share", || async {
            lease_holders(&redis).len() == 2
        })
        .await;
        // Work in flight: jobs due around the signal.
        let jobs: Vec<_> = (0..500)
            .map(|i| job(&q, serde_json::json!({"topic": sig, "body": i, "delay_ms": i % 300})))
            .collect();
        for r in q.producer().push_many(jobs).await {
            r.unwrap();
        }
        t.process.signal(sig);
        let status = t.process.wait(Duration::from_secs(30)).expect("exits after the signal");
        assert_eq!(status.code(), Some(0), "SIG{sig}: {}", t.process.log());
        assert_eq!(
            lease_holders(&redis).len(),
            1,
            "SIG{sig}: partitions released at exit, not after the lease lapses"
        );
        drain_exactly(&q, sig, 500, Duration::from_secs(60)).await;
    }
    drop(keeper);
}
