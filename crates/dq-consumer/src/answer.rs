//! What a callback's 2xx answer may ask of dq besides success: `{"dq": {"push": [job, …]}}`, jobs to
//! store together with the delivery's success (docs/api.md, "Jobs that start jobs"). They are checked
//! here and by `dq_core::Producer::prepare_pushes`; the topic's `callback.allow_push` says where they may
//! go. Anything wrong fails the delivery, with what was wrong as its error: nothing is pushed and the
//! job is retried like any failed delivery.

use dq_core::admin::topics::Topics;
use dq_core::graph;
use dq_core::trace::TraceContext;
use dq_core::{NewJob, Producer};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::plan::Plan;

/// An answer, for its `dq` member only (every other member is the callback's own business).
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    dq: Option<&'a RawValue>,
}

/// The `dq` member.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    push: Vec<Box<RawValue>>,
}

/// The jobs an answer pushes (none for an answer without a `dq` member), or why its `dq` member is
/// malformed.
pub fn pushes(body: &[u8]) -> Result<Vec<Box<RawValue>>, String> {
    // Most answers never name it: they cost no second parse.
    if !body.windows(4).any(|w| w == b"\"dq\"") {
        return Ok(Vec::new());
    }
    // (serde would read a struct from an array too: `["dq"]` is no object.)
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Ok(Vec::new());
    }
    // Not a JSON object (or not JSON): no `dq` member.
    let Ok(Answer { dq: Some(dq) }) = serde_json::from_slice::<Answer>(body) else {
        return Ok(Vec::new());
    };
    serde_json::from_str::<Block>(dq.get())
        .map(|b| b.push)
        .map_err(|e| format!("the answer's `dq` is malformed ({e}): it is {{\"push\": [job, …]}}"))
}

/// The jobs of `pushes` checked for the job `parent` of the topic `plan` delivers, against the
/// registrations `topics`: each must go to a topic its `callback.allow_push` names. A job without a
/// trace context of its own joins `trace`, the one the callback was sent. The error says why they are refused, for `last_error`.
pub fn checked(
    producer: &Producer,
    plan: &Plan,
    topics: &Topics,
    parent: &str,
    trace: Option<&TraceContext>,
    pushes: &[Box<RawValue>],
) -> Result<Vec<NewJob>, String> {
    if pushes.is_empty() {
        return Ok(Vec::new());
    }
    let allow = &plan.callback.allow_push;
    if allow.is_empty() {
        return Err(
            "the answer's `dq.push` is refused: the topic's `callback.allow_push` allows no topic (an answer \
             cannot push by default)"
                .into(),
        );
    }
    let may = |topic: &str| {
        if graph::allowed(allow, topic) {
            Ok(())
        } else {
            Err(dq_core::Error::Invalid(format!(
                "topic `{topic}` is not in the topic's `callback.allow_push`"
            )))
        }
    };
    producer
        .prepare_pushes(parent, trace, pushes, topics, may)
        .map_err(|e| format!("the answer's `dq.push` is refused: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_answer_with_a_dq_member_pushes() {
        for body in [&b"ok"[..], b"{\"ok\":true}", b"[\"dq\"]", b"\"dq\"", b"{\"a\":\"dq\"}"] {
            assert!(pushes(body).unwrap().is_empty(), "{}", String::from_utf8_lossy(body));
        }
        let two = pushes(br#"{"ok":1,"dq":{"push":[{"topic":"a","body":{"z":1,"a":2}},{"topic":"b","body":1}]}}"#);
        let two = two.unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].get(), r#"{"topic":"a","body":{"z":1,"a":2}}"#, "kept as written");
        for bad in [
            &br#"{"dq":5}"#[..],
            br#"{"dq":{"push":{}}}"#,
            br#"{"dq":{"pushes":[]}}"#,
        ] {
            let err = pushes(bad).unwrap_err();
            assert!(err.contains("`dq` is malformed"), "{err}");
        }
    }
}
