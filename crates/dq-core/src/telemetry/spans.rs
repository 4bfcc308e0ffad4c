//! dq's spans in a job's trace, one kind per binary, named and described the same way everywhere:
//!
//! - `push <topic>` (dq-server, kind server): the push, a child of the producer's span. Its context
//!   (same trace, this span as parent) is what the job stores, so what follows hangs from it.
//! - `promote <topic>` (dq-timer, internal): the job moved from its delay to ready, or handed to a
//!   waiting worker; a child of the stored context.
//! - `deliver <topic>` (dq-consumer, client): one delivery attempt, a child of the stored context; the
//!   callback's `traceparent` names this span, so the receiver's own spans hang from it.
//!
//! So a trace reads producer → push → promote, and → each delivery → the callback's work. Spans are made
//! only for jobs with a trace context whose `sampled` flag is set, and only when this process exports
//! ([`super::otlp`]): a job without one, an unsampled trace, or a process without an endpoint makes
//! none. (A span of every push would flood a collector with roots nobody asked for, and cost each push
//! the work; a producer that wants a job in a trace says so with its `traceparent`.)

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{Context, KeyValue, trace::TraceContextExt as _};

use super::otlp;
use crate::trace::TraceContext;

/// The job's id.
pub const JOB_ID: &str = "dq.job.id";
/// The job's topic.
pub const TOPIC: &str = "dq.topic";
/// Which delivery this is (1 for the first).
pub const ATTEMPT: &str = "dq.attempt";
/// How a delivery ended: `ok`, or why it failed (`http_error`, `timeout`, …).
pub const OUTCOME: &str = "dq.outcome";
/// How late the job was promoted (now − due), ms.
pub const LATENESS_MS: &str = "dq.lateness_ms";
/// The promotion handed the job, reserved, to a waiting worker.
pub const HANDOFF: &str = "dq.handoff";
/// The callback's HTTP status, or the push's answer.
pub const HTTP_STATUS: &str = "http.response.status_code";

/// One of dq's spans in a job's trace; exported when it ends (ended on drop too).
pub struct JobSpan {
    /// The span.
    span: opentelemetry_sdk::trace::Span,
    /// The job's trace with this span as parent.
    context: TraceContext,
}

impl std::fmt::Debug for JobSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSpan")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl JobSpan {
    /// Starts span `name` of `kind` as a child of `parent` (at `start`, or now), when this process
    /// exports spans and `parent` is sampled.
    pub fn start(
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: &TraceContext,
        start: Option<SystemTime>,
        attributes: Vec<KeyValue>,
    ) -> Option<JobSpan> {
        let tracer = otlp::tracer()?;
        if !parent.sampled() {
            return None;
        }
        let cx = Context::new().with_remote_span_context(parent.span_context());
        let mut builder = tracer.span_builder(name).with_kind(kind).with_attributes(attributes);
        if let Some(at) = start {
            builder = builder.with_start_time(at);
        }
        let span = builder.start_with_context(tracer, &cx);
        let sc = span.span_context();
        if !sc.is_sampled() {
            return None;
        }
        let context = parent.child(sc.span_id());
        Some(JobSpan { span, context })
    }

    /// The job's trace with this span as parent: what the push stores, what a delivery sends.
    pub fn context(&self) -> &TraceContext {
        &self.context
    }

    /// Sets attribute `key` (one of this module's names) to `value` (a string, an integer, a bool).
    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.span.set_attribute(KeyValue::new(key, value));
    }

    /// Marks the span failed, with why.
    pub fn fail(&mut self, why: impl Into<Cow<'static, str>>) {
        self.span.set_status(Status::error(why));
    }

    /// Ends the span now.
    pub fn end(mut self) {
        self.span.end();
    }

    /// Ends the span at `at`.
    pub fn end_at(mut self, at: SystemTime) {
        self.span.end_with_timestamp(at);
    }
}

/// Whether this process makes spans (it exports them): the scripts hand back what a span needs only then.
pub fn exporting() -> bool {
    otlp::tracer().is_some()
}

/// dq-server's span of a push of `topic` in `trace` (the job's id is set once known).
pub fn push(topic: &str, trace: &TraceContext) -> Option<JobSpan> {
    // Checked before the name and attributes are made: a traced push costs nothing more without export.
    if !exporting() {
        return None;
    }
    JobSpan::start(
        format!("push {topic}"),
        SpanKind::Server,
        trace,
        None,
        vec![KeyValue::new(TOPIC, topic.to_string())],
    )
}

/// dq-timer's span of a promotion of job `id` of `topic` (in `trace`) that ran from `start` to `end`.
pub fn promotion(
    id: &str,
    topic: &str,
    trace: &TraceContext,
    lateness_ms: i64,
    handed: bool,
    start: SystemTime,
    end: SystemTime,
) {
    if !exporting() {
        return;
    }
    let attributes = vec![
        KeyValue::new(JOB_ID, id.to_string()),
        KeyValue::new(TOPIC, topic.to_string()),
        KeyValue::new(LATENESS_MS, lateness_ms),
        KeyValue::new(HANDOFF, handed),
    ];
    if let Some(span) = JobSpan::start(
        format!("promote {topic}"),
        SpanKind::Internal,
        trace,
        Some(start),
        attributes,
    ) {
        span.end_at(end);
    }
}

/// dq-consumer's span of delivery `attempt` of job `id` of `topic` (in `trace`); its context is the
/// callback's `traceparent`.
pub fn delivery(id: &str, topic: &str, attempt: u32, trace: &TraceContext) -> Option<JobSpan> {
    if !exporting() {
        return None;
    }
    JobSpan::start(
        format!("deliver {topic}"),
        SpanKind::Client,
        trace,
        None,
        vec![
            KeyValue::new(JOB_ID, id.to_string()),
            KeyValue::new(TOPIC, topic.to_string()),
            KeyValue::new(ATTEMPT, i64::from(attempt)),
        ],
    )
}
