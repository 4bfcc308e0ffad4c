//! A job's trace context on a real Redis, standalone and cluster: stored with the job (record field
//! `tc`), shown by look-up, kept through every move (promote, reserve, nack, ack with its history),
//! carried by the reserve answer and a hand-off; pushes many and coalesced pushes keep theirs; a job without one costs nothing and shows none.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq_core::reservations::Waiting;
use dq_core::{Job, PushRequest, Queue, Reservation, State};
use dq_harness::{RedisCluster, RedisServer, eventually};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::{cluster, push, reserve, standalone};

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// A `tracestate` with what the record and the options argument must carry through: `;`, a space.
const TS: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7;x y";

fn trace_of(job: &Job) -> (Option<&str>, Option<&str>) {
    (job.traceparent.as_deref(), job.tracestate.as_deref())
}

fn trace_in(r: &Reservation) -> (Option<&str>, Option<&str>) {
    (r.traceparent.as_deref(), r.tracestate.as_deref())
}

/// Promotes the job `id` once it is due.
async fn promote(q: &Queue, id: &str) -> dq_core::timer::Promoted {
    let p = q.partitions().of_id(id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let promoted = q.timer().promote(p, 100).await.unwrap();
        if promoted.moved > 0 {
            return promoted;
        }
        assert!(tokio::time::Instant::now() < deadline, "{id} was not promoted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_traced_job_keeps_its_context_through_its_life(q: &Queue) {
    let plain = push(q, json!({"topic": "tr", "body": 0})).await;
    assert_eq!(trace_of(&q.producer().get(&plain).await.unwrap()), (None, None));
    let id = push(
        q,
        json!({"topic": "tr", "body": {"n": 1}, "delay_ms": 50, "traceparent": TP, "tracestate": TS,
               "priority": 7}),
    )
    .await;
    let job = q.producer().get(&id).await.unwrap();
    assert_eq!(trace_of(&job), (Some(TP), Some(TS)));
    assert_eq!((job.state, job.priority), (State::Delayed, 7));

    // The promotion writes the state alone, its byte says that a trace context follows the array, and
    // the record still reads. This process exports no spans, so the promotion hands back no trace (a
    // timer that exports them is told: tests/e2e's OTLP receiver sees its promotion span).
    let promoted = promote(q, &id).await;
    assert_eq!(promoted.traced, vec![], "{promoted:?}");
    let ready = q.producer().get(&id).await.unwrap();
    assert_eq!((ready.state, trace_of(&ready)), (State::Ready, (Some(TP), Some(TS))));

    // Each reservation carries its job's context, or none.
    let (mut first, mut second) = (reserve(q, "tr").await, reserve(q, "tr").await);
    if first.id != id {
        std::mem::swap(&mut first, &mut second);
    }
    assert_eq!(
        (first.id.as_str(), trace_in(&first)),
        (id.as_str(), (Some(TP), Some(TS)))
    );
    assert_eq!((second.id.as_str(), trace_in(&second)), (plain.as_str(), (None, None)));

    // A nack and a second delivery keep it; so does the ack with its attempt on record.
    q.reservations()
        .nack(&first.id, &first.receipt, Some(0), Some("again"), None)
        .await
        .unwrap();
    let again = reserve(q, "tr").await;
    assert_eq!((again.id.as_str(), again.attempt), (id.as_str(), 2));
    assert_eq!(trace_in(&again), (Some(TP), Some(TS)));
    q.reservations().ack(&again.id, &again.receipt).await.unwrap();
    let done = q.producer().get(&id).await.unwrap();
    assert_eq!((done.state, trace_of(&done)), (State::Done, (Some(TP), Some(TS))));
    assert_eq!(q.producer().attempts(&id).await.unwrap().0, 2);
}

#[tokio::test]
async fn a_traced_job_keeps_its_context_through_its_life_standalone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    a_traced_job_keeps_its_context_through_its_life(&q).await;
}

#[tokio::test]
async fn a_traced_job_keeps_its_context_through_its_life_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    a_traced_job_keeps_its_context_through_its_life(&q).await;
}

async fn every_push_keeps_its_own(q: &Queue) {
    let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let job = |json| {
        q.producer()
            .validate(serde_json::from_value::<PushRequest>(json).unwrap())
            .unwrap()
    };
    let results = q
        .producer()
        .push_many(vec![
            job(json!({"topic": "b", "body": 1, "traceparent": TP})),
            job(json!({"topic": "b", "body": 2})),
            job(
                json!({"topic": "b", "body": 3, "traceparent": other, "tracestate": "k=v",
                       "flow_key": "tenant-1", "backoff_ms": [5], "max_age_ms": 60000}),
            ),
        ])
        .await;
    let ids: Vec<String> = results.into_iter().map(|r| r.unwrap().id).collect();
    let mut traces = Vec::new();
    for id in &ids {
        let j = q.producer().get(id).await.unwrap();
        traces.push((j.traceparent, j.tracestate));
    }
    assert_eq!(
        traces,
        [
            (Some(TP.to_string()), None),
            (None, None),
            (Some(other.to_string()), Some("k=v".to_string())),
        ]
    );
    // The keyed job (fields up to 19, none of them absent at the end) is reserved with its context.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = reserve(q, "b").await;
        seen.push((r.body.get().to_string(), r.traceparent, r.flow_key));
    }
    seen.sort();
    assert_eq!(seen[2], ("3".into(), Some(other.into()), Some("tenant-1".into())));
    assert_eq!(seen[0], ("1".into(), Some(TP.into()), None));
}

#[tokio::test]
async fn every_push_keeps_its_own_standalone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    every_push_keeps_its_own(&q).await;
}

#[tokio::test]
async fn every_push_keeps_its_own_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    every_push_keeps_its_own(&q).await;
}

async fn a_handed_job_carries_its_context(q: &Queue) {
    let got: Arc<Mutex<Vec<Reservation>>> = Arc::default();
    let stop = CancellationToken::new();
    let to = got.clone();
    let listener = dq_core::wake::listen_handoffs(q, "trace-test", stop.clone(), move |jobs| {
        to.lock().unwrap().extend(jobs)
    });
    let waiting = Waiting {
        topic: "h".into(),
        consumer: "trace-test".into(),
        slots: 1,
        least_ttr_ms: 0,
    };
    // The listener subscribes on its own: until it does, a promotion finds nobody and the job goes to
    // the ready queue. Each round pushes a new job due at once after a 1 ms delay.
    let mut round = 0;
    eventually(Duration::from_secs(30), "a job is handed to the listener", || {
        round += 1;
        let (q, waiting) = (q.clone(), waiting.clone());
        async move {
            let id = push(
                &q,
                json!({"id": format!("h{round}"), "topic": "h", "body": round, "delay_ms": 1,
                       "traceparent": TP, "tracestate": TS}),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            let p = q.partitions().of_id(&id);
            let promoted = q.timer().promote_for(p, 10, &[waiting]).await.unwrap();
            promoted.handed.first() == Some(&1)
        }
    })
    .await;
    eventually(Duration::from_secs(10), "the hand-off arrives", || async {
        !got.lock().unwrap().is_empty()
    })
    .await;
    let handed = got.lock().unwrap().pop().unwrap();
    assert_eq!(handed.id, format!("h{round}"));
    assert_eq!(trace_in(&handed), (Some(TP), Some(TS)));
    stop.cancel();
    listener.await.unwrap();
}

#[tokio::test]
async fn a_handed_job_carries_its_context_standalone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    a_handed_job_carries_its_context(&q).await;
}

#[tokio::test]
async fn a_handed_job_carries_its_context_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    a_handed_job_carries_its_context(&q).await;
}

async fn coalesced_pushes_carry_the_trace_of_the_body_they_deliver(q: &Queue) {
    let second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let last = |n: u32, tp: Option<&str>| {
        let mut j = json!({"topic": "c", "body": n, "coalesce_key": "doc",
                           "coalesce": {"mode": "last", "window_ms": 60000}});
        if let Some(tp) = tp {
            j["traceparent"] = json!(tp);
        }
        j
    };
    let id = push(q, last(1, Some(TP))).await;
    assert_eq!(trace_of(&q.producer().get(&id).await.unwrap()), (Some(TP), None));
    assert_eq!(push(q, last(2, Some(second))).await, id);
    assert_eq!(trace_of(&q.producer().get(&id).await.unwrap()), (Some(second), None));
    assert_eq!(push(q, last(3, None)).await, id);
    assert_eq!(
        trace_of(&q.producer().get(&id).await.unwrap()),
        (None, None),
        "body 3 has no trace"
    );

    let merge = |n: u32, tp: &str| {
        json!({"topic": "c", "body": n, "coalesce_key": "batch", "traceparent": tp, "tracestate": TS,
               "coalesce": {"mode": "merge", "window_ms": 60000}})
    };
    let id = push(q, merge(1, TP)).await;
    assert_eq!(push(q, merge(2, second)).await, id);
    let job = q.producer().get(&id).await.unwrap();
    assert_eq!(job.body.get(), r#"{"items":[1,2]}"#);
    assert_eq!(trace_of(&job), (Some(TP), Some(TS)), "a merge keeps the first push's");
}

#[tokio::test]
async fn coalesced_pushes_carry_the_trace_of_the_body_they_deliver_standalone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    coalesced_pushes_carry_the_trace_of_the_body_they_deliver(&q).await;
}

#[tokio::test]
async fn coalesced_pushes_carry_the_trace_of_the_body_they_deliver_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    coalesced_pushes_carry_the_trace_of_the_body_they_deliver(&q).await;
}
