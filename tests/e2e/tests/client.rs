//! dq-client against a real dq-server, dq-timer and Redis: every verb, retries after a lost answer that
//! neither duplicate a push nor fail an ack that went through, flow keys (pushed without an id of the
//! client's, shown by look-up, reserve and the busiest keys), a job's attempts with the consumer's name,
//! token auth, and the worker loop.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Running, env, start, start_on};
use dq_client::{
    Callback, Client, Failed, Flow, FlowKey, Nack, Outcome, PushRequest, ReserveRequest, RetryPolicy, ScheduleConfig,
    TopicConfig, When, Worker,
};
use dq_harness::{RedisServer, eventually, free_port};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

fn client(server: &Running) -> Client {
    Client::new(&format!("http://127.0.0.1:{}", server.port)).unwrap()
}

#[tokio::test]
async fn every_job_verb() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let _timer = start("dq-timer", &[&redis]).await;
    let c = client(&server);

    // Push without an id: the client makes one, a ULID.
    let pushed = c
        .push(&PushRequest::new("orders", json!({"n": 1})).delay_ms(60_000))
        .await
        .unwrap();
    assert_eq!(pushed.id.len(), 26);
    assert_eq!(pushed.state, "delayed");
    assert_eq!(pushed.topic, "orders");
    let job = c.get(&pushed.id).await.unwrap();
    assert_eq!(
        (job.topic.as_str(), job.body.clone(), job.state.as_str()),
        ("orders", json!({"n": 1}), "delayed")
    );

    assert_eq!(job.priority, 1024, "the default priority");

    // A new priority keeps the due time; reschedule to now keeps the priority; reserve; touch; ack.
    let job = c.set_priority(&pushed.id, 7).await.unwrap();
    assert_eq!(
        (job.priority, job.state.as_str(), job.run_at),
        (7, "delayed", pushed.run_at)
    );
    let job = c.reschedule(&pushed.id, When::DelayMs(0)).await.unwrap();
    assert_eq!((job.state.as_str(), job.priority), ("ready", 7));
    let reserved = c.reserve(&ReserveRequest::new(["orders"]).count(5)).await.unwrap();
    assert_eq!(reserved.len(), 1);
    assert_eq!((reserved[0].id.as_str(), reserved[0].attempt), (pushed.id.as_str(), 1));
    let deadline = c
        .touch(&reserved[0].id, &reserved[0].receipt, Some(120_000))
        .await
        .unwrap();
    assert!(deadline > reserved[0].deadline, "touch extends the reservation");
    c.ack(&reserved[0].id, &reserved[0].receipt).await.unwrap();
    assert_eq!(c.get(&pushed.id).await.unwrap().state, "done");
    // A second ack is stale: dq's error keeps its kind.
    let stale = c.ack(&reserved[0].id, &reserved[0].receipt).await.unwrap_err();
    assert!(stale.is_code("stale_receipt"), "{stale}");
    assert_eq!(stale.api().unwrap().status, 409);

    // Push many, one entry a conflict; ack many with one stale receipt.
    let results = c
        .push_many(&[
            PushRequest::new("orders", json!(2)).id("b-1"),
            PushRequest::new("orders", json!(3)),
            PushRequest::new("orders", json!(4)).id(&pushed.id),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    assert_eq!(results[2].as_ref().unwrap_err().code, "conflict");
    let two = c.reserve(&ReserveRequest::new(["orders"]).count(10)).await.unwrap();
    assert_eq!(two.len(), 2);
    let acks = vec![
        (two[0].id.clone(), two[0].receipt.clone()),
        (two[1].id.clone(), "0000000000000000.9".to_string()),
    ];
    let acked = c.ack_many(&acks).await.unwrap();
    assert!(acked[0].is_ok());
    assert_eq!(acked[1].as_ref().unwrap_err().code, "stale_receipt");

    // Nack with a delay and an error; the job is delayed with its last error.
    c.nack(
        &two[1].id,
        &two[1].receipt,
        &Nack {
            delay_ms: Some(60_000),
            error: Some("boom".into()),
        },
    )
    .await
    .unwrap();
    let nacked = c.get(&two[1].id).await.unwrap();
    assert_eq!(
        (nacked.state.as_str(), nacked.last_error.as_deref(), nacked.attempts),
        ("delayed", Some("boom"), 1)
    );

    // Cancel; a second cancel is a 404.
    c.cancel(&two[1].id).await.unwrap();
    assert!(c.cancel(&two[1].id).await.unwrap_err().is_code("not_found"));
    assert!(c.get(&two[1].id).await.unwrap_err().is_code("not_found"));

    // A bad input is dq's 400, nothing written.
    let bad = c
        .push(&PushRequest::new("no spaces allowed", json!(1)))
        .await
        .unwrap_err();
    assert!(bad.is_code("invalid_argument"), "{bad}");

    // A long poll answers as soon as a job is pushed.
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { c.reserve(&ReserveRequest::new(["later"]).wait_ms(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = c.push(&PushRequest::new("later", json!("x"))).await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, p.id);
}

/// A job's attempts, as a worker named by the builder's `consumer` left them: a nack, then an ack.
#[tokio::test]
async fn attempts_show_each_delivery_newest_first_with_the_consumer() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let c = Client::builder(&format!("http://127.0.0.1:{}", server.port))
        .consumer(Some("w1".into()))
        .build()
        .unwrap();
    let pushed = c.push(&PushRequest::new("tried", json!({"n": 1}))).await.unwrap();
    let fresh = c.attempts(&pushed.id).await.unwrap();
    assert_eq!(
        (fresh.id.as_str(), fresh.attempts, fresh.history.len()),
        (pushed.id.as_str(), 0, 0),
        "no delivery yet"
    );

    // A nack with no delay puts the job straight back to ready; the long poll takes it again.
    let take = ReserveRequest::new(["tried"]).wait_ms(20_000);
    let first = c.reserve(&take).await.unwrap();
    assert_eq!(first.len(), 1);
    c.nack(
        &first[0].id,
        &first[0].receipt,
        &Nack {
            delay_ms: Some(0),
            error: Some("no stock".into()),
        },
    )
    .await
    .unwrap();
    let second = c.reserve(&take).await.unwrap();
    assert_eq!((second.len(), second[0].attempt), (1, 2));
    c.ack(&second[0].id, &second[0].receipt).await.unwrap();

    let seen = c.attempts(&pushed.id).await.unwrap();
    assert_eq!((seen.id.as_str(), seen.attempts), (pushed.id.as_str(), 2));
    let summary: Vec<_> = seen
        .history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.consumer.as_deref(), a.error.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            (2, Outcome::Acked, Some("w1"), None),
            (1, Outcome::Nacked, Some("w1"), Some("no stock")),
        ],
        "newest first"
    );
    assert!(seen.history[0].started_at >= seen.history[1].started_at, "{seen:?}");
    assert!(seen.history.iter().all(|a| a.status.is_none() && a.answer.is_none()));

    // No such job: dq's 404, its kind kept; a bad id: dq's 400.
    let missing = c.attempts("no-such-job").await.unwrap_err();
    assert!(missing.is_code("not_found"), "{missing}");
    assert_eq!(missing.api().unwrap().status, 404);
    let bad = c.attempts("bad id").await.unwrap_err();
    assert!(bad.is_code("invalid_argument"), "{bad}");
}

#[tokio::test]
async fn topics_dead_letters_schedules_and_stats() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let c = client(&server);

    let config = TopicConfig {
        callback: Some(Callback {
            url: "http://127.0.0.1:9/hook".into(),
            concurrency: 4,
            secret: Some("s3cr3t".into()),
            ..Callback::default()
        }),
        ..TopicConfig::default()
    };
    let t = c.put_topic("mail", &config).await.unwrap();
    let cb = t.config.as_ref().unwrap().callback.as_ref().unwrap();
    assert_eq!((cb.concurrency, cb.secret.as_deref()), (4, Some("***")));
    assert!(c.pause_topic("mail").await.unwrap().config.unwrap().paused);
    assert!(!c.resume_topic("mail").await.unwrap().config.unwrap().paused);
    assert!(c.topics().await.unwrap().iter().any(|t| t.topic == "mail"));
    c.delete_topic("mail").await.unwrap();
    assert!(c.delete_topic("mail").await.unwrap_err().is_code("not_found"));

    // Two jobs go dead (one attempt each); list, requeue one, delete the other.
    for i in 0..2 {
        c.push(&PushRequest::new("pull", json!(i)).id(format!("d-{i}")).max_attempts(1))
            .await
            .unwrap();
    }
    for job in c.reserve(&ReserveRequest::new(["pull"]).count(2)).await.unwrap() {
        c.nack(&job.id, &job.receipt, &Nack::default()).await.unwrap();
    }
    let page = c.dead("pull", 0, 10).await.unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(page.jobs.len(), 2);
    assert_eq!(c.requeue_dead("pull", Some(&["d-0".to_string()])).await.unwrap(), 1);
    assert_eq!(c.get("d-0").await.unwrap().state, "ready");
    assert_eq!(c.delete_dead("pull", None).await.unwrap(), 1);
    assert!(c.get("d-1").await.unwrap_err().is_code("not_found"));

    let s = ScheduleConfig {
        cron: "0 9 * * MON".into(),
        timezone: "Europe/Berlin".into(),
        topic: "reports".into(),
        body: json!({"report": "weekly"}),
        ttr_ms: None,
        max_attempts: None,
        priority: Some(5),
        paused: false,
    };
    let made = c.put_schedule("weekly", &s).await.unwrap();
    assert!(made.next_fire_at.is_some());
    assert_eq!(c.pause_schedule("weekly").await.unwrap().next_fire_at, None);
    assert!(c.resume_schedule("weekly").await.unwrap().next_fire_at.is_some());
    assert_eq!(c.schedules().await.unwrap().len(), 1);
    assert_eq!(c.schedule("weekly").await.unwrap().config.cron, "0 9 * * MON");
    c.delete_schedule("weekly").await.unwrap();
    assert!(c.schedule("weekly").await.unwrap_err().is_code("not_found"));
    let bad = c
        .put_schedule(
            "bad",
            &ScheduleConfig {
                cron: "61 * * * *".into(),
                ..s
            },
        )
        .await
        .unwrap_err();
    assert!(bad.is_code("invalid_argument"), "{bad}");

    let stats = c.stats().await.unwrap();
    assert_eq!(stats.redis.mode, "standalone");
    assert_eq!(stats.topics["pull"].ready, 1);
}

#[tokio::test]
async fn every_operation_of_the_openapi_document_has_a_client_method() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let doc: serde_json::Value = reqwest::get(format!("http://127.0.0.1:{}/openapi.json", server.port))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let known: std::collections::HashMap<&str, &str> = dq_client::OPERATIONS.iter().copied().collect();
    let mut served = std::collections::BTreeSet::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            let Some(id) = op["operationId"].as_str() else { continue };
            assert!(
                known.contains_key(id),
                "operation `{id}` has no dq-client method (dq_client::OPERATIONS)"
            );
            served.insert(id.to_string());
        }
    }
    let listed: std::collections::BTreeSet<String> = known.keys().map(|k| k.to_string()).collect();
    assert_eq!(
        served, listed,
        "dq_client::OPERATIONS names an operation the document does not have"
    );
    // And the new list route answers through the client.
    let c = client(&server);
    c.push(&PushRequest::new("t", json!(1)).id("one")).await.unwrap();
    let page = c.list_jobs("t", "ready", 0, 10).await.unwrap();
    assert_eq!((page.jobs.len(), page.total, page.complete), (1, 1, true));
    c.healthz().await.unwrap();
}

#[tokio::test]
async fn flow_keys_are_pushed_looked_up_reserved_and_listed_busiest_first() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let c = client(&server);
    let flow = Flow {
        concurrency: Some(2),
        rate_per_s: Some(50.0),
        burst: None,
    };
    let t = c
        .put_topic(
            "sends",
            &TopicConfig {
                flow: Some(flow),
                ..TopicConfig::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(t.config.unwrap().flow, Some(flow));

    // A flow-keyed push gets its id from dq (the installation has 256 partitions: an id of the client's
    // would almost surely not be the key's), one by one and in a batch.
    let mut ids = Vec::new();
    for n in 0..3 {
        let pushed = c
            .push(&PushRequest::new("sends", json!({"n": n})).flow_key("acme"))
            .await
            .unwrap();
        assert_eq!(pushed.state, "ready");
        ids.push(pushed.id);
    }
    let batch = c
        .push_many(&[
            PushRequest::new("sends", json!({"n": 3})).flow_key("acme"),
            PushRequest::new("sends", json!({"n": 4})).flow_key("globex"),
            PushRequest::new("sends", json!({"n": 5})).flow_key("globex"),
            PushRequest::new("sends", json!({"n": 6})).flow_key("initech"),
            PushRequest::new("sends", json!({"n": 7})).flow_key("initech"),
            PushRequest::new("plain", json!({"n": 8})),
        ])
        .await
        .unwrap();
    assert!(batch.iter().all(Result::is_ok), "{batch:?}");
    let job = c.get(&ids[0]).await.unwrap();
    assert_eq!(job.flow_key.as_deref(), Some("acme"));
    let unkeyed = c.get(&batch[5].as_ref().unwrap().id).await.unwrap();
    assert_eq!(unkeyed.flow_key, None);

    // The busiest keys: most ready jobs first, then by name; `keys` counts every key with ready jobs.
    let keys = c.flow_keys("sends", 10).await.unwrap();
    let row = |key: &str, ready, reserved| FlowKey {
        key: key.into(),
        ready,
        reserved,
    };
    assert_eq!(keys.keys, 3);
    assert_eq!(
        keys.busiest,
        vec![row("acme", 4, 0), row("globex", 2, 0), row("initech", 2, 0)]
    );
    let top = c.flow_keys("sends", 1).await.unwrap();
    assert_eq!((top.keys, top.busiest), (3, vec![row("acme", 4, 0)]));

    // A reserved job carries its key, and its key (every key has a job left ready) counts it reserved.
    let got = c.reserve(&ReserveRequest::new(["sends"])).await.unwrap();
    assert_eq!(got.len(), 1);
    let key = got[0].flow_key.clone().expect("every job of the topic has a key");
    let before = keys.busiest.iter().find(|k| k.key == key).unwrap();
    let after = c.flow_keys("sends", 10).await.unwrap();
    assert_eq!(after.keys, 3);
    assert!(
        after.busiest.contains(&row(&key, before.ready - 1, 1)),
        "{key}: {after:?}"
    );

    // A limit out of 1 ..= 100 and a bad flow key are dq's 400s.
    for limit in [0, 101] {
        let e = c.flow_keys("sends", limit).await.unwrap_err();
        assert!(e.is_code("invalid_argument"), "{e}");
    }
    let e = c
        .push(&PushRequest::new("sends", json!(1)).flow_key("no spaces"))
        .await
        .unwrap_err();
    assert!(e.is_code("invalid_argument"), "{e}");
    // A topic without flow keys has none.
    assert_eq!(c.flow_keys("quiet", 10).await.unwrap(), dq_client::FlowKeys::default());
}

#[tokio::test]
async fn a_flow_keyed_push_whose_answer_is_lost_is_unknown_not_a_second_job() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let drop_answers = Arc::new(AtomicUsize::new(0));
    let port = lossy_proxy(server.port, drop_answers.clone()).await;
    let c = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let direct = client(&server);

    // dq makes a flow-keyed job's id, so a try again could not find the first try's job: the client
    // does not send it again, and says the outcome is unknown.
    drop_answers.store(1, Ordering::SeqCst);
    let e = c
        .push(&PushRequest::new("keyed", json!(1)).flow_key("acme"))
        .await
        .unwrap_err();
    assert!(matches!(e, dq_client::Error::Unknown(_)), "{e:?}");
    assert_eq!(
        direct.stats().await.unwrap().topics["keyed"].ready,
        1,
        "exactly one job"
    );
    // The same for a batch that holds such a job.
    drop_answers.store(1, Ordering::SeqCst);
    let e = c
        .push_many(&[
            PushRequest::new("keyed", json!(2)).flow_key("acme"),
            PushRequest::new("keyed", json!(3)),
        ])
        .await
        .unwrap_err();
    assert!(matches!(e, dq_client::Error::Unknown(_)), "{e:?}");
    assert_eq!(direct.stats().await.unwrap().topics["keyed"].ready, 3);

    // With a `dedup_key` the push is safe to send again: the second try finds the first one's job.
    drop_answers.store(1, Ordering::SeqCst);
    let pushed = c
        .push(
            &PushRequest::new("keyed", json!(4))
                .flow_key("acme")
                .dedup("order-4", 60_000),
        )
        .await
        .unwrap();
    assert_eq!(drop_answers.load(Ordering::SeqCst), 0, "the first answer was dropped");
    assert!(pushed.duplicate, "{pushed:?}");
    assert_eq!(direct.get(&pushed.id).await.unwrap().flow_key.as_deref(), Some("acme"));
    assert_eq!(direct.stats().await.unwrap().topics["keyed"].ready, 4);
}

/// A proxy in front of dq-server that forwards both ways and calls `on_marker` before it forwards what
/// holds `marker` (even across two reads).
async fn watching_proxy(upstream: u16, marker: &'static [u8], on_marker: impl Fn() + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let on_marker = Arc::new(on_marker);
    tokio::spawn(async move {
        loop {
            let (down, _) = listener.accept().await.unwrap();
            let up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
            let (mut down_read, mut down_write) = down.into_split();
            let (mut up_read, mut up_write) = up.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut up_read, &mut down_write).await });
            let on_marker = on_marker.clone();
            tokio::spawn(async move {
                let (mut buf, mut seen) = (vec![0u8; 64 * 1024], Vec::new());
                loop {
                    let n = match down_read.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    // The end of the last read and this one, for a marker cut in two.
                    seen.drain(..seen.len().saturating_sub(marker.len() - 1));
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(marker.len()).any(|w| w == marker) {
                        on_marker();
                    }
                    if up_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Redis stalls past every retry of dq-server's: a push answers 503 naming the id dq made for the
/// flow-keyed job (a batch, each entry's error), and the client pushes again with it (Redis goes on as
/// that request passes the proxy). The stalled write ran after all, or this one stores the job: one job
/// either way, answered as pushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_keyed_push_with_an_unknown_outcome_is_pushed_again_with_the_id_dq_named() {
    let redis = Arc::new(RedisServer::start());
    let server = start("dq-server", &[&redis]).await;
    let direct = client(&server);
    let pushed_again = Arc::new(AtomicUsize::new(0));
    let port = {
        let (redis, pushed_again) = (redis.clone(), pushed_again.clone());
        watching_proxy(server.port, br#""id":"#, move || {
            pushed_again.fetch_add(1, Ordering::SeqCst);
            redis.resume();
        })
        .await
    };
    let c = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    redis.pause();
    let pushed = c
        .push(&PushRequest::new("keyed", json!({"n": 1})).flow_key("acme"))
        .await;
    redis.resume(); // (a no-op when the second push resumed it)
    let pushed = pushed.expect("pushed again with the id dq named");
    assert_eq!(pushed_again.load(Ordering::SeqCst), 1, "the second push carried an id");
    let job = direct.get(&pushed.id).await.unwrap();
    assert_eq!((job.body, job.flow_key.as_deref()), (json!({"n": 1}), Some("acme")));
    assert_eq!(
        direct.stats().await.unwrap().topics["keyed"].ready,
        1,
        "exactly one job"
    );

    // A batch: each entry whose outcome dq could not learn is pushed again alone, with its id.
    redis.pause();
    let results = c
        .push_many(&[
            PushRequest::new("keyed", json!({"n": 2})).flow_key("acme"),
            PushRequest::new("keyed", json!({"n": 3})).flow_key("globex"),
        ])
        .await;
    redis.resume();
    let results = results.expect("the batch answers");
    assert_eq!(
        pushed_again.load(Ordering::SeqCst),
        3,
        "each entry pushed again with its id"
    );
    for (r, (n, key)) in results.iter().zip([(2, "acme"), (3, "globex")]) {
        let job = direct.get(&r.as_ref().expect("pushed again").id).await.unwrap();
        assert_eq!((job.body, job.flow_key.as_deref()), (json!({"n": n}), Some(key)));
    }
    assert_eq!(direct.stats().await.unwrap().topics["keyed"].ready, 3, "one job each");
}

#[tokio::test]
async fn a_token_is_sent_and_its_absence_is_a_401() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut vars = env(&[&redis], port);
    vars.push(("DQ__AUTH__ADMIN_TOKEN", "let-me-in".into()));
    let server = start_on("dq-server", port, vars).await;
    let without = client(&server);
    let e = without.stats().await.unwrap_err();
    assert_eq!(
        e.api().map(|e| (e.status, e.code.as_str())),
        Some((401, "unauthorized"))
    );
    let with = Client::builder(&format!("http://127.0.0.1:{port}"))
        .token(Some("let-me-in".into()))
        .build()
        .unwrap();
    with.stats().await.unwrap();
}

/// A proxy in front of dq-server that forwards every request but, while `drop_answers` is above 0,
/// swallows the answer and closes the connection: the request ran, the client cannot know it.
async fn lossy_proxy(upstream: u16, drop_answers: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut down, _) = listener.accept().await.unwrap();
            let drop_answers = drop_answers.clone();
            tokio::spawn(async move {
                let mut up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match down.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    up.write_all(&buf[..n]).await.unwrap();
                    let m = match up.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(m) => m,
                    };
                    if drop_answers.load(Ordering::SeqCst) > 0 {
                        drop_answers.fetch_sub(1, Ordering::SeqCst);
                        return; // the answer is lost with the connection
                    }
                    if down.write_all(&buf[..m]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_lost_answer_neither_duplicates_a_push_nor_fails_an_ack() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let drop_answers = Arc::new(AtomicUsize::new(0));
    let port = lossy_proxy(server.port, drop_answers.clone()).await;
    let c = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let direct = client(&server);

    // The push's answer is lost: the client pushes again with the same id, meets its first push (409),
    // and answers with it. One job, not two.
    drop_answers.store(1, Ordering::SeqCst);
    let pushed = c.push(&PushRequest::new("once", json!({"k": 1}))).await.unwrap();
    assert_eq!(drop_answers.load(Ordering::SeqCst), 0, "the first answer was dropped");
    assert_eq!(direct.get(&pushed.id).await.unwrap().body, json!({"k": 1}));
    assert_eq!(direct.stats().await.unwrap().topics["once"].ready, 1, "exactly one job");

    // The same in a batch.
    drop_answers.store(1, Ordering::SeqCst);
    let results = c
        .push_many(&[PushRequest::new("once", json!(2)), PushRequest::new("once", json!(3))])
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(direct.stats().await.unwrap().topics["once"].ready, 3);

    // An ack whose answer is lost: the retry finds the receipt stale, looks the job up, sees it done.
    let job = direct.reserve(&ReserveRequest::new(["once"])).await.unwrap().remove(0);
    drop_answers.store(1, Ordering::SeqCst);
    c.ack(&job.id, &job.receipt).await.unwrap();
    assert_eq!(
        drop_answers.load(Ordering::SeqCst),
        0,
        "the ack's first answer was dropped"
    );
    assert_eq!(direct.get(&job.id).await.unwrap().state, "done");

    // Without retries, the lost answer is an unknown outcome, said as such.
    let once = Client::builder(&format!("http://127.0.0.1:{port}"))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    drop_answers.store(1, Ordering::SeqCst);
    let e = once.push(&PushRequest::new("once", json!(4))).await.unwrap_err();
    assert!(matches!(e, dq_client::Error::Unknown(_)), "{e:?}");
}

/// A fan-out topic's push answers its children; an ack that pushes answers the jobs it stored, and
/// after a lost answer its retry answers the same jobs from the look-up: none is stored twice.
#[tokio::test]
async fn a_fan_out_and_an_ack_that_pushes_even_when_its_answer_is_lost() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let drop_answers = Arc::new(AtomicUsize::new(0));
    let port = lossy_proxy(server.port, drop_answers.clone()).await;
    let c = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let fanout = TopicConfig {
        fanout: vec!["mail".into(), "ledger".into()],
        ..Default::default()
    };
    c.put_topic("paid", &fanout).await.unwrap();
    let pushed = c
        .push(&PushRequest::new("paid", json!({"order": 1})).id("o-1"))
        .await
        .unwrap();
    let children: Vec<&str> = pushed.children.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(children, ["o-1~mail", "o-1~ledger"]);

    let job = c.reserve(&ReserveRequest::new(["mail"])).await.unwrap().remove(0);
    drop_answers.store(1, Ordering::SeqCst);
    let next = [
        PushRequest::new("receipt", json!({"order": 1})).delay_ms(600_000),
        PushRequest::new("review", json!({"order": 1})),
    ];
    let pushed = c.ack_pushing(&job.id, &job.receipt, &next).await.unwrap();
    assert_eq!(drop_answers.load(Ordering::SeqCst), 0, "the ack's answer was dropped");
    let ids: Vec<&str> = pushed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["o-1~mail~0", "o-1~mail~1"]);
    let stats = c.stats().await.unwrap();
    assert_eq!((stats.topics["receipt"].delayed, stats.topics["review"].ready), (1, 1));
    let review = c.get("o-1~mail~1").await.unwrap();
    assert_eq!(review.parent.as_deref(), Some("o-1~mail"));
}

#[tokio::test]
async fn the_worker_acks_successes_nacks_failures_touches_long_jobs_and_stops() {
    let redis = RedisServer::start();
    let server = start("dq-server", &[&redis]).await;
    let _timer = start("dq-timer", &[&redis]).await;
    let c = client(&server);
    let jobs: Vec<PushRequest> = (0..200)
        .map(|i| PushRequest::new("work", json!({"n": i})).id(format!("w-{i}")))
        .collect();
    for r in c.push_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    // One job runs longer than its TTR (2 s): touched every 250 ms (a wide margin on a loaded machine), it
    // keeps its reservation.
    c.push(&PushRequest::new("work", json!({"n": "slow"})).id("slow").ttr_ms(2000))
        .await
        .unwrap();

    let failed_once = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let stop = CancellationToken::new();
    let worker = Worker::new(c.clone(), ["work"])
        .batch(10)
        .loops(4)
        .wait_ms(1000)
        .touch_every(Duration::from_millis(250));
    let handler = {
        let failed_once = failed_once.clone();
        move |job: dq_client::Reservation| {
            let failed_once = failed_once.clone();
            async move {
                if job.body["n"] == "slow" {
                    tokio::time::sleep(Duration::from_millis(4500)).await;
                    return Ok(());
                }
                // Every tenth job fails its first attempt.
                let n = job.body["n"].as_u64().unwrap();
                if n.is_multiple_of(10) && failed_once.lock().unwrap().insert(n) {
                    return Err(Failed::new("first try fails").retry_after_ms(0));
                }
                Ok(())
            }
        }
    };
    let running = tokio::spawn(worker.run(handler, stop.clone()));
    let all_done = Arc::new(AtomicBool::new(false));
    eventually(Duration::from_secs(60), "every job done", || {
        let c = c.clone();
        let all_done = all_done.clone();
        async move {
            let stats = c.stats().await.unwrap();
            // A topic without a registration leaves the stats with its last job.
            let counts = stats.topics.get("work").copied().unwrap_or_default();
            let done = counts.ready + counts.reserved + counts.delayed + counts.dead == 0;
            all_done.store(done, Ordering::SeqCst);
            done
        }
    })
    .await;
    stop.cancel();
    let stats = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the worker stops")
        .unwrap();
    assert_eq!(stats.acked.load(Ordering::SeqCst), 201);
    assert_eq!(stats.nacked.load(Ordering::SeqCst), 20);
    assert_eq!(
        stats.unsettled.load(Ordering::SeqCst),
        0,
        "the slow job kept its reservation"
    );
    for i in [0u64, 10, 199] {
        let job = c.get(&format!("w-{i}")).await.unwrap();
        assert_eq!(job.state, "done");
        assert_eq!(job.attempts, if i.is_multiple_of(10) { 2 } else { 1 });
    }
    let slow = c.get("slow").await.unwrap();
    assert_eq!((slow.state.as_str(), slow.attempts), ("done", 1));
}
