//! Jobs that start jobs, on a real Redis (standalone and cluster): a fan-out topic's push makes its
//! children in one call with itself, once per id; an ack stores the jobs it pushes with itself, only when
//! it succeeds and once however often it is sent; children are named by their parent's id, live in its
//! partition, and go through their own topics like any job.

mod common;

use std::collections::BTreeMap;

use dq_core::reservations::Success;
use dq_core::{Error, Queue, State, TopicConfig};
use dq_harness::{RedisCluster, RedisServer};
use serde_json::{Value, json};

use common::{cluster, reserve, standalone};

/// Registers `topics` (name → registration JSON) and answers them as the registry holds them.
async fn register(q: &Queue, topics: &[(&str, Value)]) -> BTreeMap<String, TopicConfig> {
    for (name, config) in topics {
        let config: TopicConfig = serde_json::from_value(config.clone()).unwrap();
        q.admin().put_topic(name, &config).await.unwrap();
    }
    q.admin().topics().await.unwrap()
}

/// A success that pushes `jobs`.
fn push(jobs: &[dq_core::NewJob]) -> Success<'_> {
    Success {
        push: jobs,
        ..Default::default()
    }
}

/// Jobs counted in `state` for `topic`, over every partition.
async fn count(q: &Queue, topic: &str, state: State) -> i64 {
    let stats = q.admin().counts().await;
    stats
        .counts
        .get(topic)
        .and_then(|c| c.get(&state))
        .copied()
        .unwrap_or(0)
}

async fn fan_out(q: &Queue) {
    let topics = register(
        q,
        &[
            ("order.paid", json!({"fanout": ["mail", "ledger"]})),
            ("mail", json!({"defaults": {"ttr_ms": 5000}})),
        ],
    )
    .await;
    let producer = q.producer();
    let req = |id: &str, delay: u64| {
        serde_json::from_value(json!({"topic": "order.paid", "id": id, "body": {"order": 7}, "delay_ms": delay}))
            .unwrap()
    };
    let job = producer.prepare(req("o-7", 0), &topics).unwrap();
    assert_eq!(job.fanout.len(), 2);
    assert_eq!(job.fanout[0].ttr_ms, 5000, "each child takes its own topic's defaults");
    let pushed = producer.push(job).await.unwrap();
    assert_eq!(
        pushed.state,
        State::Done,
        "a fan-out's parent is done: its work is its children's"
    );
    let children: Vec<_> = pushed.children.iter().map(|c| (c.id.as_str(), c.state)).collect();
    assert_eq!(
        children,
        [("o-7~mail", Some(State::Ready)), ("o-7~ledger", Some(State::Ready))]
    );
    // The same push again: a conflict, and no second child.
    let again = producer.push(producer.prepare(req("o-7", 0), &topics).unwrap()).await;
    assert!(matches!(again, Err(Error::Conflict(_))), "{again:?}");
    assert_eq!(count(q, "mail", State::Ready).await, 1);
    assert_eq!(count(q, "ledger", State::Ready).await, 1);
    assert_eq!(
        count(q, "order.paid", State::Done).await,
        0,
        "done jobs are not counted"
    );

    // The parent shows its children's states; a child its parent.
    let parent = producer.get("o-7").await.unwrap();
    assert_eq!(parent.state, State::Done);
    let shown: Vec<_> = parent.children.iter().map(|c| (c.topic.as_str(), c.state)).collect();
    assert_eq!(shown, [("mail", Some(State::Ready)), ("ledger", Some(State::Ready))]);
    let child = reserve(q, "mail").await;
    assert_eq!(child.id, "o-7~mail");
    assert_eq!(child.body.get(), r#"{"order":7}"#);
    q.reservations().ack(&child.id, &child.receipt).await.unwrap();
    let looked = producer.get("o-7~mail").await.unwrap();
    assert_eq!(looked.parent.as_deref(), Some("o-7"));
    assert_eq!(looked.ttr_ms, 5000);
    let parent = producer.get("o-7").await.unwrap();
    assert_eq!(parent.children[0].state, Some(State::Done));

    // A delayed fan-out: its children wait for the same time; a server-made id names them too.
    let delayed = producer.prepare(
        serde_json::from_value(json!({"topic": "order.paid", "body": 1, "delay_ms": 600_000})).unwrap(),
        &topics,
    );
    let pushed = producer.push(delayed.unwrap()).await.unwrap();
    assert!(pushed.children.iter().all(|c| c.state == Some(State::Delayed)));
    assert_eq!(pushed.children[0].id, format!("{}~mail", pushed.id));
    assert_eq!(count(q, "ledger", State::Delayed).await, 1);

    // A traced fan-out's children are in its trace.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = producer.prepare(
        serde_json::from_value(json!({"topic": "order.paid", "id": "o-t", "body": 1, "traceparent": tp})).unwrap(),
        &topics,
    );
    producer.push(traced.unwrap()).await.unwrap();
    for child in ["o-t~mail", "o-t~ledger"] {
        assert_eq!(producer.get(child).await.unwrap().traceparent.as_deref(), Some(tp));
    }

    // What a fan-out refuses.
    let nested = register(q, &[("fan2", json!({"fanout": ["order.paid"]}))]).await;
    let err = producer
        .prepare(
            serde_json::from_value(json!({"topic": "fan2", "body": 1})).unwrap(),
            &nested,
        )
        .unwrap_err();
    assert!(err.to_string().contains("do not nest"), "{err}");
    let err = producer
        .prepare(
            serde_json::from_value(json!({"topic": "order.paid", "body": 1, "flow_key": "k"})).unwrap(),
            &topics,
        )
        .unwrap_err();
    assert!(err.to_string().contains("flow_key"), "{err}");
}

async fn pushed_with_the_ack(q: &Queue) {
    let topics = register(q, &[("fan", json!({"fanout": ["f1", "f2"]}))]).await;
    let producer = q.producer();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let id = common::push(
        q,
        json!({"topic": "pay", "id": "pay-1", "body": {"n": 1}, "traceparent": tp}),
    )
    .await;
    let job = reserve(q, "pay").await;
    let trace = dq_core::trace::TraceContext::from_fields(job.traceparent.as_deref(), None).unwrap();
    let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
    let pushes = vec![
        raw(json!({"topic": "receipt", "body": {"mail": 1}, "delay_ms": 600_000})),
        raw(json!({"topic": "review", "body": {"ask": 1}, "priority": 5})),
        raw(json!({"topic": "fan", "body": 2})),
    ];
    let allow_all = |_: &str| Ok(());
    let jobs = producer
        .prepare_pushes(&id, trace.as_ref(), &pushes, &topics, allow_all)
        .unwrap();

    // A stale ack stores nothing.
    let stale = q.reservations().ack_with(&id, "0000.1", &push(&jobs)).await;
    assert!(matches!(stale, Err(Error::StaleReceipt)), "{stale:?}");
    assert!(matches!(producer.get("pay-1~0").await, Err(Error::NotFound(_))));

    let pushed = q
        .reservations()
        .ack_with(&job.id, &job.receipt, &push(&jobs))
        .await
        .unwrap();
    let ids: Vec<&str> = pushed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["pay-1~0", "pay-1~1", "pay-1~2", "pay-1~2~f1", "pay-1~2~f2"]);
    // Sent again (an ack whose answer was lost): refused as stale, and nothing twice.
    let again = q.reservations().ack_with(&job.id, &job.receipt, &push(&jobs)).await;
    assert!(matches!(again, Err(Error::StaleReceipt)), "{again:?}");
    assert_eq!(count(q, "receipt", State::Delayed).await, 1);
    assert_eq!(count(q, "review", State::Ready).await, 1);
    assert_eq!(count(q, "f1", State::Ready).await, 1);

    let parent = producer.get("pay-1").await.unwrap();
    assert_eq!(parent.state, State::Done);
    let shown: Vec<_> = parent
        .children
        .iter()
        .map(|c| (c.id.as_str(), c.topic.as_str(), c.state))
        .collect();
    assert_eq!(
        shown,
        [
            ("pay-1~0", "receipt", Some(State::Delayed)),
            ("pay-1~1", "review", Some(State::Ready)),
            ("pay-1~2", "fan", Some(State::Done)),
        ]
    );
    let review = producer.get("pay-1~1").await.unwrap();
    assert_eq!((review.priority, review.parent.as_deref()), (5, Some("pay-1")));
    // They are stored in the acked job's trace, a fan-out's children too.
    for child in ["pay-1~0", "pay-1~1", "pay-1~2", "pay-1~2~f1", "pay-1~2~f2"] {
        assert_eq!(
            producer.get(child).await.unwrap().traceparent.as_deref(),
            Some(tp),
            "{child}"
        );
    }
    // The ack's attempt is on record with the children.
    let (n, history) = producer.attempts("pay-1").await.unwrap();
    assert_eq!((n, history.len()), (1, 1));
    // Grandchildren go through their topics; their parent is the pushed fan-out job.
    let f2 = reserve(q, "f2").await;
    assert_eq!(f2.id, "pay-1~2~f2");
    let grand = producer.get("pay-1~2").await.unwrap();
    assert_eq!(grand.children.len(), 2);
    // A child's own success may push again: the ids grow by one suffix.
    let more = producer
        .prepare_pushes(
            &f2.id,
            None,
            &[raw(json!({"topic": "t3", "body": 3}))],
            &topics,
            allow_all,
        )
        .unwrap();
    let pushed = q
        .reservations()
        .ack_with(&f2.id, &f2.receipt, &push(&more))
        .await
        .unwrap();
    assert_eq!(pushed[0].id, "pay-1~2~f2~0");
    assert_eq!(reserve(q, "t3").await.id, "pay-1~2~f2~0");
}

async fn what_a_push_list_refuses(q: &Queue) {
    let topics = BTreeMap::new();
    let producer = q.producer();
    let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
    let allow = |t: &str| {
        if t.starts_with("mail") {
            Ok(())
        } else {
            Err(Error::Forbidden(format!("topic `{t}` not allowed")))
        }
    };
    let many: Vec<_> = (0..101).map(|_| raw(json!({"topic": "mail", "body": 1}))).collect();
    for (pushes, needle) in [
        (many, "limit is 100"),
        (vec![raw(json!(["mail", 1]))], "JSON object"),
        (vec![raw(json!({"topic": "mail"}))], "push[0]"),
        (vec![raw(json!({"topic": "mail", "body": 1, "id": "x"}))], "`id`"),
        (
            vec![raw(json!({"topic": "mail", "body": 1, "flow_key": "k"}))],
            "`flow_key`",
        ),
        (
            vec![raw(
                json!({"topic": "mail", "body": 1, "dedup_key": "k", "dedup_ms": 5}),
            )],
            "`dedup_key`",
        ),
        (
            vec![
                raw(json!({"topic": "mail", "body": 1})),
                raw(json!({"topic": "billing", "body": 1})),
            ],
            "push[1]: topic `billing` not allowed",
        ),
        (
            vec![raw(json!({"topic": "mail", "body": 1, "delay_ms": -1}))],
            "delay_ms",
        ),
    ] {
        let err = producer
            .prepare_pushes("p", None, &pushes, &topics, allow)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // Pushed jobs join their parent's trace (fan-out children too), unless they bring their own.
    let parent = dq_core::trace::TraceContext::from_fields(
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        None,
    )
    .unwrap();
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let fan_topics = register(q, &[("fan.t", json!({"fanout": ["x1", "x2"]}))]).await;
    let jobs = producer
        .prepare_pushes(
            "p",
            parent.as_ref(),
            &[
                raw(json!({"topic": "mail", "body": 1})),
                raw(json!({"topic": "fan.t", "body": 2})),
                raw(json!({"topic": "mail", "body": 3, "traceparent": own})),
            ],
            &fan_topics,
            |_| Ok(()),
        )
        .unwrap();
    let tp = |j: &dq_core::NewJob| j.trace.as_ref().map(|t| t.traceparent.clone());
    assert_eq!(tp(&jobs[0]), parent.as_ref().map(|t| t.traceparent.clone()));
    assert!(jobs[1].fanout.iter().all(|c| tp(c) == tp(&jobs[0])));
    assert_eq!(tp(&jobs[2]).as_deref(), Some(own));
    // A chain whose ids would pass 512 bytes ends there.
    let long = format!("{}{}", "a".repeat(128), "~0".repeat(192));
    let err = producer
        .prepare_pushes(&long, None, &[raw(json!({"topic": "mail", "body": 1}))], &topics, allow)
        .unwrap_err();
    assert!(err.to_string().contains("512 bytes"), "{err}");
}

#[tokio::test]
async fn fan_out_on_standalone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    fan_out(&q).await;
}

#[tokio::test]
async fn fan_out_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    fan_out(&q).await;
}

#[tokio::test]
async fn pushed_with_the_ack_on_standalone() {
    let redis = RedisServer::start();
    let q = Queue::connect(&standalone(&redis)).await.unwrap();
    pushed_with_the_ack(&q).await;
    what_a_push_list_refuses(&q).await;
}

#[tokio::test]
async fn pushed_with_the_ack_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(&cluster(&c)).await.unwrap();
    pushed_with_the_ack(&q).await;
}
