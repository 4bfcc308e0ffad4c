//! dq-consumer in-process against a real Redis and a real local HTTP callback server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use dq_core::topic::TopicRules;
use dq_core::{PushRequest, Queue, Settings, State as JobState, TopicConfig};
use dq_harness::{RedisServer, eventually};
use tokio_util::sync::CancellationToken;

/// One request the callback server received.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: serde_json::Value,
    raw: Bytes,
}

type Responder = Arc<dyn Fn(usize, &Received) -> (u16, String, u64) + Send + Sync>;

/// A callback server: answers each request with what `respond(n, request)` says (status, body, delay ms).
struct Hook {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Hook {
    async fn start(respond: impl Fn(usize, &Received) -> (u16, String, u64) + Send + Sync + 'static) -> Hook {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let state = (received.clone(), Arc::new(respond) as Responder);
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                |State((received, respond)): State<(Arc<Mutex<Vec<Received>>>, Responder)>,
                 headers: HeaderMap,
                 raw: Bytes| async move {
                    let r = Received {
                        headers,
                        body: serde_json::from_slice(&raw).unwrap(),
                        raw,
                    };
                    let n = {
                        let mut all = received.lock().unwrap();
                        all.push(r.clone());
                        all.len() - 1
                    };
                    let (status, body, delay) = respond(n, &r);
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    // A header that names the answer, as receivers' request ids do.
                    let id = [("x-request-id", format!("r-{n}"))];
                    (StatusCode::from_u16(status).unwrap(), id, body)
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app.with_state(state)).await });
        Hook { url, received }
    }

    fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn ok() -> (u16, String, u64) {
    (200, r#"{"ok":true}"#.into(), 0)
}

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.metrics.listen = Some("127.0.0.1:0".into());
    s.topics.refresh_ms = 100;
    s.shutdown.grace_ms = 5000;
    s
}

/// A consumer, and a timer to bring retried jobs back when their backoff is over.
struct Consumer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    timer_stop: CancellationToken,
    timer: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Consumer {
    fn start(s: &Settings) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(dq_consumer::run(s.clone(), stop.clone()));
        let timer_stop = CancellationToken::new();
        let timer = tokio::spawn(dq_timer::run(s.clone(), timer_stop.clone()));
        Consumer {
            stop,
            task,
            timer_stop,
            timer,
        }
    }

    async fn drain(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("drains")
            .unwrap()
            .unwrap();
        self.timer_stop.cancel();
        self.timer.await.unwrap().unwrap();
    }
}

async fn register(q: &Queue, topic: &str, json: serde_json::Value) {
    let config: TopicConfig = serde_json::from_value(json).unwrap();
    config.validate(&q.limits(), &q.egress().await).unwrap();
    q.admin().put_topic(topic, &config).await.unwrap();
}

/// Pushes as dq-server does: the topic's registration supplies the defaults.
async fn push(q: &Queue, json: serde_json::Value) -> String {
    let req: PushRequest = serde_json::from_value(json).unwrap();
    let topics = q.admin().topics().await.unwrap();
    let config = topics.get(&req.topic);
    q.producer()
        .push(q.producer().validate_for(req, config).unwrap())
        .await
        .unwrap()
        .id
}

async fn state_of(q: &Queue, id: &str) -> JobState {
    q.producer().get(id).await.unwrap().state
}

#[tokio::test]
async fn delivers_once_with_the_envelope_and_headers() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| ok()).await;
    register(
        &q,
        "orders",
        serde_json::json!({"callback": {"url": hook.url, "headers": {"X-Team": "billing"}}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let id = push(&q, serde_json::json!({"topic": "orders", "body": {"order": 42}})).await;
    eventually(Duration::from_secs(20), "the job is done", || async {
        state_of(&q, &id).await == JobState::Done
    })
    .await;
    let got = hook.all();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.body["id"], id.as_str());
    assert_eq!(r.body["topic"], "orders");
    assert_eq!(r.body["body"], serde_json::json!({"order": 42}));
    assert_eq!(r.body["attempt"], 1);
    assert!(r.body["run_at"].as_i64().unwrap() > 0);
    assert_eq!(r.headers["idempotency-key"], id.as_str());
    assert_eq!(r.headers["x-dq-job-id"], id.as_str());
    assert_eq!(r.headers["x-dq-attempt"], "1");
    assert_eq!(r.headers["x-team"], "billing");
    assert!(r.headers.get("x-dq-signature").is_none(), "no secret, no signature");
    consumer.drain().await;
}

/// A traced job's callback carries its `traceparent` and `tracestate` (as stored: this process exports
/// no spans), whether it was reserved from the ready queue or handed over by the promotion of a
/// delayed job; an untraced job's carries none.
#[tokio::test]
async fn a_traced_job_is_delivered_with_its_trace_context() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| ok()).await;
    register(&q, "traced", serde_json::json!({"callback": {"url": hook.url}})).await;
    let consumer = Consumer::start(&s);
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let now = push(
        &q,
        serde_json::json!({"topic": "traced", "body": 1, "traceparent": tp, "tracestate": "congo=t61rcWkgMzE"}),
    )
    .await;
    let later = push(
        &q,
        serde_json::json!({"topic": "traced", "body": 2, "delay_ms": 500, "traceparent": tp}),
    )
    .await;
    let plain = push(&q, serde_json::json!({"topic": "traced", "body": 3})).await;
    eventually(Duration::from_secs(20), "the jobs are done", || async {
        for id in [&now, &later, &plain] {
            if state_of(&q, id).await != JobState::Done {
                return false;
            }
        }
        true
    })
    .await;
    let got = hook.all();
    let of = |id: &str| got.iter().find(|r| r.body["id"] == id).unwrap().headers.clone();
    assert_eq!(of(&now)["traceparent"], tp);
    assert_eq!(of(&now)["tracestate"], "congo=t61rcWkgMzE");
    assert_eq!(of(&later)["traceparent"], tp);
    assert!(of(&later).get("tracestate").is_none());
    assert!(of(&plain).get("traceparent").is_none() && of(&plain).get("tracestate").is_none());
    consumer.drain().await;
}

#[tokio::test]
async fn a_failed_delivery_is_retried_after_its_backoff() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|n, _| if n == 0 { (500, "boom".into(), 0) } else { ok() }).await;
    register(
        &q,
        "t",
        serde_json::json!({"callback": {"url": hook.url}, "retry": {"backoff_ms": [50]}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let id = push(&q, serde_json::json!({"topic": "t", "body": 1})).await;
    eventually(Duration::from_secs(20), "done on the second try", || async {
        state_of(&q, &id).await == JobState::Done
    })
    .await;
    let got = hook.all();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].headers["x-dq-attempt"], "2");
    assert_eq!(q.producer().get(&id).await.unwrap().attempts, 2);
    // Both deliveries are on record, newest first: what the callback answered, and who delivered.
    let (count, history) = q.producer().attempts(&id).await.unwrap();
    assert_eq!(count, 2);
    use dq_core::attempt::Outcome;
    let seen: Vec<_> = history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.status, a.answer.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (2, Outcome::Acked, Some(200), Some(r#"{"ok":true}"#)),
            (1, Outcome::Failed, Some(500), Some("boom")),
        ]
    );
    assert!(
        history[1].error.as_deref().is_some_and(|e| e.starts_with("HTTP 500")),
        "{history:?}"
    );
    let me = format!(":{}", std::process::id());
    for a in &history {
        assert!(a.consumer.as_deref().is_some_and(|c| c.ends_with(&me)), "{a:?}");
    }
    consumer.drain().await;
}

#[tokio::test]
async fn the_retry_condition_decides_on_2xx_answers() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    // Every answer is HTTP 200; `res` is the JSON answer, as in the seed. The first says it failed in
    // its own `code`, the second in `data.status`, the third succeeds.
    let answers = [
        r#"{"code": 500, "data": {"status": 1}}"#,
        r#"{"code": 200, "data": {"status": 2}}"#,
        r#"{"code": 200, "data": {"status": 1}}"#,
    ];
    let hook = Hook::start(move |n, _| (200, answers[n.min(2)].to_string(), 0)).await;
    register(
        &q,
        "cond",
        serde_json::json!({"callback": {"url": hook.url},
            "retry": {"backoff_ms": [20], "condition": "{res.code} != 200 || {res.data.status} == 2"}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let id = push(&q, serde_json::json!({"topic": "cond", "body": 1})).await;
    eventually(Duration::from_secs(20), "done once the answer says so", || async {
        state_of(&q, &id).await == JobState::Done
    })
    .await;
    assert_eq!(hook.count(), 3);
    consumer.drain().await;
}

#[tokio::test]
async fn timeouts_and_empty_answers_fail_and_the_last_attempt_is_dead_with_an_event() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let slow = Hook::start(|_, _| (200, r#"{"ok":true}"#.into(), 2000)).await;
    let empty = Hook::start(|_, _| (200, String::new(), 0)).await;
    register(
        &q,
        "slow",
        serde_json::json!({"callback": {"url": slow.url, "timeout_ms": 100}, "retry": {"max_attempts": 2, "backoff_ms": [20]}}),
    )
    .await;
    register(
        &q,
        "empty",
        serde_json::json!({"callback": {"url": empty.url}, "retry": {"max_attempts": 1}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let a = push(&q, serde_json::json!({"topic": "slow", "body": 1})).await;
    let b = push(&q, serde_json::json!({"topic": "empty", "body": 1})).await;
    eventually(Duration::from_secs(30), "both dead", || async {
        state_of(&q, &a).await == JobState::Dead && state_of(&q, &b).await == JobState::Dead
    })
    .await;
    let ja = q.producer().get(&a).await.unwrap();
    assert_eq!(ja.attempts, 2);
    let (_, history) = q.producer().attempts(&a).await.unwrap();
    assert_eq!(
        history.iter().map(|a| (a.outcome, a.status)).collect::<Vec<_>>(),
        [(dq_core::attempt::Outcome::TimedOut, None); 2]
    );
    assert!(
        ja.last_error.as_deref().unwrap().contains("no answer within 100 ms"),
        "{:?}",
        ja.last_error
    );
    assert!(
        q.producer()
            .get(&b)
            .await
            .unwrap()
            .last_error
            .unwrap()
            .contains("empty body")
    );
    let mut events: Vec<String> = Vec::new();
    for key in redis::cmd("KEYS")
        .arg("dq:{*}:events")
        .query::<Vec<String>>(&mut redis.conn())
        .unwrap()
    {
        let some: Vec<String> = redis::cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query(&mut redis.conn())
            .unwrap();
        events.extend(some);
    }
    for id in [&a, &b] {
        assert!(
            events
                .iter()
                .any(|e| e.contains(id.as_str()) && e.contains(r#""kind":"dead""#)),
            "{events:?}"
        );
    }
    // Requeue brings the dead job back, and a working callback finishes it.
    register(
        &q,
        "empty",
        serde_json::json!({"callback": {"url": slow.url, "timeout_ms": 5000}}),
    )
    .await;
    // Until the consumer has read the new registration, a requeued job may fail (and die) again.
    eventually(Duration::from_secs(20), "the requeued job is done", || async {
        if state_of(&q, &b).await == JobState::Dead {
            assert_eq!(
                q.admin()
                    .requeue_dead("empty", Some(std::slice::from_ref(&b)))
                    .await
                    .unwrap(),
                1
            );
        }
        state_of(&q, &b).await == JobState::Done
    })
    .await;
    consumer.drain().await;
}

#[tokio::test]
async fn deliveries_are_signed_when_the_topic_has_a_secret() {
    use hmac::{Hmac, Mac};
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| ok()).await;
    register(
        &q,
        "signed",
        serde_json::json!({"callback": {"url": hook.url, "secret": "s3cr3t"}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let id = push(&q, serde_json::json!({"topic": "signed", "body": "x"})).await;
    eventually(Duration::from_secs(20), "delivered", || async {
        state_of(&q, &id).await == JobState::Done
    })
    .await;
    let r = &hook.all()[0];
    let header = r.headers["x-dq-signature"].to_str().unwrap().to_string();
    let (t, v1) = header.strip_prefix("t=").unwrap().split_once(",v1=").unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cr3t").unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(&r.raw);
    mac.verify_slice(&hex::decode(v1).unwrap())
        .expect("the signature verifies with the shared secret");
    consumer.drain().await;
}

#[tokio::test]
async fn paused_topics_wait_and_registry_changes_are_picked_up() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let first = Hook::start(|_, _| ok()).await;
    let second = Hook::start(|_, _| ok()).await;
    register(
        &q,
        "p",
        serde_json::json!({"callback": {"url": first.url}, "paused": true}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let a = push(&q, serde_json::json!({"topic": "p", "body": 1})).await;
    // Many registry refreshes (100 ms) pass; a paused topic is not delivered.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(first.count(), 0);
    assert_eq!(state_of(&q, &a).await, JobState::Ready);
    register(&q, "p", serde_json::json!({"callback": {"url": first.url}})).await;
    eventually(Duration::from_secs(20), "resumed and delivered", || async {
        state_of(&q, &a).await == JobState::Done
    })
    .await;
    register(&q, "p", serde_json::json!({"callback": {"url": second.url}})).await;
    // Once the new URL is in use, jobs go there.
    eventually(
        Duration::from_secs(20),
        "the new callback gets the next job",
        || async {
            let id = push(&q, serde_json::json!({"topic": "p", "body": 2})).await;
            eventually(Duration::from_secs(20), "delivered", || async {
                state_of(&q, &id).await == JobState::Done
            })
            .await;
            second.count() > 0
        },
    )
    .await;
    consumer.drain().await;
}

#[tokio::test]
async fn drain_finishes_deliveries_in_flight() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| (200, r#"{"ok":true}"#.into(), 800)).await;
    register(
        &q,
        "d",
        serde_json::json!({"callback": {"url": hook.url, "concurrency": 8}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(push(&q, serde_json::json!({"topic": "d", "body": i})).await);
    }
    eventually(Duration::from_secs(20), "three deliveries in flight", || async {
        hook.count() == 3
    })
    .await;
    consumer.drain().await;
    for id in &ids {
        assert_eq!(
            state_of(&q, id).await,
            JobState::Done,
            "finished within the grace period and acked"
        );
    }
}

/// The drain hands back only the deliveries whose callback has not answered: one that answered within
/// the grace period is acked, one still waiting is released for immediate redelivery.
#[tokio::test]
async fn drain_hands_back_only_what_outlives_the_grace_period() {
    let redis = RedisServer::start();
    let mut s = settings(&redis);
    s.shutdown.grace_ms = 1000;
    let q = Queue::connect(&s).await.unwrap();
    // Job body 1 is answered at once, body 2 after 10 s.
    let hook = Hook::start(|_, r| {
        let slow = r.body["body"] == 2;
        (200, r#"{"ok":true}"#.into(), if slow { 10_000 } else { 0 })
    })
    .await;
    register(
        &q,
        "h",
        serde_json::json!({"callback": {"url": hook.url, "timeout_ms": 30000, "concurrency": 4}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    let quick = push(&q, serde_json::json!({"topic": "h", "body": 1})).await;
    let slow = push(&q, serde_json::json!({"topic": "h", "body": 2})).await;
    eventually(Duration::from_secs(20), "both in flight", || async {
        hook.count() == 2
    })
    .await;
    consumer.drain().await;
    assert_eq!(
        state_of(&q, &quick).await,
        JobState::Done,
        "answered: acked, not handed back"
    );
    let job = q.producer().get(&slow).await.unwrap();
    assert_eq!(job.state, JobState::Ready, "handed back for immediate redelivery");
    assert_eq!(job.attempts, 0, "the unfinished delivery does not count");
}

/// Redis goes down while the callback answers, and comes back on its AOF a second later: the ack finds
/// no Redis, and dq-consumer sends it again with the same receipt until it lands, so the job is done
/// after one delivery instead of being delivered again after its TTR (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_found_no_redis_is_sent_again() {
    let redis = Arc::new(Mutex::new(RedisServer::start_persistent()));
    let mut s = settings(&redis.lock().unwrap());
    s.redis.response_timeout_ms = 300;
    s.redis.connect_timeout_ms = 300;
    let q = Queue::connect(&s).await.unwrap();
    let down = redis.clone();
    let hook = Hook::start(move |_, _| {
        // Redis is down from the moment the callback is called for 1 s; the callback answers in 300 ms.
        down.lock().unwrap().stop();
        let back = down.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1000));
            back.lock().unwrap().restart();
        });
        (200, r#"{"ok":true}"#.into(), 300)
    })
    .await;
    register(&q, "outage", serde_json::json!({"callback": {"url": hook.url}})).await;
    let consumer = Consumer::start(&s);
    let id = push(&q, serde_json::json!({"topic": "outage", "body": 1})).await;
    eventually(Duration::from_secs(15), "the job is done", || async {
        q.producer().get(&id).await.is_ok_and(|j| j.state == JobState::Done)
    })
    .await;
    assert_eq!(hook.count(), 1, "delivered once");
    consumer.drain().await;
}

/// With `secrets.keys`, the secrets and header values are sealed in Redis and delivered in clear; while
/// a previous secret is set, each delivery carries a signature with each secret; after a key rotation
/// (new key first, old kept) the old seals still open, and `rekey` seals them under the new key.
#[tokio::test]
async fn sealed_secrets_are_sent_in_clear_and_both_signing_secrets_sign() {
    use hmac::{Hmac, Mac};
    let redis = RedisServer::start();
    let (old_key, new_key) = (
        "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
        "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=",
    );
    let mut s = settings(&redis);
    s.secrets.keys = vec![old_key.into()];
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| ok()).await;
    register(
        &q,
        "sealed",
        serde_json::json!({"callback": {"url": hook.url, "secret": "new-secret", "previous_secret": "old-secret",
                                        "headers": {"Authorization": "Bearer hook-token"}}}),
    )
    .await;
    let mut conn = redis.conn();
    let stored: String = redis::cmd("HGET")
        .arg("{dq}:topics")
        .arg("sealed")
        .query(&mut conn)
        .unwrap();
    for clear in ["new-secret", "old-secret", "hook-token"] {
        assert!(!stored.contains(clear), "{clear} stored in clear: {stored}");
    }
    assert!(stored.contains("dq:sealed:v1:"), "{stored}");

    // The rotation: the new key first, the old one still there.
    s.secrets.keys = vec![new_key.into(), old_key.into()];
    let q = Queue::connect(&s).await.unwrap();
    let consumer = Consumer::start(&s);
    let id = push(&q, serde_json::json!({"topic": "sealed", "body": "x"})).await;
    eventually(Duration::from_secs(20), "delivered", || async {
        state_of(&q, &id).await == JobState::Done
    })
    .await;
    consumer.drain().await;
    let r = &hook.all()[0];
    assert_eq!(r.headers["authorization"], "Bearer hook-token");
    let header = r.headers["x-dq-signature"].to_str().unwrap().to_string();
    let mut parts = header.split(',');
    let t = parts.next().unwrap().strip_prefix("t=").unwrap().to_string();
    let sigs: Vec<String> = parts.map(|p| p.strip_prefix("v1=").unwrap().to_string()).collect();
    assert_eq!(sigs.len(), 2, "{header}");
    for (secret, sig) in ["new-secret", "old-secret"].iter().zip(&sigs) {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(&r.raw);
        mac.verify_slice(&hex::decode(sig).unwrap())
            .unwrap_or_else(|_| panic!("the signature with {secret} verifies"));
    }

    // Rekey: sealed again under the new key, so the old one can go.
    assert_eq!(q.checker().rekey_topics().await.unwrap(), vec!["sealed".to_string()]);
    assert!(
        q.checker().rekey_topics().await.unwrap().is_empty(),
        "nothing left to rekey"
    );
    s.secrets.keys = vec![new_key.into()];
    let only_new = Queue::connect(&s).await.unwrap();
    let cb = only_new.admin().topics().await.unwrap()["sealed"]
        .callback
        .clone()
        .unwrap();
    assert_eq!(cb.secret.as_deref(), Some("new-secret"));
    assert_eq!(cb.headers["Authorization"], "Bearer hook-token");
    // A process with only the old key cannot open it: the topic is skipped, not delivered unsigned.
    s.secrets.keys = vec![old_key.into()];
    let only_old = Queue::connect(&s).await.unwrap();
    assert!(!only_old.admin().topics().await.unwrap().contains_key("sealed"));
}

/// A worker that waits for delayed jobs has them handed by the timer; once its topic is paused it tells
/// the timers it no longer waits, so a job due then goes to the ready queue and stays there (a job handed
/// meanwhile would be handed back, not delivered) until the topic is resumed.
#[tokio::test]
async fn a_paused_topic_gets_no_handed_delivery_and_resumes() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| ok()).await;
    register(&q, "h", serde_json::json!({"callback": {"url": hook.url}})).await;
    let consumer = Consumer::start(&s);
    let a = push(&q, serde_json::json!({"topic": "h", "body": 1, "delay_ms": 1500})).await;
    eventually(Duration::from_secs(20), "the delayed job is delivered", || async {
        state_of(&q, &a).await == JobState::Done
    })
    .await;
    register(
        &q,
        "h",
        serde_json::json!({"callback": {"url": hook.url}, "paused": true}),
    )
    .await;
    // Many registry refreshes (100 ms) pass: the worker stops.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let b = push(&q, serde_json::json!({"topic": "h", "body": 2, "delay_ms": 200})).await;
    eventually(Duration::from_secs(20), "the job due while paused is ready", || async {
        state_of(&q, &b).await == JobState::Ready
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(hook.count(), 1, "nothing delivered while paused");
    let job = q.producer().get(&b).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Ready, 0));
    register(&q, "h", serde_json::json!({"callback": {"url": hook.url}})).await;
    eventually(Duration::from_secs(20), "resumed and delivered", || async {
        state_of(&q, &b).await == JobState::Done
    })
    .await;
    consumer.drain().await;
}

#[tokio::test]
async fn an_answer_pushes_jobs_with_its_success_where_allow_push_lets_it() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, r| {
        let answer = match r.body["body"]["answer"].as_str().unwrap() {
            "mail" => serde_json::json!({"ok": true, "dq": {"push": [
                {"topic": "mail.receipt", "body": {"order": 7}, "delay_ms": 600_000},
                {"topic": "mail.review", "body": {"order": 7}},
            ]}}),
            "billing" => serde_json::json!({"dq": {"push": [{"topic": "billing", "body": 1}]}}),
            _ => serde_json::json!({"dq": {"push": "not a list"}}),
        };
        (200, answer.to_string(), 0)
    })
    .await;
    let allowing = serde_json::json!({"callback": {"url": hook.url, "allow_push": ["mail.*"]},
                                      "retry": {"max_attempts": 1}});
    register(&q, "paid", allowing.clone()).await;
    register(
        &q,
        "paid.strict",
        serde_json::json!({"callback": {"url": hook.url}, "retry": {"max_attempts": 1}}),
    )
    .await;
    let paid = push(
        &q,
        serde_json::json!({"topic": "paid", "id": "order-7", "body": {"answer": "mail"}}),
    )
    .await;
    let elsewhere = push(&q, serde_json::json!({"topic": "paid", "body": {"answer": "billing"}})).await;
    let malformed = push(&q, serde_json::json!({"topic": "paid", "body": {"answer": "bad"}})).await;
    let strict = push(
        &q,
        serde_json::json!({"topic": "paid.strict", "body": {"answer": "mail"}}),
    )
    .await;
    let consumer = Consumer::start(&s);
    for id in [&paid, &elsewhere, &malformed, &strict] {
        eventually(Duration::from_secs(20), "delivered or dead", || async {
            matches!(state_of(&q, id).await, JobState::Done | JobState::Dead)
        })
        .await;
    }
    consumer.drain().await;

    // Stored with the success, named by the parent's id.
    assert_eq!(state_of(&q, &paid).await, JobState::Done);
    let receipt = q.producer().get("order-7~0").await.unwrap();
    assert_eq!(
        (receipt.topic.as_str(), receipt.state),
        ("mail.receipt", JobState::Delayed)
    );
    assert_eq!(receipt.body.get(), r#"{"order":7}"#);
    assert_eq!(receipt.parent.as_deref(), Some("order-7"));
    assert_eq!(state_of(&q, "order-7~1").await, JobState::Ready);
    let parent = q.producer().get(&paid).await.unwrap();
    assert_eq!(parent.children.len(), 2);

    // Refused: the delivery failed with why, and nothing was pushed.
    for (id, why) in [
        (
            &elsewhere,
            "topic `billing` is not in the topic's `callback.allow_push`",
        ),
        (&malformed, "`dq` is malformed"),
        (&strict, "allows no topic"),
    ] {
        let job = q.producer().get(id).await.unwrap();
        assert_eq!(job.state, JobState::Dead, "{id}");
        let error = job.last_error.unwrap_or_default();
        assert!(error.contains(why), "{id}: {error}");
        assert!(job.children.is_empty());
        assert!(q.producer().get(&format!("{id}~0")).await.is_err());
        let (_, history) = q.producer().attempts(id).await.unwrap();
        assert_eq!(
            history[0].status,
            Some(200),
            "the callback answered; its answer was refused"
        );
    }
}

#[tokio::test]
async fn a_delivery_to_a_topic_with_a_success_hook_keeps_the_answer_for_it() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let hook = Hook::start(|_, _| (200, r#"{"charged":true}"#.into(), 0)).await;
    register(
        &q,
        "paid",
        serde_json::json!({"callback": {"url": hook.url, "on_success_url": "http://hooks.example/ok",
                                        "on_success_headers": ["X-Request-Id", "X-Absent"]}}),
    )
    .await;
    register(&q, "plain", serde_json::json!({"callback": {"url": hook.url}})).await;
    let id = push(&q, serde_json::json!({"topic": "paid", "body": 1})).await;
    let other = push(&q, serde_json::json!({"topic": "plain", "body": 2})).await;
    let consumer = Consumer::start(&s);
    for id in [&id, &other] {
        eventually(Duration::from_secs(20), "delivered", || async {
            state_of(&q, id).await == JobState::Done
        })
        .await;
    }
    consumer.drain().await;
    let p = q.partitions().of_id(&id);
    let answer = q
        .checker()
        .success_answer(p, &id)
        .await
        .unwrap()
        .expect("the answer is kept");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["body"], r#"{"charged":true}"#);
    // Only the header named and present, by its lower-case name (which request was this job's may vary).
    let headers = answer["headers"].as_object().unwrap();
    assert_eq!(headers.keys().collect::<Vec<_>>(), ["x-request-id"], "{answer}");
    assert!(headers["x-request-id"].as_str().unwrap().starts_with("r-"), "{answer}");
    let (hooks, held) = q
        .checker()
        .take_hooks(dq_core::checker::HookKind::Success, p, 10, 1000)
        .await
        .unwrap();
    assert_eq!((hooks.len(), held), (1, 1));
    assert_eq!((hooks[0].id.as_str(), hooks[0].topic.as_str()), (id.as_str(), "paid"));
    // A topic without a success hook keeps nothing.
    let p = q.partitions().of_id(&other);
    assert_eq!(q.checker().success_answer(p, &other).await.unwrap(), None);
}
