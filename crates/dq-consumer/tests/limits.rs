//! A topic's delivery limits hold across several dq-consumers (three in this process, each with its own
//! connections and its own name in the limits), against a real Redis and a real local callback server;
//! so do its limits on each flow key, and a `Retry-After` for a job with a flow key pauses that key only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use dq_core::topic::TopicRules;
use dq_core::{PushRequest, Queue, Settings, TopicConfig};
use dq_harness::{RedisServer, eventually};
use tokio_util::sync::CancellationToken;

/// What the callback server saw.
#[derive(Default)]
struct Seen {
    /// When each request arrived, and its job id.
    arrivals: Mutex<Vec<(Instant, String)>>,
    /// Requests being answered now.
    in_flight: AtomicUsize,
    /// The most ever answered at once.
    most: AtomicUsize,
    /// Per flow key (the job body's `k`, when it has one): requests being answered now, and the most
    /// ever at once.
    keys: Mutex<std::collections::HashMap<String, (usize, usize)>>,
    /// When each request of a job with a flow key arrived, and its key.
    key_arrivals: Mutex<Vec<(Instant, String)>>,
}

/// A callback server: each request is answered after `delay` with what `answer(n)` says (the n-th
/// request): a status and an optional `Retry-After`.
async fn sink(delay: Duration, answer: fn(usize) -> (u16, Option<&'static str>)) -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let seen = state.clone();
            async move {
                let job = serde_json::from_slice::<serde_json::Value>(&body).unwrap();
                let id = job["id"].as_str().unwrap().to_string();
                let key = job["body"]["k"].as_str().map(str::to_string);
                if let Some(k) = &key {
                    seen.key_arrivals.lock().unwrap().push((Instant::now(), k.clone()));
                    let mut keys = seen.keys.lock().unwrap();
                    let e = keys.entry(k.clone()).or_default();
                    e.0 += 1;
                    e.1 = e.1.max(e.0);
                }
                let n = {
                    let mut a = seen.arrivals.lock().unwrap();
                    a.push((Instant::now(), id));
                    a.len() - 1
                };
                let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                seen.in_flight.fetch_sub(1, Ordering::SeqCst);
                if let Some(k) = &key {
                    seen.keys.lock().unwrap().get_mut(k).unwrap().0 -= 1;
                }
                let (status, retry_after) = answer(n);
                let mut headers = HeaderMap::new();
                if let Some(r) = retry_after {
                    headers.insert("retry-after", HeaderValue::from_static(r));
                }
                (StatusCode::from_u16(status).unwrap(), headers, r#"{"ok":true}"#)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn ok(_: usize) -> (u16, Option<&'static str>) {
    (200, None)
}

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(8);
    s.metrics.listen = Some("127.0.0.1:0".into());
    s.topics.refresh_ms = 100;
    s
}

/// `n` dq-consumers and one dq-timer; stopped (drained) on drop of the token.
struct Consumers {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Consumers {
    fn start(s: &Settings, n: usize) -> Self {
        let stop = CancellationToken::new();
        let mut tasks: Vec<_> = (0..n)
            .map(|_| tokio::spawn(dq_consumer::run(s.clone(), stop.clone())))
            .collect();
        tasks.push(tokio::spawn(dq_timer::run(s.clone(), stop.clone())));
        Consumers { stop, tasks }
    }

    async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("drains")
                .unwrap()
                .unwrap();
        }
    }
}

async fn register(q: &Queue, topic: &str, json: serde_json::Value) {
    let config: TopicConfig = serde_json::from_value(json).unwrap();
    config.validate(&q.limits(), &q.egress().await).unwrap();
    q.admin().put_topic(topic, &config).await.unwrap();
}

async fn push_ready(q: &Queue, topic: &str, n: usize) {
    for i in 0..n {
        let req: PushRequest = serde_json::from_value(serde_json::json!({"topic": topic, "body": i})).unwrap();
        q.producer().push(q.producer().validate(req).unwrap()).await.unwrap();
    }
}

/// Every job delivered exactly once (the sink answers 2xx).
fn each_once(seen: &Seen, n: usize) {
    let mut ids: Vec<String> = seen.arrivals.lock().unwrap().iter().map(|(_, id)| id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "every job delivered");
    assert_eq!(seen.arrivals.lock().unwrap().len(), n, "none twice");
}

#[tokio::test]
async fn concurrency_counts_the_deliveries_of_every_consumer() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let (url, seen) = sink(Duration::from_millis(150), ok).await;
    register(&q, "c", serde_json::json!({"callback": {"url": url, "concurrency": 4}})).await;
    push_ready(&q, "c", 60).await;
    let consumers = Consumers::start(&s, 3);
    eventually(Duration::from_secs(60), "60 deliveries", || async {
        seen.arrivals.lock().unwrap().len() >= 60
    })
    .await;
    consumers.stop().await;
    each_once(&seen, 60);
    let most = seen.most.load(Ordering::SeqCst);
    assert!(most <= 4, "at most 4 in flight over 3 consumers, saw {most}");
    assert!(most >= 2, "the consumers did deliver side by side ({most})");
    let left: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("dq:{topic:c}:limit")
        .query(&mut redis.conn())
        .unwrap();
    assert!(
        left.keys().all(|f| !f.starts_with("h:")),
        "drained consumers give their slots back: {left:?}"
    );
}

#[tokio::test]
async fn the_rate_limit_holds_over_every_consumer() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let (url, seen) = sink(Duration::ZERO, ok).await;
    let (rate, burst) = (50.0, 10u32);
    register(
        &q,
        "r",
        serde_json::json!({"callback": {"url": url, "concurrency": 64, "rate_per_s": rate, "burst": burst}}),
    )
    .await;
    let burst = f64::from(burst);
    push_ready(&q, "r", 150).await;
    let consumers = Consumers::start(&s, 3);
    eventually(Duration::from_secs(60), "150 deliveries", || async {
        seen.arrivals.lock().unwrap().len() >= 150
    })
    .await;
    consumers.stop().await;
    each_once(&seen, 150);
    // Every stretch of time sees at most rate × its length + burst arrivals. A token is taken in Redis a
    // moment before its request arrives, and that moment varies: 250 ms of it is allowed for.
    let times: Vec<Instant> = seen.arrivals.lock().unwrap().iter().map(|(t, _)| *t).collect();
    for (i, from) in times.iter().enumerate() {
        for (j, to) in times.iter().enumerate().skip(i) {
            let window = to.duration_since(*from).as_secs_f64();
            let count = (j - i + 1) as f64;
            assert!(
                count <= rate * (window + 0.25) + burst,
                "{count} arrivals within {window:.3} s at {rate}/s with a burst of {burst}"
            );
        }
    }
}

#[tokio::test]
async fn a_retry_after_answer_pauses_the_topic() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    // The first request is told to come back in 2 s; the rest succeed.
    let (url, seen) = sink(Duration::ZERO, |n| if n == 0 { (429, Some("2")) } else { (200, None) }).await;
    register(
        &q,
        "p",
        serde_json::json!({"callback": {"url": url, "concurrency": 1},
                           "retry": {"backoff_ms": [100]}}),
    )
    .await;
    push_ready(&q, "p", 3).await;
    let consumers = Consumers::start(&s, 1);
    eventually(Duration::from_secs(60), "the 3 jobs, one of them twice", || async {
        seen.arrivals.lock().unwrap().len() >= 4
    })
    .await;
    consumers.stop().await;
    let arrivals = seen.arrivals.lock().unwrap().clone();
    let waited = arrivals[1].0.duration_since(arrivals[0].0);
    assert!(
        waited >= Duration::from_millis(1900),
        "nothing is delivered within the 2 s asked for (the next came after {waited:?})"
    );
    let paused: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("dq:{topic:p}:limit")
        .query(&mut redis.conn())
        .unwrap();
    assert!(
        paused.contains_key("until"),
        "the pause is kept for the other consumers: {paused:?}"
    );
}

async fn push_keyed(q: &Queue, topic: &str, key: &str, n: usize) {
    for i in 0..n {
        let req: PushRequest =
            serde_json::from_value(serde_json::json!({"topic": topic, "body": {"k": key, "i": i}, "flow_key": key}))
                .unwrap();
        q.producer().push(q.producer().validate(req).unwrap()).await.unwrap();
    }
}

#[tokio::test]
async fn flow_concurrency_holds_per_key_over_every_consumer() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let (url, seen) = sink(Duration::from_millis(100), ok).await;
    register(
        &q,
        "fc",
        serde_json::json!({"callback": {"url": url, "concurrency": 32}, "flow": {"concurrency": 2}}),
    )
    .await;
    for k in ["a", "b", "c", "d"] {
        push_keyed(&q, "fc", k, 10).await;
    }
    let consumers = Consumers::start(&s, 3);
    eventually(Duration::from_secs(60), "40 deliveries", || async {
        seen.arrivals.lock().unwrap().len() >= 40
    })
    .await;
    consumers.stop().await;
    each_once(&seen, 40);
    let keys = seen.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 4);
    for (k, (_, most)) in &keys {
        assert!(
            *most <= 2,
            "key {k}: {most} in flight at once over 3 consumers, its limit is 2"
        );
    }
    let most = seen.most.load(Ordering::SeqCst);
    assert!(most >= 3, "the keys were delivered side by side ({most})");
}

#[tokio::test]
async fn a_retry_after_answer_for_a_keyed_job_pauses_its_key_only() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    // The first request is told to come back in 2 s; the rest succeed. Its key is paused (both keys have
    // as many jobs, so whichever it is, the check is the same).
    let (url, seen) = sink(Duration::ZERO, |n| if n == 0 { (429, Some("2")) } else { (200, None) }).await;
    register(
        &q,
        "fp",
        serde_json::json!({"callback": {"url": url, "concurrency": 1}, "retry": {"backoff_ms": [100]}}),
    )
    .await;
    push_keyed(&q, "fp", "a", 4).await;
    push_keyed(&q, "fp", "b", 4).await;
    let consumers = Consumers::start(&s, 1);
    eventually(Duration::from_secs(60), "the 8 jobs, one of them twice", || async {
        seen.arrivals.lock().unwrap().len() >= 9
    })
    .await;
    consumers.stop().await;
    let arrivals = seen.key_arrivals.lock().unwrap().clone();
    let of = |key: &str| -> Vec<Instant> { arrivals.iter().filter(|(_, k)| k == key).map(|(t, _)| *t).collect() };
    let paused_key = arrivals[0].1.clone();
    let (slow, other) = (of(&paused_key), of(if paused_key == "a" { "b" } else { "a" }));
    assert_eq!((slow.len(), other.len()), (5, 4), "{arrivals:?}");
    assert!(
        slow[1].duration_since(slow[0]) >= Duration::from_millis(1900),
        "the paused key gets nothing within the 2 s asked for"
    );
    assert!(
        other.iter().all(|t| *t < slow[1]),
        "the other key is delivered during the pause"
    );
    // The topic itself was not paused.
    let paused: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("dq:{topic:fp}:limit")
        .query(&mut redis.conn())
        .unwrap();
    assert!(!paused.contains_key("until"), "{paused:?}");
}
