//! Hand-offs to long polls, on a real Redis: a long poll that waits is told to the timers, a promotion
//! hands it the due job, and its reserve takes it without another call; jobs nobody takes go back to
//! the ready queue, in time and when the process stops.

use std::time::Duration;

use dq_core::reservations::{ReserveOptions, Waiting};
use dq_core::{Queue, Reservation, Settings, State};
use dq_harness::{RedisServer, eventually};
use tokio_util::sync::CancellationToken;

/// A queue of one partition that follows ready wake-ups and serves hand-offs to its long polls until
/// the token is cancelled (the task then ends).
async fn serve(redis: &RedisServer) -> (Queue, CancellationToken, tokio::task::JoinHandle<()>) {
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(1);
    let q = Queue::connect(&s).await.unwrap();
    let stop = CancellationToken::new();
    let _ready = dq_core::wake::follow_ready(&q, stop.clone());
    let serving = dq_core::wake::serve_long_polls(&q, stop.clone());
    (q, stop, serving)
}

/// Subscribed to the timer channel, where waiting notices go.
fn timer_notices<'a>(conn: &'a mut redis::Connection, q: &Queue) -> redis::PubSub<'a> {
    let mut sub = conn.as_pubsub();
    sub.subscribe(q.partition_keys(0).timer_channel()).unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sub
}

async fn push_due_in(q: &Queue, id: &str, delay_ms: u64) {
    let req =
        serde_json::from_value(serde_json::json!({"id": id, "topic": "t", "body": 1, "delay_ms": delay_ms})).unwrap();
    q.producer().push(q.producer().validate(req).unwrap()).await.unwrap();
}

/// What dq-server's `POST /v1/reserve` does: a look, then waiting in line, until a job or `timeout`.
async fn long_poll(q: Queue, timeout: Duration) -> Vec<Reservation> {
    let topics = vec!["t".to_string()];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut waiter = q.reservations().ready_index().waiter(&topics, 1);
        let options = ReserveOptions {
            waits: true,
            ..Default::default()
        };
        let jobs = q.reservations().reserve_with(&topics, 1, options).await.unwrap();
        if !jobs.is_empty() {
            return jobs;
        }
        tokio::select! {
            _ = waiter.wait() => {}
            _ = tokio::time::sleep_until(deadline) => return Vec::new(),
        }
    }
}

/// Reads the timer channel until a long poll's waiting notice for `t` with `slots`.
fn notice(sub: &mut redis::PubSub<'_>, slots: u32) -> Waiting {
    loop {
        let payload: String = sub.get_message().expect("a waiting notice").get_payload().unwrap();
        if let Some(w) = Waiting::parse(&payload).filter(|w| w.slots == slots) {
            return w;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_long_poll_is_handed_the_due_job() {
    let redis = RedisServer::start();
    let (q, stop, serving) = serve(&redis).await;
    let mut conn = redis.conn();
    let mut sub = timer_notices(&mut conn, &q);

    push_due_in(&q, "j", 300).await;
    let poll = tokio::spawn(long_poll(q.clone(), Duration::from_secs(60)));
    let waiting = notice(&mut sub, 1);
    assert_eq!((waiting.topic.as_str(), waiting.least_ttr_ms), ("t", 0));
    eventually(Duration::from_secs(10), "the job is due", || async {
        q.producer().get("j").await.unwrap().run_at <= dq_core::clock::unix_ms()
    })
    .await;
    let p = q
        .timer()
        .promote_for(0, 100, std::slice::from_ref(&waiting))
        .await
        .unwrap();
    assert_eq!(p.handed, [1], "handed to the waiting long poll");
    let got = poll.await.unwrap();
    assert_eq!((got.len(), got[0].id.as_str(), got[0].attempt), (1, "j", 1));
    q.reservations().ack(&got[0].id, &got[0].receipt).await.unwrap();
    assert_eq!(q.producer().get("j").await.unwrap().state, State::Done);
    stop.cancel();
    serving.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_job_no_long_poll_takes_goes_back_to_ready_in_time_and_at_the_stop() {
    let redis = RedisServer::start();
    let (q, stop, serving) = serve(&redis).await;
    let mut conn = redis.conn();
    let mut sub = timer_notices(&mut conn, &q);

    push_due_in(&q, "late", 200).await;
    push_due_in(&q, "stop", 400).await;
    // A long poll waits, and gives up before the jobs are due.
    let poll = tokio::spawn(long_poll(q.clone(), Duration::from_millis(100)));
    let waiting = notice(&mut sub, 1);
    assert!(poll.await.unwrap().is_empty());
    eventually(Duration::from_secs(10), "the jobs are due", || async {
        q.producer().get("stop").await.unwrap().run_at <= dq_core::clock::unix_ms()
    })
    .await;
    // The timers still believed it waited: the first job is handed to the process, nobody takes it.
    let p = q
        .timer()
        .promote_for(0, 1, std::slice::from_ref(&waiting))
        .await
        .unwrap();
    assert_eq!((p.moved, p.handed.clone()), (1, vec![1]));
    assert_eq!(q.producer().get("late").await.unwrap().state, State::Reserved);
    eventually(Duration::from_secs(30), "the job is handed back", || async {
        q.producer().get("late").await.unwrap().state == State::Ready
    })
    .await;
    let back = q.producer().get("late").await.unwrap();
    assert_eq!(back.attempts, 0, "a hand-back is not a delivery");

    // The second is handed and the process stops at once: it hands the job back before it ends.
    let p = q
        .timer()
        .promote_for(0, 1, std::slice::from_ref(&waiting))
        .await
        .unwrap();
    assert_eq!(p.handed, [1]);
    stop.cancel();
    serving.await.unwrap();
    for id in ["late", "stop"] {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Ready, "{id}");
    }
}
