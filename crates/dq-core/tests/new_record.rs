//! A pushed job's record packed in Rust (`store/new_record.rs`) is the one `record.lua` writes: on a real
//! Redis, each record a push stores is read by `rec_load` and written again by `rec_store` beside it,
//! and the two must be the same bytes; and the job reads back as pushed, in the state and at the due time
//! the push answered.

use std::time::{SystemTime, UNIX_EPOCH};

use dq_core::{PushRequest, Queue, Settings, State};
use dq_harness::RedisServer;
use serde_json::json;

const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// `record.lua`, then: the record at KEYS[1] loaded and stored again at KEYS[2], and both read back.
fn rewrite() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../src/store/scripts/record.lua"),
        "local r = rec_load(KEYS[1])\n",
        "rec_store(KEYS[2], r, false, true)\n",
        "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}\n",
    ))
}

#[tokio::test]
async fn a_packed_record_is_the_one_the_script_would_write() {
    let redis = RedisServer::start();
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(1);
    // A body of 2^16 bytes or more is packed with a four-byte length.
    s.limits.max_body_bytes = 100_000;
    let q = Queue::connect(&s).await.unwrap();
    let long_topic = "t".repeat(40);
    let long_body = format!("\"{}\"", "b".repeat(70_000));
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    let requests = [
        json!({"topic": "t", "body": {"a": 1}, "delay_ms": 5000}),
        json!({"topic": "t", "body": 1, "delay_ms": 0}),
        json!({"topic": "t", "body": 1, "delay_ms": 86_400_000, "ttr_ms": 70_000, "max_attempts": 0}),
        json!({"topic": long_topic, "body": 1, "delay_ms": 10}),
        json!({"topic": "t", "body": serde_json::from_str::<serde_json::Value>(&long_body).unwrap(), "delay_ms": 10}),
        json!({"topic": "t", "body": "b".repeat(300), "delay_ms": 10}),
        json!({"topic": "t", "body": 1, "delay_ms": 10, "priority": 0}),
        json!({"topic": "t", "body": 1, "delay_ms": 0, "priority": 4_294_967_295u32}),
        json!({"topic": "t", "body": 1, "delay_ms": 10, "priority": 1024}),
        json!({"topic": "t", "body": 1, "delay_ms": 10, "backoff_ms": [100, 70_000, 5_000_000_000u64]}),
        json!({"topic": "t", "body": 1, "delay_ms": 10, "flow_key": "k1"}),
        json!({"topic": "t", "body": 1, "delay_ms": 0, "flow_key": "k".repeat(40)}),
        json!({"topic": "t", "body": 1, "delay_ms": 10, "traceparent": TP}),
        json!({"topic": "t", "body": 1, "delay_ms": 0, "traceparent": TP, "tracestate": "a=1;b,c=2"}),
        json!({"topic": "t", "body": 1, "delay_ms": 10, "dedup_key": "d", "dedup_ms": 1000,
            "priority": 7, "backoff_ms": [5], "flow_key": "k2", "traceparent": TP}),
        json!({"topic": "t", "id": "given", "body": 1, "delay_ms": 0, "priority": 7, "flow_key": "k3"}),
        json!({"topic": "t", "body": 1, "run_at": now + 60_000}),
        json!({"topic": "t", "body": 1, "run_at": 1000, "traceparent": TP}),
        json!({"topic": "t", "body": 1, "run_at": now - 5, "priority": 3, "flow_key": "k4"}),
        json!({"topic": "t", "body": 1, "run_at": now + 31_000_000_000i64, "backoff_ms": [1]}),
    ];
    let mut c = redis.conn();
    for request in requests {
        let job = q
            .producer()
            .validate(serde_json::from_value::<PushRequest>(request.clone()).unwrap())
            .unwrap();
        let pushed = q.producer().push(job).await.unwrap();
        let key = q.partition_keys(0).job(&pushed.id);
        let [packed, again]: [Vec<u8>; 2] = rewrite()
            .key(&key)
            .key(format!("{key}:again"))
            .invoke::<Vec<Vec<u8>>>(&mut c)
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(packed, again, "{request}");
        let got = q.producer().get(&pushed.id).await.unwrap();
        assert_eq!((got.state, got.run_at), (pushed.state, pushed.run_at), "{request}");
        match (request["delay_ms"].as_i64(), request["run_at"].as_i64()) {
            (Some(delay), _) => {
                let state = if delay == 0 { State::Ready } else { State::Delayed };
                assert_eq!((got.state, got.run_at - got.created_at), (state, delay), "{request}");
            }
            (_, Some(at)) => {
                let state = if at <= got.created_at {
                    State::Ready
                } else {
                    State::Delayed
                };
                assert_eq!((got.state, got.run_at), (state, at), "{request}");
                assert!(
                    (got.created_at - now).abs() < 60_000,
                    "{request}: created {}",
                    got.created_at
                );
            }
            _ => unreachable!(),
        }
        assert_eq!(got.topic, request["topic"].as_str().unwrap());
        assert_eq!(got.traceparent.as_deref(), request["traceparent"].as_str());
        assert_eq!(got.tracestate.as_deref(), request["tracestate"].as_str());
        assert_eq!(got.flow_key.as_deref(), request["flow_key"].as_str());
        redis::cmd("DEL").arg(format!("{key}:again")).exec(&mut c).unwrap();
    }
}
