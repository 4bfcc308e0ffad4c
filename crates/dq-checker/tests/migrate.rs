//! `dq-checker migrate`: a data set in the layout of releases before partitions (made here with the same
//! scripts that release ran, on its key names), in every state, converts and drains; an interrupted
//! conversion finishes when run again; the audit then finds nothing to repair.

use std::collections::HashMap;

use dq_core::store::scripts;
use dq_core::{Queue, Settings, State};
use dq_harness::RedisServer;

/// The old release's key names: `dq:job:<id>`, `dq:delayed:<bucket>`, `dq:ready:<topic>` …
struct Old {
    conn: redis::aio::MultiplexedConnection,
}

impl Old {
    async fn push(&mut self, id: &str, topic: &str, delay_ms: u64, max_attempts: u32) {
        let mut inv = scripts::push::SCRIPT.get(false).prepare_invoke();
        inv.key("dq:counts")
            .key("dq:delayed:3")
            .key(format!("dq:job:{id}"))
            .key(format!("dq:ready:{topic}"))
            .arg("dq:wake:ready")
            .arg("dq:wake:timer")
            .arg(id)
            .arg(topic)
            .arg(format!("{{\"n\":\"{id}\"}}"))
            .arg(delay_ms)
            .arg("")
            .arg(30_000)
            .arg(max_attempts)
            .arg("1")
            .arg("");
        let _: redis::Value = inv.invoke_async(&mut self.conn).await.unwrap();
    }

    /// Reserves one job of `topic`: its id and receipt.
    async fn reserve(&mut self, topic: &str) -> (String, String) {
        let mut inv = scripts::reserve::SCRIPT.get(false).prepare_invoke();
        inv.key("dq:reserved")
            .key("dq:counts")
            .key("dq:announced")
            .key(format!("dq:ready:{topic}"));
        inv.arg("dq")
            .arg(1)
            .arg("00000000000000aa")
            .arg("")
            .arg("dq:wake:timer");
        let out: Vec<redis::Value> = inv.invoke_async(&mut self.conn).await.unwrap();
        let s = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap();
        (s(&out[0]), s(&out[4]))
    }

    async fn nack(&mut self, id: &str, receipt: &str, error: &str) {
        let mut inv = scripts::nack::SCRIPT.get(false).prepare_invoke();
        inv.key(format!("dq:job:{id}"))
            .key("dq:reserved")
            .key("dq:delayed:3")
            .key("dq:counts")
            .key("dq:events")
            .arg("dq")
            .arg(id)
            .arg(receipt)
            .arg(error)
            .arg("")
            .arg("dq:wake:ready")
            .arg("dq:wake:timer")
            .arg(0)
            // No attempt kept (the history's entry), then the backoff list.
            .arg("")
            .arg(600_000);
        let _: redis::Value = inv.invoke_async(&mut self.conn).await.unwrap();
    }

    async fn ack(&mut self, id: &str, receipt: &str) {
        let mut inv = scripts::ack::SCRIPT.get(false).prepare_invoke();
        inv.key("dq:reserved")
            .key("dq:counts")
            .key("dq:bs:ids")
            .key(format!("dq:job:{id}"))
            .arg(3_600_000)
            .arg(id)
            .arg(receipt)
            .arg("")
            .arg("")
            .arg("");
        let acked: Vec<i64> = inv.invoke_async(&mut self.conn).await.unwrap();
        assert_eq!(acked, [1]);
    }
}

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(8);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_data_set_in_every_state_converts_survives_a_second_run_and_drains() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut old = Old {
        conn: client.get_multiplexed_async_connection().await.unwrap(),
    };
    let mut c = redis.conn();
    let _: () = redis::cmd("HSET")
        .arg("dq:meta")
        .arg("buckets")
        .arg(16)
        .query(&mut c)
        .unwrap();
    let topic = r#"{"callback":null,"retry":{"max_attempts":3},"defaults":{},"paused":false}"#;
    let _: () = redis::cmd("HSET")
        .arg("dq:topics")
        .arg("t")
        .arg(format!("1 {topic}"))
        .query(&mut c)
        .unwrap();
    old.push("delayed", "t", 600_000, 5).await;
    old.push("ready", "t", 0, 5).await;
    old.push("reserved", "r", 0, 5).await;
    old.reserve("r").await;
    old.push("dead", "x", 0, 1).await;
    let (id, receipt) = old.reserve("x").await;
    old.nack(&id, &receipt, "remote said 500").await;
    old.push("retried", "e", 0, 5).await;
    let (id, receipt) = old.reserve("e").await;
    old.nack(&id, &receipt, "boom").await;
    old.push("done", "a", 0, 5).await;
    let (id, receipt) = old.reserve("a").await;
    old.ack(&id, &receipt).await;
    // Today's reserve.lua, which plays the old release's here, keeps the deadline it announced to the
    // timers; the old release had no such key.
    let _: () = redis::cmd("DEL").arg("dq:announced").query(&mut c).unwrap();

    // dq refuses this Redis until it is converted.
    assert!(
        Queue::connect(&settings(&redis))
            .await
            .unwrap_err()
            .to_string()
            .contains("dq-checker migrate")
    );
    // Keep the old keys, to play a conversion that took every job and died before removing any.
    let old_keys: Vec<String> = redis::cmd("KEYS").arg("dq:*").query(&mut c).unwrap();
    let dumps: Vec<(String, Vec<u8>, i64)> = old_keys
        .iter()
        .map(|k| {
            let d: Vec<u8> = redis::cmd("DUMP").arg(k).query(&mut c).unwrap();
            let t: i64 = redis::cmd("PTTL").arg(k).query(&mut c).unwrap();
            (k.clone(), d, t.max(0))
        })
        .collect();

    let report = dq_checker::migrate::run(&settings(&redis), &[redis.url()])
        .await
        .unwrap();
    assert_eq!(report.jobs, 6, "{report:?}");
    assert_eq!(report.topics, 1, "{report:?}");
    assert_eq!(report.dangling_ids, 0, "{report:?}");
    let left: Vec<String> = redis::cmd("KEYS").arg("dq:*").query(&mut c).unwrap();
    assert!(left.iter().all(|k| k.starts_with("dq:{")), "old keys left: {left:?}");

    // The interrupted run: old keys back beside the converted jobs; running again finishes it.
    for (k, d, t) in &dumps {
        let _: () = redis::cmd("RESTORE")
            .arg(k)
            .arg(*t)
            .arg(d)
            .arg("REPLACE")
            .query(&mut c)
            .unwrap();
    }
    let again = dq_checker::migrate::run(&settings(&redis), &[redis.url()])
        .await
        .unwrap();
    assert_eq!((again.jobs, again.already), (0, 6), "{again:?}");

    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let states: HashMap<&str, State> = [
        ("delayed", State::Delayed),
        ("ready", State::Ready),
        ("reserved", State::Reserved),
        ("dead", State::Dead),
        ("retried", State::Delayed),
        ("done", State::Done),
    ]
    .into();
    for (id, state) in &states {
        let j = q.producer().get(id).await.unwrap();
        assert_eq!(j.state, *state, "{id}");
        assert_eq!(j.body.get(), format!("{{\"n\":\"{id}\"}}"));
    }
    let retried = q.producer().get("retried").await.unwrap();
    assert_eq!((retried.attempts, retried.last_error.as_deref()), (1, Some("boom")));
    assert_eq!(
        q.producer().get("dead").await.unwrap().last_error.as_deref(),
        Some("remote said 500")
    );
    assert_eq!(q.admin().dead("x", 0, 10).await.unwrap().total, 1);
    assert!(q.admin().topics().await.unwrap().contains_key("t"));
    let audit = q.checker().audit().await.unwrap();
    assert_eq!((audit.orphan_records, audit.dangling_ids), (0, 0), "{audit:?}");
    assert_eq!(audit.records, 6, "{audit:?}");

    // It drains: the ready job, the dead one requeued, the delayed ones rescheduled.
    assert_eq!(q.admin().requeue_dead("x", None).await.unwrap(), 1);
    for id in ["delayed", "retried"] {
        q.producer()
            .reschedule(id, Some(dq_core::Due::Delay(0)), None)
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    for topic in ["t", "x", "e"] {
        for r in q.reservations().reserve(&[topic.to_string()], 10).await.unwrap() {
            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
            got.push(r.id);
        }
    }
    got.sort();
    assert_eq!(got, ["dead", "delayed", "ready", "retried"]);
}
