//! promote.lua's fast way for hand-offs (`handoff.lua`): a call whose every due job is a plain one that a
//! waiting worker takes. On a real Redis: what it writes is what the general way (`rec_store`) writes,
//! the worker gets what a reserve would give it, and a call it does not take is left untouched for the
//! general way.

mod common;

use std::time::Duration;

use dq_core::State;
use dq_core::reservations::Waiting;
use dq_core::store::keys::WakeKind;
use dq_harness::RedisServer;
use redis::Value;
use serde_json::json;

use common::{one_partition, one_partition_prefix as prefix, promote_call, push, push_nacked, snapshot};

const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// `C1` waits for `t` with `slots` free and a least TTR of 60 s.
fn c1(slots: u32) -> [Waiting; 1] {
    [Waiting {
        topic: "t".into(),
        consumer: "C1".into(),
        slots,
        least_ttr_ms: 60_000,
    }]
}

/// `record.lua`, then: the record at KEYS[1] loaded and stored again at KEYS[2], and both read back.
fn rewrite() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../src/store/scripts/record.lua"),
        "local r = rec_load(KEYS[1])\n",
        "rec_store(KEYS[2], r)\n",
        "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}\n",
    ))
}

/// A plain job, a traced one and one on its second attempt (nacked, with an error and an attempt in its
/// history), all due, handed to one worker with room for them all: each record is the one `rec_store`
/// writes for its new state, the worker gets each as a reserve would give it, and its receipt acks it.
#[tokio::test]
async fn every_job_handed_is_written_as_the_general_way_writes_it() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    push_nacked(&q, "again").await;
    push(
        &q,
        json!({"id": "plain", "topic": "t", "body": {"n": 1}, "delay_ms": 10, "ttr_ms": 1000}),
    )
    .await;
    push(
        &q,
        json!({"id": "traced", "topic": "t", "body": "x", "delay_ms": 10, "ttr_ms": 1000, "traceparent": TP}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut conn = redis.conn();
    let mut sub = conn.as_pubsub();
    sub.psubscribe(q.keys().wake_pattern(&WakeKind::Handoff("C1".into())))
        .unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let p = q.timer().promote_for(0, 100, &c1(5)).await.unwrap();
    assert_eq!((p.moved, p.handed.clone()), (3, vec![3]));
    let message: Vec<u8> = sub.get_message().unwrap().get_payload().unwrap();
    let handed = dq_core::reservations::handoff::decode_handoff(&message).unwrap();
    drop(sub);

    let mut ids: Vec<&str> = handed.iter().map(|j| j.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["again", "plain", "traced"]);
    let mut c = redis.conn();
    for j in &handed {
        let want = if j.id == "again" { 2 } else { 1 };
        assert_eq!(j.attempt, want, "{}", j.id);
        assert!(j.deadline >= p.now + 60_000, "{}: the least TTR is kept", j.id);
        let job = q.producer().get(&j.id).await.unwrap();
        assert_eq!((job.state, job.attempts), (State::Reserved, want), "{}", j.id);
        assert_eq!(job.traceparent.is_some(), j.id == "traced", "{}", j.id);
        assert_eq!(job.last_error.is_some(), j.id == "again", "{}", j.id);
        let key = format!("{}:job:{}", prefix(), j.id);
        let (got, stored): (Vec<u8>, Vec<u8>) = {
            let both: Vec<Vec<u8>> = rewrite().key(&key).key("copy").invoke(&mut c).unwrap();
            let _: () = redis::cmd("DEL").arg("copy").query(&mut c).unwrap();
            (both[0].clone(), both[1].clone())
        };
        assert_eq!(got, stored, "{}: the record rec_store writes", j.id);
    }
    let counts: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(format!("{}:counts", prefix()))
        .query(&mut c)
        .unwrap();
    assert_eq!(counts.get("t:reserved"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("t:delayed").copied().unwrap_or(0), 0, "{counts:?}");
    for j in &handed {
        q.reservations().ack(&j.id, &j.receipt).await.unwrap();
    }
    assert_eq!(q.producer().get("again").await.unwrap().state, State::Done);
}

/// `handoff.lua` alone, after `record.lua`, the publish line and `flow.lua`, as promote.lua has it: the
/// partition's due jobs given to `handoff_plain`, whose answer is returned, or "general" when it leaves
/// the call to the general way. KEYS: delay set, counts, reserved set, announced; ARGV as promote.lua's.
fn handoff_alone() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../src/store/scripts/record.lua"),
        "local publish = 'PUBLISH'\n",
        include_str!("../src/store/scripts/flow.lua"),
        include_str!("../src/store/scripts/handoff.lua"),
        "local t = redis.call('TIME')\n",
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
        "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES')\n",
        // The waiting workers from ARGV[7..], as promote.lua reads them for a call of one partition.
        "local nw = math.floor((#ARGV - 6) / 4)\n",
        "local left = {}\n",
        "for w = 1, nw do left[w] = ARGV[6 + (w - 1) * 4 + 3] + 0 end\n",
        "return handoff_plain(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], due, #due / 2, now, nil, ARGV[5],\n",
        "  false, ARGV[3], ARGV[4], 6, nw, left, 0) or 'general'\n",
    ))
}

/// A call with any job the fast way does not take (a priority, a flow key, a topic nobody waits for, or
/// more jobs than the worker's slots) is left to the general way with nothing written; a call of plain
/// jobs the worker takes is answered as promote.lua answers.
#[tokio::test]
async fn a_call_it_does_not_take_is_left_untouched() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let pre = prefix();
    let mut c = redis.conn();
    // Each case: the jobs pushed (all due at once), the worker's free slots, whether it is taken.
    let cases = [
        (vec![json!({"id": "a", "topic": "t", "body": 1})], 1, true),
        (
            vec![json!({"id": "b", "topic": "t", "body": 1, "priority": 5})],
            1,
            false,
        ),
        (
            vec![json!({"id": "c", "topic": "t", "body": 1, "flow_key": "k"})],
            1,
            false,
        ),
        (vec![json!({"id": "d", "topic": "u", "body": 1})], 1, false),
        (
            vec![
                json!({"id": "e", "topic": "t", "body": 1}),
                json!({"id": "f", "topic": "t", "body": 2}),
            ],
            1,
            false,
        ),
    ];
    for (jobs, slots, taken) in cases {
        let ids: Vec<String> = jobs.iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
        for mut j in jobs {
            j["delay_ms"] = json!(10);
            push(&q, j).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = snapshot(&mut c, "dq:*");
        let script = handoff_alone();
        let out: Value = promote_call(&script, false)
            .arg("t")
            .arg(format!("{pre}:handoff:C1"))
            .arg(slots)
            .arg(60_000)
            .invoke(&mut c)
            .unwrap();
        if taken {
            // Nobody listens on the channel in this test: the jobs go to the ready queue, in the same call.
            let Value::Array(out) = &out else {
                panic!("{ids:?}: {out:?}")
            };
            assert_eq!(out[0], Value::Int(ids.len() as i64), "{ids:?}: {out:?}");
            assert_eq!(out[4], Value::Int(0), "{ids:?}: handed to nobody");
            for id in &ids {
                assert_eq!(q.producer().get(id).await.unwrap().state, State::Ready, "{id}");
            }
        } else {
            assert_eq!(out, Value::BulkString(b"general".to_vec()), "{ids:?}");
            assert_eq!(snapshot(&mut c, "dq:*"), before, "{ids:?}: nothing written");
            // Out of the way of the next case.
            for id in &ids {
                q.producer().cancel(id).await.unwrap();
            }
        }
    }
}
