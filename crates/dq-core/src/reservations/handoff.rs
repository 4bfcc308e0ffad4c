//! Hand-offs: a timer's promotion reserves due jobs for dq-consumer workers that wait for their topic
//! and publishes them to the worker's process, so such a job costs Redis no ready-queue write, no
//! ready wake-up and no reserve call of its own.
//!
//! 1. A dq-consumer worker whose reserve found nothing tells the timers that it waits, with how many
//!    deliveries it may start ([`Waiting`], [`Queue::announce_waiting`]): a message on partition 0's
//!    timer channel, which every timer listens to. It says so again every second while it waits;
//!    a timer forgets a worker that has not for [`WAITING_FOR_MS`], and at once when told 0 slots.
//! 2. `promote.lua`, given the waiting workers, reserves due jobs of their topics for them (up to their
//!    slots) and publishes each worker's jobs on its process's hand-off channel in the job's partition
//!    (`<prefix>:{<tag>}:wake:to:<consumer>`). A publish that reaches nobody (the process is gone) sends
//!    those jobs to the ready queue instead, in the same call.
//! 3. The process ([`decode_handoff`]) gives the jobs to the topic's worker, which delivers them within
//!    its limits, or releases them to the ready queue when it cannot.
//!
//! Nothing is lost on the way: a handed job is reserved, so if the process dies between the publish and
//! the delivery, the job comes back when its reservation ends, as a reserved job always does.

use serde_json::value::RawValue;

use super::Reservations;
use crate::error::{Error, Result};
use crate::job::Reservation;
use crate::trace::TraceContext;

/// How long a timer keeps a waiting worker it has not heard from (the worker says it every second).
pub const WAITING_FOR_MS: u64 = 3000;

/// A dq-consumer worker waiting for jobs of its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The topic.
    pub topic: String,
    /// The worker's process id (its hand-off channels' suffix).
    pub consumer: String,
    /// Deliveries it may start now (0: it waits no more).
    pub slots: u32,
    /// Its reservations must last at least this long (its callback's timeout and a margin).
    pub least_ttr_ms: u64,
}

/// The first word of a waiting worker's message on the timer channel.
const WAITING_WORD: &str = "waiting";

impl Waiting {
    /// The message on the timer channel: `waiting <consumer> <slots> <least TTR ms> <topic>`.
    pub fn notice(&self) -> String {
        format!(
            "{WAITING_WORD} {} {} {} {}",
            self.consumer, self.slots, self.least_ttr_ms, self.topic
        )
    }

    /// Reads a message of the timer channel; `None` when it is not a waiting worker's.
    pub fn parse(message: &str) -> Option<Waiting> {
        let rest = message.strip_prefix(WAITING_WORD)?.strip_prefix(' ')?;
        let mut words = rest.splitn(4, ' ');
        let consumer = words.next()?.to_string();
        let slots = words.next()?.parse().ok()?;
        let least_ttr_ms = words.next()?.parse().ok()?;
        let topic = words.next()?.to_string();
        (!consumer.is_empty() && !topic.is_empty()).then_some(Waiting {
            topic,
            consumer,
            slots,
            least_ttr_ms,
        })
    }
}

impl Reservations {
    /// Tells the timers that a worker waits (or, with 0 slots, no longer does). Published on partition
    /// 0's timer channel, which every timer listens to.
    pub async fn announce_waiting(&self, w: &Waiting) -> Result<()> {
        let channel = self.partition_keys(0).timer_channel();
        self.store.publish(0, &channel, &w.notice()).await?;
        Ok(())
    }

    /// Counts reservations handed out, however they were made (a reserve, or a hand-off): the
    /// `dq_jobs_reserved_total` counter and the dashboard's first-delivery lateness.
    pub fn count_reserved(&self, jobs: &[Reservation]) {
        for r in jobs {
            metrics::counter!("dq_jobs_reserved_total", "topic" => r.topic.clone()).increment(1);
        }
        // Retries are left out: their due time is the backoff's, not the producer's.
        let now = crate::clock::unix_ms();
        let firsts = jobs.iter().filter(|r| r.attempt == 1).map(|r| now - r.run_at);
        self.activity.first_deliveries(firsts);
    }
}

/// A job in a hand-off message: id, topic, body (JSON text), attempt, receipt, deadline, run_at, ttr, and
/// the job's trace context (stored form) when it has one.
#[derive(serde::Deserialize)]
struct Entry(
    String,
    String,
    String,
    u32,
    String,
    i64,
    i64,
    u64,
    #[serde(default)] Option<String>,
);

impl Entry {
    /// An entry of a MessagePack message: an array of the fields above, numbers as integers.
    fn from_packed(v: rmpv::Value) -> Option<Entry> {
        use rmpv::Value;
        let Value::Array(f) = v else { return None };
        if !(8..=9).contains(&f.len()) {
            return None;
        }
        let text = |v: &Value| match v {
            Value::String(s) => s.as_str().map(str::to_owned),
            Value::Binary(b) => String::from_utf8(b.clone()).ok(),
            _ => None,
        };
        Some(Entry(
            text(&f[0])?,
            text(&f[1])?,
            text(&f[2])?,
            u32::try_from(f[3].as_u64()?).ok()?,
            text(&f[4])?,
            f[5].as_i64()?,
            f[6].as_i64()?,
            f[7].as_u64()?,
            match f.get(8) {
                Some(tc) => Some(text(tc)?),
                None => None,
            },
        ))
    }
}

/// Reads a hand-off message (see `promote.lua`) into reservations: a MessagePack array of jobs, each an
/// array of [`Entry`]'s fields. A message that begins with `[` is the same array as JSON, as a dq-timer
/// of a release before MessagePack hand-offs publishes it (a MessagePack array never begins so), so a
/// process upgraded first still reads the hand-offs of timers not yet upgraded.
pub fn decode_handoff(payload: &[u8]) -> Result<Vec<Reservation>> {
    let bad = |why: String| Error::unexpected(None, format!("malformed hand-off: {why}"));
    let entries: Vec<Entry> = if payload.first() == Some(&b'[') {
        serde_json::from_slice(payload).map_err(|e| bad(e.to_string()))?
    } else {
        let value = rmpv::decode::read_value(&mut &payload[..]).map_err(|e| bad(e.to_string()))?;
        let rmpv::Value::Array(jobs) = value else {
            return Err(bad("not an array".into()));
        };
        jobs.into_iter()
            .map(|j| {
                Entry::from_packed(j).ok_or_else(|| {
                    bad(
                        "a job is not [id, topic, body, attempt, receipt, deadline, run_at, ttr, trace context?]"
                            .into(),
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    entries
        .into_iter()
        .map(
            |Entry(id, topic, body, attempt, receipt, deadline, run_at, ttr_ms, tc)| {
                let trace = tc.and_then(|tc| TraceContext::from_stored(&tc));
                Ok(Reservation {
                    body: RawValue::from_string(body).map_err(|e| bad(format!("body of {id}: {e}")))?,
                    id,
                    topic,
                    attempt,
                    receipt,
                    deadline,
                    run_at,
                    ttr_ms,
                    // promote.lua never hands a job with a flow key: it waits for its key's turn.
                    flow_key: None,
                    traceparent: trace.as_ref().map(|t| t.traceparent.clone()),
                    tracestate: trace.and_then(|t| t.tracestate),
                })
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_notice_reads_back() {
        let w = Waiting {
            topic: "orders close".into(),
            consumer: "01JC".into(),
            slots: 64,
            least_ttr_ms: 15000,
        };
        assert_eq!(w.notice(), "waiting 01JC 64 15000 orders close");
        assert_eq!(Waiting::parse(&w.notice()), Some(w));
        for other in [
            "dq:{1.2}:delayed 1700000000000",
            "waiting",
            "waiting a b c d",
            "waiting a 1 2 ",
            "waitingx a 1 2 t",
        ] {
            assert_eq!(Waiting::parse(other), None, "{other}");
        }
    }

    /// `jobs` as promote.lua packs a hand-off (cmsgpack: strings as str, whole numbers as integers).
    fn packed(jobs: &[Vec<rmpv::Value>]) -> Vec<u8> {
        let value = rmpv::Value::Array(jobs.iter().map(|j| rmpv::Value::Array(j.clone())).collect());
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &value).unwrap();
        out
    }

    fn job(id: &str, body: &str, tc: Option<&str>) -> Vec<rmpv::Value> {
        let mut v: Vec<rmpv::Value> = vec![
            id.into(),
            "t".into(),
            body.into(),
            1.into(),
            "ab.1".into(),
            1700000005000i64.into(),
            1700000000000i64.into(),
            30000.into(),
        ];
        v.extend(tc.map(rmpv::Value::from));
        v
    }

    #[test]
    fn a_handoff_message_reads_as_reservations() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let stored = format!("{tp} k=v;w");
        let message = packed(&[job("01A", r#"{"a":1}"#, Some(&stored)), job("01B", "2", None)]);
        assert_eq!(message[0], 0x92, "an array of two, as cmsgpack packs it");
        let jobs = decode_handoff(&message).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].id.as_str(), jobs[0].topic.as_str()), ("01A", "t"));
        assert_eq!(jobs[0].body.get(), r#"{"a":1}"#);
        assert_eq!((jobs[0].attempt, jobs[0].receipt.as_str()), (1, "ab.1"));
        assert_eq!((jobs[0].deadline, jobs[0].run_at), (1700000005000, 1700000000000));
        assert_eq!(jobs[0].ttr_ms, 30000);
        assert_eq!(jobs[0].traceparent.as_deref(), Some(tp));
        assert_eq!(jobs[0].tracestate.as_deref(), Some("k=v;w"));
        assert_eq!((jobs[1].id.as_str(), jobs[1].body.get()), ("01B", "2"));
        assert_eq!(
            (jobs[1].traceparent.as_deref(), jobs[1].tracestate.as_deref()),
            (None, None)
        );

        let mut short = job("01A", "1", None);
        short.pop();
        let mut negative = job("01A", "1", None);
        negative[3] = (-1).into();
        for bad in [
            packed(&[short]),
            packed(&[negative]),
            packed(&[job("01A", "not json", None)]),
            vec![0x92, 0x01],
            vec![0x01],
            vec![],
        ] {
            assert!(decode_handoff(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_json_handoff_of_an_earlier_timer_reads_too() {
        let jobs = decode_handoff(br#"[["01A","t","{\"a\":1}",1,"ab.1",1700000005000,1700000000000,30000]]"#).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].id.as_str(), jobs[0].body.get()), ("01A", r#"{"a":1}"#));
        assert_eq!(
            (jobs[0].deadline, jobs[0].run_at, jobs[0].ttr_ms),
            (1700000005000, 1700000000000, 30000)
        );
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let traced = decode_handoff(format!(r#"[["01A","t","1",1,"ab.1",1,1,1,"{tp} k=v;w"]]"#).as_bytes()).unwrap();
        assert_eq!(traced[0].traceparent.as_deref(), Some(tp));
        assert!(decode_handoff(b"[[1]]").is_err());
        assert!(decode_handoff(br#"[["01A","t","not json",1,"ab.1",1,1,1]]"#).is_err());
    }
}
