//! `dq-bench push`: how fast can producers push?
//!
//! C tasks, each with its own keep-alive connection, claim jobs from a shared
//! counter and push them — one per `POST /v1/jobs`, or B per
//! `POST /v1/jobs/batch` — until N jobs are done. Request bodies are built
//! once before the timed phase, so the loop only clones `Bytes`. Jobs are
//! delayed (an hour by default) so the push path is measured alone, without
//! the timer moving them. The same push phase fills the queue for
//! `reserve-ack`.
//!
//! A push answered 503 with an `id` (dq could not tell whether it was stored) is pushed again with that
//! id, as a producer should, so the bench never stores a job twice: a 201 or a 409 (stored by the first
//! attempt) then counts it as pushed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use dq_api::{BatchRequest, PushRequest};
use hyper::Uri;
use serde_json::value::RawValue;

use crate::http::{Conn, Reply, Target};
use crate::report::{self, Errors, Hist, Report};

/// Stop a task after this many transport failures in a row (server gone).
pub const MAX_TRANSPORT_FAILURES: u32 = 10;

/// Options of `dq-bench push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// Jobs to push in the timed phase.
    #[arg(short = 'n', long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jobs: u64,
    /// Concurrent connections (one task each).
    #[arg(short = 'c', long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Jobs per request: 1 uses POST /v1/jobs, more uses POST /v1/jobs/batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Size of each job's body: a JSON string whose JSON text is exactly this many bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(2..))]
    pub body_bytes: u32,
    /// Topic to push to.
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Delay of each job in ms (long, so the jobs stay delayed).
    #[arg(long, default_value_t = 3_600_000)]
    pub delay_ms: u64,
    /// Jobs pushed before the timed phase, not measured.
    #[arg(long, default_value_t = 2000)]
    pub warmup: u64,
    /// Each job's priority (none: the default, which is not sent).
    #[arg(long)]
    pub priority: Option<u32>,
    /// Each job's W3C `traceparent` field (none: not sent), to measure what a trace context costs.
    #[arg(long)]
    pub traceparent: Option<String>,
    /// Each job's W3C `tracestate` field, with `--traceparent`.
    #[arg(long, requires = "traceparent")]
    pub tracestate: Option<String>,
}

/// Runs `dq-bench push`.
pub async fn run(target: &Arc<Target>, args: &PushArgs) -> Result<Report> {
    let plan = Arc::new(
        PushPlan::new(
            target,
            &args.topic,
            body_of_size(args.body_bytes as usize),
            args.delay_ms,
            args.batch as usize,
        )?
        .priority(args.priority)
        .trace(args.traceparent.clone(), args.tracestate.clone()),
    );
    let conns = Conn::connect_many(target, args.connections as usize).await?;

    let conns = if args.warmup > 0 {
        let warm = push_phase(conns, &plan, args.warmup).await?;
        if let Some(e) = warm.errors.first() {
            bail!("warm-up failed ({} errors); first: {e}", warm.errors.count());
        }
        warm.conns
    } else {
        conns
    };

    let done = push_phase(conns, &plan, args.jobs).await?;
    Ok(
        Report::new("push", done.jobs_ok, done.elapsed, "request", &done.hist, &done.errors)
            .with("connections", args.connections)
            .with("batch", args.batch)
            .with("body_bytes", args.body_bytes)
            .with("topic", args.topic.as_str())
            .with("delay_ms", args.delay_ms)
            .with("warmup", args.warmup)
            .with("priority", args.priority.map_or("none".to_string(), |p| p.to_string()))
            .with("traceparent", args.traceparent.as_deref().unwrap_or("none"))
            .with("requests", done.hist.len()),
    )
}

/// A JSON string body whose serialized text is exactly `size` bytes
/// (`size` ≥ 2: the two quotes plus `size - 2` × `x`).
pub fn body_of_size(size: usize) -> String {
    assert!(size >= 2, "a JSON string body is at least 2 bytes");
    let mut s = String::with_capacity(size);
    s.push('"');
    s.extend(std::iter::repeat_n('x', size - 2));
    s.push('"');
    s
}

/// Times a push answered 503 with an id is pushed again with it.
const SAME_ID_RETRIES: usize = 3;

/// What to push, with its request body built once.
pub struct PushPlan {
    topic: String,
    body: Box<RawValue>,
    delay_ms: u64,
    batch: usize,
    /// Each job's priority, when it is sent.
    priority: Option<u32>,
    /// Each job's `traceparent` and `tracestate`, when they are sent.
    trace: Option<(String, Option<String>)>,
    uri: Uri,
    /// The request body for a full request (`batch` jobs).
    full: Bytes,
}

impl PushPlan {
    /// Plans pushes of `body` (JSON text) to `topic`, `batch` jobs per request.
    pub fn new(target: &Target, topic: &str, body: String, delay_ms: u64, batch: usize) -> Result<Self> {
        let body = RawValue::from_string(body).context("the job body is not valid JSON")?;
        let uri = target.uri(if batch > 1 { "/v1/jobs/batch" } else { "/v1/jobs" })?;
        let mut plan = Self {
            topic: topic.to_string(),
            body,
            delay_ms,
            batch: batch.max(1),
            priority: None,
            trace: None,
            uri,
            full: Bytes::new(),
        };
        plan.full = plan.request_body(plan.batch);
        Ok(plan)
    }

    /// Pushes every job with `priority` (`None`: without one).
    pub fn priority(mut self, priority: Option<u32>) -> Self {
        self.priority = priority;
        self.full = self.request_body(self.batch);
        self
    }

    /// Pushes every job with `traceparent` (and `tracestate`) as fields (`None`: without).
    pub fn trace(mut self, traceparent: Option<String>, tracestate: Option<String>) -> Self {
        self.trace = traceparent.map(|p| (p, tracestate));
        self.full = self.request_body(self.batch);
        self
    }

    /// The request body for `n` jobs (1 ≤ n ≤ batch): a single job object
    /// when not batching, else `{"jobs":[…]}`.
    pub fn request_body(&self, n: usize) -> Bytes {
        self.request_body_with(&vec![None; n])
    }

    /// The request body for jobs with these ids (`None`: the server makes one).
    fn request_body_with(&self, ids: &[Option<String>]) -> Bytes {
        let jobs: Vec<PushRequest<&RawValue>> = ids
            .iter()
            .map(|id| {
                let mut job = PushRequest::new(self.topic.as_str(), &*self.body).delay_ms(self.delay_ms);
                if let Some(p) = self.priority {
                    job = job.priority(p);
                }
                if let Some((parent, state)) = &self.trace {
                    job = job.trace(parent.as_str(), state.clone());
                }
                match id {
                    Some(id) => job.id(id.as_str()),
                    None => job,
                }
            })
            .collect();
        let json = if self.batch == 1 {
            serde_json::to_vec(&jobs[0])
        } else {
            serde_json::to_vec(&BatchRequest { jobs })
        };
        Bytes::from(json.expect("a push request always serializes"))
    }

    /// The ids of the jobs of an answer that dq could not tell were stored (503 with an `id`).
    fn unknown_ids(&self, reply: &Reply) -> Vec<String> {
        let id_of = |error: &serde_json::Value| error.get("id").and_then(|i| i.as_str()).map(String::from);
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&reply.body) else {
            return Vec::new();
        };
        if self.batch == 1 {
            return v.get("error").and_then(id_of).into_iter().collect();
        }
        v.get("results")
            .and_then(|r| r.as_array())
            .map(|items| items.iter().filter_map(|i| i.get("error").and_then(id_of)).collect())
            .unwrap_or_default()
    }

    /// Pushes again, with their ids, the jobs whose first push had an unknown outcome; gives how many were
    /// then known stored (201, or 409: the first push was).
    async fn push_again(&self, conn: &mut Conn, mut ids: Vec<String>, errors: &Errors) -> u64 {
        let mut stored = 0;
        for _ in 0..SAME_ID_RETRIES {
            if ids.is_empty() {
                break;
            }
            let body = self.request_body_with(&ids.iter().cloned().map(Some).collect::<Vec<_>>());
            let Ok(reply) = conn.post_json(self.uri.clone(), body).await else {
                continue;
            };
            let statuses = item_statuses(&reply, self.batch == 1, ids.len());
            let mut again = Vec::new();
            for (id, status) in ids.into_iter().zip(statuses) {
                match status {
                    200 | 201 | 409 => stored += 1,
                    503 => again.push(id),
                    _ => errors.add(1, || format!("pushing again with id {id}: {}", reply.describe())),
                }
            }
            ids = again;
        }
        if !ids.is_empty() {
            errors.add(ids.len() as u64, || {
                format!("outcome still unknown after pushing again with id {}", ids[0])
            });
        }
        stored
    }

    /// Counts the jobs of an answer that were pushed; reports the rest to `errors`.
    fn check(&self, n: usize, reply: &Reply, errors: &Errors) -> u64 {
        if !reply.is_success() {
            errors.add(n as u64, || reply.describe());
            return 0;
        }
        if self.batch == 1 {
            return 1;
        }
        match count_batch_results(&reply.body, n) {
            Ok((ok, 0)) => ok,
            Ok((ok, failed)) => {
                errors.add(failed, || {
                    format!("batch item failed: {}", first_item_error(&reply.body))
                });
                ok
            }
            Err(e) => {
                errors.add(n as u64, || format!("{e:#}: {}", reply.describe()));
                0
            }
        }
    }
}

/// The HTTP status each job of an answer stands for: the answer's own for a single push, each item's
/// (200, or its error's code as a status) for a batch.
fn item_statuses(reply: &Reply, single: bool, n: usize) -> Vec<u16> {
    if single {
        return vec![reply.status.as_u16()];
    }
    let code_status = |code: &str| match code {
        "conflict" => 409,
        "unavailable" => 503,
        "invalid_argument" => 400,
        _ => 500,
    };
    batch_items(&reply.body)
        .map(|items| {
            items
                .iter()
                .map(
                    |i| match i.get("error").and_then(|e| e.get("code")).and_then(|c| c.as_str()) {
                        Some(code) => code_status(code),
                        None => 200,
                    },
                )
                .collect()
        })
        .unwrap_or_else(|| vec![reply.status.as_u16(); n])
}

/// The entries of a batch answer (dq-api's `BatchAnswer`), read as JSON rather than as that type: an entry
/// counts as failed when it has an `error`, whatever else it holds or lacks, so that an answer this
/// tool does not fully know still counts.
fn batch_items(body: &[u8]) -> Option<Vec<serde_json::Value>> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut answer)) => match answer.remove("results") {
            Some(serde_json::Value::Array(items)) => Some(items),
            _ => None,
        },
        _ => None,
    }
}

/// Parses a batch answer for `n` jobs into `(pushed, failed)`.
pub fn count_batch_results(body: &[u8], n: usize) -> Result<(u64, u64)> {
    let results = batch_items(body).context("unreadable batch answer")?;
    if results.len() != n {
        bail!("batch answer has {} results for {n} jobs", results.len());
    }
    let failed = results.iter().filter(|r| r.get("error").is_some()).count() as u64;
    Ok((n as u64 - failed, failed))
}

/// The first item error of a batch answer, as JSON text.
pub fn first_item_error(body: &[u8]) -> String {
    batch_items(body)
        .and_then(|items| {
            items
                .into_iter()
                .find_map(|mut i| i.get_mut("error").map(serde_json::Value::take))
        })
        .map_or_else(|| "?".to_string(), |e| e.to_string())
}

/// What one push phase did.
pub struct PhaseResult {
    /// The connections, handed back for the next phase.
    pub conns: Vec<Conn>,
    /// Jobs pushed.
    pub jobs_ok: u64,
    /// Wall time of the phase.
    pub elapsed: Duration,
    /// Request latencies of all tasks.
    pub hist: Hist,
    /// Errors of all tasks.
    pub errors: Errors,
}

/// Pushes `total` jobs over `conns`, one task per connection, and times it.
pub async fn push_phase(conns: Vec<Conn>, plan: &Arc<PushPlan>, total: u64) -> Result<PhaseResult> {
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            tokio::spawn(push_task(
                conn,
                Arc::clone(plan),
                total,
                Arc::clone(&next),
                Arc::clone(&errors),
            ))
        })
        .collect();
    let mut conns = Vec::with_capacity(tasks.len());
    let mut hists = Vec::with_capacity(tasks.len());
    let mut jobs_ok = 0;
    for task in tasks {
        let (conn, hist, ok) = task.await.context("a push task panicked")?;
        conns.push(conn);
        hists.push(hist);
        jobs_ok += ok;
    }
    let elapsed = start.elapsed();
    let errors = Arc::into_inner(errors).expect("all tasks are done");
    Ok(PhaseResult {
        conns,
        jobs_ok,
        elapsed,
        hist: report::merge(&hists),
        errors,
    })
}

/// One connection's share: claims jobs until `total` are claimed.
async fn push_task(
    mut conn: Conn,
    plan: Arc<PushPlan>,
    total: u64,
    next: Arc<AtomicU64>,
    errors: Arc<Errors>,
) -> (Conn, Hist, u64) {
    let mut hist = report::new_hist();
    let mut ok = 0;
    let mut transport_failures = 0;
    let batch = plan.batch as u64;
    loop {
        let first = next.fetch_add(batch, Ordering::Relaxed);
        if first >= total {
            break;
        }
        let n = batch.min(total - first) as usize;
        let body = if n == plan.batch {
            plan.full.clone()
        } else {
            plan.request_body(n)
        };
        let t0 = Instant::now();
        match conn.post_json(plan.uri.clone(), body).await {
            Ok(reply) => {
                report::record(&mut hist, t0.elapsed());
                transport_failures = 0;
                let unknown = plan.unknown_ids(&reply);
                if unknown.is_empty() {
                    ok += plan.check(n, &reply, &errors);
                } else {
                    // The other jobs of a batch were stored, or failed for good.
                    if plan.batch > 1 {
                        let stored = count_batch_results(&reply.body, n).map_or(0, |(stored, _)| stored);
                        let failed = (n as u64).saturating_sub(stored + unknown.len() as u64);
                        if failed > 0 {
                            errors.add(failed, || {
                                format!("batch item failed: {}", first_item_error(&reply.body))
                            });
                        }
                        ok += stored;
                    }
                    ok += plan.push_again(&mut conn, unknown, &errors).await;
                }
            }
            Err(e) => {
                errors.add(n as u64, || format!("{e:#}"));
                transport_failures += 1;
                if transport_failures >= MAX_TRANSPORT_FAILURES {
                    break;
                }
            }
        }
    }
    (conn, hist, ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hyper::StatusCode;
    use serde_json::Value;

    #[test]
    fn bodies_have_the_exact_size() {
        for size in [2, 3, 64, 1000, 65_536] {
            let body = body_of_size(size);
            assert_eq!(body.len(), size);
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v.as_str().unwrap().len(), size - 2);
            // Re-serializing gives the same text, so the server stores `size` bytes.
            assert_eq!(serde_json::to_string(&v).unwrap(), body);
        }
    }

    fn plan(batch: usize) -> PushPlan {
        let target = Target::parse("http://127.0.0.1:6789").unwrap();
        PushPlan::new(&target, "bench", body_of_size(6), 3_600_000, batch).unwrap()
    }

    #[test]
    fn single_push_request() {
        let p = plan(1);
        assert_eq!(p.uri, "/v1/jobs");
        assert_eq!(
            p.full,
            Bytes::from_static(br#"{"topic":"bench","body":"xxxx","delay_ms":3600000}"#)
        );
    }

    #[test]
    fn batch_push_requests() {
        let p = plan(3);
        assert_eq!(p.uri, "/v1/jobs/batch");
        let v: Value = serde_json::from_slice(&p.full).unwrap();
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[2]["body"], "xxxx");
        assert_eq!(jobs[2]["delay_ms"], 3_600_000);
        let v: Value = serde_json::from_slice(&p.request_body(2)).unwrap();
        assert_eq!(v["jobs"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn topic_is_escaped() {
        let target = Target::parse("http://127.0.0.1:6789").unwrap();
        let p = PushPlan::new(&target, "a\"b", "1".into(), 0, 1).unwrap();
        let v: Value = serde_json::from_slice(&p.full).unwrap();
        assert_eq!(v["topic"], "a\"b");
    }

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn checks_answers() {
        let errors = Errors::default();
        let single = plan(1);
        assert_eq!(single.check(1, &reply(201, "{}"), &errors), 1);
        assert_eq!(errors.count(), 0);
        assert_eq!(single.check(1, &reply(400, r#"{"error":"bad"}"#), &errors), 0);
        assert_eq!(errors.count(), 1);
        assert_eq!(errors.first(), Some(r#"HTTP 400 Bad Request: {"error":"bad"}"#));

        let errors = Errors::default();
        let batch = plan(3);
        let body = r#"{"results":[{"id":"a","state":"delayed","run_at":1},
            {"error":{"code":"invalid","message":"no"}},
            {"id":"c","state":"delayed","run_at":1}]}"#;
        assert_eq!(batch.check(3, &reply(200, body), &errors), 2);
        assert_eq!(errors.count(), 1);
        assert_eq!(
            errors.first(),
            Some(r#"batch item failed: {"code":"invalid","message":"no"}"#)
        );
        // Wrong number of results: every job of the request counts as failed.
        assert_eq!(batch.check(2, &reply(200, body), &errors), 0);
        assert_eq!(errors.count(), 3);
        assert_eq!(batch.check(3, &reply(503, ""), &errors), 0);
        assert_eq!(errors.count(), 6);
    }
}
