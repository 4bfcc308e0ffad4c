//! The delivery graph: jobs that start jobs (docs/architecture.md, "Fan-out and jobs that start jobs").
//!
//! Two ways a job starts others, both written by one script together with what starts them, in the
//! starting job's partition:
//!
//! - **Fan-out**: a push to a topic with `fanout: [topic, …]` makes one job per listed topic, stored by
//!   the same `push.lua` call as the push itself, which is kept as their parent (state `done`).
//! - **Pushed with a success**: a callback's 2xx answer `{"dq": {"push": [job, …]}}` (allowed by the
//!   topic's `callback.allow_push`), or a pull ack's `push`, stores its jobs in the same `ack.lua` call
//!   that acks the job, so they exist if and only if the job succeeded.
//!
//! A child's id is `<parent id>~<suffix>` (its fan-out topic, or its index in the answer), so the same
//! success or the same push sent twice makes no second child, and every job of a graph lives in its
//! root's partition ([`crate::store::partition::partition_of`]), where one script sees them all.

use dq_api::RawBody;
use globset::{Glob, GlobSetBuilder};

use crate::admin::topics::Topics;
use crate::error::{Error, Result};
use crate::job::{NewJob, PushRequest, check_child_id, shorten, validate_topic};
use crate::producer::Producer;
use crate::topic::TopicConfig;
use crate::trace::TraceContext;

/// The most topics a fan-out lists.
pub const MAX_FANOUT: usize = 32;

/// The most jobs one answer or ack pushes.
pub const MAX_PUSHES: usize = 100;

/// The most patterns in `callback.allow_push`.
pub const MAX_ALLOW_PUSH: usize = 32;

/// Checks a registration's `fanout` and `callback.allow_push`.
pub(crate) fn check_topic(config: &TopicConfig) -> Result<()> {
    let bad = |m: String| Err(Error::Invalid(m));
    if !config.fanout.is_empty() {
        if config.fanout.len() > MAX_FANOUT {
            return bad(format!(
                "`fanout` lists {} topics, the limit is {MAX_FANOUT}",
                config.fanout.len()
            ));
        }
        for (i, topic) in config.fanout.iter().enumerate() {
            validate_topic(topic).map_err(|e| Error::Invalid(format!("`fanout[{i}]`: {e}")))?;
            if config.fanout[..i].contains(topic) {
                return bad(format!("`fanout` lists `{topic}` twice"));
            }
        }
        if config.callback.is_some() || config.flow.is_some() {
            return bad(
                "a `fanout` topic has no `callback` or `flow` of its own: its jobs are its listed topics' \
                 (give those their callbacks and limits)"
                    .into(),
            );
        }
    }
    if let Some(cb) = &config.callback {
        if cb.allow_push.len() > MAX_ALLOW_PUSH {
            return bad(format!(
                "`callback.allow_push` holds {} patterns, the limit is {MAX_ALLOW_PUSH}",
                cb.allow_push.len()
            ));
        }
        for p in &cb.allow_push {
            Glob::new(p).map_err(|e| Error::Invalid(format!("`callback.allow_push`: pattern `{p}`: {e}")))?;
        }
    }
    Ok(())
}

/// Whether `patterns` (`callback.allow_push`) allow an answer to push to `topic`.
pub fn allowed(patterns: &[String], topic: &str) -> bool {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        // Checked at registration; a pattern that does not parse allows nothing.
        if let Ok(g) = Glob::new(p) {
            set.add(g);
        }
    }
    set.build().is_ok_and(|s| s.is_match(topic))
}

impl Producer {
    /// Checks a push against its topic's registration in `topics` and fills in defaults
    /// ([`Producer::validate_for`]); a push to a fan-out topic gets its children, one per listed topic,
    /// each checked against its own topic's registration.
    pub fn prepare(&self, req: PushRequest, topics: &Topics) -> Result<NewJob> {
        let config = topics.get(&req.topic);
        let Some(config) = config.filter(|c| !c.fanout.is_empty()) else {
            return self.validate_for(req, config);
        };
        if req.flow_key.is_some() || req.coalesce_key.is_some() {
            return Err(Error::Invalid(format!(
                "topic `{}` fans out: its pushes take no `flow_key` or `coalesce_key` (give them to jobs of the \
                 listed topics)",
                req.topic
            )));
        }
        let mut children = Vec::with_capacity(config.fanout.len());
        for topic in &config.fanout {
            let target = topics.get(topic);
            if target.is_some_and(|t| !t.fanout.is_empty()) {
                return Err(Error::Invalid(format!(
                    "topic `{}` fans out to `{topic}`, which fans out too: fan-outs do not nest",
                    req.topic
                )));
            }
            let child = PushRequest {
                topic: topic.clone(),
                id: None,
                dedup_key: None,
                dedup_ms: None,
                ..req.clone()
            };
            children.push(self.validate_for(child, target)?);
        }
        let mut job = self.validate_for(req, Some(config))?;
        if let Some(id) = &job.id {
            for child in &children {
                check_child_id(id, &child.topic)?;
            }
        }
        job.fanout = children;
        Ok(job)
    }

    /// Checks the jobs a success of job `parent` pushes (a callback's answer, a pull ack), each as a
    /// push ([`Producer::prepare`]) with what a child may not have refused: its own `id` (a child's is
    /// `<parent>~<index>`), a `dedup_key`, `coalesce_key` or `flow_key` (each names a place of its own,
    /// where the parent's script cannot write). `allow` says whether a topic may be pushed to; a job
    /// without a trace context of its own joins `trace` (its parent's).
    pub fn prepare_pushes(
        &self,
        parent: &str,
        trace: Option<&TraceContext>,
        pushes: &[RawBody],
        topics: &Topics,
        allow: impl Fn(&str) -> Result<()>,
    ) -> Result<Vec<NewJob>> {
        if pushes.len() > MAX_PUSHES {
            return Err(Error::Invalid(format!(
                "`push` holds {} jobs, the limit is {MAX_PUSHES}",
                pushes.len()
            )));
        }
        let mut jobs = Vec::with_capacity(pushes.len());
        for (i, raw) in pushes.iter().enumerate() {
            let at = |e: Error| match e {
                Error::Invalid(m) => Error::Invalid(format!("push[{i}]: {m}")),
                Error::TooLarge(m) => Error::TooLarge(format!("push[{i}]: {m}")),
                Error::Forbidden(m) => Error::Forbidden(format!("push[{i}]: {m}")),
                other => other,
            };
            if !raw.get().starts_with('{') {
                return Err(Error::Invalid(format!("push[{i}]: each job must be a JSON object")));
            }
            let req: PushRequest = serde_json::from_str(raw.get())
                .map_err(|e| Error::Invalid(format!("push[{i}]: {}", shorten(&e.to_string()))))?;
            for (given, field) in [
                (req.id.is_some(), "id"),
                (req.dedup_key.is_some(), "dedup_key"),
                (req.coalesce_key.is_some(), "coalesce_key"),
                (req.flow_key.is_some(), "flow_key"),
            ] {
                if given {
                    return Err(at(Error::Invalid(format!(
                        "a pushed job takes no `{field}` (its id is `{parent}~{i}`, made from its parent's, so \
                         that it is stored once)"
                    ))));
                }
            }
            validate_topic(&req.topic).map_err(at)?;
            allow(&req.topic).map_err(at)?;
            let suffix = i.to_string();
            check_child_id(parent, &suffix).map_err(at)?;
            let mut job = self.prepare(req, topics).map_err(at)?;
            // A job without a trace of its own joins its parent's (and so do its fan-out children).
            if job.trace.is_none() {
                job.trace = trace.cloned();
                for child in &mut job.fanout {
                    child.trace = trace.cloned();
                }
            }
            for child in &job.fanout {
                check_child_id(&format!("{parent}~{suffix}"), &child.topic).map_err(at)?;
            }
            jobs.push(job);
        }
        Ok(jobs)
    }
}

/// The jobs an ack pushes, packed as `ack.lua` takes them (its header): per job, and after a fan-out's
/// job its children, `{suffix, topic, body, delay_ms, run_at, ttr_ms, max_attempts, max_age_ms,
/// backoff, priority, fan-out ttl, children's suffixes, trace context}`, `false` for what is absent. A fan-out's
/// parent is kept `fanout_ttl_ms` after its due time.
pub(crate) fn pack_pushes(jobs: &[NewJob], fanout_ttl_ms: u64) -> Vec<u8> {
    use rmp::encode;
    let mut out = Vec::new();
    let w = &mut out;
    let n: usize = jobs.iter().map(|j| 1 + j.fanout.len()).sum();
    // Writing to a Vec cannot fail.
    encode::write_array_len(w, n as u32).expect("a Vec takes it");
    let put = |w: &mut Vec<u8>, suffix: &str, job: &NewJob, fanout: bool| {
        encode::write_array_len(w, 13).expect("a Vec takes it");
        encode::write_str(w, suffix).expect("a Vec takes it");
        encode::write_str(w, &job.topic).expect("a Vec takes it");
        encode::write_str(w, &job.body).expect("a Vec takes it");
        let none = |w: &mut Vec<u8>| encode::write_bool(w, false).expect("a Vec takes it");
        match job.schedule {
            crate::job::Due::Delay(d) => {
                encode::write_uint(w, d).expect("a Vec takes it");
                none(w);
            }
            crate::job::Due::At(at) => {
                none(w);
                encode::write_sint(w, at).expect("a Vec takes it");
            }
        }
        encode::write_uint(w, job.ttr_ms).expect("a Vec takes it");
        encode::write_uint(w, job.max_attempts as u64).expect("a Vec takes it");
        match job.max_age_ms {
            Some(a) => drop(encode::write_uint(w, a).expect("a Vec takes it")),
            None => none(w),
        }
        match &job.backoff_ms {
            Some(list) => {
                encode::write_array_len(w, list.len() as u32).expect("a Vec takes it");
                for d in list {
                    encode::write_uint(w, *d).expect("a Vec takes it");
                }
            }
            None => none(w),
        }
        match job.priority.filter(|&p| p != crate::job::DEFAULT_PRIORITY) {
            Some(p) => drop(encode::write_uint(w, p as u64).expect("a Vec takes it")),
            None => none(w),
        }
        if fanout {
            encode::write_uint(w, fanout_ttl_ms).expect("a Vec takes it");
            encode::write_array_len(w, job.fanout.len() as u32).expect("a Vec takes it");
            for child in &job.fanout {
                encode::write_str(w, &child.topic).expect("a Vec takes it");
            }
        } else {
            none(w);
            none(w);
        }
        match &job.trace {
            Some(t) => encode::write_str(w, &t.stored()).expect("a Vec takes it"),
            None => none(w),
        }
    };
    for (i, job) in jobs.iter().enumerate() {
        let suffix = i.to_string();
        put(w, &suffix, job, !job.fanout.is_empty());
        for child in &job.fanout {
            put(w, &format!("{suffix}~{}", child.topic), child, false);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> TopicConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn fanout_and_allow_push_are_checked_at_registration() {
        assert!(check_topic(&config(r#"{"fanout": ["a", "b"]}"#)).is_ok());
        let many: Vec<String> = (0..33).map(|i| format!("\"t{i}\"")).collect();
        for (json, needle) in [
            (format!(r#"{{"fanout": [{}]}}"#, many.join(",")), "limit is 32"),
            (r#"{"fanout": ["a", "a"]}"#.to_string(), "twice"),
            (r#"{"fanout": ["a b"]}"#.to_string(), "fanout[0]"),
            (
                r#"{"fanout": ["a"], "callback": {"url": "http://x"}}"#.to_string(),
                "no `callback` or `flow`",
            ),
            (
                r#"{"fanout": ["a"], "flow": {}}"#.to_string(),
                "no `callback` or `flow`",
            ),
            (
                r#"{"callback": {"url": "http://x", "allow_push": ["a[" ]}}"#.to_string(),
                "callback.allow_push",
            ),
        ] {
            let err = check_topic(&config(&json)).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }

    #[test]
    fn allow_push_patterns_are_globs_and_empty_allows_nothing() {
        let p = vec!["mail.*".to_string(), "review".to_string()];
        assert!(allowed(&p, "mail.receipt"));
        assert!(allowed(&p, "review"));
        assert!(!allowed(&p, "reviews"));
        assert!(!allowed(&[], "review"));
    }

    #[test]
    fn pushes_pack_as_ack_lua_reads_them() {
        let job = |topic: &str| NewJob {
            id: None,
            topic: topic.into(),
            body: "{}".into(),
            schedule: crate::job::Due::Delay(5),
            ttr_ms: 30_000,
            max_attempts: 3,
            dedup: None,
            max_age_ms: None,
            backoff_ms: Some(vec![1, 2]),
            priority: Some(7),
            coalesce: None,
            flow_key: None,
            fanout: Vec::new(),
            trace: None,
        };
        let mut fan = job("fan");
        fan.fanout = vec![job("a"), job("b")];
        let packed = pack_pushes(&[job("x"), fan], 60_000);
        let v = rmpv::decode::read_value(&mut packed.as_slice()).unwrap();
        let all = v.as_array().unwrap();
        assert_eq!(all.len(), 4);
        let suffixes: Vec<&str> = all.iter().map(|j| j[0].as_str().unwrap()).collect();
        assert_eq!(suffixes, ["0", "1", "1~a", "1~b"]);
        assert_eq!(all[0][3].as_u64(), Some(5));
        assert_eq!(all[0][4].as_bool(), Some(false));
        assert_eq!(all[0][9].as_u64(), Some(7));
        assert_eq!(all[1][10].as_u64(), Some(60_000));
        assert_eq!(all[1][11].as_array().unwrap().len(), 2);
        assert_eq!(all[2][10].as_bool(), Some(false));
    }
}
