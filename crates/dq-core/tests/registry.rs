//! The topic registry on a real Redis: what is stored, and registrations of older releases read with
//! the meaning they had.

use dq_core::{Queue, Settings, TopicConfig};
use dq_harness::RedisServer;

fn settings(redis: &RedisServer) -> Settings {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(4);
    s
}

/// A registration stored before conditions followed the seed (no format mark) is read as the same
/// condition in today's terms; one written now keeps its text and carries the mark.
#[tokio::test]
async fn a_condition_stored_with_the_old_meaning_is_read_with_it() {
    let redis = RedisServer::start();
    let q = Queue::connect(&settings(&redis)).await.unwrap();
    let mut c = redis.conn();
    let old = r#"{"callback":{"url":"http://127.0.0.1:9/h"},"retry":{"condition":"{res.code} != 200 && {res.data.status} != 2"}}"#;
    let _: () = redis::cmd("HSET")
        .arg("{dq}:topics")
        .arg("old")
        .arg(format!("1700000000000000 {old}"))
        .query(&mut c)
        .unwrap();
    let new: TopicConfig = serde_json::from_str(
        r#"{"callback":{"url":"http://127.0.0.1:9/h"},"retry":{"condition":"{res.code} != 200 && {res.data.status} != 2"}}"#,
    )
    .unwrap();
    q.admin().put_topic("new", &new).await.unwrap();

    let topics = q.admin().topics().await.unwrap();
    assert_eq!(
        topics["old"].retry.condition.as_deref(),
        Some("{http.status} != 200 && {res.status} != 2"),
        "the old {{res.code}} was the HTTP status and {{res.data…}} the answer"
    );
    assert_eq!(
        topics["new"].retry.condition.as_deref(),
        Some("{res.code} != 200 && {res.data.status} != 2"),
        "written now: the seed's meaning, kept as written"
    );
    let stored: String = redis::cmd("HGET").arg("{dq}:topics").arg("new").query(&mut c).unwrap();
    assert!(stored.contains(r#""dq_format":2"#), "{stored}");

    // Written again (a PUT of what was read), the old one is stored in today's terms with the mark.
    q.admin().put_topic("old", &topics["old"]).await.unwrap();
    assert_eq!(
        q.admin().topics().await.unwrap()["old"].retry.condition.as_deref(),
        Some("{http.status} != 200 && {res.status} != 2")
    );
}
