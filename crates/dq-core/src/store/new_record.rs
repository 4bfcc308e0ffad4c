//! A new job's record, packed here as `record.lua` writes it, so that `push.lua` need not build a table
//! and pack it for every job (that was a quarter of a pushed job's instructions in Redis): the script
//! only puts in the one value that depends on Redis's clock (invariant 2), packed, and joins the parts.
//!
//! The bytes are the ones `record.lua`'s `rec_store` writes for the same job: MessagePack's smallest
//! encoding of each value, the flow key in front of the array, the trace context after it (the state
//! then says 8 more). `tests/new_record.rs` checks them against `rec_store`'s on a real Redis.

use rmp::encode;

use crate::job::{Due, NewJob};

/// A created_at stored as the delay before the due time must stay below this (`record.lua`): a job
/// pushed with such a delay, which the beanstalkd protocol allows, is packed by the script, which then
/// stores the full time. (One due at a given time so far ahead, the script packs so itself.)
const LONGEST_DELAY_MS: u64 = 1_000_000_000_000;

/// A new job's record in three parts, for `push.lua` to join as `head`, `middle`, the value that
/// depends on the clock (packed by the script), `tail`. Head is the flow key, the array's header and the
/// state. For a job given by its delay, the state is its own (ready for a delay of 0, else delayed), the
/// middle is the topic and body, the clock's value is the due time (now + delay) and the tail starts
/// with the ttr, max attempts and delay (created_at, stored as the delay before the due time). For one
/// due at a given time, the state says delayed (the script adds 1, ready, when that time has come), the
/// middle runs from the topic to max attempts, the due time among them, and the clock's value is the
/// delay (due time − now; now itself from 10^12 ms on). Then the optional fields, then the trace
/// context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parts {
    pub head: Vec<u8>,
    pub middle: Vec<u8>,
    pub tail: Vec<u8>,
}

/// `job`'s record in [`Parts`], or `None` for a job whose record needs Redis's clock for more, which
/// `push.lua` then packs itself: one with a retry age (its end is the due time plus the age), one
/// delayed by 10^12 ms or more, and a fan-out's parent (stored done, with its children).
pub(crate) fn parts(job: &NewJob) -> Option<Parts> {
    if job.max_age_ms.is_some() || !job.fanout.is_empty() {
        return None;
    }
    if matches!(job.schedule, Due::Delay(d) if d >= LONGEST_DELAY_MS) {
        return None;
    }
    // An empty backoff list is none, as in push.lua's options.
    let priority = job.stored_priority();
    let backoff = job.backoff_ms.as_ref().filter(|l| !l.is_empty());
    let fields = match (priority, backoff) {
        (Some(_), _) => 15,
        (None, Some(_)) => 14,
        (None, None) => 7,
    };
    let trace = job.trace.as_ref().map(|t| t.stored());
    let w = |r: Result<(), encode::ValueWriteError>| r.expect("a Vec takes it");
    let uint = |v: &mut Vec<u8>, n: u64| {
        encode::write_uint(v, n).expect("a Vec takes it");
    };
    let mut head = Vec::with_capacity(8);
    if let Some(key) = &job.flow_key {
        w(encode::write_str(&mut head, key));
    }
    encode::write_array_len(&mut head, fields).expect("a Vec takes it");
    // 1 delayed, 2 ready; plus 8 when a trace context follows the array.
    let ready = matches!(job.schedule, Due::Delay(0));
    let state = if ready { 2 } else { 1 } + if trace.is_some() { 8 } else { 0 };
    encode::write_pfix(&mut head, state).expect("a Vec takes it");
    let mut middle = Vec::with_capacity(job.topic.len() + job.body.len() + 24);
    w(encode::write_str(&mut middle, &job.topic));
    w(encode::write_str(&mut middle, &job.body));
    let mut tail = Vec::with_capacity(16);
    let after_due = match job.schedule {
        Due::Delay(_) => &mut tail,
        Due::At(at) => {
            encode::write_sint(&mut middle, at).expect("a Vec takes it");
            &mut middle
        }
    };
    uint(after_due, job.ttr_ms);
    uint(after_due, u64::from(job.max_attempts));
    if let Due::Delay(delay) = job.schedule {
        // created_at, stored as the delay before the due time.
        uint(&mut tail, delay);
    }
    if fields > 7 {
        // Attempts, then none of: the reservation's deadline and receipt, the last error, the retries'
        // end and age.
        uint(&mut tail, 0);
        for _ in 0..5 {
            encode::write_bool(&mut tail, false).expect("a Vec takes it");
        }
        match backoff {
            Some(list) => {
                encode::write_array_len(&mut tail, list.len() as u32).expect("a Vec takes it");
                for &ms in list {
                    uint(&mut tail, ms);
                }
            }
            None => encode::write_bool(&mut tail, false).expect("a Vec takes it"),
        }
        if let Some(p) = priority {
            uint(&mut tail, u64::from(p));
        }
    }
    if let Some(t) = &trace {
        w(encode::write_str(&mut tail, t));
    }
    Some(Parts { head, middle, tail })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::DEFAULT_PRIORITY;

    fn job(schedule: Due) -> NewJob {
        NewJob {
            id: None,
            topic: "t".into(),
            body: "{}".into(),
            schedule,
            ttr_ms: 30_000,
            max_attempts: 10,
            dedup: None,
            max_age_ms: None,
            backoff_ms: None,
            priority: None,
            coalesce: None,
            flow_key: None,
            fanout: Vec::new(),
            trace: None,
        }
    }

    #[test]
    fn a_plain_delayed_job_is_seven_fields_around_its_due_time() {
        let p = parts(&job(Due::Delay(5000))).unwrap();
        assert_eq!(p.head, [0x97, 1]);
        assert_eq!(p.middle, [0xa1, b't', 0xa2, b'{', b'}']);
        // ttr 30000 (uint16), max attempts 10, delay 5000 (uint16).
        assert_eq!(p.tail, [0xcd, 0x75, 0x30, 10, 0xcd, 0x13, 0x88]);
    }

    #[test]
    fn a_job_due_now_is_ready() {
        let p = parts(&job(Due::Delay(0))).unwrap();
        assert_eq!(p.head[1], 2);
        assert_eq!(p.tail.last(), Some(&0));
    }

    #[test]
    fn priority_and_backoff_lengthen_the_array_and_the_default_priority_does_not() {
        let mut j = job(Due::Delay(1));
        j.priority = Some(DEFAULT_PRIORITY);
        assert_eq!(parts(&j).unwrap().head[0], 0x97);
        j.backoff_ms = Some(vec![]);
        assert_eq!(parts(&j).unwrap().head[0], 0x97, "an empty backoff list is none");
        j.backoff_ms = Some(vec![100, 70_000]);
        let p = parts(&j).unwrap();
        assert_eq!(p.head[0], 0x9e);
        assert_eq!(p.tail[p.tail.len() - 7..], [0x92, 100, 0xce, 0, 1, 0x11, 0x70]);
        j.priority = Some(0);
        let p = parts(&j).unwrap();
        assert_eq!(p.head[0], 0x9f);
        assert_eq!(p.tail.last(), Some(&0));
    }

    #[test]
    fn a_job_due_at_a_time_has_it_in_the_middle_and_says_delayed() {
        let p = parts(&job(Due::At(1 << 40))).unwrap();
        assert_eq!(p.head, [0x97, 1]);
        // The due time (uint64), ttr, max attempts.
        assert_eq!(p.middle[5..], [0xcf, 0, 0, 1, 0, 0, 0, 0, 0, 0xcd, 0x75, 0x30, 10]);
        assert!(p.tail.is_empty());
        let mut j = job(Due::At(-1));
        j.priority = Some(3);
        let p = parts(&j).unwrap();
        assert_eq!((p.head[0], p.middle[5]), (0x9f, 0xff));
        assert_eq!(p.tail, [0, 0xc2, 0xc2, 0xc2, 0xc2, 0xc2, 0xc2, 3]);
    }

    #[test]
    fn what_needs_the_clock_for_more_is_left_to_the_script() {
        assert!(parts(&job(Due::Delay(LONGEST_DELAY_MS))).is_none());
        assert!(parts(&job(Due::Delay(LONGEST_DELAY_MS - 1))).is_some());
        let mut j = job(Due::Delay(1));
        j.max_age_ms = Some(1);
        assert!(parts(&j).is_none());
        let mut j = job(Due::Delay(1));
        j.fanout = vec![job(Due::Delay(1))];
        assert!(parts(&j).is_none());
    }
}
