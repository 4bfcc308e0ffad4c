//! Schedule firing in-process on a real Redis: missed occurrences after downtime fire once; two firers
//! at once make one job per occurrence.

use std::time::Duration;

use dq_core::admin::topics::TopicCache;
use dq_core::{Queue, Settings, State};
use dq_harness::{RedisServer, eventually};
use dq_timer::schedules::ScheduleFirer;
use tokio::sync::watch;
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
    let job = q.producer().get(&format!("minutely:{}", fired[0])).await.unwrap();
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

#[tokio::test]
async fn two_firers_at_once_make_one_job_per_occurrence() {
    let redis = RedisServer::start();
    let s = settings(&redis);
    let q = Queue::connect(&s).await.unwrap();
    let config =
        serde_json::from_value(serde_json::json!({"cron": "* * * * * *", "topic": "both", "body": 1})).unwrap();
    let since = q.admin().put_schedule("both", &config, true).await.unwrap();
    // Both believe they lead, as two timers do for a moment during a takeover.
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    let mut leads = Vec::new();
    for _ in 0..2 {
        let topics = TopicCache::start(q.clone(), Duration::from_secs(1), stop.clone()).await;
        let (lead, follows) = watch::channel(true);
        leads.push(lead);
        tasks.push(tokio::spawn(
            ScheduleFirer::new(q.clone(), topics, follows).run(stop.clone()),
        ));
    }
    eventually(Duration::from_secs(60), "6 occurrences fired", || async {
        job_ids(&redis, "both").len() >= 6
    })
    .await;
    stop.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    let fired: Vec<i64> = job_ids(&redis, "both")
        .iter()
        .map(|id| id.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    assert!(fired[0] > since, "nothing before the schedule was made: {fired:?}");
    assert!(
        fired.windows(2).all(|w| w[1] - w[0] == 1000),
        "every second, none twice: {fired:?}"
    );
    let counts = q.admin().counts().await.counts;
    let ready = counts.get("both").and_then(|c| c.get(&State::Ready)).copied();
    assert_eq!(ready, Some(fired.len() as i64), "one ready job per occurrence");
    let mark = q.timer().schedule("both").await.unwrap().unwrap().last_fired.unwrap();
    assert_eq!(mark, *fired.last().unwrap());
}

/// Every change of a schedule raises the version the firing timer checks every 100 ms; reads do not.
#[tokio::test]
async fn every_change_raises_the_schedules_version() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    assert_eq!(q.timer().schedules_version().await.unwrap(), 0);
    let config: dq_core::schedule::ScheduleConfig =
        serde_json::from_value(serde_json::json!({"cron": "* * * * *", "topic": "v", "body": 1})).unwrap();
    q.admin().put_schedule("v", &config, false).await.unwrap();
    assert_eq!(q.timer().schedules_version().await.unwrap(), 1);
    let paused = dq_core::schedule::ScheduleConfig {
        paused: true,
        ..config.clone()
    };
    q.admin().put_schedule("v", &paused, false).await.unwrap();
    q.timer().schedules().await.unwrap();
    assert_eq!(
        q.timer().schedules_version().await.unwrap(),
        2,
        "a write counts, a read does not"
    );
    q.admin().delete_schedule("v").await.unwrap();
    assert_eq!(q.timer().schedules_version().await.unwrap(), 3);
    assert!(q.admin().delete_schedule("v").await.is_err());
    assert_eq!(
        q.timer().schedules_version().await.unwrap(),
        3,
        "deleting nothing changes nothing"
    );
}
