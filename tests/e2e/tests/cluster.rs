//! dq on a real local Redis Cluster (3 primaries + 3 replicas): every API verb, the timer, the consumer
//! and the checker as processes; a primary killed under load; resharding under load; a standalone data
//! set loaded into a cluster.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Api, env_for, start_on};
use dq_harness::{RedisCluster, eventually, free_port};
use serde_json::json;

fn cluster_env(cluster: &RedisCluster, port: u16, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    env_for("cluster", &cluster.urls(), port, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_the_timer_the_consumer_and_the_checker_work_on_a_cluster() {
    let cluster = RedisCluster::start();
    common::tour::every_verb("cluster", &cluster.urls(), &[], 3).await;
    // The partitions spread over every primary.
    for port in cluster.primaries() {
        let n: i64 = redis::cmd("DBSIZE").query(&mut cluster.conn(port)).unwrap();
        assert!(n > 0, "primary {port} holds no key");
    }
}

/// Pushes with ids `<prefix><n>` from `workers` tasks until `stop`, keeping the ids acknowledged (201).
fn pusher(
    api: Arc<Api>,
    prefix: &'static str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..4)
            .map(|w| {
                let (api, acked, stop) = (api.clone(), acked.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let id = format!("{prefix}{w}-{n}");
                        n += 1;
                        let (status, _) = api
                            .call(
                                "POST",
                                "/v1/jobs",
                                Some(json!({"id": id, "topic": "load", "body": n, "delay_ms": 600000})),
                            )
                            .await;
                        if status == 201 {
                            acked.lock().unwrap().push(id);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(acked).unwrap().into_inner().unwrap()
    })
}

/// kill -9 of a primary under load: its replica takes over and dq goes on by itself. With
/// `redis.wait_replicas = 1` no acknowledged push is lost; without it the loss is counted and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_under_load_fails_over_and_loses_no_acknowledged_durable_push() {
    let mut cluster = RedisCluster::start();
    let (dp, fp) = (free_port(), free_port());
    let durable = start_on(
        "dq-server",
        dp,
        cluster_env(&cluster, dp, &[("DQ__REDIS__WAIT_REPLICAS", "1")]),
    )
    .await;
    let fast = start_on("dq-server", fp, cluster_env(&cluster, fp, &[])).await;
    let kp = free_port();
    let checker = start_on(
        "dq-checker",
        kp,
        cluster_env(&cluster, kp, &[("DQ__CHECKER__INTERVAL_MS", "200")]),
    )
    .await;
    let (durable_api, fast_api) = (Arc::new(Api::new(durable.port)), Arc::new(Api::new(fast.port)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a = pusher(durable_api.clone(), "w", stop.clone());
    let b = pusher(fast_api.clone(), "f", stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Kill the primary of partition 0, then time until a push to that partition succeeds again.
    let parts = dq_core::store::partition::Partitions::new(256);
    let slot = dq_core::store::partition::slot_of(parts.tag(0));
    let victim = cluster.primary_for_slot(slot);
    let id_in_0 = |n: u32| {
        (0..)
            .map(|k| format!("probe{n}-{k}"))
            .find(|id| parts.of_id(id) == 0)
            .unwrap()
    };
    let killed = Instant::now();
    cluster.kill(victim);
    let mut n = 0;
    let failover = loop {
        n += 1;
        let (status, _) = fast_api
            .call(
                "POST",
                "/v1/jobs",
                Some(json!({"id": id_in_0(n), "topic": "probe", "body": 1})),
            )
            .await;
        if status == 201 {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "no failover within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "failover: kill -9 of primary :{victim} to the first successful push to its partitions took {failover:?} (cluster-node-timeout 1000 ms)"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (durable_ids, fast_ids) = (a.await.unwrap(), b.await.unwrap());
    assert!(
        durable_ids.len() > 50 && fast_ids.len() > 50,
        "{} {}",
        durable_ids.len(),
        fast_ids.len()
    );
    let mut lost = (0, 0);
    for (ids, lost) in [(&durable_ids, &mut lost.0), (&fast_ids, &mut lost.1)] {
        for id in ids {
            let (status, _) = fast_api.call("GET", &format!("/v1/jobs/{id}"), None).await;
            if status != 200 {
                *lost += 1;
            }
        }
    }
    eprintln!(
        "acknowledged pushes lost: {} of {} with wait_replicas = 1, {} of {} without",
        lost.0,
        durable_ids.len(),
        lost.1,
        fast_ids.len()
    );
    assert_eq!(lost.0, 0, "a push acknowledged after WAIT 1 survives the failover");

    // The old primary is no longer listed as a primary, but its `dq_redis_up` does not stay 0 (nor its
    // alert firing): the checker watches it until it answers again, as a replica.
    let up = format!("dq_redis_up{{node=\"127.0.0.1:{victim}\"}}");
    eventually(
        Duration::from_secs(30),
        "the checker shows the killed primary down",
        || async { common::metrics(checker.port).await.get(&up) == Some(&0.0) },
    )
    .await;
    tokio::task::block_in_place(|| cluster.restart(victim));
    eventually(
        Duration::from_secs(60),
        "the old primary, back as a replica, shows up",
        || async { common::metrics(checker.port).await.get(&up) == Some(&1.0) },
    )
    .await;
}

/// Resharding a live cluster (slots move to a new primary with MIGRATE, clients follow ASK and MOVED)
/// while jobs are pushed, reserved and acknowledged: every job is delivered exactly once, and the audit
/// then finds nothing to repair (no script left a job half-moved). A reserve whose answer was lost (the
/// machine overloaded, a call past its timeout) leaves its job reserved until its TTR, as anywhere: a
/// dq-timer runs to bring such a job back, and the drain sees it then for the first time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_under_load_loses_nothing() {
    let mut cluster = RedisCluster::start();
    let mut s = dq_core::Settings::default();
    s.redis.mode = dq_core::config::RedisMode::Cluster;
    s.redis.urls = cluster.urls();
    let q = dq_core::Queue::connect(&s).await.unwrap();
    let tp = free_port();
    let _timer = start_on("dq-timer", tp, cluster_env(&cluster, tp, &[])).await;
    let new = cluster.add_primary();
    let to = cluster.node_id(new);
    let n = 3000;
    let pushing = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut retries = 0;
            for chunk in 0..30 {
                let mut pending: Vec<String> = (0..n / 30).map(|i| format!("r{chunk}-{i}")).collect();
                // A push that got no answer (a timeout while its slot moves) is sent again with the same
                // id, as a producer does: stored once, or a conflict because the first one was.
                while !pending.is_empty() {
                    let jobs: Vec<_> = pending
                        .iter()
                        .map(|id| {
                            let job = json!({"id": id, "topic": "move", "body": 1, "ttr_ms": 10_000});
                            q.producer().validate(serde_json::from_value(job).unwrap()).unwrap()
                        })
                        .collect();
                    let results = q.producer().push_many(jobs).await;
                    pending = pending
                        .into_iter()
                        .zip(results)
                        .filter_map(|(id, r)| match r {
                            Ok(_) | Err(dq_core::Error::Conflict(_)) => None,
                            // Sent again with its id: a conflict then means the first attempt stored it.
                            Err(dq_core::Error::Unavailable { .. } | dq_core::Error::Indeterminate { .. }) => Some(id),
                            Err(e) => panic!("{id}: {e}"),
                        })
                        .collect();
                    retries += pending.len();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!("pushes sent again after no answer during the resharding: {retries}");
        })
    };
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let draining = {
        let (q, seen) = (q.clone(), seen.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(180);
            while seen.lock().unwrap().len() < n && Instant::now() < deadline {
                let got = match q.reservations().reserve(&["move".to_string()], 100).await {
                    Ok(got) => got,
                    Err(e) => {
                        eprintln!("reserve during resharding: {e}");
                        continue;
                    }
                };
                for r in got {
                    assert!(seen.lock().unwrap().insert(r.id.clone()), "{} handed out twice", r.id);
                    // An ack without an answer is sent again: done once, then refused as stale.
                    loop {
                        match q.reservations().ack(&r.id, &r.receipt).await {
                            Ok(()) | Err(dq_core::Error::StaleReceipt) => break,
                            // Not sent, or sent and unanswered in time: either way, send it again.
                            Err(dq_core::Error::Unavailable { .. } | dq_core::Error::Indeterminate { .. }) => {
                                eprintln!("ack during resharding: no answer, sent again");
                            }
                            Err(e) => panic!("{}: {e}", r.id),
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let from = cluster.node_id(cluster.primary_for_slot(0));
    let out = tokio::task::block_in_place(|| {
        cluster.redis_cli(&[
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{new}"),
            "--cluster-from",
            &from,
            "--cluster-to",
            &to,
            "--cluster-slots",
            "2000",
            "--cluster-yes",
        ])
    });
    assert!(!out.contains("[ERR]"), "{out}");
    pushing.await.unwrap();
    draining.await.unwrap();
    let missing: Vec<String> = (0..30)
        .flat_map(|chunk| (0..n / 30).map(move |i| format!("r{chunk}-{i}")))
        .filter(|id| !seen.lock().unwrap().contains(id))
        .collect();
    let mut where_missing = Vec::new();
    for id in &missing {
        where_missing.push(format!(
            "{id}: {:?}",
            q.producer().get(id).await.map(|j| (j.state, j.attempts))
        ));
    }
    assert!(
        missing.is_empty(),
        "every job delivered once; not seen: {where_missing:?}"
    );
    let moved: i64 = redis::cmd("DBSIZE").query(&mut cluster.conn(new)).unwrap();
    assert!(moved > 0, "the new primary took partitions");
    let audit = q.checker().audit().await.unwrap();
    assert_eq!((audit.orphan_records, audit.dangling_ids), (0, 0), "{audit:?}");
    let stats = q.admin().stats().await;
    assert!(stats.partitions_down.is_empty(), "{:?}", stats.partitions_down);
    let left: i64 = stats.counts.values().flat_map(|c| c.values()).sum();
    assert_eq!(left, 0, "the counts show no job left: {:?}", stats.counts);
}

/// A standalone installation's data set loads into a cluster as it is (`redis-cli --cluster import`):
/// the keys keep their names and hash tags, and every job is reachable and delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_data_set_loads_into_a_cluster_and_every_job_is_delivered() {
    let standalone = dq_harness::RedisServer::start();
    let mut s = dq_core::Settings::default();
    s.redis.urls = vec![standalone.url()];
    let q = dq_core::Queue::connect(&s).await.unwrap();
    let jobs: Vec<_> = (0..500)
        .map(|i| {
            q.producer()
                .validate(serde_json::from_value(json!({"topic": "grow", "body": i})).unwrap())
                .unwrap()
        })
        .collect();
    let ids: Vec<String> = q
        .producer()
        .push_many(jobs)
        .await
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    let later = q
        .producer()
        .push(
            q.producer()
                .validate(
                    serde_json::from_value(json!({"id": "later", "topic": "grow", "body": 1, "delay_ms": 600000}))
                        .unwrap(),
                )
                .unwrap(),
        )
        .await
        .unwrap();
    drop(q);

    let cluster = RedisCluster::start();
    let out = tokio::task::block_in_place(|| {
        cluster.redis_cli(&[
            "--cluster",
            "import",
            &format!("127.0.0.1:{}", cluster.primaries()[0]),
            "--cluster-from",
            &format!("127.0.0.1:{}", standalone.port()),
            "--cluster-copy",
        ])
    });
    assert!(!out.contains("[ERR]"), "{out}");
    s.redis.mode = dq_core::config::RedisMode::Cluster;
    s.redis.urls = cluster.urls();
    let q = dq_core::Queue::connect(&s).await.unwrap();
    assert_eq!(q.partitions().count(), 256, "the layout came along");
    assert_eq!(
        q.producer().get(&later.id).await.unwrap().state,
        dq_core::State::Delayed
    );
    let seen = Mutex::new(HashSet::new());
    eventually(Duration::from_secs(60), "every imported job delivered", || async {
        for r in q.reservations().reserve(&["grow".to_string()], 100).await.unwrap() {
            assert!(seen.lock().unwrap().insert(r.id.clone()));
            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
        }
        seen.lock().unwrap().len() == ids.len()
    })
    .await;
    let seen = seen.into_inner().unwrap();
    assert!(ids.iter().all(|id| seen.contains(id)));
}

/// Wake-ups go over sharded pub/sub on a cluster, each partition's channel on the node that serves its
/// slot. When slots move to a new primary, Redis drops their subscriptions there and the listeners
/// subscribe again on the new node: a delayed job in a moved partition is still promoted when due (the
/// timer heard of it) and reaches a long poll that waits for it (the server heard it become ready).
/// Nothing polls: without the wake-ups the job would wait for a resync, and the long polls run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_follow_partitions_whose_slots_move() {
    let mut cluster = RedisCluster::start();
    let (sp, tp) = (free_port(), free_port());
    let server = start_on("dq-server", sp, cluster_env(&cluster, sp, &[])).await;
    let _timer = start_on("dq-timer", tp, cluster_env(&cluster, tp, &[])).await;
    let api = Api::new(server.port);
    // Subscribed everywhere before the move: a job goes through first.
    api.ok(
        "POST",
        "/v1/jobs",
        Some(json!({"topic": "w", "body": 0, "delay_ms": 200})),
    )
    .await;
    let got = api
        .ok(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["w"], "timeout_ms": 20000})),
        )
        .await;
    let first = &got["jobs"][0];
    let path = format!("/v1/jobs/{}/ack", first["id"].as_str().expect("the first job"));
    api.ok("POST", &path, Some(json!({"receipt": first["receipt"]}))).await;

    let new = cluster.add_primary();
    let from = cluster.node_id(cluster.primary_for_slot(0));
    let to = cluster.node_id(new);
    let out = tokio::task::block_in_place(|| {
        cluster.redis_cli(&[
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{new}"),
            "--cluster-from",
            &from,
            "--cluster-to",
            &to,
            "--cluster-slots",
            "2000",
            "--cluster-yes",
        ])
    });
    assert!(!out.contains("[ERR]"), "{out}");
    let partitions = dq_core::store::partition::Partitions::new(256);
    let moved: Vec<String> = (0..)
        .map(|i| format!("w{i}"))
        .filter(|id| {
            let slot = dq_core::store::partition::slot_of(partitions.tag(partitions.of_id(id)));
            cluster.primary_for_slot(slot) == new
        })
        .take(5)
        .collect();
    for id in &moved {
        let mut seen = None;
        // The first tries may still meet the move's tail (a 503 while the slot map settles).
        eventually(Duration::from_secs(30), "the push is stored", || async {
            let (status, _) = api
                .call(
                    "POST",
                    "/v1/jobs",
                    Some(json!({"id": id, "topic": "w", "body": 1, "delay_ms": 300})),
                )
                .await;
            status == 201 || status == 409
        })
        .await;
        // Long polls of 20 s at most: the job is due in 300 ms. A poll that meets the move's tail
        // (a 503 while the slot map settles) is asked again.
        for _ in 0..4 {
            let (status, got) = api
                .call(
                    "POST",
                    "/v1/reserve",
                    Some(json!({"topics": ["w"], "timeout_ms": 20000})),
                )
                .await;
            if status == 503 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            assert_eq!(status, 200, "reserve: {got}");
            if let Some(j) = got["jobs"].as_array().unwrap().first() {
                let jid = j["id"].as_str().unwrap().to_string();
                let (status, out) = api
                    .call(
                        "POST",
                        &format!("/v1/jobs/{jid}/ack"),
                        Some(json!({"receipt": j["receipt"]})),
                    )
                    .await;
                assert_eq!(status, 204, "ack of {j}: {out}");
                seen = Some(jid);
                break;
            }
        }
        assert_eq!(
            seen.as_deref(),
            Some(id.as_str()),
            "a job in a moved partition reached the long poll"
        );
    }
}
