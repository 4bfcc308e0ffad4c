//! Dead-job hooks (`callback.on_dead_url`) sent by dq-checker in-process, against a real Redis and a real
//! HTTP receiver: one signed POST per death, by either way a job dies (nack, TTR expiry), retried while
//! the receiver fails, never sent where the egress policy refuses.

use std::time::Duration;

use dq_core::{PushRequest, Queue, Settings, TopicConfig};
use dq_harness::{HookSink, RedisServer, dead_hooks_waiting, eventually, hooks_waiting};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "hook-s3cret";

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.metrics.listen = Some("127.0.0.1:0".into());
    s.limits.min_ttr_ms = 10;
    s.checker.interval_ms = 100;
    s.checker.dead_hook_backoff_ms = vec![100, 200, 300];
    s
}

fn start(s: &Settings) -> (CancellationToken, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let stop = CancellationToken::new();
    (stop.clone(), tokio::spawn(dq_checker::run(s.clone(), stop)))
}

/// Registers `topic` with a callback nobody delivers (no dq-consumer runs), `secret`, and `on_dead_url`.
async fn register(q: &Queue, topic: &str, on_dead_url: &str) {
    let config: TopicConfig = serde_json::from_value(serde_json::json!({
        "callback": {"url": "http://127.0.0.1:9/unused", "secret": SECRET, "on_dead_url": on_dead_url,
                     "timeout_ms": 2000}
    }))
    .unwrap();
    q.admin().put_topic(topic, &config).await.unwrap();
}

async fn push(q: &Queue, json: serde_json::Value) -> String {
    let req: PushRequest = serde_json::from_value(json).unwrap();
    q.producer().push(q.producer().validate(req).unwrap()).await.unwrap().id
}

fn waiting(redis: &RedisServer) -> usize {
    dead_hooks_waiting(redis).len()
}

/// Registers `topic` with a callback nobody delivers, `secret`, and `on_success_url` (carrying the
/// answer's `X-Request-Id` header).
async fn register_success(q: &Queue, topic: &str, on_success_url: &str) {
    let config: TopicConfig = serde_json::from_value(serde_json::json!({
        "callback": {"url": "http://127.0.0.1:9/unused", "secret": SECRET, "on_success_url": on_success_url,
                     "on_success_headers": ["X-Request-Id"]}
    }))
    .unwrap();
    q.admin().put_topic(topic, &config).await.unwrap();
}

/// A job of `topic` pushed, reserved and acked with the callback's `answer`, as dq-consumer acks a
/// delivery; its id.
async fn delivered(q: &Queue, topic: &str, n: u32, answer: &[u8]) -> String {
    let id = push(q, serde_json::json!({"topic": topic, "body": {"n": n}})).await;
    let r = q.reservations().reserve(&[topic.into()], 1).await.unwrap().remove(0);
    let success = dq_core::reservations::Success {
        hook_answer: Some(answer.to_vec()),
        ..Default::default()
    };
    q.reservations().ack_with(&r.id, &r.receipt, &success).await.unwrap();
    id
}

/// The answers stored for success hooks.
fn answer_keys(redis: &RedisServer) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("dq:{*}:answer:*")
        .query(&mut redis.conn())
        .unwrap()
}

/// A job nacked to death gives one POST of the job as looked up (dead, with its last error), signed
/// with the topic's secret and naming the job and the death; the receiver's two 500s are tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacked_job_hooks_once_signed_and_retried_past_failures() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(2).await;
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    register(&q, "orders", &sink.url).await;
    let id = push(
        &q,
        serde_json::json!({"topic": "orders", "body": {"n": 1}, "max_attempts": 1}),
    )
    .await;
    let r = q.reservations().reserve(&["orders".into()], 1).await.unwrap().remove(0);
    q.reservations()
        .nack(&r.id, &r.receipt, None, Some("remote said 500"), None)
        .await
        .unwrap();

    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "the hook accepted", || async {
        !sink.accepted().is_empty()
    })
    .await;
    eventually(Duration::from_secs(10), "the hook forgotten", || async {
        waiting(&redis) == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = sink.received();
    assert_eq!(received.len(), 3, "two 500s, then the one accepted: {received:?}");
    let hook = &sink.accepted()[0];
    assert!(hook.signed_with(SECRET), "{hook:?}");
    assert!(!hook.signed_with("another"), "{hook:?}");
    let job = hook.json();
    assert_eq!(job["id"], id.as_str());
    assert_eq!(job["topic"], "orders");
    assert_eq!(job["state"], "dead");
    assert_eq!(job["body"], serde_json::json!({"n": 1}));
    assert_eq!(job["attempts"], 1);
    assert_eq!(job["last_error"], "remote said 500");
    // Its attempts come with it, newest first.
    assert_eq!(job["history"].as_array().map(Vec::len), Some(1), "{job}");
    assert_eq!(job["history"][0]["outcome"], "nacked");
    assert_eq!(job["history"][0]["error"], "remote said 500");
    assert_eq!(hook.header("x-dq-job-id"), id);
    assert_eq!(hook.header("x-dq-event"), "dead");
    assert!(
        hook.header("idempotency-key").starts_with(&format!("{id}:dead:")),
        "{hook:?}"
    );
    assert!(
        received
            .iter()
            .all(|r| r.header("idempotency-key") == hook.header("idempotency-key")),
        "every try of one death has the same key"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A job whose reservation expired (TTR) at its last attempt hooks too; a topic without an
/// `on_dead_url` does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_expired_at_its_last_attempt_hooks_and_topics_without_a_hook_do_not() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(0).await;
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    register(&q, "slow", &sink.url).await;
    let plain: TopicConfig =
        serde_json::from_value(serde_json::json!({"callback": {"url": "http://127.0.0.1:9/unused"}})).unwrap();
    q.admin().put_topic("plain", &plain).await.unwrap();
    let id = push(
        &q,
        serde_json::json!({"topic": "slow", "body": 2, "max_attempts": 1, "ttr_ms": 10}),
    )
    .await;
    let other = push(
        &q,
        serde_json::json!({"topic": "plain", "body": 3, "max_attempts": 1, "ttr_ms": 10}),
    )
    .await;
    assert_eq!(
        q.reservations()
            .reserve(&["slow".into(), "plain".into()], 2)
            .await
            .unwrap()
            .len(),
        2
    );
    // No timer runs here: expire as the timer holding each partition would.
    eventually(Duration::from_secs(10), "both reservations expired", || async {
        for p in q.partitions().all() {
            q.timer().expire(p, 100).await.unwrap();
        }
        let dead = |id: String| {
            let q = q.clone();
            async move { q.producer().get(&id).await.unwrap().state == dq_core::State::Dead }
        };
        dead(id.clone()).await && dead(other.clone()).await
    })
    .await;

    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "the expired job's hook", || async {
        !sink.accepted().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = sink.received();
    assert_eq!(received.len(), 1, "only the topic with a hook: {received:?}");
    let job = received[0].json();
    assert_eq!(job["id"], id.as_str());
    assert_eq!(job["state"], "dead");
    assert_eq!(job["last_error"], "reservation expired (ttr)");
    assert_eq!(job["history"][0]["outcome"], "expired", "{job}");
    assert!(received[0].signed_with(SECRET));
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A hook whose name resolves only to addresses the egress policy refuses connects nowhere: its tries
/// fail, and it is given up after the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_to_a_refused_address_connects_nowhere_and_is_given_up() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(0).await;
    let mut s = settings(&redis);
    s.egress.deny = vec!["127.0.0.0/8".into(), "::1".into()];
    // Two tries, the wait between them long enough to see the first one counted.
    s.checker.dead_hook_backoff_ms = vec![2000];
    let q = Queue::connect(&s).await.unwrap();
    // A name passes registration; what it resolves to is checked at connect.
    let url = sink.url.replace("127.0.0.1", "localhost");
    register(&q, "walled", &url).await;
    push(&q, serde_json::json!({"topic": "walled", "body": 4, "max_attempts": 1})).await;
    let r = q.reservations().reserve(&["walled".into()], 1).await.unwrap().remove(0);
    q.reservations()
        .nack(&r.id, &r.receipt, None, None, None)
        .await
        .unwrap();

    let (stop, task) = start(&s);
    eventually(Duration::from_secs(10), "the first try failed", || async {
        dead_hooks_waiting(&redis)
            .iter()
            .any(|e| e.starts_with("1 ") && e.ends_with(&format!(" walled {}", r.id)))
    })
    .await;
    eventually(Duration::from_secs(30), "the hook given up", || async {
        waiting(&redis) == 0
    })
    .await;
    assert!(sink.received().is_empty(), "{:?}", sink.received());
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A checker that took a death's event (queuing its hook) and then claimed the hook and died before
/// sending it: the event handed out again does not queue a second hook, and the next checker sends the
/// hook once the claim ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_taken_and_claimed_by_a_checker_that_died_is_sent_once_by_the_next() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(0).await;
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    register(&q, "orders", &sink.url).await;
    let id = push(&q, serde_json::json!({"topic": "orders", "body": 5, "max_attempts": 1})).await;
    let r = q.reservations().reserve(&["orders".into()], 1).await.unwrap().remove(0);
    q.reservations()
        .nack(&r.id, &r.receipt, None, None, None)
        .await
        .unwrap();

    // What the checker that died did: took the event (twice: its alert never went out), then claimed
    // the hook for a moment.
    let p = q.partitions().of_id(&id);
    let hooked = ["orders".to_string()];
    assert_eq!(q.checker().take_events(p, 1000, &hooked).await.unwrap().len(), 1);
    assert_eq!(
        q.checker().take_events(p, 1000, &hooked).await.unwrap().len(),
        1,
        "pending, handed out again"
    );
    assert_eq!(
        waiting(&redis),
        1,
        "one hook per death: {:?}",
        dead_hooks_waiting(&redis)
    );
    let (claimed, held) = q
        .checker()
        .take_hooks(dq_core::checker::HookKind::Dead, p, 10, 1500)
        .await
        .unwrap();
    assert_eq!((claimed.len(), held), (1, 1));
    assert_eq!((claimed[0].tries, claimed[0].id.as_str()), (0, id.as_str()));
    assert_eq!(
        q.checker()
            .take_hooks(dq_core::checker::HookKind::Dead, p, 10, 1500)
            .await
            .unwrap(),
        (Vec::new(), 1),
        "claimed"
    );

    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "the hook sent after its claim", || async {
        !sink.received().is_empty()
    })
    .await;
    eventually(Duration::from_secs(10), "the hook forgotten", || async {
        waiting(&redis) == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.received().len(), 1, "{:?}", sink.received());
    assert_eq!(sink.received()[0].json()["id"], id.as_str());
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// While a secret is being rotated out (`callback.previous_secret`), a hook is signed with both, as a
/// delivery is: a receiver holding either key accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_key_rotation_hooks_are_signed_with_both_secrets() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(0).await;
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let config: TopicConfig = serde_json::from_value(serde_json::json!({
        "callback": {"url": "http://127.0.0.1:9/unused", "secret": "new-key", "previous_secret": "old-key",
                     "on_dead_url": sink.url, "timeout_ms": 2000}
    }))
    .unwrap();
    q.admin().put_topic("rotating", &config).await.unwrap();
    push(
        &q,
        serde_json::json!({"topic": "rotating", "body": 1, "max_attempts": 1}),
    )
    .await;
    let r = q
        .reservations()
        .reserve(&["rotating".into()], 1)
        .await
        .unwrap()
        .remove(0);
    q.reservations()
        .nack(&r.id, &r.receipt, None, Some("boom"), None)
        .await
        .unwrap();
    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "the hook accepted", || async {
        !sink.accepted().is_empty()
    })
    .await;
    let hook = &sink.accepted()[0];
    assert!(hook.signed_with("new-key"), "{hook:?}");
    assert!(hook.signed_with("old-key"), "{hook:?}");
    assert!(!hook.signed_with("another"), "{hook:?}");
    assert_eq!(hook.header("x-dq-signature").matches("v1=").count(), 2);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A delivered job of a topic with an `on_success_url` (its ack carrying the callback's answer, as
/// dq-consumer sends it) gives one POST of the job with the answer, signed, retried past failures; the
/// answer goes with the hook. A topic whose URL was removed drops its hooks and their answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_job_hooks_its_success_with_the_answer() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(1).await;
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    register_success(&q, "paid", &sink.url).await;
    let answer = br#"{"status":201,"headers":{"x-request-id":"r-9"},"body":"{\"charged\":true}"}"#;
    let acked = [
        delivered(&q, "paid", 0, answer).await,
        delivered(&q, "paid", 1, answer).await,
    ];
    assert_eq!(hooks_waiting(&redis, "success_hooks").len(), 2);

    let (stop, task) = start(&s);
    eventually(Duration::from_secs(30), "both hooks accepted", || async {
        sink.accepted().len() == 2
    })
    .await;
    eventually(Duration::from_secs(10), "the hooks forgotten", || async {
        hooks_waiting(&redis, "success_hooks").is_empty()
    })
    .await;
    let hook = &sink.accepted()[0];
    assert!(hook.signed_with(SECRET), "{hook:?}");
    assert_eq!(hook.header("x-dq-event"), "success");
    let job = hook.json();
    let id = job["id"].as_str().unwrap().to_string();
    assert!(acked.contains(&id));
    assert_eq!(job["state"], "done");
    assert_eq!(
        job["answer"],
        serde_json::json!({"status": 201, "headers": {"x-request-id": "r-9"}, "body": "{\"charged\":true}"})
    );
    assert!(hook.header("idempotency-key").starts_with(&format!("{id}:success:")));
    // The answers went with their hooks.
    let answers = answer_keys(&redis);
    assert!(answers.is_empty(), "{answers:?}");

    // No URL any more: a queued hook is dropped, with its answer.
    register_success(&q, "paid", &sink.url).await;
    let plain: TopicConfig =
        serde_json::from_value(serde_json::json!({"callback": {"url": "http://127.0.0.1:9/unused"}})).unwrap();
    q.admin().put_topic("paid", &plain).await.unwrap();
    delivered(&q, "paid", 3, answer).await;
    eventually(Duration::from_secs(10), "the hook dropped", || async {
        hooks_waiting(&redis, "success_hooks").is_empty()
    })
    .await;
    let answers = answer_keys(&redis);
    assert!(answers.is_empty(), "{answers:?}");
    assert_eq!(sink.accepted().len(), 2);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A success hook whose answer is gone (a checker that died between deleting a sent hook's answer and
/// the hook itself leaves it so) is dropped without a POST: the answer goes first, so none outlives its
/// hook, and the hook left behind was sent already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_hook_whose_answer_is_gone_is_dropped_unsent() {
    let redis = RedisServer::start();
    let sink = HookSink::start_failing(0).await;
    let mut s = settings(&redis);
    // A failed try would keep the hook a minute: only a drop forgets it within the wait below.
    s.checker.dead_hook_backoff_ms = vec![60_000];
    let q = Queue::connect(&s).await.unwrap();
    register_success(&q, "paid", &sink.url).await;
    delivered(&q, "paid", 1, br#"{"status":200,"headers":{},"body":"ok"}"#).await;
    assert_eq!(hooks_waiting(&redis, "success_hooks").len(), 1);
    let answers = answer_keys(&redis);
    assert_eq!(answers.len(), 1, "{answers:?}");
    let _: i64 = redis::cmd("DEL").arg(&answers[0]).query(&mut redis.conn()).unwrap();

    let (stop, task) = start(&s);
    eventually(Duration::from_secs(20), "the hook dropped at its first try", || async {
        hooks_waiting(&redis, "success_hooks").is_empty()
    })
    .await;
    assert!(sink.received().is_empty(), "{:?}", sink.received());
    stop.cancel();
    task.await.unwrap().unwrap();
}
