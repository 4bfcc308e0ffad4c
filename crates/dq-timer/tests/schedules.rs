//! Schedule firing in-process on a real Redis: missed occurrences after downtime fire once.

use std::time::Duration;

use dq_core::{Queue, Settings, State};
use dq_harness::{RedisServer, eventually};
use tokio_util::sync::CancellationToken;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.metrics.listen = Some("127.0.0.1:0".into());
    s
}

fn job_ids(redis: &RedisServer, name: &str) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("dq:*:job:{name}:*"))
        .query(&mut redis.conn())
        .unwrap();
    let mut ids: Vec<String> = keys
        .iter()
        .map(|k| k.split_once(":job:").unwrap().1.to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn after_downtime_only_the_latest_missed_occurrence_fires() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let now = q.redis_now_ms().await.unwrap();
    // A minutely schedule that last fired an hour ago, while no timer ran.
    let config = serde_json::json!({"cron": "* * * * *", "topic": "catch", "body": 7, "timezone": "UTC"});
    redis::cmd("HSET")
        .arg("{dq}:schedules")
        .arg("minutely")
        .arg(format!("{} {config}", now - 7_200_000))
        .exec(&mut redis.conn())
        .unwrap();
    redis::cmd("HSET")
        .arg("{dq}:schedules:fired")
        .arg("minutely")
        .arg((now - 3_600_000) / 60_000 * 60_000)
        .exec(&mut redis.conn())
        .unwrap();
    let stop = CancellationToken::new();
    let timer = tokio::spawn(dq_timer::run(s.clone(), stop.clone()));
    eventually(Duration::from_secs(30), "the catch-up occurrence fires", || async {
        !job_ids(&redis, "minutely").is_empty()
    })
    .await;
    let latest = now / 60_000 * 60_000;
    let fired: Vec<i64> = job_ids(&redis, "minutely")
        .iter()
        .map(|id| id.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    // One: the latest missed (the next minute's, should the minute turn as the timer starts), then only
    // the regular ones, a minute apart: none of the 60 older ones.
    assert!(
        fired[0] == latest || fired[0] == latest + 60_000,
        "{fired:?}, latest missed {latest}"
    );
    assert!(fired.windows(2).all(|w| w[1] - w[0] == 60_000), "{fired:?}");
    let job = q.get(&format!("minutely:{}", fired[0])).await.unwrap();
    assert_eq!(
        (job.run_at, job.state),
        (fired[0], State::Ready),
        "due at its occurrence: ready at once"
    );
    let mark: i64 = redis::cmd("HGET")
        .arg("{dq}:schedules:fired")
        .arg("minutely")
        .query(&mut redis.conn())
        .unwrap();
    assert!(mark >= latest);
    stop.cancel();
    timer.await.unwrap().unwrap();
}
