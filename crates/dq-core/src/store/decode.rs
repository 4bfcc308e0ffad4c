//! Script answers into types.

use std::collections::HashMap;

use redis::Value;
use serde_json::value::RawValue;

use crate::job::{DEFAULT_PRIORITY, Job, JobRef, State};
use crate::trace::TraceContext;

/// An integer, however Redis sent it.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A string, however Redis sent it.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// Why a record did not decode into a job.
pub(crate) enum ParseJob {
    /// There is no record.
    Missing,
    /// The record lacks a field or has one of the wrong kind.
    Bad(&'static str),
}

/// A job from its record's fields (as `get.lua` returns them).
pub(crate) fn parse_job(id: &str, mut f: HashMap<String, Vec<u8>>) -> Result<Job, ParseJob> {
    if f.is_empty() {
        return Err(ParseJob::Missing);
    }
    let mut take = |k: &str| f.remove(k).and_then(|v| String::from_utf8(v).ok());
    let num = |v: Option<String>, what| v.and_then(|s| s.parse::<i64>().ok()).ok_or(ParseJob::Bad(what));
    let topic = take("t").ok_or(ParseJob::Bad("no topic"))?;
    let body = take("b").ok_or(ParseJob::Bad("no body"))?;
    let state = take("s")
        .and_then(|s| State::parse(&s))
        .ok_or(ParseJob::Bad("no state"))?;
    let trace = take("tc").and_then(|tc| TraceContext::from_stored(&tc));
    let (traceparent, tracestate) = match trace {
        Some(t) => (Some(t.traceparent), t.tracestate),
        None => (None, None),
    };
    Ok(Job {
        id: id.to_string(),
        topic,
        body: RawValue::from_string(body).map_err(|_| ParseJob::Bad("body is not JSON"))?,
        state,
        run_at: num(take("r"), "no run_at")?,
        ttr_ms: num(take("ttr"), "no ttr")? as u64,
        // Absent until the first reservation.
        attempts: take("a").map_or(Ok(0), |a| num(Some(a), "bad attempts"))? as u32,
        max_attempts: num(take("m"), "no max_attempts")? as u32,
        created_at: num(take("c"), "no created_at")?,
        last_error: take("e"),
        deadline: take("d")
            .and_then(|s| s.parse().ok())
            .filter(|_| state == State::Reserved),
        retry_until: take("x").map(|x| num(Some(x), "bad retry end")).transpose()?,
        backoff_ms: take("bo")
            .map(|b| {
                b.split(',')
                    .map(|d| d.parse().map_err(|_| ParseJob::Bad("bad backoff list")))
                    .collect::<Result<Vec<u64>, _>>()
            })
            .transpose()?,
        priority: take("p").map_or(Ok(DEFAULT_PRIORITY as i64), |p| num(Some(p), "bad priority"))? as u32,
        flow_key: take("f"),
        parent: crate::job::parent_of(id).map(str::to_string),
        // Named by their ids' suffixes; their topics and states are read with them (`Producer::get`).
        children: take("ch")
            .map(|list| {
                list.split(',')
                    .map(|suffix| JobRef {
                        id: format!("{id}{}{suffix}", crate::job::CHILD_SEPARATOR),
                        topic: String::new(),
                        state: None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        traceparent,
        tracestate,
    })
}
