//! promote.lua's fast way for plain promotions (`promote_plain.lua`): a call that no worker waits for,
//! whose every due job is a plain one. On a real Redis: what it writes is what promote.lua's general
//! way writes for the same jobs, and a call it does not take is left untouched for the general way.

mod common;

use std::time::Duration;

use dq_core::State;
use dq_harness::RedisServer;
use redis::Value;
use serde_json::json;

use common::{one_partition, one_partition_prefix as prefix, promote_call, push, push_nacked, snapshot};

const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// `promote_plain.lua` alone, after `record.lua`, the publish line and `flow.lua`, as promote.lua has
/// it: the partition's due jobs given to `promote_plain`, whose answer is returned, or "general" when
/// it leaves the call to the general way. KEYS: delay set, counts; ARGV: prefix, "1" when spans are
/// wanted, ready wake channel.
fn plain_alone() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../src/store/scripts/record.lua"),
        "local publish = 'PUBLISH'\n",
        include_str!("../src/store/scripts/flow.lua"),
        include_str!("../src/store/scripts/promote_plain.lua"),
        "local t = redis.call('TIME')\n",
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
        "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES')\n",
        "return promote_plain(KEYS[1], KEYS[2], ARGV[1], due, #due / 2, now, nil, ARGV[2] == '1', ARGV[3])\n",
        "  or 'general'\n",
    ))
}

/// promote.lua with its plain way taken out (`promote_plain` always declines), so that every call goes
/// the general way.
fn general_only() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../src/store/scripts/record.lua"),
        "local publish = 'PUBLISH'\n",
        include_str!("../src/store/scripts/flow.lua"),
        "local function promote_plain() return nil end\n",
        include_str!("../src/store/scripts/handoff.lua"),
        include_str!("../src/store/scripts/promote.lua"),
    ))
}

/// A promotion of the one partition, no worker waiting, spans wanted when `spans`: by the plain way
/// alone (`fast`: `plain_alone`'s KEYS and ARGV) or by promote.lua's general way alone (its KEYS and
/// first six ARGV).
fn promote(c: &mut redis::Connection, fast: bool, spans: bool) -> Value {
    if !fast {
        return promote_call(&general_only(), spans).invoke(c).unwrap();
    }
    let pre = prefix();
    plain_alone()
        .key(format!("{pre}:delayed"))
        .key(format!("{pre}:counts"))
        .arg(&pre)
        .arg(if spans { "1" } else { "" })
        .arg(format!("{pre}:wake:ready"))
        .invoke(c)
        .unwrap()
}

/// Every key's `DUMP`, to put the same data back.
fn dump(c: &mut redis::Connection) -> Vec<(String, Vec<u8>)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.into_iter()
        .map(|k| {
            let d: Vec<u8> = redis::cmd("DUMP").arg(&k).query(c).unwrap();
            (k, d)
        })
        .collect()
}

fn restore(c: &mut redis::Connection, dumped: &[(String, Vec<u8>)]) {
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    for (k, d) in dumped {
        let _: () = redis::cmd("RESTORE").arg(k).arg(0).arg(d).query(c).unwrap();
    }
}

/// Plain jobs of two topics (one traced, whose trace context no span wants; one on its second attempt,
/// with an error and an attempt in its record) and an id whose record was deleted by hand, all due: the
/// fast way moves them and leaves every key as the general way leaves it, and answers as it does.
#[tokio::test]
async fn it_writes_what_the_general_way_writes() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    push_nacked(&q, "again").await;
    push(&q, json!({"id": "a", "topic": "t", "body": {"n": 1}, "delay_ms": 10})).await;
    push(&q, json!({"id": "b", "topic": "u", "body": "x", "delay_ms": 10})).await;
    push(
        &q,
        json!({"id": "c", "topic": "t", "body": 2, "delay_ms": 10, "traceparent": TP}),
    )
    .await;
    push(&q, json!({"id": "ghost", "topic": "t", "body": 0, "delay_ms": 10})).await;
    push(&q, json!({"id": "later", "topic": "t", "body": 0, "delay_ms": 600_000})).await;
    let mut c = redis.conn();
    let _: () = redis::cmd("DEL")
        .arg(format!("{}:job:ghost", prefix()))
        .query(&mut c)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let before = dump(&mut c);
    let fast = promote(&mut c, true, false);
    let after_fast = snapshot(&mut c, "*");
    for id in ["again", "a", "b", "c"] {
        assert_eq!(q.producer().get(id).await.unwrap().state, State::Ready, "{id}");
    }
    restore(&mut c, &before);
    let general = promote(&mut c, false, false);
    let after_general = snapshot(&mut c, "*");
    assert_eq!(after_fast, after_general, "the same keys, written the same");

    // The answers: {moved, next due, now, workers (0), lateness of each moved job}; the general way's
    // is one partition's in promote.lua's list. `now` and the lateness follow the clock.
    let Value::Array(fast) = fast else { panic!("{fast:?}") };
    let Value::Array(mut general) = general else {
        panic!("{general:?}")
    };
    let Value::Array(general) = general.remove(0) else {
        panic!("{general:?}")
    };
    assert_eq!(fast.len(), general.len(), "{fast:?} / {general:?}");
    assert_eq!(
        fast[0],
        Value::Int(4),
        "four jobs moved, the ghost only out of the delay set"
    );
    assert_eq!((&fast[0], &fast[1], &fast[3]), (&general[0], &general[1], &general[3]));
    let later = q.producer().get("later").await.unwrap();
    assert_eq!(
        fast[1],
        Value::BulkString(later.run_at.to_string().into_bytes()),
        "the next due time is the job left"
    );
}

/// A call with any job the fast way does not take (a priority, a flow key, a trace context a span
/// wants, a flow key's parked turn) is left to the general way with nothing written.
#[tokio::test]
async fn a_call_it_does_not_take_is_left_untouched() {
    let redis = RedisServer::start();
    let q = one_partition(&redis).await;
    let mut c = redis.conn();
    // Each case: the jobs pushed (all due at once, beside a plain one), and whether spans are wanted.
    let cases = [
        (json!({"id": "p", "topic": "t", "body": 1, "priority": 5}), false),
        (json!({"id": "k", "topic": "t", "body": 1, "flow_key": "k"}), false),
        (json!({"id": "s", "topic": "t", "body": 1, "traceparent": TP}), true),
    ];
    for (job, spans) in cases {
        let id = job["id"].as_str().unwrap().to_string();
        for mut j in [json!({"id": "plain", "topic": "t", "body": 0}), job] {
            j["delay_ms"] = json!(10);
            push(&q, j).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = snapshot(&mut c, "*");
        let out = promote(&mut c, true, spans);
        assert_eq!(out, Value::BulkString(b"general".to_vec()), "{id}");
        assert_eq!(snapshot(&mut c, "*"), before, "{id}: nothing written");
        // Out of the way of the next case.
        for id in ["plain", id.as_str()] {
            q.producer().cancel(id).await.unwrap();
        }
    }
    // A flow key's turn parked in the delay set (a member `~<topic> <key>`), due.
    let pre = prefix();
    push(&q, json!({"id": "plain", "topic": "t", "body": 0, "delay_ms": 10})).await;
    let _: () = redis::cmd("ZADD")
        .arg(format!("{pre}:delayed"))
        .arg(1)
        .arg("~t k")
        .query(&mut c)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = snapshot(&mut c, "*");
    let out = promote(&mut c, true, false);
    assert_eq!(out, Value::BulkString(b"general".to_vec()), "a parked turn");
    assert_eq!(snapshot(&mut c, "*"), before, "a parked turn: nothing written");
}
