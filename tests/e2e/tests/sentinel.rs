//! dq on a real Redis Sentinel set (primary, replica, three sentinels): every API verb, the timer, the
//! consumer and the checker as processes; kill -9 of the primary under load, and a primary demoted by a
//! failover (READONLY).

mod common;

use std::time::{Duration, Instant};

use common::{call, env_for, start_on};
use dq_harness::{RedisSentinelSet, eventually, free_port};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_the_timer_the_consumer_and_the_checker_work_on_sentinel() {
    let set = RedisSentinelSet::start();
    let extra = [("DQ__REDIS__SENTINEL_MASTER", set.master_name())];
    common::tour::every_verb("sentinel", &set.sentinel_urls(), &extra, 1).await;
    // Everything is on the primary the sentinels name, and reaches its replica.
    let primary = set.primary_port();
    let n: i64 = redis::cmd("DBSIZE").query(&mut set.conn(primary)).unwrap();
    assert!(n > 0, "the primary :{primary} holds no key");
    let replica = set.replica_ports()[0];
    eventually(
        Duration::from_secs(30),
        "the replica holds the primary's keys",
        || async {
            let r: i64 = redis::cmd("DBSIZE").query(&mut set.conn(replica)).unwrap_or(0);
            r > 0
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_follows_sentinel_through_a_kill_and_a_demotion_and_loses_no_durable_push() {
    let mut set = RedisSentinelSet::start();
    let (sp, tp) = (free_port(), free_port());
    let extra = [
        ("DQ__REDIS__SENTINEL_MASTER", "mymaster"),
        ("DQ__REDIS__WAIT_REPLICAS", "1"),
    ];
    let server = start_on("dq-server", sp, env_for("sentinel", &set.sentinel_urls(), sp, &extra)).await;
    let _timer = start_on("dq-timer", tp, env_for("sentinel", &set.sentinel_urls(), tp, &extra)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let port = server.port;

    // The verbs, and a delayed job through the timer.
    let (status, out) = call(
        &http,
        port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "s1", "topic": "t", "body": 1, "delay_ms": 300})),
    )
    .await;
    assert_eq!(status, 201, "{out}");
    let (status, out) = call(
        &http,
        port,
        "POST",
        "/v1/reserve",
        Some(json!({"topics": ["t"], "timeout_ms": 10000})),
    )
    .await;
    assert_eq!(status, 200);
    let job = &out["jobs"][0];
    assert_eq!(job["id"], "s1", "{out}");
    let (status, _) = call(
        &http,
        port,
        "POST",
        "/v1/jobs/s1/ack",
        Some(json!({"receipt": job["receipt"], "consumer": "sentinel-worker"})),
    )
    .await;
    assert_eq!(status, 204);
    // The delivery is on record with the job.
    let (status, attempts) = call(&http, port, "GET", "/v1/jobs/s1/attempts", None).await;
    assert_eq!(status, 200, "{attempts}");
    assert_eq!(attempts["history"][0]["outcome"], "acked", "{attempts}");
    assert_eq!(attempts["history"][0]["consumer"], "sentinel-worker", "{attempts}");
    // A fan-out push and an ack that pushes: the children stored with them.
    let (status, _) = call(
        &http,
        port,
        "PUT",
        "/v1/topics/fan",
        Some(json!({"fanout": ["f1", "f2"]})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, out) = call(
        &http,
        port,
        "POST",
        "/v1/jobs",
        Some(json!({"id": "s2", "topic": "fan", "body": 2})),
    )
    .await;
    assert_eq!(
        (status, out["children"].as_array().map(Vec::len)),
        (201, Some(2)),
        "{out}"
    );
    let (_, out) = call(
        &http,
        port,
        "POST",
        "/v1/reserve",
        Some(json!({"topics": ["f1"], "timeout_ms": 10000})),
    )
    .await;
    let job = &out["jobs"][0];
    assert_eq!(job["id"], "s2~f1", "{out}");
    let ack = json!({"receipt": job["receipt"], "push": [{"topic": "next", "body": 3}]});
    let (status, out) = call(&http, port, "POST", "/v1/jobs/s2~f1/ack", Some(ack)).await;
    assert_eq!(
        (status, out["pushed"][0]["id"].clone()),
        (200, json!("s2~f1~0")),
        "{out}"
    );
    let (_, out) = call(&http, port, "GET", "/v1/jobs/s2~f1~0", None).await;
    assert_eq!(
        (out["state"].clone(), out["parent"].clone()),
        (json!("ready"), json!("s2~f1")),
        "{out}"
    );
    let (_, stats) = call(&http, port, "GET", "/v1/stats", None).await;
    assert_eq!(stats["redis"]["mode"], "sentinel");

    // kill -9 of the primary between pushes: acknowledged pushes (after WAIT 1) all survive. The new
    // primary has a replica again once the old one is back, which WAIT 1 needs.
    let old = set.primary_port();
    let mut acked = Vec::new();
    let push = async |n: usize, acked: &mut Vec<String>| {
        let id = format!("k{n}");
        let (status, _) = call(
            &http,
            port,
            "POST",
            "/v1/jobs",
            Some(json!({"id": id, "topic": "load", "body": n, "delay_ms": 600000})),
        )
        .await;
        if status == 201 {
            acked.push(id);
        }
        status
    };
    for n in 0..50 {
        push(n, &mut acked).await;
    }
    let killed = Instant::now();
    set.kill(old);
    let new = tokio::task::block_in_place(|| set.wait_failover(old, Duration::from_secs(60)));
    // Every push acknowledged before the kill is on the promoted replica.
    for id in &acked {
        let (status, _) = call(&http, port, "GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{id} was acknowledged before the kill and is lost");
    }
    // The old primary comes back (as a replica of the new one, as an operator restarts it): the new primary
    // needs a replica for WAIT 1, so durable pushes wait for it.
    set.restart_as_replica(old, new);
    let mut n = 50;
    let back = loop {
        n += 1;
        if push(n, &mut acked).await == 201 {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(90),
            "dq did not follow the failover"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for _ in 0..50 {
        n += 1;
        push(n, &mut acked).await;
    }
    eprintln!("sentinel failover: kill -9 of :{old} to the first acknowledged durable push took {back:?}");
    eventually(
        Duration::from_secs(120),
        "the old primary is a replica again",
        || async { set.replica_ports().contains(&old) && set.primary_port() == new },
    )
    .await;
    for id in &acked {
        let (status, _) = call(&http, port, "GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{id} was acknowledged and is lost");
    }

    // A coordinated failover demotes the primary dq talks to: its next write answers READONLY, and dq
    // resolves the new primary at once.
    eventually(
        Duration::from_secs(60),
        "the old primary is a replica again",
        || async { set.replica_ports().contains(&old) && set.primary_port() == new },
    )
    .await;
    eventually(Duration::from_secs(60), "the replica is in sync", || async {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut set.conn(old))
            .unwrap_or_default();
        info.contains("master_link_status:up")
    })
    .await;
    // Sentinel may turn a FAILOVER down until it sees the replica as good: ask until it happens.
    let asked = Instant::now();
    while set.primary_port() == new {
        assert!(
            asked.elapsed() < Duration::from_secs(120),
            "no coordinated failover within 120 s"
        );
        let mut c = redis::Client::open(set.sentinel_urls()[0].as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let _ = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg("mymaster")
            .query::<()>(&mut c);
        let deadline = Instant::now() + Duration::from_secs(15);
        while set.primary_port() == new && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let failed = std::sync::atomic::AtomicUsize::new(0);
    eventually(Duration::from_secs(60), "pushes reach the new primary", || async {
        let (status, _) = call(
            &http,
            port,
            "POST",
            "/v1/jobs",
            Some(json!({"topic": "after", "body": 1})),
        )
        .await;
        if status != 201 {
            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        status == 201
    })
    .await;
    eprintln!("after the demotion, {failed:?} push(es) failed before dq followed");
}

/// The egress policy refuses a callback to any Redis node dq uses, and on Sentinel that is the primary's
/// replicas too (one of them is the primary after a failover), not only the primary and the sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_to_a_sentinel_replica_is_refused_as_a_redis_node() {
    let set = RedisSentinelSet::start();
    let sp = free_port();
    let extra = [("DQ__REDIS__SENTINEL_MASTER", set.master_name())];
    let server = start_on("dq-server", sp, env_for("sentinel", &set.sentinel_urls(), sp, &extra)).await;
    let http = reqwest::Client::new();
    let mut ports = vec![("primary", set.primary_port())];
    ports.extend(set.replica_ports().into_iter().map(|p| ("replica", p)));
    ports.extend(set.sentinel_ports().into_iter().map(|p| ("sentinel", p)));
    for (what, port) in ports {
        let config = json!({"callback": {"url": format!("http://127.0.0.1:{port}/hook")}});
        let (status, out) = call(&http, server.port, "PUT", "/v1/topics/to-redis", Some(config)).await;
        assert_eq!(status, 400, "a callback to the {what} :{port}: {out}");
        let message = out["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("redis node 127.0.0.1:{port}")),
            "{what}: {out}"
        );
    }
}
