//! Timers in-process on a real Redis: promotion with several timers racing, wake-up on an earlier
//! reschedule, TTR expiry, bucket handover on drain.

use std::collections::HashSet;
use std::time::Duration;

use dq_core::{Due, PushRequest, Queue, Settings, State};
use dq_harness::{RedisServer, eventually};
use tokio_util::sync::CancellationToken;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.metrics.listen = Some("127.0.0.1:0".into());
    s.limits.min_ttr_ms = 10;
    s
}

struct Timer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Timer {
    fn start(s: &Settings) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(dq_timer::run(s.clone(), stop.clone()));
        Timer { stop, task }
    }

    async fn drain(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
    }
}

fn push(q: &Queue, json: serde_json::Value) -> dq_core::NewJob {
    q.producer()
        .validate(serde_json::from_value::<PushRequest>(json).unwrap())
        .unwrap()
}

fn leases(redis: &RedisServer) -> Vec<(String, String)> {
    redis::cmd("HGETALL")
        .arg("{dq}:leases")
        .query(&mut redis.conn())
        .unwrap()
}

#[tokio::test]
async fn several_timers_promote_every_job_exactly_once() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let timers: Vec<Timer> = (0..3).map(|_| Timer::start(&s)).collect();
    let n = 5000;
    let jobs: Vec<_> = (0..n)
        .map(|i| {
            push(
                &q,
                serde_json::json!({"topic": "x", "body": i, "delay_ms": 100 + (i % 500)}),
            )
        })
        .collect();
    for r in q.producer().push_many(jobs).await {
        r.unwrap();
    }
    let seen = std::sync::Mutex::new(HashSet::new());
    eventually(Duration::from_secs(60), "every job reserved", || async {
        for r in q.reservations().reserve(&["x".into()], 100).await.unwrap() {
            assert!(seen.lock().unwrap().insert(r.id.clone()), "{} handed out twice", r.id);
            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
        }
        seen.lock().unwrap().len() == n
    })
    .await;
    // Every bucket was held by exactly one of the three.
    let owners: HashSet<String> = leases(&redis)
        .into_iter()
        .map(|(_, v)| v.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(owners.len(), 3, "the partitions are shared: {owners:?}");
    for t in timers {
        t.drain().await;
    }
    assert!(leases(&redis).is_empty(), "draining timers release their partitions");
}

#[tokio::test]
async fn rescheduling_earlier_wakes_a_sleeping_timer() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let p = q
        .producer()
        .push(push(
            &q,
            serde_json::json!({"topic": "w", "body": 1, "delay_ms": 3_600_000}),
        ))
        .await
        .unwrap();
    let timer = Timer::start(&s);
    // Let the timer learn the hour-long due time and go to sleep on it.
    eventually(Duration::from_secs(10), "the timer holds every bucket", || async {
        leases(&redis).len() == 256
    })
    .await;
    q.producer()
        .reschedule(&p.id, Some(Due::Delay(300)), None)
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the job is promoted", || async {
        q.producer().get(&p.id).await.unwrap().state == State::Ready
    })
    .await;
    // A push due sooner than everything else wakes it as well.
    let p2 = q
        .producer()
        .push(push(&q, serde_json::json!({"topic": "w", "body": 2, "delay_ms": 200})))
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the new job is promoted", || async {
        q.producer().get(&p2.id).await.unwrap().state == State::Ready
    })
    .await;
    timer.drain().await;
}

#[tokio::test]
async fn expired_reservations_come_back_and_old_receipts_are_refused() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let timer = Timer::start(&s);
    q.producer()
        .push(push(
            &q,
            serde_json::json!({"id": "ttr", "topic": "e", "body": 1, "ttr_ms": 100}),
        ))
        .await
        .unwrap();
    let first = q.reservations().reserve(&["e".into()], 1).await.unwrap().remove(0);
    eventually(
        Duration::from_secs(20),
        "the reservation expires back to ready",
        || async { q.producer().get("ttr").await.unwrap().state == State::Ready },
    )
    .await;
    assert!(matches!(
        q.reservations().ack("ttr", &first.receipt).await,
        Err(dq_core::Error::StaleReceipt)
    ));
    let second = q.reservations().reserve(&["e".into()], 1).await.unwrap().remove(0);
    assert_eq!(second.attempt, 2);
    q.reservations().ack("ttr", &second.receipt).await.unwrap();
    timer.drain().await;
}

#[tokio::test]
async fn a_new_timer_gets_a_share_and_a_drained_one_hands_over() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let a = Timer::start(&s);
    eventually(Duration::from_secs(10), "the first timer holds all 256", || async {
        leases(&redis).len() == 256
    })
    .await;
    let b = Timer::start(&s);
    eventually(Duration::from_secs(10), "128 and 128", || async {
        let mut per: std::collections::HashMap<String, usize> = Default::default();
        for (_, v) in leases(&redis) {
            *per.entry(v.split(' ').next().unwrap().to_string()).or_default() += 1;
        }
        per.len() == 2 && per.values().all(|n| *n == 128)
    })
    .await;
    a.drain().await;
    eventually(Duration::from_secs(10), "the survivor holds all 256", || async {
        let owners: HashSet<String> = leases(&redis)
            .into_iter()
            .map(|(_, v)| v.split(' ').next().unwrap().to_string())
            .collect();
        leases(&redis).len() == 256 && owners.len() == 1
    })
    .await;
    b.drain().await;
}

/// A heartbeat that changes no holder writes one entry (the timer's own expiry), not one per partition:
/// an idle installation's timers cost Redis (and its AOF and replicas) almost nothing. A timer whose
/// heartbeat lapsed loses its partitions to the next live one.
#[tokio::test]
async fn a_steady_heartbeat_writes_only_its_own_entry_and_a_lapsed_timer_is_taken_over() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let dirty = || -> i64 {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut redis.conn()).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let first = q.timer().balance("timer-a", 300, false).await.unwrap();
    assert_eq!(first.partitions.len(), 256);
    let before = (leases(&redis), dirty());
    let again = q.timer().balance("timer-a", 300, false).await.unwrap();
    assert_eq!(again.partitions, first.partitions);
    assert_eq!(leases(&redis), before.0, "the holders did not change");
    assert_eq!(dirty() - before.1, 1, "one write: the heartbeat's own entry");

    // timer-a stops beating; once its heartbeat lapsed, timer-b takes everything.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = q.timer().balance("timer-b", 300, false).await.unwrap();
    assert_eq!((b.timers, b.partitions.len()), (1, 256));
    assert!(leases(&redis).iter().all(|(_, id)| id == "timer-b"));
}

/// An ACL user whose channel rules allow only the wake-up patterns (what docs/operations.md once
/// showed) may not publish on a consumer's hand-off channels: a promotion that hands off fails as a
/// whole. The timer then promotes without hand-offs, so the job still becomes ready on time.
#[tokio::test]
async fn a_handoff_redis_refuses_does_not_hold_promotion_up() {
    let redis = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("dq")
        .arg("on")
        .arg(">pass")
        .arg("~dq:*")
        .arg("~{dq}:*")
        .arg("resetchannels")
        .arg("&dq:{*}:wake:ready")
        .arg("&dq:{*}:wake:timer")
        .arg("+@all")
        .query(&mut redis.conn())
        .unwrap();
    let mut s = settings(&redis);
    s.redis.urls = vec![format!("redis://dq:pass@127.0.0.1:{}", redis.port())];
    let q = Queue::connect(&s).await.unwrap();
    let timer = Timer::start(&s);
    let waiting = dq_core::reservations::Waiting {
        topic: "t".into(),
        consumer: "C1".into(),
        slots: 5,
        least_ttr_ms: 1000,
    };
    q.producer()
        .push(push(
            &q,
            serde_json::json!({"id": "a", "topic": "t", "body": 1, "delay_ms": 300}),
        ))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the job is promoted to ready", || async {
        // Said again and again, as a waiting worker does, so every promotion call carries it.
        q.reservations().announce_waiting(&waiting).await.unwrap();
        q.producer().get("a").await.unwrap().state == State::Ready
    })
    .await;
    let refused: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut redis.conn()).unwrap();
    assert!(
        format!("{refused:?}").contains("wake:to:C1"),
        "the hand-off was tried, and refused: {refused:?}"
    );
    timer.drain().await;
}
